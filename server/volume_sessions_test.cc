// Volume's sessions (server/volume_sessions.cc): unlinked open files, reclaim, leases, maintenance.
#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/clock.h"
#include "common/errno_status.h"
#include "common/fault_injection_env.h"
#include "common/names.h"
#include "common/status_macros.h"
#include "common/status_test_util.h"
#include "gtest/gtest.h"
#include "server/volume.h"
#include "server/volume_test_util.h"

namespace grantfs {
namespace {

// Whose a session is survives a restart (and a failover: the record is
// replicated): the node that opened it, and no other.
TEST_F(VolumeTest, ASessionsOwnerIsRecordedAndRestored) {
  ASSERT_OK_AND_ASSIGN(uint64_t id, volume_->OpenSession("n1", "node:n1"));
  EXPECT_FALSE(volume_->sessions().BelongsTo(id, "node:n2"));
  OpenVolume(kMiB, /*same_clients=*/true);
  EXPECT_TRUE(volume_->sessions().BelongsTo(id, "node:n1"));
  EXPECT_FALSE(volume_->sessions().BelongsTo(id, "node:n2"));
}

TEST_F(VolumeTest, UnlinkedOpenFileStaysReadableUntilRelease) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  ASSERT_OK(volume_->Open(a_, f.ino(), O_RDWR));
  const std::string data = Pattern(3 * kBlockSize, 5);
  ASSERT_OK(volume_->Write(a_, f.ino(), 0, data, false));
  ASSERT_OK(volume_->Remove(a_, kRootIno, "f", false));

  EXPECT_EQ(Err(volume_->Lookup(a_, kRootIno, "f")), ENOENT);
  ASSERT_OK_AND_ASSIGN(proto::Attr attr, volume_->GetAttr(a_, f.ino()));
  EXPECT_EQ(attr.nlink(), 0u);
  EXPECT_EQ(ReadAll(a_, f.ino()), data);
  // Still writable through the open handle.
  ASSERT_OK(volume_->Write(a_, f.ino(), 0, "Z", false));
  // Another client cannot open it any more; the holder can open it again.
  EXPECT_EQ(Err(volume_->Open(b_, f.ino(), O_RDONLY)), ESTALE);
  ASSERT_OK(volume_->Open(a_, f.ino(), O_RDONLY));

  ASSERT_OK_AND_ASSIGN(int freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 0);
  EXPECT_EQ(Used(), 3 * kBlockSize);
  ASSERT_OK(volume_->Release(a_, f.ino()));  // one open left
  ASSERT_OK_AND_ASSIGN(freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 0);
  EXPECT_EQ(ReadAll(a_, f.ino()).substr(1), data.substr(1));

