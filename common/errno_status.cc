#include "common/errno_status.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace grantfs {
namespace {
constexpr char kErrnoPayload[] = "grantfs.errno";
}  // namespace

absl::StatusCode CodeForErrno(int err) {
  switch (err) {
    case 0:
      return absl::StatusCode::kOk;
    case ENOENT:
      return absl::StatusCode::kNotFound;
    case EEXIST:
      return absl::StatusCode::kAlreadyExists;
    case EACCES:
    case EPERM:
      return absl::StatusCode::kPermissionDenied;
    case ENOSPC:
    case EDQUOT:
    case EMLINK:
      return absl::StatusCode::kResourceExhausted;
    case EINVAL:
    case ENAMETOOLONG:
    case ENOTDIR:
    case EISDIR:
    case ENOTEMPTY:
    case ELOOP:
    case EXDEV:
      return absl::StatusCode::kFailedPrecondition;
    case EFBIG:
    case ERANGE:
    case E2BIG:
      return absl::StatusCode::kOutOfRange;
    case EAGAIN:
      return absl::StatusCode::kUnavailable;
    case EOPNOTSUPP:
    case ENOSYS:
      return absl::StatusCode::kUnimplemented;
    case ETIMEDOUT:
      return absl::StatusCode::kDeadlineExceeded;
    case EINTR:
      return absl::StatusCode::kCancelled;
    default:
      return absl::StatusCode::kUnknown;
  }
}

absl::Status ErrnoStatus(int err, const std::string& message) {
  if (err == 0) return absl::OkStatus();
  absl::Status s(CodeForErrno(err), message.empty() ? std::string(strerror(err))
                                                    : absl::StrCat(message, ": ", strerror(err)));
  s.SetPayload(kErrnoPayload, absl::Cord(absl::StrCat(err)));
  return s;
}

bool HasErrno(const absl::Status& status) { return status.GetPayload(kErrnoPayload).has_value(); }

int ToErrno(const absl::Status& status) {
  if (status.ok()) return 0;
  if (auto payload = status.GetPayload(kErrnoPayload)) {
    int err = 0;
    if (absl::SimpleAtoi(std::string(*payload), &err) && err > 0) return err;
  }
  switch (status.code()) {
    case absl::StatusCode::kNotFound:
      return ENOENT;
    case absl::StatusCode::kAlreadyExists:
      return EEXIST;
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated:
      return EACCES;
    case absl::StatusCode::kResourceExhausted:
      return ENOSPC;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
      return EINVAL;
    case absl::StatusCode::kOutOfRange:
      return EFBIG;
    case absl::StatusCode::kUnimplemented:
      return EOPNOTSUPP;
    case absl::StatusCode::kCancelled:
      return EINTR;
    case absl::StatusCode::kDeadlineExceeded:
      return ETIMEDOUT;
    default:  // UNAVAILABLE, INTERNAL, DATA_LOSS, ABORTED, UNKNOWN
      return EIO;
  }
}

}  // namespace grantfs
