// The replica's copy on disk, the pieces the replica's files share
// (checkpoint/replica.h): the key of its saved position and the position's
// encoding, the removal of the copy (meta/ and chunks/), the fsync of a
// directory, the check of a metadata batch before the copy takes it, and the
// error a failed RocksDB call on the copy becomes.
// kPartialSnapshotFile (checkpoint/copy_files.h) is present from the start
// of a snapshot until the copy is whole: a copy cut short (stream broken,
// crash) is no copy and must not be opened.
#ifndef GRANTFS_CHECKPOINT_REPLICA_COPY_H_
#define GRANTFS_CHECKPOINT_REPLICA_COPY_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace rocksdb {
class Status;
}  // namespace rocksdb

namespace grantfs {
namespace replica_copy {

inline constexpr char kPositionKey[] = "Rposition";  // epoch, seq (big-endian)

// fsyncs directory `dir` (a created or removed name in it is durable).
absl::Status SyncDir(const std::string& dir);
// Removes the copy: meta/ and chunks/.
absl::Status RemoveCopy(const std::string& data_dir);
std::string EncodePosition(uint64_t epoch, uint64_t seq);
bool DecodePosition(const std::string& s, uint64_t* epoch, uint64_t* seq);
// Whether `rep` (the Data() of a RocksDB WriteBatch from the primary) is a
// batch the copy may write: whole, and only puts and deletes in the default
// column family, which is all the primary's metadata store writes. RocksDB
// checks a batch only after it wrote it to its WAL (a damaged one there
// would fail every later open of the copy), and some records abort it
// (Debian's build keeps its assertions). InvalidArgument otherwise.
absl::Status CheckBatch(const std::string& rep);
// Logs `s` and returns it as INTERNAL, "`what`: ...".
absl::Status DbError(const rocksdb::Status& s, const char* what);

}  // namespace replica_copy
}  // namespace grantfs

#endif  // GRANTFS_CHECKPOINT_REPLICA_COPY_H_
