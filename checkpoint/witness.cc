#include "checkpoint/witness.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/keepalive.h"
#include "common/transport.h"
#include "glog/logging.h"

namespace grantfs {
namespace {

constexpr char kStateFile[] = "witness.state";

absl::Status ErrnoError(int err, const std::string& what) {
  const std::string msg = absl::StrCat(what, ": ", strerror(err));
  if (err == ENOENT) return absl::NotFoundError(msg);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(msg);
  return absl::InternalError(msg);
}

// Writes all of `data` to `fd`.
bool WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += n;
  }
  return true;
}

absl::StatusOr<std::string> ReadWhole(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, "open " + path);
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      close(fd);
      return ErrnoError(err, "read " + path);
    }
    if (n == 0) break;
    out.append(buf, n);
  }
  close(fd);
  return out;
}

// A state that could have been written by Persist. Protobuf parses many
// byte strings (the empty one, most truncations) as some message, so parsing
// alone does not tell a corrupt file.
bool Plausible(const proto::WitnessState& s) {
  if (!s.GetReflection()->GetUnknownFields(s).empty()) return false;
  if (s.epoch() == 0) {
    return s.primary().empty() && s.replica().empty() && !s.replica_in_sync() &&
           s.volume_id().empty() && s.data_epoch() == 0;
  }
  return !s.primary().empty() && s.replica() != s.primary() &&
         (!s.replica_in_sync() || !s.replica().empty());
}

std::string Describe(const proto::WitnessState& s) {
  return absl::StrCat("epoch ", s.epoch(), " primary '", s.primary(), "' replica '", s.replica(),
                      "'", s.replica_in_sync() ? " (in sync)" : "",
                      s.volume_id().empty() ? "" : " volume " + s.volume_id(), " data epoch ",
                      s.data_epoch());
}

// Why the data `req` says its sender holds must not be primary ("" when it
// may): a restarted server whose data disk was not mounted, was replaced,
// or was rolled back must not become primary and have its (empty, other or
// old) data streamed over the replica's good copy.
std::string DataRefusal(const proto::WitnessState& s, const proto::WitnessRequest& req) {
  if (!req.has_data()) {
    // At epoch 0 no volume exists yet: the first primary creates it.
    if (s.epoch() == 0) return "";
    return absl::StrCat(req.server(), " has no data (its data directory is empty), but ",
                        s.volume_id().empty() ? "the volume" : "volume " + s.volume_id(),
                        " has been served up to epoch ", s.epoch(), ": its data is elsewhere");
  }
  const proto::VolumeIdentity& d = req.data();
  if (!s.volume_id().empty() && !d.volume_id().empty() && d.volume_id() != s.volume_id()) {
    return absl::StrCat(req.server(), " holds volume ", d.volume_id(), ", not volume ",
                        s.volume_id(), " of this cluster");
  }
  if (d.data_epoch() < s.data_epoch()) {
    return absl::StrCat(req.server(), " holds data epoch ", d.data_epoch(),
                        " of the volume, older than data epoch ", s.data_epoch(),
                        " that a primary served");
  }
  return "";
}

// Notes in `next` the data of a granted request's sender (the primary, or
// the one that just became or stopped being it): the volume, once known,
// and the newest data epoch.
void RecordData(const proto::WitnessRequest& req, proto::WitnessState* next) {
  if (!req.has_data() || req.data().volume_id().empty()) return;
  if (next->volume_id().empty()) next->set_volume_id(req.data().volume_id());
  if (next->volume_id() != req.data().volume_id()) return;
  next->set_data_epoch(std::max(next->data_epoch(), req.data().data_epoch()));
}

