// A replica's refusals of bad input: no hello, stale epochs, bad paths, gaps, wrong identity.
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "checkpoint/replica.h"
#include "checkpoint/replicator.h"
#include "checkpoint/witness.h"
#include "common/clock.h"
#include "common/keepalive.h"
#include "common/status_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rocksdb/write_batch.h"
#include "server/chunk_store.h"
#include "server/data_dir.h"
#include "server/keys.h"
#include "server/meta_store.h"
#include "server/replication_test_util.h"
#include "server/volume.h"

namespace grantfs {
namespace {

// --- 9. bad input on the replica ------------------------------------------------------------

class ReplicaInputTest : public ReplicationTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(ReplicationTest::SetUp());
    // No failover during these tests: nobody is primary.
    ASSERT_NO_FATAL_FAILURE(StartReplica(absl::Seconds(60)));
    stub_ = proto::Replication::NewStub(
        grpc::CreateChannel(replica_addr_, grpc::InsecureChannelCredentials()));
  }

  struct Call {
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReaderWriter<ReplMessage, ReplAck>> stream;
  };
  std::unique_ptr<Call> Open() {
    auto c = std::make_unique<Call>();
    c->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    c->stream = stub_->Stream(&c->ctx);
    return c;
  }
  // A primary's hello, naming volume identity_ (none while unset).
  ReplMessage Hello(uint64_t epoch) {
    ReplMessage m;
    m.mutable_hello()->set_epoch(epoch);
    m.mutable_hello()->set_server("raw.test:1");
    if (identity_) *m.mutable_hello()->mutable_identity() = *identity_;
    return m;
  }
  // Sends the hello; returns the replica's first ack.
  ReplAck Handshake(Call* c, uint64_t epoch) {
    EXPECT_TRUE(c->stream->Write(Hello(epoch)));
    ReplAck a;
    EXPECT_TRUE(c->stream->Read(&a));
    return a;
  }
  // Reads acks until the stream ends; returns the last error seen and the
  // stream's status.
  static grpc::Status Drain(Call* c, std::string* error) {
    c->stream->WritesDone();
    ReplAck a;
    while (c->stream->Read(&a)) {
      if (!a.error().empty()) *error = a.error();
    }
    return c->stream->Finish();
  }

  // A snapshot of a new volume's metadata at (epoch, start_seq).
  void SendSnapshot(Call* c, uint64_t epoch, uint64_t start_seq, bool finish = true) {
    const std::string src = root_ + "/src";
    {
      MetaStoreOptions mo;
      mo.dir = src;
      mo.capacity_bytes = 1 << 30;
      auto m = MetaStore::Open(mo);
      ASSERT_TRUE(m.ok()) << m.status();
      ASSERT_OK((*m)->Checkpoint(root_ + "/cp"));
      identity_ = (*m)->identity();
    }
    ReplMessage h = Hello(epoch);
    h.mutable_hello()->set_snapshot(true);
    h.mutable_hello()->set_start_seq(start_seq);
    ASSERT_TRUE(c->stream->Write(h));
    ReplMessage pieces;
    // CURRENT first: a copy cut short then has a CURRENT without its files.
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(root_ + "/cp")) {
      names.push_back(e.path().filename().string());
    }
    std::sort(names.begin(), names.end(), [](const std::string& a, const std::string& b) {
      return (a == "CURRENT") > (b == "CURRENT") || ((a == "CURRENT") == (b == "CURRENT") && a < b);
    });
    for (const std::string& name : names) {
      std::ifstream in(root_ + "/cp/" + name, std::ios::binary);
      std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      proto::SnapshotPiece* p = pieces.add_snapshot();
      p->set_path("meta/" + name);
      p->set_data(data);
      proto::SnapshotPiece* eof = pieces.add_snapshot();
      eof->set_path("meta/" + name);
      eof->set_offset(data.size());
      eof->set_eof(true);
      if (!finish) break;  // only CURRENT
    }
    pieces.set_snapshot_done(finish);
    ASSERT_TRUE(c->stream->Write(pieces));
  }

  static ReplMessage SyncRecord(uint64_t seq) {
    ReplMessage m;
    proto::ReplRecord* r = m.add_records();
    r->set_seq(seq);
    r->mutable_sync()->set_ino(12345);
    r->mutable_sync()->set_a(0);
    return m;
  }

  std::unique_ptr<proto::Replication::Stub> stub_;
  std::optional<proto::VolumeIdentity> identity_;  // of the last snapshot sent
};

