#include "client/read_ahead.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/test_util.h"
#include "common/clock.h"
#include "gtest/gtest.h"

namespace grantfs {
namespace {

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * 1024;
constexpr uint64_t kIno = 7;

// Non-zero bytes that differ per offset and per version of the file.
std::string Content(uint64_t size, int version) {
  std::string s(size, '\0');
  for (uint64_t i = 0; i < size; ++i) {
    s[i] = static_cast<char>(1 + (i * 131 + i / 4096 + version * 17) % 251);
  }
  return s;
}

// The server side: one file per inode, the same content for both read
// paths; counts every call; read-ahead fetches can be held at a gate or
// made to fail.
class FakeServer {
 public:
  ReadAhead::ReadFn Fetch() {
    return [this](uint64_t ino, uint64_t offset, size_t size) -> absl::StatusOr<std::string> {
      absl::MutexLock l(&mu_);
      ++fetches_;
      ++in_fetch_;
      fetch_offsets_.push_back(offset);
      auto open = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !gate_closed_; };
      mu_.Await(absl::Condition(&open));
      --in_fetch_;
      if (fail_fetches_) return absl::UnavailableError("fake: fetch fails");
      return SliceLocked(ino, offset, size);
    };
  }
  ReadAhead::ReadFn Direct() {
    return [this](uint64_t ino, uint64_t offset, size_t size) -> absl::StatusOr<std::string> {
      absl::MutexLock l(&mu_);
      ++directs_;
      return SliceLocked(ino, offset, size);
    };
  }

  void Set(uint64_t ino, std::string content) {
    absl::MutexLock l(&mu_);
    files_[ino] = std::move(content);
  }
  std::string Get(uint64_t ino) {
    absl::MutexLock l(&mu_);
    return files_[ino];
  }
  void CloseGate() {
    absl::MutexLock l(&mu_);
    gate_closed_ = true;
  }
  void OpenGate() {
    absl::MutexLock l(&mu_);
    gate_closed_ = false;
  }
  void FailFetches(bool fail) {
    absl::MutexLock l(&mu_);
    fail_fetches_ = fail;
  }
  int fetches() {
    absl::MutexLock l(&mu_);
    return fetches_;
  }
  int in_fetch() {
    absl::MutexLock l(&mu_);
    return in_fetch_;
  }
  int directs() {
    absl::MutexLock l(&mu_);
    return directs_;
  }
  std::vector<uint64_t> fetch_offsets() {
    absl::MutexLock l(&mu_);
    return fetch_offsets_;
  }

 private:
  std::string SliceLocked(uint64_t ino, uint64_t offset, size_t size)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const std::string& f = files_[ino];
    if (offset >= f.size()) return std::string();
    return f.substr(offset, size);
  }

  absl::Mutex mu_;
  std::map<uint64_t, std::string> files_ ABSL_GUARDED_BY(mu_);
  bool gate_closed_ ABSL_GUARDED_BY(mu_) = false;
  bool fail_fetches_ ABSL_GUARDED_BY(mu_) = false;
  int fetches_ ABSL_GUARDED_BY(mu_) = 0;
  int in_fetch_ ABSL_GUARDED_BY(mu_) = 0;
  int directs_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<uint64_t> fetch_offsets_ ABSL_GUARDED_BY(mu_);
};

ReadAheadOptions SmallOptions() {
  ReadAheadOptions o;
  o.window_bytes = 8 * kMiB;
  o.initial_window_bytes = 1 * kMiB;
  o.extent_bytes = 1 * kMiB;
  o.memory_limit = 64 * kMiB;
  o.threads = 3;
  o.wait_timeout = absl::Seconds(30);
  return o;
}

