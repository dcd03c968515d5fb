// Certificates carry a node's options, and the server reads them back.
#include "common/pki.h"

#include <string>

#include "absl/time/clock.h"
#include "common/transport.h"
#include "gtest/gtest.h"

namespace grantfs {
namespace {

class PkiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<CertAndKey> ca = MakeCertificateAuthority("ca", from_, to_);
    ASSERT_TRUE(ca.ok()) << ca.status();
    ca_ = *ca;
  }
  const absl::Time from_ = absl::Now() - absl::Hours(1), to_ = absl::Now() + absl::Hours(1);
  CertAndKey ca_;
};

TEST_F(PkiTest, EachOptionIsSignedInTheCertificateAndReadBack) {
  // A subtree's path would not fit in one 64-byte field with the rest.
  const std::string path = "/projects/team-with-a-rather-long-name/builds";
  absl::StatusOr<CertAndKey> c =
      IssueCertificate(ca_, "node:n1", from_, to_, "root, ro,subtree=" + path);
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<std::string> options = CertificateOptions(c->cert_pem);
  ASSERT_TRUE(options.ok());
  EXPECT_EQ(*options, "root,ro,subtree=" + path);
  EXPECT_EQ(*CertificateCommonName(c->cert_pem), "node:n1");
  std::string unknown;
  CallerPolicy p = ParseNodeOptions(*options, &unknown);
  EXPECT_TRUE(unknown.empty()) << unknown;
  EXPECT_TRUE(p.root);
  EXPECT_TRUE(p.read_only);
  EXPECT_FALSE(p.anon);
  EXPECT_EQ(p.subtree, path);
  // One option past X.509's 64 bytes is refused, not cut.
  c = IssueCertificate(ca_, "node:n2", from_, to_, "subtree=/" + std::string(60, 'a'));
  EXPECT_TRUE(absl::IsInvalidArgument(c.status())) << c.status();
  // No options: none read back.
  c = IssueCertificate(ca_, "node:n3", from_, to_);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*CertificateOptions(c->cert_pem), "");
}

TEST(ParseNodeOptions, ASubtreeThatCannotBeReadReachesNothing) {
  std::string unknown;
  CallerPolicy p = ParseNodeOptions("subtree=/a//b/", &unknown);
  EXPECT_EQ(p.subtree, "/a/b");
  EXPECT_TRUE(unknown.empty());
  EXPECT_EQ(ParseNodeOptions("subtree=/").subtree, "");  // the whole tree
  for (const char* bad : {"subtree=a/b", "subtree=/a/../..", "subtree="}) {
    unknown.clear();
    p = ParseNodeOptions(std::string("root,") + bad, &unknown);
    EXPECT_EQ(p.subtree, kUnreachableSubtree) << bad;
    EXPECT_TRUE(p.root);
    EXPECT_NE(unknown.find("subtree="), std::string::npos) << bad;
  }
}

}  // namespace
}  // namespace grantfs
