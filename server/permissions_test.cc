#include "server/permissions.h"

#include <sys/stat.h>

#include <cerrno>
#include <utility>
#include <vector>

#include "common/errno_status.h"
#include "gtest/gtest.h"

namespace grantfs {
namespace {

proto::InodeRecord Inode(uint32_t mode, uint32_t uid, uint32_t gid) {
  proto::InodeRecord rec;
  rec.set_mode(mode);
  rec.set_uid(uid);
  rec.set_gid(gid);
  rec.set_nlink(1);
  return rec;
}

Caller User(uint32_t uid, uint32_t gid, std::vector<uint32_t> groups = {}) {
  Caller c;
  c.uid = uid;
  c.gid = gid;
  c.groups = std::move(groups);
  return c;
}

const Caller kRoot = User(0, 0);
const Caller kOwner = User(1000, 1000);
const Caller kGroupMember = User(1001, 500);
const Caller kOther = User(1002, 1002);

TEST(CallerTest, InGroupChecksPrimaryAndSupplementaryGroups) {
  Caller c = User(1000, 100, {200, 300});
  EXPECT_TRUE(c.InGroup(100));
  EXPECT_TRUE(c.InGroup(200));
  EXPECT_TRUE(c.InGroup(300));
  EXPECT_FALSE(c.InGroup(400));
  EXPECT_FALSE(c.InGroup(0));
  EXPECT_TRUE(kRoot.IsRoot());
  EXPECT_FALSE(c.IsRoot());
}

TEST(CheckAccessTest, OwnerBits) {
  const auto file = Inode(S_IFREG | 0640, 1000, 500);
  EXPECT_EQ(ToErrno(CheckAccess(file, kOwner, kMayRead)), 0);
  EXPECT_EQ(ToErrno(CheckAccess(file, kOwner, kMayWrite)), 0);
  EXPECT_EQ(ToErrno(CheckAccess(file, kOwner, kMayRead | kMayWrite)), 0);
  EXPECT_EQ(ToErrno(CheckAccess(file, kOwner, kMayExec)), EACCES);
  EXPECT_EQ(ToErrno(CheckAccess(file, kOwner, kMayRead | kMayExec)), EACCES);
}

TEST(CheckAccessTest, GroupBits) {
  const auto file = Inode(S_IFREG | 0640, 1000, 500);
  EXPECT_EQ(ToErrno(CheckAccess(file, kGroupMember, kMayRead)), 0);
  EXPECT_EQ(ToErrno(CheckAccess(file, kGroupMember, kMayWrite)), EACCES);
  EXPECT_EQ(ToErrno(CheckAccess(file, kGroupMember, kMayExec)), EACCES);
}

TEST(CheckAccessTest, OtherBits) {
  const auto file = Inode(S_IFREG | 0644, 1000, 500);
  EXPECT_EQ(ToErrno(CheckAccess(file, kOther, kMayRead)), 0);
  EXPECT_EQ(ToErrno(CheckAccess(file, kOther, kMayWrite)), EACCES);
  const auto secret = Inode(S_IFREG | 0640, 1000, 500);
  EXPECT_EQ(ToErrno(CheckAccess(secret, kOther, kMayRead)), EACCES);
  const auto open = Inode(S_IFREG | 0607, 1000, 500);
  EXPECT_EQ(ToErrno(CheckAccess(open, kOther, kMayRead | kMayWrite | kMayExec)), 0);
}

TEST(CheckAccessTest, OnlyTheFirstMatchingClassCounts) {
  // POSIX: the owner gets the owner bits even when "other" grants more.
  const auto file = Inode(S_IFREG | 0047, 1000, 500);
  EXPECT_EQ(ToErrno(CheckAccess(file, kOwner, kMayRead)), EACCES);
  EXPECT_EQ(ToErrno(CheckAccess(file, kGroupMember, kMayRead)), 0);
  EXPECT_EQ(ToErrno(CheckAccess(file, kGroupMember, kMayWrite)), EACCES);
  EXPECT_EQ(ToErrno(CheckAccess(file, kOther, kMayWrite)), 0);
}

TEST(CheckAccessTest, SupplementaryGroupsGrantGroupBits) {
  const auto file = Inode(S_IFREG | 0660, 1000, 500);
  const Caller member = User(2000, 2000, {7, 500});
  const Caller not_member = User(2000, 2000, {7, 8});
  EXPECT_EQ(ToErrno(CheckAccess(file, member, kMayRead | kMayWrite)), 0);
  EXPECT_EQ(ToErrno(CheckAccess(file, not_member, kMayRead)), EACCES);
}

TEST(CheckAccessTest, ZeroMaskAlwaysPasses) {
  const auto file = Inode(S_IFREG | 0000, 1000, 500);
  EXPECT_EQ(ToErrno(CheckAccess(file, kOther, 0)), 0);
}

TEST(CheckAccessTest, RootBypassesReadAndWrite) {
  const auto file = Inode(S_IFREG | 0000, 1000, 500);
  EXPECT_EQ(ToErrno(CheckAccess(file, kRoot, kMayRead | kMayWrite)), 0);
  const auto dir = Inode(S_IFDIR | 0000, 1000, 500);
  EXPECT_EQ(ToErrno(CheckAccess(dir, kRoot, kMayRead | kMayWrite | kMayExec)), 0);
}

TEST(CheckAccessTest, RootNeedsSomeExecBitToExecuteAFile) {
  EXPECT_EQ(ToErrno(CheckAccess(Inode(S_IFREG | 0666, 1000, 500), kRoot, kMayExec)), EACCES);
  EXPECT_EQ(ToErrno(CheckAccess(Inode(S_IFREG | 0000, 1000, 500), kRoot, kMayExec)), EACCES);
  // Any one of the three x bits is enough.
  EXPECT_EQ(ToErrno(CheckAccess(Inode(S_IFREG | 0100, 1000, 500), kRoot, kMayExec)), 0);
  EXPECT_EQ(ToErrno(CheckAccess(Inode(S_IFREG | 0010, 1000, 500), kRoot, kMayExec)), 0);
  EXPECT_EQ(ToErrno(CheckAccess(Inode(S_IFREG | 0001, 1000, 500), kRoot, kMayExec)), 0);
  EXPECT_EQ(ToErrno(CheckAccess(Inode(S_IFREG | 0600, 1000, 500), kRoot, kMayRead | kMayExec)),
            EACCES);
}

TEST(CheckStickyTest, NonStickyDirectoryAllowsAnyone) {
  const auto dir = Inode(S_IFDIR | 0777, 0, 0);
  const auto victim = Inode(S_IFREG | 0644, 1000, 1000);
  EXPECT_EQ(ToErrno(CheckSticky(dir, victim, kOther)), 0);
}

TEST(CheckStickyTest, StickyDirectoryRule) {
  const auto dir = Inode(S_IFDIR | S_ISVTX | 0777, 3000, 3000);
  const auto victim = Inode(S_IFREG | 0666, 1000, 1000);
  EXPECT_EQ(ToErrno(CheckSticky(dir, victim, kOther)), EPERM);
  EXPECT_EQ(ToErrno(CheckSticky(dir, victim, kGroupMember)), EPERM);
  EXPECT_EQ(ToErrno(CheckSticky(dir, victim, kOwner)), 0);         // owns the file
  EXPECT_EQ(ToErrno(CheckSticky(dir, victim, User(3000, 1))), 0);  // owns the dir
  EXPECT_EQ(ToErrno(CheckSticky(dir, victim, kRoot)), 0);          // root
  // Group membership of the file's group is not enough.
  EXPECT_EQ(ToErrno(CheckSticky(dir, victim, User(1003, 1000))), EPERM);
}

TEST(CheckOwnerTest, OwnerAndRootOnly) {
  const auto file = Inode(S_IFREG | 0777, 1000, 500);
  EXPECT_EQ(ToErrno(CheckOwner(file, kOwner)), 0);
  EXPECT_EQ(ToErrno(CheckOwner(file, kRoot)), 0);
  EXPECT_EQ(ToErrno(CheckOwner(file, kGroupMember)), EPERM);
  EXPECT_EQ(ToErrno(CheckOwner(file, kOther)), EPERM);
  // Same gid as the file's uid number does not make one the owner.
  EXPECT_EQ(ToErrno(CheckOwner(file, User(1001, 1000))), EPERM);
}

}  // namespace
}  // namespace grantfs
