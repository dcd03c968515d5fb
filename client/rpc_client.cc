#include "client/rpc_client.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace grantfs {

absl::StatusOr<std::unique_ptr<RpcClient>> RpcClient::Create(const RpcClientOptions& options) {
  if (options.servers.empty()) return absl::InvalidArgumentError("no server address");
  std::unique_ptr<RpcClient> c(new RpcClient(options));
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(16 << 20);
  args.SetMaxSendMessageSize(16 << 20);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  c->channel_ =
      grpc::CreateCustomChannel(options.servers.front(), grpc::InsecureChannelCredentials(), args);
  c->stub_ = proto::GrantFs::NewStub(c->channel_);
  return c;
}

void RpcClient::PrepareContext(grpc::ClientContext* ctx, absl::Duration timeout) const {
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  if (!options_.secret.empty()) ctx->AddMetadata("x-grantfs-secret", options_.secret);
}

void RpcClient::NoteCredit(const grpc::ClientContext& ctx) {
  const auto& md = ctx.GetServerTrailingMetadata();
  auto it = md.find("x-grantfs-credit");
  if (it == md.end()) return;
  uint64_t credit = 0;
  if (absl::SimpleAtoi(absl::string_view(it->second.data(), it->second.size()), &credit) &&
      credit > 0) {
    credit_bytes_.store(credit, std::memory_order_relaxed);
  }
}

absl::Status RpcClient::Failed(const char* name, const grpc::Status& s) const {
  LOG(WARNING) << "rpc " << name << " to " << options_.servers.front()
               << " failed: " << s.error_code() << " " << s.error_message();
  return ToStatus(name, s);
}

absl::Status RpcClient::ToStatus(const char* name, const grpc::Status& s) {
  if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return ErrnoStatus(ETIMEDOUT, absl::StrCat(name, ": ", s.error_message()));
  }
  if (s.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
    return ErrnoStatus(EACCES, absl::StrCat(name, ": ", s.error_message()));
  }
  return ErrnoStatus(EIO, absl::StrCat(name, ": ", s.error_message()));
}

}  // namespace grantfs
