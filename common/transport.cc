#include "common/transport.h"

#include <cerrno>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/errno_status.h"
#include "common/names.h"
#include "common/pki.h"
#include "glog/logging.h"

namespace grantfs {
namespace {

absl::StatusOr<std::string> ReadWhole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return ErrnoStatus(errno, absl::StrCat("reading ", path));
  std::ostringstream out;
  out << in.rdbuf();
  if (out.str().empty()) return absl::InvalidArgumentError(absl::StrCat(path, " is empty"));
  return out.str();
}

const char* KindName(int kind) {
  switch (kind) {
    case kServerPeer:
      return "server";
    case kNodePeer:
      return "node";
    case kAdminPeer:
      return "admin";
  }
  return "unknown";
}

}  // namespace

int PeerKindOf(const std::string& common_name) {
  if (absl::StartsWith(common_name, "server:")) return kServerPeer;
  if (absl::StartsWith(common_name, "node:")) return kNodePeer;
  if (absl::StartsWith(common_name, "admin:")) return kAdminPeer;
  return 0;
}

Transport Transport::Insecure(std::string secret) {
  Transport t;
  t.secret_ = std::move(secret);
  return t;
}

absl::StatusOr<Transport> Transport::FromDirectory(const std::string& dir,
                                                   const std::string& identity,
                                                   std::string secret) {
  absl::StatusOr<std::string> ca = ReadWhole(dir + "/ca.crt");
  if (!ca.ok()) return ca.status();
  absl::StatusOr<std::string> cert = ReadWhole(absl::StrCat(dir, "/", identity, ".crt"));
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadWhole(absl::StrCat(dir, "/", identity, ".key"));
  if (!key.ok()) return key.status();
  absl::StatusOr<Transport> t =
      FromPem(*std::move(ca), *std::move(cert), *std::move(key), std::move(secret));
  if (!t.ok()) {
    return absl::Status(t.status().code(),
                        absl::StrCat(dir, "/", identity, ".crt: ", t.status().message()));
  }
  return t;
}

absl::StatusOr<Transport> Transport::FromPem(std::string ca_pem, std::string cert_pem,
                                             std::string key_pem, std::string secret) {
  absl::StatusOr<std::string> cn = CertificateCommonName(cert_pem);
  if (!cn.ok()) return cn.status();
  if (PeerKindOf(*cn) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the certificate names \"", *cn, "\", not server:, node: or admin:"));
  }
  Transport t;
  t.secret_ = std::move(secret);
  t.ca_pem_ = std::move(ca_pem);
  t.cert_pem_ = std::move(cert_pem);
  t.key_pem_ = std::move(key_pem);
  t.common_name_ = *std::move(cn);
  return t;
}

int Transport::kind() const { return PeerKindOf(common_name_); }

CallerPolicy ParseNodeOptions(const std::string& options, std::string* unknown) {
  CallerPolicy p;
  for (absl::string_view word : absl::StrSplit(options, ',', absl::SkipWhitespace())) {
    word = absl::StripAsciiWhitespace(word);
    if (word == "root") {
      p.root = true;
    } else if (word == "ro") {
      p.read_only = true;
    } else if (word == "anon") {
      p.anon = true;
    } else if (absl::ConsumePrefix(&word, "subtree=")) {
      absl::StatusOr<std::string> path = NormalizePath(word);
      if (path.ok() && !p.subtree.empty() && p.subtree != (*path == "/" ? "" : *path)) {
        path = absl::InvalidArgumentError("a second, different subtree");
      }
      if (path.ok() && p.subtree == kUnreachableSubtree) {
        path = absl::InvalidArgumentError("after a subtree that cannot be read");
      }
      if (path.ok()) {
        p.subtree = *path == "/" ? "" : *path;
      } else {
        p.subtree = kUnreachableSubtree;
        if (unknown != nullptr) {
          absl::StrAppend(unknown, unknown->empty() ? "" : ",", "subtree=", word, " (",
                          path.status().message(), ")");
        }
      }
    } else if (unknown != nullptr) {
      absl::StrAppend(unknown, unknown->empty() ? "" : ",", word);
    }
  }
  return p;
}

