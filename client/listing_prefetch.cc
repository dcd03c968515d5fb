#include "client/listing_prefetch.h"

#include <utility>

#include "glog/logging.h"

namespace grantfs {

ListingPrefetch::ListingPrefetch(const ListingPrefetchOptions& options,
                                 std::function<absl::Status(const Creds&, uint64_t)> fetch,
                                 std::function<bool(uint64_t)> listed)
    : options_(options), fetch_(std::move(fetch)), listed_(std::move(listed)) {
  for (size_t i = 0; i < options_.threads; ++i) workers_.emplace_back([this] { Loop(); });
}

ListingPrefetch::~ListingPrefetch() { Stop(); }

void ListingPrefetch::Stop() {
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
    queue_.clear();
  }
  for (std::thread& t : workers_) {
    if (t.joinable()) t.join();
  }
}

void ListingPrefetch::Saw(uint64_t dir, uint64_t cookie, const std::vector<uint64_t>& subdirs) {
  absl::MutexLock l(&mu_);
  if (cookie == 0) {  // read anew: the old order goes
    auto old = subdirs_.find(dir);
    if (old != subdirs_.end()) {
      for (uint64_t sub : old->second) {
        auto place = places_.find(sub);
        if (place != places_.end() && place->second.parent == dir) places_.erase(place);
      }
      known_ -= old->second.size();
      subdirs_.erase(old);
    }
  }
  if (subdirs.empty()) return;
  if (known_ + subdirs.size() > options_.max_known) {
    subdirs_.clear();
    places_.clear();
    known_ = 0;
  }
  std::vector<uint64_t>& list = subdirs_[dir];
  for (uint64_t sub : subdirs) {
    // A page read twice (two readers of one directory) adds nothing.
    auto [place, added] = places_.try_emplace(sub, Place{dir, list.size()});
    if (!added && place->second.parent == dir) continue;
    place->second = Place{dir, list.size()};
    list.push_back(sub);
    ++known_;
  }
}

void ListingPrefetch::Reading(const Creds& c, uint64_t dir) {
  if (options_.window == 0) return;
  std::vector<uint64_t> candidates;
  {
    absl::MutexLock l(&mu_);
    if (stopping_) return;
    auto place = places_.find(dir);
    if (place == places_.end()) return;
    auto list = subdirs_.find(place->second.parent);
    if (list == subdirs_.end()) return;
    const std::vector<uint64_t>& subs = list->second;
    for (size_t i = place->second.index + 1;
         i < subs.size() && i <= place->second.index + options_.window; ++i) {
      if (!pending_.contains(subs[i])) candidates.push_back(subs[i]);
    }
  }
  // Not under mu_: the lease cache has its own lock.
  std::vector<uint64_t> wanted;
  for (uint64_t sub : candidates) {
    if (!listed_(sub)) wanted.push_back(sub);
  }
  if (wanted.empty()) return;
  absl::MutexLock l(&mu_);
  for (uint64_t sub : wanted) {
    if (!pending_.insert(sub).second) continue;
    if (queue_.size() >= options_.max_queued) {
      pending_.erase(queue_.front().dir);
      queue_.pop_front();
      ++stats_.dropped;
    }
    queue_.push_back(Job{c, sub});
  }
}

bool ListingPrefetch::Await(uint64_t dir, absl::Duration timeout) {
  absl::MutexLock l(&mu_);
  if (!pending_.contains(dir)) return false;
  if (!running_.contains(dir)) {
    for (auto it = queue_.begin(); it != queue_.end(); ++it) {
      if (it->dir == dir) {
        queue_.erase(it);
        break;
      }
    }
    pending_.erase(dir);
    return false;
  }
  auto done = [this, dir]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !running_.contains(dir); };
  return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
}

ListingPrefetch::Stats ListingPrefetch::stats() {
  absl::MutexLock l(&mu_);
  return stats_;
}

void ListingPrefetch::Loop() {
  absl::MutexLock l(&mu_);
  for (;;) {
    auto ready = [this]()
                     ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !queue_.empty(); };
    mu_.Await(absl::Condition(&ready));
    if (stopping_) return;
    Job job = std::move(queue_.front());
    queue_.pop_front();
    running_.insert(job.dir);
    mu_.Unlock();
    // Read by the walk meanwhile: nothing to do.
    const bool fetch = !listed_(job.dir);
    const absl::Status s = fetch ? fetch_(job.creds, job.dir) : absl::OkStatus();
    if (!s.ok()) VLOG(1) << "reading ahead the listing of " << job.dir << ": " << s;
    mu_.Lock();
    pending_.erase(job.dir);
    running_.erase(job.dir);
    if (!s.ok()) {
      ++stats_.failed;
    } else if (fetch) {
      ++stats_.fetched;
    }
  }
}

}  // namespace grantfs
