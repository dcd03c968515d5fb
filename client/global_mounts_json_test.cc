// grantfsctl's view of global mounts (client/global_mounts_json.h).
#include "client/global_mounts_json.h"

#include "client/status_json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace grantfs {
namespace {

using ::testing::HasSubstr;
using State = proto::NodeMountState;

proto::ListMountsReply Reply() {
  proto::ListMountsReply r;
  proto::GlobalMountRecord* m = r.mutable_table()->add_mounts();
  m->set_path("/global/x");
  m->set_subdir("/");
  m->set_generation(1795820323891245833ull);
  m->set_created_ns(0);
  auto node = [&r](const char* name, bool alive, uint64_t gen, State::State st,
                   const char* reason) {
    proto::NodeInfo* n = r.add_nodes();
    n->set_node(name);
    n->set_alive(alive);
    if (gen != 0) {
      State* s = n->add_mounts();
      s->set_path("/global/x");
      s->set_generation(gen);
      s->set_state(st);
      s->set_reason(reason);
    }
  };
  node("a", true, 1795820323891245833ull, State::MOUNTED, "");
  node("b", true, 1795820323891245833ull, State::FAILED, "no such directory");
  node("c", true, 5, State::MOUNTED, "");  // about an older record
  node("d", false, 1795820323891245833ull, State::MOUNTED, "");
  node("e", true, 0, State::PENDING, "");  // nothing said yet
  return r;
}

TEST(GlobalMountsJsonTest, EachNodesWordForAMount) {
  const proto::ListMountsReply r = Reply();
  std::vector<NodeView> v = NodesOf(r, r.table().mounts(0));
  ASSERT_EQ(v.size(), 5u);
  EXPECT_EQ(v[0].state, "mounted");
  EXPECT_EQ(v[1].state, "failed");
  EXPECT_EQ(v[1].reason, "no such directory");
  EXPECT_EQ(v[2].state, "pending");
  EXPECT_EQ(v[3].state, "down");
  EXPECT_EQ(v[3].last_state, "mounted");
  EXPECT_EQ(v[4].state, "pending");
  EXPECT_FALSE(Settled(v, false));
  v.pop_back();
  v.erase(v.begin() + 2);
  EXPECT_TRUE(Settled(v, false));  // mounted, failed, and one down
  EXPECT_FALSE(Settled(v, true));  // not about a removal
}

TEST(GlobalMountsJsonTest, TheShapesAreStable) {
  const proto::ListMountsReply r = Reply();
  const std::string mounts = ToJsonLine(MountsToStruct("A:7420", r));
  for (const char* field :
       {"\"server\":\"A:7420\"", "\"path\":\"/global/x\"", "\"generation\":\"1795820323891245833\"",
        "\"removing\":false", "\"force\":false", "\"created_at\":\"1970-01-01T00:00:00+00:00\"",
        "\"state\":\"failed\"", "\"reason\":\"no such directory\"", "\"last_state\":\"mounted\""}) {
    EXPECT_THAT(mounts, HasSubstr(field));
  }
  const std::string nodes = ToJsonLine(NodesToStruct("A:7420", r));
  for (const char* field : {"\"node\":\"a\"", "\"alive\":false", "\"mounted\":1", "\"failed\":1",
                            "\"heartbeat_age_ms\":0", "\"node_timeout_ms\":0"}) {
    EXPECT_THAT(nodes, HasSubstr(field));
  }
}

}  // namespace
}  // namespace grantfs
