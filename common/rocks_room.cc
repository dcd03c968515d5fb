#include "common/rocks_room.h"

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace grantfs {

bool IsRocksNoSpace(const rocksdb::Status& s) {
  return s.IsNoSpace() || absl::StrContains(s.ToString(), "No space left on device");
}

rocksdb::Status ResumeAfterRoom(rocksdb::DB* db) {
  rocksdb::Status s = db->Resume();
  for (int i = 0; s.IsBusy() && i < 100; ++i) {
    absl::SleepFor(absl::Milliseconds(20));
    s = db->Resume();
  }
  return s;
}

}  // namespace grantfs
