// Namespace grants from the mount's side (client/ns_grants.h): FileSystem
// objects (the mount without FUSE) with namespace grants on, against a real
// server in process (gRPC on loopback, RocksDB in a temporary directory).
// Each checks what another mount, or the server after a restart, sees of
// the changes one mount made on its own.
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <string>
#include <vector>

#include "client/filesystem.h"
#include "common/errno_status.h"
#include "common/status_test_util.h"
#include "gtest/gtest.h"
#include "server/service_test_util.h"

namespace grantfs {
namespace {

constexpr uint64_t kRoot = 1;

// The kernel side of a mount: nothing to drop.
class NoKernel : public Invalidator {
 public:
  void InvalidateInode(uint64_t, bool) override {}
  void InvalidateEntry(uint64_t, const std::string&) override {}
};

class NsGrantsMountTest : public ServiceTest {
 protected:
  void TearDown() override {
    for (auto& fs : mounts_) fs->Stop();
    mounts_.clear();
    ServiceTest::TearDown();
  }
  // A mount of the server (namespace grants on unless `grants` is false).
  // `retry_for`: how long a call is retried before it fails (UNAVAILABLE).
  FileSystem* Mount(bool grants = true, const NsGrantsOptions& ns = {},
                    absl::Duration retry_for = absl::Seconds(20)) {
    RpcClientOptions ro;
    ro.servers = {"127.0.0.1:" + std::to_string(port_)};
    ro.transport = Transport::Insecure("s3cret");
    ro.call_timeout = absl::Seconds(10);
    ro.retry_for = retry_for;
    absl::StatusOr<std::unique_ptr<RpcClient>> rpc = RpcClient::Create(ro);
    EXPECT_TRUE(rpc.ok()) << rpc.status();
    FileSystemOptions fo;
    fo.client_name = "test:" + std::to_string(mounts_.size());
    fo.ns_grants = grants;
    fo.ns = ns;
    fo.readahead.window_bytes = 0;
    auto fs = std::make_unique<FileSystem>(fo, *std::move(rpc));
    absl::Status s = fs->Start(&kernel_);
    EXPECT_TRUE(s.ok()) << s;
    mounts_.push_back(std::move(fs));
    FileSystem* out = mounts_.back().get();
    // Leases (and so grants) start with the recall stream.
    for (int i = 0; i < 200 && out->NameLeaseLeft(kRoot) <= 0; ++i) {
      (void)out->ReadDir(root_, kRoot, 0, 100);
      absl::SleepFor(absl::Milliseconds(10));
    }
    return out;
  }
  // A directory `fs` makes (granted to it).
  uint64_t MkDir(FileSystem* fs, uint64_t parent, const std::string& name) {
    absl::StatusOr<proto::Attr> a = fs->MkNod(root_, parent, name, S_IFDIR | 0755, 0, 022, true);
    EXPECT_TRUE(a.ok()) << a.status();
    return a.ok() ? a->ino() : 0;
  }
  absl::StatusOr<proto::Attr> MkFile(FileSystem* fs, uint64_t parent, const std::string& name) {
    return fs->MkNod(root_, parent, name, S_IFREG | 0644, 0, 022, true);
  }
  // A file `fs` creates in the root and opens for writing (`*handle`),
  // with its attribute lease held.
  absl::StatusOr<proto::Attr> CreateLeased(FileSystem* fs, const std::string& name,
                                           uint64_t* handle) {
    absl::StatusOr<proto::Attr> f =
        fs->Create(root_, kRoot, name, 0644, 022, O_CREAT | O_WRONLY, handle);
    if (!f.ok()) return f;
    // Leased, if the create's reply was not.
    if (absl::Status s = fs->GetAttr(root_, f->ino()).status(); !s.ok()) return s;
    if (!fs->leases()->HoldsAttrLease(f->ino())) return absl::InternalError("not leased");
    return f;
  }
  std::vector<std::string> Names(FileSystem* fs, uint64_t dir) {
    std::vector<std::string> out;
    uint64_t cookie = 0;
    for (;;) {
      absl::StatusOr<proto::ReadDirReply> r = fs->ReadDir(root_, dir, cookie, 100);
      EXPECT_TRUE(r.ok()) << r.status();
      if (!r.ok() || r->entries().empty()) break;
      for (const auto& e : r->entries()) {
        if (e.name() != "." && e.name() != "..") out.push_back(e.name());
        cookie = e.cookie();
      }
      if (r->eof()) break;
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  // All of `ino`'s bytes (at most 1 MiB) as `fs` reads them: opened, read,
  // closed.
  // A file made in `dir`, written with `text` and closed: with the
  // directory granted, its close left the data owed (not sent).
  proto::Attr MadeAndClosed(FileSystem* fs, uint64_t dir, const std::string& name,
                            const std::string& text) {
    uint64_t h = 0;
    absl::StatusOr<proto::Attr> f = fs->Create(root_, dir, name, 0644, 022, O_CREAT | O_RDWR, &h);
    EXPECT_TRUE(f.ok()) << f.status();
    if (!f.ok()) return proto::Attr();
    EXPECT_TRUE(fs->Write(root_, f->ino(), 0, text.data(), text.size()).ok());
    EXPECT_TRUE(fs->Close(f->ino()).ok());
    EXPECT_TRUE(fs->Release(f->ino(), h).ok());
    return *f;
  }

  std::string ReadAll(FileSystem* fs, uint64_t ino) {
    uint64_t h = 0;
    absl::StatusOr<proto::Attr> opened = fs->Open(root_, ino, O_RDONLY, &h);
    EXPECT_TRUE(opened.ok()) << opened.status();
    if (!opened.ok()) return "(open failed)";
    absl::StatusOr<std::string> got = fs->Read(root_, ino, 0, 1 << 20);
    EXPECT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(fs->Release(ino, h).ok());
    return got.ok() ? *got : "(read failed)";
  }

  Creds root_;
  NoKernel kernel_;
  std::vector<std::unique_ptr<FileSystem>> mounts_;
};

TEST_F(NsGrantsMountTest, ADirectoryItMadeIsGrantedAndChangesInItAreMadeLocally) {
  FileSystem* a = Mount();
  const uint64_t d = MkDir(a, kRoot, "d");
  ASSERT_TRUE(a->ns_grants()->Holds(d));
  for (int i = 0; i < 50; ++i) ASSERT_OK(MkFile(a, d, "f" + std::to_string(i)).status());
  const uint64_t sub = MkDir(a, d, "sub");
  ASSERT_OK(a->Symlink(root_, d, "link", "f1").status());
  ASSERT_OK(a->Remove(root_, d, "f0", false));
  NsGrants::Stats st = a->ns_grants()->stats();
  EXPECT_EQ(st.local, 53u);
  EXPECT_EQ(st.fallback, 0u);
  EXPECT_GT(st.pending, 0u);
  EXPECT_TRUE(a->ns_grants()->Holds(sub));  // a directory made in the log: granted too
  // The mount answers from what it did: the names, the new inodes.
  ASSERT_OK_AND_ASSIGN(proto::Attr f1, a->Lookup(root_, d, "f1"));
  EXPECT_TRUE(S_ISREG(f1.mode()));
  EXPECT_EQ(f1.mode() & 07777, 0644u);
  EXPECT_EQ(ToErrno(a->Lookup(root_, d, "f0").status()), ENOENT);
  EXPECT_EQ(ToErrno(MkFile(a, d, "f1").status()), EEXIST);
  ASSERT_OK_AND_ASSIGN(proto::Attr dattr, a->GetAttr(root_, d));
  EXPECT_EQ(dattr.nlink(), 3u);  // "sub"
}

TEST_F(NsGrantsMountTest, AnotherMountThatLooksRecallsTheGrantAndSeesEverything) {
  FileSystem* a = Mount();
  FileSystem* b = Mount();
  const uint64_t d = MkDir(a, kRoot, "d");
  ASSERT_OK_AND_ASSIGN(proto::Attr made, MkFile(a, d, "x"));
  ASSERT_OK(MkFile(a, d, "y").status());
  ASSERT_OK(a->Remove(root_, d, "y", false));
  const uint64_t sub = MkDir(a, d, "sub");
  ASSERT_OK(MkFile(a, sub, "deep").status());
  EXPECT_GT(a->ns_grants()->stats().pending, 0u);
  // B's lookup waits for A's log: the same inode, as A answered it.
  ASSERT_OK_AND_ASSIGN(proto::Attr seen, b->Lookup(root_, d, "x"));
  EXPECT_EQ(seen.ino(), made.ino());
  EXPECT_EQ(seen.mtime_ns(), made.mtime_ns());
  EXPECT_EQ(seen.uid(), made.uid());
  EXPECT_EQ(seen.mode(), made.mode());
  EXPECT_FALSE(a->ns_grants()->Holds(d));
  EXPECT_EQ(a->ns_grants()->stats().pending, 0u);
  EXPECT_EQ(Names(b, d), (std::vector<std::string>{"sub", "x"}));
  EXPECT_EQ(Names(b, sub), (std::vector<std::string>{"deep"}));
  // A goes on the synchronous way in d, and B sees each change at once.
  ASSERT_OK(MkFile(a, d, "z").status());
  ASSERT_OK(b->Lookup(root_, d, "z").status());
}

// An existing directory (made by another mount) is granted at the second
// change this mount makes in it by a call, with its whole listing; the
// changes after that are made here, and the other mount sees them all.
TEST_F(NsGrantsMountTest, AnExistingDirectoryIsGrantedOnceUsedAndOthersStillSeeEverything) {
  FileSystem* b = Mount(/*grants=*/false);
  FileSystem* a = Mount();
  const uint64_t e = MkDir(b, kRoot, "e");
  ASSERT_OK(a->GetAttr(root_, e).status());
  ASSERT_OK(MkFile(a, e, "x1").status());
  EXPECT_FALSE(a->ns_grants()->Holds(e));
  ASSERT_OK(MkFile(a, e, "x2").status());
  ASSERT_TRUE(a->ns_grants()->Holds(e));
  const NsGrants::Stats before = a->ns_grants()->stats();
  ASSERT_OK(MkFile(a, e, "x3").status());
  ASSERT_OK(a->Remove(root_, e, "x1", false));
  EXPECT_EQ(ToErrno(MkFile(a, e, "x2").status()), EEXIST);  // the listing it read
  EXPECT_EQ(a->ns_grants()->stats().local, before.local + 2);
  EXPECT_GT(a->ns_grants()->stats().pending, 0u);
  EXPECT_EQ(Names(b, e), (std::vector<std::string>{"x2", "x3"}));
  EXPECT_FALSE(a->ns_grants()->Holds(e));
  // b now holds leases on what is in it: not granted to a again.
  ASSERT_OK(b->Lookup(root_, e, "x2").status());
  ASSERT_OK(MkFile(a, e, "x4").status());
  ASSERT_OK(MkFile(a, e, "x5").status());
  EXPECT_FALSE(a->ns_grants()->Holds(e));
  ASSERT_OK(b->Lookup(root_, e, "x5").status());
}

TEST_F(NsGrantsMountTest, TwoMountsCreatingOneNameGetOneSuccessAndOneEexist) {
  FileSystem* a = Mount();
  FileSystem* b = Mount();
  const uint64_t d = MkDir(a, kRoot, "d");
  ASSERT_OK(MkFile(a, d, "same").status());
  EXPECT_EQ(ToErrno(MkFile(b, d, "same").status()), EEXIST);
  // And the other way round, in a directory made by B.
  const uint64_t e = MkDir(b, kRoot, "e");
  ASSERT_OK(MkFile(b, e, "same").status());
  EXPECT_EQ(ToErrno(MkFile(a, e, "same").status()), EEXIST);
}

TEST_F(NsGrantsMountTest, RmdirIsLocalOnlyForAnEmptyDirectoryAndOtherwiseTheServerAnswers) {
  FileSystem* a = Mount();
  const uint64_t d = MkDir(a, kRoot, "d");
  MkDir(a, d, "empty");
  const uint64_t full = MkDir(a, d, "full");
  ASSERT_OK(MkFile(a, full, "f").status());
  const uint64_t local = a->ns_grants()->stats().local;
  ASSERT_OK(a->Remove(root_, d, "empty", true));
  EXPECT_EQ(a->ns_grants()->stats().local, local + 1);
  EXPECT_EQ(ToErrno(a->Remove(root_, d, "full", true)), ENOTEMPTY);
  EXPECT_EQ(ToErrno(a->Remove(root_, d, "nothing", true)), ENOENT);
  EXPECT_EQ(ToErrno(a->Remove(root_, d, "full", false)), EISDIR);
  ASSERT_OK(a->Remove(root_, full, "f", false));
  ASSERT_OK(a->Remove(root_, d, "full", true));
  EXPECT_EQ(Names(a, d), std::vector<std::string>{});
}

TEST_F(NsGrantsMountTest, RenamesOfFilesInAndBetweenGrantedDirectoriesAreLocal) {
  FileSystem* a = Mount();
  FileSystem* b = Mount();
  const uint64_t d = MkDir(a, kRoot, "d");
  const uint64_t e = MkDir(a, kRoot, "e");
  ASSERT_OK_AND_ASSIGN(proto::Attr x, MkFile(a, d, "x"));
  ASSERT_OK_AND_ASSIGN(proto::Attr y, MkFile(a, d, "y"));
  ASSERT_OK(MkFile(a, d, "z").status());
  const uint64_t local = a->ns_grants()->stats().local;
  ASSERT_OK(a->Rename(root_, d, "x", d, "x2", 0));                  // a new name
  ASSERT_OK(a->Rename(root_, d, "x2", d, "y", 0));                  // over a file
  ASSERT_OK(a->Rename(root_, d, "z", e, "z", 0));                   // to another granted directory
  EXPECT_EQ(ToErrno(a->Rename(root_, d, "y", e, "z", 1)), EEXIST);  // RENAME_NOREPLACE
  EXPECT_EQ(ToErrno(a->Rename(root_, d, "gone", e, "q", 0)), ENOENT);
  EXPECT_EQ(a->ns_grants()->stats().local, local + 3);
  ASSERT_OK_AND_ASSIGN(proto::Attr now_y, a->Lookup(root_, d, "y"));
  EXPECT_EQ(now_y.ino(), x.ino());
  // The other mount sees it all, as the server applied it.
  EXPECT_EQ(Names(b, d), std::vector<std::string>{"y"});
  EXPECT_EQ(Names(b, e), std::vector<std::string>{"z"});
  ASSERT_OK_AND_ASSIGN(proto::Attr seen, b->Lookup(root_, d, "y"));
  EXPECT_EQ(seen.ino(), x.ino());
  EXPECT_EQ(ToErrno(b->GetAttr(root_, y.ino()).status()), ESTALE);  // replaced: gone
}

TEST_F(NsGrantsMountTest, FsyncOfTheDirectoryMakesTheChangesDurableAcrossARestart) {
  FileSystem* a = Mount();
  const uint64_t d = MkDir(a, kRoot, "d");
  for (int i = 0; i < 20; ++i) ASSERT_OK(MkFile(a, d, "f" + std::to_string(i)).status());
  ASSERT_OK(a->FsyncDir(d));
  EXPECT_EQ(a->ns_grants()->stats().pending, 0u);
  Restart();
  FileSystem* b = Mount();
  std::vector<std::string> want;
  for (int i = 0; i < 20; ++i) want.push_back("f" + std::to_string(i));
  std::sort(want.begin(), want.end());
  EXPECT_EQ(Names(b, d), want);
}

TEST_F(NsGrantsMountTest, ALogNotAppliedAtARestartIsReplayedBeforeOthersLook) {
  FileSystem* a = Mount();
  const uint64_t d = MkDir(a, kRoot, "d");
  for (int i = 0; i < 20; ++i) ASSERT_OK(MkFile(a, d, "f" + std::to_string(i)).status());
  EXPECT_GT(a->ns_grants()->stats().pending, 0u);
  Restart();
  // B's call waits until A subscribed again, and A applies its log first.
  FileSystem* b = Mount();
  EXPECT_EQ(Names(b, d).size(), 20u);
  EXPECT_EQ(a->ns_grants()->stats().pending, 0u);
  // Each once: the inodes count 1 (root) + d + 20.
  ASSERT_OK_AND_ASSIGN(proto::StatFsReply fs, b->StatFs(root_));
  EXPECT_EQ(fs.inodes(), 22u) << fs.ShortDebugString();
}

TEST_F(NsGrantsMountTest, AFileMadeAndOpenedLocallyTakesItsDataAndItsClose) {
  FileSystem* a = Mount();
  FileSystem* b = Mount();
  const uint64_t d = MkDir(a, kRoot, "d");
  uint64_t handle = 0;
  ASSERT_OK_AND_ASSIGN(
      proto::Attr f, a->Create(root_, d, "data", 0644, 022, O_CREAT | O_EXCL | O_WRONLY, &handle));
  EXPECT_NE(handle, 0u);
  const uint64_t local = a->ns_grants()->stats().local;
  EXPECT_EQ(local, 1u);
  const std::string text(10000, 'q');
  ASSERT_OK_AND_ASSIGN(size_t n, a->Write(root_, f.ino(), 0, text.data(), text.size()));
  EXPECT_EQ(n, text.size());
  // close: the writes go (after the create: the barrier), the close goes
  // into the log.
  ASSERT_OK(a->Flush(f.ino()));
  ASSERT_OK(a->Release(f.ino(), handle));
  EXPECT_EQ(a->ns_grants()->stats().local, local);
  // B's look recalls the grant: A applies its log (the close).
  ASSERT_OK_AND_ASSIGN(proto::Attr seen, b->Lookup(root_, d, "data"));
  EXPECT_EQ(seen.size(), text.size());
  uint64_t bh = 0;
  ASSERT_OK(b->Open(root_, seen.ino(), O_RDONLY, &bh).status());
  ASSERT_OK_AND_ASSIGN(std::string got, b->Read(root_, seen.ino(), 0, text.size()));
  EXPECT_EQ(got, text);
  ASSERT_OK(b->Release(seen.ino(), bh));
}

TEST_F(NsGrantsMountTest, RunningOutOfInodeNumbersOrLogRoomFallsBackAndNothingFails) {
  NsGrantsOptions small;
  small.range_size = 8;       // refilled every 4 creates
  small.log.max_entries = 5;  // full after a few creates
  small.log.max_age = absl::Hours(1);
  FileSystem* a = Mount(true, small);
  FileSystem* b = Mount();
  const uint64_t d = MkDir(a, kRoot, "d");
  std::vector<std::string> want;
  for (int i = 0; i < 100; ++i) {
    const std::string name = "f" + std::to_string(1000 + i);
    ASSERT_TRUE(MkFile(a, d, name).ok()) << i;
    want.push_back(name);
  }
  const NsGrants::Stats st = a->ns_grants()->stats();
  EXPECT_GT(st.local, 0u);
  EXPECT_GT(st.fallback, 0u);  // the log was full: calls instead
  EXPECT_LE(st.pending, 5u);
  EXPECT_EQ(Names(b, d), want);
}

TEST_F(NsGrantsMountTest, AFileMadeLocallyKeepsItsDataWhenRenamedOutOfItsDirectory) {
  FileSystem* a = Mount();
  FileSystem* b = Mount();
  const uint64_t d = MkDir(a, kRoot, "d");
  const std::string text = "contents";
  for (const char* name : {"moved", "gone"}) {
    uint64_t h = 0;
    ASSERT_OK_AND_ASSIGN(proto::Attr f,
                         a->Create(root_, d, name, 0644, 022, O_CREAT | O_WRONLY, &h));
    ASSERT_OK(a->Write(root_, f.ino(), 0, text.data(), text.size()).status());
    ASSERT_OK(a->Close(f.ino()));  // not waiting for the data
    ASSERT_OK(a->Release(f.ino(), h));
  }
  // Out of the granted directory by a call: reachable where no recall
  // precedes a look, so the data goes before the rename.
  ASSERT_OK(a->Rename(root_, d, "moved", kRoot, "moved", 0));
  ASSERT_OK(a->Remove(root_, d, "gone", false));
  ASSERT_OK_AND_ASSIGN(proto::Attr seen, b->Lookup(root_, kRoot, "moved"));
  EXPECT_EQ(seen.size(), text.size());
  EXPECT_EQ(ReadAll(b, seen.ino()), text);
}

TEST_F(NsGrantsMountTest, TheCloseOfAFileMovedOutOfItsGrantedDirectoryIsACall) {
  FileSystem* a = Mount();
  const uint64_t d = MkDir(a, kRoot, "d");
  uint64_t h = 0;
  ASSERT_OK_AND_ASSIGN(proto::Attr f, a->Create(root_, d, "f", 0644, 022, O_CREAT | O_WRONLY, &h));
  // To a directory not granted: a call (the server sets the file's
  // directory), and the close then needs that directory's grant.
  ASSERT_OK(a->Rename(root_, d, "f", kRoot, "f", 0));
  ASSERT_OK(a->Release(f.ino(), h));
  ASSERT_OK(a->FsyncDir(d));  // no entry refused
  ASSERT_OK(MkFile(a, d, "after").status());
  ASSERT_OK(a->FsyncDir(d));
}

// What the mount shows of what it made is what the server makes: every
// attribute (no_xattrs aside: the server says it only where it leases).
void ExpectSameAttr(proto::Attr local, proto::Attr server) {
  local.clear_no_xattrs();
  server.clear_no_xattrs();
  EXPECT_EQ(local.ShortDebugString(), server.ShortDebugString());
}

TEST_F(NsGrantsMountTest, WhatTheMountShowsIsWhatTheServerMakesUmaskAndSetgidToo) {
  FileSystem* a = Mount();
  FileSystem* b = Mount();
  const uint64_t d = MkDir(a, kRoot, "d");
  proto::SetAttrRequest chmod;
  chmod.set_ino(d);
  chmod.set_valid(proto::SetAttrRequest::MODE | proto::SetAttrRequest::GID);
  chmod.set_mode(S_IFDIR | S_ISGID | 0775);
  chmod.set_gid(4242);
  ASSERT_OK(a->SetAttr(root_, chmod).status());
  ASSERT_OK(a->GetAttr(root_, d).status());  // leased again
  std::vector<proto::Attr> made;
  ASSERT_OK_AND_ASSIGN(proto::Attr f, a->MkNod(root_, d, "f", S_IFREG | 0666, 0, 027, true));
  ASSERT_OK_AND_ASSIGN(proto::Attr sub, a->MkNod(root_, d, "sub", S_IFDIR | 0777, 0, 022, true));
  ASSERT_OK_AND_ASSIGN(proto::Attr fifo, a->MkNod(root_, d, "fifo", S_IFIFO | 0600, 0, 0, true));
  ASSERT_OK_AND_ASSIGN(proto::Attr link, a->Symlink(root_, d, "link", "f"));
  EXPECT_GE(a->ns_grants()->stats().local, 4u);
  EXPECT_EQ(f.gid(), 4242u);
  EXPECT_EQ(f.mode(), S_IFREG | 0640u);
  EXPECT_EQ(sub.mode(), S_IFDIR | S_ISGID | 0755u);
  ASSERT_OK(a->Remove(root_, d, "fifo", false));
  ASSERT_OK_AND_ASSIGN(proto::Attr dir_here, a->GetAttr(root_, d));
  // B's look recalls the grant (B can know the new inodes only by names:
  // nothing else tells it their numbers): the server's attributes, as A
  // showed them.
  ASSERT_OK(b->Lookup(root_, d, "f").status());
  EXPECT_EQ(a->ns_grants()->stats().recalls, 1u);
  for (const proto::Attr& here : {f, sub, link}) {
    ASSERT_OK_AND_ASSIGN(proto::Attr there, b->GetAttr(root_, here.ino()));
    ExpectSameAttr(here, there);
  }
  ASSERT_OK_AND_ASSIGN(proto::Attr dir_there, b->GetAttr(root_, d));
  ExpectSameAttr(dir_here, dir_there);
  EXPECT_EQ(ToErrno(b->GetAttr(root_, fifo.ino()).status()), ESTALE);
}

TEST_F(NsGrantsMountTest, AFileMadeHereAndWrittenIsStillRenamedAndRemovedLocally) {
  FileSystem* a = Mount();
  FileSystem* b = Mount();
  const uint64_t d = MkDir(a, kRoot, "d");
  for (const char* name : {"w1", "w2", "w3"}) {
    uint64_t h = 0;
    ASSERT_OK_AND_ASSIGN(proto::Attr f,
                         a->Create(root_, d, name, 0644, 022, O_CREAT | O_WRONLY, &h));
    // A write drops the file's leased attributes; the mount still knows
    // it made it, with one name.
    ASSERT_OK(a->Write(root_, f.ino(), 0, "x", 1).status());
    ASSERT_OK(a->Flush(f.ino()));
    ASSERT_OK(a->Release(f.ino(), h));
  }
  const uint64_t local = a->ns_grants()->stats().local;
  ASSERT_OK(a->Rename(root_, d, "w1", d, "w2", 0));
  ASSERT_OK(a->Remove(root_, d, "w3", false));
  EXPECT_EQ(a->ns_grants()->stats().local, local + 2);
  EXPECT_EQ(Names(b, d), std::vector<std::string>{"w2"});
}

TEST_F(NsGrantsMountTest, WithGrantsOffEveryChangeIsACall) {
  FileSystem* a = Mount(/*grants=*/false);
  FileSystem* b = Mount();
  EXPECT_EQ(a->ns_grants(), nullptr);
  const uint64_t d = MkDir(a, kRoot, "d");
  ASSERT_OK(MkFile(a, d, "x").status());
  ASSERT_OK(b->Lookup(root_, d, "x").status());
}

// Leases without grants: a file with cached writes is stat'ed from its
// leased attributes patched with the cache, exactly, with no call; a flush
// of two extents at once drops them (each answer may be the older), and
// after it the server's answer is the same.
TEST_F(NsGrantsMountTest, CachedWritesAreStatedFromTheLeaseWithoutACall) {
  FileSystem* a = Mount(/*grants=*/false);
  FileSystem* b = Mount(/*grants=*/false);
  uint64_t h = 0;
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateLeased(a, "f", &h));
  const std::string text(10000, 'x');
  ASSERT_OK(a->Write(root_, f.ino(), 0, text.data(), text.size()).status());
  ASSERT_OK(a->Write(root_, f.ino(), 20000, "tail", 4).status());
  const LeaseCache::Stats before = a->leases()->stats();
  ASSERT_OK_AND_ASSIGN(proto::Attr cached, a->GetAttr(root_, f.ino()));
  ASSERT_OK_AND_ASSIGN(proto::Attr again, a->GetAttr(root_, f.ino()));
  const LeaseCache::Stats after = a->leases()->stats();
  EXPECT_EQ(after.hits, before.hits + 2);
  EXPECT_EQ(after.misses, before.misses);
  EXPECT_EQ(cached.size(), 20004u);
  EXPECT_GE(cached.mtime_ns(), f.mtime_ns());
  EXPECT_EQ(again.SerializeAsString(), cached.SerializeAsString());
  // Flushed: the server says the same size and times (the flush carries
  // the time of the cached write). Two extents flushed at once: each
  // answer may be older than the other's, so the attributes are dropped.
  ASSERT_OK(a->Flush(f.ino()));
  ASSERT_OK_AND_ASSIGN(proto::Attr flushed, a->GetAttr(root_, f.ino()));
  EXPECT_EQ(a->leases()->stats().misses, after.misses + 1);
  EXPECT_EQ(flushed.size(), 20004u);
  EXPECT_EQ(flushed.mtime_ns(), cached.mtime_ns());
  ASSERT_OK_AND_ASSIGN(proto::Attr seen, b->Lookup(root_, kRoot, "f"));
  EXPECT_EQ(seen.size(), 20004u);
  EXPECT_EQ(seen.mtime_ns(), cached.mtime_ns());
  // Written again past the end: patched on the lease taken after the flush.
  ASSERT_OK(a->Write(root_, f.ino(), 30000, "more", 4).status());
  ASSERT_OK_AND_ASSIGN(proto::Attr grown, a->GetAttr(root_, f.ino()));
  EXPECT_EQ(grown.size(), 30004u);
  ASSERT_OK(a->Close(f.ino()));
  ASSERT_OK(a->Release(f.ino(), h));
  ASSERT_OK_AND_ASSIGN(proto::Attr last, b->GetAttr(root_, f.ino()));
  EXPECT_EQ(last.size(), 30004u);
}

// A flush's reply is the file's attributes after it, under the lease the
// server keeps for the writer: the next stat needs no call. Another node's
// write recalls them.
TEST_F(NsGrantsMountTest, AFlushKeepsTheAttributesItsReplyCarries) {
  FileSystem* a = Mount(/*grants=*/false);
  FileSystem* b = Mount(/*grants=*/false);
  uint64_t h = 0;
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateLeased(a, "f", &h));
  const std::string text(10000, 'x');
  ASSERT_OK(a->Write(root_, f.ino(), 0, text.data(), text.size()).status());
  ASSERT_OK_AND_ASSIGN(proto::Attr cached, a->GetAttr(root_, f.ino()));
  ASSERT_OK(a->Flush(f.ino()));
  const LeaseCache::Stats before = a->leases()->stats();
  ASSERT_OK_AND_ASSIGN(proto::Attr flushed, a->GetAttr(root_, f.ino()));
  EXPECT_EQ(a->leases()->stats().misses, before.misses);
  EXPECT_EQ(flushed.size(), 10000u);
  EXPECT_EQ(flushed.mtime_ns(), cached.mtime_ns());
  ASSERT_OK_AND_ASSIGN(proto::Attr seen, b->Lookup(root_, kRoot, "f"));
  EXPECT_EQ(seen.size(), flushed.size());
  EXPECT_EQ(seen.mtime_ns(), flushed.mtime_ns());
  EXPECT_EQ(seen.blocks(), flushed.blocks());
  // Node b writes past the end: a's lease is recalled before b's write is
  // acknowledged, and a's next stat asks the server.
  uint64_t hb = 0;
  ASSERT_OK(b->Open(root_, f.ino(), O_WRONLY, &hb).status());
  ASSERT_OK(b->Write(root_, f.ino(), 20000, "tail", 4).status());
  ASSERT_OK(b->Flush(f.ino()));
  ASSERT_OK_AND_ASSIGN(proto::Attr grown, a->GetAttr(root_, f.ino()));
  EXPECT_EQ(grown.size(), 20004u);
  ASSERT_OK(b->Close(f.ino()));
  ASSERT_OK(b->Release(f.ino(), hb));
  ASSERT_OK(a->Close(f.ino()));
  ASSERT_OK(a->Release(f.ino(), h));
}

TEST_F(NsGrantsMountTest, AnotherOwnersCallerGoesTheSynchronousWay) {
  FileSystem* a = Mount();
  const uint64_t d = MkDir(a, kRoot, "d");
  ASSERT_OK_AND_ASSIGN(proto::Attr dattr, a->GetAttr(root_, d));
  proto::SetAttrRequest chmod;
  chmod.set_ino(d);
  chmod.set_valid(proto::SetAttrRequest::MODE);
  chmod.set_mode(S_IFDIR | 0777);
  ASSERT_OK(a->SetAttr(root_, chmod).status());
  Creds user;
  user.uid = 1000;
  user.gid = 1000;
  const uint64_t local = a->ns_grants()->stats().local;
  ASSERT_OK_AND_ASSIGN(proto::Attr f, a->MkNod(user, d, "theirs", S_IFREG | 0644, 0, 022, true));
  EXPECT_EQ(f.uid(), 1000u);
  EXPECT_EQ(a->ns_grants()->stats().local, local);
  EXPECT_GE(a->ns_grants()->stats().fallback, 1u);
  // And the mount's own answers stay right after it.
  ASSERT_OK(MkFile(a, d, "mine").status());
  EXPECT_EQ(Names(a, d), (std::vector<std::string>{"mine", "theirs"}));
  (void)dattr;
}

// close(2) of a file made here does not wait for its data (nor so apply
// the log); another mount's look recalls the grant, which sends the data
// first: it reads every byte, and the times the mount showed (the write's
// time, carried by the flush), not the time of the late flush.
TEST_F(NsGrantsMountTest, ACloseDoesNotWaitForItsDataAndTheRecallSendsIt) {
  FileSystem* a = Mount();
  FileSystem* b = Mount();
  const uint64_t d = MkDir(a, kRoot, "d");
  uint64_t h = 0;
  ASSERT_OK_AND_ASSIGN(proto::Attr f,
                       a->Create(root_, d, "data", 0644, 022, O_CREAT | O_WRONLY, &h));
  std::string text;
  for (int i = 0; i < 3000; ++i) text += std::to_string(i) + ",";
  ASSERT_OK(a->Write(root_, f.ino(), 0, text.data(), text.size()).status());
  ASSERT_OK(a->Write(root_, f.ino(), text.size(), "end", 3).status());
  text += "end";
  ASSERT_OK(a->Close(f.ino()));
  ASSERT_OK(a->Release(f.ino(), h));
  // Nothing was sent: a flush would have applied the log first.
  EXPECT_GT(a->ns_grants()->stats().pending, 0u);
  // The mount answers for the file itself, with no call.
  ASSERT_OK_AND_ASSIGN(proto::Attr mine, a->GetAttr(root_, f.ino()));
  EXPECT_EQ(mine.size(), text.size());
  EXPECT_GT(mine.mtime_ns(), f.mtime_ns());
  EXPECT_GT(a->ns_grants()->stats().pending, 0u);
  absl::SleepFor(absl::Milliseconds(20));  // a flush now would stamp a later time
  ASSERT_OK_AND_ASSIGN(proto::Attr seen, b->Lookup(root_, d, "data"));
  ExpectSameAttr(mine, seen);
  uint64_t bh = 0;
  ASSERT_OK(b->Open(root_, seen.ino(), O_RDONLY, &bh).status());
  ASSERT_OK_AND_ASSIGN(std::string got, b->Read(root_, seen.ino(), 0, text.size() + 10));
  EXPECT_EQ(got, text);
  ASSERT_OK(b->Release(seen.ino(), bh));
}

// The data of a small file whose close did not wait goes to the server in
// the log's batch, after the entries that made the file: no Write call.
// The server has it, durable (after a restart too), with the size and
// times the mount showed; the grant's space paid for it.
TEST_F(NsGrantsMountTest, TheDataOfAClosedSmallFileGoesInTheLogNotAWriteCall) {
  FileSystem* a = Mount();
  const uint64_t d = MkDir(a, kRoot, "d");
  const uint64_t writes = Calls("Write");
  const uint64_t batches = Calls("ApplyLog");
  std::vector<std::pair<proto::Attr, std::string>> files;
  for (int i = 0; i < 5; ++i) {
    std::string text(1000 + 3000 * i, static_cast<char>('a' + i));
    files.emplace_back(MadeAndClosed(a, d, "f" + std::to_string(i), text), text);
  }
  std::vector<proto::Attr> shown;
  for (const auto& [f, text] : files) {
    ASSERT_OK_AND_ASSIGN(proto::Attr now, a->GetAttr(root_, f.ino()));
    EXPECT_EQ(now.size(), text.size());
    shown.push_back(now);
  }
  // fsyncdir sends what the closes left owed, then the log.
  ASSERT_OK(a->FsyncDir(d));
  EXPECT_EQ(a->ns_grants()->stats().pending, 0u);
  EXPECT_EQ(Calls("Write"), writes);
  EXPECT_GT(Calls("ApplyLog"), batches);
  Restart();
  FileSystem* b = Mount();
  for (size_t i = 0; i < files.size(); ++i) {
    const auto& [f, text] = files[i];
    ASSERT_OK_AND_ASSIGN(proto::Attr seen, b->Lookup(root_, d, "f" + std::to_string(i)));
    EXPECT_EQ(seen.size(), text.size());
    EXPECT_EQ(seen.mtime_ns(), shown[i].mtime_ns());
    EXPECT_EQ(seen.blocks(), shown[i].blocks());
    EXPECT_EQ(ReadAll(b, seen.ino()), text);
  }
  // The space: what the files hold, no more (the grants came back).
  SpaceInfo space = volume_->SpaceCounts();
  uint64_t held = 0;
  for (const auto& [f, text] : files) held += (text.size() + 4095) / 4096 * 4096;
  EXPECT_EQ(space.used_bytes, held);
}

// fsync of a file waits for the log up to its own last entry, not for what
// the mount made after it (here: nothing of the first file is waiting; the
// second's create is, and goes; the server syncs every write, so fsync
// makes no call of its own).
TEST_F(NsGrantsMountTest, FsyncOfAFileSendsTheLogUpToItsOwnEntriesOnly) {
  NsGrantsOptions ns;
  ns.log.max_age = absl::Hours(1);  // the log goes only when asked
  FileSystem* a = Mount(true, ns);
  const uint64_t d = MkDir(a, kRoot, "d");
  const proto::Attr first = MadeAndClosed(a, d, "first", "one");
  ASSERT_OK(a->FsyncDir(d));
  ASSERT_EQ(a->ns_grants()->stats().pending, 0u);
  ASSERT_OK_AND_ASSIGN(const proto::Attr second, MkFile(a, d, "second"));
  ASSERT_OK(MkFile(a, d, "third").status());
  ASSERT_EQ(a->ns_grants()->stats().pending, 2u);
  const uint64_t batches = Calls("ApplyLog");
  const uint64_t fsyncs = Calls("Fsync");
  ASSERT_OK(a->Fsync(root_, first.ino()));
  EXPECT_EQ(Calls("ApplyLog"), batches);
  EXPECT_EQ(a->ns_grants()->stats().pending, 2u);
  EXPECT_FALSE(volume_->meta().inodes().GetInode(second.ino()).ok());
  ASSERT_OK(a->Fsync(root_, second.ino()));
  EXPECT_TRUE(volume_->meta().inodes().GetInode(second.ino()).ok());
  EXPECT_EQ(Calls("Fsync"), fsyncs);
}

// A write entry the server refuses (here: it let the directory's grant go
// without the mount hearing of it) stops nothing: the mount sends that data
// again as a Write call, and the file's fsync succeeds with the data on the
// server.
TEST_F(NsGrantsMountTest, AWriteEntryTheServerRefusesIsSentAgainAsAWrite) {
  NsGrantsOptions ns;
  ns.log.max_age = absl::Hours(1);
  FileSystem* a = Mount(true, ns);
  const uint64_t d = MkDir(a, kRoot, "d");
  uint64_t h = 0;
  ASSERT_OK_AND_ASSIGN(proto::Attr f, a->Create(root_, d, "f", 0644, 022, O_CREAT | O_WRONLY, &h));
  ASSERT_OK(a->FsyncDir(d));  // the create and its open are applied
  const std::string text(3000, 'z');
  ASSERT_OK(a->Write(root_, f.ino(), 0, text.data(), text.size()).status());
  volume_->leases().Drop(a->rpc().client_id(), LeaseKey::NsGrant(d));
  const uint64_t writes = Calls("Write");
  ASSERT_OK(a->Close(f.ino()));  // does not wait: the mount still holds d
  EXPECT_TRUE(a->ns_grants()->Owes(f.ino()));
  ASSERT_OK(a->Fsync(root_, f.ino()));
  EXPECT_EQ(Calls("Write"), writes + 1);
  absl::StatusOr<std::string> got = volume_->Read(RequestContext(), f.ino(), 0, 10000);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, text);
  EXPECT_OK(a->ns_grants()->Sync());  // the log did not stop
}

// chmod, chown (by root) and utimes of a file made here are made here, in
// the log, after its writes; the server ends with exactly the attributes
// the mount answered: the explicit times stay although the data is flushed
// after them. What the server's rules do not make certain (a set-id bit)
// is a call.
TEST_F(NsGrantsMountTest, SetattrOfAFileMadeHereIsLocalAndTheServerEndsTheSame) {
  FileSystem* a = Mount();
  FileSystem* b = Mount();
  const uint64_t d = MkDir(a, kRoot, "d");
  uint64_t h = 0;
  ASSERT_OK_AND_ASSIGN(proto::Attr f, a->Create(root_, d, "f", 0644, 022, O_CREAT | O_WRONLY, &h));
  const std::string text(20000, 'w');
  ASSERT_OK(a->Write(root_, f.ino(), 0, text.data(), text.size()).status());
  const uint64_t local = a->ns_grants()->stats().local;
  using V = proto::SetAttrRequest;
  proto::SetAttrRequest chmod;
  chmod.set_ino(f.ino());
  chmod.set_valid(V::MODE);
  chmod.set_mode(0600);
  ASSERT_OK_AND_ASSIGN(proto::Attr after_chmod, a->SetAttr(root_, chmod));
  EXPECT_EQ(after_chmod.mode(), S_IFREG | 0600u);
  EXPECT_EQ(after_chmod.size(), text.size());
  proto::SetAttrRequest chown;
  chown.set_ino(f.ino());
  chown.set_valid(V::UID | V::GID);
  chown.set_uid(1234);
  chown.set_gid(5678);
  ASSERT_OK(a->SetAttr(root_, chown).status());
  proto::SetAttrRequest utimes;
  utimes.set_ino(f.ino());
  utimes.set_valid(V::ATIME | V::MTIME);
  utimes.set_atime_ns(1000000000000000000);
  utimes.set_mtime_ns(1100000000000000000);
  ASSERT_OK_AND_ASSIGN(proto::Attr mine, a->SetAttr(root_, utimes));
  ASSERT_OK(a->Close(f.ino()));
  ASSERT_OK(a->Release(f.ino(), h));
  EXPECT_EQ(a->ns_grants()->stats().local, local + 3);
  EXPECT_EQ(mine.uid(), 1234u);
  EXPECT_EQ(mine.gid(), 5678u);
  EXPECT_EQ(mine.mtime_ns(), 1100000000000000000);
  ASSERT_OK_AND_ASSIGN(proto::Attr now, a->GetAttr(root_, f.ino()));
  ExpectSameAttr(mine, now);
  // The data goes with the recall, after the setattrs: the times stay.
  ASSERT_OK_AND_ASSIGN(proto::Attr seen, b->Lookup(root_, d, "f"));
  ExpectSameAttr(mine, seen);

  // A set-id bit: the server's rule depends on groups: a call.
  const uint64_t e = MkDir(a, kRoot, "e");
  ASSERT_OK_AND_ASSIGN(proto::Attr g, MkFile(a, e, "g"));
  const uint64_t fallback = a->ns_grants()->stats().fallback;
  chmod.set_ino(g.ino());
  chmod.set_mode(04755);
  ASSERT_OK_AND_ASSIGN(proto::Attr setuid, a->SetAttr(root_, chmod));
  EXPECT_EQ(setuid.mode(), S_IFREG | 04755u);
  EXPECT_EQ(a->ns_grants()->stats().fallback, fallback + 1);
  ASSERT_OK_AND_ASSIGN(proto::Attr seen_g, b->Lookup(root_, e, "g"));
  EXPECT_EQ(seen_g.mode(), S_IFREG | 04755u);
}

// A file made here, written, closed (not waiting) and removed: its data is
// dropped unsent, nothing fails and nothing is reported; while it is still
// open here, its data stays readable.
TEST_F(NsGrantsMountTest, RemovingAFileWhoseCloseDidNotWaitDropsItsDataQuietly) {
  FileSystem* a = Mount();
  FileSystem* b = Mount();
  const uint64_t d = MkDir(a, kRoot, "d");
  const std::string text(300000, 'r');
  uint64_t h = 0;
  ASSERT_OK_AND_ASSIGN(proto::Attr f, a->Create(root_, d, "gone", 0644, 022, O_CREAT | O_RDWR, &h));
  ASSERT_OK(a->Write(root_, f.ino(), 0, text.data(), text.size()).status());
  ASSERT_OK(a->Close(f.ino()));
  ASSERT_OK(a->Release(f.ino(), h));
  ASSERT_OK(a->Remove(root_, d, "gone", false));
  ASSERT_OK(a->FsyncDir(d));
  EXPECT_OK(a->Flush(f.ino()));  // nothing was refused
  // Still open while removed: it reads what it wrote.
  ASSERT_OK_AND_ASSIGN(proto::Attr o, a->Create(root_, d, "open", 0644, 022, O_CREAT | O_RDWR, &h));
  ASSERT_OK(a->Write(root_, o.ino(), 0, text.data(), text.size()).status());
  ASSERT_OK(a->Close(o.ino()));
  ASSERT_OK(a->Remove(root_, d, "open", false));
  ASSERT_OK_AND_ASSIGN(std::string got, a->Read(root_, o.ino(), 0, text.size()));
  EXPECT_EQ(got, text);
  ASSERT_OK(a->Release(o.ino(), h));
  EXPECT_OK(a->Flush(o.ino()));
  EXPECT_EQ(Names(b, d), std::vector<std::string>{});
  EXPECT_EQ(ToErrno(b->GetAttr(root_, f.ino()).status()), ESTALE);
  ASSERT_OK_AND_ASSIGN(proto::StatFsReply fs, b->StatFs(root_));
  EXPECT_EQ(fs.inodes(), 2u) << fs.ShortDebugString();  // root and d
}

// A link made by a call makes the file reachable without a recall of its
// directory: its deferred data goes first.
TEST_F(NsGrantsMountTest, ALinkByACallSendsTheDataOfACloseThatDidNotWait) {
  FileSystem* a = Mount();
  FileSystem* b = Mount();
  const uint64_t d = MkDir(a, kRoot, "d");
  const proto::Attr f = MadeAndClosed(a, d, "f", "linked");
  ASSERT_OK(a->Link(root_, f.ino(), kRoot, "elsewhere").status());
  ASSERT_OK_AND_ASSIGN(proto::Attr seen, b->Lookup(root_, kRoot, "elsewhere"));
  EXPECT_EQ(seen.size(), 6u);
  EXPECT_EQ(ReadAll(b, seen.ino()), "linked");
}

// A file made here is opened again and read by the mount alone: the open
// is a log entry, a read of bytes still cached (or at its end) needs no
// call. An open with O_TRUNC is the server's (and the file's attributes
// are the server's again). Another mount sees the same file.
TEST_F(NsGrantsMountTest, AFileMadeHereIsReopenedAndReadWithoutACall) {
  FileSystem* a = Mount();
  FileSystem* b = Mount();
  const uint64_t d = MkDir(a, kRoot, "d");
  uint64_t h = 0;
  ASSERT_OK_AND_ASSIGN(proto::Attr f, a->Create(root_, d, "f", 0644, 022, O_CREAT | O_WRONLY, &h));
  const std::string text = "0123456789abcdef";
  ASSERT_OK(a->Write(root_, f.ino(), 0, text.data(), text.size()).status());
  // Opened again while the writer still has it open (nothing is owed: no
  // close yet).
  const uint64_t local = a->ns_grants()->stats().local;
  uint64_t rh = 0;
  ASSERT_OK_AND_ASSIGN(proto::Attr opened, a->Open(root_, f.ino(), O_RDONLY, &rh));
  EXPECT_NE(rh, 0u);
  EXPECT_EQ(opened.size(), text.size());
  EXPECT_EQ(a->ns_grants()->stats().local, local + 1);
  ASSERT_OK_AND_ASSIGN(std::string got, a->Read(root_, f.ino(), 4, 100));
  EXPECT_EQ(got, text.substr(4));
  ASSERT_OK_AND_ASSIGN(std::string eof, a->Read(root_, f.ino(), text.size(), 100));
  EXPECT_EQ(eof, "");
  // No call went: each would have applied the log first.
  EXPECT_GT(a->ns_grants()->stats().pending, 0u);
  ASSERT_OK(a->Release(f.ino(), rh));
  ASSERT_OK(a->Close(f.ino()));
  ASSERT_OK(a->Release(f.ino(), h));
  // Another user may not open it by the owner's bits: the server answers.
  Creds other;
  other.uid = 4321;
  other.gid = 4321;
  uint64_t oh = 0;
  EXPECT_EQ(ToErrno(a->Open(other, f.ino(), O_WRONLY, &oh).status()), EACCES);
  // O_TRUNC: the server truncates; the mount asks it from then on.
  uint64_t th = 0;
  ASSERT_OK_AND_ASSIGN(proto::Attr cut, a->Open(root_, f.ino(), O_WRONLY | O_TRUNC, &th));
  EXPECT_EQ(cut.size(), 0u);
  ASSERT_OK_AND_ASSIGN(proto::Attr now, a->GetAttr(root_, f.ino()));
  EXPECT_EQ(now.size(), 0u);
  ASSERT_OK(a->Write(root_, f.ino(), 0, "xy", 2).status());
  ASSERT_OK(a->Close(f.ino()));
  ASSERT_OK(a->Release(f.ino(), th));
  ASSERT_OK_AND_ASSIGN(proto::Attr seen, b->Lookup(root_, d, "f"));
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_EQ(ReadAll(b, seen.ino()), "xy");
}

// A rename made here moves the file's ctime as the server's does; a
// restart of the server in between loses none of the data of closes that
// did not wait (the mount sends it before it subscribes again).
TEST_F(NsGrantsMountTest, RenamedFilesKeepExactTimesAndDeferredDataSurvivesARestart) {
  FileSystem* a = Mount();
  const uint64_t d = MkDir(a, kRoot, "d");
  std::vector<proto::Attr> mine;
  for (int i = 0; i < 20; ++i) {
    uint64_t h = 0;
    ASSERT_OK_AND_ASSIGN(proto::Attr f, a->Create(root_, d, "tmp" + std::to_string(i), 0644, 022,
                                                  O_CREAT | O_WRONLY, &h));
    const std::string text = "file " + std::to_string(i);
    ASSERT_OK(a->Write(root_, f.ino(), 0, text.data(), text.size()).status());
    ASSERT_OK(a->Close(f.ino()));
    ASSERT_OK(a->Release(f.ino(), h));
    absl::SleepFor(absl::Milliseconds(2));
    ASSERT_OK(a->Rename(root_, d, "tmp" + std::to_string(i), d, "f" + std::to_string(i), 0));
    ASSERT_OK_AND_ASSIGN(proto::Attr now, a->GetAttr(root_, f.ino()));
    EXPECT_GT(now.ctime_ns(), now.mtime_ns());
    mine.push_back(now);
  }
  Restart();
  FileSystem* b = Mount();
  for (int i = 0; i < 20; ++i) {
    ASSERT_OK_AND_ASSIGN(proto::Attr seen, b->Lookup(root_, d, "f" + std::to_string(i)));
    ExpectSameAttr(mine[i], seen);
    EXPECT_EQ(ReadAll(b, seen.ino()), "file " + std::to_string(i));
  }
}

// Only small files' closes do not wait: one with more than 1 MiB cached
// waits for its data (what a recall must send before its ack stays small),
// as does one with nothing cached (its flush reports an earlier error).
TEST_F(NsGrantsMountTest, TheCloseOfALargeFileStillWaitsForItsData) {
  FileSystem* a = Mount();
  const uint64_t d = MkDir(a, kRoot, "d");
  uint64_t h = 0;
  ASSERT_OK_AND_ASSIGN(proto::Attr f,
                       a->Create(root_, d, "big", 0644, 022, O_CREAT | O_WRONLY, &h));
  const std::string chunk(256 * 1024, 'b');
  for (int i = 0; i < 8; ++i) {
    ASSERT_OK(a->Write(root_, f.ino(), i * chunk.size(), chunk.data(), chunk.size()).status());
  }
  EXPECT_GT(a->ns_grants()->stats().pending, 0u);
  ASSERT_OK(a->Close(f.ino()));
  // Its flush applied the log first.
  EXPECT_EQ(a->ns_grants()->stats().pending, 0u);
  EXPECT_FALSE(a->ns_grants()->Owes(f.ino()));
  ASSERT_OK(a->Release(f.ino(), h));
}

// A file whose close did not wait is opened again for reading without
// waiting for that data: the open is a log entry, the data stays owed, and
// a recall meanwhile sends it. An open that may write sends it first: what
// a recall owes stays what closes counted (a writer through the new open
// could stream into it for ever).
TEST_F(NsGrantsMountTest, AReopenForReadingDoesNotWaitForTheDataOfACloseThatDidNotWait) {
  FileSystem* a = Mount();
  FileSystem* b = Mount();
  const uint64_t d = MkDir(a, kRoot, "d");
  const proto::Attr f = MadeAndClosed(a, d, "f", "first");
  ASSERT_TRUE(a->ns_grants()->Owes(f.ino()));
  const uint64_t local = a->ns_grants()->stats().local;
  uint64_t rh = 0;
  ASSERT_OK_AND_ASSIGN(proto::Attr opened, a->Open(root_, f.ino(), O_RDONLY, &rh));
  EXPECT_EQ(opened.size(), 5u);
  EXPECT_EQ(a->ns_grants()->stats().local, local + 1);
  EXPECT_TRUE(a->ns_grants()->Owes(f.ino()));  // not sent
  ASSERT_OK_AND_ASSIGN(std::string mine, a->Read(root_, f.ino(), 0, 100));
  EXPECT_EQ(mine, "first");
  // Another mount looks: the recall sends it.
  ASSERT_OK_AND_ASSIGN(proto::Attr seen, b->Lookup(root_, d, "f"));
  EXPECT_EQ(seen.size(), 5u);
  EXPECT_EQ(ReadAll(b, seen.ino()), "first");
  EXPECT_FALSE(a->ns_grants()->Owes(f.ino()));
  ASSERT_OK(a->Close(f.ino()));
  ASSERT_OK(a->Release(f.ino(), rh));

  // Owed again, then opened for writing: sent first.
  const proto::Attr g = MadeAndClosed(a, MkDir(a, kRoot, "d2"), "g", "owed");
  ASSERT_TRUE(a->ns_grants()->Owes(g.ino()));
  ASSERT_OK(a->Open(root_, g.ino(), O_WRONLY | O_APPEND, &rh).status());
  EXPECT_FALSE(a->ns_grants()->Owes(g.ino()));
  ASSERT_OK(a->Close(g.ino()));
  ASSERT_OK(a->Release(g.ino(), rh));
}

// The batch holding a write entry cannot be sent (the server answers no
// ApplyLog): the entry stays in the log and the extent in the cache,
// handed to it; each fsync of the file tries to send the log again (and
// fails with it), and nothing is appended twice. Once the server answers,
// the data is stored once, from the log, with no Write call.
TEST_F(NsGrantsMountTest, AWriteEntryWhoseBatchCouldNotBeSentIsSentOnceLater) {
  NsGrantsOptions ns;
  ns.log.max_age = absl::Hours(1);
  FileSystem* a = Mount(true, ns, absl::Seconds(1));
  const uint64_t d = MkDir(a, kRoot, "d");
  ASSERT_OK(a->FsyncDir(d));
  uint64_t h = 0;
  ASSERT_OK_AND_ASSIGN(proto::Attr f, a->Create(root_, d, "f", 0644, 022, O_CREAT | O_WRONLY, &h));
  const std::string text(3000, 'q');
  ASSERT_OK(a->Write(root_, f.ino(), 0, text.data(), text.size()).status());
  const uint64_t writes = Calls("Write");
  const uint64_t written = metrics_.written_bytes();
  Refuse("ApplyLog");
  ASSERT_OK(a->Close(f.ino()));  // does not wait: the mount holds d
  ASSERT_TRUE(a->ns_grants()->Owes(f.ino()));
  ASSERT_OK(a->Release(f.ino(), h));  // a log entry
  EXPECT_FALSE(a->Fsync(root_, f.ino()).ok());
  // The create, open, close and the data: one write entry, kept.
  const size_t pending = a->ns_grants()->stats().pending;
  EXPECT_EQ(pending, 4u);
  EXPECT_FALSE(a->Fsync(root_, f.ino()).ok());
  EXPECT_EQ(a->ns_grants()->stats().pending, pending);
  Refuse("");
  ASSERT_OK(a->Fsync(root_, f.ino()));
  EXPECT_OK(a->FsyncDir(d));
  EXPECT_EQ(a->ns_grants()->stats().pending, 0u);
  EXPECT_EQ(Calls("Write"), writes);
  EXPECT_EQ(metrics_.written_bytes(), written + text.size());
  absl::StatusOr<std::string> got = volume_->Read(RequestContext(), f.ino(), 0, 10000);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, text);
  EXPECT_EQ(volume_->SpaceCounts().used_bytes, 4096u);
  EXPECT_OK(a->ns_grants()->Sync());
}

