#include "server/meta_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "common/clock.h"
#include "common/errno_status.h"
#include "common/status_macros.h"
#include "common/status_test_util.h"
#include "gtest/gtest.h"
#include "rocksdb/env.h"
#include "rocksdb/file_system.h"
#include "server/metadata.h"
#include "server/names.h"
#include "server/permissions.h"

namespace grantfs {
namespace {

constexpr uint64_t kChunk = 64 * 1024;           // 16 blocks per chunk
constexpr uint64_t kCapacity = 64 * kBlockSize;  // 256 KiB
constexpr uint32_t kNoReplace = 1;
constexpr uint32_t kExchange = 2;
using V = proto::SetAttrRequest;

Caller User(uint32_t uid, uint32_t gid, std::vector<uint32_t> groups = {}) {
  Caller c;
  c.uid = uid;
  c.gid = gid;
  c.groups = std::move(groups);
  return c;
}

const Caller kRoot = User(0, 0);
const Caller kAlice = User(1000, 1000);
const Caller kBob = User(1001, 1001);

class MetaStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/grantfs_meta_store_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr) << strerror(errno);
    root_dir_ = tmpl;
    start_ns_ = clock_.NowNanos();
    Reopen();
  }
  void TearDown() override {
    store_.reset();
    std::error_code ec;
    std::filesystem::remove_all(root_dir_, ec);
  }

  MetaStoreOptions Options() {
    MetaStoreOptions o;
    o.dir = root_dir_ + "/meta";
    o.capacity_bytes = capacity_;
    o.chunk_size = kChunk;
    o.clock = &clock_;
    return o;
  }
  uint64_t capacity_ = kCapacity;
  // Closes the store (if open) and opens it again from the same directory.
  void Reopen() {
    store_.reset();
    auto store = Metadata::Open(Options());
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }

  absl::StatusOr<proto::Attr> Create(uint64_t parent, const std::string& name, uint32_t mode = 0644,
                                     const Caller& caller = kRoot) {
    return store_->names().MkNod(caller, parent, name, S_IFREG | mode, 0, 0, true);
  }
  absl::StatusOr<proto::Attr> Mkdir(uint64_t parent, const std::string& name, uint32_t mode = 0755,
                                    const Caller& caller = kRoot) {
    return store_->names().MkNod(caller, parent, name, S_IFDIR | mode, 0, 0, true);
  }
  absl::StatusOr<proto::Attr> Chmod(uint64_t ino, uint32_t mode, const Caller& caller = kRoot) {
    proto::SetAttrRequest req;
    req.set_ino(ino);
    req.set_valid(V::MODE);
    req.set_mode(mode);
    return store_->inodes().SetAttr(caller, req);
  }
  absl::StatusOr<proto::Attr> Truncate(uint64_t ino, uint64_t size, const Caller& caller = kRoot) {
    proto::SetAttrRequest req;
    req.set_ino(ino);
    req.set_valid(V::SIZE);
    req.set_size(size);
    return store_->inodes().SetAttr(caller, req);
  }
  // What a data write does to the metadata: reserve, then commit.
  absl::StatusOr<proto::Attr> Write(uint64_t ino, uint64_t offset, uint64_t length) {
    ASSIGN_OR_RETURN(Reservation reserved, store_->space().Reserve(ino, offset, length));
    return store_->space().CommitWrite(ino, offset, length, /*extend=*/true, reserved);
  }
  // nlink of `ino`, or -1 when it does not exist.
  int64_t Nlink(uint64_t ino) {
    auto a = store_->inodes().GetAttr(ino);
    return a.ok() ? static_cast<int64_t>(a->nlink()) : -1;
  }
  // The inode `name` in `parent` names, or 0.
  uint64_t InoOf(uint64_t parent, const std::string& name) {
    auto a = store_->names().Lookup(kRoot, parent, name);
    return a.ok() ? a->ino() : 0;
  }
  std::vector<uint64_t> Orphans() {
    auto orphans = store_->orphans().ListOrphans();
    if (!orphans.ok()) return {999999};
    std::vector<uint64_t> ids;
    for (const auto& [ino, rec] : *orphans) ids.push_back(ino);
    return ids;
  }
  std::vector<uint64_t> Garbage() {
    return store_->orphans().ListGarbage().value_or(std::vector<uint64_t>{999999});
  }
  // Every entry of `dir` as name -> cookie, read in one go.
  std::map<std::string, uint64_t> ListAll(uint64_t dir) {
    proto::ReadDirReply reply;
    absl::Status s = store_->names().ReadDir(kRoot, dir, 0, 100000, &reply);
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_TRUE(reply.eof());
    std::map<std::string, uint64_t> out;
    for (const auto& e : reply.entries()) out[e.name()] = e.cookie();
    return out;
  }

  FakeClock clock_;
  int64_t start_ns_ = 0;
  std::string root_dir_;
  std::unique_ptr<Metadata> store_;
};

// --- a new volume ---------------------------------------------------------------

TEST_F(MetaStoreTest, RootExistsAfterOpen) {
  ASSERT_OK_AND_ASSIGN(proto::Attr root, store_->inodes().GetAttr(kRootIno));
  EXPECT_EQ(root.ino(), kRootIno);
  EXPECT_EQ(root.mode(), S_IFDIR | 0755u);
  EXPECT_EQ(root.nlink(), 2u);
  EXPECT_EQ(root.uid(), 0u);
  EXPECT_EQ(root.gid(), 0u);
  EXPECT_EQ(root.mtime_ns(), start_ns_);
  EXPECT_EQ(root.ctime_ns(), start_ns_);
  EXPECT_EQ(InoOf(kRootIno, "."), kRootIno);
  EXPECT_EQ(InoOf(kRootIno, ".."), kRootIno);
  SpaceInfo space = store_->store().Space();
  EXPECT_EQ(space.capacity_bytes, kCapacity);
  EXPECT_EQ(space.used_bytes, 0u);
  EXPECT_EQ(space.reserved_bytes, 0u);
  EXPECT_EQ(space.inodes, 1u);
  EXPECT_EQ(space.next_ino, kRootIno + 1);
  EXPECT_EQ(space.pending_deletes, 0u);
  EXPECT_EQ(ListAll(kRootIno), (std::map<std::string, uint64_t>{{".", 1}, {"..", 2}}));
}

TEST(MetaStoreOpenTest, RejectsBadOptions) {
  MetaStoreOptions o;
  EXPECT_FALSE(MetaStore::Open(o).ok());  // no dir
  o.dir = "/tmp/grantfs-meta-never-created";
  o.capacity_bytes = 100;  // less than one block
  EXPECT_FALSE(MetaStore::Open(o).ok());
  o.capacity_bytes = 1 << 20;
  o.chunk_size = 4096;  // not a multiple of 32 KiB
  EXPECT_FALSE(MetaStore::Open(o).ok());
  struct stat st;
  EXPECT_NE(stat(o.dir.c_str(), &st), 0);
}

TEST_F(MetaStoreTest, TheCapacityIsRecordedAndChangedOnlyWhenAskedTo) {
  EXPECT_EQ(store_->store().Space().capacity_bytes, kCapacity);
  // Reopened with no capacity (a full disk would have derived 0): kept.
  capacity_ = 0;
  Reopen();
  EXPECT_EQ(store_->store().Space().capacity_bytes, kCapacity);
  // An explicit one changes it, and is kept from then on.
  capacity_ = 2 * kCapacity;
  Reopen();
  EXPECT_EQ(store_->store().Space().capacity_bytes, 2 * kCapacity);
  capacity_ = 0;
  Reopen();
  EXPECT_EQ(store_->store().Space().capacity_bytes, 2 * kCapacity);
  // Not below what is used.
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(kRootIno, "f"));
  ASSERT_OK(Write(f.ino(), 0, 8 * kBlockSize).status());
  capacity_ = 4 * kBlockSize;
  store_.reset();
  auto refused = MetaStore::Open(Options());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  capacity_ = 0;
  Reopen();
  EXPECT_EQ(store_->store().Space().capacity_bytes, 2 * kCapacity);
}

TEST_F(MetaStoreTest, TheVolumeHasAnIdentityWhoseDataEpochGrowsAtEachOpen) {
  const proto::VolumeIdentity first = store_->store().identity();
  EXPECT_EQ(first.volume_id().size(), 32u);
  EXPECT_EQ(first.volume_id().find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_GE(first.created_ns(), start_ns_);
  EXPECT_EQ(first.data_epoch(), 1u);
  // What the store holds is what it says, read without opening it.
  store_.reset();
  ASSERT_OK_AND_ASSIGN(std::optional<proto::VolumeIdentity> read,
                       MetaStore::ReadIdentity(root_dir_ + "/meta"));
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->SerializeAsString(), first.SerializeAsString());

  // Each open to serve raises it: by one, or to the witness epoch served.
  Reopen();
  EXPECT_EQ(store_->store().identity().volume_id(), first.volume_id());
  EXPECT_EQ(store_->store().identity().created_ns(), first.created_ns());
  EXPECT_EQ(store_->store().identity().data_epoch(), 2u);
  store_.reset();
  MetaStoreOptions o = Options();
  o.epoch = 7;
  ASSERT_OK_AND_ASSIGN(store_, Metadata::Open(o));
  EXPECT_EQ(store_->store().identity().data_epoch(), 7u);
  store_.reset();
  o.epoch = 3;  // a witness that forgot its epochs: never lowered
  ASSERT_OK_AND_ASSIGN(store_, Metadata::Open(o));
  EXPECT_EQ(store_->store().identity().data_epoch(), 8u);
  store_.reset();
  ASSERT_OK_AND_ASSIGN(read, MetaStore::ReadIdentity(root_dir_ + "/meta"));
  EXPECT_EQ(read->data_epoch(), 8u);

  // Another store is another volume.
  o.dir = root_dir_ + "/other";
  o.epoch = 5;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<MetaStore> other, MetaStore::Open(o));
  EXPECT_NE(other->identity().volume_id(), first.volume_id());
  EXPECT_EQ(other->identity().data_epoch(), 5u);
  Reopen();
}

TEST(MetaStoreReadIdentityTest, NoStoreIsAnError) {
  EXPECT_FALSE(MetaStore::ReadIdentity("/tmp/grantfs-meta-never-created").ok());
  struct stat st;
  EXPECT_NE(stat("/tmp/grantfs-meta-never-created", &st), 0);
}

TEST_F(MetaStoreTest, NothingIsPromisedThatTheDiskCannotHold) {
  uint64_t disk = 10 * kBlockSize;  // what the data file system can take
  store_.reset();
  MetaStoreOptions o = Options();
  o.disk_available = [&disk] { return disk; };
  ASSERT_OK_AND_ASSIGN(store_, Metadata::Open(o));
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(kRootIno, "f"));
  // The capacity (64 blocks) says yes, the disk says 10.
  ASSERT_OK_AND_ASSIGN(Reservation r, store_->space().Reserve(f.ino(), 0, 10 * kBlockSize));
  EXPECT_EQ(Err(store_->space().Reserve(f.ino(), 10 * kBlockSize, kBlockSize)), ENOSPC);
  // Written: the blocks are on disk now (the disk's free space went down
  // with them), so nothing more fits.
  ASSERT_OK(store_->space().CommitWrite(f.ino(), 0, 10 * kBlockSize, true, r).status());
  disk -= 10 * kBlockSize;
  EXPECT_EQ(Err(store_->space().Reserve(f.ino(), 10 * kBlockSize, kBlockSize)), ENOSPC);
  // Another program frees space: it can be promised again.
  disk = 3 * kBlockSize;
  ASSERT_OK(store_->space().Reserve(f.ino(), 10 * kBlockSize, 3 * kBlockSize).status());
  EXPECT_EQ(Err(store_->space().Reserve(f.ino(), 20 * kBlockSize, kBlockSize)), ENOSPC);
}

// --- creating and looking up ---------------------------------------------------

