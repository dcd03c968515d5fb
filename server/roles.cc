#include "server/roles.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/resource_quota.h>

#include <chrono>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "checkpoint/replica.h"
#include "checkpoint/replicator.h"
#include "checkpoint/witness.h"
#include "common/clock.h"
#include "common/keepalive.h"
#include "glog/logging.h"
#include "server/chunk_store.h"
#include "server/cluster_service.h"
#include "server/data_dir.h"
#include "server/keys.h"
#include "server/mount_table.h"
#include "server/node_table.h"
#include "server/service.h"
#include "server/service_endpoint.h"

namespace grantfs {

void RoleEvents::Stop() {
  absl::MutexLock l(&mu_);
  stop_ = true;
}

void RoleEvents::Promoted(uint64_t epoch) {
  absl::MutexLock l(&mu_);
  pending_ = {Kind::kPromoted, epoch};
}

void RoleEvents::Fenced() {
  absl::MutexLock l(&mu_);
  if (pending_.kind == Kind::kNone) pending_ = {Kind::kFenced, 0};
}

bool RoleEvents::stopping() {
  absl::MutexLock l(&mu_);
  return stop_;
}

RoleEvents::Event RoleEvents::Wait() {
  absl::MutexLock l(&mu_);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stop_ || pending_.kind != Kind::kNone;
  };
  mu_.Await(absl::Condition(&ready));
  if (stop_) return {Kind::kStop, 0};
  Event e = pending_;
  pending_ = Event();
  return e;
}

namespace {

// Server-side settings every role shares.
void ConfigureBuilder(const ServerConfig& config, grpc::ServerBuilder* builder,
                      grpc::ResourceQuota* quota) {
  builder->SetMaxReceiveMessageSize(16 << 20);
  builder->SetMaxSendMessageSize(16 << 20);
  // Clients and the primary ping every second to notice a server that is cut
  // off; answering those pings must not count as abuse.
  AllowClientKeepalive(builder);
  // Per-connection admission, at the HTTP/2 level: a client (one channel
  // per mount) has at most this many calls open here; its further calls
  // wait in the client, not in this server's memory. Well above what a
  // mount runs at once (FUSE threads, flushers, read-ahead, its stream).
  builder->AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, config.queue.max_streams);
  // gRPC sets SO_REUSEPORT by default: a second server started on the
  // same port would share it silently, each taking some of the calls.
  // Without it, the second one cannot listen and says so.
  builder->AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // The synchronous services (the replica's stream, the witness) run on
  // gRPC's own thread manager, capped here; the file system's calls use the
  // callback API and the request queue (server/service_endpoint.h).
  quota->SetMaxThreads(256);
  builder->SetResourceQuota(*quota);
}

// Listens on config.listen; null (logged) when it cannot.
std::unique_ptr<grpc::Server> Listen(const ServerConfig& config, grpc::ServerBuilder* builder) {
  int port = 0;
  builder->AddListeningPort(config.listen, config.transport.ServerCredentials(), &port);
  std::unique_ptr<grpc::Server> server = builder->BuildAndStart();
  if (!server || port == 0) {
    LOG(ERROR) << "cannot listen on " << config.listen;
    return nullptr;
  }
  return server;
}

// Stops taking calls; the ones under way get until `grace` to finish.
void StopServing(grpc::Server* server, absl::Duration grace) {
  server->Shutdown(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(absl::ToInt64Milliseconds(grace)));
  server->Wait();
}

// While it lives, the metrics show `endpoint`'s status (ServerMetrics).
class ShowInMetrics {
 public:
  ShowInMetrics(ServerMetrics* metrics, GrantFsEndpoint* endpoint, const std::string& role)
      : metrics_(metrics) {
    if (metrics_ != nullptr) metrics_->SetEndpoint(endpoint, role);
  }
  ~ShowInMetrics() {
    if (metrics_ != nullptr) metrics_->SetEndpoint(nullptr, "between roles");
  }
  ShowInMetrics(const ShowInMetrics&) = delete;
  ShowInMetrics& operator=(const ShowInMetrics&) = delete;

 private:
  ServerMetrics* const metrics_;
};

WitnessCall MakeWitnessCall(const ServerConfig& config) {
  auto client = std::make_shared<WitnessClient>(config.witness, config.transport);
  return [client, self = config.self](proto::WitnessRequest req) {
    req.set_server(self);
    return client->Update(req);
  };
}