  ASSERT_OK(volume_->Release(a_, f.ino()));  // the last one
  EXPECT_EQ(volume_->Space().pending_deletes, 1u);
  ASSERT_OK_AND_ASSIGN(freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 1);
  SpaceInfo space = volume_->Space();
  EXPECT_EQ(space.used_bytes, 0u);
  EXPECT_EQ(space.pending_deletes, 0u);
  EXPECT_EQ(space.inodes, 1u);
  EXPECT_EQ(Err(volume_->GetAttr(a_, f.ino())), ENOENT);
  EXPECT_EQ(ChunkFileSize(f.ino(), 0), -1);
  ASSERT_OK_AND_ASSIGN(freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 0);
}

TEST_F(VolumeTest, UnlinkOfAClosedFileFreesItsSpaceAtTheNextMaintenance) {
  OpenVolume(16 * kMiB);
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  ASSERT_OK(volume_->Write(a_, f.ino(), 0, std::string(kVolumeChunk + 1, 'q'), false));
  EXPECT_EQ(Used(), kVolumeChunk + kBlockSize);
  ASSERT_OK(volume_->Remove(a_, kRootIno, "f", false));
  EXPECT_EQ(Err(volume_->GetAttr(a_, f.ino())), ENOENT);
  EXPECT_EQ(Used(), kVolumeChunk + kBlockSize);
  ASSERT_OK_AND_ASSIGN(int freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 1);
  EXPECT_EQ(Used(), 0u);
  EXPECT_EQ(ChunkFileSize(f.ino(), 0), -1);
  EXPECT_EQ(ChunkFileSize(f.ino(), 1), -1);
}

TEST_F(VolumeTest, OrphansOfAPreviousRunAreKeptForTheirHolders) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  ASSERT_OK_AND_ASSIGN(proto::Attr g, CreateFile(a_, "g"));
  ASSERT_OK(volume_->Open(a_, f.ino(), O_RDWR, /*handle=*/7));
  ASSERT_OK(volume_->Open(a_, f.ino(), O_RDONLY, /*handle=*/8));
  ASSERT_OK(volume_->Open(b_, g.ino(), O_RDWR, /*handle=*/7));
  const std::string data = Pattern(100, 9);
  ASSERT_OK(volume_->Write(a_, f.ino(), 0, data, false));
  ASSERT_OK(volume_->Write(b_, g.ino(), 0, data, false));
  ASSERT_OK(volume_->Remove(a_, kRootIno, "f", false));
  // g goes by being renamed over; b opened it, a did the rename.
  ASSERT_OK_AND_ASSIGN(proto::Attr h, CreateFile(a_, "h"));
  proto::RenameRequest mv;
  mv.set_parent(kRootIno);
  mv.set_name("h");
  mv.set_new_parent(kRootIno);
  mv.set_new_name("g");
  ASSERT_OK(volume_->Rename(a_, mv));
  EXPECT_EQ(Used(), 2 * kBlockSize);

  OpenVolume(kMiB, /*same_clients=*/true);  // a restart or a failover
  // Both orphans are still there for the sessions that had them open.
  EXPECT_EQ(ReadAll(a_, f.ino()), data);
  EXPECT_EQ(ReadAll(b_, g.ino()), data);
  EXPECT_EQ(volume_->sessions().OpenCountBy(a_.client_id, f.ino()), 2u);
  EXPECT_EQ(volume_->sessions().OpenCountBy(b_.client_id, g.ino()), 1u);
  EXPECT_EQ(volume_->sessions().List().size(), 2u);  // given a lease to come back in
  // Both come back and name what they have open: opens already known count
  // once.
  EXPECT_EQ(volume_->sessions().reclaiming(), 2u);
  EXPECT_TRUE(Reclaim(a_, {{f.ino(), 7}, {f.ino(), 8}}).empty());
  EXPECT_TRUE(Reclaim(b_, {{g.ino(), 7}}).empty());
  EXPECT_EQ(volume_->sessions().reclaiming(), 0u);
  EXPECT_EQ(volume_->sessions().OpenCountBy(a_.client_id, f.ino()), 2u);
  EXPECT_EQ(volume_->sessions().OpenCountBy(b_.client_id, g.ino()), 1u);
  // The holder can still open it; nobody else can.
  EXPECT_EQ(Err(volume_->Open(b_, f.ino(), O_RDONLY, 1)), ESTALE);
  ASSERT_OK(volume_->Open(a_, f.ino(), O_RDONLY, 9));
  ASSERT_OK(volume_->Release(a_, f.ino(), 9));

  // a comes back and closes both of its opens; a resent release counts once.
  ASSERT_OK(volume_->Release(a_, f.ino(), 7));
  ASSERT_OK(volume_->Release(a_, f.ino(), 7));
  ASSERT_OK_AND_ASSIGN(int freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 0);
  ASSERT_OK(volume_->Release(a_, f.ino(), 8));
  ASSERT_OK_AND_ASSIGN(freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 1);
  EXPECT_EQ(Err(volume_->GetAttr(a_, f.ino())), ENOENT);

  // b keeps g through one more restart, then never comes back: its lease
  // runs out and g goes.
  OpenVolume(kMiB, /*same_clients=*/true);
  EXPECT_EQ(ReadAll(b_, g.ino()), data);
  EXPECT_TRUE(Reclaim(a_).empty());
  clock_.Advance(kLease / 2);
  ASSERT_OK_AND_ASSIGN(freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 0);
  clock_.Advance(kLease / 2);
  ASSERT_OK_AND_ASSIGN(freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 1);
  EXPECT_EQ(Used(), 0u);
  OpenVolume(kMiB, /*same_clients=*/true);
  EXPECT_EQ(Err(volume_->GetAttr(b_, g.ino())), ENOENT);
  EXPECT_TRUE(volume_->sessions().List().empty());
}