// The data of closed small files waits in the log for its batch like the
// entries that made the files (by age, size, fsync, recall), instead of
// sending a batch per file: here 20 files go in one ApplyLog, with no
// Write call, when the directory is fsync'd.
TEST_F(NsGrantsMountTest, TheDataOfClosedSmallFilesWaitsForTheLogsNextBatch) {
  NsGrantsOptions ns;
  ns.log.max_age = absl::Hours(1);  // the log goes only when asked
  FileSystem* a = Mount(true, ns);
  const uint64_t d = MkDir(a, kRoot, "d");
  ASSERT_OK(a->FsyncDir(d));
  const uint64_t writes = Calls("Write");
  const uint64_t batches = Calls("ApplyLog");
  std::vector<proto::Attr> files;
  for (int i = 0; i < 20; ++i) {
    files.push_back(MadeAndClosed(a, d, "f" + std::to_string(i), std::string(100 + i, 'a' + i)));
  }
  // The closes' data is handed to the log by the cache's flushers: each
  // file's create, open, close and data.
  for (int i = 0; i < 500 && a->ns_grants()->stats().pending < 80; ++i) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(a->ns_grants()->stats().pending, 80u);
  EXPECT_EQ(Calls("ApplyLog"), batches);
  ASSERT_OK(a->FsyncDir(d));
  EXPECT_EQ(Calls("ApplyLog"), batches + 1);
  EXPECT_EQ(Calls("Write"), writes);
  EXPECT_EQ(a->ns_grants()->stats().pending, 0u);
  FileSystem* b = Mount();
  for (int i = 0; i < 20; ++i) {
    ASSERT_OK_AND_ASSIGN(proto::Attr seen, b->Lookup(root_, d, "f" + std::to_string(i)));
    EXPECT_EQ(ReadAll(b, seen.ino()), std::string(100 + i, 'a' + i));
  }
}

}  // namespace
}  // namespace grantfs
