#include "checkpoint/replica_copy.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/big_endian.h"
#include "glog/logging.h"
#include "rocksdb/status.h"

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

namespace {

// A varint32 of RocksDB's encoding (little-endian groups of 7 bits).
bool GetVarint32(absl::string_view* in, uint32_t* v) {
  *v = 0;
  for (int shift = 0; shift <= 28 && !in->empty(); shift += 7) {
    const uint8_t b = static_cast<uint8_t>(in->front());
    in->remove_prefix(1);
    if (shift == 28 && b > 0x0f) return false;  // more than 32 bits
    *v |= uint32_t{b & 0x7fu} << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}

// A varint32 length, then that many bytes.
bool SkipLengthPrefixed(absl::string_view* in) {
  uint32_t n = 0;
  if (!GetVarint32(in, &n) || n > in->size()) return false;
  in->remove_prefix(n);
  return true;
}

}  // namespace

absl::Status CheckBatch(const std::string& rep) {
  // RocksDB's WriteBatch format (rocksdb/db/write_batch.cc): a header, the
  // sequence number (fixed64) and the count (fixed32), then `count`
  // records, each a type byte and its fields. Parsed here rather than with
  // WriteBatch::Iterate: Debian's RocksDB keeps its assertions, and some
  // records a handler refuses end in one (the process aborts).
  constexpr size_t kHeader = 12;
  constexpr char kTypeDeletion = 0x0, kTypeValue = 0x1;  // rocksdb/db/dbformat.h
  if (rep.size() < kHeader) {
    return absl::InvalidArgumentError(
        absl::StrCat("a metadata batch of ", rep.size(), " bytes, shorter than its header"));
  }
  const uint32_t count = static_cast<uint8_t>(rep[8]) | static_cast<uint8_t>(rep[9]) << 8 |
                         static_cast<uint8_t>(rep[10]) << 16 |
                         static_cast<uint32_t>(static_cast<uint8_t>(rep[11])) << 24;
  absl::string_view in(rep);
  in.remove_prefix(kHeader);
  uint32_t found = 0;
  while (!in.empty()) {
    const char type = in.front();
    in.remove_prefix(1);
    bool ok = false;
    if (type == kTypeValue) {
      ok = SkipLengthPrefixed(&in) && SkipLengthPrefixed(&in);  // key, value
    } else if (type == kTypeDeletion) {
      ok = SkipLengthPrefixed(&in);  // key
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("a metadata batch with a record of type ", static_cast<int>(type),
                       " (the primary writes only puts and deletes of the default column family)"));
    }
    if (!ok) return absl::InvalidArgumentError("a metadata batch with a record cut short");
    ++found;
  }
  if (found != count) {
    return absl::InvalidArgumentError(
        absl::StrCat("a metadata batch of ", found, " records whose header counts ", count));
  }
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
