// The FUSE low-level operations of grantfs-mount: each one turns a kernel
// request into one FileSystem call and exactly one fuse_reply_*. Errors
// travel as errno statuses and become a FUSE error in ReplyError().
#ifndef GRANTFS_CLIENT_FUSE_OPS_H_
#define GRANTFS_CLIENT_FUSE_OPS_H_

#define FUSE_USE_VERSION 312
#include <fuse3/fuse_lowlevel.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "client/filesystem.h"
#include "common/metrics.h"

namespace grantfs {

struct FuseOptions {
  // How long the kernel may trust attributes and names (positive and
  // negative) without asking again. Changes made on other nodes are pushed
  // at once through invalidations; this is the bound if a push is lost.
  double attr_timeout_s = 1.0;
  double entry_timeout_s = 1.0;
};

// Owns nothing but the lock-owner bookkeeping; `fs` must outlive it.
// Thread-safe: FUSE calls the ops from several threads.
class FuseAdapter : public Invalidator {
 public:
  FuseAdapter(FileSystem* fs, const FuseOptions& options);

  // The operation table; each op finds this adapter through fuse_req_userdata.
  static const fuse_lowlevel_ops* Ops();

  void set_session(fuse_session* se) { session_ = se; }
  FileSystem* fs() { return fs_; }
  // Node ids are the server's inode numbers, but for the mount's root: the
  // kernel's node 1 is FileSystem::root_ino (the volume's root, 1, or the
  // directory the mount's path names). ServerIno gives 0 (refused by the
  // server, EINVAL) for the root's own inode number, which the kernel is
  // never handed.
  uint64_t ServerIno(uint64_t node) const;
  uint64_t KernelNode(uint64_t ino) const;

  // Metrics (--metrics_addr): once enabled, every op is timed by name.
  // Call before the mount serves.
  void EnableMetrics();
  // The histogram of op `name` (a literal); null when metrics are off.
  LatencyHistogram* Timing(const char* name) { return ops_ ? ops_->For(name) : nullptr; }
  // The mount's metrics (docs/metrics.md): its ops, and what its cache,
  // grant and kernel hold now.
  std::string RenderMetrics();
  const FuseOptions& options() const { return options_; }

  // Invalidator: forwards a change seen on another node to the kernel.
  void InvalidateInode(uint64_t ino, bool data) override;
  void InvalidateEntry(uint64_t parent, const std::string& name) override;
  // FUSE_NOTIFY_INC_EPOCH (Linux 6.16, FUSE 7.44): every dentry of the mount
  // is revalidated (a lookup) before its next use; lock-free in the kernel.
  void InvalidateAllNames() override;
  // Whether the kernel takes InvalidateAllNames (tried once, at the first
  // call after the mount is up): then names under a lease are cached by the
  // kernel for the lease (EntryTimeout).
  bool KernelDropsAllNames();

  // The kernel's cache of directory listings (FOPEN_CACHE_DIR). Sets the
  // flags of an opendir of `dir`: the kernel may keep and use its copy of
  // the listing only while the mount holds the complete listing under a
  // lease (LeaseCache::ListingEpoch), and only a copy made under that same
  // lease. A copy that may be older (made under an earlier lease: a late
  // readdir reply may have refilled it after a recall) is dropped first.
  void OpenDir(uint64_t dir, fuse_file_info* fi) ABSL_LOCKS_EXCLUDED(mu_);
  // Listings of directories granted to this mount (docs/namespace-grants.md):
  // an opendir of one gets a handle (fi->fh) and the kernel keeps no copy.
  // A readdir of it from offset 0 takes the mount's own listing whole
  // (FileSystem::LocalListing) and serves every later page of that pass
  // from it, whatever happens to the grant meanwhile (a listing may be a
  // snapshot: names added or removed during it may or may not show); when
  // there is none, the pass goes to the server as for any directory.
  // Returns the page after `cookie`, or nullptr when the server serves it.
  std::shared_ptr<const proto::ReadDirReply> OwnListing(const Creds& c, uint64_t dir,
                                                        uint64_t handle, uint64_t cookie)
      ABSL_LOCKS_EXCLUDED(mu_);
  void ReleaseDir(uint64_t handle) ABSL_LOCKS_EXCLUDED(mu_);
  // Invalidator: the kernel's copy goes, with its pages. (When every lease
  // is dropped nothing is done here: the next opendir of each directory
  // comes under a new epoch, and the kernel, whose attributes of every
  // leased directory are dropped then, discards a copy whose directory's
  // mtime changed when a rewound stream reads it again.)
  void InvalidateListing(uint64_t dir) override ABSL_LOCKS_EXCLUDED(mu_);
  // The kernel may have forgotten `ino` (and its pages with it): its
  // entries here go if the kernel holds no reference to it now.
  void Forgotten(uint64_t ino) ABSL_LOCKS_EXCLUDED(mu_);

