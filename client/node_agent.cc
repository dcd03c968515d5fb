#include "client/node_agent.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/global_mounts_json.h"
#include "common/mount_spec.h"
#include "glog/logging.h"

namespace grantfs {
namespace {

using State = proto::NodeMountState;

bool SameTable(const proto::GlobalMountTable& a, const proto::GlobalMountTable& b) {
  return a.incarnation() == b.incarnation() && a.version() == b.version();
}

}  // namespace

namespace {

uint64_t RandomInstance() {
  std::random_device rd;
  uint64_t v = 0;
  while (v == 0) v = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return v;
}

}  // namespace

NodeAgent::NodeAgent(const NodeAgentOptions& options)
    : options_(options), instance_(RandomInstance()) {}

NodeAgent::~NodeAgent() { Stop(); }

std::map<std::string, NodeAgent::Spec> NodeAgent::ParseStateFile(const std::string& text) {
  std::map<std::string, Spec> out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::vector<std::string> fields;
    bool ok = true;
    // Not stripped: an empty options field ends the line with a tab.
    for (absl::string_view f : absl::StrSplit(line, '\t')) {
      std::string v, error;
      if (!absl::CUnescape(f, &v, &error)) {
        LOG(WARNING) << "node agent: state file: ignoring a line that does not parse: " << error;
        ok = false;
        break;
      }
      fields.push_back(std::move(v));
    }
    if (!ok || (fields.size() != 1 && fields.size() != 3)) continue;
    const std::string& path = fields[0];
    absl::StatusOr<std::string> p = NormalizeMountPath(path);
    if (!p.ok() || *p != path) {
      LOG(WARNING) << "node agent: state file: ignoring '" << absl::CHexEscape(path)
                   << "': not a mount path";
      continue;
    }
    Spec spec;
    if (fields.size() == 3) {
      spec.known = true;
      spec.subdir = fields[1];
      spec.options = fields[2];
    }
    out[path] = spec;
  }
  return out;
}

std::string NodeAgent::FormatStateFile(const std::map<std::string, Spec>& mounts) {
  std::string out;
  for (const auto& [path, spec] : mounts) {
    absl::StrAppend(&out, absl::CHexEscape(path));
    if (spec.known) {
      absl::StrAppend(&out, "\t", absl::CHexEscape(spec.subdir), "\t",
                      absl::CHexEscape(spec.options));
    }
    absl::StrAppend(&out, "\n");
  }
  return out;
}

absl::Status NodeAgent::Start() {
  if (options_.cluster == nullptr || options_.mounter == nullptr || options_.clock == nullptr) {
    return absl::InvalidArgumentError("node agent: cluster, mounter and clock are required");
  }
  if (absl::StatusOr<std::string> r = NormalizeMountPath(options_.allowed_root);
      !r.ok() || *r != options_.allowed_root) {
    return absl::InvalidArgumentError(
        absl::StrCat("allowed root '", absl::CHexEscape(options_.allowed_root),
                     "': not a normalized absolute path other than /",
                     r.ok() ? "" : absl::StrCat(": ", r.status().message())));
  }
  if (options_.node.empty() || options_.node.size() > 64 ||
      options_.node.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                      "0123456789._-") != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("node name '", absl::CHexEscape(options_.node),
                     "': 1 to 64 of the characters A-Z a-z 0-9 . _ -"));
  }
  std::map<std::string, Spec> managed;
  if (!options_.state_file.empty()) {
    std::ifstream in(options_.state_file);
    if (in) {
      std::ostringstream text;
      text << in.rdbuf();
      managed = ParseStateFile(text.str());
    } else if (errno != ENOENT) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot read the state file ", options_.state_file, ": ", strerror(errno)));
    }
  }
  {
    absl::MutexLock l(&mu_);
    if (started_) return absl::FailedPreconditionError("node agent: started already");
    started_ = true;
    managed_ = std::move(managed);
  }
  LOG(INFO) << "node agent '" << options_.node << "' (version " << options_.version << "): servers "
            << absl::StrJoin(options_.cluster->addresses(), ",") << "; long poll "
            << absl::FormatDuration(options_.poll) << ", retries every "
            << absl::FormatDuration(options_.retry);
  heartbeat_thread_ = std::thread([this] { HeartbeatLoop(); });
  reconcile_thread_ = std::thread([this] { ReconcileLoop(); });
  return absl::OkStatus();
}

