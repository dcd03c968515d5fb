// The metadata of one volume: the store (server/meta_store.h: RocksDB, one
// atomic batch per change, group commit, replication) and the records kept
// in it, one class per concept:
//   inodes()    attributes and xattrs          server/inodes.h
//   names()     names in directories           server/namespace.h
//   space()     reservations, chunk maps, grants  server/allocator.h
//   sessions()  session and dedupe records     server/session_records.h
//   orphans()   orphans and garbage            server/orphans.h
//   locks()     file lock records              server/lock_records.h
// Each is thread-safe; this only wires them to one store.
#ifndef GRANTFS_SERVER_METADATA_H_
#define GRANTFS_SERVER_METADATA_H_

#include <memory>

#include "absl/status/statusor.h"
#include "server/allocator.h"
#include "server/inodes.h"
#include "server/lock_records.h"
#include "server/meta_store.h"
#include "server/namespace.h"
#include "server/orphans.h"
#include "server/session_records.h"

namespace grantfs {

class Metadata {
 public:
  // Opens the store (MetaStore::Open) and the records over it.
  static absl::StatusOr<std::unique_ptr<Metadata>> Open(const MetaStoreOptions& options);
  explicit Metadata(std::unique_ptr<MetaStore> store);
  Metadata(const Metadata&) = delete;
  Metadata& operator=(const Metadata&) = delete;

  MetaStore& store() { return *store_; }
  Inodes& inodes() { return inodes_; }
  Namespace& names() { return names_; }
  Allocator& space() { return space_; }
  SessionRecords& sessions() { return sessions_; }
  Orphans& orphans() { return orphans_; }
  LockRecords& locks() { return locks_; }

 private:
  const std::unique_ptr<MetaStore> store_;  // first: the others point into it
  Inodes inodes_;
  Orphans orphans_;
  Namespace names_;
  Allocator space_;
  SessionRecords sessions_;
  LockRecords locks_;
};

}  // namespace grantfs

#endif  // GRANTFS_SERVER_METADATA_H_
