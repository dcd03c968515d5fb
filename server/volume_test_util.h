// The fixture the volume tests share (volume_test.cc, volume_data_test.cc,
// volume_sessions_test.cc): a 1 MiB volume in a temporary directory with a
// fake clock, no background thread and two clients a_ and b_, both root, and
// helpers that make files, truncate, read whole files and find chunk files.
// Test code only.
#ifndef GRANTFS_SERVER_VOLUME_TEST_UTIL_H_
#define GRANTFS_SERVER_VOLUME_TEST_UTIL_H_

#include <sys/stat.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/env.h"
#include "common/status_macros.h"
#include "common/status_test_util.h"
#include "gtest/gtest.h"
#include "server/volume.h"

namespace grantfs {

inline constexpr uint64_t kMiB = 1 << 20;
inline constexpr uint64_t kVolumeChunk = 4 * kMiB;  // ChunkStoreOptions' default
inline constexpr absl::Duration kLease = absl::Seconds(10);

// Bytes that differ at every offset, so a misplaced copy is noticed.
inline std::string Pattern(size_t n, uint8_t seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 31 + seed) % 251 + 1);
  return s;
}

inline FileLock WriteLock(uint64_t client_id, uint64_t owner, uint64_t start = 0,
                          uint64_t end = UINT64_MAX) {
  FileLock l;
  l.type = FileLock::kWrite;
  l.start = start;
  l.end = end;
  l.owner = LockOwner{client_id, owner};
  return l;
}

class VolumeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/grantfs_volume_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr) << strerror(errno);
    root_dir_ = tmpl;
    ASSERT_EQ(mkdir((root_dir_ + "/vol").c_str(), 0700), 0) << strerror(errno);
    OpenVolume(kMiB);
  }
  void TearDown() override {
    volume_.reset();
    std::error_code ec;
    std::filesystem::remove_all(root_dir_, ec);
  }

  // (Re)opens the volume in the same directory with `capacity` bytes. With
  // `same_clients`, a_ and b_ keep their session ids (clients that come
  // back after a restart or a failover: they are in grace until they
  // Reclaim); otherwise they close their sessions first and get new ones.
  void OpenVolume(uint64_t capacity, bool same_clients = false) {
    if (volume_ && !same_clients) {  // the clients unmount first
      ASSERT_OK(volume_->CloseSession(a_.client_id));
      ASSERT_OK(volume_->CloseSession(b_.client_id));
    }
    volume_.reset();
    VolumeOptions options;
    options.dir = root_dir_ + "/vol";
    options.capacity_bytes = capacity;
    options.lease = kLease;
    options.clock = &clock_;
    options.lease_clock = &clock_;
    // These clients subscribe to no stream, so they hold no metadata
    // leases: a restarted volume need not wait out the last run's
    // (LeaseTable::Inherit), which on the fake clock would be forever.
    options.meta_lease = absl::ZeroDuration();
    options.background = false;
    options.serving = [this] { return serving_; };
    options.chunk_env = chunk_env_;
    options.sync_data = sync_data_;
    auto v = Volume::Open(options);
    ASSERT_TRUE(v.ok()) << v.status();
    volume_ = *std::move(v);
    if (same_clients) return;
    ASSERT_OK_AND_ASSIGN(a_.client_id, volume_->OpenSession("a"));
    ASSERT_OK_AND_ASSIGN(b_.client_id, volume_->OpenSession("b"));
  }
  // `ctx` comes back after a restart with the (ino, handle) opens given.
  // Returns the inodes that were gone.
  std::vector<uint64_t> Reclaim(const RequestContext& ctx,
                                const std::vector<std::pair<uint64_t, uint64_t>>& opens = {}) {
    absl::StatusOr<std::vector<uint64_t>> lost = volume_->Reclaim(ctx, opens);
    EXPECT_TRUE(lost.ok()) << lost.status();
    return lost.ok() ? *lost : std::vector<uint64_t>{};
  }

  absl::StatusOr<proto::Attr> CreateFile(const RequestContext& ctx, const std::string& name,
                                         uint64_t parent = kRootIno) {
    proto::MkNodRequest req;
    req.set_parent(parent);
    req.set_name(name);
    req.set_mode(S_IFREG | 0644);
    req.set_exclusive(true);
    return volume_->MkNod(ctx, req);
  }
  absl::StatusOr<proto::Attr> Truncate(const RequestContext& ctx, uint64_t ino, uint64_t size) {
    proto::SetAttrRequest req;
    req.set_ino(ino);
    req.set_valid(proto::SetAttrRequest::SIZE);
    req.set_size(size);
    return volume_->SetAttr(ctx, req);
  }
  // The whole file, read in one go (or a marker on error).
  std::string ReadAll(const RequestContext& ctx, uint64_t ino) {
    auto attr = volume_->GetAttr(ctx, ino);
    if (!attr.ok()) return "<getattr failed>";
    auto data = volume_->Read(ctx, ino, 0, static_cast<uint32_t>(attr->size()));
    return data.ok() ? *data : "<read failed>";
  }
  std::string ChunkPath(uint64_t ino, uint64_t index) const {
    return absl::StrFormat("%s/vol/chunks/%02x/%d.%d", root_dir_, ino % 256, ino, index);
  }
  // The chunk file's size, or -1 when it does not exist.
  int64_t ChunkFileSize(uint64_t ino, uint64_t index) const {
    struct stat st;
    if (stat(ChunkPath(ino, index).c_str(), &st) != 0) return -1;
    return st.st_size;
  }
  uint64_t Used() { return volume_->Space().used_bytes; }

  FakeClock clock_;
  bool serving_ = true;
  Env* chunk_env_ = Env::Posix();  // the chunk store's file system
  bool sync_data_ = true;          // VolumeOptions::sync_data
  std::string root_dir_;
  std::unique_ptr<Volume> volume_;
  RequestContext a_;  // two clients, both root
  RequestContext b_;
};

}  // namespace grantfs

#endif  // GRANTFS_SERVER_VOLUME_TEST_UTIL_H_