void NodeAgent::Stop() {
  {
    absl::MutexLock l(&mu_);
    if (stop_) return;
    stop_ = true;
    if (in_flight_ != nullptr) in_flight_->TryCancel();
  }
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
  if (reconcile_thread_.joinable()) reconcile_thread_.join();
  if (!options_.unmount_on_stop) return;
  for (const std::string& path : Managed()) {
    absl::Status s = options_.mounter->Unmount(path, /*lazy=*/false);
    if (s.ok()) {
      LOG(INFO) << "node agent: stop: unmounted " << path;
      SetManaged(path, std::nullopt);
    } else {
      LOG(WARNING) << "node agent: stop: " << path << " stays mounted: " << s.message();
    }
  }
}

bool NodeAgent::stopping() {
  absl::MutexLock l(&mu_);
  return stop_;
}

bool NodeAgent::connected() {
  absl::MutexLock l(&mu_);
  return connected_;
}

std::vector<proto::NodeMountState> NodeAgent::States() {
  absl::MutexLock l(&mu_);
  std::vector<proto::NodeMountState> out;
  for (const auto& [path, local] : states_) out.push_back(local.state);
  return out;
}

std::set<std::string> NodeAgent::Managed() {
  absl::MutexLock l(&mu_);
  std::set<std::string> out;
  for (const auto& [path, spec] : managed_) out.insert(path);
  return out;
}

std::optional<NodeAgent::Spec> NodeAgent::ManagedSpec(const std::string& path) {
  absl::MutexLock l(&mu_);
  auto it = managed_.find(path);
  if (it == managed_.end()) return std::nullopt;
  return it->second;
}

void NodeAgent::SaveStateLocked() {
  if (options_.state_file.empty()) return;
  // Written whole and renamed over: a crash leaves the old list or the new.
  const std::string tmp = options_.state_file + ".tmp";
  FILE* f = fopen(tmp.c_str(), "w");
  const std::string text = FormatStateFile(managed_);
  if (f == nullptr || fwrite(text.data(), 1, text.size(), f) != text.size() || fflush(f) != 0 ||
      fsync(fileno(f)) != 0) {
    LOG(ERROR) << "node agent: cannot write the state file " << tmp << ": " << strerror(errno);
    if (f != nullptr) fclose(f);
    return;
  }
  fclose(f);
  if (rename(tmp.c_str(), options_.state_file.c_str()) != 0) {
    LOG(ERROR) << "node agent: cannot rename " << tmp << ": " << strerror(errno);
  }
}

void NodeAgent::SetManaged(const std::string& path, const std::optional<Spec>& spec) {
  absl::MutexLock l(&mu_);
  bool changed = false;
  if (!spec) {
    changed = managed_.erase(path) > 0;
  } else {
    auto [it, added] = managed_.emplace(path, *spec);
    if (!added && spec->known && !(it->second == *spec)) {
      it->second = *spec;
      changed = true;
    }
    changed = changed || added;
  }
  if (changed) SaveStateLocked();
}

void NodeAgent::SetState(const std::string& path, uint64_t generation, State::State state,
                         const std::string& reason, absl::Duration retry_after) {
  absl::MutexLock l(&mu_);
  Local& local = states_[path];
  const bool changed = local.state.path() != path || local.state.generation() != generation ||
                       local.state.state() != state || local.state.reason() != reason;
  local.retry_at = options_.clock->Now() + retry_after;
  if (!changed) return;
  if (state == State::FAILED || state == State::BUSY) {
    LOG(WARNING) << "node agent: " << path << ": " << MountStateName(state) << ": " << reason;
  } else {
    LOG(INFO) << "node agent: " << path << ": " << MountStateName(state)
              << (reason.empty() ? "" : " (") << reason << (reason.empty() ? "" : ")");
  }
  local.state.set_path(path);
  local.state.set_generation(generation);
  local.state.set_state(state);
  local.state.set_reason(reason);
  local.state.set_since_ns(options_.clock->NowNanos());
  report_due_ = true;
  if (in_flight_ != nullptr) in_flight_->TryCancel();  // report it now
}

bool NodeAgent::Is(const std::string& path, uint64_t generation, State::State state) {
  absl::MutexLock l(&mu_);
  auto it = states_.find(path);
  return it != states_.end() && it->second.state.generation() == generation &&
         it->second.state.state() == state;
}

