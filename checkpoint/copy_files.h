// The files replication keeps in a server's data directory next to the
// volume's meta/ and chunks/ (checkpoint/replica.h, checkpoint/replicator.h).
// A directory that holds only these holds no volume yet (server/data_dir.h).
#ifndef GRANTFS_CHECKPOINT_COPY_FILES_H_
#define GRANTFS_CHECKPOINT_COPY_FILES_H_

namespace grantfs {

// Present from the start of a snapshot until it is whole: the copy is
// partial, and Replica::Open discards it.
inline constexpr char kPartialSnapshotFile[] = "snapshot.partial";

// Which boot of the machine last used the copy (docs/failover.md, "Whose
// data"); replaced through kReplicaBootFile + ".tmp".
inline constexpr char kReplicaBootFile[] = "replica.boot";

// The primary's RocksDB checkpoint for a snapshot it sends (a directory,
// removed when the snapshot is sent).
inline constexpr char kCheckpointDir[] = "snapshot.tmp";

}  // namespace grantfs

#endif  // GRANTFS_CHECKPOINT_COPY_FILES_H_