TEST_F(MetaStoreTest, MkNodLookupGetAttr) {
  clock_.Advance(absl::Seconds(1));
  ASSERT_OK_AND_ASSIGN(proto::Attr f,
                       store_->names().MkNod(kRoot, kRootIno, "f", S_IFREG | 0666, 0, 022, true));
  EXPECT_EQ(f.ino(), 2u);
  EXPECT_EQ(f.mode(), S_IFREG | 0644u);  // umask applied
  EXPECT_EQ(f.nlink(), 1u);
  EXPECT_EQ(f.uid(), 0u);
  EXPECT_EQ(f.size(), 0u);
  EXPECT_EQ(f.blocks(), 0u);
  EXPECT_EQ(f.mtime_ns(), start_ns_ + 1000000000);

  ASSERT_OK_AND_ASSIGN(proto::Attr looked, store_->names().Lookup(kRoot, kRootIno, "f"));
  EXPECT_EQ(looked.ino(), f.ino());
  EXPECT_EQ(looked.mode(), f.mode());
  ASSERT_OK_AND_ASSIGN(proto::Attr got, store_->inodes().GetAttr(f.ino()));
  EXPECT_EQ(got.SerializeAsString(), f.SerializeAsString());

  ASSERT_OK_AND_ASSIGN(proto::Attr fifo,
                       store_->names().MkNod(kRoot, kRootIno, "p", S_IFIFO | 0600, 0, 0, true));
  EXPECT_EQ(fifo.ino(), 3u);
  EXPECT_EQ(fifo.mode(), S_IFIFO | 0600u);
  ASSERT_OK_AND_ASSIGN(proto::Attr dev, store_->names().MkNod(kRoot, kRootIno, "null",
                                                              S_IFCHR | 0666, 0x0103, 0, true));
  EXPECT_EQ(dev.rdev(), 0x0103u);

  SpaceInfo space = store_->store().Space();
  EXPECT_EQ(space.inodes, 4u);
  EXPECT_EQ(space.next_ino, 5u);
}

TEST_F(MetaStoreTest, SymlinkAndReadLink) {
  ASSERT_OK_AND_ASSIGN(proto::Attr l,
                       store_->names().Symlink(kRoot, kRootIno, "l", "../some/target"));
  EXPECT_EQ(l.mode(), S_IFLNK | 0777u);
  EXPECT_EQ(l.size(), 14u);  // the target's length
  ASSERT_OK_AND_ASSIGN(std::string target, store_->names().ReadLink(l.ino()));
  EXPECT_EQ(target, "../some/target");
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(kRootIno, "f"));
  EXPECT_EQ(Err(store_->names().ReadLink(f.ino())), EINVAL);
  EXPECT_EQ(Err(store_->names().Symlink(kRoot, kRootIno, "empty", "")), ENOENT);
  EXPECT_EQ(Err(store_->names().Symlink(kRoot, kRootIno, "long", std::string(4096, 'a'))),
            ENAMETOOLONG);
  EXPECT_EQ(Err(store_->names().Symlink(kRoot, kRootIno, "l", "x")), EEXIST);
}

TEST_F(MetaStoreTest, BadTypesAndNames) {
  EXPECT_EQ(Err(store_->names().MkNod(kRoot, kRootIno, "x", 0644, 0, 0, true)), EINVAL);  // no type
  EXPECT_EQ(Err(store_->names().MkNod(kRoot, kRootIno, "x", S_IFLNK | 0777, 0, 0, true)), EINVAL);
  EXPECT_EQ(Err(store_->names().MkNod(kAlice, kRootIno, "x", S_IFBLK | 0600, 1, 0, true)), EPERM);
  EXPECT_EQ(Err(Create(kRootIno, "")), EINVAL);
  EXPECT_EQ(Err(Create(kRootIno, ".")), EINVAL);
  EXPECT_EQ(Err(Create(kRootIno, "..")), EINVAL);
  EXPECT_EQ(Err(Create(kRootIno, "a/b")), EINVAL);
  EXPECT_EQ(Err(Create(kRootIno, std::string(256, 'n'))), ENAMETOOLONG);
  EXPECT_EQ(Err(Create(kRootIno, std::string(255, 'n'))), 0);
  EXPECT_EQ(Err(store_->names().Lookup(kRoot, kRootIno, std::string(256, 'n'))), ENAMETOOLONG);
  EXPECT_EQ(store_->store().Space().inodes, 2u);
}

TEST_F(MetaStoreTest, ExistingNamesAreEexistAndUseNoInodeNumber) {
  ASSERT_OK(Create(kRootIno, "f"));
  ASSERT_OK(Mkdir(kRootIno, "d"));
  const SpaceInfo before = store_->store().Space();
  EXPECT_EQ(Err(Create(kRootIno, "f")), EEXIST);
  EXPECT_EQ(Err(Create(kRootIno, "d")), EEXIST);
  EXPECT_EQ(Err(Mkdir(kRootIno, "f")), EEXIST);
  EXPECT_EQ(Err(Mkdir(kRootIno, "d")), EEXIST);
  EXPECT_EQ(Err(store_->names().MkNod(kRoot, kRootIno, "f", S_IFIFO | 0644, 0, 0, false)), EEXIST);
  const SpaceInfo after = store_->store().Space();
  EXPECT_EQ(after.inodes, before.inodes);
  EXPECT_EQ(after.next_ino, before.next_ino);
  EXPECT_EQ(Nlink(kRootIno), 3);
}

TEST_F(MetaStoreTest, MissingNamesAndInodesAreEnoent) {
  EXPECT_EQ(Err(store_->names().Lookup(kRoot, kRootIno, "nope")), ENOENT);
  EXPECT_EQ(Err(store_->inodes().GetAttr(999)), ENOENT);
  EXPECT_EQ(Err(store_->inodes().GetInode(999)), ENOENT);
  EXPECT_EQ(Err(Create(999, "f")), ENOENT);
  EXPECT_EQ(Err(store_->names().Remove(kRoot, kRootIno, "nope", false)), ENOENT);
  EXPECT_EQ(Err(store_->names().Remove(kRoot, kRootIno, "nope", true)), ENOENT);
  EXPECT_EQ(Err(store_->names().Rename(kRoot, kRootIno, "nope", kRootIno, "other", 0)), ENOENT);
}

TEST_F(MetaStoreTest, AFileAsParentIsEnotdir) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(kRootIno, "f"));
  EXPECT_EQ(Err(Create(f.ino(), "x")), ENOTDIR);
  EXPECT_EQ(Err(Mkdir(f.ino(), "x")), ENOTDIR);
  EXPECT_EQ(Err(store_->names().Lookup(kRoot, f.ino(), "x")), ENOTDIR);
  EXPECT_EQ(Err(store_->names().Remove(kRoot, f.ino(), "x", false)), ENOTDIR);
  proto::ReadDirReply reply;
  EXPECT_EQ(Err(store_->names().ReadDir(kRoot, f.ino(), 0, 10, &reply)), ENOTDIR);
  // rmdir of a file.
  EXPECT_EQ(Err(store_->names().Remove(kRoot, kRootIno, "f", true)), ENOTDIR);
  EXPECT_EQ(InoOf(kRootIno, "f"), f.ino());
}

TEST_F(MetaStoreTest, UnlinkOfADirectoryIsEisdir) {
  ASSERT_OK_AND_ASSIGN(proto::Attr d, Mkdir(kRootIno, "d"));
  EXPECT_EQ(Err(store_->names().Remove(kRoot, kRootIno, "d", false)), EISDIR);
  EXPECT_EQ(InoOf(kRootIno, "d"), d.ino());
  EXPECT_EQ(Err(store_->names().Link(kRoot, d.ino(), kRootIno, "d2")), EPERM);
}

TEST_F(MetaStoreTest, RmdirOfANonEmptyDirectoryIsEnotempty) {
  ASSERT_OK_AND_ASSIGN(proto::Attr d, Mkdir(kRootIno, "d"));
  ASSERT_OK(Create(d.ino(), "f"));
  EXPECT_EQ(Err(store_->names().Remove(kRoot, kRootIno, "d", true)), ENOTEMPTY);
  EXPECT_EQ(Nlink(d.ino()), 2);
  ASSERT_OK(store_->names().Remove(kRoot, d.ino(), "f", false));
  EXPECT_EQ(Err(store_->names().Remove(kRoot, kRootIno, "d", true)), 0);
  EXPECT_EQ(Err(store_->names().Remove(kRoot, kRootIno, ".", true)), EINVAL);
  EXPECT_EQ(Err(store_->names().Remove(kRoot, kRootIno, "..", true)), ENOTEMPTY);
}

TEST_F(MetaStoreTest, NonExclusiveCreateReturnsTheExistingFile) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(kRootIno, "f", 0600));
  const SpaceInfo before = store_->store().Space();
  ASSERT_OK_AND_ASSIGN(proto::Attr again,
                       store_->names().MkNod(kRoot, kRootIno, "f", S_IFREG | 0777, 0, 0, false));
  EXPECT_EQ(again.ino(), f.ino());
  EXPECT_EQ(again.mode(), S_IFREG | 0600u);  // the existing file, unchanged
  EXPECT_EQ(again.nlink(), 1u);
  EXPECT_EQ(store_->store().Space().next_ino, before.next_ino);
  EXPECT_EQ(store_->store().Space().inodes, before.inodes);
  // An existing directory cannot be opened for creation.
  ASSERT_OK(Mkdir(kRootIno, "d"));
  // Non-exclusive create over a directory: the caller's view was stale.
  EXPECT_EQ(Err(store_->names().MkNod(kRoot, kRootIno, "d", S_IFREG | 0644, 0, 0, false)), ESTALE);
}

TEST_F(MetaStoreTest, NonExclusiveCreateOfAnExistingFileNeedsNoWriteAccessToTheDirectory) {
  // open(O_CREAT) without O_EXCL of an existing file only opens it (POSIX,
  // Linux): the directory's write permission is needed only to create.
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(kRootIno, "shared", 0666));
  auto opened = store_->names().MkNod(kAlice, kRootIno, "shared", S_IFREG | 0644, 0, 022, false);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ(opened->ino(), f.ino());
}

// --- link counts ------------------------------------------------------------------

TEST_F(MetaStoreTest, MkdirAndRmdirKeepParentLinkCounts) {
  EXPECT_EQ(Nlink(kRootIno), 2);
  ASSERT_OK_AND_ASSIGN(proto::Attr a, Mkdir(kRootIno, "a"));
  EXPECT_EQ(a.nlink(), 2u);
  EXPECT_EQ(Nlink(kRootIno), 3);
  EXPECT_EQ(InoOf(a.ino(), ".."), kRootIno);
  EXPECT_EQ(InoOf(a.ino(), "."), a.ino());
  ASSERT_OK_AND_ASSIGN(proto::Attr b, Mkdir(a.ino(), "b"));
  EXPECT_EQ(Nlink(a.ino()), 3);
  EXPECT_EQ(Nlink(kRootIno), 3);
  EXPECT_EQ(InoOf(b.ino(), ".."), a.ino());
  // Files do not count.
  ASSERT_OK(Create(a.ino(), "f"));
  EXPECT_EQ(Nlink(a.ino()), 3);

  ASSERT_OK_AND_ASSIGN(Removed rb, store_->names().Remove(kRoot, a.ino(), "b", true));
  EXPECT_EQ(rb.ino, b.ino());
  EXPECT_EQ(rb.nlink, 0u);
  EXPECT_EQ(Nlink(a.ino()), 2);
  ASSERT_OK(store_->names().Remove(kRoot, a.ino(), "f", false));
  ASSERT_OK_AND_ASSIGN(Removed ra, store_->names().Remove(kRoot, kRootIno, "a", true));
  EXPECT_EQ(ra.ino, a.ino());
  EXPECT_EQ(ra.nlink, 0u);
  EXPECT_EQ(Nlink(kRootIno), 2);
  EXPECT_EQ(InoOf(kRootIno, "a"), 0u);
}

TEST_F(MetaStoreTest, CreatingInARemovedDirectoryIsEnoent) {
  ASSERT_OK_AND_ASSIGN(proto::Attr d, Mkdir(kRootIno, "d"));
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(kRootIno, "f"));
  ASSERT_OK(store_->names().Remove(kRoot, kRootIno, "d", true));
  EXPECT_EQ(Err(Create(d.ino(), "x")), ENOENT);
  EXPECT_EQ(Err(store_->names().Link(kRoot, f.ino(), d.ino(), "x")), ENOENT);
  EXPECT_EQ(Err(store_->names().Rename(kRoot, kRootIno, "f", d.ino(), "x", 0)), ENOENT);
  EXPECT_EQ(InoOf(kRootIno, "f"), f.ino());
}

TEST_F(MetaStoreTest, HardLinkCounts) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(kRootIno, "f"));
  ASSERT_OK_AND_ASSIGN(proto::Attr d, Mkdir(kRootIno, "d"));
  ASSERT_OK_AND_ASSIGN(proto::Attr linked, store_->names().Link(kRoot, f.ino(), d.ino(), "g"));
  EXPECT_EQ(linked.ino(), f.ino());
  EXPECT_EQ(linked.nlink(), 2u);
  EXPECT_EQ(InoOf(d.ino(), "g"), f.ino());
  EXPECT_EQ(Err(store_->names().Link(kRoot, f.ino(), d.ino(), "g")), EEXIST);
  EXPECT_EQ(Nlink(f.ino()), 2);
  EXPECT_EQ(Nlink(d.ino()), 2);  // a file link is no subdirectory

  ASSERT_OK_AND_ASSIGN(Removed r1, store_->names().Remove(kRoot, kRootIno, "f", false));
  EXPECT_EQ(r1.ino, f.ino());
  EXPECT_EQ(r1.nlink, 1u);
  EXPECT_TRUE(Orphans().empty());
  ASSERT_OK_AND_ASSIGN(Removed r2, store_->names().Remove(kRoot, d.ino(), "g", false));
  EXPECT_EQ(r2.ino, f.ino());
  EXPECT_EQ(r2.nlink, 0u);
  // Unlinked but still an inode (it may be open) until reaped.
  EXPECT_EQ(Nlink(f.ino()), 0);
  EXPECT_EQ(Orphans(), std::vector<uint64_t>{f.ino()});
  EXPECT_TRUE(Garbage().empty());
  EXPECT_EQ(Err(store_->names().Link(kRoot, f.ino(), kRootIno, "back")), ENOENT);
}

