#include "checkpoint/replica_copy.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/big_endian.h"
#include "glog/logging.h"
#include "rocksdb/status.h"
#include "rocksdb/write_batch.h"

namespace grantfs {
namespace replica_copy {

absl::Status SyncDir(const std::string& dir) {
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return absl::InternalError("open " + dir + ": " + strerror(errno));
  const int rc = fsync(fd);
  const int err = errno;
  close(fd);
  if (rc != 0) return absl::InternalError("fsync " + dir + ": " + strerror(err));
  return absl::OkStatus();
}

absl::Status CheckBatch(const std::string& rep) {
  // A header: the sequence number (8 bytes) and the count (4).
  constexpr size_t kHeader = 12;
  if (rep.size() < kHeader) {
    return absl::InvalidArgumentError(
        absl::StrCat("a metadata batch of ", rep.size(), " bytes, shorter than its header"));
  }
  // The handler's defaults take puts and deletes of the default column
  // family and refuse every other kind of record; Iterate also refuses a
  // record it cannot parse and a count that is not the header's.
  struct PutsAndDeletes : rocksdb::WriteBatch::Handler {
    rocksdb::Status SingleDeleteCF(uint32_t, const rocksdb::Slice&) override {
      return rocksdb::Status::InvalidArgument("a single delete");
    }
    rocksdb::Status MergeCF(uint32_t, const rocksdb::Slice&, const rocksdb::Slice&) override {
      return rocksdb::Status::InvalidArgument("a merge");
    }
  } handler;
  const rocksdb::WriteBatch batch(rep);
  const rocksdb::Status s = batch.Iterate(&handler);
  if (!s.ok()) return absl::InvalidArgumentError("a bad metadata batch: " + s.ToString());
  return absl::OkStatus();
}

absl::Status RemoveCopy(const std::string& data_dir) {
  std::error_code ec;
  for (const char* sub : {"/meta", "/chunks"}) {
    std::filesystem::remove_all(data_dir + sub, ec);
    if (ec) return absl::InternalError("removing " + data_dir + sub + ": " + ec.message());
  }
  return absl::OkStatus();
}

std::string EncodePosition(uint64_t epoch, uint64_t seq) {
  std::string s;
  PutBigEndian64(&s, epoch);
  PutBigEndian64(&s, seq);
  return s;
}

bool DecodePosition(const std::string& s, uint64_t* epoch, uint64_t* seq) {
  if (s.size() != 16) return false;
  *epoch = GetBigEndian64(s.data());
  *seq = GetBigEndian64(s.data() + 8);
  return true;
}

absl::Status DbError(const rocksdb::Status& s, const char* what) {
  LOG(ERROR) << "replica: " << what << ": " << s.ToString();
  return absl::InternalError(absl::StrCat(what, ": ", s.ToString()));
}

}  // namespace replica_copy
}  // namespace grantfs
