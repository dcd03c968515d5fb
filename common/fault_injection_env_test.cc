#include "common/fault_injection_env.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "common/errno_status.h"
#include "common/status_test_util.h"
#include "gtest/gtest.h"

namespace grantfs {
namespace {

class FaultInjectionEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/grantfs_fault_env_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr) << strerror(errno);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // Writes `data` at `offset` of `path` through the env, synced or not.
  void WriteAt(const std::string& path, uint64_t offset, const std::string& data, bool sync) {
    OpenOptions o;
    o.write = true;
    o.create = true;
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<File> f, env_.Open(path, o));
    ASSERT_OK_AND_ASSIGN(size_t n, f->Write(offset, data.data(), data.size()));
    ASSERT_EQ(n, data.size());
    if (sync) ASSERT_OK(f->DataSync());
  }
  // The file as the disk has it (not through the env); "<missing>" if none.
  std::string Contents(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return "<missing>";
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  std::string dir_;
  FaultInjectionEnv env_;
};

TEST_F(FaultInjectionEnvTest, PassesCallsThroughToTheDisk) {
  const std::string p = dir_ + "/a";
  WriteAt(p, 0, "hello", false);
  EXPECT_EQ(Contents(p), "hello");
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<File> f, env_.Open(p, OpenOptions{}));
  char buf[8];
  ASSERT_OK_AND_ASSIGN(size_t n, f->Read(1, sizeof(buf), buf));
  EXPECT_EQ(std::string(buf, n), "ello");
  EXPECT_EQ(env_.calls(FileOp::kWrite), 1);
  EXPECT_EQ(env_.injected(), 0);
  EXPECT_EQ(ToErrno(env_.Open(dir_ + "/missing", OpenOptions{}).status()), ENOENT);
  EXPECT_EQ(ToErrno(env_.Remove(dir_ + "/missing")), ENOENT);
  ASSERT_OK(env_.CreateDir(dir_ + "/d"));
  ASSERT_OK(env_.CreateDir(dir_ + "/d"));  // exists already: fine
  ASSERT_OK(env_.SyncDir(dir_ + "/d"));
}

TEST_F(FaultInjectionEnvTest, FailsTheChosenCallsWithTheChosenErrno) {
  const std::string p = dir_ + "/a";
  WriteAt(p, 0, "x", true);
  // One pwrite passes, the next two fail with ENOSPC, then they pass again.
  env_.FailNext(FileOp::kWrite, ENOSPC, /*count=*/2, /*skip=*/1);
  OpenOptions o;
  o.write = true;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<File> f, env_.Open(p, o));
  EXPECT_OK(f->Write(0, "a", 1).status());
  EXPECT_EQ(ToErrno(f->Write(0, "b", 1).status()), ENOSPC);
  EXPECT_EQ(ToErrno(f->Write(0, "c", 1).status()), ENOSPC);
  EXPECT_OK(f->Write(0, "d", 1).status());
  EXPECT_EQ(Contents(p), "d");  // failed calls never reached the disk
  EXPECT_EQ(env_.injected(), 2);
  // For ever, until cleared.
  env_.FailAlways(FileOp::kDataSync, EIO);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(ToErrno(f->DataSync()), EIO);
  env_.ClearFaults();
  EXPECT_OK(f->DataSync());
  env_.FailNext(FileOp::kOpen, EIO);
  EXPECT_EQ(ToErrno(env_.Open(p, o).status()), EIO);
  EXPECT_OK(env_.Open(p, o).status());
}

TEST_F(FaultInjectionEnvTest, RefusesODirectWhenTold) {
  OpenOptions o;
  o.write = true;
  o.create = true;
  o.direct = true;
  EXPECT_OK(env_.Open(dir_ + "/a", o).status());  // ext4 takes O_DIRECT
  env_.set_refuse_direct(true);
  EXPECT_EQ(ToErrno(env_.Open(dir_ + "/b", o).status()), EINVAL);
  o.direct = false;
  EXPECT_OK(env_.Open(dir_ + "/b", o).status());
}

