#include "client/ns_log.h"

#include <atomic>
#include <cerrno>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/errno_status.h"
#include "common/status_test_util.h"
#include "gtest/gtest.h"

namespace grantfs {
namespace {

// A server that applies what it is sent (records the entries' sequence
// numbers), refuses the entry with seq `refuse`, and fails the next
// `fail` batches outright (no server answered).
class FakeServer {
 public:
  absl::StatusOr<proto::ApplyLogReply> Apply(proto::ApplyLogRequest* req) {
    absl::MutexLock l(&mu_);
    batches_.push_back(req->entries_size());
    if (fail_ > 0) {
      --fail_;
      for (const auto& e : req->entries()) tried_.push_back(e.seq());
      return absl::UnavailableError("no server answered");
    }
    proto::ApplyLogReply reply;
    for (const auto& e : req->entries()) {
      if (e.seq() == refuse_) {
        reply.add_errs(EEXIST);
        break;
      }
      // A batch sent again: what was applied is answered from its record.
      if (applied_.empty() || applied_.back() < e.seq()) applied_.push_back(e.seq());
      reply.add_errs(0);
    }
    return reply;
  }
  std::vector<uint64_t> applied() {
    absl::MutexLock l(&mu_);
    return applied_;
  }
  std::vector<size_t> batches() {
    absl::MutexLock l(&mu_);
    return batches_;
  }
  std::vector<uint64_t> tried() {
    absl::MutexLock l(&mu_);
    return tried_;
  }
  void set_fail(int n) {
    absl::MutexLock l(&mu_);
    fail_ = n;
  }
  void set_refuse(uint64_t seq) {
    absl::MutexLock l(&mu_);
    refuse_ = seq;
  }

