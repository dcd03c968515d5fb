// Namespace grants at the service (docs/namespace-grants.md): inode ranges,
// logs applied in one batch and exactly once, the grant checks, and the
// recall that makes a holder apply its log before another session reads.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <sys/stat.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "server/service_test_util.h"

namespace grantfs {
namespace {

// One mount's session: its sequence numbers, its recall stream (a thread
// that runs `on_grant_recall` for each recalled grant, then acknowledges),
// and the calls the tests make.
class Session {
 public:
  Session(proto::GrantFs::Stub* stub, bool subscribe) : stub_(stub) {
    proto::OpenSessionRequest req;
    proto::OpenSessionReply reply;
    EXPECT_TRUE(stub_->OpenSession(Ctx().get(), req, &reply).ok());
    id_ = reply.client_id();
    if (subscribe) Subscribe();
  }
  ~Session() { EndStream(); }
  // The stream broke (the server restarted): a new one.
  void Resubscribe() {
    EndStream();
    Subscribe();
  }
  uint64_t id() const { return id_; }
  uint64_t NextSeq() { return ++seq_; }
  template <typename Req>
  void Tag(Req* req) {
    req->mutable_header()->set_client_id(id_);
    req->mutable_header()->set_seq(NextSeq());
  }
  // Set before the recall comes; runs on the stream's thread.
  void OnGrantRecall(std::function<void(uint64_t dir)> fn) {
    absl::MutexLock l(&mu_);
    on_grant_recall_ = std::move(fn);
  }
  // Stops acknowledging recalls (a mount that hangs).
  void StopAnswering() { answering_ = false; }
  int grant_recalls() const { return grant_recalls_.load(); }

  proto::InodeRangeReply Range(uint32_t count, uint64_t keep_from = 0) {
    proto::InodeRangeRequest req;
    Tag(&req);
    req.set_count(count);
    req.set_keep_from(keep_from);
    proto::InodeRangeReply reply;
    EXPECT_TRUE(stub_->InodeRange(Ctx().get(), req, &reply).ok());
    return reply;
  }
  // Space granted to the session (its whole grant now).
  uint64_t Grant(uint64_t bytes) {
    proto::GrantRequest req;
    Tag(&req);
    req.set_wanted_bytes(bytes);
    proto::GrantReply reply;
    EXPECT_TRUE(stub_->Grant(Ctx().get(), req, &reply).ok());
    EXPECT_EQ(reply.err(), 0);
    return reply.grant_bytes();
  }
  proto::AttrReply MkDir(uint64_t parent, const std::string& name, bool want_grant) {
    proto::MkNodRequest req;
    Tag(&req);
    req.set_parent(parent);
    req.set_name(name);
    req.set_mode(S_IFDIR | 0755);
    req.set_exclusive(true);
    req.set_want_grant(want_grant);
    proto::AttrReply reply;
    EXPECT_TRUE(stub_->MkNod(Ctx().get(), req, &reply).ok());
    return reply;
  }
  proto::AttrReply Lookup(uint64_t parent, const std::string& name) {
    proto::LookupRequest req;
    Tag(&req);
    req.set_parent(parent);
    req.set_name(name);
    proto::AttrReply reply;
    EXPECT_TRUE(stub_->Lookup(Ctx().get(), req, &reply).ok());
    return reply;
  }
  // The first page of a listing (`want_grant`: the directory's grant
  // asked for with it).
  proto::ReadDirReply List(uint64_t dir, bool want_grant) {
    proto::ReadDirRequest req;
    Tag(&req);
    req.set_ino(dir);
    req.set_max_entries(100);
    req.set_want_grant(want_grant);
    proto::ReadDirReply reply;
    EXPECT_TRUE(stub_->ReadDir(Ctx().get(), req, &reply).ok());
    return reply;
  }
  grpc::Status Apply(const std::vector<proto::LogEntry>& entries, proto::ApplyLogReply* reply) {
    proto::ApplyLogRequest req;
    Tag(&req);
    for (const auto& e : entries) *req.add_entries() = e;
    return stub_->ApplyLog(Ctx().get(), req, reply);
  }
  // Entries, each with a fresh sequence number and root's credentials.
  proto::LogEntry Create(uint64_t ino, uint64_t parent, const std::string& name, uint32_t mode,
                         int64_t time_ns = 0) {
    proto::LogEntry e = Entry(time_ns);
    e.set_ino(ino);
    proto::MkNodRequest* m = e.mutable_mknod();
    m->set_parent(parent);
    m->set_name(name);
    m->set_mode(mode);
    return e;
  }
  proto::LogEntry Symlink(uint64_t ino, uint64_t parent, const std::string& name,
                          const std::string& target) {
    proto::LogEntry e = Entry(0);
    e.set_ino(ino);
    proto::SymlinkRequest* m = e.mutable_symlink();
    m->set_parent(parent);
    m->set_name(name);
    m->set_target(target);
    return e;
  }
  proto::LogEntry Rename(uint64_t parent, const std::string& name, uint64_t new_parent,
                         const std::string& new_name) {
    proto::LogEntry e = Entry(0);
    proto::RenameRequest* m = e.mutable_rename();
    m->set_parent(parent);
    m->set_name(name);
    m->set_new_parent(new_parent);
    m->set_new_name(new_name);
    return e;
  }
  proto::LogEntry Remove(uint64_t parent, const std::string& name, bool is_dir = false) {
    proto::LogEntry e = Entry(0);
    proto::RemoveRequest* m = e.mutable_remove();
    m->set_parent(parent);
    m->set_name(name);
    m->set_is_dir(is_dir);
    return e;
  }
  // A write entry from the session's grant, in a granted directory, made
  // at `time_ns`.
  proto::LogEntry Write(uint64_t ino, uint64_t offset, const std::string& data, int64_t time_ns) {
    proto::LogEntry e = Entry(time_ns);
    proto::WriteRequest* w = e.mutable_write();
    w->set_ino(ino);
    w->set_offset(offset);
    w->set_data(data);
    w->set_from_grant(true);
    w->set_granted(true);
    w->set_time_ns(time_ns);
    return e;
  }
  proto::LogEntry Chmod(uint64_t ino, uint32_t mode) {
    proto::LogEntry e = Entry(0);
    proto::SetAttrRequest* m = e.mutable_setattr();
    m->set_ino(ino);
    m->set_valid(proto::SetAttrRequest::MODE);
    m->set_mode(mode);
    return e;
  }

