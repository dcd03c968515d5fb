// The server's roles and the changes between them (docs/failover.md).
//
// RunServer serves until a stop signal. With a witness, the witness decides
// each time which role this server takes (DecideRole): primary of an epoch,
// or replica. A replica that the witness promotes, and a primary that learns
// it is fenced (or handed the role over), end their role; RunServer closes
// everything the role opened (the gRPC server, the volume or the copy, the
// replication threads) and decides again, in the same process, the promoted
// epoch passed as a value. A stop signal ends the current role at once and
// no other starts: the process exits 0.
#ifndef GRANTFS_SERVER_ROLES_H_
#define GRANTFS_SERVER_ROLES_H_

#include <signal.h>

#include <cstdint>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/transport.h"
#include "server/request_queue.h"
#include "server/server_metrics.h"
#include "server/volume.h"

namespace grantfs {

struct ServerConfig {
  std::string listen;                       // address:port to serve on
  std::string self;                         // this server's address as others know it
  std::string role;                         // "primary" or "replica" (for a new cluster); "witness"
  std::string peer;                         // the other server ("" standalone)
  std::string witness;                      // the witness ("" standalone)
  Transport transport;                      // TLS, who may call, the cluster secret
  absl::Duration lease = absl::Seconds(1);  // the primary's lease
  bool handover_on_stop = true;
  RequestQueueOptions queue;  // the primary's request path (server/request_queue.h)
  std::string witness_dir;    // --role=witness: its state
  VolumeOptions volume;       // the primary's volume (dir is the data directory)
  // Counts and times calls, and shows each role's status (--metrics_addr);
  // nullptr: none. Not owned; outlives RunServer.
  ServerMetrics* metrics = nullptr;
};

// What ends a role.
class RoleEvents {
 public:
  enum class Kind { kNone, kStop, kPromoted, kFenced };
  struct Event {
    Kind kind = Kind::kNone;
    uint64_t epoch = 0;  // kPromoted: the epoch granted
  };

  void Stop();
  void Promoted(uint64_t epoch);
  void Fenced();
  bool stopping();
  // Waits for the event that ends the current role and consumes it (a stop
  // is never consumed: every later Wait returns it at once).
  Event Wait();

 private:
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  Event pending_ ABSL_GUARDED_BY(mu_);
};

// Serves in the roles the witness gives until a stop signal (one of
// `stop_signals`, blocked in every thread by the caller). Returns the exit
// code: 0 after a stop, 1 when a role could not start (logged).
int RunServer(const ServerConfig& config, const sigset_t& stop_signals);

}  // namespace grantfs

#endif  // GRANTFS_SERVER_ROLES_H_