class ReadAheadTest : public ::testing::Test {
 protected:
  void Make(const ReadAheadOptions& o, ReadAhead::DirtyFn dirty = nullptr) {
    ra_ = std::make_unique<ReadAhead>(o, server_.Fetch(), std::move(dirty));
    ra_->Start();
  }
  void TearDown() override {
    server_.OpenGate();
    if (ra_) ra_->Stop();
  }
  std::string Read(uint64_t offset, size_t size, uint64_t ino = kIno) {
    absl::StatusOr<std::string> r = ra_->Read(ino, offset, size, server_.Direct());
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : std::string();
  }
  // Reads [0, size) in `chunk` pieces, as the kernel sends a sequential
  // reader's requests; stops at a short read.
  std::string ReadAll(uint64_t size, uint64_t chunk, uint64_t ino = kIno) {
    std::string out;
    for (uint64_t off = 0; off < size + chunk; off += chunk) {
      std::string got = Read(off, chunk, ino);
      out += got;
      if (got.size() < chunk) break;
    }
    return out;
  }
  FakeServer server_;
  std::unique_ptr<ReadAhead> ra_;
};

TEST_F(ReadAheadTest, SequentialReaderIsServedFromPrefetchedExtents) {
  const uint64_t size = 16 * kMiB + 100 * kKiB;
  server_.Set(kIno, Content(size, 0));
  Make(SmallOptions());
  EXPECT_TRUE(SameBytes(server_.Get(kIno), ReadAll(size, 128 * kKiB)));
  // The first read goes to the server (no pattern yet); from the second on,
  // every extent is fetched once and the reads copy from it. Without a size
  // from open, extents past the end may be fetched before the short one
  // says where it is (at most a window's worth).
  EXPECT_EQ(server_.directs(), 1);
  ASSERT_TRUE(WaitFor([&] { return server_.in_fetch() == 0; }));
  std::vector<uint64_t> offsets = server_.fetch_offsets();
  std::sort(offsets.begin(), offsets.end());
  ASSERT_GE(offsets.size(), 17u);
  ASSERT_LE(offsets.size(), 17u + 8u);
  for (size_t i = 0; i < offsets.size(); ++i) EXPECT_EQ(offsets[i], i * kMiB);
  ReadAhead::Stats st = ra_->stats();
  EXPECT_EQ(st.served_bytes, size - 128 * kKiB);
  EXPECT_EQ(st.fetch_errors, 0u);
  EXPECT_EQ(st.timeouts, 0u);
}

TEST_F(ReadAheadTest, WindowStartsSmallAndGrowsToItsLimit) {
  const uint64_t size = 64 * kMiB;
  server_.Set(kIno, Content(size, 0));
  Make(SmallOptions());
  Read(0, 128 * kKiB);
  EXPECT_EQ(ra_->stats().issued, 0u);  // one read is no pattern
  Read(128 * kKiB, 128 * kKiB);
  // Sequential: the initial window (1 MiB past the 256 KiB read) is two
  // extents.
  EXPECT_EQ(ra_->stats().issued, 2u);
  uint64_t off = 256 * kKiB;
  for (; off < 6 * kMiB; off += 128 * kKiB) {
    Read(off, 128 * kKiB);
    // Never more than the largest window (plus the extent being read) ahead.
    EXPECT_LE(ra_->stats().issued * kMiB, off + 128 * kKiB + 8 * kMiB + kMiB) << off;
  }
  // After a few extents the window is at its 8 MiB limit.
  EXPECT_GE(ra_->stats().issued * kMiB, off + 8 * kMiB);
  EXPECT_EQ(server_.directs(), 1);
}

TEST_F(ReadAheadTest, RandomReadsFetchNothingAhead) {
  const uint64_t size = 256 * kMiB;
  server_.Set(kIno, Content(size, 0));
  Make(SmallOptions());
  const std::string want = server_.Get(kIno);
  std::mt19937_64 rng(42);
  uint64_t prev = 0;
  int reads = 0;
  for (int i = 0; i < 200; ++i) {
    const uint64_t off = rng() % (size / 4096) * 4096;
    // Random means far from the previous read (in a 256 MiB file, almost
    // always).
    if (off + 4 * kMiB > prev && off < prev + 4 * kMiB) continue;
    prev = off;
    ++reads;
    EXPECT_TRUE(SameBytes(want.substr(off, 16 * kKiB), Read(off, 16 * kKiB)));
  }
  EXPECT_GT(reads, 150);
  EXPECT_EQ(server_.fetches(), 0);
  EXPECT_EQ(ra_->stats().issued, 0u);
  EXPECT_EQ(server_.directs(), reads);
}