// The fields each op needs; "" when `req` has them.
std::string MissingFields(const proto::WitnessRequest& req) {
  switch (req.op()) {
    case proto::WitnessRequest::GET:
      return "";
    case proto::WitnessRequest::CLAIM:
      return req.server().empty() ? "CLAIM needs server" : "";
    case proto::WitnessRequest::RENEW:
    case proto::WitnessRequest::DEGRADE:
      if (req.server().empty() || req.epoch() == 0) {
        return absl::StrCat(proto::WitnessRequest::Op_Name(req.op()), " needs server and epoch");
      }
      return "";
    case proto::WitnessRequest::IN_SYNC:
    case proto::WitnessRequest::HANDOVER:
      if (req.server().empty() || req.epoch() == 0 || req.replica().empty()) {
        return absl::StrCat(proto::WitnessRequest::Op_Name(req.op()),
                            " needs server, epoch and replica");
      }
      return "";
    default:
      return absl::StrCat("unknown op ", static_cast<int>(req.op()));
  }
}

}  // namespace

WitnessService::WitnessService(const WitnessOptions& options, const proto::WitnessState& state)
    : options_(options),
      path_((std::filesystem::path(options.dir) / kStateFile).string()),
      state_(state),
      // After a (re)start nobody knows when the primary last renewed: the
      // lease counts as just renewed, so a restart never shortens it.
      lease_expiry_(options.clock->Now() + HeldLease(options.lease)),
      last_ran_(options.clock->Now()) {
  if (options_.stall_tick > absl::ZeroDuration()) ticker_ = std::thread([this] { TickLoop(); });
}

WitnessService::~WitnessService() {
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
  }
  if (ticker_.joinable()) ticker_.join();
}

void WitnessService::NoteRunning(absl::Time now) {
  if (options_.stall_tick <= absl::ZeroDuration()) return;
  const absl::Duration gap = now - last_ran_;
  if (gap > 4 * options_.stall_tick && state_.epoch() != 0) {
    LOG(WARNING) << "witness: did not run for " << absl::FormatDuration(gap)
                 << " (paused or starved); the lease of " << state_.primary()
                 << " counts as renewed now";
    lease_expiry_ = std::max(lease_expiry_, now + HeldLease(options_.lease));
  }
  last_ran_ = std::max(last_ran_, now);
}

void WitnessService::TickLoop() {
  absl::MutexLock l(&mu_);
  auto stop = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stopping_; };
  while (!mu_.AwaitWithTimeout(absl::Condition(&stop), options_.stall_tick)) {
    NoteRunning(options_.clock->Now());
  }
}

absl::StatusOr<std::unique_ptr<WitnessService>> WitnessService::Open(
    const WitnessOptions& options) {
  if (options.dir.empty()) return absl::InvalidArgumentError("witness: no state directory");
  if (options.lease <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("witness: the lease must be positive");
  }
  if (options.clock == nullptr) return absl::InvalidArgumentError("witness: no clock");
  std::error_code ec;
  std::filesystem::create_directories(options.dir, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("witness: cannot create ", options.dir, ": ", ec.message()));
  }
  const std::string path = (std::filesystem::path(options.dir) / kStateFile).string();
  proto::WitnessState state;
  absl::StatusOr<std::string> data = ReadWhole(path);
  if (absl::IsNotFound(data.status())) {
    LOG(WARNING) << "witness: no " << path << ": starting at epoch 0 (nobody has been primary)";
  } else if (!data.ok()) {
    return data.status();
  } else if (data->empty() || !state.ParseFromString(*data) || !Plausible(state)) {
    return absl::DataLossError(absl::StrCat("witness: ", path, " is corrupt (", data->size(),
                                            " bytes); refusing to guess the epoch"));
  } else {
    LOG(INFO) << "witness: loaded " << path << ": " << Describe(state);
  }
  std::unique_ptr<WitnessService> w(new WitnessService(options, state));
  LOG(INFO) << "witness: lease " << absl::FormatDuration(options.lease)
            << ", counted as renewed now";
  return w;
}

