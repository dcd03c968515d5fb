#include "client/global_mounts_cli.h"

#include <algorithm>
#include <cstdio>
#include <memory>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/cluster_client.h"
#include "client/global_mounts_json.h"
#include "client/status_json.h"
#include "common/mount_spec.h"

ABSL_FLAG(bool, g, false, "mount, umount: a global mount (on every node)");
ABSL_FLAG(std::string, o, "", "mount -g: grantfs-mount options, comma-separated");
ABSL_FLAG(bool, f, false,
          "umount -g: force: where the mount is busy, detach it (lazy unmount): it disappears "
          "from the namespace at once, and processes using it keep their open files and working "
          "directories until they let go");
ABSL_FLAG(int, wait_s, 10,
          "mount -g, umount -g: seconds to wait for every live node to report (0: do not wait)");
ABSL_FLAG(std::string, allowed_root, "/global",
          "mount -g: global mounts go only below this directory, where the node agents mount "
          "(their --allowed_root; allowed_root in the configuration file)");
ABSL_FLAG(int, retry_s, 10, "seconds to look for a primary (during a failover) before giving up");

namespace grantfs {
namespace {

constexpr int kOk = 0, kFailed = 1, kUsage = 2;

struct Ctl {
  std::unique_ptr<ClusterClient> cluster;
  bool json = false;
};

int Refused(const char* cmd, const absl::Status& s) {
  fprintf(stderr, "grantfsctl %s: %s\n", cmd, std::string(s.message()).c_str());
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) ? kFailed : kUsage;
}

absl::Status List(Ctl& ctl, proto::ListMountsReply* reply, std::string* server) {
  return ctl.cluster->Call(&proto::Cluster::Stub::ListMounts, proto::ListMountsRequest(), reply,
                           absl::ZeroDuration(), nullptr, server);
}

const proto::GlobalMountRecord* Find(const proto::ListMountsReply& reply, const std::string& path) {
  for (const proto::GlobalMountRecord& r : reply.table().mounts()) {
    if (r.path() == path) return &r;
  }
  return nullptr;
}

std::string Age(int64_t ms) { return absl::StrFormat("%.1fs ago", ms / 1000.0); }

void PrintNodeViews(const std::vector<NodeView>& nodes) {
  for (const NodeView& v : nodes) {
    std::string line = absl::StrFormat("  %-20s %s", v.node, v.state);
    if (!v.reason.empty()) absl::StrAppend(&line, ": ", v.reason);
    if (!v.alive) {
      absl::StrAppend(&line, " (no heartbeat",
                      v.last_state.empty() ? "" : absl::StrCat("; last said ", v.last_state), ")");
    }
    printf("%s\n", line.c_str());
  }
}

// Waits until every live node settled about `path` of `generation`
// (global_mounts_json.h Settled), or --wait_s. The last views, and whether
// they settled; false with *gone when the record changed or went.
bool WaitForNodes(Ctl& ctl, const std::string& path, uint64_t generation, bool removing,
                  std::vector<NodeView>* views, std::string* server, bool* gone) {
  absl::Time deadline = absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_wait_s));
  *gone = false;
  for (bool first = true;; first = false) {
    proto::ListMountsReply reply;
    absl::Status s = List(ctl, &reply, server);
    if (s.ok()) {
      const proto::GlobalMountRecord* rec = Find(reply, path);
      if (rec == nullptr || rec->generation() != generation) {
        *gone = true;
        return false;
      }
      *views = NodesOf(reply, *rec);
      // A primary that just started or took over knows the nodes again
      // from their next heartbeats: until its node timeout has passed, a
      // node it has not heard from may be alive, and is waited for (also
      // past a shorter --wait_s: not waiting at all is --wait_s=0).
      if (reply.settling_ms() <= 0 && Settled(*views, removing)) return true;
      if (reply.settling_ms() > 0 && absl::GetFlag(FLAGS_wait_s) > 0) {
        deadline = std::max(deadline, absl::Now() + absl::Milliseconds(reply.settling_ms()) +
                                          absl::Milliseconds(250));
      }
    }
    if (absl::Now() >= deadline) return false;
    // The first look comes at once: nodes often answer within milliseconds.
    absl::SleepFor(absl::Milliseconds(first ? 50 : 200));
  }
}