TEST_F(MetaStoreTest, LastUnlinkThenReapMakesGarbage) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(kRootIno, "f"));
  ASSERT_OK(Write(f.ino(), 0, 3 * kBlockSize));
  ASSERT_OK(store_->inodes().SetXattr(kRoot, f.ino(), "user.k", "v", 0));
  ASSERT_OK_AND_ASSIGN(proto::Attr live, Create(kRootIno, "live"));
  // Reap of a file that still has a link is a no-op.
  ASSERT_OK(store_->orphans().Reap(live.ino()));
  EXPECT_EQ(Nlink(live.ino()), 1);

  ASSERT_OK(store_->names().Remove(kRoot, kRootIno, "f", false));
  EXPECT_EQ(Orphans(), std::vector<uint64_t>{f.ino()});
  EXPECT_EQ(store_->store().Space().inodes, 3u);
  ASSERT_OK(store_->orphans().Reap(f.ino()));
  EXPECT_TRUE(Orphans().empty());
  EXPECT_EQ(Garbage(), std::vector<uint64_t>{f.ino()});
  EXPECT_EQ(Err(store_->inodes().GetAttr(f.ino())), ENOENT);
  EXPECT_EQ(Err(store_->inodes().ListXattr(kRoot, f.ino())), ENOENT);
  SpaceInfo space = store_->store().Space();
  EXPECT_EQ(space.inodes, 2u);
  EXPECT_EQ(space.pending_deletes, 1u);
  EXPECT_EQ(space.used_bytes, 3 * kBlockSize);  // freed only with the chunks
  ASSERT_OK_AND_ASSIGN(uint64_t span, store_->orphans().GarbageChunkSpan(f.ino()));
  EXPECT_EQ(span, 1u);

  ASSERT_OK(store_->orphans().FinishGarbage(f.ino()));
  EXPECT_TRUE(Garbage().empty());
  space = store_->store().Space();
  EXPECT_EQ(space.used_bytes, 0u);
  EXPECT_EQ(space.pending_deletes, 0u);
  // Reaping twice is harmless.
  ASSERT_OK(store_->orphans().Reap(f.ino()));
  EXPECT_TRUE(Garbage().empty());
}

TEST_F(MetaStoreTest, GarbageChunkSpanCoversEveryRecordedChunk) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(kRootIno, "f"));
  ASSERT_OK(Write(f.ino(), 0, 100));  // size 100: one chunk
  // Blocks allocated past the size (fallocate with KEEP_SIZE) in chunk 5.
  ASSERT_OK_AND_ASSIGN(Reservation reserved, store_->space().Reserve(f.ino(), 5 * kChunk, 10));
  ASSERT_OK(store_->space().CommitWrite(f.ino(), 5 * kChunk, 10, /*extend=*/false, reserved));
  ASSERT_OK(store_->names().Remove(kRoot, kRootIno, "f", false));
  ASSERT_OK(store_->orphans().Reap(f.ino()));
  ASSERT_OK_AND_ASSIGN(uint64_t span, store_->orphans().GarbageChunkSpan(f.ino()));
  EXPECT_EQ(span, 6u);
  ASSERT_OK(store_->orphans().FinishGarbage(f.ino()));
  EXPECT_EQ(store_->store().Space().used_bytes, 0u);
}

// --- rename -----------------------------------------------------------------------

TEST_F(MetaStoreTest, RenamePlain) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(kRootIno, "a"));
  ASSERT_OK_AND_ASSIGN(Removed r, store_->names().Rename(kRoot, kRootIno, "a", kRootIno, "b", 0));
  EXPECT_EQ(r.ino, 0u);
  EXPECT_EQ(InoOf(kRootIno, "a"), 0u);
  EXPECT_EQ(InoOf(kRootIno, "b"), f.ino());
  EXPECT_EQ(Nlink(f.ino()), 1);
  auto names = ListAll(kRootIno);
  EXPECT_EQ(names.count("a"), 0u);
  EXPECT_EQ(names.count("b"), 1u);
  // Renaming onto another link of the same file changes nothing.
  ASSERT_OK(store_->names().Link(kRoot, f.ino(), kRootIno, "c"));
  ASSERT_OK_AND_ASSIGN(r, store_->names().Rename(kRoot, kRootIno, "b", kRootIno, "c", 0));
  EXPECT_EQ(r.ino, 0u);
  EXPECT_EQ(InoOf(kRootIno, "b"), f.ino());
  EXPECT_EQ(InoOf(kRootIno, "c"), f.ino());
  EXPECT_EQ(Nlink(f.ino()), 2);
  // From a mount, whose kernel only sends it when its two entries hold
  // different inodes (found by tests/nscheck.py: "a" -> "a" with a stale
  // source entry made the node mark the live target directory dead).
  EXPECT_EQ(Err(store_->names().Rename(kRoot, kRootIno, "b", kRootIno, "c", 0, f.ino(), f.ino())),
            ESTALE);
  EXPECT_EQ(Err(store_->names().Rename(kRoot, kRootIno, "b", kRootIno, "b", 0, f.ino(), f.ino())),
            ESTALE);
  EXPECT_EQ(Nlink(f.ino()), 2);
}

TEST_F(MetaStoreTest, RenameOfAFileAcrossDirectories) {
  ASSERT_OK_AND_ASSIGN(proto::Attr d, Mkdir(kRootIno, "d"));
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(kRootIno, "f"));
  ASSERT_OK(store_->names().Rename(kRoot, kRootIno, "f", d.ino(), "g", 0));
  EXPECT_EQ(InoOf(kRootIno, "f"), 0u);
  EXPECT_EQ(InoOf(d.ino(), "g"), f.ino());
  EXPECT_EQ(Nlink(kRootIno), 3);
  EXPECT_EQ(Nlink(d.ino()), 2);
}

TEST_F(MetaStoreTest, RenameOfADirectoryAcrossDirectoriesMovesItsLinkAndDotDot) {
  ASSERT_OK_AND_ASSIGN(proto::Attr a, Mkdir(kRootIno, "a"));
  ASSERT_OK_AND_ASSIGN(proto::Attr b, Mkdir(kRootIno, "b"));
  ASSERT_OK_AND_ASSIGN(proto::Attr c, Mkdir(a.ino(), "c"));
  EXPECT_EQ(Nlink(a.ino()), 3);
  ASSERT_OK(store_->names().Rename(kRoot, a.ino(), "c", b.ino(), "c", 0));
  EXPECT_EQ(Nlink(a.ino()), 2);
  EXPECT_EQ(Nlink(b.ino()), 3);
  EXPECT_EQ(Nlink(kRootIno), 4);
  EXPECT_EQ(Nlink(c.ino()), 2);
  EXPECT_EQ(InoOf(c.ino(), ".."), b.ino());
  // a is now empty and can go.
  EXPECT_EQ(Err(store_->names().Remove(kRoot, kRootIno, "a", true)), 0);
  EXPECT_EQ(Err(store_->names().Remove(kRoot, kRootIno, "b", true)), ENOTEMPTY);
  // Up to the root.
  ASSERT_OK(store_->names().Rename(kRoot, b.ino(), "c", kRootIno, "c", 0));
  EXPECT_EQ(Nlink(b.ino()), 2);
  EXPECT_EQ(Nlink(kRootIno), 4);  // b and c
  EXPECT_EQ(InoOf(c.ino(), ".."), kRootIno);
}

TEST_F(MetaStoreTest, RenameOfADirectoryWithinItsDirectoryKeepsLinkCounts) {
  ASSERT_OK_AND_ASSIGN(proto::Attr a, Mkdir(kRootIno, "a"));
  ASSERT_OK(store_->names().Rename(kRoot, kRootIno, "a", kRootIno, "b", 0));
  EXPECT_EQ(Nlink(kRootIno), 3);
  EXPECT_EQ(Nlink(a.ino()), 2);
  EXPECT_EQ(InoOf(a.ino(), ".."), kRootIno);
}

TEST_F(MetaStoreTest, RenameOfADirectoryOverAnEmptyDirectoryElsewhere) {
  ASSERT_OK_AND_ASSIGN(proto::Attr a, Mkdir(kRootIno, "a"));
  ASSERT_OK_AND_ASSIGN(proto::Attr b, Mkdir(kRootIno, "b"));
  ASSERT_OK_AND_ASSIGN(proto::Attr x, Mkdir(a.ino(), "x"));
  ASSERT_OK_AND_ASSIGN(proto::Attr y, Mkdir(b.ino(), "x"));
  ASSERT_OK_AND_ASSIGN(Removed r, store_->names().Rename(kRoot, a.ino(), "x", b.ino(), "x", 0));
  EXPECT_EQ(r.ino, y.ino());
  EXPECT_EQ(r.nlink, 0u);
  EXPECT_EQ(InoOf(b.ino(), "x"), x.ino());
  EXPECT_EQ(InoOf(x.ino(), ".."), b.ino());
  EXPECT_EQ(Nlink(kRootIno), 4);
  EXPECT_EQ(Nlink(a.ino()), 2);
  EXPECT_EQ(Nlink(b.ino()), 3);
  EXPECT_EQ(Orphans(), std::vector<uint64_t>{y.ino()});
}

TEST_F(MetaStoreTest, RenameExchangeOfTwoDirectoriesAcrossDirectories) {
  ASSERT_OK_AND_ASSIGN(proto::Attr a, Mkdir(kRootIno, "a"));
  ASSERT_OK_AND_ASSIGN(proto::Attr b, Mkdir(kRootIno, "b"));
  ASSERT_OK_AND_ASSIGN(proto::Attr x, Mkdir(a.ino(), "x"));
  ASSERT_OK_AND_ASSIGN(proto::Attr y, Mkdir(b.ino(), "y"));
  ASSERT_OK(store_->names().Rename(kRoot, a.ino(), "x", b.ino(), "y", kExchange));
  EXPECT_EQ(InoOf(a.ino(), "x"), y.ino());
  EXPECT_EQ(InoOf(b.ino(), "y"), x.ino());
  EXPECT_EQ(InoOf(x.ino(), ".."), b.ino());
  EXPECT_EQ(InoOf(y.ino(), ".."), a.ino());
  EXPECT_EQ(Nlink(a.ino()), 3);
  EXPECT_EQ(Nlink(b.ino()), 3);
  EXPECT_EQ(Nlink(kRootIno), 4);
  // Exchanging a directory with its own ancestor's entry is a loop.
  EXPECT_EQ(Err(store_->names().Rename(kRoot, kRootIno, "b", b.ino(), "y", kExchange)), EINVAL);
}

TEST_F(MetaStoreTest, RenameOverAFileReturnsTheReplacedInode) {
  ASSERT_OK_AND_ASSIGN(proto::Attr a, Create(kRootIno, "a"));
  ASSERT_OK_AND_ASSIGN(proto::Attr b, Create(kRootIno, "b"));
  ASSERT_OK_AND_ASSIGN(Removed r, store_->names().Rename(kRoot, kRootIno, "a", kRootIno, "b", 0));
  EXPECT_EQ(r.ino, b.ino());
  EXPECT_EQ(r.nlink, 0u);
  EXPECT_EQ(InoOf(kRootIno, "b"), a.ino());
  EXPECT_EQ(InoOf(kRootIno, "a"), 0u);
  EXPECT_EQ(Nlink(b.ino()), 0);
  EXPECT_EQ(Orphans(), std::vector<uint64_t>{b.ino()});
  EXPECT_EQ(ListAll(kRootIno).size(), 3u);  // ".", "..", "b"
}

TEST_F(MetaStoreTest, RenameOverAFileWithAnotherLinkKeepsIt) {
  ASSERT_OK_AND_ASSIGN(proto::Attr a, Create(kRootIno, "a"));
  ASSERT_OK_AND_ASSIGN(proto::Attr b, Create(kRootIno, "b"));
  ASSERT_OK(store_->names().Link(kRoot, b.ino(), kRootIno, "b2"));
  ASSERT_OK_AND_ASSIGN(Removed r, store_->names().Rename(kRoot, kRootIno, "a", kRootIno, "b", 0));
  EXPECT_EQ(r.ino, b.ino());
  EXPECT_EQ(r.nlink, 1u);
  EXPECT_EQ(InoOf(kRootIno, "b2"), b.ino());
  EXPECT_EQ(InoOf(kRootIno, "b"), a.ino());
  EXPECT_TRUE(Orphans().empty());
}

