// What the mount may answer without asking the server: attributes and
// names under metadata leases (server/lease_table.h, docs/architecture.md
// "Metadata leases").
//
// Two kinds, as on the server. Attributes of an inode. The names of a
// directory: single names looked up (there, or "not there"), and the whole
// listing once every page of a readdir was leased. Everything here is
// valid while the session's leases are: until `end` (counted from the
// heartbeat or subscription the mount sent last that the server renewed),
// and only for what was granted after `mark` (the last time the mount
// dropped everything: a stream that broke, a renewal refused).
//
// A lease comes with a reply. Whether it may be kept depends on what
// happened while the request was out: a Ticket is taken before the request
// is sent; a recall or an own change of the same key since then, or a drop
// of everything, and the reply's lease is not kept (the last change of each
// key is remembered by number).
//
// Own changes: the server keeps this mount's leases on what it changed
// itself (it is not recalled from the origin), so the mount applies its own
// changes here: a name added or removed in a directory it holds, attributes
// that changed dropped.
//
// Memory: at most `max_attrs` attributes and `max_names` names; past that,
// the oldest directory or inode is dropped (the server's recall of it then
// costs an ack). Thread-safe; mu_ is a leaf.
#ifndef GRANTFS_CLIENT_LEASE_CACHE_H_
#define GRANTFS_CLIENT_LEASE_CACHE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "proto/grantfs.pb.h"

namespace grantfs {

struct LeaseCacheOptions {
  Clock* clock = Clock::Monotonic();
  size_t max_attrs = 1u << 20;
  size_t max_names = 4u << 20;
  // Keys whose last change is remembered; past it, every ticket in flight
  // is refused once.
  size_t max_changed = 1u << 20;
  // Listings being read page by page at once; past it the oldest is given
  // up.
  size_t max_pending = 64;
};

class LeaseCache {
 public:
  explicit LeaseCache(const LeaseCacheOptions& options = {});

  enum class Kind : uint8_t { kAttr, kDir };
  struct Key {
    Kind kind;
    uint64_t ino;
  };
  struct Ticket {
    uint64_t seq = 0;  // changes numbered so far
  };
  // Taken just before a request whose reply may carry a lease.
  Ticket Take() ABSL_LOCKS_EXCLUDED(mu_);

