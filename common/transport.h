// How a GrantFS process talks to and listens for other GrantFS processes:
// TLS with certificates of the cluster's CA (common/pki.h) on every channel,
// mutual (each side proves who it is), and who may call what.
//
// A Transport holds the CA certificate, this process's certificate and key,
// and optionally the cluster secret (an extra shared password carried as
// call metadata, --secret_file). Transport() is the insecure one with no
// secret: it accepts every call. Processes build theirs from their flags
// (common/transport_flags.h); running without TLS takes --insecure.
//
// Callers are told apart by their certificate's common name: "server:..."
// (servers and the witness), "node:..." (mounts), "admin:..." (grantfsctl).
// Each service says which kinds it accepts (Authorize).
#ifndef GRANTFS_COMMON_TRANSPORT_H_
#define GRANTFS_COMMON_TRANSPORT_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace grantfs {

// Kinds of caller, as a bit set for Authorize.
enum PeerKind : int {
  kServerPeer = 1,  // "server:NAME"
  kNodePeer = 2,    // "node:NAME"
  kAdminPeer = 4,   // "admin:NAME"
};

// What a caller may do with the file system, from its certificate. A node's
// certificate names its options (common/pki.h, `grantfsctl init
// --node_options`): "root" (its root is root; without it uid 0 and gid 0
// become nobody, 65534: root squash), "ro" (read-only: changes get EROFS),
// "anon" (every caller on it is nobody: its uids are not trusted),
// "subtree=/PATH" (it reaches only the directory PATH and what is below it:
// server/subtree.h). Admins, and every caller of an insecure transport, get
// "root" and the whole tree.
struct CallerPolicy {
  bool root = false;
  bool read_only = false;
  bool anon = false;
  std::string subtree;  // "" or "/": the whole tree; else "/a/b" (normalized)
};
inline constexpr uint32_t kNobody = 65534;
// The subtree of a policy whose subtree option could not be read: the
// server refuses every call of such a node.
inline constexpr char kUnreachableSubtree[] = "/\x01unreachable";

// The policy of `options` ("root,ro,subtree=/a"); unknown words, and a
// subtree that is not an absolute path of valid names (no "." or "..") or
// that differs from one named before, are listed in *unknown (if given)
// and ignored, except that a bad subtree leaves the policy one that reaches
// nothing (kUnreachableSubtree): what cannot be read allows the least.
CallerPolicy ParseNodeOptions(const std::string& options, std::string* unknown = nullptr);

class Transport {
 public:
  // Insecure, no secret.
  Transport() = default;
  // No TLS; calls carry `secret` (if not "") and must carry it.
  static Transport Insecure(std::string secret);
  // TLS with `dir`/ca.crt and `dir`/`identity`.crt and .key. The identity's
  // certificate must be signed by the CA and valid now.
  static absl::StatusOr<Transport> FromDirectory(const std::string& dir,
                                                 const std::string& identity, std::string secret);
  // The same from PEM text.
  static absl::StatusOr<Transport> FromPem(std::string ca_pem, std::string cert_pem,
                                           std::string key_pem, std::string secret);

  bool secure() const { return !cert_pem_.empty(); }
  // This process's certificate's common name ("" when insecure).
  const std::string& common_name() const { return common_name_; }
  // The kind of this process's certificate (0 when insecure).
  int kind() const;

  // A channel to `address` (host:port) with `args` (TLS target name set
  // here when secure).
  std::shared_ptr<grpc::Channel> Connect(const std::string& address,
                                         grpc::ChannelArguments args) const;
  std::shared_ptr<grpc::ServerCredentials> ServerCredentials() const;
  // What every outgoing call carries (the secret).
  void AddTo(grpc::ClientContext* ctx) const;

  // OK when the call may go on: it carries the secret (when there is one)
  // and, when secure, its caller's kind is in `allowed_kinds`. Otherwise
  // UNAUTHENTICATED (no or bad secret) or PERMISSION_DENIED (wrong kind),
  // logged with `who`, the method and the caller.
  grpc::Status Authorize(const grpc::ServerContextBase& ctx, int allowed_kinds,
                         const char* who) const;

  // The caller's certificate common name; "" when this transport is
  // insecure (then nothing is looked up: it is on every call's path).
  std::string PeerName(const grpc::ServerContextBase& ctx) const;

  // What the caller of `ctx` may do (call after Authorize).
  CallerPolicy PolicyOf(const grpc::ServerContextBase& ctx) const;

 private:
  // Policies by certificate (the PEM text), parsed once.
  struct PolicyCache {
    absl::Mutex mu;
    std::map<std::string, CallerPolicy> by_cert ABSL_GUARDED_BY(mu);
  };

  std::string secret_;
  std::string ca_pem_, cert_pem_, key_pem_;
  std::string common_name_;
  std::shared_ptr<PolicyCache> policies_ = std::make_shared<PolicyCache>();
};

// The kind of a certificate's common name (0: none of them).
int PeerKindOf(const std::string& common_name);

}  // namespace grantfs

#endif  // GRANTFS_COMMON_TRANSPORT_H_
