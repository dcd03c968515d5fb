// The mount's open files as the server must know them: one handle per
// open, and the reclaim that names them to a server that does not know them
// (a restarted server, or a replica that took over).
//
// A reclaim must not lose an open, nor bring back one already released
// (the server would count that open for good, and never free the file).
// No lock is held across an RPC: instead, each open is tagged with the
// table's generation when its Open RPC starts, and each reclaim starts a
// new generation.
//  - Opens begun under an older generation are waited for (BeginReclaim)
//    and named: their RPC may have gone to the server that is gone.
//  - An open begun under the reclaim's own generation that ends after the
//    handles were named is not in that reclaim: NeedsReclaim() says so, and
//    the next reclaim names it (once).
//  - A handle released while a reclaim that names it is in flight may have
//    reached the server before the reclaim did: EndReclaim() returns it, and
//    the caller sends its Release again (a Release the server has seen
//    already changes nothing).
// Open and Release never wait for a reclaim.
//
// Thread-safe. One reclaim at a time (the session's heartbeat thread).
#ifndef GRANTFS_CLIENT_OPEN_HANDLES_H_
#define GRANTFS_CLIENT_OPEN_HANDLES_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"

namespace grantfs {

class OpenHandleTable {
 public:
  // (ino, handle) pairs.
  using Opens = std::vector<std::pair<uint64_t, uint64_t>>;

  // A new handle, unique in the mount, for an open of `ino` whose Open RPC
  // is about to be sent. Pending until EndOpen.
  uint64_t BeginOpen(uint64_t ino) ABSL_LOCKS_EXCLUDED(mu_);
  // The Open RPC of `handle` ended: the handle is open when `ok`, forgotten
  // when not.
  void EndOpen(uint64_t handle, bool ok) ABSL_LOCKS_EXCLUDED(mu_);
  // `handle` is closed; called before its Release RPC is sent.
  void Release(uint64_t handle) ABSL_LOCKS_EXCLUDED(mu_);

  // Starts a reclaim: a new generation. Waits until no open begun under an
  // older generation is pending, then returns every open handle.
  Opens BeginReclaim() ABSL_LOCKS_EXCLUDED(mu_);
  // The reclaim's RPC ended (`ok`: the server took it). Returns the handles
  // it named that were released meanwhile: their Release must be sent again.
  Opens EndReclaim(bool ok) ABSL_LOCKS_EXCLUDED(mu_);
  // True when an open handle may be unknown to the server the last reclaim
  // went to: one whose open ended after that reclaim named its handles, or
  // when that reclaim failed.
  bool NeedsReclaim() ABSL_LOCKS_EXCLUDED(mu_);

  uint64_t generation() ABSL_LOCKS_EXCLUDED(mu_);
  // Open handles (not pending ones).
  size_t open_count() ABSL_LOCKS_EXCLUDED(mu_);
  // Whether any handle of `ino` is open or being opened.
  bool IsOpen(uint64_t ino) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Entry {
    uint64_t ino = 0;
    uint64_t generation = 0;  // when its Open RPC started
    bool open = false;        // false while the Open RPC is in flight
  };

  // A leaf: nothing else is locked while it is held, and it is never held
  // across an RPC (BeginReclaim releases it while it waits).
  absl::Mutex mu_;
  uint64_t next_handle_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<uint64_t, Entry> handles_ ABSL_GUARDED_BY(mu_);
  // Pending opens of a generation older than generation_.
  size_t older_pending_ ABSL_GUARDED_BY(mu_) = 0;
  // Between BeginReclaim's return and EndReclaim: the handles it named.
  bool reclaiming_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_set<uint64_t> named_ ABSL_GUARDED_BY(mu_);
  Opens release_again_ ABSL_GUARDED_BY(mu_);
  bool needs_reclaim_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace grantfs

#endif  // GRANTFS_CLIENT_OPEN_HANDLES_H_
