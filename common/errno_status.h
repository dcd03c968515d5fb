// The one mapping between POSIX errno values and absl::Status.
//
// File-system errors are carried inside absl::Status across module
// boundaries: ErrnoStatus() builds a Status whose canonical code matches the
// errno (ENOENT -> NotFound, ...) and whose payload records the exact errno,
// so that ToErrno() recovers it without loss. Statuses that did not start as
// an errno (an RPC failure, a RocksDB error) map to the errno a POSIX caller
// would expect for that canonical code (UNAVAILABLE -> EIO, ...).
#ifndef GRANTFS_COMMON_ERRNO_STATUS_H_
#define GRANTFS_COMMON_ERRNO_STATUS_H_

#include <string>

#include "absl/status/status.h"

namespace grantfs {

// Returns a non-OK Status for `err` (> 0) with `message`; OkStatus for 0.
absl::Status ErrnoStatus(int err, const std::string& message = "");

// The errno for `status`: 0 for OK, the recorded errno when the status was
// built by ErrnoStatus, otherwise the errno closest to its canonical code.
int ToErrno(const absl::Status& status);

// Whether `status` was built by ErrnoStatus (carries an errno).
bool HasErrno(const absl::Status& status);

// The canonical code used for `err`.
absl::StatusCode CodeForErrno(int err);

}  // namespace grantfs

#endif  // GRANTFS_COMMON_ERRNO_STATUS_H_
