// RocksDB key layout of the metadata store. One column family; the first
// byte is the record kind, integers are big-endian so keys sort numerically.
//
//   'I' ino                -> InodeRecord        (live inodes, incl. open orphans)
//   'D' parent name        -> DirentRecord       (lookup by name)
//   'E' parent cookie      -> DirentRecord+name  (readdir order, stable cookies)
//   'X' ino name           -> xattr value
//   'C' ino chunk_index    -> ChunkRecord        (allocated 4 KiB blocks)
//   'O' ino                -> OrphanRecord       (unlinked but still open)
//   'G' ino                -> InodeRecord        (unlinked, chunks to free)
//   'L' client_id          -> GrantRecord        (a session's space grant)
//   'M' "counters"         -> Counters
//   'M' "identity"         -> VolumeIdentity     (which volume, how new: server/data_dir.h)
//   'P' ino                -> LockRecord         (file locks held on ino)
//   'Q' client_id seq      -> DedupeRecord       (applied requests, for retries)
//   'R' "position"         -> epoch, seq         (a replica's copy: checkpoint/replica.cc)
//   'S' client_id          -> SessionRecord      (open client sessions)
//   'T' path               -> GlobalMountRecord  (the cluster's global mounts:
//                                                 server/mount_table.h)
#ifndef GRANTFS_SERVER_KEYS_H_
#define GRANTFS_SERVER_KEYS_H_

#include <cstdint>
#include <string>

#include "common/big_endian.h"

namespace grantfs::keys {

using ::grantfs::GetBigEndian64;
using ::grantfs::PutBigEndian64;

inline std::string Prefix(char kind, uint64_t id) {
  std::string k(1, kind);
  PutBigEndian64(&k, id);
  return k;
}

inline std::string Inode(uint64_t ino) { return Prefix('I', ino); }
inline std::string Dirent(uint64_t parent, const std::string& name) {
  return Prefix('D', parent) + name;
}
inline std::string DirCookie(uint64_t parent, uint64_t cookie) {
  std::string k = Prefix('E', parent);
  PutBigEndian64(&k, cookie);
  return k;
}
inline std::string Xattr(uint64_t ino, const std::string& name) { return Prefix('X', ino) + name; }
inline std::string Chunk(uint64_t ino, uint64_t index) {
  std::string k = Prefix('C', ino);
  PutBigEndian64(&k, index);
  return k;
}
inline std::string Orphan(uint64_t ino) { return Prefix('O', ino); }
inline std::string Garbage(uint64_t ino) { return Prefix('G', ino); }
inline std::string Grant(uint64_t client_id) { return Prefix('L', client_id); }
inline std::string Locks(uint64_t ino) { return Prefix('P', ino); }
inline std::string Session(uint64_t client_id) { return Prefix('S', client_id); }
inline std::string GlobalMount(const std::string& path) { return "T" + path; }
inline constexpr char kGlobalMountKind = 'T';
inline std::string Counters() { return "Mcounters"; }
inline std::string Identity() { return "Midentity"; }
inline std::string Dedupe(uint64_t client_id, uint64_t seq) {
  std::string k = Prefix('Q', client_id);
  PutBigEndian64(&k, seq);
  return k;
}

}  // namespace grantfs::keys

#endif  // GRANTFS_SERVER_KEYS_H_
