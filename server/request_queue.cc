#include "server/request_queue.h"

#include <algorithm>
#include <utility>

#include "glog/logging.h"

namespace grantfs {

RequestQueue::RequestQueue(const RequestQueueOptions& options) : options_(options) {
  const int workers = std::max(options_.workers, 1);
  const int per_source = options_.max_running_per_source > 0 ? options_.max_running_per_source
                                                             : std::max(workers / 2, 1);
  const int threads[3] = {workers, std::max(options_.control_workers, 1),
                          std::max(options_.liveness_workers, 1)};
  for (int i = 0; i < 3; ++i) {
    LaneState* l = lanes(i);
    l->max_per_source = std::max<size_t>(options_.max_queued_per_source, 1);
    // Only ordinary calls are capped per source: the other lanes' calls are
    // few and short, and must not wait for each other.
    l->max_running = static_cast<size_t>(i == 0 ? per_source : threads[i]);
    for (int t = 0; t < threads[i]; ++t) l->threads.emplace_back([this, l] { Work(l); });
  }
}

RequestQueue::~RequestQueue() { Stop(); }

void RequestQueue::MaybeRing(LaneState* l, uint64_t id, Source* s) {
  if (!s->in_ring && !s->tasks.empty() && s->running < l->max_running) {
    s->in_ring = true;
    l->ring.push_back(id);
    l->work.Signal();
  }
}

bool RequestQueue::Submit(Lane which, uint64_t source, Task task, size_t bytes) {
  LaneState& l = lane(which);
  absl::MutexLock lock(&l.mu);
  if (l.stopping) return false;
  Source& s = l.sources[source];
  const size_t max_bytes = options_.max_queued_bytes;
  const bool too_many_bytes =
      s.tasks.empty() ? l.queued > 0 && l.queued_bytes + bytes > 2 * max_bytes
                      : s.bytes + bytes > max_bytes / 4 || l.queued_bytes + bytes > max_bytes;
  if (l.queued >= options_.max_queued || s.tasks.size() >= l.max_per_source || too_many_bytes) {
    const size_t mine = s.tasks.size();
    if (s.tasks.empty() && s.running == 0) l.sources.erase(source);
    ++l.refused;
    // At most one line every 10 s: an overload shows in the log without
    // flooding it.
    const absl::Time now = absl::Now();
    if (now - l.last_refusal_log > absl::Seconds(10)) {
      l.last_refusal_log = now;
      LOG(WARNING) << "request queue full (" << l.queued << " calls waiting, " << mine
                   << " of this client, " << l.queued_bytes
                   << " bytes of requests): refused a call, " << l.refused
                   << " refused since start; clients retry";
    }
    return false;
  }
  s.tasks.push_back(Waiting{std::move(task), bytes});
  s.bytes += bytes;
  ++l.queued;
  l.queued_bytes += bytes;
  ++l.admitted;
  l.peak_queued = std::max<uint64_t>(l.peak_queued, l.queued);
  MaybeRing(&l, source, &s);
  return true;
}

void RequestQueue::Work(LaneState* l) {
  for (;;) {
    Task task;
    uint64_t id = 0;
    {
      absl::MutexLock lock(&l->mu);
      while (l->ring.empty() && !l->stopping) l->work.Wait(&l->mu);
      // Stopping with nothing left to start: a call still running re-rings
      // its source, and its worker (still in this loop) runs what is left.
      if (l->ring.empty()) return;
      id = l->ring.front();
      l->ring.pop_front();
      Source& s = l->sources[id];
      s.in_ring = false;
      task = std::move(s.tasks.front().task);
      l->queued_bytes -= s.tasks.front().bytes;
      s.bytes -= s.tasks.front().bytes;
      s.tasks.pop_front();
      --l->queued;
      ++l->running;
      ++s.running;
      // To the back of the round: the others' oldest calls start before
      // this source's next one.
      MaybeRing(l, id, &s);
    }
    std::move(task)();
    absl::MutexLock lock(&l->mu);
    --l->running;
    auto it = l->sources.find(id);
    --it->second.running;
    if (it->second.tasks.empty() && it->second.running == 0) {
      l->sources.erase(it);
    } else {
      MaybeRing(l, id, &it->second);
    }
  }
}

void RequestQueue::Stop() {
  absl::MutexLock serial(&stop_mu_);
  for (int i = 0; i < 3; ++i) {
    LaneState* l = lanes(i);
    {
      absl::MutexLock lock(&l->mu);
      l->stopping = true;
      l->work.SignalAll();
    }
    for (std::thread& t : l->threads) t.join();
    l->threads.clear();
  }
}

RequestQueueStats RequestQueue::Stats() const {
  RequestQueueStats out;
  for (int i = 0; i < 3; ++i) {
    const LaneState* l = lanes(i);
    absl::MutexLock lock(&l->mu);
    out.admitted += l->admitted;
    out.refused += l->refused;
    out.queued += l->queued;
    out.running += l->running;
    out.peak_queued = std::max<uint64_t>(out.peak_queued, l->peak_queued);
    out.sources += l->sources.size();
  }
  return out;
}

}  // namespace grantfs