int RunWitness(const ServerConfig& config, RoleEvents* events) {
  WitnessOptions wo;
  wo.dir = config.witness_dir;
  wo.transport = config.transport;
  wo.lease = config.lease;
  wo.stall_tick = wo.lease / 10;
  auto w = WitnessService::Open(wo);
  if (!w.ok()) {
    LOG(ERROR) << "cannot open the witness state in " << wo.dir << ": " << w.status();
    return 1;
  }
  grpc::ServerBuilder builder;
  grpc::ResourceQuota quota("grantfs-witness");
  ConfigureBuilder(config, &builder, &quota);
  builder.RegisterService(w->get());
  std::unique_ptr<grpc::Server> server = Listen(config, &builder);
  if (!server) return 1;
  if (config.metrics != nullptr) config.metrics->SetEndpoint(nullptr, "witness");
  const proto::WitnessState ws = (*w)->state();
  LOG(INFO) << "grantfs-server: witness on " << config.listen << ", epoch " << ws.epoch()
            << " owned by '" << ws.primary() << "', state in " << wo.dir;
  events->Wait();  // only a stop ends the witness
  StopServing(server.get(), absl::Seconds(5));
  return 0;
}

// Looks at the data directory before anything opens or creates it; false
// (logged) when no role may use it.
bool InspectData(const ServerConfig& config, bool replicated, DataDirInfo* out) {
  const std::string& dir = config.volume.dir;
  absl::StatusOr<DataDirInfo> data = InspectDataDir(dir);
  if (!data.ok()) {
    LOG(ERROR) << "cannot use the data directory " << dir << ": " << data.status();
    return false;
  }
  switch (data->state) {
    case DataDirState::kMissing:
      LOG(ERROR) << "data directory " << dir
                 << " does not exist: refusing to start (is the data disk mounted?). For a new "
                    "volume, create the directory first (mkdir -p "
                 << dir << ")";
      return false;
    case DataDirState::kForeign:
      LOG(ERROR) << "data directory " << dir << " holds " << data->detail
                 << ", not a GrantFS volume: refusing to start. Point --data_dir at the volume, "
                    "or at an empty directory for a new one";
      return false;
    case DataDirState::kEmpty:
      LOG(INFO) << "data directory " << dir << " holds no volume"
                << (data->detail.empty() ? "" : " (" + data->detail + ")")
                << (replicated ? "" : ": a new volume");
      break;
    case DataDirState::kVolume:
      LOG(INFO) << "data directory " << dir << " holds volume "
                << (data->identity ? data->identity->volume_id() : "(from before identities)")
                << ", data epoch " << (data->identity ? data->identity->data_epoch() : 0);
      break;
  }
  *out = *std::move(data);
  return true;
}

struct Decision {
  bool primary = false;
  uint64_t epoch = 0;
  absl::Time granted_at;  // on the monotonic clock
};

// Asks the witness which role this server takes: the primary of the epoch
// it was promoted to (`promoted_epoch`), of a new cluster (epoch 0, started
// as --role=primary) or as the primary restarting; else the replica. Waits
// for a witness that does not answer, until a stop.
Decision DecideRole(const ServerConfig& config, const DataDirInfo& data,
                    const WitnessCall& witness_call, uint64_t promoted_epoch, RoleEvents* events) {
  // A witness request of `op` at `epoch`, with this server's data.
  auto request = [&data](proto::WitnessRequest::Op op, uint64_t epoch) {
    proto::WitnessRequest req;
    req.set_op(op);
    req.set_epoch(epoch);
    if (data.state == DataDirState::kVolume) {
      req.mutable_data();  // a volume, even one from before identities
      if (data.identity) *req.mutable_data() = *data.identity;
    }
    return req;
  };
  absl::Time last_log = absl::InfinitePast();
  while (!events->stopping()) {
    // The lease is counted on the monotonic clock (ReplicatorOptions).
    const absl::Time sent = Clock::Monotonic()->Now();
    absl::StatusOr<proto::WitnessReply> st = witness_call(request(proto::WitnessRequest::GET, 0));
    if (!st.ok()) {
      if (absl::Now() - last_log > absl::Seconds(5)) {
        LOG(WARNING) << "waiting for the witness " << config.witness << ": " << st.status();
        last_log = absl::Now();
      }
      absl::SleepFor(absl::Milliseconds(200));
      continue;
    }
    const proto::WitnessState& ws = st->state();
    proto::WitnessRequest::Op op = proto::WitnessRequest::GET;
    uint64_t want = 0;
    if (promoted_epoch != 0 && ws.primary() == config.self && ws.epoch() == promoted_epoch) {
      op = proto::WitnessRequest::RENEW;  // promoted: the lease starts now
      want = ws.epoch();
    } else if ((ws.epoch() == 0 && config.role == "primary") || ws.primary() == config.self) {
      op = proto::WitnessRequest::CLAIM;  // a new cluster, or this primary restarting
      want = ws.epoch();
    }
    if (op == proto::WitnessRequest::GET) break;  // another server is primary
    st = witness_call(request(op, want));
    if (st.ok() && st->granted()) return {true, st->state().epoch(), sent};
    if (st.ok() && st->refused_data()) {
      LOG(ERROR) << "the witness refused the primary role to this server's data: " << st->reason()
                 << ". Running as the replica: it takes the volume from the "
                 << "primary when this server's copy is empty or older (see "
                 << "docs/operations.md, \"Refusals\")";
      break;
    }
    LOG(WARNING) << "the witness did not grant the epoch: "
                 << (st.ok() ? st->reason() : std::string(st.status().message()));
    absl::SleepFor(absl::Milliseconds(200));
  }
  return {};
}

