#include "server/request_queue.h"

#include <algorithm>
#include <utility>

#include "glog/logging.h"

namespace grantfs {

RequestQueue::RequestQueue(const RequestQueueOptions& options) : options_(options) {
  work_.max_per_source = std::max<size_t>(options_.max_queued_per_source, 1);
  control_.max_per_source = std::max<size_t>(options_.max_queued_per_source, 1);
  for (int i = 0; i < std::max(options_.workers, 1); ++i) {
    work_.threads.emplace_back([this] { Work(&work_); });
  }
  for (int i = 0; i < std::max(options_.control_workers, 1); ++i) {
    control_.threads.emplace_back([this] { Work(&control_); });
  }
}

RequestQueue::~RequestQueue() { Stop(); }

bool RequestQueue::Submit(Lane which, uint64_t source, Task task) {
  LaneState& l = lane(which);
  absl::MutexLock lock(&l.mu);
  if (l.stopping) return false;
  Source& s = l.sources[source];
  if (l.queued >= options_.max_queued || s.tasks.size() >= l.max_per_source) {
    if (s.tasks.empty()) l.sources.erase(source);
    ++l.refused;
    // One line per power of two: an overload shows in the log without
    // flooding it.
    if ((l.refused & (l.refused - 1)) == 0) {
      LOG(WARNING) << "request queue full (" << l.queued << " calls waiting, " << s.tasks.size()
                   << " of this source): refused a call, " << l.refused
                   << " refused so far; the client retries";
    }
    return false;
  }
  if (s.tasks.empty()) l.ring.push_back(source);
  s.tasks.push_back(std::move(task));
  ++l.queued;
  ++l.admitted;
  l.peak_queued = std::max<uint64_t>(l.peak_queued, l.queued);
  l.work.Signal();
  return true;
}

void RequestQueue::Work(LaneState* l) {
  for (;;) {
    Task task;
    {
      absl::MutexLock lock(&l->mu);
      while (l->ring.empty() && !l->stopping) l->work.Wait(&l->mu);
      if (l->ring.empty()) return;  // stopping, and nothing is left to run
      const uint64_t id = l->ring.front();
      l->ring.pop_front();
      auto it = l->sources.find(id);
      task = std::move(it->second.tasks.front());
      it->second.tasks.pop_front();
      // The source goes to the back of the round: the others' oldest
      // calls run before its next one.
      if (it->second.tasks.empty()) {
        l->sources.erase(it);
      } else {
        l->ring.push_back(id);
      }
      --l->queued;
      ++l->running;
    }
    std::move(task)();
    absl::MutexLock lock(&l->mu);
    --l->running;
  }
}

void RequestQueue::Stop() {
  absl::MutexLock serial(&stop_mu_);
  for (LaneState* l : {&work_, &control_}) {
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
  for (const LaneState* l : {&work_, &control_}) {
    absl::MutexLock lock(&l->mu);
    out.admitted += l->admitted;
    out.refused += l->refused;
    out.queued += l->queued;
    out.running += l->running;
    out.peak_queued += l->peak_queued;
    out.sources += l->sources.size();
  }
  return out;
}

}  // namespace grantfs
