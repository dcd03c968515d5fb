#include "server/node_table.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace grantfs {
namespace {

constexpr size_t kNodeNameMax = 64;
constexpr size_t kVersionMax = 64;
constexpr int kMountsMax = 1024;
constexpr size_t kReasonMax = 512;

bool ValidNodeName(const std::string& name) {
  if (name.empty() || name.size() > kNodeNameMax) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      return false;
    }
  }
  return true;
}

}  // namespace

NodeTable::NodeTable(const NodeTableOptions& options)
    : options_(options), made_(options.clock->Now()) {}

absl::Duration NodeTable::Settling() const {
  return std::max(absl::ZeroDuration(), made_ + options_.node_timeout - options_.clock->Now());
}

absl::Status NodeTable::Heartbeat(const proto::NodeHeartbeatRequest& hb, const std::string& peer,
                                  const std::string& address,
                                  const std::set<std::string>* table_paths) {
  if (!ValidNodeName(hb.node())) {
    return absl::InvalidArgumentError(
        absl::StrCat("node name '", absl::CHexEscape(hb.node().substr(0, kNodeNameMax)),
                     "': 1 to 64 of the characters A-Z a-z 0-9 . _ -"));
  }
  if (hb.agent_version().size() > kVersionMax) {
    return absl::InvalidArgumentError("agent version longer than 64 bytes");
  }
  if (hb.mounts_size() > kMountsMax) {
    return absl::InvalidArgumentError(absl::StrCat("more than ", kMountsMax, " mounts reported"));
  }
  for (const proto::NodeMountState& m : hb.mounts()) {
    if (m.path().size() > 1024) return absl::InvalidArgumentError("mount path over 1024 bytes");
  }
  // A node's own certificate ("node:NAME") speaks for NAME only; the shared
  // one ("node:default") for any name.
  if (absl::StartsWith(peer, "node:") && peer != "node:default" &&
      peer != absl::StrCat("node:", hb.node())) {
    return absl::PermissionDeniedError(
        absl::StrCat("certificate '", peer, "' may not report as node '", hb.node(), "'"));
  }
  const absl::Time now = options_.clock->Now();
  absl::MutexLock l(&mu_);
  for (auto i = nodes_.begin(); i != nodes_.end();) {
    if (i->first != hb.node() && now - i->second.last >= options_.forget_after) {
      LOG(INFO) << "node '" << i->first << "' forgotten: no heartbeat for "
                << absl::FormatDuration(absl::Trunc(now - i->second.last, absl::Seconds(1)));
      i = nodes_.erase(i);
    } else {
      ++i;
    }
  }
  auto it = nodes_.find(hb.node());
  if (it == nodes_.end()) {
    if (nodes_.size() >= options_.max_nodes) {
      auto oldest = nodes_.begin();
      for (auto i = nodes_.begin(); i != nodes_.end(); ++i) {
        if (i->second.last < oldest->second.last) oldest = i;
      }
      if (now - oldest->second.last < options_.node_timeout) {
        return absl::ResourceExhaustedError(
            absl::StrCat("the primary already knows ", nodes_.size(), " live nodes"));
      }
      nodes_.erase(oldest);
    }
    it = nodes_.emplace(hb.node(), Node()).first;
    it->second.info.set_node(hb.node());
    it->second.info.set_first_seen_ns(options_.wall_clock->NowNanos());
    LOG(INFO) << "node '" << hb.node() << "' registered: agent " << hb.agent_version() << " at "
              << address << (peer.empty() ? "" : " (\"" + peer + "\")");
  } else if (now - it->second.last >= options_.node_timeout) {
    LOG(INFO) << "node '" << hb.node() << "' is back after "
              << absl::FormatDuration(absl::Trunc(now - it->second.last, absl::Seconds(1)))
              << " without a heartbeat (agent " << hb.agent_version() << " at " << address << ")";
  }
  Node& n = it->second;
  if (hb.instance() != 0 && n.instance != 0 && hb.instance() != n.instance) {
    // Refused only while the agent that replaced it is alive: once that one
    // is silent for the node timeout, the caller is the node's agent again
    // (else a replaced agent that keeps calling would be locked out forever).
    if (hb.instance() == n.replaced_instance && now - n.replaced_seen < options_.node_timeout &&
        now - n.last < options_.node_timeout) {
      // The agent replaced by another still calls: two agents, one name.
      n.replaced_seen = now;
      n.conflict = absl::StrCat("two agents report as this node: ", n.info.address(), " and ",
                                address, " (give each node its own name)");
      if (now - n.conflict_logged > absl::Seconds(10)) {
        LOG(WARNING) << "node '" << hb.node() << "': " << n.conflict << "; refusing " << address;
        n.conflict_logged = now;
      }
      return absl::AlreadyExistsError(
          absl::StrCat("node name '", hb.node(), "' is taken by another agent, at ",
                       n.info.address(), ": give each node its own --node"));
    }
    // A new agent of this node (a restart), or the other one of two.
    n.replaced_instance = n.instance;
    n.replaced_seen = n.last;
  }
  if (hb.instance() != 0) n.instance = hb.instance();
  n.last = now;
  n.info.set_agent_version(hb.agent_version());
  n.info.set_peer(peer);
  n.info.set_address(address);
  n.info.clear_mounts();
  for (const proto::NodeMountState& m : hb.mounts()) {
    if (table_paths != nullptr && table_paths->count(m.path()) == 0) continue;
    proto::NodeMountState* s = n.info.add_mounts();
    *s = m;
    if (s->reason().size() > kReasonMax) s->mutable_reason()->resize(kReasonMax);
  }
  return absl::OkStatus();
}

std::vector<proto::NodeInfo> NodeTable::List() {
  const absl::Time now = options_.clock->Now();
  absl::MutexLock l(&mu_);
  std::vector<proto::NodeInfo> out;
  out.reserve(nodes_.size());
  for (const auto& [name, n] : nodes_) {
    proto::NodeInfo info = n.info;
    info.set_heartbeat_age_ms(absl::ToInt64Milliseconds(now - n.last));
    info.set_alive(now - n.last < options_.node_timeout);
    if (now - n.replaced_seen < options_.node_timeout) info.set_conflict(n.conflict);
    out.push_back(std::move(info));
  }
  return out;
}

}  // namespace grantfs