TEST_F(MetaStoreTest, RenameNoReplace) {
  ASSERT_OK_AND_ASSIGN(proto::Attr a, Create(kRootIno, "a"));
  ASSERT_OK_AND_ASSIGN(proto::Attr b, Create(kRootIno, "b"));
  EXPECT_EQ(Err(store_->names().Rename(kRoot, kRootIno, "a", kRootIno, "b", kNoReplace)), EEXIST);
  EXPECT_EQ(InoOf(kRootIno, "a"), a.ino());
  EXPECT_EQ(InoOf(kRootIno, "b"), b.ino());
  EXPECT_EQ(Nlink(b.ino()), 1);
  EXPECT_EQ(Err(store_->names().Rename(kRoot, kRootIno, "a", kRootIno, "c", kNoReplace)), 0);
  EXPECT_EQ(InoOf(kRootIno, "c"), a.ino());
}

TEST_F(MetaStoreTest, RenameBadFlags) {
  ASSERT_OK(Create(kRootIno, "a"));
  ASSERT_OK(Create(kRootIno, "b"));
  EXPECT_EQ(
      Err(store_->names().Rename(kRoot, kRootIno, "a", kRootIno, "b", kNoReplace | kExchange)),
      EINVAL);
  EXPECT_EQ(Err(store_->names().Rename(kRoot, kRootIno, "a", kRootIno, "b", 4)), EINVAL);
}

TEST_F(MetaStoreTest, RenameExchangeSwaps) {
  ASSERT_OK_AND_ASSIGN(proto::Attr a, Create(kRootIno, "a"));
  ASSERT_OK_AND_ASSIGN(proto::Attr b, Mkdir(kRootIno, "b"));
  const auto cookies = ListAll(kRootIno);
  ASSERT_OK_AND_ASSIGN(Removed r,
                       store_->names().Rename(kRoot, kRootIno, "a", kRootIno, "b", kExchange));
  EXPECT_EQ(r.ino, 0u);
  EXPECT_EQ(InoOf(kRootIno, "a"), b.ino());
  EXPECT_EQ(InoOf(kRootIno, "b"), a.ino());
  EXPECT_EQ(Nlink(a.ino()), 1);
  EXPECT_EQ(Nlink(b.ino()), 2);
  EXPECT_EQ(Nlink(kRootIno), 3);
  EXPECT_EQ(ListAll(kRootIno), cookies);  // names keep their positions
  // The entry type follows the inode.
  proto::ReadDirReply reply;
  ASSERT_OK(store_->names().ReadDir(kRoot, kRootIno, 2, 10, &reply));
  ASSERT_EQ(reply.entries_size(), 2);
  for (const auto& e : reply.entries()) {
    if (e.name() == "a") {
      EXPECT_TRUE(S_ISDIR(e.attr().mode()));
    } else if (e.name() == "b") {
      EXPECT_TRUE(S_ISREG(e.attr().mode()));
    }
  }
  EXPECT_EQ(Err(store_->names().Rename(kRoot, kRootIno, "a", kRootIno, "missing", kExchange)),
            ENOENT);
}

TEST_F(MetaStoreTest, RenameExchangeAcrossDirectoriesMovesTheSubdirectoryLink) {
  ASSERT_OK_AND_ASSIGN(proto::Attr d, Mkdir(kRootIno, "d"));  // root/d
  ASSERT_OK_AND_ASSIGN(proto::Attr x, Mkdir(kRootIno, "x"));  // root/x
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(x.ino(), "f"));  // root/x/f
  EXPECT_EQ(Nlink(kRootIno), 4);
  ASSERT_OK(store_->names().Rename(kRoot, kRootIno, "d", x.ino(), "f", kExchange));
  EXPECT_EQ(InoOf(kRootIno, "d"), f.ino());
  EXPECT_EQ(InoOf(x.ino(), "f"), d.ino());
  EXPECT_EQ(Nlink(kRootIno), 3);  // only x is a subdirectory now
  EXPECT_EQ(Nlink(x.ino()), 3);   // d moved in
  EXPECT_EQ(InoOf(d.ino(), ".."), x.ino());
}

TEST_F(MetaStoreTest, RenameOfADirectoryIntoItselfIsEinval) {
  ASSERT_OK_AND_ASSIGN(proto::Attr d, Mkdir(kRootIno, "d"));
  ASSERT_OK_AND_ASSIGN(proto::Attr s, Mkdir(d.ino(), "s"));
  ASSERT_OK_AND_ASSIGN(proto::Attr t, Mkdir(s.ino(), "t"));
  EXPECT_EQ(Err(store_->names().Rename(kRoot, kRootIno, "d", s.ino(), "x", 0)), EINVAL);
  EXPECT_EQ(Err(store_->names().Rename(kRoot, kRootIno, "d", t.ino(), "x", 0)), EINVAL);
  EXPECT_EQ(Err(store_->names().Rename(kRoot, kRootIno, "d", d.ino(), "x", 0)), EINVAL);
  EXPECT_EQ(InoOf(kRootIno, "d"), d.ino());
  EXPECT_EQ(InoOf(d.ino(), ".."), kRootIno);
  EXPECT_EQ(Nlink(kRootIno), 3);
  EXPECT_EQ(Nlink(s.ino()), 3);
}

TEST_F(MetaStoreTest, RenameOfADirectoryOverADirectory) {
  ASSERT_OK_AND_ASSIGN(proto::Attr a, Mkdir(kRootIno, "a"));
  ASSERT_OK_AND_ASSIGN(proto::Attr b, Mkdir(kRootIno, "b"));
  ASSERT_OK(Create(b.ino(), "f"));
  EXPECT_EQ(Nlink(kRootIno), 4);
  EXPECT_EQ(Err(store_->names().Rename(kRoot, kRootIno, "a", kRootIno, "b", 0)), ENOTEMPTY);
  EXPECT_EQ(InoOf(kRootIno, "b"), b.ino());
  ASSERT_OK(store_->names().Remove(kRoot, b.ino(), "f", false));
  // Over an empty directory it works and replaces it.
  ASSERT_OK_AND_ASSIGN(Removed r, store_->names().Rename(kRoot, kRootIno, "a", kRootIno, "b", 0));
  EXPECT_EQ(r.ino, b.ino());
  EXPECT_EQ(r.nlink, 0u);
  EXPECT_EQ(InoOf(kRootIno, "b"), a.ino());
  EXPECT_EQ(Nlink(kRootIno), 3);
  EXPECT_EQ(Nlink(a.ino()), 2);
}

TEST_F(MetaStoreTest, RenameBetweenFileAndDirectory) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(kRootIno, "f"));
  ASSERT_OK_AND_ASSIGN(proto::Attr d, Mkdir(kRootIno, "d"));
  EXPECT_EQ(Err(store_->names().Rename(kRoot, kRootIno, "f", kRootIno, "d", 0)), EISDIR);
  EXPECT_EQ(Err(store_->names().Rename(kRoot, kRootIno, "d", kRootIno, "f", 0)), ENOTDIR);
  EXPECT_EQ(InoOf(kRootIno, "f"), f.ino());
  EXPECT_EQ(InoOf(kRootIno, "d"), d.ino());
  EXPECT_EQ(Nlink(kRootIno), 3);
  EXPECT_TRUE(Orphans().empty());
}

// --- readdir ------------------------------------------------------------------------

TEST_F(MetaStoreTest, ReadDirPagesThroughEveryEntryExactlyOnce) {
  ASSERT_OK_AND_ASSIGN(proto::Attr dir, Mkdir(kRootIno, "big"));
  std::map<std::string, uint64_t> created;  // name -> ino
  for (int i = 0; i < 1000; ++i) {
    const std::string name = absl::StrFormat("f%04d", i);
    ASSERT_OK_AND_ASSIGN(proto::Attr a, Create(dir.ino(), name));
    created[name] = a.ino();
  }
  std::map<std::string, int> seen;
  std::map<std::string, uint64_t> cookie_of;
  uint64_t cookie = 0, last_cookie = 0;
  int pages = 0;
  for (;;) {
    proto::ReadDirReply reply;
    ASSERT_OK(store_->names().ReadDir(kRoot, dir.ino(), cookie, 100, &reply));
    ++pages;
    ASSERT_LE(reply.entries_size(), 100);
    for (const auto& e : reply.entries()) {
      ++seen[e.name()];
      cookie_of[e.name()] = e.cookie();
      EXPECT_GT(e.cookie(), last_cookie) << e.name();
      last_cookie = e.cookie();
      if (e.name() == ".") {
        EXPECT_EQ(e.attr().ino(), dir.ino());
      } else if (e.name() == "..") {
        EXPECT_EQ(e.attr().ino(), kRootIno);
      } else {
        EXPECT_EQ(e.attr().ino(), created[e.name()]) << e.name();
        EXPECT_TRUE(S_ISREG(e.attr().mode()));
      }
    }
    if (reply.entries_size() > 0) cookie = reply.entries(reply.entries_size() - 1).cookie();
    if (reply.eof()) break;
    ASSERT_LT(pages, 20) << "readdir does not end";
  }
  EXPECT_EQ(pages, 11);  // 1002 entries
  ASSERT_EQ(seen.size(), 1002u);
  for (const auto& [name, n] : seen) EXPECT_EQ(n, 1) << name;
  for (const auto& [name, ino] : created) EXPECT_EQ(seen.count(name), 1u) << name;

  // Cookies are stable: a second listing gives the same ones.
  EXPECT_EQ(ListAll(dir.ino()), cookie_of);

  // Resuming after an entry that was removed meanwhile continues right after it.
  ASSERT_OK(store_->names().Remove(kRoot, dir.ino(), "f0500", false));
  proto::ReadDirReply reply;
  ASSERT_OK(store_->names().ReadDir(kRoot, dir.ino(), cookie_of["f0500"], 3, &reply));
  ASSERT_EQ(reply.entries_size(), 3);
  EXPECT_EQ(reply.entries(0).name(), "f0501");
  EXPECT_EQ(reply.entries(0).cookie(), cookie_of["f0501"]);
  EXPECT_EQ(reply.entries(2).name(), "f0503");
  EXPECT_FALSE(reply.eof());
  auto after = ListAll(dir.ino());
  EXPECT_EQ(after.size(), 1001u);
  after["f0500"] = cookie_of["f0500"];
  EXPECT_EQ(after, cookie_of);  // the others kept their cookies
}

TEST_F(MetaStoreTest, ReadDirSmallPagesAndTheEnd) {
  ASSERT_OK(Create(kRootIno, "a"));
  proto::ReadDirReply r1;
  ASSERT_OK(store_->names().ReadDir(kRoot, kRootIno, 0, 1, &r1));
  ASSERT_EQ(r1.entries_size(), 1);
  EXPECT_EQ(r1.entries(0).name(), ".");
  EXPECT_FALSE(r1.eof());
  proto::ReadDirReply r2;
  ASSERT_OK(store_->names().ReadDir(kRoot, kRootIno, 1, 1, &r2));
  ASSERT_EQ(r2.entries_size(), 1);
  EXPECT_EQ(r2.entries(0).name(), "..");
  proto::ReadDirReply r3;
  ASSERT_OK(store_->names().ReadDir(kRoot, kRootIno, 2, 1, &r3));
  ASSERT_EQ(r3.entries_size(), 1);
  EXPECT_EQ(r3.entries(0).name(), "a");
  proto::ReadDirReply r4;
  ASSERT_OK(store_->names().ReadDir(kRoot, kRootIno, r3.entries(0).cookie(), 1, &r4));
  EXPECT_EQ(r4.entries_size(), 0);
  EXPECT_TRUE(r4.eof());
}

TEST_F(MetaStoreTest, ReadDirNeedsReadPermission) {
  ASSERT_OK_AND_ASSIGN(proto::Attr d, Mkdir(kRootIno, "private", 0700));
  proto::ReadDirReply reply;
  EXPECT_EQ(Err(store_->names().ReadDir(kAlice, d.ino(), 0, 10, &reply)), EACCES);
  EXPECT_EQ(Err(store_->names().Lookup(kAlice, d.ino(), "x")), EACCES);
}

// --- xattrs ----------------------------------------------------------------------------

