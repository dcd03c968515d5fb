// The cluster's small certificate authority: EC P-256 keys and X.509
// certificates made with OpenSSL's library (no `openssl` command needed).
//
// Every GrantFS process proves who it is with a certificate the cluster's CA
// signed. The certificate's common name says what it is:
//   server:NAME  a server (primary, replica or witness): serves and calls
//                servers; its certificate also names the DNS name
//                kServerTlsName, which every client checks (server/... calls
//                connect to addresses, not names)
//   node:NAME    a node's mount (and its agent)
//   admin:NAME   an operator's grantfsctl
// `grantfsctl init` makes a CA and the first certificates
// (docs/security.md); tests make theirs the same way.
#ifndef GRANTFS_COMMON_PKI_H_
#define GRANTFS_COMMON_PKI_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace grantfs {

// The DNS name in every server certificate; clients connect with it as the
// TLS target name, whatever address they dial.
inline constexpr char kServerTlsName[] = "grantfs-server";

// The longest option a certificate carries (X.509 bounds an organizational
// unit to 64 characters).
inline constexpr size_t kMaxOptionBytes = 64;

// A certificate and its private key, PEM.
struct CertAndKey {
  std::string cert_pem;
  std::string key_pem;
};

// A self-signed CA certificate named `common_name`.
absl::StatusOr<CertAndKey> MakeCertificateAuthority(const std::string& common_name,
                                                    absl::Time not_before, absl::Time not_after);

// A certificate for `common_name` ("server:a", "node:n1", "admin:ops"),
// signed by `ca`. Server certificates (common names "server:...") can serve
// TLS (with the DNS name kServerTlsName) and call other servers; the others
// can only call. `options` (a node's: "root,ro,subtree=/a", common/transport.h
// CallerPolicy) go in the subject's organizational units, signed with the
// rest: all but "subtree=" in the first, each "subtree=" in its own (each
// unit at most kMaxOptionBytes: X.509's bound; longer is InvalidArgument).
absl::StatusOr<CertAndKey> IssueCertificate(const CertAndKey& ca, const std::string& common_name,
                                            absl::Time not_before, absl::Time not_after,
                                            const std::string& options = "");

// The common name of a PEM certificate ("" when it has none).
absl::StatusOr<std::string> CertificateCommonName(const std::string& cert_pem);
// The options of a PEM certificate (its organizational units, joined with
// ","; "" when none).
absl::StatusOr<std::string> CertificateOptions(const std::string& cert_pem);

}  // namespace grantfs

#endif  // GRANTFS_COMMON_PKI_H_
