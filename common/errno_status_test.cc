#include "common/errno_status.h"

#include <cerrno>

#include "gtest/gtest.h"

namespace grantfs {
namespace {

TEST(ErrnoStatus, RoundTripsEveryErrnoExactly) {
  for (int err : {ENOENT, EEXIST, ENOTEMPTY, ENOTDIR, EISDIR,     ENAMETOOLONG, EACCES,
                  EPERM,  ENOSPC, EFBIG,     EINVAL,  ENODATA,    ERANGE,       EAGAIN,
                  EXDEV,  ELOOP,  EMLINK,    EBADF,   EOPNOTSUPP, EIO}) {
    absl::Status s = ErrnoStatus(err, "op");
    EXPECT_FALSE(s.ok()) << err;
    EXPECT_EQ(ToErrno(s), err) << s;
  }
}

TEST(ErrnoStatus, ZeroIsOk) {
  EXPECT_TRUE(ErrnoStatus(0).ok());
  EXPECT_EQ(ToErrno(absl::OkStatus()), 0);
}

TEST(ErrnoStatus, CanonicalCodesMatchTheErrno) {
  EXPECT_EQ(ErrnoStatus(ENOENT).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ErrnoStatus(EEXIST).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(ErrnoStatus(EACCES).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ErrnoStatus(ENOSPC).code(), absl::StatusCode::kResourceExhausted);
}

TEST(ErrnoStatus, ForeignStatusesMapToTheNearestErrno) {
  EXPECT_EQ(ToErrno(absl::UnavailableError("server gone")), EIO);
  EXPECT_EQ(ToErrno(absl::InternalError("rocksdb")), EIO);
  EXPECT_EQ(ToErrno(absl::NotFoundError("x")), ENOENT);
  EXPECT_EQ(ToErrno(absl::DeadlineExceededError("x")), ETIMEDOUT);
  EXPECT_EQ(ToErrno(absl::InvalidArgumentError("x")), EINVAL);
}

}  // namespace
}  // namespace grantfs

#include <fstream>

#include "common/secret.h"

namespace grantfs {
namespace {

TEST(ReadSecretFile, FirstLineWithoutTrailingSpace) {
  const std::string path = ::testing::TempDir() + "/grantfs-secret-test";
  std::ofstream(path) << "s3cret  \nsecond line\n";
  auto s = ReadSecretFile(path);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(*s, "s3cret");
  std::ofstream(path) << "\n";
  EXPECT_EQ(ReadSecretFile(path).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ToErrno(ReadSecretFile(path + ".missing").status()), ENOENT);
  EXPECT_EQ(*ReadSecretFile(""), "");
}

}  // namespace
}  // namespace grantfs