 private:
  absl::Mutex mu_;
  std::vector<uint64_t> applied_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> tried_ ABSL_GUARDED_BY(mu_);
  std::vector<size_t> batches_ ABSL_GUARDED_BY(mu_);
  int fail_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t refuse_ ABSL_GUARDED_BY(mu_) = 0;
};

proto::LogEntry Entry(uint64_t seq, uint64_t ino = 0) {
  proto::LogEntry e;
  e.set_seq(seq);
  e.set_ino(ino);
  e.mutable_mknod()->set_parent(7);
  return e;
}

NsLog::Send SendTo(FakeServer* s) {
  return [s](proto::ApplyLogRequest* req) { return s->Apply(req); };
}

// Flush(upto) returns once the entries up to `upto` are applied; each batch
// it sends takes whatever is waiting (a group commit), past `upto` too.
TEST(NsLog, EntriesGoInOrderInFullBatchesUntilThoseAskedForAreApplied) {
  FakeServer server;
  NsLogOptions o;
  o.batch_entries = 3;
  NsLog log(o, SendTo(&server));
  for (uint64_t i = 1; i <= 8; ++i) {
    ASSERT_OK_AND_ASSIGN(uint64_t pos, log.Append(Entry(100 + i)));
    EXPECT_EQ(pos, i);
  }
  EXPECT_TRUE(server.applied().empty());  // nothing goes by itself unless started
  ASSERT_TRUE(log.Flush(4).ok());
  EXPECT_EQ(server.applied(), (std::vector<uint64_t>{101, 102, 103, 104, 105, 106}));
  EXPECT_EQ(log.pending(), 2u);
  ASSERT_TRUE(log.Flush(5).ok());  // applied already: nothing sent
  EXPECT_EQ(server.batches(), (std::vector<size_t>{3, 3}));
  ASSERT_TRUE(log.Flush().ok());
  EXPECT_EQ(server.applied().size(), 8u);
  EXPECT_EQ(server.batches(), (std::vector<size_t>{3, 3, 2}));
  EXPECT_EQ(log.pending(), 0u);
  EXPECT_EQ(log.last(), 8u);
}

// What an fsync of a file waits for: the last pending entry about it.
TEST(NsLog, LastTouchingIsThePositionOfTheLastPendingEntryAboutAnInode) {
  FakeServer server;
  NsLog log(NsLogOptions(), SendTo(&server));
  ASSERT_TRUE(log.Append(Entry(1, 50)).ok());  // makes 50 in 7
  ASSERT_TRUE(log.Append(Entry(2, 51)).ok());  // makes 51 in 7
  ASSERT_TRUE(log.Append(Entry(3, 50)).ok());
  ASSERT_TRUE(log.Append(Entry(4, 52)).ok());
  EXPECT_EQ(log.LastTouching(50), 3u);
  EXPECT_EQ(log.LastTouching(51), 2u);
  EXPECT_EQ(log.LastTouching(7), 4u);
  EXPECT_EQ(log.LastTouching(99), 0u);
  ASSERT_TRUE(log.Flush(4).ok());
  EXPECT_EQ(log.LastTouching(50), 0u);  // applied
}

// Write entries carry data: a batch stops before the entry that would take
// it past batch_bytes, unless it is the first (an entry larger than the
// bound goes alone).
TEST(NsLog, BatchesAreBoundedInBytes) {
  FakeServer server;
  NsLogOptions o;
  o.batch_bytes = 10000;
  NsLog log(o, SendTo(&server));
  auto write = [](uint64_t seq, size_t bytes) {
    proto::LogEntry e = Entry(seq);
    e.mutable_write()->set_ino(seq);
    e.mutable_write()->set_data(std::string(bytes, 'd'));
    return e;
  };
  ASSERT_TRUE(log.Append(write(1, 4000)).ok());
  ASSERT_TRUE(log.Append(write(2, 4000)).ok());
  ASSERT_TRUE(log.Append(write(3, 4000)).ok());   // past 10000 with the two before
  ASSERT_TRUE(log.Append(write(4, 20000)).ok());  // alone
  ASSERT_TRUE(log.Append(Entry(5)).ok());
  ASSERT_TRUE(log.Flush().ok());
  EXPECT_EQ(server.applied(), (std::vector<uint64_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(server.batches(), (std::vector<size_t>{2, 1, 1, 1}));
  // A write touches its file (its size and times): the server's answers
  // about it wait for the log.
  EXPECT_EQ(NsLog::TouchedBy(write(9, 1)), (std::vector<uint64_t>{9}));
}

TEST(NsLog, ABatchThatCouldNotGoIsSentAgainWithTheSameNumbers) {
  FakeServer server;
  NsLog log(NsLogOptions(), SendTo(&server));
  ASSERT_TRUE(log.Append(Entry(1)).ok());
  ASSERT_TRUE(log.Append(Entry(2)).ok());
  server.set_fail(2);
  EXPECT_EQ(log.Flush().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(log.Flush().code(), absl::StatusCode::kUnavailable);
  ASSERT_TRUE(log.Flush().ok());
  EXPECT_EQ(server.tried(), (std::vector<uint64_t>{1, 2, 1, 2}));
  EXPECT_EQ(server.applied(), (std::vector<uint64_t>{1, 2}));
  EXPECT_TRUE(log.error().ok());
}

TEST(NsLog, AFlushThatCannotGetThroughGivesUpAndKeepsTheEntries) {
  FakeServer server;
  NsLogOptions o;
  o.wait = absl::Milliseconds(300);
  NsLog log(o, SendTo(&server));
  ASSERT_TRUE(log.Append(Entry(1)).ok());
  server.set_fail(1000);
  EXPECT_EQ(log.Flush().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(log.pending(), 1u);
  server.set_fail(0);
  ASSERT_TRUE(log.Flush().ok());
  EXPECT_EQ(server.applied(), (std::vector<uint64_t>{1}));
}

TEST(NsLog, ARefusedEntryStopsTheLogAndDropsWhatCameAfterIt) {
  FakeServer server;
  NsLog log(NsLogOptions(), SendTo(&server));
  for (uint64_t i = 1; i <= 5; ++i) ASSERT_TRUE(log.Append(Entry(i, 100 + i)).ok());
  server.set_refuse(3);
  absl::Status s = log.Flush();
  EXPECT_EQ(ToErrno(s), EEXIST);
  EXPECT_EQ(server.applied(), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(log.pending(), 0u);
  EXPECT_EQ(ToErrno(log.error()), EEXIST);
  EXPECT_EQ(ToErrno(log.Append(Entry(6)).status()), EEXIST);
  EXPECT_EQ(ToErrno(log.Flush()), EEXIST);
  // What an fsync of one file asks: its entries before the refused one
  // were applied; those from it on were not.
  EXPECT_TRUE(log.Flush(2).ok());
  EXPECT_EQ(ToErrno(log.Flush(3)), EEXIST);
  EXPECT_FALSE(log.Dropped(101));
  EXPECT_FALSE(log.Dropped(102));
  for (uint64_t ino : {103, 104, 105, 7}) EXPECT_TRUE(log.Dropped(ino)) << ino;
}

TEST(NsLog, TouchesSaysWhichInodesPendingEntriesChangeUntilTheyAreApplied) {
  FakeServer server;
  NsLogOptions o;
  o.batch_entries = 1;  // Flush(n) applies n entries
  NsLog log(o, SendTo(&server));
  EXPECT_FALSE(log.Touches(7));
  ASSERT_TRUE(log.Append(Entry(1, 100)).ok());  // mknod 100 in 7
  proto::LogEntry rename;
  rename.set_seq(2);
  proto::RenameRequest* r = rename.mutable_rename();
  r->set_parent(7);
  r->set_new_parent(8);
  r->set_expected_ino(100);
  r->set_expected_new_ino(101);
  proto::LogEntry open;
  open.set_seq(3);
  open.mutable_open()->set_ino(102);
  proto::LogEntry setattr;
  setattr.set_seq(4);
  setattr.mutable_setattr()->set_ino(103);
  const uint64_t mark = log.Mark();
  ASSERT_TRUE(log.TryAppend({rename, open, setattr}).ok());
  for (uint64_t ino : {7, 8, 100, 101, 103}) EXPECT_TRUE(log.Touches(ino)) << ino;
  // An open or a close changes nothing a lookup or getattr answers.
  EXPECT_FALSE(log.Touches(102));
  EXPECT_FALSE(log.Touches(104));
  EXPECT_FALSE(log.Touches(0));
  ASSERT_OK(log.Flush(1));  // the mknod only: 7 and 100 are still renamed
  EXPECT_TRUE(log.Touches(7));
  EXPECT_TRUE(log.Touches(100));
  ASSERT_OK(log.Flush());
  for (uint64_t ino : {7, 8, 100, 101, 103}) {
    EXPECT_FALSE(log.Touches(ino)) << ino;
    // A call that began before they were applied may have been answered
    // before them: it asks again.
    EXPECT_TRUE(log.TouchedSince(mark, ino)) << ino;
    EXPECT_FALSE(log.TouchedSince(log.Mark(), ino)) << ino;
  }
  EXPECT_FALSE(log.TouchedSince(mark, 102));
  EXPECT_FALSE(log.TouchedSince(mark, 104));
  // A mark older than what is remembered: every inode counts as touched.
  const uint64_t old_mark = log.Mark();
  for (uint64_t i = 0; i < NsLog::kHistory + 10; ++i) {
    ASSERT_TRUE(log.TryAppend({Entry(1000 + i, 5000 + i)}).ok());
    if (i % 1000 == 999) ASSERT_OK(log.Flush());
  }
  ASSERT_OK(log.Flush());
  EXPECT_TRUE(log.TouchedSince(old_mark, 999999));
  EXPECT_FALSE(log.TouchedSince(log.Mark(), 999999));
  // Entries dropped after a refusal touch nothing any more.
  ASSERT_TRUE(log.Append(Entry(20000, 200)).ok());
  ASSERT_TRUE(log.Append(Entry(20001, 201)).ok());
  server.set_refuse(20000);
  EXPECT_EQ(ToErrno(log.Flush()), EEXIST);
  EXPECT_FALSE(log.Touches(200));
  EXPECT_FALSE(log.Touches(201));
  EXPECT_FALSE(log.Touches(7));
}

TEST(NsLog, AFullLogSendsBeforeItTakesMore) {
  FakeServer server;
  NsLogOptions o;
  o.max_entries = 4;
  o.batch_entries = 2;
  NsLog log(o, SendTo(&server));
  for (uint64_t i = 1; i <= 10; ++i) ASSERT_TRUE(log.Append(Entry(i)).ok());
  EXPECT_LE(log.pending(), 4u);
  EXPECT_GE(server.applied().size(), 6u);
  ASSERT_TRUE(log.Flush().ok());
  std::vector<uint64_t> want;
  for (uint64_t i = 1; i <= 10; ++i) want.push_back(i);
  EXPECT_EQ(server.applied(), want);
}

TEST(NsLog, AFullLogRefusesATryWithoutSending) {
  FakeServer server;
  NsLogOptions o;
  o.max_entries = 2;
  NsLog log(o, SendTo(&server));
  ASSERT_TRUE(log.TryAppend({Entry(1)}).ok());
  // All or none: two do not fit in the one place left.
  EXPECT_EQ(log.TryAppend({Entry(2), Entry(3)}).status().code(),
            absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(log.TryAppend({Entry(2)}).ok());
  EXPECT_EQ(log.TryAppend({Entry(3)}).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(server.applied().empty());
  ASSERT_TRUE(log.Flush().ok());
  ASSERT_OK_AND_ASSIGN(uint64_t pos, log.TryAppend({Entry(3), Entry(4)}));
  EXPECT_EQ(pos, 4u);
  EXPECT_EQ(server.applied(), (std::vector<uint64_t>{1, 2}));
  server.set_refuse(3);
  EXPECT_EQ(ToErrno(log.Flush()), EEXIST);
  EXPECT_EQ(ToErrno(log.TryAppend({Entry(5)}).status()), EEXIST);
}

TEST(NsLog, OldEntriesGoByThemselves) {
  FakeServer server;
  NsLogOptions o;
  o.max_age = absl::Milliseconds(20);
  NsLog log(o, SendTo(&server));
  log.Start();
  ASSERT_TRUE(log.Append(Entry(1)).ok());
  for (int i = 0; i < 1000 && log.pending() > 0; ++i) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(server.applied(), (std::vector<uint64_t>{1}));
  log.Stop();
}

TEST(NsLog, TheOldestPendingCreateSaysWhichInodeNumbersAreStillUsed) {
  FakeServer server;
  NsLogOptions o;
  o.batch_entries = 1;  // Flush(n) applies n entries
  NsLog log(o, SendTo(&server));
  EXPECT_EQ(log.OldestPendingIno(), 0u);
  ASSERT_TRUE(log.Append(Entry(1)).ok());  // no create
  ASSERT_TRUE(log.Append(Entry(2, 50)).ok());
  ASSERT_TRUE(log.Append(Entry(3, 51)).ok());
  EXPECT_EQ(log.OldestPendingIno(), 50u);
  ASSERT_TRUE(log.Flush(2).ok());
  EXPECT_EQ(log.OldestPendingIno(), 51u);
}

TEST(NsLog, ConcurrentAppendsAndFlushesKeepTheOrder) {
  FakeServer server;
  NsLogOptions o;
  o.max_entries = 64;
  o.batch_entries = 7;
  o.max_age = absl::Milliseconds(1);
  NsLog log(o, SendTo(&server));
  log.Start();
  std::atomic<uint64_t> next{0};
  absl::Mutex order;  // an entry's number and its place in the log agree
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 500; ++i) {
        {
          absl::MutexLock l(&order);
          ASSERT_TRUE(log.Append(Entry(++next)).ok());
        }
        if (i % 50 == 0) {
          ASSERT_TRUE(log.Flush().ok());
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(log.Flush().ok());
  log.Stop();
  const std::vector<uint64_t> applied = server.applied();
  ASSERT_EQ(applied.size(), 2000u);
  for (size_t i = 0; i < applied.size(); ++i) ASSERT_EQ(applied[i], i + 1);
}

}  // namespace
}  // namespace grantfs