TEST_F(FaultInjectionEnvTest, APowerLossKeepsWhatWasSyncedAndDropsTheRest) {
  const std::string synced = dir_ + "/synced", unsynced = dir_ + "/unsynced",
                    mixed = dir_ + "/mixed";
  WriteAt(synced, 0, "durable", true);
  WriteAt(unsynced, 0, "lost", false);
  WriteAt(mixed, 0, "aaaaaaaa", true);
  WriteAt(mixed, 2, "bb", false);    // an overwrite not synced
  WriteAt(mixed, 8, "cccc", false);  // an extension not synced
  EXPECT_EQ(Contents(mixed), "aabbaaaacccc");
  EXPECT_EQ(env_.UnsyncedFiles(), (std::vector<std::string>{mixed, unsynced}));
  ASSERT_OK(env_.DropUnsyncedData());
  EXPECT_EQ(Contents(synced), "durable");
  EXPECT_EQ(Contents(unsynced), "<missing>");  // made and never synced
  EXPECT_EQ(Contents(mixed), "aaaaaaaa");
  EXPECT_TRUE(env_.UnsyncedFiles().empty());
}

TEST_F(FaultInjectionEnvTest, TruncationsAndRemovalsNeedTheirSyncs) {
  const std::string cut = dir_ + "/cut", gone = dir_ + "/gone", named = dir_ + "/named";
  WriteAt(cut, 0, "0123456789", true);
  WriteAt(gone, 0, "still here", true);
  {
    OpenOptions o;
    o.write = true;
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<File> f, env_.Open(cut, o));
    ASSERT_OK(f->Truncate(4));
  }
  ASSERT_OK(env_.Remove(gone));
  ASSERT_OK(env_.DropUnsyncedData());
  EXPECT_EQ(Contents(cut), "0123456789");   // the cut was not synced
  EXPECT_EQ(Contents(gone), "still here");  // nor the directory
  // Synced this time: the file's fdatasync for the cut, the directory's
  // fsync for the removal (and for a new name whose bytes were not synced).
  {
    OpenOptions o;
    o.write = true;
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<File> f, env_.Open(cut, o));
    ASSERT_OK(f->Truncate(4));
    ASSERT_OK(f->DataSync());
  }
  ASSERT_OK(env_.Remove(gone));
  WriteAt(named, 0, "bytes not synced", false);
  ASSERT_OK(env_.SyncDir(dir_));
  ASSERT_OK(env_.DropUnsyncedData());
  EXPECT_EQ(Contents(cut), "0123");
  EXPECT_EQ(Contents(gone), "<missing>");
  EXPECT_EQ(Contents(named), "");
}

TEST_F(FaultInjectionEnvTest, FilesFromBeforeCountAsSyncedAndHolesStayHoles) {
  const std::string p = dir_ + "/old";
  {
    std::ofstream out(p, std::ios::binary);
    out << "written before the env";
  }
  WriteAt(p, 0, "XXXXXXX", false);
  WriteAt(p, 1 << 20, "far", false);
  ASSERT_OK(env_.DropUnsyncedData());
  EXPECT_EQ(Contents(p), "written before the env");
  // A synced sparse file is put back sparse.
  const std::string sparse = dir_ + "/sparse";
  WriteAt(sparse, 8 << 20, "end", true);
  WriteAt(sparse, 0, "lost", false);
  ASSERT_OK(env_.DropUnsyncedData());
  struct stat st;
  ASSERT_EQ(stat(sparse.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, (8 << 20) + 3);
  EXPECT_LE(st.st_blocks * 512, 64 << 10);
  const std::string all = Contents(sparse);
  EXPECT_EQ(all.substr(0, 4), std::string(4, '\0'));
  EXPECT_EQ(all.substr(8 << 20), "end");
}

}  // namespace
}  // namespace grantfs
