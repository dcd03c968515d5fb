#include "common/log_rotation.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "common/errno_status.h"
#include "gtest/gtest.h"

namespace grantfs {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

class LogRotationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/grantfs_log_rotation_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/mount.log";
    fd_ = open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    ASSERT_GE(fd_, 0);
  }
  void TearDown() override {
    close(fd_);
    std::filesystem::remove_all(dir_);
  }
  void Write(const std::string& s) {
    ASSERT_EQ(write(fd_, s.data(), s.size()), static_cast<ssize_t>(s.size()));
  }

  std::string dir_, path_;
  int fd_ = -1;
};

TEST_F(LogRotationTest, AFileOverItsSizeMovesToDot1AndWritingGoesOnInANewOne) {
  LogRotation rotation(path_, fd_, 1000);
  Write(std::string(999, 'a'));
  ASSERT_TRUE(rotation.Check().ok());
  EXPECT_FALSE(*rotation.Check());  // within the size: nothing
  Write("bb");
  EXPECT_TRUE(*rotation.Check());
  EXPECT_EQ(Slurp(path_ + ".1"), std::string(999, 'a') + "bb");
  EXPECT_EQ(Slurp(path_), "");
  Write("after\n");
  EXPECT_EQ(Slurp(path_), "after\n");
  // The next rotation replaces the old .1: at most two files.
  Write(std::string(1000, 'c'));
  EXPECT_TRUE(*rotation.Check());
  EXPECT_EQ(Slurp(path_ + ".1"), "after\n" + std::string(1000, 'c'));
  EXPECT_FALSE(std::filesystem::exists(path_ + ".2"));
}

TEST_F(LogRotationTest, AFileMovedOrRemovedByAnotherIsFollowedByName) {
  LogRotation rotation(path_, fd_, 0);  // no size limit
  Write(std::string(5000, 'x'));
  EXPECT_FALSE(*rotation.Check());
  ASSERT_EQ(rename(path_.c_str(), (path_ + ".old").c_str()), 0);
  EXPECT_TRUE(*rotation.Check());
  Write("new\n");
  EXPECT_EQ(Slurp(path_), "new\n");
  ASSERT_EQ(unlink(path_.c_str()), 0);
  EXPECT_TRUE(*rotation.Check());
  Write("again\n");
  EXPECT_EQ(Slurp(path_), "again\n");
}

TEST_F(LogRotationTest, AFailureIsSaidAndLeavesTheDescriptorAsItWas) {
  LogRotation rotation(path_, fd_, 10);
  Write(std::string(20, 'x'));
  // PATH.1 is a directory: the rename fails (EISDIR), also for root.
  ASSERT_TRUE(std::filesystem::create_directory(path_ + ".1"));
  std::ofstream(path_ + ".1/keep") << "k";
  absl::StatusOr<bool> r = rotation.Check();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(ToErrno(r.status()), EISDIR) << r.status();
  EXPECT_NE(r.status().message().find("rename"), absl::string_view::npos) << r.status();
  Write("y");
  EXPECT_EQ(Slurp(path_), std::string(20, 'x') + "y");
}

TEST_F(LogRotationTest, TheThreadChecksUntilStopped) {
  LogRotation rotation(path_, fd_, 100);
  rotation.Start(absl::Milliseconds(5));
  Write(std::string(200, 'z'));
  for (int i = 0; i < 2000 && !std::filesystem::exists(path_ + ".1"); ++i) {
    usleep(5000);
  }
  rotation.Stop();
  EXPECT_EQ(Slurp(path_ + ".1"), std::string(200, 'z'));
}

}  // namespace
}  // namespace grantfs
