#include "server/subtree.h"

#include <sys/stat.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "common/errno_status.h"
#include "common/names.h"
#include "common/status_macros.h"
#include "server/meta_store.h"

namespace grantfs {
namespace {

// Deeper than any tree a path can name (kPathMax / 2 names); a walk this
// long is a loop in the records.
constexpr int kMaxDepth = 1 << 16;

}  // namespace

absl::StatusOr<uint64_t> ResolveDirectory(Metadata* meta, const std::string& path) {
  uint64_t ino = kRootIno;
  const Caller root;  // no permission check: the path is the operator's
  for (const std::string& name : PathNames(path)) {
    ASSIGN_OR_RETURN(proto::Attr a, meta->names().Lookup(root, ino, name));
    ino = a.ino();
  }
  ASSIGN_OR_RETURN(proto::InodeRecord rec, meta->inodes().GetInode(ino));
  if (!S_ISDIR(rec.mode())) return ErrnoStatus(ENOTDIR, path);
  return ino;
}

absl::StatusOr<bool> IsBelow(Metadata* meta, uint64_t top, uint64_t ino) {
  if (top == kReachesNothing) return false;
  for (int depth = 0; depth < kMaxDepth; ++depth) {
    if (ino == top) return true;
    if (ino == kRootIno || ino == 0) return false;
    absl::StatusOr<proto::InodeRecord> rec = meta->inodes().GetInode(ino);
    // A file's recorded directory may be gone (its name there was removed,
    // another stays): it is then outside.
    if (depth > 0 && ToErrno(rec.status()) == ENOENT) return false;
    if (!rec.ok()) return rec.status();
    ino = rec->parent();  // ".." of a directory, the directory of a file
  }
  return ErrnoStatus(EIO, absl::StrCat("the parents of inode ", ino, " do not reach the root"));
}

}  // namespace grantfs
