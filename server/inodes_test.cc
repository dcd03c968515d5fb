// Inodes (server/inodes.h), through Metadata: extended attributes,
// ownership and permission changes, the checks of open and truncate, and
// the timestamps each change sets.
#include "server/inodes.h"

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

// HasXattrs answers from memory for an inode no xattr was set on; the
// index of those that may have some is read again when the store opens.
TEST_F(MetaStoreTest, HasXattrsKnowsWithoutAScanAndAfterAReopen) {
  ASSERT_OK_AND_ASSIGN(proto::Attr a, Create(kRootIno, "a", 0666));
  ASSERT_OK_AND_ASSIGN(proto::Attr b, Create(kRootIno, "b", 0666));
  ASSERT_OK_AND_ASSIGN(proto::Attr c, Create(kRootIno, "c", 0666));
  EXPECT_EQ(store_->inodes().XattrIndexSize(), std::optional<size_t>(0));
  ASSERT_OK(store_->inodes().SetXattr(kRoot, a.ino(), "user.x", "1", 0));
  ASSERT_OK(store_->inodes().SetXattr(kRoot, b.ino(), "trusted.t", "", 0));
  ASSERT_OK(store_->inodes().RemoveXattr(kRoot, b.ino(), "trusted.t"));
  // A refused set adds nothing that matters: the scan answers for it.
  EXPECT_EQ(Err(store_->inodes().SetXattr(kRoot, c.ino(), "user.y", "1", XATTR_REPLACE)), ENODATA);
  EXPECT_EQ(store_->inodes().XattrIndexSize(), std::optional<size_t>(2));
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round);
    ASSERT_OK_AND_ASSIGN(bool has, store_->inodes().HasXattrs(a.ino()));
    EXPECT_TRUE(has);
    ASSERT_OK_AND_ASSIGN(has, store_->inodes().HasXattrs(b.ino()));
    EXPECT_FALSE(has);
    ASSERT_OK_AND_ASSIGN(has, store_->inodes().HasXattrs(c.ino()));
    EXPECT_FALSE(has);
    Reopen();  // read from the store's keys: only a has one now
    EXPECT_EQ(store_->inodes().XattrIndexSize(), std::optional<size_t>(1));
  }
  ASSERT_OK(store_->inodes().SetXattr(kRoot, c.ino(), "user.z", "3", 0));
  ASSERT_OK_AND_ASSIGN(bool has, store_->inodes().HasXattrs(c.ino()));
  EXPECT_TRUE(has);
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

// --- truncate --------------------------------------------------------------------------

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

}  // namespace
}  // namespace grantfs