int Mount(Ctl& ctl, const std::vector<std::string>& args) {
  if (!absl::GetFlag(FLAGS_g)) {
    fprintf(stderr,
            "grantfsctl mount: only global mounts (-g); to mount on this node alone, use "
            "`mount -t grantfs SERVERS:/ DIR` or grantfs-mount\n");
    return kUsage;
  }
  if (args.empty() || args.size() > 2) {
    fprintf(stderr, "usage: grantfsctl mount -g [-o OPTIONS] [SUBDIR] PATH\n");
    return kUsage;
  }
  // The agents refuse a path outside their allowed root; saying so here,
  // before anything is recorded, spares a record no node would mount.
  absl::StatusOr<std::string> root = NormalizeMountPath(absl::GetFlag(FLAGS_allowed_root));
  if (!root.ok()) {
    fprintf(stderr, "grantfsctl mount: --allowed_root: %s\n",
            std::string(root.status().message()).c_str());
    return kUsage;
  }
  absl::StatusOr<std::string> path = NormalizeMountPath(args.back());
  if (!path.ok()) return Refused("mount", path.status());
  if (!StrictlyBelow(*path, *root)) {
    fprintf(stderr,
            "grantfsctl mount: %s is not below the allowed root %s, where the node agents mount "
            "(--allowed_root, or allowed_root in the configuration file)\n",
            path->c_str(), root->c_str());
    return kUsage;
  }
  proto::AddMountRequest req;
  req.set_path(*path);
  req.set_subdir(args.size() == 2 ? args[0] : "/");
  req.set_options(absl::GetFlag(FLAGS_o));
  proto::AddMountReply added;
  std::string server;
  absl::Status s = ctl.cluster->Call(&proto::Cluster::Stub::AddMount, req, &added,
                                     absl::ZeroDuration(), nullptr, &server);
  if (!s.ok()) return Refused("mount", s);
  const proto::GlobalMountRecord& rec = added.mount();
  std::vector<NodeView> views;
  bool gone = false;
  const bool settled =
      WaitForNodes(ctl, rec.path(), rec.generation(), false, &views, &server, &gone);
  int live = 0, mounted = 0;
  for (const NodeView& v : views) {
    live += v.alive ? 1 : 0;
    mounted += v.alive && v.state == "mounted" ? 1 : 0;
  }
  // --wait_s=0: recorded is done (the nodes were not waited for).
  const bool done = absl::GetFlag(FLAGS_wait_s) == 0 ? !gone : !gone && settled && mounted == live;
  if (ctl.json) {
    google::protobuf::Struct out = NodeViewsToStruct(views);
    auto& f = *out.mutable_fields();
    f["server"].set_string_value(server);
    f["path"].set_string_value(rec.path());
    f["generation"].set_string_value(absl::StrCat(rec.generation()));
    f["existed"].set_bool_value(added.existed());
    f["done"].set_bool_value(done);
    printf("%s\n", ToJsonLine(out).c_str());
  } else {
    printf("%s: %s %s of the volume%s%s\n", rec.path().c_str(),
           added.existed() ? "was already a global mount of" : "global mount of",
           rec.subdir().c_str(), rec.options().empty() ? "" : ", options ", rec.options().c_str());
    if (gone) printf("  the record changed meanwhile (another grantfsctl umount -g?)\n");
    PrintNodeViews(views);
    if (live == 0) {
      printf("  no node agent is running: every node's agent mounts it when it starts\n");
    } else if (absl::GetFlag(FLAGS_wait_s) == 0) {
      printf("  recorded; not waiting for the nodes (--wait_s=0; grantfsctl mounts shows them)\n");
    } else if (!settled) {
      printf("  not every node answered within %d s (grantfsctl mounts shows them)\n",
             absl::GetFlag(FLAGS_wait_s));
    }
  }
  return done ? kOk : kFailed;
}

