// libFuzzer target: what a node takes from outside for its global mounts.
// A node agent trusts no table: whoever answers as the primary (a
// compromised or buggy server, a man in the middle of an --insecure
// cluster) chooses what the agent runs grantfs-mount with. The input is a
// sequence of items:
//   - a global mount table (up to 8 records: any bytes as path, directory
//     and options, any generation, removing and force) the agent
//     reconciles (NodeAgent::Reconcile) over a node in memory
//     (client/fake_mounter.h), whose paths the input may also set to
//     mounted, dead, foreign or nothing, and make busy or failing;
//   - time passing (the agent's retries);
//   - a state file's text (NodeAgent::ParseStateFile), which must come back
//     the same through FormatStateFile;
//   - a configuration file's text (client/cluster_config.h);
//   - a heartbeat (any bytes as a NodeHeartbeatRequest) to the primary's
//     node table (server/node_table.h), which then lists nodes whose
//     reasons are cut to 512 bytes.
// Properties: no crash, no sanitizer report; grantfs-mount is only ever run
// for a record whose path, directory and options pass common/mount_spec.h
// (the fake mounter aborts otherwise); every state reported is about a path
// of the last table or one the agent keeps. docs/testing.md, "Fuzzing".
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "client/cluster_config.h"
#include "client/fake_mounter.h"
#include "client/node_agent.h"
#include "common/clock.h"
#include "common/fuzz_input.h"
#include "common/mount_spec.h"
#include "glog/logging.h"
#include "server/node_table.h"

namespace grantfs {
namespace {

bool Acceptable(const proto::GlobalMountRecord& rec) {
  absl::StatusOr<std::string> p = NormalizeMountPath(rec.path());
  return p.ok() && *p == rec.path() && NormalizeMountSubdir(rec.subdir()).ok() &&
         NormalizeMountOptions(rec.options()).ok();
}

// A path from the input: mostly one of a few short ones (so that tables,
// node states and state files meet), else any bytes.
std::string PathFrom(FuzzInput& in) {
  static const char* const kPaths[] = {"/g/a",   "/g/b",     "/g/a/b",  "/g",
                                       "/g//c/", "relative", "/proc/x", "/"};
  const uint8_t b = in.Byte();
  if (b < 0xc0) return kPaths[b % 8];
  return in.Bytes(2048);
}

void ReconcileTable(NodeAgent* agent, FakeMounter* node, FuzzInput& in,
                    std::set<std::string>* last_table) {
  proto::GlobalMountTable table;
  const int n = in.Byte() % 9;
  last_table->clear();
  for (int i = 0; i < n; ++i) {
    proto::GlobalMountRecord* r = table.add_mounts();
    r->set_path(PathFrom(in));
    r->set_subdir(in.Byte() & 1 ? "/" : in.Bytes(512));
    r->set_options(in.Byte() & 1 ? "" : in.Bytes(1200));
    r->set_generation(in.Number(2));
    const uint8_t flags = in.Byte();
    r->set_removing(flags & 1);
    r->set_force(flags & 2);
    last_table->insert(r->path());
  }
  // What the node looks like meanwhile.
  const uint8_t node_ops = in.Byte() % 4;
  for (int i = 0; i < node_ops; ++i) {
    const std::string path = PathFrom(in);
    static const MountAt kAt[] = {MountAt::kNothing, MountAt::kGrantFs, MountAt::kDead,
                                  MountAt::kOther};
    node->Set(path, kAt[in.Byte() % 4]);
  }
  const uint8_t trouble = in.Byte();
  node->Busy(trouble & 1 ? "pid 1 (sh) has its working directory inside" : "");
  node->Fail(trouble & 2 ? "grantfs-mount exited with 1" : "");
  agent->Reconcile(table);
  const std::set<std::string> kept = agent->Managed();
  for (const proto::NodeMountState& s : agent->States()) {
    if (last_table->count(s.path()) == 0 && kept.count(s.path()) == 0) abort();
  }
}

void StateFile(FuzzInput& in) {
  const auto parsed = NodeAgent::ParseStateFile(in.Bytes());
  if (NodeAgent::ParseStateFile(NodeAgent::FormatStateFile(parsed)) != parsed) abort();
}

void Heartbeat(NodeTable* nodes, FuzzInput& in) {
  proto::NodeHeartbeatRequest hb;
  if (!hb.ParseFromString(in.Bytes())) return;
  (void)nodes->Heartbeat(hb, in.Byte() & 1 ? "node:default" : in.Bytes(64), "fuzz");
  for (const proto::NodeInfo& n : nodes->List()) {
    for (const proto::NodeMountState& m : n.mounts()) {
      if (m.reason().size() > 512) abort();
    }
  }
}

// Seeds: a table a real primary would send (a mount, then its removal),
// a state file and a configuration file.
std::vector<std::string> MakeSeeds() {
  FuzzInputWriter w;
  w.Byte(0).Byte(2);                                 // a table of two records:
  w.Byte(0).Byte(1).Byte(0).Bytes("ro,leases=off");  // /g/a, "/", options
  w.Number(5, 2).Byte(0);                            // generation 5, active
  w.Byte(1).Byte(1).Byte(1).Number(9, 2).Byte(1);    // /g/b, generation 9, removing
  w.Byte(1).Byte(1).Byte(1);                         // the node: /g/b mounted
  w.Byte(1);                                         // ... and busy
  w.Byte(1).Number(30, 2);                           // 3 s pass
  w.Byte(2).Bytes("/g/a\t/\tro\n/g/b\n");            // a state file
  w.Byte(3).Bytes("servers = a:7420,b:7420\nnode = n1\n");
  proto::NodeHeartbeatRequest hb;
  hb.set_node("n1");
  hb.set_instance(1);
  proto::NodeMountState* m = hb.add_mounts();
  m->set_path("/g/a");
  m->set_state(proto::NodeMountState::BUSY);
  m->set_reason("pid 1");
  w.Byte(4).Bytes(hb.SerializeAsString()).Byte(1);
  return {w.str()};
}

}  // namespace
}  // namespace grantfs

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  if (getenv("GRANTFS_FUZZ_LOG") == nullptr) FLAGS_minloglevel = 3;
  google::InitGoogleLogging("node_agent_fuzz");
  grantfs::WriteSeedsIfEmpty(*argc, *argv, grantfs::MakeSeeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  grantfs::FuzzInput in(data, size);
  grantfs::FakeClock clock;
  grantfs::FakeMounter node;
  node.check = grantfs::Acceptable;
  grantfs::NodeAgentOptions o;
  o.node = "fuzz";
  o.mounter = &node;
  o.clock = &clock;
  grantfs::NodeAgent agent(o);  // not started: no threads, no RPC
  grantfs::NodeTableOptions no;
  no.clock = &clock;
  no.wall_clock = &clock;
  no.max_nodes = 4;
  grantfs::NodeTable nodes(no);
  std::set<std::string> last_table;
  for (int items = 0; !in.empty() && items < 32; ++items) {
    switch (in.Byte() % 5) {
      case 0:
        grantfs::ReconcileTable(&agent, &node, in, &last_table);
        break;
      case 1:
        clock.Advance(absl::Milliseconds(100) * static_cast<int64_t>(in.Number(2)));
        break;
      case 2:
        grantfs::StateFile(in);
        break;
      case 3:
        (void)grantfs::ParseClusterConfig(in.Bytes(), "fuzz.conf");
        break;
      case 4:
        grantfs::Heartbeat(&nodes, in);
        break;
    }
  }
  return 0;
}
