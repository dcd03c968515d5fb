// The fakes the write cache tests share (write_cache_test.cc,
// write_cache_flush_test.cc): the server's grant side and data side, a model
// of what the server should hold, and a Harness of one cache over a grant
// pool over those fakes, on a fake clock. Test code only.
#ifndef GRANTFS_CLIENT_WRITE_CACHE_TEST_UTIL_H_
#define GRANTFS_CLIENT_WRITE_CACHE_TEST_UTIL_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/grant_pool.h"
#include "client/test_util.h"
#include "client/write_cache.h"
#include "common/clock.h"
#include "common/errno_status.h"
#include "gtest/gtest.h"

namespace grantfs {

inline constexpr uint64_t kBlock = 4096;
inline constexpr uint64_t kKiB = 1024;
inline constexpr uint64_t kMiB = 1024 * 1024;

inline std::string RandomBytes(std::mt19937_64* rng, size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t r = (*rng)();
    memcpy(&s[i], &r, std::min<size_t>(8, n - i));
  }
  return s;
}

// The grant side of the server: grants what is asked (at most `limit` per
// call) and counts every call and byte.
class FakeGrants {
 public:
  GrantPool::GrantRpc Rpc() {
    return [this](uint64_t wanted, uint64_t back) -> absl::StatusOr<uint64_t> {
      absl::MutexLock l(&mu_);
      ++calls_;
      const uint64_t g = std::min(wanted, limit_);
      granted_ += g;
      return g;
    };
  }
  void set_limit(uint64_t limit) {
    absl::MutexLock l(&mu_);
    limit_ = limit;
  }
  int calls() {
    absl::MutexLock l(&mu_);
    return calls_;
  }
  uint64_t granted() {
    absl::MutexLock l(&mu_);
    return granted_;
  }

 private:
  absl::Mutex mu_;
  uint64_t limit_ ABSL_GUARDED_BY(mu_) = UINT64_MAX;
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t granted_ ABSL_GUARDED_BY(mu_) = 0;
};

// The data side of the server: applies flushes to one string per inode,
// allocates 4 KiB blocks in its own bitmap and reports the newly allocated
// bytes as the grant used. A hook, run before a flush is applied and outside
// the fake's lock, can delay or fail it.
class FakeServer {
 public:
  struct Call {
    uint64_t ino;
    uint64_t offset;
    std::string data;
  };
  using Hook = std::function<absl::Status(int index, uint64_t ino, uint64_t offset,
                                          const std::string& data)>;

  WriteCache::FlushRpc Rpc() {
    return [this](uint64_t ino, uint64_t offset, std::shared_ptr<const std::string> data,
                  WriteCache::WriteTime time) {
      {
        absl::MutexLock l(&mu_);
        times_.push_back(time);
      }
      {
        absl::MutexLock l(&mu_);
        if (hold_) held_.push_back({data, *data});
      }
      return Flush(ino, offset, *data);
    };
  }
  void set_hook(Hook hook) {
    absl::MutexLock l(&mu_);
    hook_ = std::move(hook);
  }

  std::string content(uint64_t ino) {
    absl::MutexLock l(&mu_);
    auto it = files_.find(ino);
    return it == files_.end() ? std::string() : it->second;
  }
  uint64_t used() {
    absl::MutexLock l(&mu_);
    return used_;
  }
  int attempts() {
    absl::MutexLock l(&mu_);
    return static_cast<int>(attempt_sizes_.size());
  }
  std::vector<size_t> attempt_sizes() {
    absl::MutexLock l(&mu_);
    return attempt_sizes_;
  }
  // Flushes applied, in the order they were applied.
  std::vector<Call> applied() {
    absl::MutexLock l(&mu_);
    return applied_;
  }
  size_t applied_count() {
    absl::MutexLock l(&mu_);
    return applied_.size();
  }
  // The time each flush attempt carried, in the order they were sent.
  std::vector<WriteCache::WriteTime> times() {
    absl::MutexLock l(&mu_);
    return times_;
  }
  // Keeps every buffer handed to a flush alive, as gRPC may.
  void set_hold(bool hold) {
    absl::MutexLock l(&mu_);
    hold_ = hold;
  }
  // True when every buffer held (set_hold) still holds the bytes it held
  // when it was handed over.
  bool held_buffers_unchanged() {
    absl::MutexLock l(&mu_);
    for (const auto& [buf, then] : held_) {
      if (*buf != then) return false;
    }
    return true;
  }

