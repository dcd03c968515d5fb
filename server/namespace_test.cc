// Names in directories (server/namespace.h), through Metadata: create and
// look up, link counts, rename in all its forms, readdir, and the
// permissions and staleness checks of changes to names.
#include "server/namespace.h"

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
#include "common/names.h"
#include "common/status_macros.h"
#include "common/status_test_util.h"
#include "gtest/gtest.h"
#include "server/metadata.h"
#include "server/metadata_test_util.h"
#include "server/permissions.h"

namespace grantfs {
namespace {

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

// --- names that changed meanwhile ------------------------------------------------------

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

}  // namespace
}  // namespace grantfs