TEST_F(VolumeTest, AFileOpenAtARestartIsKeptUntilItsHolderReclaims) {
  // a has f open while it still has a name: no record says so.
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  ASSERT_OK(volume_->Open(a_, f.ino(), O_RDWR, /*handle=*/3));
  const std::string data = Pattern(5000, 4);
  ASSERT_OK(volume_->Write(a_, f.ino(), 0, data, false));
  const uint64_t used = Used();

  OpenVolume(kMiB, /*same_clients=*/true);  // a restart or a failover
  EXPECT_EQ(volume_->sessions().reclaiming(), 2u);
  std::vector<proto::SessionInfo> list = volume_->sessions().List();
  ASSERT_EQ(list.size(), 2u);
  for (const proto::SessionInfo& info : list) {
    EXPECT_TRUE(info.reclaiming());
    EXPECT_TRUE(info.client_name() == "a" || info.client_name() == "b") << info.client_name();
  }
  // b comes back first and unlinks f: a may still have it open, so it stays.
  EXPECT_TRUE(Reclaim(b_).empty());
  ASSERT_OK(volume_->Remove(b_, kRootIno, "f", false));
  ASSERT_OK_AND_ASSIGN(int freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 0);
  EXPECT_EQ(Used(), used);
  // a names its open (and one of a file that is gone): it keeps f.
  const uint64_t gone = f.ino() + 1000;
  EXPECT_EQ(Reclaim(a_, {{f.ino(), 3}, {gone, 4}}), std::vector<uint64_t>{gone});
  EXPECT_EQ(volume_->sessions().reclaiming(), 0u);
  EXPECT_EQ(volume_->sessions().OpenCountBy(a_.client_id, f.ino()), 1u);
  ASSERT_OK_AND_ASSIGN(freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 0);
  EXPECT_EQ(ReadAll(a_, f.ino()), data);
  ASSERT_OK(volume_->Write(a_, f.ino(), data.size(), "tail", false));
  // Its close frees it.
  ASSERT_OK(volume_->Release(a_, f.ino(), 3));
  ASSERT_OK_AND_ASSIGN(freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 1);
  EXPECT_EQ(Used(), 0u);
}

TEST_F(VolumeTest, UnlinkedFilesAreFreedOnceTheSessionsThatDoNotComeBackExpire) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  ASSERT_OK(volume_->Write(a_, f.ino(), 0, "x", false));
  OpenVolume(kMiB, /*same_clients=*/true);
  EXPECT_TRUE(Reclaim(b_).empty());
  ASSERT_OK(volume_->Remove(b_, kRootIno, "f", false));
  // a never comes back; b keeps its session alive.
  clock_.Advance(kLease / 2);
  ASSERT_OK(volume_->Touch(b_.client_id));
  ASSERT_OK_AND_ASSIGN(int freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 0);
  EXPECT_EQ(volume_->sessions().reclaiming(), 1u);
  clock_.Advance(kLease / 2);
  ASSERT_OK(volume_->Touch(b_.client_id));
  ASSERT_OK_AND_ASSIGN(freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 1);
  EXPECT_EQ(volume_->sessions().reclaiming(), 0u);
  EXPECT_EQ(volume_->sessions().List().size(), 1u);
  EXPECT_EQ(Used(), 0u);
  // a's record went with its session: the next start waits only for b.
  OpenVolume(kMiB, /*same_clients=*/true);
  EXPECT_EQ(volume_->sessions().reclaiming(), 1u);
}