  // --- the session -----------------------------------------------------
  // How long a renewal lasts, as the server counts it, less a margin for
  // the two clocks' rates.
  void SetTerm(absl::Duration term) ABSL_LOCKS_EXCLUDED(mu_);
  // The server renewed the leases at a heartbeat (or subscription) sent at
  // `sent`.
  // `term`: the renewing server's term (HeartbeatReply.meta_lease_ms),
  // which replaces the one set before; counted with it atomically.
  void Renewed(absl::Time sent, std::optional<absl::Duration> term = std::nullopt)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A new recall stream is up (its first batch arrived): leases of requests
  // sent from now on are recalled on it. `sent`: when the subscription was
  // sent (it renews the leases).
  void Subscribed(absl::Time sent, std::optional<absl::Duration> term = std::nullopt)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Everything is dropped: the stream broke (`stream_down`: no lease is
  // taken until Subscribed), or a renewal was refused. Returns the inodes
  // whose attributes were cached (the kernel's copies go too).
  std::vector<uint64_t> DropAll(bool stream_down) ABSL_LOCKS_EXCLUDED(mu_);

  // --- answers -----------------------------------------------------------
  // Cached attributes of `ino`; `left` gets how long they stay valid.
  std::optional<proto::Attr> Attr(uint64_t ino, absl::Duration* left = nullptr)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Whether `ino` is known to have no xattr `name`: remembered under its
  // attribute lease (a change of its xattrs anywhere recalls that), and kept
  // across this mount's own writes (which change no xattr).
  // Also true when the leased attributes say the inode has no xattrs at all
  // (Attr.no_xattrs), for any name outside "user." (whose answer the server
  // gives only to callers that may read the file).
  bool XattrAbsent(uint64_t ino, const std::string& name) ABSL_LOCKS_EXCLUDED(mu_);
  // The leased attributes of `ino` say it has no xattrs (Attr.no_xattrs).
  bool NoXattrs(uint64_t ino) ABSL_LOCKS_EXCLUDED(mu_);
  // Whether the server lists this mount as holding the attribute lease of
  // `ino` (its attributes may have been dropped here by an own change).
  bool HoldsAttrLease(uint64_t ino) ABSL_LOCKS_EXCLUDED(mu_);
  // While this mount holds the attribute lease of `ino` (HoldsAttrLease):
  // a number that changes when the lease is recalled (a change made on
  // another node) or everything is dropped, so that two equal numbers
  // mean no other node changed `ino` in between. 0 when not held.
  uint64_t DataStamp(uint64_t ino) ABSL_LOCKS_EXCLUDED(mu_);
  // Bytes this mount wrote to `ino` may not have reached the server (a
  // flush failed): DataStamp changes, as after a recall.
  void DataUnsure(uint64_t ino) ABSL_LOCKS_EXCLUDED(mu_);
  // The server said `ino` has no xattr `name` to a request sent after `t`,
  // while HoldsAttrLease.
  void PutXattrAbsent(const Ticket& t, uint64_t ino, const std::string& name)
      ABSL_LOCKS_EXCLUDED(mu_);
  // This mount changed the xattrs of `ino`.
  void XattrsChanged(uint64_t ino) ABSL_LOCKS_EXCLUDED(mu_);
  enum class Name { kUnknown, kAbsent, kPresent };
  // `name` in `dir`: kPresent sets `*ino`.
  Name Lookup(uint64_t dir, const std::string& name, uint64_t* ino) ABSL_LOCKS_EXCLUDED(mu_);
  // The complete listing of `dir` after `cookie` (at most `max` entries,
  // "." and ".." first as the server lists them), with the attributes of
  // every entry; false when it is not all cached, or the attributes of
  // `dir` itself are not.
  bool List(uint64_t dir, uint64_t cookie, size_t max, proto::ReadDirReply* out)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Names the lease on the complete listing of `dir` (every name, "not
  // there" for the rest), while it is valid and the attributes of `dir`
  // are leased too (as List): a number given each time the listing is
  // leased anew, never reused; 0 otherwise.
  uint64_t ListingEpoch(uint64_t dir) ABSL_LOCKS_EXCLUDED(mu_);
  // The file type (S_IFMT bits) of `ino` as attributes leased here said
  // (an inode's type never changes, and its number is never given to
  // another: kept when the attributes are dropped); 0 when not known.
  uint32_t Type(uint64_t ino) ABSL_LOCKS_EXCLUDED(mu_);
  // Every name of `dir` (with its inode) and the inode of its parent, while
  // the mount holds all its names under a lease (in no particular order:
  // the server's order of names added here is not known); false otherwise.
  bool AllNames(uint64_t dir, std::vector<std::pair<std::string, uint64_t>>* names,
                uint64_t* parent) ABSL_LOCKS_EXCLUDED(mu_);
  // Whether `dir`'s whole listing is leased (as ListingEpoch) and holds no
  // name: an rmdir of it would succeed on the server.
  bool KnownEmpty(uint64_t dir) ABSL_LOCKS_EXCLUDED(mu_);

  // --- replies -----------------------------------------------------------
  // Each keeps what a reply leased, unless the ticket says it may be stale.
  // `own`: the reply to this mount's own change of it (own changes since
  // the ticket do not count).
  void PutAttr(const Ticket& t, const proto::Attr& attr, bool own = false) ABSL_LOCKS_EXCLUDED(mu_);
  // `ino` 0: the name is not there.
  void PutName(const Ticket& t, uint64_t dir, const std::string& name, uint64_t ino)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A new directory this mount made in `parent`: it holds no names.
  void PutEmptyDir(const Ticket& t, uint64_t dir, uint64_t parent) ABSL_LOCKS_EXCLUDED(mu_);
  // One page of a listing read from cookie 0 on with ticket `t` (the first
  // page's): when the last page came and every page was leased, the
  // listing is complete.
  void PutPage(const Ticket& t, uint64_t dir, uint64_t cookie, const proto::ReadDirReply& page)
      ABSL_LOCKS_EXCLUDED(mu_);

  // --- recalls and own changes --------------------------------------------
  // The server recalled `key`: dropped, and no reply in flight keeps it.
  void Recall(const Key& key) ABSL_LOCKS_EXCLUDED(mu_);
  // This mount changed the attributes of `ino`.
  void AttrChanged(uint64_t ino) ABSL_LOCKS_EXCLUDED(mu_);
  // This mount added or removed `name` in `dir` (the directory's attributes
  // changed too).
  void NameAdded(uint64_t dir, const std::string& name, uint64_t ino) ABSL_LOCKS_EXCLUDED(mu_);
  void NameRemoved(uint64_t dir, const std::string& name) ABSL_LOCKS_EXCLUDED(mu_);
  // Anything else that changed `dir`'s names: the listing is dropped.
  void DirChanged(uint64_t dir) ABSL_LOCKS_EXCLUDED(mu_);
  // This mount changed some inode's attributes, it does not know which (the
  // answer to a retried remove or rename): every attribute is dropped, and
  // no reply in flight keeps a lease. The server still lists the leases
  // (HoldsAttrLease) and recalls them as before.
  void DropAttrs() ABSL_LOCKS_EXCLUDED(mu_);

  // --- objects recalled too often ----------------------------------------
  // The server declined a lease on `key` because it is recalled too often
  // (AttrReply.hot, dir_hot: it stops granting it for a while). For the
  // next kFallBack the mount treats it as with leases off: the kernel may
  // cache it for the mount's timeouts, and other nodes' changes reach it as
  // pushed invalidations, not recalls (docs/architecture.md).
  static constexpr absl::Duration kFallBack = absl::Seconds(2);
  void FallBack(const Key& key) ABSL_LOCKS_EXCLUDED(mu_);
  // What is left of the lease on the names of `dir`; zero when none is held.
  absl::Duration DirLeft(uint64_t dir) ABSL_LOCKS_EXCLUDED(mu_);
  bool FallingBack(const Key& key) ABSL_LOCKS_EXCLUDED(mu_);

  struct Stats {
    uint64_t hits = 0;
    uint64_t misses = 0;
    uint64_t recalls = 0;
    uint64_t refused = 0;  // leases of replies not kept (a change overtook them)
    size_t attrs = 0;
    size_t names = 0;
  };
  Stats stats() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Entry {
    uint64_t ino = 0;     // 0: not there
    uint64_t cookie = 0;  // 0: not known (looked up, or added here)
  };
  struct Dir {
    absl::flat_hash_map<std::string, Entry> names;
    // `names` has every name of the directory (a name not in it is not
    // there).
    bool all_names = false;
    // `order` has every entry by cookie, "." and ".." too: readdir is
    // answered from it. (name, inode)
    bool ordered = false;
    std::map<uint64_t, std::pair<std::string, uint64_t>> order;
    uint64_t epoch = 0;  // ListingEpoch, set with all_names
  };
  struct Pending {  // a listing being read page by page
    Ticket ticket;
    uint64_t next_cookie = 0;
    bool leased = true;
    std::vector<std::pair<std::string, std::pair<uint64_t, uint64_t>>>
        entries;  // name, cookie, ino
  };
  using KeyId = std::pair<uint64_t, uint8_t>;  // ino, kind

  bool Valid() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The leased attributes of `ino` say it has no xattrs (NoXattrs).
  bool NoXattrsLocked(uint64_t ino) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a reply's lease on the key may be kept.
  bool Keeps(const Ticket& t, Kind kind, uint64_t ino, bool own) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A change of the key: numbered; `foreign`: a recall.
  void Note(Kind kind, uint64_t ino, bool foreign) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropDir(uint64_t dir) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // An own change of the names of `dir`: its attributes dropped, replies in
  // flight refused; returns its cached names, if any, to update.
  Dir* OwnNameChange(uint64_t dir) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Keeps the cache within its bounds.
  void Trim() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const LeaseCacheOptions options_;
  absl::Mutex mu_;
  absl::Duration term_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  absl::Time end_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool subscribed_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t seq_ ABSL_GUARDED_BY(mu_) = 1;
  // Tickets below it are refused (everything was dropped at it).
  uint64_t mark_ ABSL_GUARDED_BY(mu_) = 1;
  // Last change of each key (all; and recalls only); a key not in them
  // changed at most at floor_.
  absl::flat_hash_map<KeyId, uint64_t> changed_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<KeyId, uint64_t> recalled_ ABSL_GUARDED_BY(mu_);
  uint64_t floor_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<uint64_t, proto::Attr> attrs_ ABSL_GUARDED_BY(mu_);
  // Type(): at most max_attrs inodes; past it, forgotten.
  absl::flat_hash_map<uint64_t, uint32_t> types_ ABSL_GUARDED_BY(mu_);
  // Inodes whose attribute lease the server lists this mount for (their
  // attributes may be dropped here by an own change; the lease is not).
  absl::flat_hash_set<uint64_t> held_ ABSL_GUARDED_BY(mu_);
  // Xattr names known absent, per inode (at most kMaxAbsentXattrs each).
  absl::flat_hash_map<uint64_t, std::vector<std::string>> no_xattr_ ABSL_GUARDED_BY(mu_);
  std::deque<uint64_t> attr_order_ ABSL_GUARDED_BY(mu_);  // for Trim, oldest first
  absl::flat_hash_map<uint64_t, Dir> dirs_ ABSL_GUARDED_BY(mu_);
  uint64_t listing_epochs_ ABSL_GUARDED_BY(mu_) = 0;  // ListingEpoch numbers given
  std::deque<uint64_t> dir_order_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Pending> pending_ ABSL_GUARDED_BY(mu_);
  size_t names_ ABSL_GUARDED_BY(mu_) = 0;
  Stats stats_ ABSL_GUARDED_BY(mu_);
  // FallBack: until when each key is treated as unleased.
  absl::flat_hash_map<KeyId, absl::Time> fall_back_ ABSL_GUARDED_BY(mu_);
};

}  // namespace grantfs

#endif  // GRANTFS_CLIENT_LEASE_CACHE_H_
