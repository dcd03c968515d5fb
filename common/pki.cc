#include "common/pki.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace grantfs {
namespace {

struct Free {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(X509* p) const { X509_free(p); }
  void operator()(BIO* p) const { BIO_free(p); }
  void operator()(BIGNUM* p) const { BN_free(p); }
};
template <typename T>
using Owned = std::unique_ptr<T, Free>;

// The status of a failed OpenSSL call: `what` and OpenSSL's error queue.
absl::Status SslError(const std::string& what) {
  std::string detail;
  while (unsigned long e = ERR_get_error()) {  // NOLINT(runtime/int): OpenSSL's type
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    absl::StrAppend(&detail, detail.empty() ? "" : "; ", buf);
  }
  return absl::InternalError(absl::StrCat(what, ": ", detail.empty() ? "failed" : detail));
}

absl::StatusOr<std::string> ToPem(X509* cert) {
  Owned<BIO> bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509(bio.get(), cert) != 1) return SslError("writing a certificate");
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);  // NOLINT(runtime/int)
  return std::string(data, n);
}

absl::StatusOr<std::string> ToPem(EVP_PKEY* key) {
  Owned<BIO> bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1)
    return SslError("writing a private key");
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);  // NOLINT(runtime/int)
  return std::string(data, n);
}

// A signed certificate and its key, as PEM.
absl::StatusOr<CertAndKey> BothAsPem(X509* cert, EVP_PKEY* key) {
  absl::StatusOr<std::string> cert_pem = ToPem(cert);
  if (!cert_pem.ok()) return cert_pem.status();
  absl::StatusOr<std::string> key_pem = ToPem(key);
  if (!key_pem.ok()) return key_pem.status();
  return CertAndKey{*std::move(cert_pem), *std::move(key_pem)};
}

absl::StatusOr<Owned<X509>> CertFromPem(const std::string& pem) {
  Owned<BIO> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  Owned<X509> cert(bio ? PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!cert) return SslError("reading a certificate");
  return cert;
}

absl::StatusOr<Owned<EVP_PKEY>> KeyFromPem(const std::string& pem) {
  Owned<BIO> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  Owned<EVP_PKEY> key(bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr)
                          : nullptr);
  if (!key) return SslError("reading a private key");
  return key;
}

absl::Status AddExtension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (ext == nullptr) return SslError(absl::StrCat("making extension ", value));
  const int ok = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  if (ok != 1) return SslError(absl::StrCat("adding extension ", value));
  return absl::OkStatus();
}

// A certificate for `key` named `common_name`, valid in [not_before,
// not_after], not yet signed; its issuer is `issuer` (itself when null).
absl::StatusOr<Owned<X509>> NewCertificate(EVP_PKEY* key, const std::string& common_name,
                                           absl::Time not_before, absl::Time not_after,
                                           X509* issuer, const std::string& options = "") {
  Owned<X509> cert(X509_new());
  if (!cert || X509_set_version(cert.get(), 2) != 1) return SslError("new certificate");
  Owned<BIGNUM> serial(BN_new());
  if (!serial || BN_rand(serial.get(), 120, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1 ||
      BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(cert.get())) == nullptr) {
    return SslError("certificate serial");
  }
  time_t from = absl::ToTimeT(not_before), to = absl::ToTimeT(not_after);
  if (X509_time_adj_ex(X509_getm_notBefore(cert.get()), 0, 0, &from) == nullptr ||
      X509_time_adj_ex(X509_getm_notAfter(cert.get()), 0, 0, &to) == nullptr) {
    return SslError("certificate validity");
  }
  X509_NAME* name = X509_get_subject_name(cert.get());
  if (X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC,
                                 reinterpret_cast<const unsigned char*>("GrantFS"), -1, -1,
                                 0) != 1 ||
      X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                                 reinterpret_cast<const unsigned char*>(common_name.c_str()), -1,
                                 -1, 0) != 1) {
    return SslError("certificate name");
  }
  // The options but "subtree=" in the first organizational unit, as
  // before there were subtrees (a server that reads only the first keeps
  // them); each "subtree=" in one of its own: X.509 bounds a unit to 64
  // bytes, and a path takes most of one.
  std::vector<std::string> units(1);
  for (absl::string_view word : absl::StrSplit(options, ',', absl::SkipWhitespace())) {
    const std::string w(absl::StripAsciiWhitespace(word));
    if (absl::StartsWith(w, "subtree=")) {
      units.push_back(w);
    } else {
      absl::StrAppend(&units[0], units[0].empty() ? "" : ",", w);
    }
  }
  if (units[0].empty()) units.erase(units.begin());
  for (const std::string& w : units) {
    if (w.size() > kMaxOptionBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("the certificate option \"", w, "\" is over ", kMaxOptionBytes, " bytes"));
    }
    if (X509_NAME_add_entry_by_txt(name, "OU", MBSTRING_ASC,
                                   reinterpret_cast<const unsigned char*>(w.c_str()), -1, -1,
                                   0) != 1) {
      return SslError("certificate options");
    }
  }
  if (X509_set_issuer_name(cert.get(), issuer != nullptr ? X509_get_subject_name(issuer) : name) !=
          1 ||
      X509_set_pubkey(cert.get(), key) != 1) {
    return SslError("certificate issuer and key");
  }
  return cert;
}

}  // namespace