TEST_F(VolumeTest, GraceEndsTwoLeasesAfterTheStartEvenIfAClientNeverReclaims) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  ASSERT_OK(volume_->Write(a_, f.ino(), 0, "x", false));
  OpenVolume(kMiB, /*same_clients=*/true);
  EXPECT_TRUE(Reclaim(b_).empty());
  ASSERT_OK(volume_->Remove(b_, kRootIno, "f", false));
  // a stays alive (its requests renew its lease) but never reclaims, like a
  // mount of a build that does not know Reclaim.
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(kLease / 2);
    ASSERT_OK(volume_->Touch(a_.client_id));
    ASSERT_OK(volume_->Touch(b_.client_id));
    ASSERT_OK_AND_ASSIGN(int freed, volume_->RunMaintenance());
    EXPECT_EQ(freed, 0) << "after " << (i + 1) << " half leases";
  }
  EXPECT_EQ(volume_->sessions().reclaiming(), 1u);
  clock_.Advance(kLease / 2);
  ASSERT_OK_AND_ASSIGN(int freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 1);
  EXPECT_EQ(volume_->sessions().reclaiming(), 0u);
  EXPECT_EQ(volume_->sessions().List().size(), 2u);
}

TEST_F(VolumeTest, AnOpenAfterTheSessionEndedRecreatesItWithARecord) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  clock_.Advance(kLease);
  // RunMaintenance ends the session in one go; the window between the end
  // and Forgotten is what SessionTable's own test covers. Here: once it is
  // over, the client's next request re-creates its session, with a record.
  ASSERT_OK(volume_->RunMaintenance().status());
  EXPECT_TRUE(volume_->sessions().List().empty());
  ASSERT_OK(volume_->Open(a_, f.ino(), O_RDONLY, 1));  // re-creates the session
  EXPECT_EQ(volume_->sessions().OpenCountBy(a_.client_id, f.ino()), 1u);
  OpenVolume(kMiB, /*same_clients=*/true);
  EXPECT_EQ(volume_->sessions().List().size(), 1u);  // a's record was written again
}

TEST_F(VolumeTest, ASessionRecreatedByARequestIsRecordedAgain) {
  ASSERT_OK(volume_->CloseSession(a_.client_id));
  ASSERT_OK(volume_->Touch(a_.client_id));  // a request of a's, e.g. after a long partition
  OpenVolume(kMiB, /*same_clients=*/true);
  std::vector<proto::SessionInfo> list = volume_->sessions().List();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(volume_->sessions().reclaiming(), 2u);
}

TEST_F(VolumeTest, ClosedSessionsLeaveNothingToWaitFor) {
  // OpenVolume without same_clients: a and b unmount, then new ones mount.
  OpenVolume(kMiB);
  EXPECT_EQ(volume_->sessions().reclaiming(), 0u);
  EXPECT_EQ(volume_->sessions().List().size(), 2u);
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  ASSERT_OK(volume_->Write(a_, f.ino(), 0, "x", false));
  ASSERT_OK(volume_->Remove(a_, kRootIno, "f", false));
  ASSERT_OK_AND_ASSIGN(int freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 1);
}

TEST_F(VolumeTest, MaintenanceReapsAnOrphanWhoseRecordMissedTheLastRelease) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  ASSERT_OK(volume_->Open(a_, f.ino(), O_RDWR, 4));
  ASSERT_OK(volume_->Write(a_, f.ino(), 0, "x", false));
  ASSERT_OK(volume_->Remove(a_, kRootIno, "f", false));
  // As if Release's record update had failed (the replica did not answer):
  // the open is gone, the record still names it.
  volume_->sessions().CloseFile(a_.client_id, f.ino(), 4);
  ASSERT_OK_AND_ASSIGN(int freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 1);
  EXPECT_EQ(Used(), 0u);
  OpenVolume(kMiB, /*same_clients=*/true);
  EXPECT_EQ(Err(volume_->GetAttr(a_, f.ino())), ENOENT);
}

