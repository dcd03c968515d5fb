// A RocksDB write on a full disk: how to tell, and how to go on once a
// space hold (common/space_hold.h) made room. Shared by the primary's
// metadata store (server/meta_store.h) and the replica's copy
// (checkpoint/replica.h).
#ifndef GRANTFS_COMMON_ROCKS_ROOM_H_
#define GRANTFS_COMMON_ROCKS_ROOM_H_

#include "rocksdb/db.h"
#include "rocksdb/status.h"

namespace grantfs {

// RocksDB's ENOSPC: the status itself, or a background error it keeps
// answering with until it is resumed.
bool IsRocksNoSpace(const rocksdb::Status& s);

// Resumes `db` after room was made. A full disk is a retryable error to
// RocksDB: it has started its own recovery already, and Resume() is Busy
// until that ends, which the room just made lets happen at once (tens of
// milliseconds). Waited for, up to 2 s: the first write after the room was
// made was EIO without the wait.
rocksdb::Status ResumeAfterRoom(rocksdb::DB* db);

}  // namespace grantfs

#endif  // GRANTFS_COMMON_ROCKS_ROOM_H_