TEST_F(ReadAheadTest, ReadsOutOfOrderWithinTheWindowStaySequential) {
  // FUSE worker threads may hand over the kernel's requests out of order.
  const uint64_t size = 12 * kMiB;
  server_.Set(kIno, Content(size, 0));
  Make(SmallOptions());
  const std::string want = server_.Get(kIno);
  const uint64_t chunk = 128 * kKiB;
  for (uint64_t off = 0; off < size; off += 2 * chunk) {
    EXPECT_TRUE(SameBytes(want.substr(off + chunk, chunk), Read(off + chunk, chunk)));
    EXPECT_TRUE(SameBytes(want.substr(off, chunk), Read(off, chunk)));
  }
  EXPECT_EQ(server_.directs(), 1);
  EXPECT_EQ(ra_->stats().served_bytes, size - 128 * kKiB);
}

TEST_F(ReadAheadTest, SizeFromOpenBoundsTheFetches) {
  const uint64_t size = 5 * kMiB + 3;
  server_.Set(kIno, Content(size, 0));
  Make(SmallOptions());
  ra_->Opened(kIno, size);
  EXPECT_TRUE(SameBytes(server_.Get(kIno), ReadAll(size, 128 * kKiB)));
  ASSERT_TRUE(WaitFor([&] { return server_.in_fetch() == 0; }));
  EXPECT_EQ(server_.fetches(), 6);  // extents 0..5, nothing past the size
  EXPECT_EQ(server_.directs(), 1);
}

TEST_F(ReadAheadTest, InvalidateDiscardsFetchesInFlight) {
  const uint64_t size = 8 * kMiB;
  server_.Set(kIno, Content(size, 0));
  Make(SmallOptions());
  Read(0, 128 * kKiB);
  server_.CloseGate();
  std::string got;
  std::thread reader([&] { got = Read(128 * kKiB, 128 * kKiB); });
  // The reader waits for extent 0, whose fetch is held at the gate.
  ASSERT_TRUE(WaitFor([&] { return server_.in_fetch() > 0 && ra_->stats().waits > 0; }));
  // The file changes (a write here or a push from the server) while the
  // fetch is in flight; the fetch then returns the old bytes.
  const std::string old_content = server_.Get(kIno);
  server_.Set(kIno, Content(size, 1));
  ra_->Invalidate(kIno);
  reader.join();  // woken by the drop: reads the new bytes directly
  EXPECT_TRUE(SameBytes(server_.Get(kIno).substr(128 * kKiB, 128 * kKiB), got));
  // Let the stale fetches return old bytes: they must be discarded.
  server_.Set(kIno, old_content);
  server_.OpenGate();
  ASSERT_TRUE(WaitFor([&] { return ra_->stats().discarded >= 1 && server_.in_fetch() == 0; }));
  server_.Set(kIno, Content(size, 1));
  const std::string want = server_.Get(kIno);
  for (uint64_t off = 256 * kKiB; off < size; off += 128 * kKiB) {
    ASSERT_TRUE(SameBytes(want.substr(off, 128 * kKiB), Read(off, 128 * kKiB))) << off;
  }
  EXPECT_GT(ra_->stats().served_bytes, 0u);
}

