// gRPC keepalive and reconnection between GrantFS clients and servers.
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

#include <grpcpp/channel.h>
#include <grpcpp/server_builder.h>
#include <grpcpp/support/channel_arguments.h>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace grantfs {

// Sets on `builder`: GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS
// 500 (half the clients' ping period), GRPC_ARG_HTTP2_MAX_PING_STRIKES 0 (no
// GOAWAY for pings that come sooner) and GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS
// 1 (pings of an idle connection are fine). Call before BuildAndStart.
void AllowClientKeepalive(grpc::ServerBuilder* builder);

// The client side: pings every 1 s, a connection whose ping is not answered
// within 1 s is dropped (a peer cut off without RST is noticed in ~2 s).
// The server must AllowClientKeepalive.
void SetFastKeepalive(grpc::ChannelArguments* args);

// Reconnection of a channel between GrantFS processes: attempts 100 ms
// apart at first, growing to `max_backoff_ms`. gRPC reads
// GRPC_ARG_MIN_RECONNECT_BACKOFF_MS as the time one connection attempt (TCP
// connect and HTTP/2 handshake) may take before it is abandoned, not as a
// backoff: it is 1 s here (100 ms cut off the handshakes of a loaded server
// that had just taken over).
void SetReconnect(grpc::ChannelArguments* args, int max_backoff_ms);

// Waits up to `d` for `channel` to become connected, polling gRPC meanwhile;
// true when it did (try the server now), false at the end of `d`. A channel
// that is connected already leads to a server that refused a call: the whole
// of `d` is waited then (unless the connection drops and comes back).
//
// Every wait between attempts to reach a server must go through here, not
// through a sleep: gRPC's synchronous client makes progress on a connection
// attempt (TCP connect, TLS and HTTP/2 handshakes) only while some thread
// polls, and a call on a channel in TRANSIENT_FAILURE fails at once without
// polling. With only sleeps between attempts, each handshake stalls until
// its 1 s deadline (SetReconnect), and only gRPC's 5 s backup poller moves
// one on by chance: a mount stayed cut off from a restarted server for 15 s
// to more than 90 s.
bool WaitForConnected(grpc::Channel* channel, absl::Duration d);

// WaitForConnected for a retry loop that holds `mu`: in slices of at most
// 100 ms, `mu` released during each and taken again to call `stop` (with
// `mu` held) before the next, so that stopping waits one slice at most.
// True when the wait ended (connected, or `d` passed) without `stop`.
bool WaitToRetry(grpc::Channel* channel, absl::Duration d, absl::Mutex* mu,
                 absl::FunctionRef<bool()> stop) ABSL_EXCLUSIVE_LOCKS_REQUIRED(*mu);

}  // namespace grantfs

#endif  // GRANTFS_COMMON_KEEPALIVE_H_
