#include "common/rocks_logger.h"

#include <cstdio>

#include "glog/logging.h"

namespace grantfs {
namespace {

class RocksLogger : public rocksdb::Logger {
 public:
  RocksLogger() : rocksdb::Logger(rocksdb::InfoLogLevel::INFO_LEVEL) {}

  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override {
    Logv(rocksdb::InfoLogLevel::INFO_LEVEL, format, ap);
  }

  void Logv(const rocksdb::InfoLogLevel level, const char* format, va_list ap) override {
    const bool chatter = level < rocksdb::InfoLogLevel::WARN_LEVEL;
    if (chatter && !VLOG_IS_ON(1)) return;
    char buf[1024];
    vsnprintf(buf, sizeof(buf), format, ap);
    switch (level) {
      case rocksdb::InfoLogLevel::WARN_LEVEL:
        LOG(WARNING) << "rocksdb: " << buf;
        break;
      case rocksdb::InfoLogLevel::ERROR_LEVEL:
      case rocksdb::InfoLogLevel::FATAL_LEVEL:  // RocksDB goes on; so does the server
        LOG(ERROR) << "rocksdb: " << buf;
        break;
      default:
        LOG(INFO) << "rocksdb: " << buf;
        break;
    }
  }
};

}  // namespace

std::shared_ptr<rocksdb::Logger> NewRocksLogger() { return std::make_shared<RocksLogger>(); }

}  // namespace grantfs
