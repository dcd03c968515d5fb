// What a node restricted to a subtree reaches (the certificate option
// "subtree=/PATH", common/transport.h CallerPolicy): the directory PATH
// names and everything below it.
//
// A directory is below PATH when walking up through ".." from it meets
// PATH's directory before the root. A file, symlink or device has no ".."
// but its record names the directory it was created in or last renamed into
// (InodeRecord.parent): it is below PATH when that directory is. So a file
// that another node hard-linked into the subtree from outside counts where
// it was made (outside) until a rename moves it in. Files made before the
// record named their directory (parent 0) are outside every subtree.
#ifndef GRANTFS_SERVER_SUBTREE_H_
#define GRANTFS_SERVER_SUBTREE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "server/metadata.h"

namespace grantfs {

// A top that no inode is below (RequestContext::top of a node whose subtree
// names no directory now).
inline constexpr uint64_t kReachesNothing = ~uint64_t{0};

// The directory a normalized path (common/names.h NormalizePath) names,
// walked from the root by name with no permission check (like the path of
// an NFS export): its inode, or ENOENT / ENOTDIR.
absl::StatusOr<uint64_t> ResolveDirectory(Metadata* meta, const std::string& path);

// Whether inode `ino` is directory `top` or below it. ENOENT when `ino`
// does not exist (an inode number not yet made is refused like one outside:
// it may be made outside later); EIO for a ".." chain that does not end.
absl::StatusOr<bool> IsBelow(Metadata* meta, uint64_t top, uint64_t ino);

}  // namespace grantfs

#endif  // GRANTFS_SERVER_SUBTREE_H_