TEST_F(MetaStoreTest, XattrSetGetListRemove) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(kRootIno, "f", 0666));
  ASSERT_OK_AND_ASSIGN(proto::Attr other, Create(kRootIno, "other"));
  ASSERT_OK(store_->inodes().SetXattr(kRoot, other.ino(), "user.elsewhere", "x", 0));

  ASSERT_OK(store_->inodes().SetXattr(kRoot, f.ino(), "user.a", "1", 0));
  ASSERT_OK_AND_ASSIGN(std::string v, store_->inodes().GetXattr(kRoot, f.ino(), "user.a"));
  EXPECT_EQ(v, "1");
  EXPECT_EQ(Err(store_->inodes().SetXattr(kRoot, f.ino(), "user.a", "2", XATTR_CREATE)), EEXIST);
  ASSERT_OK_AND_ASSIGN(v, store_->inodes().GetXattr(kRoot, f.ino(), "user.a"));
  EXPECT_EQ(v, "1");
  EXPECT_EQ(Err(store_->inodes().SetXattr(kRoot, f.ino(), "user.b", "2", XATTR_REPLACE)), ENODATA);
  EXPECT_EQ(Err(store_->inodes().GetXattr(kRoot, f.ino(), "user.b")), ENODATA);
  ASSERT_OK(store_->inodes().SetXattr(kRoot, f.ino(), "user.a", "22", XATTR_REPLACE));
  ASSERT_OK_AND_ASSIGN(v, store_->inodes().GetXattr(kRoot, f.ino(), "user.a"));
  EXPECT_EQ(v, "22");
  ASSERT_OK(
      store_->inodes().SetXattr(kRoot, f.ino(), "user.b", std::string("\0bin", 4), XATTR_CREATE));
  ASSERT_OK_AND_ASSIGN(v, store_->inodes().GetXattr(kRoot, f.ino(), "user.b"));
  EXPECT_EQ(v, std::string("\0bin", 4));
  ASSERT_OK(store_->inodes().SetXattr(kRoot, f.ino(), "trusted.t", "", 0));

  ASSERT_OK_AND_ASSIGN(std::vector<std::string> names, store_->inodes().ListXattr(kRoot, f.ino()));
  EXPECT_EQ(names, (std::vector<std::string>{"trusted.t", "user.a", "user.b"}));

  ASSERT_OK(store_->inodes().RemoveXattr(kRoot, f.ino(), "user.a"));
  EXPECT_EQ(Err(store_->inodes().GetXattr(kRoot, f.ino(), "user.a")), ENODATA);
  EXPECT_EQ(Err(store_->inodes().RemoveXattr(kRoot, f.ino(), "user.a")), ENODATA);
  ASSERT_OK_AND_ASSIGN(names, store_->inodes().ListXattr(kRoot, f.ino()));
  EXPECT_EQ(names, (std::vector<std::string>{"trusted.t", "user.b"}));
  ASSERT_OK_AND_ASSIGN(names, store_->inodes().ListXattr(kRoot, other.ino()));
  EXPECT_EQ(names, std::vector<std::string>{"user.elsewhere"});
}

TEST_F(MetaStoreTest, XattrValidation) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(kRootIno, "f"));
  EXPECT_EQ(Err(store_->inodes().SetXattr(kRoot, f.ino(), "system.posix_acl_access", "x", 0)),
            EOPNOTSUPP);
  EXPECT_EQ(Err(store_->inodes().GetXattr(kRoot, f.ino(), "system.posix_acl_access")), EOPNOTSUPP);
  EXPECT_EQ(Err(store_->inodes().SetXattr(kRoot, f.ino(), "foo", "x", 0)), EOPNOTSUPP);
  EXPECT_EQ(Err(store_->inodes().SetXattr(kRoot, f.ino(), "user.big",
                                          std::string(kXattrValueMax + 1, 'v'), 0)),
            E2BIG);
  ASSERT_OK(
      store_->inodes().SetXattr(kRoot, f.ino(), "user.max", std::string(kXattrValueMax, 'v'), 0));
  EXPECT_EQ(Err(store_->inodes().SetXattr(kRoot, f.ino(), "user.x", "x", 4)), EINVAL);
  EXPECT_EQ(Err(store_->inodes().SetXattr(kRoot, 999, "user.x", "x", 0)), ENOENT);
}

TEST_F(MetaStoreTest, XattrPermissionsForOrdinaryUsers) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(kRootIno, "f", 0644));  // root's
  ASSERT_OK(store_->inodes().SetXattr(kRoot, f.ino(), "trusted.t", "secret", 0));
  ASSERT_OK(store_->inodes().SetXattr(kRoot, f.ino(), "user.u", "public", 0));
  ASSERT_OK_AND_ASSIGN(std::string v, store_->inodes().GetXattr(kAlice, f.ino(), "user.u"));
  EXPECT_EQ(v, "public");
  EXPECT_EQ(Err(store_->inodes().SetXattr(kAlice, f.ino(), "user.u", "mine", 0)), EACCES);
  EXPECT_EQ(Err(store_->inodes().RemoveXattr(kAlice, f.ino(), "user.u")), EACCES);
  EXPECT_EQ(Err(store_->inodes().SetXattr(kAlice, f.ino(), "trusted.t", "x", 0)), EPERM);
  EXPECT_EQ(Err(store_->inodes().GetXattr(kAlice, f.ino(), "trusted.t")), ENODATA);
  EXPECT_EQ(Err(store_->inodes().SetXattr(kAlice, f.ino(), "security.s", "x", 0)), EPERM);
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> names, store_->inodes().ListXattr(kAlice, f.ino()));
  EXPECT_EQ(names, std::vector<std::string>{"user.u"});
}

// --- ownership and permissions ----------------------------------------------------

TEST_F(MetaStoreTest, SetgidDirectoryPassesItsGroupOn) {
  ASSERT_OK_AND_ASSIGN(proto::Attr g, Mkdir(kRootIno, "g", S_ISGID | 0777));
  proto::SetAttrRequest chgrp;
  chgrp.set_ino(g.ino());
  chgrp.set_valid(V::GID);
  chgrp.set_gid(500);
  ASSERT_OK(store_->inodes().SetAttr(kRoot, chgrp));
  ASSERT_OK_AND_ASSIGN(proto::Attr open, Mkdir(kRootIno, "open", 0777));

  ASSERT_OK_AND_ASSIGN(proto::Attr sub, Mkdir(g.ino(), "sub", 0755, kAlice));
  EXPECT_EQ(sub.uid(), kAlice.uid);
  EXPECT_EQ(sub.gid(), 500u);
  EXPECT_EQ(sub.mode(), S_IFDIR | S_ISGID | 0755u);
  ASSERT_OK_AND_ASSIGN(proto::Attr file, Create(g.ino(), "f", 0644, kAlice));
  EXPECT_EQ(file.gid(), 500u);
  EXPECT_EQ(file.mode(), S_IFREG | 0644u);  // files do not inherit the bit
  // Alice is not in group 500: she cannot create a setgid file there.
  ASSERT_OK_AND_ASSIGN(proto::Attr sg, Create(g.ino(), "sg", S_ISGID | 0755, kAlice));
  EXPECT_EQ(sg.mode(), S_IFREG | 0755u);
  // The inheritance goes on below the subdirectory.
  ASSERT_OK_AND_ASSIGN(proto::Attr deeper, Mkdir(sub.ino(), "deeper", 0700, kAlice));
  EXPECT_EQ(deeper.gid(), 500u);
  EXPECT_EQ(deeper.mode(), S_IFDIR | S_ISGID | 0700u);
  // Without setgid the creator's group is used.
  ASSERT_OK_AND_ASSIGN(proto::Attr plain, Mkdir(open.ino(), "plain", 0755, kAlice));
  EXPECT_EQ(plain.gid(), kAlice.gid);
  EXPECT_EQ(plain.mode(), S_IFDIR | 0755u);
}

TEST_F(MetaStoreTest, OrdinaryUserCannotCreateInARootOwnedDirectory) {
  EXPECT_EQ(Err(Create(kRootIno, "f", 0644, kAlice)), EACCES);
  EXPECT_EQ(Err(Mkdir(kRootIno, "d", 0755, kAlice)), EACCES);
  EXPECT_EQ(Err(store_->names().Symlink(kAlice, kRootIno, "l", "t")), EACCES);
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(kRootIno, "rootfile", 0666));
  EXPECT_EQ(Err(store_->names().Link(kAlice, f.ino(), kRootIno, "l")), EACCES);
  EXPECT_EQ(Err(store_->names().Remove(kAlice, kRootIno, "rootfile", false)), EACCES);
  EXPECT_EQ(Err(store_->names().Rename(kAlice, kRootIno, "rootfile", kRootIno, "x", 0)), EACCES);
  EXPECT_EQ(store_->store().Space().inodes, 2u);
}

TEST_F(MetaStoreTest, ChmodOfSomeoneElsesFileIsEperm) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(kRootIno, "f", 0666));
  EXPECT_EQ(Err(Chmod(f.ino(), 0777, kAlice)), EPERM);
  ASSERT_OK_AND_ASSIGN(proto::Attr unchanged, store_->inodes().GetAttr(f.ino()));
  EXPECT_EQ(unchanged.mode(), S_IFREG | 0666u);

  ASSERT_OK_AND_ASSIGN(proto::Attr home, Mkdir(kRootIno, "home", 0777));
  ASSERT_OK_AND_ASSIGN(proto::Attr mine, Create(home.ino(), "mine", 0644, kAlice));
  ASSERT_OK_AND_ASSIGN(proto::Attr changed, Chmod(mine.ino(), 0600, kAlice));
  EXPECT_EQ(changed.mode(), S_IFREG | 0600u);
  EXPECT_EQ(Err(Chmod(mine.ino(), 0666, kBob)), EPERM);
  // The owner outside the file's group cannot set setgid; the bit is dropped.
  proto::SetAttrRequest chgrp;
  chgrp.set_ino(mine.ino());
  chgrp.set_valid(V::GID);
  chgrp.set_gid(777);
  ASSERT_OK(store_->inodes().SetAttr(kRoot, chgrp));
  ASSERT_OK_AND_ASSIGN(changed, Chmod(mine.ino(), S_ISGID | 0755, kAlice));
  EXPECT_EQ(changed.mode(), S_IFREG | 0755u);
}

TEST_F(MetaStoreTest, ChownRules) {
  ASSERT_OK_AND_ASSIGN(proto::Attr home, Mkdir(kRootIno, "home", 0777));
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(home.ino(), "f", S_ISUID | 0755, kAlice));
  proto::SetAttrRequest req;
  req.set_ino(f.ino());
  req.set_valid(V::UID);
  req.set_uid(kBob.uid);
  EXPECT_EQ(Err(store_->inodes().SetAttr(kAlice, req)), EPERM);
  ASSERT_OK_AND_ASSIGN(proto::Attr a, store_->inodes().SetAttr(kRoot, req));
  EXPECT_EQ(a.uid(), kBob.uid);
  EXPECT_EQ(a.mode(), S_IFREG | 0755u);  // set-user-ID dropped
}

TEST_F(MetaStoreTest, AnyoneWhoMayWriteMayDropSetIdBits) {
  // What FUSE's kernel sends when a non-owner writes a set-id file.
  ASSERT_OK_AND_ASSIGN(proto::Attr home, Mkdir(kRootIno, "home", 0777));
  ASSERT_OK_AND_ASSIGN(proto::Attr open,
                       Create(home.ino(), "open", S_ISUID | S_ISGID | 0777, kAlice));
  ASSERT_OK_AND_ASSIGN(proto::Attr a, Chmod(open.ino(), 0777, kBob));
  EXPECT_EQ(a.mode(), S_IFREG | 0777u);
  // Not a drop of set-id bits: the owner's.
  EXPECT_EQ(Err(Chmod(open.ino(), 0755, kBob)), EPERM);
  ASSERT_OK(Chmod(open.ino(), S_ISUID | 0777, kAlice));
  EXPECT_EQ(Err(Chmod(open.ino(), S_ISUID | S_ISGID | 0777, kBob)), EPERM);  // adds one
  EXPECT_EQ(Err(Chmod(open.ino(), S_ISUID | 0777, kBob)), EPERM);            // changes none
  // Without write permission: not even that.
  ASSERT_OK_AND_ASSIGN(proto::Attr closed, Create(home.ino(), "closed", S_ISUID | 0755, kAlice));
  EXPECT_EQ(Err(Chmod(closed.ino(), 0755, kBob)), EPERM);
  proto::SetAttrRequest kill;
  kill.set_ino(closed.ino());
  kill.set_valid(V::MODE);
  kill.set_mode(0755);
  ASSERT_OK_AND_ASSIGN(a, store_->inodes().SetAttr(kBob, kill, /*opened=*/true));
  EXPECT_EQ(a.mode(), S_IFREG | 0755u);
}

TEST_F(MetaStoreTest, SetIdKillIsOnlyAClearOfSetIdBits) {
  EXPECT_TRUE(IsSetIdKill(S_ISUID | 0777, 0777));
  EXPECT_TRUE(IsSetIdKill(S_ISUID | S_ISGID | 0777, S_ISGID | 0777));
  EXPECT_TRUE(IsSetIdKill(S_IFREG | S_ISGID | 0750, 0750));
  EXPECT_FALSE(IsSetIdKill(0777, 0777));
  EXPECT_FALSE(IsSetIdKill(S_ISUID | 0777, 0755));
  EXPECT_FALSE(IsSetIdKill(S_ISUID | 0755, S_ISGID | 0755));
  EXPECT_FALSE(IsSetIdKill(S_ISVTX | S_ISUID | 0777, 0777));
}