absl::Status WitnessService::Persist(const proto::WitnessState& state) const {
  const std::string tmp = path_ + ".tmp";
  std::string data;
  if (!state.SerializeToString(&data)) return absl::InternalError("witness: cannot serialize");
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError(errno, "witness: open " + tmp);
  if (!WriteAll(fd, data) || fsync(fd) != 0) {
    const int err = errno;
    close(fd);
    unlink(tmp.c_str());
    return ErrnoError(err, "witness: write " + tmp);
  }
  if (close(fd) != 0) return ErrnoError(errno, "witness: close " + tmp);
  if (rename(tmp.c_str(), path_.c_str()) != 0) {
    return ErrnoError(errno, "witness: rename to " + path_);
  }
  // The rename is durable only once the directory is.
  int dfd = open(options_.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return ErrnoError(errno, "witness: open " + options_.dir);
  const int rc = fsync(dfd);
  const int err = errno;
  close(dfd);
  if (rc != 0) return ErrnoError(err, "witness: fsync " + options_.dir);
  return absl::OkStatus();
}

proto::WitnessState WitnessService::state() const {
  absl::MutexLock l(&mu_);
  return state_;
}

grpc::Status WitnessService::Update(grpc::ServerContext* ctx, const proto::WitnessRequest* req,
                                    proto::WitnessReply* reply) {
  if (grpc::Status auth = options_.transport.Authorize(*ctx, kServerPeer, "witness"); !auth.ok())
    return auth;
  absl::StatusOr<proto::WitnessReply> r = Decide(*req);
  if (!r.ok()) return ToGrpcStatus(r.status());
  *reply = *std::move(r);
  return grpc::Status::OK;
}

absl::StatusOr<proto::WitnessReply> WitnessService::Decide(const proto::WitnessRequest& req) {
  const std::string op_name = proto::WitnessRequest::Op_IsValid(req.op())
                                  ? proto::WitnessRequest::Op_Name(req.op())
                                  : absl::StrCat("op ", static_cast<int>(req.op()));
  if (std::string missing = MissingFields(req); !missing.empty()) {
    LOG(WARNING) << "witness: invalid " << op_name << " from '" << req.server() << "': " << missing;
    return absl::InvalidArgumentError(missing);
  }

  absl::MutexLock l(&mu_);
  const absl::Time now = options_.clock->Now();
  // After a stall of the witness itself, before any decision (the ticker
  // may not have run yet).
  NoteRunning(now);
  proto::WitnessState next = state_;
  std::string refused;        // non-empty: not granted, and why
  bool refused_data = false;  // ... because of the sender's data (DataRefusal)
  bool renew = false;         // the (new) primary's lease starts again
  auto fenced = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return absl::StrCat("fenced: epoch ", state_.epoch(), " is owned by ", state_.primary());
  };
  const bool is_primary =
      state_.epoch() != 0 && state_.primary() == req.server() && state_.epoch() == req.epoch();

  switch (req.op()) {
    case proto::WitnessRequest::GET:
      break;
    case proto::WitnessRequest::CLAIM:
      refused = DataRefusal(state_, req);
      refused_data = !refused.empty();
      if (refused_data) {
        // Whoever it is: not with this data, however long it waits.
      } else if (state_.epoch() == 0 || state_.primary() == req.server()) {
        // The first primary, or the primary restarting: its in-memory log
        // is gone, so its replica no longer counts as in sync.
      } else if (now < lease_expiry_) {
        refused = absl::StrCat("primary ", state_.primary(), " holds a lease for another ",
                               absl::ToInt64Milliseconds(lease_expiry_ - now), " ms");
      } else if (state_.replica() != req.server() || !state_.replica_in_sync()) {
        refused =
            absl::StrCat(req.server(), " is not the in-sync replica (replica '", state_.replica(),
                         "'", state_.replica_in_sync() ? ", in sync)" : ", not in sync)");
      }
      if (refused.empty()) {
        next.set_epoch(state_.epoch() + 1);
        next.set_primary(req.server());
        next.clear_replica();
        next.set_replica_in_sync(false);
        renew = true;
      }
      break;
    case proto::WitnessRequest::RENEW:
      if (!is_primary) {
        refused = fenced();
      } else {
        // A replica promoted by a handover starts with a RENEW: its copy
        // is checked like a claimant's.
        refused = DataRefusal(state_, req);
        refused_data = !refused.empty();
        renew = !refused_data;
      }
      break;
    case proto::WitnessRequest::DEGRADE:
      if (is_primary) {
        next.set_replica_in_sync(false);
      } else {
        refused = fenced();
      }
      break;
    case proto::WitnessRequest::IN_SYNC:
      if (!is_primary) {
        refused = fenced();
      } else if (req.replica() == req.server()) {
        refused = "a primary cannot be its own replica";
      } else {
        next.set_replica(req.replica());
        next.set_replica_in_sync(true);
      }
      break;
    case proto::WitnessRequest::HANDOVER:
      if (!is_primary) {
        refused = fenced();
      } else if (req.replica() != state_.replica() || !state_.replica_in_sync()) {
        refused =
            absl::StrCat(req.replica(), " is not the in-sync replica (replica '", state_.replica(),
                         "'", state_.replica_in_sync() ? ", in sync)" : ", not in sync)");
      } else {
        next.set_epoch(state_.epoch() + 1);
        next.set_primary(req.replica());
        next.set_replica(req.server());
        next.set_replica_in_sync(false);
        renew = true;
      }
      break;
    default:
      return absl::InvalidArgumentError("unknown op");  // MissingFields caught it
  }

  if (refused.empty() && req.op() != proto::WitnessRequest::GET) RecordData(req, &next);
  // Durable before anybody is told: a witness that restarts must not grant
  // the same epoch twice.
  if (refused.empty() && next.SerializeAsString() != state_.SerializeAsString()) {
    if (absl::Status s = Persist(next); !s.ok()) {
      LOG(ERROR) << "witness: " << op_name << " from '" << req.server()
                 << "' not granted, the state could not be written: " << s;
      return absl::InternalError(absl::StrCat("witness cannot write its state: ", s.message()));
    }
    state_ = next;
  }
  if (renew) lease_expiry_ = now + HeldLease(options_.lease);

  proto::WitnessReply reply;
  reply.set_granted(refused.empty());
  reply.set_reason(refused);
  reply.set_refused_data(refused_data);
  reply.set_lease_ms(absl::ToInt64Milliseconds(options_.lease));
  *reply.mutable_state() = state_;
  if (req.op() == proto::WitnessRequest::RENEW && refused.empty()) {
    VLOG(1) << "witness: RENEW from '" << req.server() << "' at epoch " << req.epoch();
  } else if (refused_data) {
    LOG(WARNING) << "witness: " << op_name << " from '" << req.server()
                 << "' refused for its data: " << refused << "; now " << Describe(state_);
  } else {
    LOG(INFO) << "witness: " << op_name << " from '" << req.server() << "' epoch " << req.epoch()
              << (req.replica().empty() ? "" : " replica '" + req.replica() + "'") << ": "
              << (refused.empty() ? "granted" : "refused: " + refused) << "; now "
              << Describe(state_);
  }
  return reply;
}