int Umount(Ctl& ctl, const std::vector<std::string>& args) {
  if (!absl::GetFlag(FLAGS_g)) {
    fprintf(stderr,
            "grantfsctl umount: only global mounts (-g); to unmount on this node alone, use "
            "umount(8)\n");
    return kUsage;
  }
  if (args.size() != 1) {
    fprintf(stderr, "usage: grantfsctl umount -g [-f] PATH\n");
    return kUsage;
  }
  const bool force = absl::GetFlag(FLAGS_f);
  proto::RemoveMountRequest req;
  req.set_path(args[0]);
  req.set_force(force);
  proto::RemoveMountReply marked;
  std::string server;
  absl::Status s = ctl.cluster->Call(&proto::Cluster::Stub::RemoveMount, req, &marked,
                                     absl::ZeroDuration(), nullptr, &server);
  if (!s.ok()) return Refused("umount", s);
  const proto::GlobalMountRecord& rec = marked.mount();
  std::vector<NodeView> views;
  bool gone = false;
  const bool settled =
      WaitForNodes(ctl, rec.path(), rec.generation(), true, &views, &server, &gone);
  bool all_unmounted = settled && !gone;
  for (const NodeView& v : views) {
    if (v.alive && v.state != "unmounted") all_unmounted = false;
  }
  bool removed = false;
  std::string forget_error;
  if (all_unmounted) {
    proto::ForgetMountRequest fr;
    fr.set_path(rec.path());
    fr.set_generation(rec.generation());
    proto::ForgetMountReply freply;
    absl::Status fs = ctl.cluster->Call(&proto::Cluster::Stub::ForgetMount, fr, &freply);
    // NOT_FOUND: an attempt that reached a primary before a failover
    // removed it already.
    removed = fs.ok() || absl::IsNotFound(fs);
    if (!removed) forget_error = std::string(fs.message());
  }
  if (ctl.json) {
    google::protobuf::Struct out = NodeViewsToStruct(views);
    auto& f = *out.mutable_fields();
    f["server"].set_string_value(server);
    f["path"].set_string_value(rec.path());
    f["generation"].set_string_value(absl::StrCat(rec.generation()));
    f["force"].set_bool_value(rec.force());
    f["removed"].set_bool_value(removed);
    f["done"].set_bool_value(removed);
    printf("%s\n", ToJsonLine(out).c_str());
  } else {
    printf("%s: %s\n", rec.path().c_str(),
           removed ? "unmounted on every live node and removed from the table"
                   : "NOT unmounted everywhere: it stays in the table, marked for removal "
                     "(the nodes keep trying; run this again, or with -f to detach where busy)");
    if (gone) printf("  the record changed meanwhile (another grantfsctl umount -g?)\n");
    if (!forget_error.empty()) printf("  removing it from the table: %s\n", forget_error.c_str());
    PrintNodeViews(views);
    for (const NodeView& v : views) {
      if (!v.alive && removed) {
        printf("  %s is down: its agent unmounts %s when it comes back\n", v.node.c_str(),
               rec.path().c_str());
      }
    }
    if (!settled && !gone) {
      printf("  not every node answered within %d s\n", absl::GetFlag(FLAGS_wait_s));
    }
  }
  return removed ? kOk : kFailed;
}

int Mounts(Ctl& ctl) {
  proto::ListMountsReply reply;
  std::string server;
  if (absl::Status s = List(ctl, &reply, &server); !s.ok()) return Refused("mounts", s);
  if (ctl.json) {
    printf("%s\n", ToJsonLine(MountsToStruct(server, reply)).c_str());
    return kOk;
  }
  printf("%d global mounts (primary %s)\n", reply.table().mounts_size(), server.c_str());
  for (const proto::GlobalMountRecord& rec : reply.table().mounts()) {
    const std::vector<NodeView> views = NodesOf(reply, rec);
    int mounted = 0, pending = 0, failed = 0, busy = 0, down = 0;
    for (const NodeView& v : views) {
      mounted += v.state == "mounted" || v.state == "unmounted";
      pending += v.state == "pending";
      failed += v.state == "failed";
      busy += v.state == "busy";
      down += v.state == "down";
    }
    printf("%-28s %-16s %-20s %s: %d %s, %d pending, %d failed, %d busy, %d down\n",
           rec.path().c_str(), rec.subdir().c_str(),
           rec.options().empty() ? "-" : rec.options().c_str(),
           rec.removing() ? (rec.force() ? "removing (-f)" : "removing") : "active", mounted,
           rec.removing() ? "unmounted" : "mounted", pending, failed, busy, down);
    PrintNodeViews(views);
  }
  return kOk;
}