TEST_F(ReadAheadTest, InvalidateDiscardsCompletedExtents) {
  const uint64_t size = 8 * kMiB;
  server_.Set(kIno, Content(size, 0));
  Make(SmallOptions());
  Read(0, 128 * kKiB);
  Read(128 * kKiB, 128 * kKiB);  // extents 0 and 1 fetched
  ASSERT_TRUE(WaitFor([&] { return ra_->stats().fetches == 2; }));
  server_.Set(kIno, Content(size, 1));
  // Without an invalidation the fetched (old) bytes are served: that is
  // the cache this test is about.
  EXPECT_TRUE(
      SameBytes(Content(size, 0).substr(256 * kKiB, 128 * kKiB), Read(256 * kKiB, 128 * kKiB)));
  ra_->Invalidate(kIno);
  EXPECT_TRUE(
      SameBytes(Content(size, 1).substr(384 * kKiB, 128 * kKiB), Read(384 * kKiB, 128 * kKiB)));
  EXPECT_TRUE(SameBytes(Content(size, 1), ReadAll(size, 128 * kKiB)));
}

TEST_F(ReadAheadTest, OpenInvalidatesAndTheLastReleaseDropsTheStream) {
  const uint64_t size = 8 * kMiB;
  server_.Set(kIno, Content(size, 0));
  Make(SmallOptions());
  ra_->Opened(kIno, size);
  ra_->Opened(kIno, size);
  Read(0, 128 * kKiB);
  Read(128 * kKiB, 128 * kKiB);
  ASSERT_TRUE(WaitFor([&] { return ra_->stats().fetches == 2; }));
  server_.Set(kIno, Content(size, 1));
  ra_->Opened(kIno, size);  // close-to-open: a new open sees the new data
  EXPECT_TRUE(
      SameBytes(Content(size, 1).substr(256 * kKiB, 128 * kKiB), Read(256 * kKiB, 128 * kKiB)));
  ra_->Released(kIno);
  ra_->Released(kIno);
  EXPECT_EQ(ra_->stats().streams, 1u);
  ra_->Released(kIno);
  EXPECT_EQ(ra_->stats().streams, 0u);
  ASSERT_TRUE(WaitFor([&] { return server_.in_fetch() == 0; }));
  ASSERT_TRUE(WaitFor([&] { return ra_->stats().held_bytes == 0; }));
}

TEST_F(ReadAheadTest, NoReadAheadWhileTheWriteCacheHoldsData) {
  const uint64_t size = 8 * kMiB;
  server_.Set(kIno, Content(size, 0));
  std::atomic<bool> dirty{true};
  Make(SmallOptions(), [&](uint64_t ino) { return ino == kIno && dirty.load(); });
  EXPECT_TRUE(SameBytes(server_.Get(kIno), ReadAll(size, 128 * kKiB)));
  EXPECT_EQ(server_.fetches(), 0);
  // Once flushed, a sequential reader gets read-ahead again.
  dirty = false;
  ra_->Invalidate(kIno);  // the flush's write bumped the generation
  EXPECT_TRUE(SameBytes(server_.Get(kIno), ReadAll(size, 128 * kKiB)));
  EXPECT_GT(server_.fetches(), 0);
}

TEST_F(ReadAheadTest, ShortExtentMarksTheEndOfFile) {
  const uint64_t size = 2 * kMiB + 300 * kKiB + 17;
  server_.Set(kIno, Content(size, 0));
  Make(SmallOptions());
  const std::string want = server_.Get(kIno);
  EXPECT_TRUE(SameBytes(want, ReadAll(size, 128 * kKiB)));
  ASSERT_TRUE(WaitFor([&] { return server_.in_fetch() == 0; }));
  // Once the short extent said where the end is, nothing past it is fetched
  // and reads across or past it are answered from the extents.
  const int fetches = server_.fetches();
  const int directs = server_.directs();
  EXPECT_EQ(directs, 1);
  EXPECT_TRUE(SameBytes(want.substr(size - 1000), Read(size - 1000, 128 * kKiB)));
  EXPECT_TRUE(Read(size, 128 * kKiB).empty());
  EXPECT_EQ(server_.directs(), directs);
  EXPECT_EQ(server_.fetches(), fetches);
  // The file grows (another node appends): the push drops the old end.
  server_.Set(kIno, Content(size + 5 * kMiB, 0));
  ra_->Invalidate(kIno);
  EXPECT_EQ(Read(size, 128 * kKiB).size(), 128 * kKiB);
}

