#include "client/cluster_client.h"

#include <algorithm>
#include <utility>

namespace grantfs {

absl::StatusOr<std::unique_ptr<ClusterClient>> ClusterClient::Create(
    const ClusterClientOptions& options) {
  if (options.servers.empty()) return absl::InvalidArgumentError("no server address");
  std::unique_ptr<ClusterClient> c(new ClusterClient(options));
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(16 << 20);
  // A primary cut off without RST is noticed in about 2 s (the servers
  // accept pings this frequent: common/keepalive.h).
  SetFastKeepalive(&args);
  SetReconnect(&args, 300);
  for (const std::string& address : options.servers) {
    if (address.empty()) return absl::InvalidArgumentError("empty server address");
    Server s;
    s.address = address;
    s.channel = options.transport.Connect(address, args);
    s.stub = proto::Cluster::NewStub(s.channel);
    c->servers_.push_back(std::move(s));
    c->addresses_.push_back(address);
  }
  return c;
}

void ClusterClient::WaitForAConnection(absl::Duration d) {
  d = std::max(d, absl::Milliseconds(100));
  const absl::Duration slice = d / static_cast<int64_t>(servers_.size());
  for (Server& s : servers_) WaitForConnected(s.channel.get(), slice);
}

}  // namespace grantfs
