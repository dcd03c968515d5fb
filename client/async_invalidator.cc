#include "client/async_invalidator.h"

#include <utility>

namespace grantfs {

AsyncInvalidator::AsyncInvalidator(Invalidator* target, size_t max_queued)
    : target_(target), max_queued_(max_queued), thread_([this] { Loop(); }) {}

AsyncInvalidator::~AsyncInvalidator() { Stop(); }

void AsyncInvalidator::Stop() {
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void AsyncInvalidator::InvalidateInode(uint64_t ino, bool data) {
  Push(Item{ino, data, false, {}});
}

void AsyncInvalidator::InvalidateEntry(uint64_t parent, const std::string& name) {
  Push(Item{parent, false, true, name});
}

void AsyncInvalidator::Push(Item item) {
  absl::MutexLock l(&mu_);
  if (stopping_) return;
  if (queue_.size() >= max_queued_) {
    queue_.pop_front();
    ++dropped_;
  }
  item.seq = ++pushed_;
  queue_.push_back(std::move(item));
}

bool AsyncInvalidator::AwaitEntries(uint64_t except, absl::Duration timeout) {
  absl::MutexLock l(&mu_);
  const uint64_t upto = pushed_;
  // Items are handed over one at a time, in order: done once no entry of
  // another directory pushed before the call is left; given up (done too)
  // at the first entry of `except` before any such, since neither it nor
  // anything behind it moves until the caller returns.
  auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (stopping_) return true;
    if (busy_seq_ != 0 && busy_seq_ <= upto && busy_entry_) return busy_parent_ == except;
    for (const Item& item : queue_) {
      if (item.seq > upto) break;
      if (item.entry) return item.ino == except;
    }
    return true;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
}

uint64_t AsyncInvalidator::dropped() {
  absl::MutexLock l(&mu_);
  return dropped_;
}

void AsyncInvalidator::Loop() {
  absl::MutexLock l(&mu_);
  for (;;) {
    auto ready = [this]()
                     ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !queue_.empty(); };
    mu_.Await(absl::Condition(&ready));
    if (stopping_) return;
    Item item = std::move(queue_.front());
    queue_.pop_front();
    busy_seq_ = item.seq;
    busy_entry_ = item.entry;
    busy_parent_ = item.ino;
    mu_.Unlock();
    if (item.entry) {
      target_->InvalidateEntry(item.ino, item.name);
    } else {
      target_->InvalidateInode(item.ino, item.data);
    }
    mu_.Lock();
    busy_seq_ = 0;
    busy_entry_ = false;
  }
}

}  // namespace grantfs