TEST_F(ReadAheadTest, FileOfWholeExtentsEndsWithAnEmptyExtent) {
  const uint64_t size = 3 * kMiB;
  server_.Set(kIno, Content(size, 0));
  Make(SmallOptions());
  // The last read, at the end, is answered by the empty extent there.
  EXPECT_TRUE(SameBytes(server_.Get(kIno), ReadAll(size, 256 * kKiB)));
  EXPECT_EQ(server_.directs(), 1);
}

TEST_F(ReadAheadTest, FailedFetchesFallBackToDirectReads) {
  const uint64_t size = 6 * kMiB;
  server_.Set(kIno, Content(size, 0));
  FakeClock clock;
  ReadAheadOptions o = SmallOptions();
  o.clock = &clock;
  o.retry_after = absl::Seconds(1);
  Make(o);
  server_.FailFetches(true);
  EXPECT_TRUE(SameBytes(server_.Get(kIno), ReadAll(size, 128 * kKiB)));
  // The first extents failed; until retry_after passes, nothing more is
  // fetched and every read goes to the server directly.
  EXPECT_EQ(ra_->stats().fetch_errors, 2u);
  EXPECT_EQ(server_.fetches(), 2);
  EXPECT_EQ(ra_->stats().served_bytes, 0u);
  // The server answers again: after retry_after, read-ahead resumes.
  server_.FailFetches(false);
  clock.Advance(absl::Seconds(2));
  const int directs = server_.directs();
  EXPECT_TRUE(SameBytes(server_.Get(kIno), ReadAll(size, 128 * kKiB)));
  EXPECT_LE(server_.directs(), directs + 2);
  EXPECT_GT(ra_->stats().served_bytes, 0u);
}

TEST_F(ReadAheadTest, WaitForAHungFetchTimesOutAndReadsDirectly) {
  const uint64_t size = 4 * kMiB;
  server_.Set(kIno, Content(size, 0));
  ReadAheadOptions o = SmallOptions();
  o.wait_timeout = absl::Milliseconds(50);
  Make(o);
  Read(0, 128 * kKiB);
  server_.CloseGate();
  EXPECT_TRUE(
      SameBytes(server_.Get(kIno).substr(128 * kKiB, 128 * kKiB), Read(128 * kKiB, 128 * kKiB)));
  EXPECT_EQ(ra_->stats().timeouts, 1u);
  EXPECT_EQ(server_.directs(), 2);
}

TEST_F(ReadAheadTest, MemoryStaysUnderTheLimitWithManyReaders) {
  ReadAheadOptions o = SmallOptions();
  o.window_bytes = 2 * kMiB;
  o.memory_limit = 12 * kMiB;  // 3 streams of 2 + 2 MiB
  Make(o);
  const uint64_t size = 16 * kMiB;
  for (int f = 0; f < 5; ++f) server_.Set(100 + f, Content(size, f));
  for (uint64_t off = 0; off < size; off += 256 * kKiB) {
    // Two steady sequential readers, and a third stream that moves between
    // three other files, each time evicting the least recently read.
    const uint64_t churn = 102 + (off / (256 * kKiB)) % 3;
    for (uint64_t ino : {uint64_t{100}, uint64_t{101}, churn}) {
      ASSERT_TRUE(SameBytes(server_.Get(ino).substr(off, 256 * kKiB), Read(off, 256 * kKiB, ino)));
      ReadAhead::Stats st = ra_->stats();
      ASSERT_LE(st.held_bytes, 12 * kMiB);
      ASSERT_LE(st.streams, 3u);
    }
  }
  // The steady readers were served from read-ahead; the churning one never
  // got a pattern.
  EXPECT_EQ(ra_->stats().served_bytes, 2 * (size - 256 * kKiB));
}

