// What the GrantFs service asks of the server's replication role
// (checkpoint/: the primary's Replicator, the replica). Without one the
// server is standalone: it always serves and has no replica.
#ifndef GRANTFS_CHECKPOINT_SERVER_ROLE_H_
#define GRANTFS_CHECKPOINT_SERVER_ROLE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/grantfs.pb.h"

namespace grantfs {

class ServerRole {
 public:
  virtual ~ServerRole() = default;
  // Whether this server may answer clients now: it is the primary of the
  // current epoch and its lease holds. When not, `why` says so (the client
  // tries the next server).
  virtual bool Serving(std::string* why) = 0;
  // Role, epoch, peer, witness and replica state for Status.
  virtual void FillStatus(proto::StatusReply* reply) = 0;
  // Planned switchover: hands the primary role to the in-sync replica.
  virtual absl::Status Switchover() = 0;
  // The in-sync replica's digest of its metadata as of digest mark `seq`
  // (MetaStore::DigestWithMark), once the replica applied it.
  // FAILED_PRECONDITION: no replica in sync (or this server is none's
  // primary); else the replica's answer or UNAVAILABLE / DEADLINE_EXCEEDED.
  virtual absl::StatusOr<proto::MetaDigest> ReplicaDigest(uint64_t seq) = 0;
};

}  // namespace grantfs

#endif  // GRANTFS_CHECKPOINT_SERVER_ROLE_H_
