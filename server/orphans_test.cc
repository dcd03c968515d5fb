// Orphans and garbage (server/orphans.h), through Metadata: the last
// unlink of an open file, its reaping, and the chunks garbage may hold.
#include "server/orphans.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "common/clock.h"
#include "common/errno_status.h"
#include "common/names.h"
#include "common/status_macros.h"
#include "common/status_test_util.h"
#include "gtest/gtest.h"
#include "server/metadata.h"
#include "server/metadata_test_util.h"
#include "server/permissions.h"

namespace grantfs {
namespace {

// --- orphans and garbage ---------------------------------------------------------------

TEST_F(MetaStoreTest, LastUnlinkThenReapMakesGarbage) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(kRootIno, "f"));
  ASSERT_OK(Write(f.ino(), 0, 3 * kBlockSize));
  ASSERT_OK(store_->inodes().SetXattr(kRoot, f.ino(), "user.k", "v", 0));
  ASSERT_OK_AND_ASSIGN(proto::Attr live, Create(kRootIno, "live"));
  // Reap of a file that still has a link is a no-op.
  ASSERT_OK(store_->orphans().Reap(live.ino()));
  EXPECT_EQ(Nlink(live.ino()), 1);

  ASSERT_OK(store_->names().Remove(kRoot, kRootIno, "f", false));
  EXPECT_EQ(Orphans(), std::vector<uint64_t>{f.ino()});
  EXPECT_EQ(store_->store().Space().inodes, 3u);
  ASSERT_OK(store_->orphans().Reap(f.ino()));
  EXPECT_TRUE(Orphans().empty());
  EXPECT_EQ(Garbage(), std::vector<uint64_t>{f.ino()});
  EXPECT_EQ(Err(store_->inodes().GetAttr(f.ino())), ENOENT);
  EXPECT_EQ(Err(store_->inodes().ListXattr(kRoot, f.ino())), ENOENT);
  SpaceInfo space = store_->store().Space();
  EXPECT_EQ(space.inodes, 2u);
  EXPECT_EQ(space.pending_deletes, 1u);
  EXPECT_EQ(space.used_bytes, 3 * kBlockSize);  // freed only with the chunks
  ASSERT_OK_AND_ASSIGN(uint64_t span, store_->orphans().GarbageChunkSpan(f.ino()));
  EXPECT_EQ(span, 1u);

  ASSERT_OK(store_->orphans().FinishGarbage(f.ino()));
  EXPECT_TRUE(Garbage().empty());
  space = store_->store().Space();
  EXPECT_EQ(space.used_bytes, 0u);
  EXPECT_EQ(space.pending_deletes, 0u);
  // Reaping twice is harmless.
  ASSERT_OK(store_->orphans().Reap(f.ino()));
  EXPECT_TRUE(Garbage().empty());
}

TEST_F(MetaStoreTest, GarbageChunkSpanCoversEveryRecordedChunk) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, Create(kRootIno, "f"));
  ASSERT_OK(Write(f.ino(), 0, 100));  // size 100: one chunk
  // Blocks allocated past the size (fallocate with KEEP_SIZE) in chunk 5.
  ASSERT_OK_AND_ASSIGN(Reservation reserved, store_->space().Reserve(f.ino(), 5 * kChunk, 10));
  ASSERT_OK(store_->space().CommitWrite(f.ino(), 5 * kChunk, 10, /*extend=*/false, reserved));
  ASSERT_OK(store_->names().Remove(kRoot, kRootIno, "f", false));
  ASSERT_OK(store_->orphans().Reap(f.ino()));
  ASSERT_OK_AND_ASSIGN(uint64_t span, store_->orphans().GarbageChunkSpan(f.ino()));
  EXPECT_EQ(span, 6u);
  ASSERT_OK(store_->orphans().FinishGarbage(f.ino()));
  EXPECT_EQ(store_->store().Space().used_bytes, 0u);
}

}  // namespace
}  // namespace grantfs
