#include "common/flag_config.h"

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/flags/flag.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

ABSL_FLAG(std::string, fc_listen, "127.0.0.1:1", "test: a server's --listen");
ABSL_FLAG(int, fc_threads, 4, "test: a number");
ABSL_FLAG(bool, fc_sync, true, "test: a boolean");

namespace grantfs {
namespace {

using ::testing::HasSubstr;

std::string WriteTemp(const std::string& text) {
  char path[] = "/tmp/grantfs_flag_config_test.XXXXXX";
  const int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fd);
  return path;
}

TEST(FlagConfigTest, LinesSetFlagsAndTheCommandLineIsParsedAfter) {
  ASSERT_TRUE(ApplyFlagText("# a server\n\n fc_listen = 0.0.0.0:7420 \nfc_threads=9\n"
                            "fc_sync = false\n",
                            "f")
                  .ok());
  EXPECT_EQ(absl::GetFlag(FLAGS_fc_listen), "0.0.0.0:7420");
  EXPECT_EQ(absl::GetFlag(FLAGS_fc_threads), 9);
  EXPECT_FALSE(absl::GetFlag(FLAGS_fc_sync));

  const std::string path = WriteTemp("fc_threads = 12\n");
  const std::string arg = "--config=" + path;
  char* argv[] = {const_cast<char*>("prog"), const_cast<char*>(arg.c_str()), nullptr};
  ASSERT_TRUE(ApplyFlagConfig(2, argv).ok());
  EXPECT_EQ(absl::GetFlag(FLAGS_fc_threads), 12);
  char* argv2[] = {const_cast<char*>("prog"), const_cast<char*>("--config"),
                   const_cast<char*>(path.c_str()), nullptr};
  absl::SetFlag(&FLAGS_fc_threads, 1);
  ASSERT_TRUE(ApplyFlagConfig(3, argv2).ok());
  EXPECT_EQ(absl::GetFlag(FLAGS_fc_threads), 12);
  unlink(path.c_str());
  // No --config, or an empty one: nothing read.
  char* argv3[] = {const_cast<char*>("prog"), const_cast<char*>("--config="), nullptr};
  EXPECT_TRUE(ApplyFlagConfig(2, argv3).ok());
  EXPECT_TRUE(ApplyFlagConfig(1, argv3).ok());
}

TEST(FlagConfigTest, BadLinesNameTheFileAndLine) {
  struct Case {
    const char* text;
    const char* says;
  } cases[] = {
      {"fc_threads = 1\nbogus = 1\n", "/etc/x.conf:2: unknown flag 'bogus'"},
      {"fc_threads\n", "/etc/x.conf:1: expected KEY = VALUE"},
      {"fc_threads = 1\nfc_threads = 2\n", "/etc/x.conf:2: fc_threads given twice"},
      {"fc_threads = many\n", "/etc/x.conf:1: fc_threads = many: "},
      {"flagfile = /etc/passwd\n", "'flagfile' cannot be set from a configuration file"},
      {"config = /x\n", "'config' cannot be set from a configuration file"},
  };
  for (const Case& c : cases) {
    absl::Status s = ApplyFlagText(c.text, "/etc/x.conf");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(s.message(), HasSubstr(c.says)) << c.text;
  }
}

TEST(FlagConfigTest, AMissingNamedFileADirectoryOrAHugeFileIsRefused) {
  char* argv[] = {const_cast<char*>("prog"), const_cast<char*>("--config=/nonexistent/x.conf"),
                  nullptr};
  absl::Status s = ApplyFlagConfig(2, argv);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("/nonexistent/x.conf"));
  EXPECT_EQ(ReadConfigText("/tmp", true).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(ReadConfigText("/nonexistent/x.conf", false)->has_value());
  const std::string big = WriteTemp(std::string(100 * 1024, '#'));
  EXPECT_THAT(ReadConfigText(big, true).status().message(), HasSubstr("larger than 65536"));
  unlink(big.c_str());
}

}  // namespace
}  // namespace grantfs
