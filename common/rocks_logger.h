// RocksDB's informational log, sent to the server's own log (glog) instead
// of `meta/LOG`. RocksDB writes its LOG file on the data disk through a
// writer that aborts the process (a Debian build keeps RocksDB's asserts)
// on the first message after a failed write: on a full disk, the next
// statistics dump or the shutdown's "cancelling background work" line
// killed the server. Warnings and errors go to the log at their level;
// RocksDB's chatter (options, statistics) only with --v=1.
#ifndef GRANTFS_COMMON_ROCKS_LOGGER_H_
#define GRANTFS_COMMON_ROCKS_LOGGER_H_

#include <cstdarg>
#include <memory>

#include "rocksdb/env.h"

namespace grantfs {

std::shared_ptr<rocksdb::Logger> NewRocksLogger();

}  // namespace grantfs

#endif  // GRANTFS_COMMON_ROCKS_LOGGER_H_
