// What the node agent (client/node_agent.h) does to the node's mounts: look
// at what is mounted, mount a global mount with grantfs-mount, unmount one,
// and say who keeps a busy one busy. NodeMounter is the seam (the agent's
// unit tests give it a fake); SystemMounter does it on this machine, in the
// agent's mount namespace.
#ifndef GRANTFS_CLIENT_NODE_MOUNTS_H_
#define GRANTFS_CLIENT_NODE_MOUNTS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "proto/cluster.pb.h"

namespace grantfs {

// What is at a path.
enum class MountAt {
  kNothing,  // no mount (or not a mount point)
  kGrantFs,  // a GrantFS mount (fuse.grantfs) that answers
  kDead,     // a GrantFS mount whose daemon is gone (ENOTCONN)
  kOther,    // another file system is mounted there
};

class NodeMounter {
 public:
  virtual ~NodeMounter() = default;
  virtual MountAt Probe(const std::string& path) = 0;
  // Creates the directory `rec.path()` (and its parents) if missing and
  // mounts the record there; returns once the mount is up. The status says
  // why not (the mount's own last log line when it ran); FAILED_PRECONDITION
  // "refused: ... is a symbolic link" when a name on the way is one.
  virtual absl::Status Mount(const proto::GlobalMountRecord& rec) = 0;
  // Whether the GrantFS mount at `path` is of this agent's cluster: its
  // source (mountinfo) names the agent's servers. Only such a mount is
  // adopted when the agent has no record of making it.
  virtual bool OfThisCluster(const std::string& path) = 0;
  // Unmounts `path`; `lazy` detaches it even when busy (MNT_DETACH). OK when
  // nothing is mounted there. Only a GrantFS mount, with UMOUNT_NOFOLLOW and
  // no symlink on the way: PERMISSION_DENIED otherwise. FAILED_PRECONDITION naming the processes
  // that use it, when it is busy and not `lazy`.
  virtual absl::Status Unmount(const std::string& path, bool lazy) = 0;
};

struct SystemMounterOptions {
  // grantfs-mount, and the servers every mount is told of ("A:7420,B:7420").
  std::string mount_binary;
  std::string servers;
  // Flags handed to every grantfs-mount (the agent's own TLS flags:
  // --tls_dir, --identity, --secret_file or --insecure).
  std::vector<std::string> mount_flags;
  // Where each mount's log goes: DIR/mount-PATH.log, PATH with '/' as '_'.
  std::string log_dir;
  // How long one grantfs-mount may take to come up before it is killed. It
  // is told to give up by itself at three quarters of it (--mount_wait_ms).
  absl::Duration mount_timeout = absl::Seconds(20);
};

// Thread-compatible (the agent calls it from one thread).
class SystemMounter final : public NodeMounter {
 public:
  explicit SystemMounter(const SystemMounterOptions& options) : options_(options) {}
  MountAt Probe(const std::string& path) override;
  absl::Status Mount(const proto::GlobalMountRecord& rec) override;
  absl::Status Unmount(const std::string& path, bool lazy) override;
  // Source "grantfs:A:7420,B:7420" (grantfs-mount's fsname): the same set
  // of servers as SystemMounterOptions::servers.
  bool OfThisCluster(const std::string& path) override;

  // The fstype of the mount at `path` in /proc/self/mountinfo ("" none):
  // "fuse.grantfs" for ours. `path` is compared as given: a global mount
  // path may not pass through a symlink (Mount and Unmount refuse one).
  static std::string MountedType(const std::string& path);
  // "pid 12 (sleep) has its working directory inside; ..." for at most five
  // processes of this mount namespace that use something under `path`.
  static std::string WhoUses(const std::string& path);

 private:
  std::string LogPath(const std::string& path) const;

  const SystemMounterOptions options_;
};

}  // namespace grantfs

#endif  // GRANTFS_CLIENT_NODE_MOUNTS_H_
