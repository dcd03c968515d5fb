// A fuzz input read as a sequence of fields, for the libFuzzer targets
// (*_fuzz.cc, docs/testing.md "Fuzzing"). Every read succeeds: past the end
// of the input, numbers are 0 and byte strings empty, so that any input
// decodes to some sequence of operations. Byte strings carry a 2-byte
// length first, so that a mutation of one field leaves the fields after it
// where they were. Test code only; not thread-safe.
#ifndef GRANTFS_COMMON_FUZZ_INPUT_H_
#define GRANTFS_COMMON_FUZZ_INPUT_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace grantfs {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  bool empty() const { return pos_ >= size_; }

  uint8_t Byte() { return empty() ? 0 : data_[pos_++]; }

  // `n` bytes (fewer at the end), little-endian.
  uint64_t Number(int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= uint64_t{Byte()} << (8 * i);
    return v;
  }

  // A 2-byte length (at most `max`), then that many bytes.
  std::string Bytes(size_t max = 65535) {
    const size_t want = std::min<size_t>(Number(2), max);
    const size_t n = std::min(want, size_ - std::min(pos_, size_));
    std::string s(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return s;
  }

 private:
  const uint8_t* const data_;
  const size_t size_;
  size_t pos_ = 0;
};

// The writer of the same format, for the seed inputs a target makes.
class FuzzInputWriter {
 public:
  FuzzInputWriter& Byte(uint8_t b) {
    out_.push_back(static_cast<char>(b));
    return *this;
  }
  FuzzInputWriter& Number(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) Byte(static_cast<uint8_t>(v >> (8 * i)));
    return *this;
  }
  FuzzInputWriter& Bytes(const std::string& s) {
    Number(s.size(), 2);
    out_ += s;
    return *this;
  }
  const std::string& str() const { return out_; }

 private:
  std::string out_;
};

// Where a target makes its data directories: $GRANTFS_FUZZ_DIR (scripts/
// fuzz.sh sets one per run and removes it, also after a crash), else
// /dev/shm (tmpfs: RocksDB and the chunk files in memory).
inline std::string FuzzTempDir() {
  const char* dir = getenv("GRANTFS_FUZZ_DIR");
  return dir != nullptr && dir[0] != '\0' ? dir : "/dev/shm";
}

// Seed inputs made by code rather than checked in: when the first
// directory named on the command line (libFuzzer's corpus directory) is
// empty, `make()` is called and each input it returns is written there as a
// file. Call from LLVMFuzzerInitialize.
template <typename MakeSeeds>
void WriteSeedsIfEmpty(int argc, char** argv, MakeSeeds make) {
  for (int i = 1; i < argc; ++i) {
    if (argv[i][0] == '-') continue;
    std::error_code ec;
    if (!std::filesystem::is_directory(argv[i], ec)) return;
    if (!std::filesystem::is_empty(argv[i], ec)) return;
    const std::vector<std::string> seeds = make();
    for (size_t n = 0; n < seeds.size(); ++n) {
      std::ofstream(std::string(argv[i]) + "/seed-" + std::to_string(n), std::ios::binary)
          << seeds[n];
    }
    return;
  }
}

}  // namespace grantfs

#endif  // GRANTFS_COMMON_FUZZ_INPUT_H_