 private:
  absl::StatusOr<WriteCache::FlushResult> Flush(uint64_t ino, uint64_t offset,
                                                const std::string& data) {
    int index;
    Hook hook;
    {
      absl::MutexLock l(&mu_);
      index = static_cast<int>(attempt_sizes_.size());
      attempt_sizes_.push_back(data.size());
      hook = hook_;
    }
    if (hook) {
      absl::Status s = hook(index, ino, offset, data);
      if (!s.ok()) return s;
    }
    absl::MutexLock l(&mu_);
    std::string& f = files_[ino];
    if (f.size() < offset + data.size()) f.resize(offset + data.size(), '\0');
    f.replace(offset, data.size(), data);
    uint64_t used = 0;
    if (!data.empty()) {
      for (uint64_t b = offset / kBlock; b <= (offset + data.size() - 1) / kBlock; ++b) {
        if (blocks_[ino].insert(b).second) used += kBlock;
      }
    }
    used_ += used;
    applied_.push_back({ino, offset, data});
    return WriteCache::FlushResult{used};
  }

  absl::Mutex mu_;
  Hook hook_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, std::string> files_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, std::set<uint64_t>> blocks_ ABSL_GUARDED_BY(mu_);
  uint64_t used_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<size_t> attempt_sizes_ ABSL_GUARDED_BY(mu_);
  std::vector<Call> applied_ ABSL_GUARDED_BY(mu_);
  bool hold_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<WriteCache::WriteTime> times_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<std::shared_ptr<const std::string>, std::string>> held_
      ABSL_GUARDED_BY(mu_);
};

// What the files should hold: every write applied in order.
struct Model {
  std::map<uint64_t, std::string> files;
  std::map<uint64_t, std::set<uint64_t>> blocks;

  void Write(uint64_t ino, uint64_t offset, const std::string& data) {
    std::string& f = files[ino];
    if (f.size() < offset + data.size()) f.resize(offset + data.size(), '\0');
    f.replace(offset, data.size(), data);
    for (uint64_t b = offset / kBlock; b <= (offset + data.size() - 1) / kBlock; ++b) {
      blocks[ino].insert(b);
    }
  }
  uint64_t BlockBytes() const {
    uint64_t n = 0;
    for (const auto& [ino, b] : blocks) n += b.size() * kBlock;
    return n;
  }
};

inline WriteCacheOptions SmallCache(int flushers = 2) {
  WriteCacheOptions o;
  o.dirty_limit = 4 * kMiB;
  o.extent_bytes = 1 * kMiB;
  o.flushers = flushers;
  return o;
}

inline GrantPoolOptions BigPool() {
  GrantPoolOptions o;
  o.initial_refill_bytes = 64 * kMiB;
  o.max_refill_bytes = 64 * kMiB;
  return o;
}

// Runs `f` (a flush) on a thread; if it has not returned within `limit`
// the test fails and `cache` is stopped to unblock it.
inline absl::Status WithinOrStop(WriteCache* cache, const std::function<absl::Status()>& f,
                                 absl::Duration limit = absl::Seconds(30)) {
  absl::Notification done;
  absl::Status result;
  std::thread t([&] {
    result = f();
    done.Notify();
  });
  if (!done.WaitForNotificationWithTimeout(limit)) {
    ADD_FAILURE() << "did not return within " << limit << "; stopping the cache";
    cache->Stop();
  }
  t.join();
  return result;
}

// One cache over a pool over fakes, on a fake clock (extents never come of
// age by themselves: they are sent when sealed, under pressure, or when
// someone flushes). Members are destroyed cache first.
struct Harness {
  explicit Harness(WriteCacheOptions copts = SmallCache(), GrantPoolOptions popts = BigPool())
      : pool(WithClock(popts), grants.Rpc()), cache(WithClock(copts), &pool, server.Rpc()) {}

  GrantPoolOptions WithClock(GrantPoolOptions o) {
    o.clock = &clock;
    return o;
  }
  WriteCacheOptions WithClock(WriteCacheOptions o) {
    o.clock = &clock;
    return o;
  }

  bool Write(uint64_t ino, uint64_t offset, const std::string& data) {
    return cache.Write(ino, offset, data.data(), data.size());
  }

  absl::Status Within(const std::function<absl::Status()>& f,
                      absl::Duration limit = absl::Seconds(30)) {
    return WithinOrStop(&cache, f, limit);
  }
  absl::Status FlushInode(uint64_t ino) {
    return Within([this, ino] { return cache.FlushInode(ino); });
  }
  absl::Status FlushAll() {
    return Within([this] { return cache.FlushAll(); });
  }

  FakeClock clock;
  FakeGrants grants;
  FakeServer server;
  GrantPool pool;
  WriteCache cache;
};

inline void ExpectAllSentInPieces(FakeServer& server, uint64_t extent_bytes) {
  const std::vector<size_t> sizes = server.attempt_sizes();
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_LE(sizes[i], extent_bytes) << "flush call " << i;
  }
}

}  // namespace grantfs

#endif  // GRANTFS_CLIENT_WRITE_CACHE_TEST_UTIL_H_
