// The namespace: names in directories. Lookup and readdir, and the changes
// that add or remove a name (create, mknod, mkdir, symlink, link, unlink,
// rmdir, rename), with their permission checks, on the metadata store
// (server/meta_store.h). A removal that takes an inode's last link makes it
// an orphan (server/orphans.h) in the same batch.
//
// Thread-safe (each change is one MetaStore::Mutate; reads take no lock).
// Errors are errno statuses (common/errno_status.h).
#ifndef GRANTFS_SERVER_NAMESPACE_H_
#define GRANTFS_SERVER_NAMESPACE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/grantfs.pb.h"
#include "proto/store.pb.h"
#include "server/inodes.h"
#include "server/meta_store.h"
#include "server/orphans.h"
#include "server/permissions.h"

namespace grantfs {

// What a removal left behind.
struct Removed {
  uint64_t ino = 0;    // the inode whose link went away (0: none)
  uint32_t nlink = 0;  // its link count afterwards; 0 = now an orphan
  // Rename: the inode that moved, and with RENAME_EXCHANGE the one it
  // swapped places with (their ctime changed; 0: none).
  uint64_t moved = 0;
  uint64_t exchanged = 0;
};

class Namespace {
 public:
  // None is owned; all outlive this.
  Namespace(MetaStore* store, Inodes* inodes, const Orphans* orphans)
      : store_(store), inodes_(inodes), orphans_(orphans) {}
  Namespace(const Namespace&) = delete;
  Namespace& operator=(const Namespace&) = delete;

  // --- reads ---------------------------------------------------------------
  absl::StatusOr<proto::Attr> Lookup(const Caller& caller, uint64_t parent,
                                     const std::string& name);
  absl::StatusOr<std::string> ReadLink(uint64_t ino);
  // Up to `max` entries after `cookie` ("." and ".." first), eof when done.
  absl::Status ReadDir(const Caller& caller, uint64_t ino, uint64_t cookie, uint32_t max,
                       proto::ReadDirReply* reply);

  // --- changes -------------------------------------------------------------
  // `tag` (every change below): the request it is made for, or null
  // (MetaStore::Mutate).
  // Creates a file, directory, fifo, socket or device node. With `exclusive`
  // false and a regular file already there, returns it (open O_CREAT).
  // `created` (may be null) says which of the two happened.
  absl::StatusOr<proto::Attr> MkNod(const Caller& caller, uint64_t parent, const std::string& name,
                                    uint32_t mode, uint64_t rdev, uint32_t umask, bool exclusive,
                                    bool* created = nullptr, RequestTag* tag = nullptr);
  absl::StatusOr<proto::Attr> Symlink(const Caller& caller, uint64_t parent,
                                      const std::string& name, const std::string& target,
                                      RequestTag* tag = nullptr);
  absl::StatusOr<proto::Attr> Link(const Caller& caller, uint64_t ino, uint64_t new_parent,
                                   const std::string& new_name, RequestTag* tag = nullptr);
  // `expected_ino`: the inode the caller believes `name` is (0: any); when
  // the name points elsewhere now, ESTALE.
  absl::StatusOr<Removed> Remove(const Caller& caller, uint64_t parent, const std::string& name,
                                 bool is_dir, uint64_t expected_ino = 0, RequestTag* tag = nullptr);
  // rename(2) / renameat2(2) with RENAME_NOREPLACE (1) or RENAME_EXCHANGE (2).
  // `expected_ino`, `expected_new_ino`: as in Remove, for both names.
  absl::StatusOr<Removed> Rename(const Caller& caller, uint64_t parent, const std::string& name,
                                 uint64_t new_parent, const std::string& new_name, uint32_t flags,
                                 uint64_t expected_ino = 0, uint64_t expected_new_ino = 0,
                                 RequestTag* tag = nullptr);

 private:
  proto::InodeRecord NewInode(const Caller& caller, const proto::InodeRecord& dir, uint32_t mode,
                              int64_t now);
  // Takes `ino`, of one of the session's inode ranges, for a create of its
  // log (RequestTag::ino): EEXIST when it was used (a range is used in
  // order), EINVAL when it is not the session's.
  static absl::Status UseLoggedIno(MetaTxn* txn, uint64_t client_id, uint64_t ino);
  // Records the new inode's number in `tag` (a retry answers with it).
  absl::StatusOr<proto::Attr> CreateEntry(const Caller& caller, uint64_t parent,
                                          const std::string& name, proto::InodeRecord rec,
                                          RequestTag* tag);
  absl::StatusOr<bool> DirIsEmpty(uint64_t ino);
  // ENOTDIR/EINVAL unless `dir` is not `ancestor` nor below it.
  absl::StatusOr<bool> IsAncestor(MetaTxn* txn, uint64_t ancestor, uint64_t dir);

  MetaStore* const store_;
  Inodes* const inodes_;
  const Orphans* const orphans_;
};

}  // namespace grantfs

#endif  // GRANTFS_SERVER_NAMESPACE_H_
