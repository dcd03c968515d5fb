// grantfsctl's global-mount commands (docs/operations.md, "Global mounts"):
//
//   mount -g [-o OPTIONS] [SUBDIR] PATH   records it; waits (--wait_s) for
//                                         every live node to mount it
//   umount -g [-f] PATH                   marks it for removal; waits for
//                                         every live node; removes it from
//                                         the table when every one unmounted
//   mounts                                the table, each node's state
//   nodes                                 the node agents
//
// Exit codes: 0 done (mount: every live node mounted it; umount: every live
// node unmounted it and the record is gone); 1 a node failed, is busy or
// did not answer in time, or no primary answered; 2 bad usage, or the
// primary refused (bad path or options, not allowed, exists, not found).
#ifndef GRANTFS_CLIENT_GLOBAL_MOUNTS_CLI_H_
#define GRANTFS_CLIENT_GLOBAL_MOUNTS_CLI_H_

#include <string>
#include <vector>

#include "common/transport.h"

namespace grantfs {

// Whether `cmd` is one of the commands above.
bool IsGlobalMountCommand(const std::string& cmd);

// Runs `cmd` with its positional `args` against `servers`; prints the
// human form, or one JSON line with `json`. Returns the exit code.
int RunGlobalMountCommand(const std::string& cmd, const std::vector<std::string>& args,
                          const std::vector<std::string>& servers, const Transport& transport,
                          bool json);

}  // namespace grantfs

#endif  // GRANTFS_CLIENT_GLOBAL_MOUNTS_CLI_H_