TEST_F(ReadAheadTest, MemoryLimitHoldsWhileFetchesHang) {
  ReadAheadOptions o = SmallOptions();
  o.window_bytes = 2 * kMiB;
  o.memory_limit = 8 * kMiB;  // 2 streams of 2 + 2 MiB
  o.wait_timeout = absl::Milliseconds(1);
  Make(o);
  const uint64_t size = 32 * kMiB;
  for (int f = 0; f < 6; ++f) server_.Set(100 + f, Content(size, f));
  server_.CloseGate();
  // Streams come and go (evicted) while their fetches hang: discarded
  // fetches stay counted until they return, and hold back new ones.
  uint64_t most = 0;
  for (int round = 0; round < 2; ++round) {
    for (int f = 0; f < 6; ++f) {
      for (uint64_t off = 0; off < 2 * kMiB; off += 256 * kKiB) {
        ASSERT_TRUE(SameBytes(server_.Get(100 + f).substr(off, 256 * kKiB),
                              Read(off, 256 * kKiB, 100 + f)));
        most = std::max(most, ra_->stats().held_bytes);
        ASSERT_LE(ra_->stats().held_bytes, 8 * kMiB);
      }
    }
  }
  EXPECT_EQ(most, 8 * kMiB);  // the limit was reached, and held
  server_.OpenGate();
  ASSERT_TRUE(WaitFor([&] { return server_.in_fetch() == 0; }));
}

TEST_F(ReadAheadTest, StopWakesWaitingReadersAndJoinsThePool) {
  const uint64_t size = 4 * kMiB;
  server_.Set(kIno, Content(size, 0));
  Make(SmallOptions());
  Read(0, 128 * kKiB);
  server_.CloseGate();
  std::atomic<bool> done{false};
  std::string got;
  std::thread reader([&] {
    got = Read(128 * kKiB, 128 * kKiB);
    done = true;
  });
  ASSERT_TRUE(WaitFor([&] { return ra_->stats().waits > 0; }));
  std::thread stopper([&] { ra_->Stop(); });
  // The reader does not wait for the hung fetch: it reads directly.
  ASSERT_TRUE(WaitFor([&] { return done.load(); }));
  reader.join();
  EXPECT_TRUE(SameBytes(server_.Get(kIno).substr(128 * kKiB, 128 * kKiB), got));
  server_.OpenGate();  // Stop() joins the fetch once it returns
  stopper.join();
  // After Stop every read is direct.
  const int fetches = server_.fetches();
  EXPECT_TRUE(
      SameBytes(server_.Get(kIno).substr(256 * kKiB, 128 * kKiB), Read(256 * kKiB, 128 * kKiB)));
  EXPECT_EQ(server_.fetches(), fetches);
}

TEST_F(ReadAheadTest, NeverServesDataOlderThanTheLastInvalidation) {
  // A writer keeps changing the whole file (every byte = its version) and
  // invalidating; readers read sequentially. Every byte a read returns must
  // be at least the version that was complete when the read started.
  const uint64_t size = 8 * kMiB;
  auto uniform = [](int v) { return std::string(8 * kMiB, static_cast<char>(v)); };
  server_.Set(kIno, uniform(1));
  ReadAheadOptions o = SmallOptions();
  Make(o);
  std::atomic<int> done_version{1};
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (int v = 2; v <= 120; ++v) {
      absl::SleepFor(absl::Microseconds(300 + (v * 7919) % 700));
      server_.Set(kIno, uniform(v));
      ra_->Invalidate(kIno);
      done_version = v;
    }
    stop = true;
  });
  auto reader = [&] {
    while (!stop.load()) {
      for (uint64_t off = 0; off < size && !stop.load(); off += 128 * kKiB) {
        const int floor = done_version.load();
        const std::string got = Read(off, 128 * kKiB);
        ASSERT_EQ(got.size(), 128 * kKiB);
        for (char ch : got) {
          ASSERT_GE(static_cast<int>(static_cast<unsigned char>(ch)), floor) << off;
        }
      }
    }
  };
  std::thread r1(reader), r2(reader);
  writer.join();
  r1.join();
  r2.join();
  EXPECT_GT(ra_->stats().served_bytes, 0u);
}

}  // namespace
}  // namespace grantfs
