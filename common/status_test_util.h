// GoogleTest helpers for absl::Status / StatusOr with errnos (tests only).
#ifndef GRANTFS_COMMON_STATUS_TEST_UTIL_H_
#define GRANTFS_COMMON_STATUS_TEST_UTIL_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/errno_status.h"
#include "common/status_macros.h"
#include "gtest/gtest.h"

namespace grantfs {

inline absl::Status StatusOf(const absl::Status& s) { return s; }
template <typename T>
absl::Status StatusOf(const absl::StatusOr<T>& s) {
  return s.status();
}
// The errno of a Status or StatusOr (0 when OK).
template <typename T>
int Err(const T& s) {
  return ToErrno(StatusOf(s));
}

}  // namespace grantfs

#define ASSERT_OK(expr)                                 \
  do {                                                  \
    const absl::Status _st = ::grantfs::StatusOf(expr); \
    ASSERT_TRUE(_st.ok()) << _st;                       \
  } while (0)

#define EXPECT_OK(expr)                                 \
  do {                                                  \
    const absl::Status _st = ::grantfs::StatusOf(expr); \
    EXPECT_TRUE(_st.ok()) << _st;                       \
  } while (0)

#define ASSERT_OK_AND_ASSIGN(lhs, expr) \
  ASSERT_OK_AND_ASSIGN_IMPL_(GRANTFS_CONCAT_(_status_or_, __LINE__), lhs, expr)
#define ASSERT_OK_AND_ASSIGN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  ASSERT_TRUE(tmp.ok()) << tmp.status();           \
  lhs = *std::move(tmp)

#endif  // GRANTFS_COMMON_STATUS_TEST_UTIL_H_