  static std::unique_ptr<grpc::ClientContext> Ctx() {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    ctx->AddMetadata("x-grantfs-secret", "s3cret");
    return ctx;
  }

 private:
  proto::LogEntry Entry(int64_t time_ns) {
    proto::LogEntry e;
    e.set_seq(NextSeq());
    e.set_time_ns(time_ns);
    return e;
  }
  void EndStream() {
    if (stream_ctx_) stream_ctx_->TryCancel();
    if (reader_.joinable()) reader_.join();
  }
  void Subscribe() {
    stream_ctx_ = Ctx();
    stream_ctx_->set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(5));
    proto::SubscribeRequest req;
    req.mutable_header()->set_client_id(id_);
    req.set_leases(true);
    std::shared_ptr<grpc::ClientReader<proto::InvalidationBatch>> reader(
        stub_->Subscribe(stream_ctx_.get(), req).release());
    // The first batch says the subscription was taken.
    proto::InvalidationBatch first;
    ASSERT_TRUE(reader->Read(&first));
    ASSERT_TRUE(first.subscribed());
    reader_ = std::thread([this, reader] {
      proto::InvalidationBatch batch;
      while (reader->Read(&batch)) {
        for (const proto::Invalidation& inv : batch.items()) {
          if (inv.recall() == 0 || !answering_) continue;
          if (inv.grant() != 0) {
            ++grant_recalls_;
            std::function<void(uint64_t)> fn;
            {
              absl::MutexLock l(&mu_);
              fn = on_grant_recall_;
            }
            if (fn) fn(inv.grant());
          }
          proto::AckRecallRequest ack;
          ack.mutable_header()->set_client_id(id_);
          ack.set_recall(inv.recall());
          proto::ErrReply reply;
          stub_->AckRecall(Ctx().get(), ack, &reply);
        }
      }
      reader->Finish();
    });
  }

