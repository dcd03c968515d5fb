#include "client/global_mounts_json.h"

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace grantfs {
namespace {

using State = proto::NodeMountState;

void Set(google::protobuf::Struct* s, const char* name, const std::string& v) {
  (*s->mutable_fields())[name].set_string_value(v);
}
void SetNumber(google::protobuf::Struct* s, const char* name, double v) {
  (*s->mutable_fields())[name].set_number_value(v);
}
void SetBool(google::protobuf::Struct* s, const char* name, bool v) {
  (*s->mutable_fields())[name].set_bool_value(v);
}

}  // namespace

const char* MountStateName(State::State state) {
  switch (state) {
    case State::PENDING:
      return "pending";
    case State::MOUNTED:
      return "mounted";
    case State::FAILED:
      return "failed";
    case State::BUSY:
      return "busy";
    case State::UNMOUNTED:
      return "unmounted";
    default:
      return "unknown";
  }
}

std::vector<NodeView> NodesOf(const proto::ListMountsReply& reply,
                              const proto::GlobalMountRecord& rec) {
  std::vector<NodeView> out;
  for (const proto::NodeInfo& n : reply.nodes()) {
    NodeView v;
    v.node = n.node();
    v.alive = n.alive();
    v.state = "pending";
    for (const State& m : n.mounts()) {
      if (m.path() != rec.path()) continue;
      if (m.generation() == rec.generation()) {
        v.state = MountStateName(m.state());
        v.reason = m.reason();
      }
      v.last_state = MountStateName(m.state());
    }
    if (!v.alive) v.state = "down";
    out.push_back(std::move(v));
  }
  return out;
}

bool Settled(const std::vector<NodeView>& nodes, bool removing) {
  for (const NodeView& v : nodes) {
    if (!v.alive) continue;
    const bool final = removing
                           ? (v.state == "unmounted" || v.state == "busy" || v.state == "failed")
                           : (v.state == "mounted" || v.state == "failed");
    if (!final) return false;
  }
  return true;
}

google::protobuf::Struct NodeViewsToStruct(const std::vector<NodeView>& nodes) {
  google::protobuf::Struct out;
  auto* list = (*out.mutable_fields())["nodes"].mutable_list_value();
  for (const NodeView& v : nodes) {
    google::protobuf::Struct* s = list->add_values()->mutable_struct_value();
    Set(s, "node", v.node);
    Set(s, "state", v.state);
    Set(s, "reason", v.reason);
    SetBool(s, "alive", v.alive);
    Set(s, "last_state", v.last_state);
  }
  return out;
}

google::protobuf::Struct MountsToStruct(const std::string& server,
                                        const proto::ListMountsReply& reply) {
  google::protobuf::Struct out;
  Set(&out, "server", server);
  auto* list = (*out.mutable_fields())["mounts"].mutable_list_value();
  for (const proto::GlobalMountRecord& rec : reply.table().mounts()) {
    google::protobuf::Struct* s = list->add_values()->mutable_struct_value();
    Set(s, "path", rec.path());
    Set(s, "subdir", rec.subdir());
    Set(s, "options", rec.options());
    Set(s, "generation", absl::StrCat(rec.generation()));
    SetBool(s, "removing", rec.removing());
    SetBool(s, "force", rec.force());
    Set(s, "created_by", rec.created_by());
    Set(s, "created_at",
        absl::FormatTime(absl::RFC3339_sec, absl::FromUnixNanos(rec.created_ns()),
                         absl::UTCTimeZone()));
    (*s->mutable_fields())["nodes"] = NodeViewsToStruct(NodesOf(reply, rec)).fields().at("nodes");
  }
  return out;
}

google::protobuf::Struct NodesToStruct(const std::string& server,
                                       const proto::ListMountsReply& reply) {
  google::protobuf::Struct out;
  Set(&out, "server", server);
  SetNumber(&out, "node_timeout_ms", static_cast<double>(reply.node_timeout_ms()));
  SetNumber(&out, "settling_ms", static_cast<double>(reply.settling_ms()));
  auto* list = (*out.mutable_fields())["nodes"].mutable_list_value();
  for (const proto::NodeInfo& n : reply.nodes()) {
    google::protobuf::Struct* s = list->add_values()->mutable_struct_value();
    Set(s, "node", n.node());
    Set(s, "agent_version", n.agent_version());
    Set(s, "peer", n.peer());
    Set(s, "address", n.address());
    SetBool(s, "alive", n.alive());
    SetNumber(s, "heartbeat_age_ms", static_cast<double>(n.heartbeat_age_ms()));
    Set(s, "conflict", n.conflict());
    int counts[5] = {0, 0, 0, 0, 0};
    for (const State& m : n.mounts()) {
      if (m.state() >= 0 && m.state() < 5) ++counts[m.state()];
    }
    SetNumber(s, "pending", counts[State::PENDING]);
    SetNumber(s, "mounted", counts[State::MOUNTED]);
    SetNumber(s, "failed", counts[State::FAILED]);
    SetNumber(s, "busy", counts[State::BUSY]);
  }
  return out;
}

}  // namespace grantfs