// The replica's role until it is promoted or stopped. Returns the event
// that ended it, or nullopt when it could not start.
std::optional<RoleEvents::Event> RunReplica(const ServerConfig& config,
                                            const WitnessCall& witness_call, RoleEvents* events) {
  ReplicaOptions ro;
  ro.self = config.self;
  ro.peer = config.peer;
  ro.witness = config.witness;
  ro.transport = config.transport;
  ro.data_dir = config.volume.dir;
  ro.open_chunks = [direct_io = config.volume.direct_io, env = config.volume.chunk_env](
                       const std::string& dir) -> absl::StatusOr<std::unique_ptr<ChunkApplier>> {
    ChunkStoreOptions co;
    co.dir = dir;
    co.direct_io = direct_io;
    co.env = env;
    return ChunkStore::Create(co);
  };
  ro.identity_key = keys::Identity();
  ro.witness_call = witness_call;
  ro.failover_timeout = config.lease;
  ro.on_promoted = [events](uint64_t epoch) { events->Promoted(epoch); };
  auto replica = Replica::Open(ro);
  if (!replica.ok()) {
    LOG(ERROR) << "cannot open the replica's copy: " << replica.status();
    return std::nullopt;
  }
  grpc::ServerBuilder builder;
  grpc::ResourceQuota quota("grantfs");
  ConfigureBuilder(config, &builder, &quota);
  ServiceOptions so;
  so.transport = config.transport;
  so.server_role = replica->get();
  so.metrics = config.metrics;
  GrantFsService service(nullptr, so);
  // A replica answers Status alone (control lane): one ordinary worker.
  RequestQueueOptions qo = config.queue;
  qo.workers = 1;
  GrantFsEndpoint endpoint(&service, qo);
  builder.RegisterService(&endpoint);
  // The global mounts are the primary's: here every call is UNAVAILABLE,
  // and node agents and grantfsctl try the next server.
  ClusterServiceOptions cso;
  cso.transport = config.transport;
  cso.server_role = replica->get();
  ClusterService cluster(cso);
  builder.RegisterService(&cluster);
  builder.RegisterService(replica->get());
  std::unique_ptr<grpc::Server> server = Listen(config, &builder);
  if (!server) return std::nullopt;
  ShowInMetrics shown(config.metrics, &endpoint, "replica");
  (*replica)->Start();
  LOG(INFO) << "grantfs-server: replica on " << config.listen << " (as " << config.self
            << "), primary " << config.peer << ", witness " << config.witness << ", data in "
            << config.volume.dir;
  const RoleEvents::Event e = events->Wait();
  const bool stop = e.kind == RoleEvents::Kind::kStop;
  if (stop) (*replica)->Stop();  // no promotion from here on
  StopServing(server.get(), absl::Seconds(stop ? 5 : 1));
  if (!stop) (*replica)->Stop();
  return e;
}