TEST_F(ReplicaInputTest, FirstMessageWithoutHelloIsInvalid) {
  auto c = Open();
  ReplMessage m;
  m.set_sent_ns(1);
  ASSERT_TRUE(c->stream->Write(m));
  std::string error;
  grpc::Status s = Drain(c.get(), &error);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  // Epoch 0 is no hello either.
  c = Open();
  ASSERT_TRUE(c->stream->Write(Hello(0)));
  s = Drain(c.get(), &error);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
}

TEST_F(ReplicaInputTest, StaleEpochIsRefused) {
  auto c = Open();
  ReplAck a = Handshake(c.get(), 5);
  EXPECT_TRUE(a.error().empty()) << a.error();
  EXPECT_EQ(a.hello().epoch(), 0u);
  std::string error;
  EXPECT_TRUE(Drain(c.get(), &error).ok());

  c = Open();
  ASSERT_TRUE(c->stream->Write(Hello(3)));
  grpc::Status s = Drain(c.get(), &error);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_THAT(error, HasSubstr("stale epoch"));
}

// Found by replica_apply_fuzz (35d34b1 synced a message's chunks through
// a chunk store that does not exist before the first snapshot).
TEST_F(ReplicaInputTest, AMessageWithoutRecordsBeforeTheFirstSnapshotIsAcknowledged) {
  auto c = Open();
  ReplAck a = Handshake(c.get(), 5);
  EXPECT_TRUE(a.error().empty()) << a.error();
  EXPECT_EQ(a.hello().epoch(), 0u);  // no copy yet
  ReplMessage m;
  m.set_sent_ns(1);
  ASSERT_TRUE(c->stream->Write(m));
  ASSERT_TRUE(c->stream->Read(&a));
  EXPECT_TRUE(a.error().empty()) << a.error();
  std::string error;
  EXPECT_TRUE(Drain(c.get(), &error).ok());
}

TEST_F(ReplicaInputTest, SnapshotPathsOutsideTheDataDirAreRefused) {
  for (const char* bad : {"../x", "meta/../../x", "chunks/../../x", "/x", "x", "meta/"}) {
    SCOPED_TRACE(bad);
    auto c = Open();
    ReplAck a = Handshake(c.get(), 7);
    ASSERT_TRUE(a.error().empty()) << a.error();
    ReplMessage h = Hello(7);
    h.mutable_hello()->set_snapshot(true);
    h.mutable_hello()->set_start_seq(1);
    ASSERT_TRUE(c->stream->Write(h));
    ReplMessage m;
    proto::SnapshotPiece* p = m.add_snapshot();
    p->set_path(bad);
    p->set_data("evil");
    ASSERT_TRUE(c->stream->Write(m));
    std::string error;
    grpc::Status s = Drain(c.get(), &error);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
    EXPECT_THAT(error, HasSubstr("bad snapshot path"));
  }
  EXPECT_FALSE(std::filesystem::exists(root_ + "/x"));
  std::vector<std::string> top;
  for (const auto& e : std::filesystem::directory_iterator(root_)) {
    top.push_back(e.path().filename().string());
  }
  std::sort(top.begin(), top.end());
  EXPECT_EQ(top, (std::vector<std::string>{"primary", "replica", "witness"}));
  EXPECT_EQ(replica_->epoch(), 0u);
}

TEST_F(ReplicaInputTest, RecordsWithAGapAreRefused) {
  auto c = Open();
  ASSERT_TRUE(Handshake(c.get(), 2).error().empty());
  ASSERT_NO_FATAL_FAILURE(SendSnapshot(c.get(), 2, 10));
  ReplAck a;
  ASSERT_TRUE(c->stream->Read(&a));
  ASSERT_TRUE(a.error().empty()) << a.error();
  EXPECT_EQ(a.applied_seq(), 9u);
  ASSERT_TRUE(c->stream->Write(SyncRecord(10)));
  ASSERT_TRUE(c->stream->Read(&a));
  ASSERT_TRUE(a.error().empty()) << a.error();
  EXPECT_EQ(a.applied_seq(), 10u);
  ASSERT_TRUE(c->stream->Write(SyncRecord(12)));
  std::string error;
  grpc::Status s = Drain(c.get(), &error);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_THAT(error, HasSubstr("change 12 arrived, expected 11"));
  EXPECT_EQ(replica_->applied_seq(), 10u);
  EXPECT_EQ(replica_->epoch(), 2u);

  // A resume that does not start right after the copy is refused too.
  c = Open();
  a = Handshake(c.get(), 2);
  EXPECT_EQ(a.hello().applied_seq(), 10u);
  ReplMessage resume = Hello(2);
  resume.mutable_hello()->set_start_seq(12);
  ASSERT_TRUE(c->stream->Write(resume));
  s = Drain(c.get(), &error);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_THAT(error, HasSubstr("resume at 12"));

  // The position survives a restart.
  StopReplica();
  ASSERT_NO_FATAL_FAILURE(StartReplica(absl::Seconds(60)));
  EXPECT_EQ(replica_->epoch(), 2u);
  EXPECT_EQ(replica_->applied_seq(), 10u);
}

