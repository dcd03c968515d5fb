#include "client/status_json.h"

#include <string>

#include "gtest/gtest.h"

namespace grantfs {
namespace {

const google::protobuf::Value& Field(const google::protobuf::Struct& s, const std::string& name) {
  static const google::protobuf::Value kMissing;
  auto it = s.fields().find(name);
  return it == s.fields().end() ? kMissing : it->second;
}

TEST(StatusJsonTest, APrimaryHasItsLedgerAndSessions) {
  proto::StatusReply st;
  st.set_role("primary");
  st.set_epoch(3);
  st.set_replica_state("in sync");
  st.set_capacity_bytes(4ull << 30);
  st.set_used_bytes(1 << 20);
  st.set_granted_bytes(2 << 20);
  st.set_reserved_bytes(4096);
  st.set_ledger_ok(true);
  st.set_disk_room_bytes(300 << 20);
  st.set_hold_bytes(66 << 20);
  st.set_replica_disk_room_bytes(70 << 20);
  st.set_replica_hold_short(true);
  st.set_meta_changes(1000);
  st.set_meta_wal_syncs(125);
  st.set_repl_records(1010);
  st.set_repl_messages(400);
  st.set_repl_round_trips(390);
  proto::SessionInfo* ses = st.add_sessions();
  ses->set_client_id(0xabcdef0123456789ull);
  ses->set_client_name("node1");
  ses->set_reclaiming(true);
  ses->set_lease_left_ms(-250);
  ses->set_address("10.0.0.5:41234");
  st.add_sessions()->set_client_name("node2");

  google::protobuf::Struct s = StatusToStruct("127.0.0.1:7420", st);
  EXPECT_EQ(Field(s, "server").string_value(), "127.0.0.1:7420");
  EXPECT_EQ(Field(s, "role").string_value(), "primary");
  EXPECT_EQ(Field(s, "epoch").number_value(), 3);
  EXPECT_EQ(Field(s, "replica_state").string_value(), "in sync");
  EXPECT_EQ(Field(s, "capacity_bytes").number_value(), 4ull << 30);
  EXPECT_EQ(Field(s, "available_bytes").number_value(), (4ull << 30) - (3 << 20) - 4096);
  EXPECT_TRUE(Field(s, "ledger_ok").bool_value());
  EXPECT_EQ(Field(s, "disk_room_bytes").number_value(), 300 << 20);
  EXPECT_EQ(Field(s, "hold_bytes").number_value(), 66 << 20);
  EXPECT_EQ(Field(s, "replica_disk_room_bytes").number_value(), 70 << 20);
  EXPECT_TRUE(Field(s, "replica_hold_short").bool_value());
  EXPECT_EQ(Field(s, "meta_changes").number_value(), 1000);
  EXPECT_EQ(Field(s, "meta_wal_syncs").number_value(), 125);
  EXPECT_EQ(Field(s, "repl_records").number_value(), 1010);
  EXPECT_EQ(Field(s, "repl_messages").number_value(), 400);
  EXPECT_EQ(Field(s, "repl_round_trips").number_value(), 390);
  EXPECT_EQ(Field(s, "sessions_reclaiming").number_value(), 1);
  const auto& sessions = Field(s, "sessions").list_value();
  ASSERT_EQ(sessions.values_size(), 2);
  const auto& first = sessions.values(0).struct_value();
  EXPECT_EQ(Field(first, "client_id").string_value(), "abcdef0123456789");
  EXPECT_EQ(Field(first, "client_name").string_value(), "node1");
  EXPECT_EQ(Field(first, "lease_left_ms").number_value(), -250);
  EXPECT_EQ(Field(first, "address").string_value(), "10.0.0.5:41234");
  EXPECT_TRUE(Field(first, "reclaiming").bool_value());

  const std::string line = ToJsonLine(s);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_NE(line.find("\"replica_state\":\"in sync\""), std::string::npos) << line;
}

TEST(StatusJsonTest, AvailableIsZeroWhenTheLedgerIsOver) {
  proto::StatusReply st;
  st.set_capacity_bytes(100);
  st.set_used_bytes(80);
  st.set_granted_bytes(30);
  EXPECT_EQ(AvailableBytes(st), 0u);
}

TEST(StatusJsonTest, AReplicaHasNoSpaceFigures) {
  proto::StatusReply st;
  st.set_role("replica");
  st.set_capacity_bytes(1 << 30);
  google::protobuf::Struct s = StatusToStruct("b:7420", st);
  EXPECT_EQ(Field(s, "role").string_value(), "replica");
  EXPECT_TRUE(s.fields().count("epoch"));
  EXPECT_TRUE(s.fields().count("repl_round_trips"));
  EXPECT_FALSE(s.fields().count("capacity_bytes"));
  EXPECT_FALSE(s.fields().count("meta_wal_syncs"));
  EXPECT_FALSE(s.fields().count("sessions"));
}

}  // namespace
}  // namespace grantfs
