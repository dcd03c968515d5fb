// A digest of the metadata store, to show that the primary and its replica
// hold the same metadata (grantfsctl fsck --server; docs/operations.md).
//
// Both sides digest their RocksDB at one point of the change log: the
// primary takes a snapshot and appends a digest mark (ReplRecord.digest_mark)
// under its store's mutex, so the snapshot holds exactly the batches before
// the mark; the replica takes its snapshot when it applies the mark. Records
// are digested in key order, per kind (the key's first byte, server/keys.h),
// so a difference names the kind of record that differs. The replica's own
// position record ('R') is left out. FNV-1a 64 finds divergence, not an
// adversary.
#ifndef GRANTFS_CHECKPOINT_META_DIGEST_H_
#define GRANTFS_CHECKPOINT_META_DIGEST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/store.pb.h"

namespace rocksdb {
class DB;
class Snapshot;
}  // namespace rocksdb

namespace grantfs {

// Digests every record of `db` as of `snapshot` (nullptr: now), labelled
// with `seq`. Reads the whole store once; holds nothing but the sums. An
// iterator error is returned as DATA_LOSS.
absl::StatusOr<proto::MetaDigest> DigestMeta(rocksdb::DB* db, const rocksdb::Snapshot* snapshot,
                                             uint64_t seq);

// What differs between two digests, one line per kind ("D: 12 records on
// the primary, 11 on the replica"); empty when they are equal.
std::vector<std::string> CompareDigests(const proto::MetaDigest& primary,
                                        const proto::MetaDigest& replica);

}  // namespace grantfs

#endif  // GRANTFS_CHECKPOINT_META_DIGEST_H_