TEST_F(MetaStoreTest, TruncateThroughAnOpenHandleNeedsNoWritePermission) {
  ASSERT_OK_AND_ASSIGN(proto::Attr home, Mkdir(kRootIno, "home", 0777));
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(home.ino(), "f", 0, kAlice));
  EXPECT_EQ(Err(Truncate(f.ino(), 10, kAlice)), EACCES);
  EXPECT_EQ(Err(store_->inodes().CheckTruncate(kAlice, f.ino(), 10)), EACCES);
  ASSERT_OK(store_->inodes().CheckTruncate(kAlice, f.ino(), 10, /*opened=*/true).status());
  proto::SetAttrRequest req;
  req.set_ino(f.ino());
  req.set_valid(V::SIZE);
  req.set_size(10);
  ASSERT_OK_AND_ASSIGN(proto::Attr a, store_->inodes().SetAttr(kAlice, req, /*opened=*/true));
  EXPECT_EQ(a.size(), 10u);
}

TEST_F(MetaStoreTest, TheOpenOfACreateNeedsNoPermissionOnTheNewFile) {
  ASSERT_OK_AND_ASSIGN(proto::Attr home, Mkdir(kRootIno, "home", 0777));
  bool created = false;
  ASSERT_OK_AND_ASSIGN(proto::Attr f, store_->names().MkNod(kAlice, home.ino(), "f", S_IFREG, 0, 0,
                                                            false, &created));
  EXPECT_TRUE(created);
  EXPECT_EQ(Err(store_->inodes().CheckOpen(kAlice, f.ino(), O_RDWR)), EACCES);
  ASSERT_OK(store_->inodes().CheckOpen(kAlice, f.ino(), O_RDWR, /*created=*/true).status());
  // Someone else's file: the claim is not honoured.
  EXPECT_EQ(Err(store_->inodes().CheckOpen(kBob, f.ino(), O_RDWR, /*created=*/true)), EACCES);
  // A second open(O_CREAT) finds the name: nothing created.
  ASSERT_OK(
      store_->names().MkNod(kAlice, home.ino(), "f", S_IFREG, 0, 0, false, &created).status());
  EXPECT_FALSE(created);
}

TEST_F(MetaStoreTest, StickyDirectoryProtectsOtherUsersFiles) {
  ASSERT_OK_AND_ASSIGN(proto::Attr tmp, Mkdir(kRootIno, "tmp", S_ISVTX | 0777));
  ASSERT_OK_AND_ASSIGN(proto::Attr a, Create(tmp.ino(), "alice", 0666, kAlice));
  ASSERT_OK(Create(tmp.ino(), "bob", 0666, kBob));
  EXPECT_EQ(Err(store_->names().Remove(kBob, tmp.ino(), "alice", false)), EPERM);
  EXPECT_EQ(Err(store_->names().Rename(kBob, tmp.ino(), "alice", tmp.ino(), "stolen", 0)), EPERM);
  // Nor may Bob replace Alice's file by renaming over it.
  EXPECT_EQ(Err(store_->names().Rename(kBob, tmp.ino(), "bob", tmp.ino(), "alice", 0)), EPERM);
  EXPECT_EQ(InoOf(tmp.ino(), "alice"), a.ino());
  EXPECT_EQ(Nlink(a.ino()), 1);
  // The owner may, and so may root.
  EXPECT_EQ(Err(store_->names().Remove(kAlice, tmp.ino(), "alice", false)), 0);
  EXPECT_EQ(Err(store_->names().Remove(kRoot, tmp.ino(), "bob", false)), 0);
}

TEST_F(MetaStoreTest, CheckOpen) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(kRootIno, "f", 0640));
  ASSERT_OK_AND_ASSIGN(proto::Attr d, Mkdir(kRootIno, "d"));
  EXPECT_EQ(Err(store_->inodes().CheckOpen(kRoot, f.ino(), O_RDWR)), 0);
  EXPECT_EQ(Err(store_->inodes().CheckOpen(kAlice, f.ino(), O_RDONLY)), EACCES);
  EXPECT_EQ(Err(store_->inodes().CheckOpen(User(1000, 0), f.ino(), O_RDONLY)), 0);  // group
  EXPECT_EQ(Err(store_->inodes().CheckOpen(User(1000, 0), f.ino(), O_WRONLY)), EACCES);
  EXPECT_EQ(Err(store_->inodes().CheckOpen(User(1000, 0), f.ino(), O_RDONLY | O_TRUNC)), EACCES);
  EXPECT_EQ(Err(store_->inodes().CheckOpen(kRoot, d.ino(), O_RDONLY)), 0);
  EXPECT_EQ(Err(store_->inodes().CheckOpen(kRoot, d.ino(), O_WRONLY)), EISDIR);
  EXPECT_EQ(Err(store_->inodes().CheckOpen(kRoot, 999, O_RDONLY)), ENOENT);
}

// --- timestamps -------------------------------------------------------------------------

TEST_F(MetaStoreTest, CreateAndRemoveUpdateTheParentsTimes) {
  const int64_t t0 = start_ns_;
  clock_.Advance(absl::Seconds(1));
  const int64_t t1 = clock_.NowNanos();
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(kRootIno, "f"));
  EXPECT_EQ(f.atime_ns(), t1);
  EXPECT_EQ(f.mtime_ns(), t1);
  EXPECT_EQ(f.ctime_ns(), t1);
  ASSERT_OK_AND_ASSIGN(proto::Attr root, store_->inodes().GetAttr(kRootIno));
  EXPECT_EQ(root.mtime_ns(), t1);
  EXPECT_EQ(root.ctime_ns(), t1);
  EXPECT_EQ(root.atime_ns(), t0);

  clock_.Advance(absl::Seconds(1));
  const int64_t t2 = clock_.NowNanos();
  ASSERT_OK(store_->names().Link(kRoot, f.ino(), kRootIno, "g"));
  ASSERT_OK_AND_ASSIGN(proto::Attr linked, store_->inodes().GetAttr(f.ino()));
  EXPECT_EQ(linked.ctime_ns(), t2);
  EXPECT_EQ(linked.mtime_ns(), t1);
  ASSERT_OK_AND_ASSIGN(root, store_->inodes().GetAttr(kRootIno));
  EXPECT_EQ(root.mtime_ns(), t2);

  clock_.Advance(absl::Seconds(1));
  const int64_t t3 = clock_.NowNanos();
  ASSERT_OK(store_->names().Remove(kRoot, kRootIno, "g", false));
  ASSERT_OK_AND_ASSIGN(proto::Attr after, store_->inodes().GetAttr(f.ino()));
  EXPECT_EQ(after.ctime_ns(), t3);
  EXPECT_EQ(after.mtime_ns(), t1);
  ASSERT_OK_AND_ASSIGN(root, store_->inodes().GetAttr(kRootIno));
  EXPECT_EQ(root.mtime_ns(), t3);
  EXPECT_EQ(root.ctime_ns(), t3);
}

TEST_F(MetaStoreTest, ChmodChangesOnlyCtime) {
  clock_.Advance(absl::Seconds(1));
  const int64_t t1 = clock_.NowNanos();
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(kRootIno, "f"));
  clock_.Advance(absl::Seconds(1));
  const int64_t t2 = clock_.NowNanos();
  ASSERT_OK_AND_ASSIGN(proto::Attr a, Chmod(f.ino(), 0600));
  EXPECT_EQ(a.mode(), S_IFREG | 0600u);
  EXPECT_EQ(a.ctime_ns(), t2);
  EXPECT_EQ(a.mtime_ns(), t1);
  EXPECT_EQ(a.atime_ns(), t1);
  ASSERT_OK_AND_ASSIGN(proto::Attr root, store_->inodes().GetAttr(kRootIno));
  EXPECT_EQ(root.mtime_ns(), t1);  // the directory is not touched
  EXPECT_EQ(root.ctime_ns(), t1);
}

TEST_F(MetaStoreTest, WritesAndRenamesUpdateTimes) {
  ASSERT_OK_AND_ASSIGN(proto::Attr d, Mkdir(kRootIno, "d"));
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(kRootIno, "f"));
  clock_.Advance(absl::Seconds(1));
  const int64_t t1 = clock_.NowNanos();
  ASSERT_OK_AND_ASSIGN(proto::Attr w, Write(f.ino(), 0, 10));
  EXPECT_EQ(w.mtime_ns(), t1);
  EXPECT_EQ(w.ctime_ns(), t1);
  EXPECT_EQ(w.atime_ns(), start_ns_);
  clock_.Advance(absl::Seconds(1));
  const int64_t t2 = clock_.NowNanos();
  ASSERT_OK(store_->names().Rename(kRoot, kRootIno, "f", d.ino(), "f", 0));
  ASSERT_OK_AND_ASSIGN(proto::Attr moved, store_->inodes().GetAttr(f.ino()));
  EXPECT_EQ(moved.ctime_ns(), t2);
  EXPECT_EQ(moved.mtime_ns(), t1);
  ASSERT_OK_AND_ASSIGN(proto::Attr root, store_->inodes().GetAttr(kRootIno));
  EXPECT_EQ(root.mtime_ns(), t2);
  EXPECT_EQ(root.ctime_ns(), t2);
  ASSERT_OK_AND_ASSIGN(proto::Attr dd, store_->inodes().GetAttr(d.ino()));
  EXPECT_EQ(dd.mtime_ns(), t2);
  EXPECT_EQ(dd.ctime_ns(), t2);
}

TEST_F(MetaStoreTest, ExplicitTimesNeedOwnershipNowNeedsWriteAccess) {
  ASSERT_OK_AND_ASSIGN(proto::Attr home, Mkdir(kRootIno, "home", 0777));
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(home.ino(), "f", 0666, kAlice));
  proto::SetAttrRequest req;
  req.set_ino(f.ino());
  req.set_valid(V::MTIME);
  req.set_mtime_ns(12345);
  EXPECT_EQ(Err(store_->inodes().SetAttr(kBob, req)), EPERM);
  ASSERT_OK_AND_ASSIGN(proto::Attr a, store_->inodes().SetAttr(kAlice, req));
  EXPECT_EQ(a.mtime_ns(), 12345);
  clock_.Advance(absl::Seconds(5));
  req.set_valid(V::MTIME_NOW | V::ATIME_NOW);
  ASSERT_OK_AND_ASSIGN(a, store_->inodes().SetAttr(kBob, req));  // 0666: Bob may write
  EXPECT_EQ(a.mtime_ns(), clock_.NowNanos());
  EXPECT_EQ(a.atime_ns(), clock_.NowNanos());
}

// --- space ---------------------------------------------------------------------------------

TEST_F(MetaStoreTest, WritingTheSameBlocksTwiceAllocatesThemOnce) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(kRootIno, "f"));
  ASSERT_OK_AND_ASSIGN(Reservation reserved, store_->space().Reserve(f.ino(), 0, 2 * kBlockSize));
  EXPECT_EQ(reserved.blocks, 2u);
  EXPECT_EQ(store_->store().Space().reserved_bytes, 2 * kBlockSize);
  ASSERT_OK_AND_ASSIGN(proto::Attr a,
                       store_->space().CommitWrite(f.ino(), 0, 2 * kBlockSize, true, reserved));
  EXPECT_EQ(a.size(), 2 * kBlockSize);
  EXPECT_EQ(a.blocks(), 2 * kBlockSize / 512);
  EXPECT_EQ(store_->store().Space().used_bytes, 2 * kBlockSize);
  EXPECT_EQ(store_->store().Space().reserved_bytes, 0u);

  // The same blocks again (and a partial block inside them) need nothing.
  ASSERT_OK_AND_ASSIGN(reserved, store_->space().Reserve(f.ino(), 100, kBlockSize));
  EXPECT_EQ(reserved.blocks, 0u);
  ASSERT_OK_AND_ASSIGN(a, store_->space().CommitWrite(f.ino(), 100, kBlockSize, true, reserved));
  EXPECT_EQ(a.size(), 2 * kBlockSize);
  EXPECT_EQ(a.blocks(), 2 * kBlockSize / 512);
  EXPECT_EQ(store_->store().Space().used_bytes, 2 * kBlockSize);

  // A small write past the end touches one new block.
  ASSERT_OK_AND_ASSIGN(a, Write(f.ino(), 2 * kBlockSize + 10, 1));
  EXPECT_EQ(a.size(), 2 * kBlockSize + 11);
  EXPECT_EQ(store_->store().Space().used_bytes, 3 * kBlockSize);
  // A write across a chunk boundary: blocks 15 and 16.
  ASSERT_OK_AND_ASSIGN(a, Write(f.ino(), kChunk - 10, 20));
  EXPECT_EQ(a.size(), kChunk + 10);
  EXPECT_EQ(a.blocks(), 5 * kBlockSize / 512);
  EXPECT_EQ(store_->store().Space().used_bytes, 5 * kBlockSize);
}