  // The kernel's cache of file data across opens (FOPEN_KEEP_CACHE).
  // Whether an open of `ino` with `flags` may keep the pages earlier opens
  // cached: only while the mount holds the attribute lease of `ino`
  // without a break since the open that last dropped them
  // (LeaseCache::DataStamp: a change made on another node recalls the
  // lease first, and the next open drops the pages), and not for O_TRUNC.
  // An open that drops them starts a new stamp, unless a read of `ino` is
  // in flight (it may carry data older than a change: the next open drops
  // its pages again). The mount's own writes go through the kernel's
  // pages, which stay what the server has plus them.
  bool KeepPages(uint64_t ino, int flags) ABSL_LOCKS_EXCLUDED(mu_);
  // A read of `ino` for the kernel starts, and ends once its reply was
  // handed to the kernel.
  void ReadBegins(uint64_t ino) ABSL_LOCKS_EXCLUDED(mu_);
  void ReadEnds(uint64_t ino) ABSL_LOCKS_EXCLUDED(mu_);

  // POSIX locks taken through this mount, so close releases only when needed.
  void NoteLockOwner(uint64_t ino, uint64_t owner);
  bool TakeLockOwner(uint64_t ino, uint64_t owner);

 private:
  FileSystem* const fs_;
  const FuseOptions options_;
  std::unique_ptr<OpLatencies> ops_;  // null: metrics off
  std::atomic<fuse_session*> session_{nullptr};
  // KernelDropsAllNames: -1 not tried yet, 0 no, 1 yes.
  std::atomic<int> epochs_{-1};

  // Lock order: mu_, then InodeTable's (Forgotten); otherwise a leaf
  // (filesystem.h).
  absl::Mutex mu_;
  std::set<std::pair<uint64_t, uint64_t>> lock_owners_ ABSL_GUARDED_BY(mu_);
  // Directories whose listing the kernel was let keep, and the
  // ListingEpoch it was let keep it under. An entry stays after its lease
  // ends, so that the next opendir drops what the kernel kept; it goes
  // when the kernel forgets the directory.
  absl::flat_hash_map<uint64_t, uint64_t> listings_ ABSL_GUARDED_BY(mu_);
  // OwnListing's passes by handle (null: the server serves this pass).
  absl::flat_hash_map<uint64_t, std::shared_ptr<const proto::ReadDirReply>> own_listings_
      ABSL_GUARDED_BY(mu_);
  uint64_t next_dir_handle_ ABSL_GUARDED_BY(mu_) = 0;
  // Files whose pages the kernel may keep, and the DataStamp they were
  // cached under (KeepPages); reads in flight per inode.
  absl::flat_hash_map<uint64_t, uint64_t> pages_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, int> reading_ ABSL_GUARDED_BY(mu_);
};

}  // namespace grantfs

#endif  // GRANTFS_CLIENT_FUSE_OPS_H_
