// The cluster's configuration file (client/cluster_config.h).
#include "client/cluster_config.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

ABSL_FLAG(std::string, server, "default-server", "test: as grantfsctl's");
ABSL_FLAG(std::string, node, "", "test: as grantfs-node's");

namespace grantfs {
namespace {

using ::testing::HasSubstr;

TEST(ClusterConfigTest, KeysCommentsAndBlanks) {
  absl::StatusOr<ClusterConfig> c = ParseClusterConfig(
      "# the cluster\n\n servers = a:7420,b:7420 \ntls_dir=/etc/grantfs\nnode = n1\n"
      "secret_file = /etc/grantfs/secret\ninsecure = false\nallowed_root = /mnt/global\n",
      "f");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->servers, "a:7420,b:7420");
  EXPECT_EQ(c->tls_dir, "/etc/grantfs");
  EXPECT_EQ(c->node, "n1");
  EXPECT_EQ(c->secret_file, "/etc/grantfs/secret");
  ASSERT_TRUE(c->insecure.has_value());
  EXPECT_FALSE(*c->insecure);
  EXPECT_EQ(c->allowed_root, "/mnt/global");
}

TEST(ClusterConfigTest, BadLinesNameTheFileAndLine) {
  struct Case {
    const char* text;
    const char* says;
  } cases[] = {
      {"servers = a\nbogus = 1\n", "/etc/c.conf:2: unknown key 'bogus'"},
      {"servers\n", "/etc/c.conf:1: expected KEY = VALUE"},
      {"node = a\nnode = b\n", "/etc/c.conf:2: node given twice"},
      {"insecure = maybe\n", "insecure must be true or false"},
      {"servers =\n", "servers is empty"},
      {"allowed_root =\n", "allowed_root is empty"},
      {"allowed_root = /a\nallowed_root = /b\n", "allowed_root given twice"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<ClusterConfig> r = ParseClusterConfig(c.text, "/etc/c.conf");
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), HasSubstr(c.says));
  }
}

TEST(ClusterConfigTest, AMissingDefaultFileIsNoErrorAMissingNamedOneIs) {
  absl::StatusOr<std::optional<ClusterConfig>> r =
      ReadClusterConfig("/nonexistent/cluster.conf", false);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->has_value());
  r = ReadClusterConfig("/nonexistent/cluster.conf", true);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(r.status().message(), HasSubstr("/nonexistent/cluster.conf"));
}

TEST(ClusterConfigTest, ADirectoryADeviceOrAHugeFileIsRefusedNotRead) {
  // Also as the default path: only a missing file is "no file".
  for (bool must_exist : {false, true}) {
    for (const char* path : {"/tmp", "/dev/zero"}) {
      absl::StatusOr<std::optional<ClusterConfig>> r = ReadClusterConfig(path, must_exist);
      EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << path;
      EXPECT_THAT(r.status().message(), HasSubstr("is not a regular file")) << path;
    }
  }
  char tmpl[] = "/tmp/grantfs_cluster_config_test.XXXXXX";
  const int fd = mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  const std::string big(1 << 20, '#');
  ASSERT_EQ(write(fd, big.data(), big.size()), static_cast<ssize_t>(big.size()));
  close(fd);
  absl::StatusOr<std::optional<ClusterConfig>> r = ReadClusterConfig(tmpl, true);
  unlink(tmpl);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("larger than 65536 bytes"));
}

TEST(ClusterConfigTest, TheFileSetsFlagsTheCommandLineThenOverrides) {
  char path[] = "/tmp/grantfs_cluster_conf.XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  const std::string text = "servers = x:1,y:2\nnode = from-file\n";
  ASSERT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fd);
  const std::string arg = std::string("--config=") + path;
  char* argv[] = {const_cast<char*>("prog"), const_cast<char*>(arg.c_str()), nullptr};
  absl::StatusOr<std::optional<ClusterConfig>> r = ApplyClusterConfig(2, argv);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ(absl::GetFlag(FLAGS_server), "x:1,y:2");
  EXPECT_EQ(absl::GetFlag(FLAGS_node), "from-file");
  // "--config FILE" too; an empty --config reads nothing.
  absl::SetFlag(&FLAGS_server, "default-server");
  char* argv2[] = {const_cast<char*>("prog"), const_cast<char*>("--config"), path, nullptr};
  ASSERT_TRUE(ApplyClusterConfig(3, argv2).ok());
  EXPECT_EQ(absl::GetFlag(FLAGS_server), "x:1,y:2");
  absl::SetFlag(&FLAGS_server, "default-server");
  char* argv3[] = {const_cast<char*>("prog"), const_cast<char*>("--config="), nullptr};
  r = ApplyClusterConfig(2, argv3);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->has_value());
  EXPECT_EQ(absl::GetFlag(FLAGS_server), "default-server");
  // A named file that is missing is an error.
  char* argv4[] = {const_cast<char*>("prog"), const_cast<char*>("--config=/nonexistent/c"),
                   nullptr};
  EXPECT_FALSE(ApplyClusterConfig(2, argv4).ok());
  unlink(path);
}

}  // namespace
}  // namespace grantfs
