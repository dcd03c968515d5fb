// Big-endian 64-bit integers in byte strings: keys that sort numerically
// (server/keys.h) and a replica's saved position (checkpoint/replica.cc).
#ifndef GRANTFS_COMMON_BIG_ENDIAN_H_
#define GRANTFS_COMMON_BIG_ENDIAN_H_

#include <cstdint>
#include <string>

namespace grantfs {

inline void PutBigEndian64(std::string* s, uint64_t v) {
  for (int i = 7; i >= 0; --i) s->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// Reads 8 bytes at `p`.
inline uint64_t GetBigEndian64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

}  // namespace grantfs

#endif  // GRANTFS_COMMON_BIG_ENDIAN_H_