  proto::GrantFs::Stub* const stub_;
  uint64_t id_ = 0;
  std::atomic<uint64_t> seq_{0};
  std::unique_ptr<grpc::ClientContext> stream_ctx_;
  std::thread reader_;
  std::atomic<bool> answering_{true};
  std::atomic<int> grant_recalls_{0};
  absl::Mutex mu_;
  std::function<void(uint64_t)> on_grant_recall_ ABSL_GUARDED_BY(mu_);
};

class NsGrantsTest : public ServiceTest {
 protected:
  // A session with a range of 64 inode numbers and the grant of a new
  // directory "d" in the root.
  void Hold(Session* s, const std::string& dir = "d") {
    proto::InodeRangeReply r = s->Range(64);
    ASSERT_EQ(r.err(), 0);
    ASSERT_EQ(r.count(), 64u);
    first_ = r.first();
    proto::AttrReply d = s->MkDir(1, dir, /*want_grant=*/true);
    ASSERT_EQ(d.err(), 0);
    ASSERT_TRUE(d.granted());
    dir_ino_ = d.attr().ino();
  }
  // The errno the server answers one entry alone with.
  static int ErrOf(Session* s, const proto::LogEntry& e) {
    proto::ApplyLogReply reply;
    EXPECT_TRUE(s->Apply({e}, &reply).ok());
    EXPECT_EQ(reply.errs_size(), 1);
    return reply.errs_size() > 0 ? reply.errs(0) : -1;
  }
  uint64_t first_ = 0;
  uint64_t dir_ino_ = 0;
};

TEST_F(NsGrantsTest, ALogIsAppliedInOrderWithItsNumbersAndTimesInOneWalSync) {
  Session a(stub_.get(), true);
  Hold(&a);
  const int64_t t = 1'600'000'000'123'456'789;
  std::vector<proto::LogEntry> log = {
      a.Create(first_, dir_ino_, "sub", S_IFDIR | 0755),
      a.Create(first_ + 1, first_, "f1", S_IFREG | 0644, t),
      a.Symlink(first_ + 2, dir_ino_, "l", "sub/f1"),
      a.Rename(first_, "f1", dir_ino_, "f2"),
      a.Chmod(first_ + 1, 0600),
      a.Remove(dir_ino_, "l"),
  };
  const CommitStats before = volume_->meta().store().Commits();
  proto::ApplyLogReply reply;
  ASSERT_TRUE(a.Apply(log, &reply).ok());
  ASSERT_EQ(reply.errs_size(), 6);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(reply.errs(i), 0) << "entry " << i;
  EXPECT_EQ(volume_->meta().store().Commits().wal_syncs - before.wal_syncs, 1u);

  proto::AttrReply f2 = a.Lookup(dir_ino_, "f2");
  ASSERT_EQ(f2.err(), 0);
  EXPECT_EQ(f2.attr().ino(), first_ + 1);
  EXPECT_EQ(f2.attr().mode(), S_IFREG | 0600u);
  EXPECT_EQ(f2.attr().mtime_ns(), t);
  EXPECT_EQ(a.Lookup(dir_ino_, "l").err(), ENOENT);
  EXPECT_EQ(a.Lookup(first_, "f1").err(), ENOENT);
  EXPECT_EQ(a.Lookup(dir_ino_, "sub").attr().ino(), first_);
  // Inode numbers of a range are not handed out again by the server.
  proto::AttrReply other = a.MkDir(dir_ino_, "x", false);
  ASSERT_EQ(other.err(), 0);
  EXPECT_GE(other.attr().ino(), first_ + 64);
}

TEST_F(NsGrantsTest, ABatchSentAgainIsAppliedOnce) {
  Session a(stub_.get(), true);
  Hold(&a);
  std::vector<proto::LogEntry> log = {a.Create(first_, dir_ino_, "f", S_IFREG | 0644),
                                      a.Rename(dir_ino_, "f", dir_ino_, "g")};
  proto::ApplyLogReply reply;
  ASSERT_TRUE(a.Apply(log, &reply).ok());
  const uint64_t inodes = volume_->Space().inodes;
  proto::ApplyLogReply again;
  ASSERT_TRUE(a.Apply(log, &again).ok());
  ASSERT_EQ(again.errs_size(), 2);
  EXPECT_EQ(again.errs(0), 0);  // answered from the records, not EEXIST
  EXPECT_EQ(again.errs(1), 0);  // nor ENOENT
  EXPECT_EQ(volume_->Space().inodes, inodes);
  EXPECT_EQ(a.Lookup(dir_ino_, "g").attr().ino(), first_);
}

TEST_F(NsGrantsTest, EntriesOutsideTheSessionsGrantsAndRangesAreRefused) {
  Session a(stub_.get(), true);
  Hold(&a);
  Session b(stub_.get(), true);
  proto::InodeRangeReply rb = b.Range(8);
  ASSERT_EQ(rb.err(), 0);
  EXPECT_EQ(ErrOf(&a, a.Create(first_, 1, "in-root", S_IFREG | 0644)), ESTALE);  // not granted
  EXPECT_EQ(ErrOf(&a, a.Create(rb.first(), dir_ino_, "theirs", S_IFREG | 0644)), EINVAL);
  EXPECT_EQ(ErrOf(&a, a.Create(dir_ino_, dir_ino_, "dir", S_IFREG | 0644)), EINVAL);
  EXPECT_EQ(ErrOf(&a, a.Create(0, dir_ino_, "none", S_IFREG | 0644)), EINVAL);
  EXPECT_EQ(ErrOf(&a, a.Create(first_, dir_ino_, "bad/name", S_IFREG | 0644)), EINVAL);
  EXPECT_EQ(ErrOf(&a, a.Create(first_, dir_ino_, "ok", S_IFREG | 0644)), 0);
  // A number is used once, even once its inode is gone again.
  EXPECT_EQ(ErrOf(&a, a.Create(first_, dir_ino_, "again", S_IFREG | 0644)), EEXIST);
  EXPECT_EQ(ErrOf(&a, a.Remove(dir_ino_, "ok")), 0);
  EXPECT_EQ(ErrOf(&a, a.Create(first_, dir_ino_, "again", S_IFREG | 0644)), EEXIST);
  // b holds no grant of "d".
  EXPECT_EQ(ErrOf(&b, b.Create(rb.first(), dir_ino_, "mine", S_IFREG | 0644)), ESTALE);
  // A session without inode numbers gets no grant.
  Session c(stub_.get(), true);
  proto::AttrReply cd = c.MkDir(1, "c", true);
  ASSERT_EQ(cd.err(), 0);
  EXPECT_FALSE(cd.granted());
}

TEST_F(NsGrantsTest, NothingAfterARefusedEntryIsApplied) {
  Session a(stub_.get(), true);
  Hold(&a);
  proto::ApplyLogReply reply;
  ASSERT_TRUE(a.Apply({a.Create(first_, dir_ino_, "f", S_IFREG | 0644),
                       a.Create(first_ + 1, dir_ino_, "f", S_IFREG | 0644),  // EEXIST
                       a.Create(first_ + 2, dir_ino_, "g", S_IFREG | 0644)},
                      &reply)
                  .ok());
  ASSERT_EQ(reply.errs_size(), 2);
  EXPECT_EQ(reply.errs(0), 0);
  EXPECT_EQ(reply.errs(1), EEXIST);
  EXPECT_EQ(a.Lookup(dir_ino_, "g").err(), ENOENT);
}

TEST_F(NsGrantsTest, ARetryOfAnAppliedBatchSucceedsAfterTheGrantIsGone) {
  Session a(stub_.get(), true);
  Hold(&a);
  std::vector<proto::LogEntry> log = {a.Create(first_, dir_ino_, "sub", S_IFDIR | 0755),
                                      a.Create(first_ + 1, first_, "f", S_IFREG | 0644)};
  proto::ApplyLogReply reply;
  ASSERT_TRUE(a.Apply(log, &reply).ok());
  ASSERT_EQ(reply.errs_size(), 2);
  // Another session reads: a's grant is recalled (a has nothing left to
  // apply), then its first reply is lost and it sends the batch again.
  Session b(stub_.get(), true);
  EXPECT_EQ(b.Lookup(dir_ino_, "sub").err(), 0);
  ASSERT_TRUE(a.Apply(log, &reply).ok());
  ASSERT_EQ(reply.errs_size(), 2);
  EXPECT_EQ(reply.errs(0), 0);
  EXPECT_EQ(reply.errs(1), 0);
}

TEST_F(NsGrantsTest, RemovingAGrantedDirectoryElsewhereRecallsItFirst) {
  Session a(stub_.get(), true);
  Hold(&a);
  a.OnGrantRecall([&](uint64_t) {
    proto::ApplyLogReply reply;
    EXPECT_TRUE(a.Apply({a.Create(first_, dir_ino_, "inside", S_IFREG | 0644)}, &reply).ok());
  });
  Session b(stub_.get(), true);
  proto::RemoveRequest req;
  b.Tag(&req);
  req.set_parent(1);
  req.set_name("d");
  req.set_is_dir(true);
  proto::RemoveReply reply;
  ASSERT_TRUE(stub_->Remove(Session::Ctx().get(), req, &reply).ok());
  EXPECT_EQ(reply.err(), ENOTEMPTY);  // what a made there came first
  EXPECT_EQ(a.grant_recalls(), 1);
}

TEST_F(NsGrantsTest, LinksAndAttributeChangesNeedTheGrantOfTheInodesDirectory) {
  Session a(stub_.get(), true);
  Hold(&a);
  ASSERT_EQ(ErrOf(&a, a.Create(first_, dir_ino_, "f", S_IFREG | 0644)), 0);
  ASSERT_EQ(MkNodErr(1, "outside"), 0);
  const uint64_t outside = last_ino_;
  proto::LogEntry link;
  link.set_seq(a.NextSeq());
  link.mutable_link()->set_ino(outside);
  link.mutable_link()->set_new_parent(dir_ino_);
  link.mutable_link()->set_new_name("l");
  EXPECT_EQ(ErrOf(&a, link), ESTALE);
  EXPECT_EQ(ErrOf(&a, a.Chmod(outside, 0600)), ESTALE);
  link.set_seq(a.NextSeq());
  link.mutable_link()->set_ino(first_);
  EXPECT_EQ(ErrOf(&a, link), 0);
  EXPECT_EQ(ErrOf(&a, a.Chmod(first_, 0600)), 0);
  EXPECT_EQ(a.Lookup(dir_ino_, "l").attr().nlink(), 2u);
}

TEST_F(NsGrantsTest, AnotherSessionSeesTheHoldersLogAppliedBeforeItReads) {
  Session a(stub_.get(), true);
  Hold(&a);
  // Made on a's side only: the server has not heard of it yet.
  proto::LogEntry pending = a.Create(first_, dir_ino_, "late", S_IFREG | 0644);
  std::atomic<int> applied{0};
  a.OnGrantRecall([&](uint64_t dir) {
    EXPECT_EQ(dir, dir_ino_);
    proto::ApplyLogReply reply;
    EXPECT_TRUE(a.Apply({pending}, &reply).ok());
    EXPECT_EQ(reply.errs(0), 0);
    ++applied;
  });
  Session b(stub_.get(), true);
  proto::AttrReply seen = b.Lookup(dir_ino_, "late");
  EXPECT_EQ(seen.err(), 0);
  EXPECT_EQ(seen.attr().ino(), first_);
  EXPECT_EQ(applied.load(), 1);
  // The grant is gone: a's later entries there are refused.
  proto::ApplyLogReply reply;
  ASSERT_TRUE(a.Apply({a.Create(first_ + 1, dir_ino_, "after", S_IFREG | 0644)}, &reply).ok());
  EXPECT_EQ(reply.errs(0), ESTALE);
  EXPECT_EQ(a.grant_recalls(), 1);
}

TEST_F(NsGrantsTest, ListingTheParentRecallsAGrantedSubdirectory) {
  Session a(stub_.get(), true);
  Hold(&a);
  a.OnGrantRecall([&](uint64_t) {
    proto::ApplyLogReply reply;
    EXPECT_TRUE(a.Apply({a.Create(first_, dir_ino_, "sub", S_IFDIR | 0755)}, &reply).ok());
  });
  Session b(stub_.get(), true);
  proto::ReadDirRequest req;
  b.Tag(&req);
  req.set_ino(1);
  req.set_max_entries(100);
  proto::ReadDirReply reply;
  ASSERT_TRUE(stub_->ReadDir(Session::Ctx().get(), req, &reply).ok());
  ASSERT_EQ(reply.err(), 0);
  bool found = false;
  for (const auto& e : reply.entries()) {
    if (e.name() == "d") {
      found = true;
      EXPECT_EQ(e.attr().nlink(), 3u);  // its new subdirectory counted
    }
  }
  EXPECT_TRUE(found);
  EXPECT_EQ(a.grant_recalls(), 1);
}

// Grants of existing directories: asked for with the first page of a
// listing, given when no other session uses the directory; the holder then
// changes it on its own, and another session's look recalls it as before.
TEST_F(NsGrantsTest, AnExistingDirectoryNoOtherSessionUsesIsGrantedWithItsListing) {
  Session b(stub_.get(), true);
  const uint64_t e = b.MkDir(1, "e", /*want_grant=*/false).attr().ino();
  ASSERT_NE(e, 0u);
  Session a(stub_.get(), true);
  const uint64_t first = a.Range(64).first();
  // Without the ask, or without inode numbers, nothing is granted.
  Session c(stub_.get(), true);
  EXPECT_FALSE(c.List(e, /*want_grant=*/true).granted());
  EXPECT_FALSE(a.List(e, /*want_grant=*/false).granted());
  const proto::ReadDirReply listed = a.List(e, /*want_grant=*/true);
  ASSERT_EQ(listed.err(), 0);
  EXPECT_TRUE(listed.granted());
  EXPECT_TRUE(listed.leased());
  EXPECT_TRUE(listed.eof());
  proto::ApplyLogReply reply;
  ASSERT_TRUE(a.Apply({a.Create(first, e, "x", S_IFREG | 0644)}, &reply).ok());
  ASSERT_EQ(reply.errs(0), 0);
  // b made the directory, and sees what a made in it: a's grant recalled.
  EXPECT_EQ(b.Lookup(e, "x").err(), 0);
  EXPECT_EQ(a.grant_recalls(), 1);
  ASSERT_TRUE(a.Apply({a.Create(first + 1, e, "y", S_IFREG | 0644)}, &reply).ok());
  EXPECT_EQ(reply.errs(0), ESTALE);
}

TEST_F(NsGrantsTest, ADirectoryInUseElsewhereOrTooLargeIsNotGranted) {
  // A directory of more names than a grant covers (made first: the test's
  // sessions send no heartbeats, so their leases last 3 s from now).
  Session maker(stub_.get(), /*subscribe=*/false);  // takes no leases
  const uint64_t big = maker.MkDir(1, "big", /*want_grant=*/false).attr().ino();
  for (int i = 0; i <= Volume::kMaxGrantedEntries; ++i) {
    ASSERT_EQ(maker.MkDir(big, "n" + std::to_string(i), false).err(), 0);
  }
  Session b(stub_.get(), true);
  const uint64_t e = b.MkDir(1, "e", /*want_grant=*/false).attr().ino();
  // b made (and so leases the attributes of) an inode in it.
  ASSERT_TRUE(b.MkDir(e, "sub", /*want_grant=*/false).leased());
  Session a(stub_.get(), true);
  a.Range(64);
  EXPECT_FALSE(a.List(e, /*want_grant=*/true).granted());
  EXPECT_FALSE(a.List(big, /*want_grant=*/true).granted());
  // One name fewer: granted.
  proto::RemoveRequest rm;
  maker.Tag(&rm);
  rm.set_parent(big);
  rm.set_name("n0");
  rm.set_is_dir(true);
  proto::RemoveReply removed;
  ASSERT_TRUE(stub_->Remove(Session::Ctx().get(), rm, &removed).ok());
  ASSERT_EQ(removed.err(), 0);
  const proto::ReadDirReply last = a.List(big, /*want_grant=*/true);
  EXPECT_EQ(last.err(), 0);
  EXPECT_TRUE(last.granted());
}

// What a grant of an existing directory must not miss: a change of it
// that checked for grants before the grant was there, and an inode in it
// whose record names another directory (a look at it would recall that
// directory's grant, not this one's).
TEST_F(NsGrantsTest, AnExistingDirectoryIsNotGrantedUnderAChangeOrWithALinkFromElsewhere) {
  Session maker(stub_.get(), /*subscribe=*/false);
  const uint64_t e = maker.MkDir(1, "e", /*want_grant=*/false).attr().ino();
  const uint64_t x = maker.MkDir(1, "x", /*want_grant=*/false).attr().ino();
  Session a(stub_.get(), true);
  a.Range(64);
  volume_->leases().BeginChange({e});
  EXPECT_FALSE(a.List(e, /*want_grant=*/true).granted());
  volume_->leases().EndChange({e});
  volume_->leases().BeginChange({1});  // a change of its name, in its parent
  EXPECT_FALSE(a.List(e, /*want_grant=*/true).granted());
  volume_->leases().EndChange({1});
  // A file made in x, linked into e, its name in x removed: one name, in
  // e, but its record names x.
  proto::MkNodRequest mk;
  maker.Tag(&mk);
  mk.set_parent(x);
  mk.set_name("f");
  mk.set_mode(S_IFREG | 0644);
  proto::AttrReply f;
  ASSERT_TRUE(stub_->MkNod(Session::Ctx().get(), mk, &f).ok());
  ASSERT_EQ(f.err(), 0);
  proto::LinkRequest ln;
  maker.Tag(&ln);
  ln.set_ino(f.attr().ino());
  ln.set_new_parent(e);
  ln.set_new_name("f");
  proto::AttrReply linked;
  ASSERT_TRUE(stub_->Link(Session::Ctx().get(), ln, &linked).ok());
  ASSERT_EQ(linked.err(), 0);
  proto::RemoveRequest rm;
  maker.Tag(&rm);
  rm.set_parent(x);
  rm.set_name("f");
  proto::RemoveReply removed;
  ASSERT_TRUE(stub_->Remove(Session::Ctx().get(), rm, &removed).ok());
  ASSERT_EQ(removed.err(), 0);
  EXPECT_FALSE(a.List(e, /*want_grant=*/true).granted());
  // Moved into e by a rename instead: its record names e.
  proto::RenameRequest mv;
  maker.Tag(&mv);
  mv.set_parent(e);
  mv.set_name("f");
  mv.set_new_parent(x);
  mv.set_new_name("g");
  proto::RenameReply moved;
  ASSERT_TRUE(stub_->Rename(Session::Ctx().get(), mv, &moved).ok());
  ASSERT_EQ(moved.err(), 0);
  maker.Tag(&mv);
  mv.set_parent(x);
  mv.set_name("g");
  mv.set_new_parent(e);
  mv.set_new_name("f");
  ASSERT_TRUE(stub_->Rename(Session::Ctx().get(), mv, &moved).ok());
  ASSERT_EQ(moved.err(), 0);
  EXPECT_TRUE(a.List(e, /*want_grant=*/true).granted());
}

TEST_F(NsGrantsTest, AnExistingDirectoryHasOneHolderAndOneRecalledTooOftenIsNotGranted) {
  Session maker(stub_.get(), /*subscribe=*/false);
  const uint64_t e = maker.MkDir(1, "e", /*want_grant=*/false).attr().ino();
  Session a(stub_.get(), true);
  Session c(stub_.get(), true);
  const uint64_t a_first = a.Range(64).first();
  c.Range(64);
  ASSERT_TRUE(a.List(e, /*want_grant=*/true).granted());
  // c's ask recalls a's grant first (its listing is a look); then c holds
  // it, and a's entries are refused.
  ASSERT_TRUE(c.List(e, /*want_grant=*/true).granted());
  EXPECT_EQ(a.grant_recalls(), 1);
  proto::ApplyLogReply reply;
  ASSERT_TRUE(a.Apply({a.Create(a_first, e, "x", S_IFREG | 0644)}, &reply).ok());
  EXPECT_EQ(reply.errs(0), ESTALE);
  // Passed back and forth: past the hot rule's recalls (8 within 1 s) it
  // is granted to neither for a while.
  int granted = 0;
  for (int i = 0; i < 12; ++i) {
    Session& s = i % 2 == 0 ? a : c;
    granted += s.List(e, /*want_grant=*/true).granted() ? 1 : 0;
  }
  EXPECT_LT(granted, 12);
  EXPECT_FALSE(a.List(e, /*want_grant=*/true).granted());
}

// A holder that stops answering loses its grant once its lease ran out;
// what it sends then is refused, so nobody reads a state that changes
// behind it.
class NsGrantsLapseTest : public NsGrantsTest {
 protected:
  void SetUp() override {
    meta_lease_ = absl::Milliseconds(800);
    NsGrantsTest::SetUp();
  }
};

TEST_F(NsGrantsLapseTest, AHolderThatStopsAnsweringLosesItsGrant) {
  Session a(stub_.get(), true);
  Hold(&a);
  a.StopAnswering();
  Session b(stub_.get(), true);
  EXPECT_EQ(b.Lookup(dir_ino_, "x").err(), ENOENT);  // waited for a's lease to run out
  proto::ApplyLogReply reply;
  ASSERT_TRUE(a.Apply({a.Create(first_, dir_ino_, "x", S_IFREG | 0644)}, &reply).ok());
  EXPECT_EQ(reply.errs(0), ESTALE);
  EXPECT_EQ(b.Lookup(dir_ino_, "x").err(), ENOENT);
}

// A server that restarts (or takes over) knows no grants, but its records
// say which sessions took some: until they are back (or the last server's
// leases ran out), another session's reads wait, and the holder replays its
// log, each entry once.
TEST_F(NsGrantsTest, AfterARestartTheHolderReplaysItsLogBeforeOthersRead) {
  Session a(stub_.get(), true);
  Hold(&a);
  std::vector<proto::LogEntry> log = {a.Create(first_, dir_ino_, "before", S_IFREG | 0644)};
  proto::ApplyLogReply reply;
  ASSERT_TRUE(a.Apply(log, &reply).ok());
  ASSERT_EQ(reply.errs(0), 0);
  // Its reply was lost: the entry goes again, with one made after it.
  log.push_back(a.Create(first_ + 1, dir_ino_, "after", S_IFREG | 0644));
  Restart();
  Session b(stub_.get(), true);
  std::atomic<bool> returned{false};
  proto::AttrReply seen;
  std::thread reader([&] {
    seen = b.Lookup(dir_ino_, "after");
    returned = true;
  });
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_FALSE(returned.load());  // waits for a (3 s at most)
  const uint64_t inodes = volume_->Space().inodes;
  ASSERT_TRUE(a.Apply(log, &reply).ok());
  ASSERT_EQ(reply.errs_size(), 2);
  EXPECT_EQ(reply.errs(0), 0);
  EXPECT_EQ(reply.errs(1), 0);
  EXPECT_EQ(volume_->Space().inodes, inodes + 1);  // "before" was not made twice
  a.Resubscribe();
  reader.join();
  EXPECT_EQ(seen.err(), 0);
  EXPECT_EQ(seen.attr().ino(), first_ + 1);
  // Subscribed again, it holds no grant: its next entries there wait for a
  // new one (the mount asks again, or goes the synchronous way).
  ASSERT_TRUE(a.Apply({a.Create(first_ + 2, dir_ino_, "later", S_IFREG | 0644)}, &reply).ok());
  EXPECT_EQ(reply.errs(0), ESTALE);
}

TEST_F(NsGrantsTest, TwoHoldersReplayTheirLogsAfterARestart) {
  Session a(stub_.get(), true);
  Hold(&a, "da");
  const uint64_t da = dir_ino_, fa = first_;
  Session b(stub_.get(), true);
  Hold(&b, "db");
  const uint64_t db = dir_ino_, fb = first_;
  std::vector<proto::LogEntry> la = {a.Create(fa, da, "x", S_IFREG | 0644)};
  std::vector<proto::LogEntry> lb = {b.Create(fb, db, "y", S_IFREG | 0644)};
  Restart();
  // Each entry's own recalls wait for the other inherited session: both
  // replay at once and neither waits past the window.
  proto::ApplyLogReply ra, rb;
  std::thread ta([&] { EXPECT_TRUE(a.Apply(la, &ra).ok()); });
  std::thread tb([&] { EXPECT_TRUE(b.Apply(lb, &rb).ok()); });
  ta.join();
  tb.join();
  ASSERT_EQ(ra.errs_size(), 1);
  ASSERT_EQ(rb.errs_size(), 1);
  EXPECT_EQ(ra.errs(0), 0);
  EXPECT_EQ(rb.errs(0), 0);
  a.Resubscribe();
  b.Resubscribe();
  EXPECT_EQ(a.Lookup(db, "y").attr().ino(), fb);
  EXPECT_EQ(b.Lookup(da, "x").attr().ino(), fa);
}

TEST_F(NsGrantsTest, AFileMadeInTheLogIsOpenedAndClosedInItAndLeasedToItsMaker) {
  Session a(stub_.get(), true);
  Hold(&a);
  proto::LogEntry open;
  open.set_seq(a.NextSeq());
  open.mutable_open()->set_ino(first_);
  open.mutable_open()->set_flags(O_RDWR);
  open.mutable_open()->set_handle(7);
  open.mutable_open()->set_created(true);
  proto::ApplyLogReply reply;
  ASSERT_TRUE(a.Apply({a.Create(first_, dir_ino_, "f", S_IFREG | 0400), open,
                       a.Create(first_ + 1, dir_ino_, "sub", S_IFDIR | 0755)},
                      &reply)
                  .ok());
  ASSERT_EQ(reply.errs_size(), 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(reply.errs(i), 0) << i;
  EXPECT_EQ(reply.unleased_size(), 0);  // both leased to a, as if made by calls
  EXPECT_TRUE(volume_->sessions().HoldsOpen(a.id(), first_, 7));
  // d: grant, attributes, names (the mkdir); f: attributes; sub: the same
  // three as d.
  EXPECT_EQ(volume_->leases().HeldBy(a.id()), 7u);
  proto::LogEntry release;
  release.set_seq(a.NextSeq());
  release.mutable_release()->set_ino(first_);
  release.mutable_release()->set_handle(7);
  EXPECT_EQ(ErrOf(&a, release), 0);
  EXPECT_FALSE(volume_->sessions().HoldsOpen(a.id(), first_, 7));
}

// A write entry: the data of a file the log made, stored with the batch
// from the session's grant and answered as a Write would be (once: a batch
// sent again is answered from the records); only for a file in a directory
// the session holds. A refused one stops nothing: its answer says why, and
// the entries after it are applied.
TEST_F(NsGrantsTest, AWriteEntryStoresItsDataOnceAndOnlyInAGrantedDirectory) {
  Session a(stub_.get(), true);
  Hold(&a);
  const uint64_t grant = a.Grant(1 << 20);
  ASSERT_GE(grant, 8192u);
  // The mount's time of the writes (after the create's, the server's).
  const int64_t when = absl::ToUnixNanos(absl::Now() + absl::Milliseconds(500));
  auto write = [&](uint64_t ino, uint64_t offset, const std::string& data) {
    return a.Write(ino, offset, data, when);
  };
  const std::string text(5000, 'x');
  std::vector<proto::LogEntry> log = {a.Create(first_, dir_ino_, "f", S_IFREG | 0644),
                                      write(first_, 0, text), write(first_, 5000, "end")};
  proto::ApplyLogReply reply;
  ASSERT_TRUE(a.Apply(log, &reply).ok());
  ASSERT_EQ(reply.errs_size(), 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(reply.errs(i), 0) << i;
  ASSERT_EQ(reply.written_size(), 2);
  EXPECT_EQ(reply.written(0).seq(), log[1].seq());
  EXPECT_EQ(reply.written(0).err(), 0);
  EXPECT_EQ(reply.written(0).attr().size(), 5000u);
  EXPECT_EQ(reply.written(0).grant_used_bytes(), 8192u);  // two new blocks
  EXPECT_EQ(reply.written(1).seq(), log[2].seq());
  EXPECT_EQ(reply.written(1).attr().size(), 5003u);
  EXPECT_EQ(reply.written(1).grant_used_bytes(), 0u);  // within the second block
  EXPECT_EQ(reply.written(1).attr().mtime_ns(), when);
  EXPECT_TRUE(reply.synced_always());
  EXPECT_EQ(volume_->meta().space().GrantOf(a.id()), (grant - 8192) / 4096);
  const uint64_t used = volume_->SpaceCounts().used_bytes;
  EXPECT_EQ(used, 8192u);
  // Sent again: answered from the records, nothing written or taken twice.
  proto::ApplyLogReply again;
  ASSERT_TRUE(a.Apply(log, &again).ok());
  ASSERT_EQ(again.errs_size(), 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(again.errs(i), 0) << i;
  ASSERT_EQ(again.written_size(), 2);
  EXPECT_EQ(again.written(0).grant_used_bytes(), 8192u);
  EXPECT_EQ(again.written(1).seq(), log[2].seq());
  EXPECT_EQ(again.written(1).attr().size(), 5003u);
  EXPECT_EQ(volume_->SpaceCounts().used_bytes, used);
  EXPECT_EQ(volume_->meta().space().GrantOf(a.id()), (grant - 8192) / 4096);
  absl::StatusOr<std::string> got = volume_->Read(RequestContext(), first_, 0, 10000);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, text + "end");
  // Not in a granted directory, no inode, a directory: refused, and the
  // entry after each is applied.
  ASSERT_EQ(MkNodErr(1, "outside"), 0);
  const uint64_t outside = last_ino_;
  int n = 1;
  for (const auto& [bad, err] :
       std::vector<std::pair<proto::LogEntry, int>>{{write(outside, 0, "no"), ESTALE},
                                                    {write(0, 0, "no"), EINVAL},
                                                    {write(dir_ino_, 0, "no"), EISDIR}}) {
    proto::ApplyLogReply r;
    ASSERT_TRUE(
        a.Apply({bad, a.Create(first_ + n, dir_ino_, "after" + std::to_string(n), S_IFREG | 0644)},
                &r)
            .ok());
    ASSERT_EQ(r.errs_size(), 2);
    EXPECT_EQ(r.errs(0), 0);
    EXPECT_EQ(r.errs(1), 0);
    ASSERT_EQ(r.written_size(), 1);
    EXPECT_EQ(r.written(0).seq(), bad.seq());
    EXPECT_EQ(r.written(0).err(), err);
    EXPECT_EQ(a.Lookup(dir_ino_, "after" + std::to_string(n)).attr().ino(), first_ + n);
    ++n;
  }
  got = volume_->Read(RequestContext(), outside, 0, 10);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "");
}

TEST_F(NsGrantsTest, InodeRangesAreRecordedKeptAndRetriedOnce) {
  Session a(stub_.get(), true);
  proto::InodeRangeRequest req;
  a.Tag(&req);
  req.set_count(10);
  proto::InodeRangeReply first, retry;
  ASSERT_TRUE(stub_->InodeRange(Session::Ctx().get(), req, &first).ok());
  ASSERT_TRUE(stub_->InodeRange(Session::Ctx().get(), req, &retry).ok());
  EXPECT_EQ(retry.first(), first.first());
  EXPECT_EQ(retry.count(), 10u);
  // A second range keeps the first unless the mount says it is done with it.
  proto::InodeRangeReply second = a.Range(10);
  EXPECT_EQ(second.first(), first.first() + 10);
  proto::ApplyLogReply reply;
  Hold(&a, "e");
  ASSERT_TRUE(
      a.Apply({a.Create(first.first(), dir_ino_, "old-range", S_IFREG | 0644)}, &reply).ok());
  EXPECT_EQ(reply.errs(0), 0);
  a.Range(10, /*keep_from=*/second.first() + 10);
  ASSERT_TRUE(
      a.Apply({a.Create(second.first(), dir_ino_, "dropped", S_IFREG | 0644)}, &reply).ok());
  EXPECT_EQ(reply.errs(0), EINVAL);
  EXPECT_EQ(a.Range(0).err(), EINVAL);
  EXPECT_EQ(a.Range(1u << 30).count(), Volume::kMaxInodeRange);
}

// The data of a batch's write entries for files the batch makes is staged
// (written and synced together, before the batch is applied in order): the
// files end as with any write, their space counted once; a staged write
// whose entry is not applied (an entry before it refused) leaves no chunk
// file behind; a write of a file made before the batch is not staged.
TEST_F(NsGrantsTest, TheDataOfFilesABatchMakesIsStagedAndTakenBackWhenNotApplied) {
  Session a(stub_.get(), true);
  Hold(&a);
  ASSERT_GE(a.Grant(1 << 20), 65536u);
  auto write = [&](uint64_t ino, const std::string& data) {
    return a.Write(ino, 0, data, absl::ToUnixNanos(absl::Now()));
  };
  auto chunk_files = [&](uint64_t ino) {
    int n = 0;
    const std::string prefix = std::to_string(ino) + ".";
    for (const auto& f : std::filesystem::recursive_directory_iterator(dir_)) {
      if (f.path().filename().string().rfind(prefix, 0) == 0) ++n;
    }
    return n;
  };
  std::vector<proto::LogEntry> log;
  std::vector<std::string> texts;
  for (int i = 0; i < 3; ++i) {
    texts.push_back(std::string(3000 + 2000 * i, static_cast<char>('a' + i)));
    log.push_back(a.Create(first_ + i, dir_ino_, "f" + std::to_string(i), S_IFREG | 0644));
    log.push_back(write(first_ + i, texts.back()));
  }
  const uint64_t staged = volume_->staged_writes();
  proto::ApplyLogReply reply;
  ASSERT_TRUE(a.Apply(log, &reply).ok());
  for (int e : reply.errs()) EXPECT_EQ(e, 0);
  EXPECT_EQ(volume_->staged_writes(), staged + 3);
  uint64_t blocks = 0;
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<std::string> got = volume_->Read(RequestContext(), first_ + i, 0, 100000);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, texts[i]);
    blocks += (texts[i].size() + 4095) / 4096;
  }
  EXPECT_EQ(volume_->SpaceCounts().used_bytes, blocks * 4096);
  // Sent again (its reply lost): answered from the records, nothing
  // staged (the numbers are used), nothing taken back.
  proto::ApplyLogReply again;
  ASSERT_TRUE(a.Apply(log, &again).ok());
  for (int e : again.errs()) EXPECT_EQ(e, 0);
  EXPECT_EQ(volume_->staged_writes(), staged + 3);
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<std::string> got = volume_->Read(RequestContext(), first_ + i, 0, 100000);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, texts[i]);
  }
  EXPECT_EQ(volume_->SpaceCounts().used_bytes, blocks * 4096);

  // The second create is refused (the name exists): the write after it is
  // not applied, and its staged bytes are taken back.
  std::vector<proto::LogEntry> refused = {
      a.Create(first_ + 3, dir_ino_, "g", S_IFREG | 0644), write(first_ + 3, "kept"),
      a.Create(first_ + 4, dir_ino_, "f0", S_IFREG | 0644), write(first_ + 4, "never")};
  proto::ApplyLogReply r2;
  ASSERT_TRUE(a.Apply(refused, &r2).ok());
  ASSERT_EQ(r2.errs_size(), 3);
  EXPECT_EQ(r2.errs(2), EEXIST);
  EXPECT_EQ(volume_->staged_writes(), staged + 5);
  absl::StatusOr<std::string> kept = volume_->Read(RequestContext(), first_ + 3, 0, 100);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(*kept, "kept");
  EXPECT_EQ(chunk_files(first_ + 3), 1);
  EXPECT_EQ(chunk_files(first_ + 4), 0);
  EXPECT_EQ(volume_->SpaceCounts().used_bytes, (blocks + 1) * 4096);

  // Files made before this batch: written as any write, not staged.
  proto::ApplyLogReply r3;
  ASSERT_TRUE(a.Apply({write(first_, "over"), write(first_ + 1, "over")}, &r3).ok());
  for (int e : r3.errs()) EXPECT_EQ(e, 0);
  EXPECT_EQ(volume_->staged_writes(), staged + 5);
}

}  // namespace
}  // namespace grantfs