// The primary's role (standalone when not `replicated`) until it is fenced
// or stopped.
std::optional<RoleEvents::Event> RunPrimary(const ServerConfig& config, const Decision& decision,
                                            bool replicated, const WitnessCall& witness_call,
                                            RoleEvents* events) {
  VolumeOptions vo = config.volume;
  std::unique_ptr<Replicator> replicator;
  Volume* volume_ptr = nullptr;
  ServiceOptions so;
  so.transport = config.transport;
  so.metrics = config.metrics;
  if (replicated) {
    ReplicatorOptions ro;
    ro.self = config.self;
    ro.peer = config.peer;
    ro.witness = config.witness;
    ro.transport = config.transport;
    ro.epoch = decision.epoch;
    ro.data_dir = vo.dir;
    ro.witness_call = witness_call;
    ro.lease = config.lease;
    ro.replica_timeout = config.lease;
    ro.granted_at = decision.granted_at;
    ro.capacity_bytes = vo.capacity_bytes;
    ro.checkpoint = [&volume_ptr](const std::string& dir) {
      return volume_ptr->meta().store().Checkpoint(dir);
    };
    ro.identity = [&volume_ptr] { return volume_ptr->meta().store().identity(); };
    ro.on_fenced = [events] { events->Fenced(); };
    replicator = std::make_unique<Replicator>(ro);
    vo.change_sink = replicator.get();
    vo.serving = [r = replicator.get()] {
      std::string why;
      return r->Serving(&why);
    };
    so.server_role = replicator.get();
  }
  vo.epoch = decision.epoch;
  auto volume = Volume::Open(vo);
  if (!volume.ok()) {
    LOG(ERROR) << "cannot open volume: " << volume.status();
    return std::nullopt;
  }
  volume_ptr = volume->get();
  SpaceInfo space = (*volume)->Space();
  grpc::ServerBuilder builder;
  grpc::ResourceQuota quota("grantfs");
  ConfigureBuilder(config, &builder, &quota);
  GrantFsService service(volume->get(), so);
  GrantFsEndpoint endpoint(&service, config.queue);
  builder.RegisterService(&endpoint);
  // The global mount table and the node agents (server/cluster_service.h).
  MountTable mount_table(&(*volume)->meta().store());
  NodeTable node_table;
  ClusterServiceOptions cso;
  cso.transport = config.transport;
  cso.server_role = so.server_role;
  cso.table = &mount_table;
  cso.nodes = &node_table;
  ClusterService cluster(cso);
  builder.RegisterService(&cluster);
  std::unique_ptr<grpc::Server> server = Listen(config, &builder);
  if (!server) {
    if (replicator) replicator->Stop();
    return std::nullopt;
  }
  ShowInMetrics shown(config.metrics, &endpoint, replicated ? "primary" : "standalone");
  if (replicator) replicator->Start();
  LOG(INFO) << "grantfs-server: " << (replicated ? "primary" : "standalone") << " on "
            << config.listen << (replicated ? absl::StrCat(" epoch ", decision.epoch) : "")
            << ", data in " << vo.dir << " (volume "
            << (*volume)->meta().store().identity().volume_id() << ", data epoch "
            << (*volume)->meta().store().identity().data_epoch() << "), capacity "
            << space.capacity_bytes << " bytes, used " << space.used_bytes;
  const RoleEvents::Event e = events->Wait();
  if (e.kind == RoleEvents::Kind::kStop && replicator && config.handover_on_stop) {
    // A planned stop of the primary is a switchover when it can be: the
    // replica takes over at once with nothing lost, instead of after the
    // lease. Without an in-sync replica it just stops.
    absl::Status s = replicator->Switchover();
    if (s.ok()) {
      LOG(INFO) << "stop: handed the primary role over to " << config.peer;
    } else {
      LOG(WARNING) << "stop: no handover (" << s << "); stopping without one";
    }
  }
  (*volume)->sessions().Shutdown();  // ends the Subscribe streams
  cluster.Shutdown();                // ends the agents' long polls
  if (e.kind == RoleEvents::Kind::kStop && replicator) replicator->Stop();
  // Fenced: calls under way are answered (UNAVAILABLE: no longer serving).
  StopServing(server.get(), absl::Seconds(e.kind == RoleEvents::Kind::kStop ? 5 : 1));
  if (replicator) replicator->Stop();
  return e;
}

}  // namespace

int RunServer(const ServerConfig& config, const sigset_t& stop_signals) {
  // Outlives every role; the signal thread may use it until the process ends.
  static RoleEvents* const events = new RoleEvents();
  std::thread([stop_signals] {
    sigset_t set = stop_signals;
    int sig = 0;
    sigwait(&set, &sig);
    LOG(INFO) << "signal " << sig << ": shutting down";
    events->Stop();
  }).detach();
  if (config.role == "witness") return RunWitness(config, events);

  const bool replicated = !config.peer.empty();
  WitnessCall witness_call;
  if (replicated) witness_call = MakeWitnessCall(config);
  uint64_t promoted_epoch = 0;
  while (!events->stopping()) {
    DataDirInfo data;
    if (!InspectData(config, replicated, &data)) return 1;
    Decision decision;
    if (replicated) {
      decision = DecideRole(config, data, witness_call, promoted_epoch, events);
      if (events->stopping()) break;
    } else {
      decision.primary = true;
    }
    std::optional<RoleEvents::Event> end =
        decision.primary ? RunPrimary(config, decision, replicated, witness_call, events)
                         : RunReplica(config, witness_call, events);
    if (!end) return 1;
    switch (end->kind) {
      case RoleEvents::Kind::kPromoted:
        LOG(WARNING) << "role change: promoted to the primary of epoch " << end->epoch;
        promoted_epoch = end->epoch;
        break;
      case RoleEvents::Kind::kFenced:
        LOG(WARNING) << "role change: fenced; rejoining as the replica";
        promoted_epoch = 0;
        break;
      case RoleEvents::Kind::kStop:
      case RoleEvents::Kind::kNone:
        break;
    }
  }
  return 0;
}

}  // namespace grantfs
