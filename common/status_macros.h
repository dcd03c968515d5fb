// RETURN_IF_ERROR / ASSIGN_OR_RETURN: abseil 20220623 has neither.
#ifndef GRANTFS_COMMON_STATUS_MACROS_H_
#define GRANTFS_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define GRANTFS_CONCAT_INNER_(a, b) a##b
#define GRANTFS_CONCAT_(a, b) GRANTFS_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                          \
  do {                                                 \
    ::absl::Status _grantfs_status = (expr);           \
    if (!_grantfs_status.ok()) return _grantfs_status; \
  } while (0)

#define ASSIGN_OR_RETURN(lhs, expr) \
  GRANTFS_ASSIGN_OR_RETURN_IMPL_(GRANTFS_CONCAT_(_grantfs_or_, __LINE__), lhs, expr)

#define GRANTFS_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.ok()) return tmp.status();                  \
  lhs = std::move(tmp).value()

#endif  // GRANTFS_COMMON_STATUS_MACROS_H_