TEST_F(MetaStoreTest, CommitWithoutExtendKeepsTheSize) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(kRootIno, "f"));
  ASSERT_OK_AND_ASSIGN(Reservation reserved, store_->space().Reserve(f.ino(), 0, 3 * kBlockSize));
  ASSERT_OK_AND_ASSIGN(proto::Attr a,
                       store_->space().CommitWrite(f.ino(), 0, 3 * kBlockSize, false, reserved));
  EXPECT_EQ(a.size(), 0u);
  EXPECT_EQ(a.blocks(), 3 * kBlockSize / 512);
}

TEST_F(MetaStoreTest, ReservationsPastCapacityAreEnospc) {
  constexpr uint64_t kCapBlocks = kCapacity / kBlockSize;  // 64
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(kRootIno, "f"));
  ASSERT_OK_AND_ASSIGN(proto::Attr g, Create(kRootIno, "g"));
  ASSERT_OK(Write(f.ino(), 0, 2 * kBlockSize));
  // Room for exactly the rest.
  ASSERT_OK_AND_ASSIGN(Reservation held,
                       store_->space().Reserve(g.ino(), 0, (kCapBlocks - 2) * kBlockSize));
  EXPECT_EQ(held.blocks, kCapBlocks - 2);
  // Reservations count: nothing more fits.
  EXPECT_EQ(Err(store_->space().Reserve(f.ino(), 2 * kBlockSize, 1)), ENOSPC);
  // Rewriting allocated blocks needs no space.
  ASSERT_OK_AND_ASSIGN(Reservation none, store_->space().Reserve(f.ino(), 0, 2 * kBlockSize));
  EXPECT_EQ(none.blocks, 0u);
  store_->space().Unreserve(held);
  EXPECT_EQ(store_->store().Space().reserved_bytes, 0u);
  EXPECT_EQ(Err(store_->space().Reserve(g.ino(), 0, (kCapBlocks - 1) * kBlockSize)), ENOSPC);
  EXPECT_EQ(store_->store().Space().reserved_bytes, 0u);  // a refused reservation holds nothing
  ASSERT_OK(Write(g.ino(), 0, (kCapBlocks - 2) * kBlockSize));
  SpaceInfo space = store_->store().Space();
  EXPECT_EQ(space.used_bytes, kCapacity);
  EXPECT_EQ(space.reserved_bytes, 0u);
  EXPECT_EQ(Err(store_->space().Reserve(f.ino(), 2 * kBlockSize, 1)), ENOSPC);
  // Full, but overwriting in place still works.
  ASSERT_OK(Write(g.ino(), kBlockSize, 100));
  EXPECT_EQ(store_->store().Space().used_bytes, kCapacity);
}

TEST_F(MetaStoreTest, RemovalsOfANameThatWasReplacedAreStale) {
  // The caller's kernel cached "d" as one directory; another node replaced
  // it. Removing by name would remove the new one while the caller marks
  // the old one dead: ESTALE instead (the kernel looks up and retries).
  ASSERT_OK_AND_ASSIGN(proto::Attr old_d, Mkdir(kRootIno, "d"));
  ASSERT_OK(store_->names().Remove(kRoot, kRootIno, "d", true).status());
  ASSERT_OK_AND_ASSIGN(proto::Attr new_d, Mkdir(kRootIno, "d"));
  EXPECT_EQ(Err(store_->names().Remove(kRoot, kRootIno, "d", true, old_d.ino())), ESTALE);
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(kRootIno, "f"));
  EXPECT_EQ(
      Err(store_->names().Rename(kRoot, kRootIno, "f", kRootIno, "d", 0, f.ino(), old_d.ino())),
      ESTALE);
  EXPECT_EQ(Err(store_->names().Rename(kRoot, kRootIno, "f", kRootIno, "g", 0, old_d.ino(), 0)),
            ESTALE);
  // The right inodes (or none known): as before.
  ASSERT_OK(store_->names().Rename(kRoot, kRootIno, "f", kRootIno, "g", 0, f.ino(), 0).status());
  ASSERT_OK(store_->names().Remove(kRoot, kRootIno, "d", true, new_d.ino()).status());
  ASSERT_OK(store_->names().Remove(kRoot, kRootIno, "g", false, 0).status());
}

// --- grants and reservations across a crash (issue: the ledger survives crashes) ----------------

class LedgerCrashTest : public MetaStoreTest {
 protected:
  void SetUp() override {
    capacity_ = 1ull << 30;  // room for grants under the grant policy
    MetaStoreTest::SetUp();
    proto::SessionRecord rec;
    ASSERT_OK(store_->sessions().PutSession(kA, rec));
    ASSERT_OK(store_->sessions().PutSession(kB, rec));
  }
  static constexpr uint64_t kA = 101, kB = 102;
  uint64_t GrantBlocks(uint64_t client, uint64_t wanted, uint64_t back = 0) {
    uint64_t added = 0;
    auto g = store_->space().Grant(client, wanted, back, &added);
    EXPECT_TRUE(g.ok()) << g.status();
    return g.ok() ? *g : 0;
  }
  // The sessions' grants and the granted total agree, and the ledger holds.
  void ExpectConsistent(uint64_t want_granted_blocks) {
    const SpaceInfo s = store_->store().Space();
    EXPECT_TRUE(s.ledger_ok);
    EXPECT_EQ(s.granted_bytes, want_granted_blocks * kBlockSize);
    EXPECT_EQ(s.granted_bytes,
              (store_->space().GrantOf(kA) + store_->space().GrantOf(kB)) * kBlockSize);
    EXPECT_LE(s.used_bytes + s.granted_bytes + s.reserved_bytes, s.capacity_bytes);
  }
};

TEST_F(LedgerCrashTest, ACrashBetweenReserveAndCommitLeavesEveryGrantWhole) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(kRootIno, "f"));
  EXPECT_EQ(GrantBlocks(kA, 20), 20u);
  EXPECT_EQ(GrantBlocks(kB, 20), 20u);
  // A's write sits between reserve and commit...
  ASSERT_OK_AND_ASSIGN(Reservation r, store_->space().Reserve(f.ino(), 0, 4 * kBlockSize, kA));
  EXPECT_EQ(r.from_grant, 4u);
  // ... while another change commits (it writes the counters) ...
  ASSERT_OK(Create(kRootIno, "g").status());
  ASSERT_OK(Write(f.ino(), 10 * kBlockSize, kBlockSize).status());
  // ... and the server dies: the write never committed, A still holds its
  // whole grant (its mount resends the write from its cache).
  Reopen();
  EXPECT_EQ(store_->space().GrantOf(kA), 20u);
  EXPECT_EQ(store_->space().GrantOf(kB), 20u);
  ExpectConsistent(40);
  // Both sessions end: nothing granted, no wrap-around.
  ASSERT_OK(store_->sessions().EndSession(kA));
  ASSERT_OK(store_->sessions().EndSession(kB));
  ExpectConsistent(0);
  Reopen();
  ExpectConsistent(0);
  // And the space is all there again.
  ASSERT_OK(store_->sessions().PutSession(kA, proto::SessionRecord()));
  EXPECT_EQ(GrantBlocks(kA, 8), 8u);
}

TEST_F(LedgerCrashTest, AGivenUpWriteGivesItsGrantBack) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(kRootIno, "f"));
  GrantBlocks(kA, 20);
  ASSERT_OK_AND_ASSIGN(Reservation r, store_->space().Reserve(f.ino(), 0, 4 * kBlockSize, kA));
  store_->space().Unreserve(r);  // the chunk write failed
  EXPECT_EQ(store_->space().GrantOf(kA), 20u);
  ExpectConsistent(20);
  // A committed one debits the grant, in the same batch as the usage.
  ASSERT_OK_AND_ASSIGN(r, store_->space().Reserve(f.ino(), 0, 4 * kBlockSize, kA));
  ASSERT_OK(store_->space().CommitWrite(f.ino(), 0, 4 * kBlockSize, true, r).status());
  EXPECT_EQ(store_->space().GrantOf(kA), 16u);
  EXPECT_EQ(store_->store().Space().used_bytes, 4 * kBlockSize);
  Reopen();
  EXPECT_EQ(store_->space().GrantOf(kA), 16u);
  ExpectConsistent(16);
}

TEST_F(LedgerCrashTest, BlocksHeldByAWriteInProgressAreNotGivenBackOrReleased) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(kRootIno, "f"));
  GrantBlocks(kA, 20);
  ASSERT_OK_AND_ASSIGN(Reservation r, store_->space().Reserve(f.ino(), 0, 4 * kBlockSize, kA));
  // A give-back of everything keeps what the write holds.
  EXPECT_EQ(GrantBlocks(kA, 0, 100), 4u);
  ExpectConsistent(4);
  // The session ends meanwhile: those blocks stay granted until the write
  // commits, then the grant is gone.
  ASSERT_OK(store_->sessions().EndSession(kA));
  ExpectConsistent(4);
  ASSERT_OK(store_->space().CommitWrite(f.ino(), 0, 4 * kBlockSize, true, r).status());
  ExpectConsistent(0);
  EXPECT_EQ(store_->store().Space().used_bytes, 4 * kBlockSize);
  Reopen();
  ExpectConsistent(0);
}

TEST_F(LedgerCrashTest, AGrantForASessionThatEndedIsRefused) {
  // The session ended while a Grant was on its way: nothing is granted to
  // nobody (its space would stay taken until a restart).
  ASSERT_OK(store_->sessions().EndSession(kA));
  uint64_t added = 0;
  auto g = store_->space().Grant(kA, 20, 0, &added);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kResourceExhausted) << g.status();
  EXPECT_EQ(added, 0u);
  ExpectConsistent(0);
  // Giving back needs no session.
  ASSERT_OK(store_->space().Grant(kA, 0, 5, &added).status());
}

TEST_F(LedgerCrashTest, TwoWritesOfOneSessionCannotBothSpendTheSameGrant) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(kRootIno, "f"));
  GrantBlocks(kA, 6);
  ASSERT_OK_AND_ASSIGN(Reservation r1, store_->space().Reserve(f.ino(), 0, 4 * kBlockSize, kA));
  ASSERT_OK_AND_ASSIGN(Reservation r2,
                       store_->space().Reserve(f.ino(), 8 * kBlockSize, 4 * kBlockSize, kA));
  EXPECT_EQ(r1.from_grant, 4u);
  EXPECT_EQ(r2.from_grant, 2u);  // the rest from free space
  EXPECT_EQ(store_->store().Space().reserved_bytes, 2 * kBlockSize);
  ASSERT_OK(store_->space().CommitWrite(f.ino(), 0, 4 * kBlockSize, true, r1).status());
  ASSERT_OK(
      store_->space().CommitWrite(f.ino(), 8 * kBlockSize, 4 * kBlockSize, true, r2).status());
  EXPECT_EQ(store_->space().GrantOf(kA), 0u);
  ExpectConsistent(0);
  EXPECT_EQ(store_->store().Space().used_bytes, 8 * kBlockSize);
  EXPECT_EQ(store_->store().Space().reserved_bytes, 0u);
}

TEST_F(MetaStoreTest, TruncateFreesBlocks) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(kRootIno, "f"));
  // 3 blocks in chunk 0, 2 in chunk 1, 1 in chunk 3.
  ASSERT_OK(Write(f.ino(), kChunk - 3 * kBlockSize, 5 * kBlockSize));
  ASSERT_OK(Write(f.ino(), 3 * kChunk, 10));
  EXPECT_EQ(store_->store().Space().used_bytes, 6 * kBlockSize);

  // Into the middle of a block: the block holding the new end stays.
  ASSERT_OK_AND_ASSIGN(proto::Attr a, Truncate(f.ino(), kChunk + 100));
  EXPECT_EQ(a.size(), kChunk + 100);
  EXPECT_EQ(a.blocks(), 4 * kBlockSize / 512);
  EXPECT_EQ(store_->store().Space().used_bytes, 4 * kBlockSize);

  // To a chunk boundary.
  ASSERT_OK_AND_ASSIGN(a, Truncate(f.ino(), kChunk));
  EXPECT_EQ(a.blocks(), 3 * kBlockSize / 512);
  EXPECT_EQ(store_->store().Space().used_bytes, 3 * kBlockSize);

  // Growing allocates nothing.
  ASSERT_OK_AND_ASSIGN(a, Truncate(f.ino(), 10 * kChunk));
  EXPECT_EQ(a.size(), 10 * kChunk);
  EXPECT_EQ(a.blocks(), 3 * kBlockSize / 512);
  EXPECT_EQ(store_->store().Space().used_bytes, 3 * kBlockSize);

  // To zero frees everything; a later write allocates again from scratch.
  ASSERT_OK_AND_ASSIGN(a, Truncate(f.ino(), 0));
  EXPECT_EQ(a.size(), 0u);
  EXPECT_EQ(a.blocks(), 0u);
  EXPECT_EQ(store_->store().Space().used_bytes, 0u);
  ASSERT_OK_AND_ASSIGN(Reservation reserved, store_->space().Reserve(f.ino(), 0, kChunk));
  EXPECT_EQ(reserved.blocks, kChunk / kBlockSize);
  store_->space().Unreserve(reserved);
}