bool NodeAgent::Settled(const std::string& path, uint64_t generation, State::State state) {
  absl::MutexLock l(&mu_);
  auto it = states_.find(path);
  return it != states_.end() && it->second.state.generation() == generation &&
         it->second.state.state() == state && options_.clock->Now() < it->second.retry_at;
}

void NodeAgent::EnsureMounted(const proto::GlobalMountRecord& rec) {
  const std::string& path = rec.path();
  // The table is the primary's word, checked again before it runs anything.
  absl::StatusOr<std::string> p = NormalizeMountPath(path);
  absl::StatusOr<std::string> d = NormalizeMountSubdir(rec.subdir());
  absl::StatusOr<std::string> o = NormalizeMountOptions(rec.options());
  if (!p.ok() || *p != path || !d.ok() || !o.ok()) {
    const absl::Status bad = !p.ok() ? p.status() : !d.ok() ? d.status() : o.status();
    SetState(path, rec.generation(), State::FAILED,
             absl::StrCat("refused: ", bad.ok() ? "path not normalized" : bad.message()),
             absl::InfiniteDuration());
    return;
  }
  if (!BelowAllowedRoot(path)) {
    SetState(path, rec.generation(), State::FAILED,
             absl::StrCat("refused: outside the allowed root ", options_.allowed_root,
                          " (grantfs-node --allowed_root)"),
             absl::InfiniteDuration());
    return;
  }
  Spec want;
  want.known = true;
  want.subdir = rec.subdir();
  want.options = rec.options();
  switch (options_.mounter->Probe(path)) {
    case MountAt::kGrantFs: {
      const std::optional<Spec> had = ManagedSpec(path);
      if (!had && !options_.mounter->OfThisCluster(path)) {
        // Not made by this agent (no record) and not of this cluster's
        // servers: someone else's mount, neither adopted nor replaced.
        SetState(path, rec.generation(), State::FAILED,
                 absl::StrCat("a GrantFS mount of other servers is at ", path,
                              " (not made by this agent): not adopted"),
                 options_.retry);
        return;
      }
      if (!had || !had->known || *had == want) {
        // Ours, or the previous run's: adopted (with the table's spec when
        // there is no record of how it was made).
        SetManaged(path, want);
        SetState(path, rec.generation(), State::MOUNTED, "");
        return;
      }
      // Made for an older record of this path (removed and added again
      // while this agent was away): made again.
      if (Settled(path, rec.generation(), State::FAILED)) return;
      LOG(INFO) << "node agent: " << path << " is mounted with directory " << had->subdir
                << " and options '" << had->options << "'; the table now says " << want.subdir
                << " and '" << want.options << "': mounting it again";
      absl::Status s = options_.mounter->Unmount(path, /*lazy=*/false);
      if (!s.ok()) {
        SetState(path, rec.generation(), State::FAILED,
                 absl::StrCat("mounted with another directory or options, and cannot be "
                              "unmounted: ",
                              s.message()),
                 options_.retry);
        return;
      }
      SetManaged(path, std::nullopt);
      break;
    }
    case MountAt::kOther:
      SetState(path, rec.generation(), State::FAILED,
               absl::StrCat("another file system is mounted at ", path), options_.retry);
      return;
    case MountAt::kDead: {
      if (!ManagedSpec(path) && !options_.mounter->OfThisCluster(path)) {
        SetState(path, rec.generation(), State::FAILED,
                 absl::StrCat("a dead GrantFS mount of other servers is at ", path,
                              " (not made by this agent): not replaced"),
                 options_.retry);
        return;
      }
      LOG(WARNING) << "node agent: the mount at " << path
                   << " lost its daemon (ENOTCONN): detaching it and mounting again";
      absl::Status s = options_.mounter->Unmount(path, /*lazy=*/true);
      if (!s.ok()) {
        SetState(path, rec.generation(), State::FAILED,
                 absl::StrCat("its daemon died and it cannot be detached: ", s.message()),
                 options_.retry);
        return;
      }
      break;
    }
    case MountAt::kNothing:
      break;
  }
  if (Settled(path, rec.generation(), State::FAILED)) return;  // retried later
  // A retry keeps saying failed (with its reason) until it succeeds: no
  // pending and failed again, logged and reported, every retry period.
  if (!Is(path, rec.generation(), State::FAILED)) {
    SetState(path, rec.generation(), State::PENDING, "");
  }
  ++mount_attempts_;
  const absl::Time began = absl::Now();
  absl::Status s = options_.mounter->Mount(rec);
  mount_time_.Observe(absl::Now() - began);
  if (!s.ok()) ++mount_failures_;
  if (s.ok()) {
    SetManaged(path, want);
    SetState(path, rec.generation(), State::MOUNTED, "");
  } else {
    SetState(path, rec.generation(), State::FAILED, std::string(s.message()), options_.retry);
  }
}

