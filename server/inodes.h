// Inodes: attributes (stat, chmod/chown/utimes, the metadata half of
// truncate), the permission checks of open and truncate, and extended
// attributes, on the metadata store (server/meta_store.h).
//
// Thread-safe (each change is one MetaStore::Mutate; reads take no lock).
// Errors are errno statuses (common/errno_status.h).
#ifndef GRANTFS_SERVER_INODES_H_
#define GRANTFS_SERVER_INODES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/grantfs.pb.h"
#include "proto/store.pb.h"
#include "server/meta_store.h"
#include "server/permissions.h"

namespace grantfs {

// The attributes of `ino` that a client sees, from its record.
proto::Attr ToAttr(uint64_t ino, const proto::InodeRecord& rec);

class Inodes {
 public:
  // `store` is not owned and outlives this. Reads every xattr's key once
  // (see HasXattrs), before anything else uses the store.
  explicit Inodes(MetaStore* store);
  Inodes(const Inodes&) = delete;
  Inodes& operator=(const Inodes&) = delete;

  // --- reads ---------------------------------------------------------------
  absl::StatusOr<proto::InodeRecord> GetInode(uint64_t ino);
  absl::StatusOr<proto::Attr> GetAttr(uint64_t ino);
  absl::StatusOr<std::string> GetXattr(const Caller& caller, uint64_t ino, const std::string& name);
  absl::StatusOr<std::vector<std::string>> ListXattr(const Caller& caller, uint64_t ino);
  // Whether `ino` has any xattr (of any name, trusted.* too). Asked for
  // every entry of a listing (a lease says a file has none): an inode no
  // xattr was ever set on is answered from memory, others by a scan.
  absl::StatusOr<bool> HasXattrs(uint64_t ino) ABSL_LOCKS_EXCLUDED(xattr_mu_);
  // Checks that `caller` may open `ino` with open(2) `flags`; fresh attrs.
  // `created`: the open of open(O_CREAT) that made the file, which needs no
  // permission (the mode applies to later opens) when `caller` owns it.
  absl::StatusOr<proto::Attr> CheckOpen(const Caller& caller, uint64_t ino, uint32_t flags,
                                        bool created = false);
  // The permission and type checks of a size change, without changing anything.
  absl::StatusOr<proto::InodeRecord> CheckTruncate(const Caller& caller, uint64_t ino,
                                                   uint64_t size, bool opened = false);

  // --- changes -------------------------------------------------------------
  // `tag` (every change below): the request it is made for, or null
  // (MetaStore::Mutate).
  // chmod/chown/utimes and the metadata half of truncate. For a size change
  // the caller has already cut the chunk files (see Volume); the blocks past
  // the new size are freed (server/allocator.h). `opened`: the change comes
  // through a handle the caller's mount holds open for writing (ftruncate),
  // so a size change needs no write permission now.
  absl::StatusOr<proto::Attr> SetAttr(const Caller& caller, const proto::SetAttrRequest& req,
                                      bool opened = false, RequestTag* tag = nullptr);
  absl::Status SetXattr(const Caller& caller, uint64_t ino, const std::string& name,
                        const std::string& value, uint32_t flags, RequestTag* tag = nullptr);
  absl::Status RemoveXattr(const Caller& caller, uint64_t ino, const std::string& name,
                           RequestTag* tag = nullptr);

  // How many inodes the xattr index holds, or nullopt when it is off.
  std::optional<size_t> XattrIndexSize() ABSL_LOCKS_EXCLUDED(xattr_mu_);

  // Past this many inodes the index is dropped and HasXattrs always scans.
  static constexpr size_t kMaxXattrIndex = size_t{1} << 20;

 private:
  // Adds `ino` to the index: called inside the change that sets an xattr,
  // before it commits, so an inode missing from it has none.
  void MayHaveXattrs(uint64_t ino) ABSL_LOCKS_EXCLUDED(xattr_mu_);

  MetaStore* const store_;
  absl::Mutex xattr_mu_;
  // Every inode with an xattr when the store was opened, and every one an
  // xattr was set on since (never removed: a scan answers for them).
  absl::flat_hash_set<uint64_t> may_have_xattrs_ ABSL_GUARDED_BY(xattr_mu_);
  // False when the first read failed or the index grew past kMaxXattrIndex.
  bool xattr_index_ok_ ABSL_GUARDED_BY(xattr_mu_) = false;
};

}  // namespace grantfs

#endif  // GRANTFS_SERVER_INODES_H_