TEST_F(MetaStoreTest, TruncateChecks) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(kRootIno, "f", 0644));
  ASSERT_OK_AND_ASSIGN(proto::Attr d, Mkdir(kRootIno, "d"));
  ASSERT_OK_AND_ASSIGN(proto::Attr l, store_->names().Symlink(kRoot, kRootIno, "l", "f"));
  EXPECT_EQ(Err(Truncate(d.ino(), 0)), EISDIR);
  EXPECT_EQ(Err(Truncate(l.ino(), 0)), EINVAL);
  EXPECT_EQ(Err(Truncate(f.ino(), kMaxFileSize + 1)), EFBIG);
  EXPECT_EQ(Err(Truncate(f.ino(), 10, kAlice)), EACCES);
  EXPECT_EQ(Err(store_->inodes().CheckTruncate(kAlice, f.ino(), 10)), EACCES);
  EXPECT_EQ(Err(store_->inodes().CheckTruncate(kRoot, d.ino(), 10)), EISDIR);
  ASSERT_OK_AND_ASSIGN(proto::InodeRecord rec, store_->inodes().CheckTruncate(kRoot, f.ino(), 10));
  EXPECT_EQ(rec.size(), 0u);  // only checks
}

// --- durability -------------------------------------------------------------------------

TEST_F(MetaStoreTest, EverythingSurvivesAReopen) {
  ASSERT_OK_AND_ASSIGN(proto::Attr d, Mkdir(kRootIno, "d", 0750));
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(d.ino(), "f", 0640));
  ASSERT_OK(Write(f.ino(), 0, 3 * kBlockSize + 5));
  ASSERT_OK(store_->inodes().SetXattr(kRoot, f.ino(), "user.k", "value", 0));
  ASSERT_OK(store_->names().Link(kRoot, f.ino(), kRootIno, "hard"));
  ASSERT_OK_AND_ASSIGN(proto::Attr l, store_->names().Symlink(kRoot, kRootIno, "l", "d/f"));
  ASSERT_OK_AND_ASSIGN(proto::Attr o, Create(kRootIno, "orphan"));
  ASSERT_OK(store_->names().Remove(kRoot, kRootIno, "orphan", false));
  ASSERT_OK_AND_ASSIGN(proto::Attr gone, Create(kRootIno, "gone"));
  ASSERT_OK(Write(gone.ino(), 0, kBlockSize));
  ASSERT_OK(store_->names().Remove(kRoot, kRootIno, "gone", false));
  ASSERT_OK(store_->orphans().Reap(gone.ino()));
  const auto root_listing = ListAll(kRootIno);
  const SpaceInfo before = store_->store().Space();
  ASSERT_OK_AND_ASSIGN(proto::Attr f_before, store_->inodes().GetAttr(f.ino()));

  Reopen();

  EXPECT_EQ(InoOf(kRootIno, "d"), d.ino());
  EXPECT_EQ(InoOf(d.ino(), "f"), f.ino());
  EXPECT_EQ(InoOf(kRootIno, "hard"), f.ino());
  ASSERT_OK_AND_ASSIGN(proto::Attr f_after, store_->inodes().GetAttr(f.ino()));
  EXPECT_EQ(f_after.SerializeAsString(), f_before.SerializeAsString());
  EXPECT_EQ(f_after.size(), 3 * kBlockSize + 5);
  EXPECT_EQ(f_after.nlink(), 2u);
  EXPECT_EQ(f_after.mode(), S_IFREG | 0640u);
  EXPECT_EQ(Nlink(kRootIno), 3);
  ASSERT_OK_AND_ASSIGN(std::string v, store_->inodes().GetXattr(kRoot, f.ino(), "user.k"));
  EXPECT_EQ(v, "value");
  ASSERT_OK_AND_ASSIGN(std::string target, store_->names().ReadLink(l.ino()));
  EXPECT_EQ(target, "d/f");
  EXPECT_EQ(Orphans(), std::vector<uint64_t>{o.ino()});
  EXPECT_EQ(Garbage(), std::vector<uint64_t>{gone.ino()});
  EXPECT_EQ(ListAll(kRootIno), root_listing);

  const SpaceInfo after = store_->store().Space();
  EXPECT_EQ(after.used_bytes, before.used_bytes);
  EXPECT_EQ(after.used_bytes, 5 * kBlockSize);
  EXPECT_EQ(after.inodes, before.inodes);
  EXPECT_EQ(after.next_ino, before.next_ino);
  EXPECT_EQ(after.pending_deletes, 1u);
  // Allocation maps survive: rewriting the same blocks needs nothing.
  ASSERT_OK_AND_ASSIGN(Reservation reserved, store_->space().Reserve(f.ino(), 0, 4 * kBlockSize));
  EXPECT_EQ(reserved.blocks, 0u);
  // Inode numbers and cookies are never reused.
  ASSERT_OK_AND_ASSIGN(proto::Attr n, Create(kRootIno, "new"));
  EXPECT_EQ(n.ino(), before.next_ino);
  auto listing = ListAll(kRootIno);
  for (const auto& [name, cookie] : root_listing) EXPECT_LT(cookie, listing["new"]) << name;
}

// --- faults of RocksDB's disk ---------------------------------------------------------

// RocksDB's file system, with the write-ahead log's appends or syncs failing
// (IOError, or NoSpace for appends) while told to.
class WalFaultFs : public rocksdb::FileSystemWrapper {
 public:
  explicit WalFaultFs(const std::shared_ptr<rocksdb::FileSystem>& base)
      : rocksdb::FileSystemWrapper(base) {}
  static const char* kClassName() { return "WalFaultFs"; }
  const char* Name() const override { return kClassName(); }

  rocksdb::IOStatus NewWritableFile(const std::string& name, const rocksdb::FileOptions& options,
                                    std::unique_ptr<rocksdb::FSWritableFile>* file,
                                    rocksdb::IODebugContext* dbg) override {
    rocksdb::IOStatus s = target()->NewWritableFile(name, options, file, dbg);
    if (s.ok() && absl::EndsWith(name, ".log")) file->reset(new WalFile(std::move(*file), this));
    return s;
  }

  std::atomic<bool> fail_append{false};
  std::atomic<bool> append_no_space{false};  // NoSpace rather than IOError
  std::atomic<bool> fail_sync{false};
  std::atomic<int> failed{0};

 private:
  class WalFile : public rocksdb::FSWritableFileOwnerWrapper {
   public:
    WalFile(std::unique_ptr<rocksdb::FSWritableFile> base, WalFaultFs* fs)
        : rocksdb::FSWritableFileOwnerWrapper(std::move(base)), fs_(fs) {}
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                             rocksdb::IODebugContext* dbg) override {
      if (fs_->fail_append) return Failed(fs_->append_no_space);
      return target()->Append(data, o, dbg);
    }
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                             const rocksdb::DataVerificationInfo& info,
                             rocksdb::IODebugContext* dbg) override {
      if (fs_->fail_append) return Failed(fs_->append_no_space);
      return target()->Append(data, o, info, dbg);
    }
    rocksdb::IOStatus Sync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override {
      if (fs_->fail_sync) return Failed(false);
      return target()->Sync(o, dbg);
    }
    rocksdb::IOStatus Fsync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override {
      if (fs_->fail_sync) return Failed(false);
      return target()->Fsync(o, dbg);
    }

   private:
    rocksdb::IOStatus Failed(bool no_space) {
      ++fs_->failed;
      if (!no_space) return rocksdb::IOStatus::IOError("injected");
      // As RocksDB's PosixWritableFile reports ENOSPC: retryable.
      rocksdb::IOStatus s = rocksdb::IOStatus::NoSpace("injected");
      s.SetRetryable(true);
      return s;
    }
    WalFaultFs* const fs_;
  };
};

class MetaStoreFaultTest : public MetaStoreTest {
 protected:
  void SetUp() override {
    fs_ = std::make_shared<WalFaultFs>(rocksdb::FileSystem::Default());
    env_ = rocksdb::NewCompositeEnv(fs_);
    MetaStoreTest::SetUp();
    ReopenFaulty();
  }

  // Closes the store and opens it again on the faulty file system (a
  // restart of the server).
  void ReopenFaulty() {
    store_.reset();
    MetaStoreOptions o = Options();
    o.rocksdb_env = env_.get();
    ASSERT_OK_AND_ASSIGN(store_, Metadata::Open(o));
  }

  std::shared_ptr<WalFaultFs> fs_;
  std::unique_ptr<rocksdb::Env> env_;
};

TEST_F(MetaStoreFaultTest, AFailedWalSyncIsEioThenChangesAreRefusedUntilAReopen) {
  ASSERT_OK(Create(kRootIno, "a"));
  fs_->fail_sync = true;
  EXPECT_EQ(Err(Create(kRootIno, "b")), EIO);
  EXPECT_EQ(fs_->failed, 1);
  fs_->fail_sync = false;
  // RocksDB (7.8) took the failed sync as a background error: the store
  // refuses every change from now on, with EIO, and does not abort.
  EXPECT_EQ(Err(Create(kRootIno, "c")), EIO);
  EXPECT_EQ(Err(Mkdir(kRootIno, "d")), EIO);
  EXPECT_EQ(fs_->failed, 1);  // refused without touching the WAL
  // Reads go on. The change whose sync failed was applied (memtable and
  // WAL) though its caller got EIO: others see it, and it is still there
  // after a reopen (the WAL's bytes were in the page cache). Its request
  // record rides in the same batch, so a resend is answered as applied.
  EXPECT_OK(store_->names().Lookup(kRoot, kRootIno, "a"));
  EXPECT_OK(store_->names().Lookup(kRoot, kRootIno, "b"));
  ReopenFaulty();
  EXPECT_OK(store_->names().Lookup(kRoot, kRootIno, "a"));
  EXPECT_OK(store_->names().Lookup(kRoot, kRootIno, "b"));
  EXPECT_EQ(Err(store_->names().Lookup(kRoot, kRootIno, "c")), ENOENT);
  ASSERT_OK(Create(kRootIno, "e"));  // a restart recovers
  EXPECT_TRUE(store_->store().Space().ledger_ok);
}

TEST_F(MetaStoreFaultTest, AFailedWalAppendIsEioAndTheChangeIsNotApplied) {
  ASSERT_OK(Create(kRootIno, "a"));
  fs_->fail_append = true;
  EXPECT_EQ(Err(Create(kRootIno, "b")), EIO);
  fs_->fail_append = false;
  EXPECT_EQ(Err(store_->names().Lookup(kRoot, kRootIno, "b")), ENOENT);
  EXPECT_EQ(Err(Create(kRootIno, "c")), EIO);  // refused, as after a failed sync
  ReopenFaulty();
  EXPECT_OK(store_->names().Lookup(kRoot, kRootIno, "a"));
  EXPECT_EQ(Err(store_->names().Lookup(kRoot, kRootIno, "b")), ENOENT);
  ASSERT_OK(Create(kRootIno, "c"));
}

TEST_F(MetaStoreFaultTest, AFullDiskUnderTheWalIsEnospcUnlessRoomIsMade) {
  ASSERT_OK(Create(kRootIno, "a"));
  fs_->fail_append = true;
  fs_->append_no_space = true;
  EXPECT_EQ(Err(Create(kRootIno, "b")), ENOSPC);
  // With make_room (the volume lends the metadata reserve of its space
  // hold), the store resumes RocksDB and writes again.
  store_.reset();
  fs_->fail_append = false;
  MetaStoreOptions o = Options();
  o.rocksdb_env = env_.get();
  int asked = 0;
  o.make_room = [&] {
    ++asked;
    fs_->fail_append = false;  // the lent room
    return true;
  };
  ASSERT_OK_AND_ASSIGN(store_, Metadata::Open(o));
  fs_->fail_append = true;
  ASSERT_OK(Create(kRootIno, "b"));  // the first try after the room was made
  EXPECT_EQ(asked, 1);
  ASSERT_OK(Create(kRootIno, "c"));
  EXPECT_OK(store_->names().Lookup(kRoot, kRootIno, "b"));
}

}  // namespace
}  // namespace grantfs
