#include "common/keepalive.h"

#include <grpc/grpc.h>

#include <algorithm>

#include "absl/time/clock.h"

namespace grantfs {

void AllowClientKeepalive(grpc::ServerBuilder* builder) {
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 500);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
}

void SetFastKeepalive(grpc::ChannelArguments* args) {
  args->SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 1000);
  args->SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 1000);
  args->SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args->SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
}

void SetReconnect(grpc::ChannelArguments* args, int max_backoff_ms) {
  args->SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args->SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 1000);
  args->SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, max_backoff_ms);
}

bool WaitForConnected(grpc::Channel* channel, absl::Duration d) {
  const auto deadline = absl::ToChronoTime(absl::Now() + d);
  grpc_connectivity_state st = channel->GetState(/*try_to_connect=*/true);
  for (;;) {
    // Returns at the next state change or at the deadline, polling meanwhile.
    if (!channel->WaitForStateChange(st, deadline)) return false;
    st = channel->GetState(/*try_to_connect=*/true);
    if (st == GRPC_CHANNEL_READY) return true;
  }
}

bool WaitToRetry(grpc::Channel* channel, absl::Duration d, absl::Mutex* mu,
                 absl::FunctionRef<bool()> stop) {
  const absl::Time until = absl::Now() + d;
  for (;;) {
    if (stop()) return false;
    const absl::Duration left = until - absl::Now();
    if (left <= absl::ZeroDuration()) return true;
    mu->Unlock();
    const bool connected = WaitForConnected(channel, std::min(left, absl::Milliseconds(100)));
    mu->Lock();
    if (connected) return !stop();
  }
}

}  // namespace grantfs
