// grantfs-passthrough's FUSE low-level operations: a minimal passthrough of
// a local directory, the ceiling any FUSE file system reaches on this
// machine. Each op is a thin adapter: a helper returns an errno, then the op
// sends exactly one fuse_reply_*.
//
// Operations run as the daemon's user, except that mkdir and create take the
// caller's uid/gid so new objects get the right owner. Permission checks are
// the kernel's (mount with default_permissions).
#ifndef GRANTFS_BENCH_PASSTHROUGH_PASSTHROUGH_OPS_H_
#define GRANTFS_BENCH_PASSTHROUGH_PASSTHROUGH_OPS_H_

#define FUSE_USE_VERSION 312
#include <fuse3/fuse_lowlevel.h>

#include "bench/passthrough/inode_table.h"

namespace grantfs {
namespace passthrough {

struct PassthroughOptions {
  // Seconds the kernel may cache attributes and names (negative ones too).
  double attr_timeout_s = 1.0;
  double entry_timeout_s = 1.0;
  // O_PATH fds of inodes kept open at once (InodeTable); main sets the
  // open-files limit less 1,024 for open files and directories.
  size_t max_inode_fds = 8192;
};

// The state the ops share; reached through fuse_req_userdata. Thread-safe.
class Passthrough {
 public:
  // Takes ownership of `root_fd`, an O_PATH fd of the source directory.
  Passthrough(int root_fd, const PassthroughOptions& options)
      : inodes_(root_fd, options.max_inode_fds), options_(options) {}

  // The operation table; pass `this` as the session's userdata.
  static const fuse_lowlevel_ops* Ops();

  InodeTable& inodes() { return inodes_; }
  const PassthroughOptions& options() const { return options_; }

 private:
  InodeTable inodes_;
  const PassthroughOptions options_;
};

}  // namespace passthrough
}  // namespace grantfs

#endif  // GRANTFS_BENCH_PASSTHROUGH_PASSTHROUGH_OPS_H_