absl::StatusOr<CertAndKey> MakeCertificateAuthority(const std::string& common_name,
                                                    absl::Time not_before, absl::Time not_after) {
  Owned<EVP_PKEY> key(EVP_EC_gen("P-256"));
  if (!key) return SslError("making an EC key");
  absl::StatusOr<Owned<X509>> cert =
      NewCertificate(key.get(), common_name, not_before, not_after, nullptr);
  if (!cert.ok()) return cert.status();
  X509* c = cert->get();
  for (const auto& [nid, value] :
       {std::pair<int, const char*>{NID_basic_constraints, "critical,CA:TRUE,pathlen:0"},
        {NID_key_usage, "critical,keyCertSign,cRLSign"},
        {NID_subject_key_identifier, "hash"}}) {
    if (absl::Status s = AddExtension(c, c, nid, value); !s.ok()) return s;
  }
  if (X509_sign(c, key.get(), EVP_sha256()) == 0) return SslError("signing the CA certificate");
  return BothAsPem(c, key.get());
}

absl::StatusOr<CertAndKey> IssueCertificate(const CertAndKey& ca, const std::string& common_name,
                                            absl::Time not_before, absl::Time not_after,
                                            const std::string& options) {
  absl::StatusOr<Owned<X509>> ca_cert = CertFromPem(ca.cert_pem);
  if (!ca_cert.ok()) return ca_cert.status();
  absl::StatusOr<Owned<EVP_PKEY>> ca_key = KeyFromPem(ca.key_pem);
  if (!ca_key.ok()) return ca_key.status();
  Owned<EVP_PKEY> key(EVP_EC_gen("P-256"));
  if (!key) return SslError("making an EC key");
  absl::StatusOr<Owned<X509>> cert =
      NewCertificate(key.get(), common_name, not_before, not_after, ca_cert->get(), options);
  if (!cert.ok()) return cert.status();
  X509* c = cert->get();
  const bool server = absl::StartsWith(common_name, "server:");
  std::vector<std::pair<int, std::string>> exts = {
      {NID_basic_constraints, "critical,CA:FALSE"},
      {NID_key_usage, "critical,digitalSignature,keyAgreement"},
      {NID_ext_key_usage, server ? "serverAuth,clientAuth" : "clientAuth"},
      {NID_authority_key_identifier, "keyid:always"}};
  if (server) exts.push_back({NID_subject_alt_name, absl::StrCat("DNS:", kServerTlsName)});
  for (const auto& [nid, value] : exts) {
    if (absl::Status s = AddExtension(c, ca_cert->get(), nid, value); !s.ok()) return s;
  }
  if (X509_sign(c, ca_key->get(), EVP_sha256()) == 0) return SslError("signing a certificate");
  return BothAsPem(c, key.get());
}

namespace {

// Entry `nid` of the certificate's subject; every such entry, joined with
// ",", when `all`.
absl::StatusOr<std::string> SubjectField(const std::string& cert_pem, int nid, bool all) {
  absl::StatusOr<Owned<X509>> cert = CertFromPem(cert_pem);
  if (!cert.ok()) return cert.status();
  const X509_NAME* name = X509_get_subject_name(cert->get());
  std::string out;
  for (int i = X509_NAME_get_index_by_NID(name, nid, -1); i >= 0;
       i = X509_NAME_get_index_by_NID(name, nid, i)) {
    const ASN1_STRING* data = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, i));
    if (data == nullptr) continue;
    absl::StrAppend(&out, out.empty() ? "" : ",",
                    absl::string_view(reinterpret_cast<const char*>(ASN1_STRING_get0_data(data)),
                                      static_cast<size_t>(ASN1_STRING_length(data))));
    if (!all) break;
  }
  return out;
}

}  // namespace

absl::StatusOr<std::string> CertificateCommonName(const std::string& cert_pem) {
  return SubjectField(cert_pem, NID_commonName, /*all=*/false);
}

absl::StatusOr<std::string> CertificateOptions(const std::string& cert_pem) {
  return SubjectField(cert_pem, NID_organizationalUnitName, /*all=*/true);
}

}  // namespace grantfs
