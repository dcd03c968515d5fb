#include "client/rpc_client.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/keepalive.h"
#include "common/transport.h"
#include "common/wire.h"
#include "glog/logging.h"

namespace grantfs {

std::vector<std::string> ServerAddresses(absl::string_view list) {
  std::vector<std::string> out;
  for (absl::string_view s : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    std::string server(s);
    if (server.find(':') == std::string::npos) server += ":7420";
    out.push_back(std::move(server));
  }
  return out;
}
namespace {

std::string CodeName(const grpc::Status& s) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(s.error_code()));
}

// The full name of GrantFs.Write (proto/grantfs.proto), as the generated
// stub calls it.
constexpr char kWriteMethod[] = "/grantfs.proto.GrantFs/Write";
}  // namespace

RpcClient::RpcClient(const RpcClientOptions& options)
    : options_(options),
      // With a second server to go to, waiting long before trying again only
      // lengthens the failover pause.
      max_backoff_(options.servers.size() > 1 ? absl::Milliseconds(200) : absl::Seconds(1)) {}

absl::Status RpcClient::Write(proto::WriteRequest* req, std::shared_ptr<const std::string> data,
                              proto::WriteReply* reply) {
  return CallWith(
      "Write", req, reply,
      [this, &data](size_t index, grpc::ClientContext* ctx, const proto::WriteRequest& r,
                    proto::WriteReply* out) {
        // The wire form of r (which has no data) followed by field `data`:
        // its key and length, then its bytes in a slice of their own
        // (common/wire.h). The server parses one ordinary WriteRequest.
        std::string head = r.SerializeAsString();
        AppendBytesKey(proto::WriteRequest::kDataFieldNumber, data->size(), &head);
        grpc::Slice slices[2] = {grpc::Slice(head), SharedSlice(data)};
        grpc::ByteBuffer request(slices, data->empty() ? 1 : 2);
        return grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, proto::WriteReply,
                                                 grpc::ByteBuffer, grpc::protobuf::MessageLite>(
            servers_[index].channel.get(), *servers_[index].write_method, ctx, request, out);
      });
}

absl::StatusOr<std::unique_ptr<RpcClient>> RpcClient::Create(const RpcClientOptions& options) {
  if (options.servers.empty()) return absl::InvalidArgumentError("no server address");
  if (options.clock == nullptr) return absl::InvalidArgumentError("no clock");
  for (const std::string& address : options.servers) {
    if (address.empty()) return absl::InvalidArgumentError("empty server address");
  }
  std::unique_ptr<RpcClient> c(new RpcClient(options));
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(16 << 20);
  args.SetMaxSendMessageSize(16 << 20);
  if (options.servers.size() > 1) {
    // Failure detection by deadline: a server cut off by the network (no
    // RST) is dropped after one unanswered ping, about 2 s, and calls in
    // flight on it fail with UNAVAILABLE and move to the next server, instead
    // of waiting for call_timeout. Servers must accept pings this frequent,
    // also on idle connections, or they answer GOAWAY "too_many_pings":
    // grantfs::AllowClientKeepalive (common/keepalive.h) sets
    // GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS 500,
    // GRPC_ARG_HTTP2_MAX_PING_STRIKES 0 and
    // GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS 1 on the server builder.
    SetFastKeepalive(&args);
  } else {
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  }
  SetReconnect(&args, options.servers.size() > 1 ? 300 : 1000);
  for (const std::string& address : options.servers) {
    Server server;
    server.channel =
        options.connect ? options.connect(address, args) : options.transport.Connect(address, args);
    server.stub = proto::GrantFs::NewStub(server.channel);
    server.write_method = std::make_unique<grpc::internal::RpcMethod>(
        kWriteMethod, grpc::internal::RpcMethod::NORMAL_RPC, server.channel);
    c->servers_.push_back(std::move(server));
  }
  return c;
}

bool RpcClient::ShouldFailover(const grpc::Status& s) const {
  return s.error_code() == grpc::StatusCode::UNAVAILABLE ||
         (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED && servers_.size() > 1);
}

size_t RpcClient::Failover(size_t seen, const grpc::Status& why) {
  if (servers_.size() == 1) return 0;
  const size_t next = (seen + 1) % servers_.size();
  size_t expected = seen;
  if (!current_.compare_exchange_strong(expected, next)) return expected;
  LOG(WARNING) << "server " << options_.servers[seen] << " unreachable or not the primary ("
               << CodeName(why) << ": " << why.error_message() << "), trying "
               << options_.servers[next];
  if (on_failover_) on_failover_();
  return next;
}

bool RpcClient::WaitForServer(absl::Duration d) {
  return WaitForConnected(servers_[current()].channel.get(), d);
}

void RpcClient::PrepareContext(grpc::ClientContext* ctx, absl::Duration timeout) const {
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  options_.transport.AddTo(ctx);
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

absl::Status RpcClient::Failed(const char* name, size_t index, const grpc::Status& s) const {
  LOG(WARNING) << "rpc " << name << " to " << options_.servers[index] << " failed: " << CodeName(s)
               << ": " << s.error_message();
  return ToStatus(name, s);
}

absl::Status RpcClient::ToStatus(const char* name, const grpc::Status& s) {
  if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return ErrnoStatus(ETIMEDOUT, absl::StrCat(name, ": ", s.error_message()));
  }
  // Refused by the server's checks of who calls (common/transport.h).
  if (s.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
      s.error_code() == grpc::StatusCode::PERMISSION_DENIED) {
    return ErrnoStatus(EACCES, absl::StrCat(name, ": ", s.error_message()));
  }
  return ErrnoStatus(EIO, absl::StrCat(name, ": ", s.error_message()));
}

}  // namespace grantfs
