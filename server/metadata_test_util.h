// The fixture the metadata tests share (meta_store_test.cc, inodes_test.cc,
// namespace_test.cc, allocator_test.cc, orphans_test.cc): a small volume
// (64 KiB chunks, 256 KiB capacity) opened through Metadata in a temporary
// directory, callers with and without privileges, and helpers that make
// files, directories and writes. Test code only.
#ifndef GRANTFS_SERVER_METADATA_TEST_UTIL_H_
#define GRANTFS_SERVER_METADATA_TEST_UTIL_H_

#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "server/metadata.h"
#include "server/permissions.h"

namespace grantfs {

inline constexpr uint64_t kChunk = 64 * 1024;           // 16 blocks per chunk
inline constexpr uint64_t kCapacity = 64 * kBlockSize;  // 256 KiB
inline constexpr uint32_t kNoReplace = 1;
inline constexpr uint32_t kExchange = 2;
using V = proto::SetAttrRequest;

inline Caller User(uint32_t uid, uint32_t gid, std::vector<uint32_t> groups = {}) {
  Caller c;
  c.uid = uid;
  c.gid = gid;
  c.groups = std::move(groups);
  return c;
}

inline const Caller kRoot = User(0, 0);
inline const Caller kAlice = User(1000, 1000);
inline const Caller kBob = User(1001, 1001);

// A new volume's metadata (Metadata::Open) in a temporary directory, on a
// fake clock, with helpers for the common changes. Reopen() closes and
// opens it again from the same directory.
class MetaStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/grantfs_meta_store_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr) << strerror(errno);
    root_dir_ = tmpl;
    start_ns_ = clock_.NowNanos();
    Reopen();
  }
  void TearDown() override {
    store_.reset();
    std::error_code ec;
    std::filesystem::remove_all(root_dir_, ec);
  }

  MetaStoreOptions Options() {
    MetaStoreOptions o;
    o.dir = root_dir_ + "/meta";
    o.capacity_bytes = capacity_;
    o.chunk_size = kChunk;
    o.clock = &clock_;
    return o;
  }
  uint64_t capacity_ = kCapacity;
  // Closes the store (if open) and opens it again from the same directory.
  void Reopen() {
    store_.reset();
    auto store = Metadata::Open(Options());
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }

  absl::StatusOr<proto::Attr> Create(uint64_t parent, const std::string& name, uint32_t mode = 0644,
                                     const Caller& caller = kRoot) {
    return store_->names().MkNod(caller, parent, name, S_IFREG | mode, 0, 0, true);
  }
  absl::StatusOr<proto::Attr> Mkdir(uint64_t parent, const std::string& name, uint32_t mode = 0755,
                                    const Caller& caller = kRoot) {
    return store_->names().MkNod(caller, parent, name, S_IFDIR | mode, 0, 0, true);
  }
  absl::StatusOr<proto::Attr> Chmod(uint64_t ino, uint32_t mode, const Caller& caller = kRoot) {
    proto::SetAttrRequest req;
    req.set_ino(ino);
    req.set_valid(V::MODE);
    req.set_mode(mode);
    return store_->inodes().SetAttr(caller, req);
  }
  absl::StatusOr<proto::Attr> Truncate(uint64_t ino, uint64_t size, const Caller& caller = kRoot) {
    proto::SetAttrRequest req;
    req.set_ino(ino);
    req.set_valid(V::SIZE);
    req.set_size(size);
    return store_->inodes().SetAttr(caller, req);
  }
  // What a data write does to the metadata: reserve, then commit.
  absl::StatusOr<proto::Attr> Write(uint64_t ino, uint64_t offset, uint64_t length) {
    ASSIGN_OR_RETURN(Reservation reserved, store_->space().Reserve(ino, offset, length));
    return store_->space().CommitWrite(ino, offset, length, /*extend=*/true, reserved);
  }
  // nlink of `ino`, or -1 when it does not exist.
  int64_t Nlink(uint64_t ino) {
    auto a = store_->inodes().GetAttr(ino);
    return a.ok() ? static_cast<int64_t>(a->nlink()) : -1;
  }
  // The inode `name` in `parent` names, or 0.
  uint64_t InoOf(uint64_t parent, const std::string& name) {
    auto a = store_->names().Lookup(kRoot, parent, name);
    return a.ok() ? a->ino() : 0;
  }
  std::vector<uint64_t> Orphans() {
    auto orphans = store_->orphans().ListOrphans();
    if (!orphans.ok()) return {999999};
    std::vector<uint64_t> ids;
    for (const auto& [ino, rec] : *orphans) ids.push_back(ino);
    return ids;
  }
  std::vector<uint64_t> Garbage() {
    return store_->orphans().ListGarbage().value_or(std::vector<uint64_t>{999999});
  }
  // Every entry of `dir` as name -> cookie, read in one go.
  std::map<std::string, uint64_t> ListAll(uint64_t dir) {
    proto::ReadDirReply reply;
    absl::Status s = store_->names().ReadDir(kRoot, dir, 0, 100000, &reply);
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_TRUE(reply.eof());
    std::map<std::string, uint64_t> out;
    for (const auto& e : reply.entries()) out[e.name()] = e.cookie();
    return out;
  }

  FakeClock clock_;
  int64_t start_ns_ = 0;
  std::string root_dir_;
  std::unique_ptr<Metadata> store_;
};

}  // namespace grantfs

#endif  // GRANTFS_SERVER_METADATA_TEST_UTIL_H_