CallerPolicy Transport::PolicyOf(const grpc::ServerContextBase& ctx) const {
  CallerPolicy trusted;
  trusted.root = true;
  if (!secure()) return trusted;
  std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
  if (auth == nullptr) return CallerPolicy{};
  std::vector<grpc::string_ref> pem = auth->FindPropertyValues("x509_pem_cert");
  if (pem.empty()) return CallerPolicy{};
  const std::string cert(pem[0].data(), pem[0].size());
  {
    absl::MutexLock l(&policies_->mu);
    auto it = policies_->by_cert.find(cert);
    if (it != policies_->by_cert.end()) return it->second;
  }
  CallerPolicy p;  // what cannot be read allows the least
  p.read_only = p.anon = true;
  p.subtree = kUnreachableSubtree;
  absl::StatusOr<std::string> cn = CertificateCommonName(cert);
  absl::StatusOr<std::string> options = CertificateOptions(cert);
  if (cn.ok() && PeerKindOf(*cn) == kAdminPeer) {
    p = trusted;
  } else if (options.ok()) {
    std::string unknown;
    p = ParseNodeOptions(*options, &unknown);
    if (!unknown.empty()) {
      LOG(WARNING) << "the certificate of \"" << (cn.ok() ? *cn : "?")
                   << "\" names options this server does not know, ignored: " << unknown;
    }
  }
  absl::MutexLock l(&policies_->mu);
  if (policies_->by_cert.size() >= 4096) policies_->by_cert.clear();  // a bound, not an LRU
  policies_->by_cert[cert] = p;
  return p;
}

std::shared_ptr<grpc::Channel> Transport::Connect(const std::string& address,
                                                  grpc::ChannelArguments args) const {
  if (!secure()) {
    return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  }
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = ca_pem_;
  o.pem_private_key = key_pem_;
  o.pem_cert_chain = cert_pem_;
  // Servers are dialled by address; every server certificate names this.
  args.SetSslTargetNameOverride(kServerTlsName);
  return grpc::CreateCustomChannel(address, grpc::SslCredentials(o), args);
}

std::shared_ptr<grpc::ServerCredentials> Transport::ServerCredentials() const {
  if (!secure()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions o(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  o.pem_root_certs = ca_pem_;
  o.pem_key_cert_pairs.push_back({key_pem_, cert_pem_});
  return grpc::SslServerCredentials(o);
}

void Transport::AddTo(grpc::ClientContext* ctx) const {
  if (!secret_.empty()) ctx->AddMetadata("x-grantfs-secret", secret_);
}

std::string Transport::PeerName(const grpc::ServerContextBase& ctx) const {
  if (!secure()) return "";
  std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
  if (auth == nullptr) return "";
  std::vector<grpc::string_ref> cn = auth->FindPropertyValues("x509_common_name");
  return cn.empty() ? "" : std::string(cn[0].data(), cn[0].size());
}

grpc::Status Transport::Authorize(const grpc::ServerContextBase& ctx, int allowed_kinds,
                                  const char* who) const {
  if (!secret_.empty()) {
    auto it = ctx.client_metadata().find("x-grantfs-secret");
    if (it == ctx.client_metadata().end() ||
        std::string(it->second.data(), it->second.size()) != secret_) {
      LOG(WARNING) << who << ": refused a call from " << ctx.peer() << ": bad cluster secret";
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "bad cluster secret");
    }
  }
  if (!secure()) return grpc::Status::OK;
  // The TLS handshake proved the certificate (our CA, valid now); what is
  // left is whether its kind may make this call.
  const std::string peer = PeerName(ctx);
  const int kind = PeerKindOf(peer);
  if ((kind & allowed_kinds) == 0) {
    LOG(WARNING) << who << ": refused a call from " << ctx.peer() << " (\"" << peer << "\"): a "
                 << KindName(kind) << " identity may not make it";
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        absl::StrCat("a ", KindName(kind), " identity may not make this call"));
  }
  return grpc::Status::OK;
}

}  // namespace grantfs