WitnessClient::WitnessClient(const std::string& address, const Transport& transport,
                             std::shared_ptr<grpc::Channel> channel)
    : address_(address), transport_(transport), channel_(std::move(channel)) {
  if (channel_ == nullptr) {
    grpc::ChannelArguments args;
    // A witness that comes back is used again within a lease, not after
    // gRPC's default reconnect backoff of up to 2 minutes.
    SetReconnect(&args, 500);
    channel_ = transport_.Connect(address_, args);
  }
  stub_ = proto::Witness::NewStub(channel_);
}

absl::StatusOr<proto::WitnessReply> WitnessClient::Update(const proto::WitnessRequest& req,
                                                          absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(deadline));
  transport_.AddTo(&ctx);
  proto::WitnessReply reply;
  grpc::Status s = stub_->Update(&ctx, req, &reply);
  if (s.ok()) return reply;
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
    // A call on a channel that is reconnecting fails at once, and nothing
    // polls the connection attempt meanwhile: poll it for what is left of
    // this call's time, at most 100 ms (WaitForConnected,
    // common/keepalive.h), so that the next call finds it connected. Not
    // asked again here: the call may have reached the witness.
    const absl::Duration left = deadline - absl::Now();
    if (left > absl::ZeroDuration()) {
      WaitForConnected(channel_.get(), std::min(left, absl::Milliseconds(100)));
    }
  }
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE ||
      s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return absl::UnavailableError(
        absl::StrCat("witness ", address_, " unreachable: ", s.error_message()));
  }
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat("witness ", address_, ": ", s.error_message()));
}

}  // namespace grantfs
