// What a server's data directory (--data_dir) holds, told before anything is
// opened or created in it. server/main.cc refuses to start on a missing or a
// foreign one, and tells the witness which volume, if any, this server holds
// (docs/failover.md, "Whose data"): a data disk that was not mounted at boot
// leaves an empty mount point or no directory at all, and must never pass
// for a new volume in a cluster that already has one.
#ifndef GRANTFS_SERVER_DATA_DIR_H_
#define GRANTFS_SERVER_DATA_DIR_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "checkpoint/copy_files.h"
#include "proto/store.pb.h"

namespace grantfs {

enum class DataDirState {
  kMissing,  // no such directory: the data disk is not mounted, or a typo
  kEmpty,    // exists and holds no volume: a new volume, or a replica's empty copy
  kVolume,   // holds a GrantFS volume (a primary's, or a replica's copy)
  kForeign,  // holds files, but not a GrantFS volume
};

const char* DataDirStateName(DataDirState state);

struct DataDirInfo {
  DataDirState state = DataDirState::kMissing;
  // kVolume: the volume's identity; nullopt for a volume made before
  // identities were recorded.
  std::optional<proto::VolumeIdentity> identity;
  // kEmpty and kForeign: what was found, for the log ("an unfinished
  // snapshot", "'notes.txt'", "meta/ without CURRENT").
  std::string detail;
};

// Looks at `dir` without changing it:
//   kMissing  `dir` does not exist;
//   kVolume   meta/CURRENT exists (a metadata store), and no unfinished snapshot;
//   kEmpty    nothing in it but what GrantFS makes before a volume exists
//             (space.hold, replica.boot, an unfinished snapshot, meta/ and
//             chunks/ holding no file) and lost+found;
//   kForeign  anything else.
// Errors: `dir` is not a directory or cannot be read (FAILED_PRECONDITION),
// the metadata store cannot be read (MetaStore::ReadIdentity).
absl::StatusOr<DataDirInfo> InspectDataDir(const std::string& dir);

}  // namespace grantfs

#endif  // GRANTFS_SERVER_DATA_DIR_H_
