// Certificates carry a node's options, and the server reads them back.
#include "common/pki.h"

#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "common/transport.h"
#include "gtest/gtest.h"

namespace grantfs {
namespace {

// The organizational units of a PEM certificate, in order.
std::vector<std::string> Units(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  std::vector<std::string> out;
  if (cert == nullptr) return out;
  const X509_NAME* name = X509_get_subject_name(cert);
  for (int i = X509_NAME_get_index_by_NID(name, NID_organizationalUnitName, -1); i >= 0;
       i = X509_NAME_get_index_by_NID(name, NID_organizationalUnitName, i)) {
    const ASN1_STRING* d = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, i));
    out.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(d)),
                     ASN1_STRING_length(d));
  }
  X509_free(cert);
  return out;
}

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
  // The options but the subtree stay in one first unit, as before subtrees
  // (a server that reads only the first keeps "ro"); the path has its own.
  EXPECT_EQ(Units(c->cert_pem), (std::vector<std::string>{"root,ro", "subtree=" + path}));
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
  for (const char* bad : {"subtree=a/b", "subtree=/a/../..", "subtree=", "subtree=/a,subtree=/b",
                          "subtree=a,subtree=/b"}) {
    unknown.clear();
    p = ParseNodeOptions(std::string("root,") + bad, &unknown);
    EXPECT_EQ(p.subtree, kUnreachableSubtree) << bad;
    EXPECT_TRUE(p.root);
    EXPECT_NE(unknown.find("subtree="), std::string::npos) << bad;
  }
}

}  // namespace
}  // namespace grantfs