TEST_F(VolumeTest, AResentOpenCountsOnceByItsHandle) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  ASSERT_OK(volume_->Open(a_, f.ino(), O_RDWR, 5));
  ASSERT_OK(volume_->Open(a_, f.ino(), O_RDWR, 5));  // the reply was lost; sent again
  EXPECT_EQ(volume_->sessions().OpenCountBy(a_.client_id, f.ino()), 1u);
  ASSERT_OK(volume_->Write(a_, f.ino(), 0, "x", false));
  ASSERT_OK(volume_->Remove(a_, kRootIno, "f", false));
  ASSERT_OK(volume_->Release(a_, f.ino(), 5));
  ASSERT_OK_AND_ASSIGN(int freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 1);
  EXPECT_EQ(Used(), 0u);
}

TEST_F(VolumeTest, LocksSurviveARestartAndGoWithTheirSession) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  ASSERT_OK_AND_ASSIGN(proto::Attr g, CreateFile(a_, "g"));
  ASSERT_OK(volume_->SetLock(a_, f.ino(), WriteLock(a_.client_id, 1, 0, 99)));
  FileLock shared = WriteLock(b_.client_id, 4, 200, 299);
  shared.type = FileLock::kRead;
  ASSERT_OK(volume_->SetLock(b_, f.ino(), shared));
  FileLock flock = WriteLock(b_.client_id, 4);
  flock.flock = true;
  ASSERT_OK(volume_->SetLock(b_, g.ino(), flock));
  // Taken and given back before the restart: not there afterwards.
  ASSERT_OK(volume_->SetLock(a_, g.ino(), WriteLock(a_.client_id, 2, 10, 10)));
  FileLock unlock = WriteLock(a_.client_id, 2, 10, 10);
  unlock.type = FileLock::kUnlock;
  ASSERT_OK(volume_->SetLock(a_, g.ino(), unlock));

  OpenVolume(kMiB, /*same_clients=*/true);
  EXPECT_EQ(Err(volume_->SetLock(b_, f.ino(), WriteLock(b_.client_id, 4, 50, 50))), EAGAIN);
  EXPECT_EQ(Err(volume_->SetLock(a_, f.ino(), WriteLock(a_.client_id, 1, 250, 250))), EAGAIN);
  FileLock f2 = WriteLock(a_.client_id, 9);
  f2.flock = true;
  EXPECT_EQ(Err(volume_->SetLock(a_, g.ino(), f2)), EAGAIN);
  EXPECT_EQ(Err(volume_->SetLock(a_, g.ino(), WriteLock(a_.client_id, 2, 10, 10))), 0);
  ASSERT_OK_AND_ASSIGN(FileLock held, volume_->GetLock(b_, f.ino(), WriteLock(b_.client_id, 4)));
  EXPECT_EQ(held.type, FileLock::kWrite);
  EXPECT_EQ(held.end, 99u);
  EXPECT_EQ(held.owner.client_id, a_.client_id);

  // a comes back and unlocks at close; b does not come back at all.
  FileLock all = WriteLock(a_.client_id, 1);
  all.type = FileLock::kUnlock;
  ASSERT_OK(volume_->SetLock(a_, f.ino(), all));
  clock_.Advance(kLease);
  volume_->sessions().Touch(a_.client_id);
  ASSERT_OK(volume_->RunMaintenance().status());
  OpenVolume(kMiB, /*same_clients=*/true);  // what is left is what was written
  EXPECT_EQ(Err(volume_->SetLock(a_, f.ino(), WriteLock(a_.client_id, 1))), 0);
  EXPECT_EQ(Err(volume_->SetLock(a_, g.ino(), f2)), 0);
  EXPECT_EQ(Err(volume_->SetLock(b_, g.ino(), WriteLock(b_.client_id, 3, 10, 10))), EAGAIN);
}

TEST_F(VolumeTest, SessionsAreKeptWhileTheServerIsNotServing) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  ASSERT_OK(volume_->SetLock(a_, f.ino(), WriteLock(a_.client_id, 1)));
  serving_ = false;  // cut off: no client can reach this server
  clock_.Advance(3 * kLease);
  ASSERT_OK(volume_->RunMaintenance().status());
  EXPECT_EQ(volume_->sessions().List().size(), 2u);
  serving_ = true;  // back: every session has a whole lease to come back in
  clock_.Advance(kLease / 2);
  ASSERT_OK(volume_->RunMaintenance().status());
  EXPECT_EQ(volume_->sessions().List().size(), 2u);
  EXPECT_EQ(Err(volume_->SetLock(b_, f.ino(), WriteLock(b_.client_id, 1))), EAGAIN);
  volume_->sessions().Touch(b_.client_id);
  clock_.Advance(kLease / 2);
  ASSERT_OK(volume_->RunMaintenance().status());
  ASSERT_EQ(volume_->sessions().List().size(), 1u);  // a never came back
  EXPECT_EQ(Err(volume_->SetLock(b_, f.ino(), WriteLock(b_.client_id, 1))), 0);
}

