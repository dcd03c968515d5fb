// Inodes: attributes (stat, chmod/chown/utimes, the metadata half of
// truncate), the permission checks of open and truncate, and extended
// attributes, on the metadata store (server/meta_store.h).
//
// Thread-safe (each change is one MetaStore::Mutate; reads take no lock).
// Errors are errno statuses (common/errno_status.h).
#ifndef GRANTFS_SERVER_INODES_H_
#define GRANTFS_SERVER_INODES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/grantfs.pb.h"
#include "proto/store.pb.h"
#include "server/meta_store.h"
#include "server/permissions.h"

namespace grantfs {

// The attributes of `ino` that a client sees, from its record.
proto::Attr ToAttr(uint64_t ino, const proto::InodeRecord& rec);

class Inodes {
 public:
  // `store` is not owned and outlives this.
  explicit Inodes(MetaStore* store) : store_(store) {}
  Inodes(const Inodes&) = delete;
  Inodes& operator=(const Inodes&) = delete;

  // --- reads ---------------------------------------------------------------
  absl::StatusOr<proto::InodeRecord> GetInode(uint64_t ino);
  absl::StatusOr<proto::Attr> GetAttr(uint64_t ino);
  absl::StatusOr<std::string> GetXattr(const Caller& caller, uint64_t ino, const std::string& name);
  absl::StatusOr<std::vector<std::string>> ListXattr(const Caller& caller, uint64_t ino);
  // Whether `ino` has any xattr (of any name, trusted.* too).
  absl::StatusOr<bool> HasXattrs(uint64_t ino);
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

 private:
  MetaStore* const store_;
};

}  // namespace grantfs

#endif  // GRANTFS_SERVER_INODES_H_