// The replica keeps its copy rather than take a stream of other data: a
// primary restarted on the wrong disk, or (after the witness lost its
// state) an older copy of the volume.
TEST_F(ReplicaInputTest, AStreamOfAnotherVolumeOrOfOlderDataIsRefusedAndTheCopyKept) {
  auto c = Open();
  ASSERT_TRUE(Handshake(c.get(), 2).error().empty());  // an empty copy takes any volume
  ASSERT_NO_FATAL_FAILURE(SendSnapshot(c.get(), 2, 1));
  ReplAck a;
  ASSERT_TRUE(c->stream->Read(&a));
  ASSERT_TRUE(a.error().empty()) << a.error();
  std::string error;
  EXPECT_TRUE(Drain(c.get(), &error).ok());
  const proto::VolumeIdentity copy = *identity_;
  ASSERT_EQ(copy.data_epoch(), 1u);
  proto::StatusReply st;
  replica_->FillStatus(&st);
  EXPECT_EQ(st.volume_id(), copy.volume_id());
  EXPECT_EQ(st.data_epoch(), 1u);

  // A stream that ends makes the replica ask the witness at once whether the
  // role was handed to it; meanwhile it turns new streams away ("taking
  // over") or cancels them. Each stream below is tried again past that.
  auto stream = [&](const std::optional<proto::VolumeIdentity>& primary, uint64_t epoch,
                    grpc::Status* status) {
    identity_ = primary;
    std::string error;
    for (int i = 0; i < 200; ++i) {
      auto c = Open();
      EXPECT_TRUE(c->stream->Write(Hello(epoch)));
      error.clear();
      *status = Drain(c.get(), &error);
      if (error != "this server is taking over" &&
          status->error_code() != grpc::StatusCode::CANCELLED) {
        break;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    return error;
  };
  auto refused = [&](const std::optional<proto::VolumeIdentity>& primary, uint64_t epoch) {
    grpc::Status s;
    std::string error = stream(primary, epoch, &s);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
    return error;
  };
  auto accepted = [&](const std::optional<proto::VolumeIdentity>& primary, uint64_t epoch) {
    grpc::Status s;
    std::string error = stream(primary, epoch, &s);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return error;
  };
  proto::VolumeIdentity other = copy;
  other.set_volume_id("fedcba9876543210fedcba9876543210");
  other.set_data_epoch(9);
  EXPECT_EQ(refused(other, 3),
            "the primary serves volume fedcba9876543210fedcba9876543210 but "
            "this copy is of volume " +
                copy.volume_id());
  EXPECT_THAT(refused(std::nullopt, 3), HasSubstr("the primary serves volume (none named)"));
  proto::VolumeIdentity older = copy;
  older.set_data_epoch(0);
  EXPECT_EQ(refused(older, 3),
            "the primary's data (data epoch 0) is older than this copy (data "
            "epoch 1)");
  EXPECT_EQ(refused(copy, 3),
            "the primary's data (epoch 3) and this copy (epoch 2) are both at "
            "data epoch 1: two histories of the volume");
  EXPECT_EQ(replica_->epoch(), 2u);
  EXPECT_TRUE(std::filesystem::exists(replica_dir_ + "/meta/CURRENT"));

  // The same data from the same epoch resumes; newer data replaces it.
  EXPECT_EQ(accepted(copy, 2), "");
  proto::VolumeIdentity newer = copy;
  newer.set_data_epoch(3);
  EXPECT_EQ(accepted(newer, 3), "");
}

TEST_F(ReplicaInputTest, ASnapshotCutShortLeavesAReplicaThatStillOpens) {
  auto c = Open();
  ASSERT_TRUE(Handshake(c.get(), 4).error().empty());
  ASSERT_NO_FATAL_FAILURE(SendSnapshot(c.get(), 4, 1, /*finish=*/false));
  c->ctx.TryCancel();  // the primary goes away in the middle
  c->stream->Finish();
  ASSERT_TRUE(WaitFor([this] {
    proto::StatusReply st;
    replica_->FillStatus(&st);
    return st.replica_state() == "waiting";
  }));
  EXPECT_EQ(replica_->epoch(), 0u);
  // The replica process restarts (or crashed mid-snapshot): it must come
  // back as an empty replica, not refuse to start on a half copy.
  KillReplicaServer();
  replica_.reset();
  ReplicaOptions o;
  o.self = replica_addr_;
  o.data_dir = replica_dir_;
  UseServerStores(&o);
  o.witness_call = MakeWitnessCall(replica_addr_, nullptr);
  auto r = Replica::Open(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->epoch(), 0u);
  EXPECT_FALSE(std::filesystem::exists(replica_dir_ + "/meta/CURRENT"));
}

// A metadata batch that is not a plain batch of puts and deletes (damaged,
// or of a kind the primary never sends) is refused before the copy's
// RocksDB writes it to its WAL: once there, the copy would never open
// again (the WAL's replay fails on it). Found by server/replica_apply_fuzz.cc.
TEST_F(ReplicaInputTest, AMalformedMetadataBatchIsRefusedAndTheCopyStillOpens) {
  auto c = Open();
  ASSERT_TRUE(Handshake(c.get(), 2).error().empty());
  ASSERT_NO_FATAL_FAILURE(SendSnapshot(c.get(), 2, 10));
  ReplAck a;
  ASSERT_TRUE(c->stream->Read(&a));
  ASSERT_TRUE(a.error().empty()) << a.error();
  std::string error;
  EXPECT_TRUE(Drain(c.get(), &error).ok());

  // A batch's header: its sequence number (RocksDB sets it) and its count.
  auto header = [](uint32_t count) {
    return std::string(8, '\0') + std::string(reinterpret_cast<const char*>(&count), 4);
  };
  rocksdb::WriteBatch merge;
  ASSERT_TRUE(merge.Merge("k", "v").ok());  // the copy has no merge operator
  const std::string bad[] = {
      header(1) + "\x12",                // a transaction's mark (begin persisted prepare)
      header(1) + "\x7fjunk",            // a record of no known type
      header(2) + "\x01\x01k\x01v",      // a put, but the header counts two
      header(1) + "\x05\x01\x01k\x01v",  // a put into column family 1
      merge.Data(),
      "short",  // shorter than the header
  };
  for (const std::string& batch : bad) {
    SCOPED_TRACE(absl::CHexEscape(batch));
    c = Open();
    ASSERT_TRUE(Handshake(c.get(), 2).error().empty());
    ReplMessage m;
    proto::ReplRecord* r = m.add_records();
    r->set_seq(10);
    r->set_meta_batch(batch);
    ASSERT_TRUE(c->stream->Write(m));
    grpc::Status s = Drain(c.get(), &error);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
    EXPECT_THAT(error, HasSubstr("metadata batch"));
    EXPECT_EQ(replica_->applied_seq(), 9u);
    // The copy comes back where it was, and takes the next good change.
    StopReplica();
    ASSERT_NO_FATAL_FAILURE(StartReplica(absl::Seconds(60)));
    EXPECT_EQ(replica_->epoch(), 2u);
    EXPECT_EQ(replica_->applied_seq(), 9u);
  }
  c = Open();
  ASSERT_TRUE(Handshake(c.get(), 2).error().empty());
  ASSERT_TRUE(c->stream->Write(SyncRecord(10)));
  ASSERT_TRUE(c->stream->Read(&a));
  EXPECT_TRUE(a.error().empty()) << a.error();
  EXPECT_EQ(a.applied_seq(), 10u);
  EXPECT_TRUE(Drain(c.get(), &error).ok());
}

TEST_F(ReplicaInputTest, WrongSecretIsRefused) {
  StopReplica();
  ReplicaOptions o;
  o.self = replica_addr_;
  o.data_dir = replica_dir_;
  UseServerStores(&o);
  o.transport = Transport::Insecure("s3cret");
  o.witness_call = MakeWitnessCall(replica_addr_, nullptr);
  auto r = Replica::Open(o);
  ASSERT_TRUE(r.ok()) << r.status();
  grpc::ServerBuilder b;
  int port = 0;
  b.AddListeningPort(replica_addr_, grpc::InsecureServerCredentials(), &port);
  b.RegisterService(r->get());
  auto server = b.BuildAndStart();
  ASSERT_EQ(port, replica_port_);
  auto c = std::make_unique<Call>();
  c->ctx.AddMetadata("x-grantfs-secret", "wrong");
  c->stream = stub_->Stream(&c->ctx);
  c->stream->Write(Hello(1));
  std::string error;
  EXPECT_EQ(Drain(c.get(), &error).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  server->Shutdown(std::chrono::system_clock::now());
  server->Wait();
}
}  // namespace
}  // namespace grantfs