bool NodeAgent::BelowAllowedRoot(const std::string& path) const {
  return StrictlyBelow(path, options_.allowed_root);
}

void NodeAgent::EnsureUnmounted(const std::string& path, uint64_t generation, bool force) {
  if (!BelowAllowedRoot(path) && !ManagedSpec(path)) {
    // Never mounted by this agent: nothing of ours to take down there.
    SetState(path, generation, State::UNMOUNTED, "outside the allowed root: not touched");
    return;
  }
  const MountAt at = options_.mounter->Probe(path);
  if (at == MountAt::kNothing || at == MountAt::kOther) {
    // kOther: not a GrantFS mount, so not one of ours to take down.
    SetManaged(path, std::nullopt);
    SetState(path, generation, State::UNMOUNTED, "");
    return;
  }
  if (!ManagedSpec(path) && !options_.mounter->OfThisCluster(path)) {
    SetState(path, generation, State::UNMOUNTED,
             "a GrantFS mount of other servers, not made by this agent: not touched");
    return;
  }
  if (Settled(path, generation, State::BUSY) || Settled(path, generation, State::FAILED)) return;
  ++unmount_attempts_;
  absl::Status s = options_.mounter->Unmount(path, force || at == MountAt::kDead);
  if (absl::IsFailedPrecondition(s)) {
    ++unmount_busy_;
  } else if (!s.ok()) {
    ++unmount_failures_;
  }
  if (s.ok()) {
    SetManaged(path, std::nullopt);
    SetState(path, generation, State::UNMOUNTED, force ? "detached (-f)" : "");
  } else if (absl::IsFailedPrecondition(s)) {
    SetState(path, generation, State::BUSY, std::string(s.message()), options_.retry);
  } else {
    SetState(path, generation, State::FAILED, std::string(s.message()), options_.retry);
  }
}

void NodeAgent::Reconcile(const proto::GlobalMountTable& table) {
  std::set<std::string> in_table;
  for (const proto::GlobalMountRecord& rec : table.mounts()) {
    if (stopping()) return;
    in_table.insert(rec.path());
    if (rec.removing()) {
      EnsureUnmounted(rec.path(), rec.generation(), rec.force());
    } else {
      EnsureMounted(rec);
    }
  }
  // Mounted by this agent, and gone from the table while it was away (or
  // forgotten by grantfsctl while this node was down).
  for (const std::string& path : Managed()) {
    if (stopping()) return;
    if (in_table.count(path) == 0) EnsureUnmounted(path, 0, /*force=*/false);
  }
  absl::MutexLock l(&mu_);
  for (auto it = states_.begin(); it != states_.end();) {
    if (in_table.count(it->first) == 0 && managed_.count(it->first) == 0) {
      it = states_.erase(it);
      report_due_ = true;
    } else {
      ++it;
    }
  }
}

void NodeAgent::ReconcileLoop() {
  uint64_t seen = 0;
  for (;;) {
    std::optional<proto::GlobalMountTable> table;
    {
      absl::MutexLock l(&mu_);
      auto ready = [this, &seen]()
                       ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || table_seq_ != seen; };
      mu_.AwaitWithTimeout(absl::Condition(&ready), options_.retry);
      if (stop_) return;
      seen = table_seq_;
      table = table_;
    }
    // No table yet (no primary answered): the mounts stay as they are.
    if (table) Reconcile(*table);
  }
}