int Nodes(Ctl& ctl) {
  proto::ListMountsReply reply;
  std::string server;
  if (absl::Status s = List(ctl, &reply, &server); !s.ok()) return Refused("nodes", s);
  if (ctl.json) {
    printf("%s\n", ToJsonLine(NodesToStruct(server, reply)).c_str());
    return kOk;
  }
  printf("%d nodes (primary %s; a node is down after %.0f s without a heartbeat)\n",
         reply.nodes_size(), server.c_str(), reply.node_timeout_ms() / 1000.0);
  if (reply.settling_ms() > 0) {
    printf("the primary started or took over just now: nodes may still call in for %.1f s\n",
           reply.settling_ms() / 1000.0);
  }
  printf("%-20s %-5s %-12s %-8s %-22s %-24s %s\n", "node", "alive", "heartbeat", "version",
         "address", "certificate", "mounts");
  for (const proto::NodeInfo& n : reply.nodes()) {
    int counts[5] = {0, 0, 0, 0, 0};
    for (const auto& m : n.mounts()) {
      if (m.state() >= 0 && m.state() < 5) ++counts[m.state()];
    }
    printf("%-20s %-5s %-12s %-8s %-22s %-24s %d mounted, %d pending, %d failed, %d busy\n",
           n.node().c_str(), n.alive() ? "yes" : "NO", Age(n.heartbeat_age_ms()).c_str(),
           n.agent_version().c_str(), n.address().c_str(),
           n.peer().empty() ? "-" : n.peer().c_str(), counts[proto::NodeMountState::MOUNTED],
           counts[proto::NodeMountState::PENDING], counts[proto::NodeMountState::FAILED],
           counts[proto::NodeMountState::BUSY]);
    if (!n.conflict().empty()) printf("  CONFLICT: %s\n", n.conflict().c_str());
  }
  return kOk;
}

}  // namespace

bool IsGlobalMountCommand(const std::string& cmd) {
  return cmd == "mount" || cmd == "umount" || cmd == "mounts" || cmd == "nodes";
}

int RunGlobalMountCommand(const std::string& cmd, const std::vector<std::string>& args,
                          const std::vector<std::string>& servers, const Transport& transport,
                          bool json) {
  if ((cmd == "mounts" || cmd == "nodes") && !args.empty()) {
    fprintf(stderr, "grantfsctl %s takes no arguments\n", cmd.c_str());
    return kUsage;
  }
  if (absl::GetFlag(FLAGS_wait_s) < 0 || absl::GetFlag(FLAGS_retry_s) < 0) {
    fprintf(stderr, "grantfsctl: --wait_s and --retry_s must be >= 0\n");
    return kUsage;
  }
  ClusterClientOptions o;
  o.servers = servers;
  o.transport = transport;
  o.retry_for = absl::Seconds(absl::GetFlag(FLAGS_retry_s));
  absl::StatusOr<std::unique_ptr<ClusterClient>> c = ClusterClient::Create(o);
  if (!c.ok()) {
    fprintf(stderr, "grantfsctl: %s\n", std::string(c.status().message()).c_str());
    return kUsage;
  }
  Ctl ctl;
  ctl.cluster = *std::move(c);
  ctl.json = json;
  if (cmd == "mount") return Mount(ctl, args);
  if (cmd == "umount") return Umount(ctl, args);
  if (cmd == "mounts") return Mounts(ctl);
  return Nodes(ctl);
}

}  // namespace grantfs
