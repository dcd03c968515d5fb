// gRPC keepalive between GrantFS clients and servers.
//
// Clients that know several servers (failover) ping every second and drop a
// connection whose ping is not answered within a second, so a server cut
// off by the network (no RST) is noticed in about 2 s instead of after the
// call deadline (client/rpc_client.cc). A gRPC server's defaults treat such
// pings as abuse (more often than every 5 minutes without data, or without
// any call in flight) and answer with GOAWAY "too_many_pings"; servers
// accept them with AllowClientKeepalive.
#ifndef GRANTFS_COMMON_KEEPALIVE_H_
#define GRANTFS_COMMON_KEEPALIVE_H_

#include <grpcpp/server_builder.h>

namespace grantfs {

// Sets on `builder`: GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS
// 500 (half the clients' ping period), GRPC_ARG_HTTP2_MAX_PING_STRIKES 0 (no
// GOAWAY for pings that come sooner) and GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS
// 1 (pings of an idle connection are fine). Call before BuildAndStart.
void AllowClientKeepalive(grpc::ServerBuilder* builder);

}  // namespace grantfs

#endif  // GRANTFS_COMMON_KEEPALIVE_H_