TEST_F(VolumeTest, LeaseExpiryReleasesLocksAndReapsUnlinkedOpenFiles) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  ASSERT_OK_AND_ASSIGN(proto::Attr kept, CreateFile(a_, "kept"));
  ASSERT_OK(volume_->Open(a_, f.ino(), O_RDWR));
  ASSERT_OK(volume_->Open(a_, kept.ino(), O_RDWR));
  ASSERT_OK(volume_->Write(a_, f.ino(), 0, std::string(2 * kBlockSize, 'f'), false));
  ASSERT_OK(volume_->Write(a_, kept.ino(), 0, std::string(kBlockSize, 'k'), false));
  ASSERT_OK(volume_->SetLock(a_, kept.ino(), WriteLock(a_.client_id, 7)));
  ASSERT_OK(volume_->Remove(a_, kRootIno, "f", false));
  EXPECT_EQ(Err(volume_->SetLock(b_, kept.ino(), WriteLock(b_.client_id, 1))), EAGAIN);

  // Halfway through the lease nothing happens; b keeps its session alive.
  clock_.Advance(kLease / 2);
  volume_->sessions().Touch(b_.client_id);
  ASSERT_OK_AND_ASSIGN(int freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 0);
  EXPECT_EQ(Used(), 3 * kBlockSize);
  EXPECT_EQ(Err(volume_->SetLock(b_, kept.ino(), WriteLock(b_.client_id, 1))), EAGAIN);

  // a is not heard from for a whole lease.
  clock_.Advance(kLease / 2);
  volume_->sessions().Touch(b_.client_id);
  ASSERT_OK_AND_ASSIGN(freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 1);  // f, unlinked and open only by a
  EXPECT_EQ(Used(), kBlockSize);
  EXPECT_EQ(Err(volume_->GetAttr(b_, f.ino())), ENOENT);
  EXPECT_EQ(volume_->sessions().OpenCount(kept.ino()), 0u);
  ASSERT_OK_AND_ASSIGN(FileLock held, volume_->GetLock(b_, kept.ino(), WriteLock(b_.client_id, 1)));
  EXPECT_EQ(held.type, FileLock::kUnlock);
  EXPECT_EQ(Err(volume_->SetLock(b_, kept.ino(), WriteLock(b_.client_id, 1))), 0);
  // The linked file is untouched.
  EXPECT_EQ(ReadAll(b_, kept.ino()), std::string(kBlockSize, 'k'));
  ASSERT_EQ(volume_->sessions().List().size(), 1u);
  EXPECT_EQ(volume_->sessions().List()[0].client_id(), b_.client_id);
}

TEST_F(VolumeTest, CloseSessionReleasesLocksAndOpenFiles) {
  ASSERT_OK_AND_ASSIGN(proto::Attr f, CreateFile(a_, "f"));
  ASSERT_OK(volume_->Open(a_, f.ino(), O_RDWR));
  ASSERT_OK(volume_->Write(a_, f.ino(), 0, "data", false));
  ASSERT_OK(volume_->SetLock(a_, f.ino(), WriteLock(a_.client_id, 1)));
  ASSERT_OK(volume_->Remove(a_, kRootIno, "f", false));
  ASSERT_OK(volume_->CloseSession(a_.client_id));
  ASSERT_OK_AND_ASSIGN(int freed, volume_->RunMaintenance());
  EXPECT_EQ(freed, 1);
  EXPECT_EQ(Used(), 0u);
}
}  // namespace
}  // namespace grantfs
