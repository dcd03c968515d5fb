// fsck: an offline consistency check of a stopped server's data directory
// (`meta/`, the RocksDB metadata store, and `chunks/`, the chunk files),
// with an optional repair of what can be fixed without guessing.
//
// The check reads every record (key layout: server/keys.h) and every chunk
// file once, and holds a summary of the namespace in memory (some 200 bytes
// per inode, directory entry and chunk record). It checks the invariants
// that the metadata records (server/metadata.h) keep in every batch:
//   - names: each entry ('D') names an existing inode of the type it records,
//     in an existing directory, and has the readdir-order twin ('E') with the
//     same inode, type, cookie and name (and each 'E' its 'D'); every inode
//     but the root is reachable from the root, or is an unlinked-but-open
//     orphan (nlink 0 with an 'O' record); a file's nlink is the number of
//     entries naming it, a directory's 2 + its subdirectories (0 once
//     removed); a directory is named once and its ".." is where it is named;
//   - data: each chunk record ('C') belongs to a regular file or to an
//     unlinked file waiting to be freed ('G'); none lies past the end of its
//     file; a file's allocated_blocks is the bits set in its chunk records;
//     every chunk record of a live file has its chunk file, and every chunk
//     file has a chunk record (or is one the deleter will remove);
//   - the ledger: used_blocks is the bits set over all chunk records,
//     granted_blocks the sum of the sessions' grants ('L'), inodes the
//     number of inode records, used + granted <= capacity (unless the
//     capacity was never recorded), and next_ino / next_cookie exceed every
//     inode number / cookie in use.
//
// Repair (FsckOptions::repair) changes only what has one right answer: the
// counters are recomputed; nlink is set to the counted value (when at least
// one entry names the inode; an unnamed one is left for a person);
// allocated_blocks is set to the bits of its chunk records; records keyed by
// an inode that does not exist (chunk, orphan, xattr and lock records) and
// empty chunk records are deleted, as are orphan records of linked inodes;
// chunk files without a chunk record are deleted (nothing in them was ever
// committed: a write's bits are recorded in the batch that makes it part of
// the file). Missing chunk files, dangling or mismatched entries and
// unreachable inodes are reported and left alone.
//
// Not thread-safe with a server: CheckVolume refuses a data directory whose
// RocksDB LOCK another process (or this one) holds.
#ifndef GRANTFS_SERVER_FSCK_H_
#define GRANTFS_SERVER_FSCK_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace rocksdb {
class DB;
class Snapshot;
}  // namespace rocksdb

namespace grantfs {

struct FsckOptions {
  // The data directory of a stopped server: holds meta/ and chunks/. Required.
  std::string data_dir;
  // Fix what is safe to fix (see above), in one synced RocksDB batch, then
  // delete orphan chunk files. Default false: the metadata store is opened
  // read-only and nothing in the directory is written.
  bool repair = false;
  // Bytes per chunk; must match the server's ChunkStore. Default 4 MiB.
  uint64_t chunk_size = 4 << 20;
  // Check the records only: chunk files are not read (chunk_file_missing
  // and orphan_chunk_file are not checked) and data_dir needs no chunks/.
  // For a running server's metadata (the online check,
  // CheckMetadataSnapshot below), whose chunk files move on meanwhile. Not
  // with repair.
  bool metadata_only = false;
  // Told how far the offline check got, every few thousand records or
  // hundred chunk files and at the end of each phase ("metadata records",
  // "chunk files"): done, and the total when known (0: not known; the
  // records' total is RocksDB's estimate). Null: nobody.
  std::function<void(const char* phase, uint64_t done, uint64_t total)> progress;
};

// One inconsistency.
struct FsckProblem {
  // What kind of problem, a stable identifier ("nlink", "orphan_chunk_file",
  // ...; the list is in fsck.cc), for scripts and tests.
  std::string kind;
  // One line naming the inode, record or file and what is wrong with it.
  std::string message;
  uint64_t ino = 0;  // the inode concerned, 0 if none
  // The record (printable, e.g. "C/12/0") or the chunk file concerned.
  std::string key;
  std::string path;
  // What --repair does (or did) about it; empty if it is left alone.
  std::string fix;
  bool repaired = false;  // the fix was applied

  // "kind: message", then " [repaired: fix]" or " [--repair: fix]".
  std::string ToString() const;
};

struct FsckReport {
  std::string data_dir;
  bool repair = false;
  bool metadata_only = false;         // chunk files were not read
  std::vector<FsckProblem> problems;  // in the order found
  // What was examined.
  uint64_t inodes = 0;
  uint64_t directories = 0;
  uint64_t files = 0;  // regular files
  uint64_t entries = 0;
  uint64_t chunk_records = 0;
  uint64_t chunk_files = 0;
  uint64_t orphans = 0;  // unlinked files kept open ('O')
  uint64_t garbage = 0;  // unlinked files waiting to be freed ('G')
  uint64_t used_blocks = 0;
  uint64_t granted_blocks = 0;
  uint64_t capacity_blocks = 0;

  // No problem found.
  bool clean() const { return problems.empty(); }
  // Problems left as they were (all of them without repair).
  int unrepaired() const;
  // A one-line summary: what was examined and what was found.
  std::string Summary() const;
  // The whole report as one JSON object.
  std::string ToJson() const;
};

// Checks (and with options.repair, repairs) the data directory. The status
// is an error only when the check could not run: InvalidArgument (bad
// options), NotFound (no metadata store there), FailedPrecondition (a
// process holds the store, i.e. a server is running on it; or a replica's
// copy that is still partial), or the error of a failed open, read or
// repair write. Problems found are in the report.
absl::StatusOr<FsckReport> CheckVolume(const FsckOptions& options);

// The online check of a running server: checks `db` (its metadata store)
// as of `snapshot` with metadata_only (every batch is atomic, so a snapshot
// is a consistent moment of the volume). Reads the whole store once and
// writes nothing, so it runs on a full disk too. The report's data_dir
// names `label`.
absl::StatusOr<FsckReport> CheckMetadataSnapshot(rocksdb::DB* db, const rocksdb::Snapshot* snapshot,
                                                 const std::string& label, uint64_t chunk_size);

}  // namespace grantfs

#endif  // GRANTFS_SERVER_FSCK_H_
