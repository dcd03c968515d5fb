// For tests: comparing byte strings without printing megabytes.
#ifndef GRANTFS_COMMON_BYTES_TEST_UTIL_H_
#define GRANTFS_COMMON_BYTES_TEST_UTIL_H_

#include <string>

#include "gtest/gtest.h"

namespace grantfs {

// Compares byte strings without printing megabytes on a mismatch.
inline ::testing::AssertionResult SameBytes(const std::string& want, const std::string& got) {
  if (want == got) return ::testing::AssertionSuccess();
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  return ::testing::AssertionFailure() << "sizes want " << want.size() << " got " << got.size()
                                       << "; first difference at byte " << i;
}

}  // namespace grantfs

#endif  // GRANTFS_COMMON_BYTES_TEST_UTIL_H_