void NodeAgent::HeartbeatLoop() {
  absl::Time last_complaint = absl::InfinitePast();
  for (;;) {
    proto::NodeHeartbeatRequest req;
    req.set_node(options_.node);
    req.set_agent_version(options_.version);
    req.set_instance(instance_);
    {
      absl::MutexLock l(&mu_);
      if (stop_) return;
      for (const auto& [path, local] : states_) *req.add_mounts() = local.state;
      if (table_) {
        req.set_known_incarnation(table_->incarnation());
        req.set_known_version(table_->version());
      }
      req.set_wait_ms(report_due_ ? 0 : absl::ToInt64Milliseconds(options_.poll));
      report_due_ = false;
    }
    proto::NodeHeartbeatReply reply;
    std::string server;
    const absl::Time sent = absl::Now();
    absl::Status s = options_.cluster->Call(
        &proto::Cluster::Stub::Heartbeat, req, &reply, absl::Milliseconds(req.wait_ms()),
        [this](grpc::ClientContext* ctx) {
          absl::MutexLock l(&mu_);
          in_flight_ = ctx;
          if (ctx != nullptr && (stop_ || report_due_)) ctx->TryCancel();
        },
        &server);
    if (s.ok()) {
      ++heartbeats_;
      absl::MutexLock l(&mu_);
      if (!connected_) LOG(INFO) << "node agent: registered with the primary " << server;
      connected_ = true;
      if (!table_ || !SameTable(*table_, reply.table())) {
        table_ = std::move(*reply.mutable_table());
        ++table_seq_;
        ++tables_;
      } else if (req.wait_ms() > 0) {
        // Answered before the wait with the table it has (the primary's
        // limit of waiting calls): not called again at once, which would
        // spin; a state to report or a stop still ends the pause.
        auto due = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || report_due_; };
        mu_.AwaitWithDeadline(absl::Condition(&due), sent + absl::Milliseconds(req.wait_ms()));
      }
      continue;
    }
    if (absl::IsCancelled(s)) continue;  // a state to report, or a stop
    ++heartbeat_failures_;
    {
      absl::MutexLock l(&mu_);
      if (stop_) return;
      connected_ = false;
      report_due_ = true;  // tell the primary everything once it answers
    }
    if (absl::Now() - last_complaint > absl::Seconds(10)) {
      LOG(WARNING) << "node agent: heartbeat failed: " << s
                   << " (mounts stay as they are; retrying)";
      last_complaint = absl::Now();
    }
    if (absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s)) {
      options_.cluster->WaitForAConnection(absl::Milliseconds(500));
    } else {
      // Refused (bad name, permission): retrying at once would only flood.
      for (int i = 0; i < 20 && !stopping(); ++i) absl::SleepFor(absl::Milliseconds(100));
    }
  }
}

}  // namespace grantfs

namespace grantfs {

std::string NodeAgent::RenderMetrics() {
  int by_state[5] = {0, 0, 0, 0, 0};
  bool connected = false;
  size_t managed = 0;
  {
    absl::MutexLock l(&mu_);
    for (const auto& [path, local] : states_) {
      const int st = local.state.state();
      if (st >= 0 && st < 5) ++by_state[st];
    }
    connected = connected_;
    managed = managed_.size();
  }
  MetricsText out;
  out.Gauge("grantfs_agent_connected", "1 while the primary answers the agent's heartbeats",
            connected ? 1 : 0);
  out.Counter("grantfs_agent_heartbeats_total", "heartbeats the primary answered",
              static_cast<double>(heartbeats_.load()));
  out.Counter("grantfs_agent_heartbeat_failures_total",
              "heartbeats that failed (no primary, refused)",
              static_cast<double>(heartbeat_failures_.load()));
  out.Counter("grantfs_agent_tables_total", "new global mount tables received",
              static_cast<double>(tables_.load()));
  const char* names[5] = {"pending", "mounted", "failed", "busy", "unmounted"};
  for (int i = 0; i < 5; ++i) {
    out.Gauge("grantfs_agent_mounts", "global mounts of this node by state", by_state[i],
              absl::StrCat("state=\"", names[i], "\""));
  }
  out.Gauge("grantfs_agent_managed_mounts", "mounts this agent made and keeps",
            static_cast<double>(managed));
  out.Counter("grantfs_agent_mount_attempts_total", "grantfs-mount runs",
              static_cast<double>(mount_attempts_.load()));
  out.Counter("grantfs_agent_mount_failures_total", "grantfs-mount runs that failed",
              static_cast<double>(mount_failures_.load()));
  out.Counter("grantfs_agent_unmount_attempts_total", "unmounts tried",
              static_cast<double>(unmount_attempts_.load()));
  out.Counter("grantfs_agent_unmount_busy_total", "unmounts refused because the mount was busy",
              static_cast<double>(unmount_busy_.load()));
  out.Counter("grantfs_agent_unmount_failures_total", "unmounts that failed otherwise",
              static_cast<double>(unmount_failures_.load()));
  mount_time_.Write(&out, "grantfs_agent_mount_seconds",
                    "how long grantfs-mount took to bring a mount up (or fail)", "");
  return out.text();
}

}  // namespace grantfs
