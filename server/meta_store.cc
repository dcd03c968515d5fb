#include "server/meta_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/meta_digest.h"
#include "common/errno_status.h"
#include "common/rocks_logger.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "rocksdb/utilities/checkpoint.h"
#include "rocksdb/write_batch.h"
#include "server/dedupe.h"
#include "server/grant_policy.h"
#include "server/keys.h"
#include "server/names.h"

namespace grantfs {
namespace {

constexpr uint64_t kBlocksPerChunkBits = 8;  // bits per bitmap byte

// RocksDB's ENOSPC: the status itself, or a background error it keeps
// answering with until it is resumed.
bool IsNoSpace(const rocksdb::Status& s) {
  return s.IsNoSpace() || absl::StrContains(s.ToString(), "No space left on device");
}

absl::Status DbError(const rocksdb::Status& s, const char* what) {
  LOG(ERROR) << "metadata store: " << what << ": " << s.ToString();
  // A full disk is ENOSPC to the caller, anything else EIO.
  return ErrnoStatus(IsNoSpace(s) ? ENOSPC : EIO, absl::StrCat(what, ": ", s.ToString()));
}

bool IsDir(const proto::InodeRecord& r) { return S_ISDIR(r.mode()); }

// A new volume's id: 128 random bits as 32 hex digits.
std::string NewVolumeId() {
  std::random_device rd;
  std::string id;
  for (int i = 0; i < 4; ++i) absl::StrAppend(&id, absl::Hex(rd(), absl::kZeroPad8));
  return id;
}

int CountBits(const std::string& bitmap) {
  int n = 0;
  for (unsigned char c : bitmap) n += __builtin_popcount(c);
  return n;
}

// Calls fn(chunk_index, lo, hi) for each chunk that [offset, offset + length)
// touches, with the inclusive range of its blocks inside that chunk.
template <typename Fn>
absl::Status ForEachChunkRange(uint64_t offset, uint64_t length, uint64_t chunk_size, Fn fn) {
  if (length == 0) return absl::OkStatus();
  const uint64_t per_chunk = chunk_size / kBlockSize;
  const uint64_t first = offset / kBlockSize;
  const uint64_t last = (offset + length - 1) / kBlockSize;
  for (uint64_t c = first / per_chunk; c <= last / per_chunk; ++c) {
    const uint64_t base = c * per_chunk;
    const uint64_t lo = std::max(first, base) - base;
    const uint64_t hi = std::min(last, base + per_chunk - 1) - base;
    RETURN_IF_ERROR(fn(c, lo, hi));
  }
  return absl::OkStatus();
}

bool BitSet(const std::string& bitmap, uint64_t b) {
  return b / 8 < bitmap.size() && (bitmap[b / 8] >> (b % 8)) & 1;
}

}  // namespace

// One change being built: reads see the change's own earlier writes.
// REQUIRES: the MetaStore's mu_ is held for the Txn's whole life.
class MetaStore::Txn {
 public:
  explicit Txn(rocksdb::DB* db) : db_(db) {}

  absl::StatusOr<std::optional<std::string>> Get(const std::string& key) {
    if (auto it = pending_.find(key); it != pending_.end()) return it->second;
    std::string value;
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), key, &value);
    if (s.IsNotFound()) return std::optional<std::string>();
    if (!s.ok()) return DbError(s, "get");
    return std::optional<std::string>(std::move(value));
  }
  void Put(const std::string& key, const std::string& value) {
    batch_.Put(key, value);
    pending_[key] = value;
  }
  void Delete(const std::string& key) {
    batch_.Delete(key);
    pending_[key] = std::nullopt;
  }

  absl::StatusOr<proto::InodeRecord> GetInode(uint64_t ino) {
    ASSIGN_OR_RETURN(auto v, Get(keys::Inode(ino)));
    if (!v) return ErrnoStatus(ENOENT, absl::StrCat("inode ", ino));
    proto::InodeRecord rec;
    if (!rec.ParseFromString(*v)) return ErrnoStatus(EIO, "corrupt inode record");
    return rec;
  }
  void PutInode(uint64_t ino, const proto::InodeRecord& rec) {
    Put(keys::Inode(ino), rec.SerializeAsString());
  }
  absl::StatusOr<std::optional<proto::DirentRecord>> GetDirent(uint64_t parent,
                                                               const std::string& name) {
    ASSIGN_OR_RETURN(auto v, Get(keys::Dirent(parent, name)));
    if (!v) return std::optional<proto::DirentRecord>();
    proto::DirentRecord d;
    if (!d.ParseFromString(*v)) return ErrnoStatus(EIO, "corrupt dirent record");
    return std::optional<proto::DirentRecord>(d);
  }
  // Adds or replaces the entry `name` of `parent`, keeping its cookie.
  void PutDirent(uint64_t parent, const std::string& name, const proto::DirentRecord& d) {
    Put(keys::Dirent(parent, name), d.SerializeAsString());
    proto::DirentRecord listed = d;
    listed.set_name(name);
    Put(keys::DirCookie(parent, d.cookie()), listed.SerializeAsString());
  }
  void DeleteDirent(uint64_t parent, const std::string& name, const proto::DirentRecord& d) {
    Delete(keys::Dirent(parent, name));
    Delete(keys::DirCookie(parent, d.cookie()));
  }

  rocksdb::WriteBatch* batch() { return &batch_; }

 private:
  rocksdb::DB* const db_;
  rocksdb::WriteBatch batch_;
  std::map<std::string, std::optional<std::string>> pending_;
};

MetaStore::MetaStore(const MetaStoreOptions& options, rocksdb::DB* db)
    : options_(options), db_(db), ledger_(options.disk_available) {}

MetaStore::~MetaStore() { delete db_; }

absl::StatusOr<std::unique_ptr<MetaStore>> MetaStore::Open(const MetaStoreOptions& options) {
  if (options.dir.empty()) return absl::InvalidArgumentError("metadata dir is empty");
  if (options.capacity_bytes != 0 && options.capacity_bytes < kBlockSize) {
    return absl::InvalidArgumentError("capacity must be at least 4096 bytes");
  }
  if (options.chunk_size % (kBlockSize * kBlocksPerChunkBits) != 0) {
    return absl::InvalidArgumentError("chunk_size must be a multiple of 32 KiB");
  }
  rocksdb::Options db_options;
  db_options.create_if_missing = true;
  db_options.max_background_jobs = 2;
  db_options.info_log = NewRocksLogger();  // not meta/LOG: common/rocks_logger.h
  // Metadata records are small: a 16 MiB memtable is plenty, and it bounds
  // what the WAL preallocates on the data disk (1.1 x this per WAL file;
  // with the default 64 MiB, 75 MiB of a small disk went to meta/).
  db_options.write_buffer_size = 16ull << 20;
  db_options.max_total_wal_size = 32ull << 20;
  if (options.rocksdb_env != nullptr) db_options.env = options.rocksdb_env;
  rocksdb::DB* db = nullptr;
  // Made here, so that RocksDB does not log a missing directory as an error.
  if (mkdir(options.dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::FailedPreconditionError(
        absl::StrCat("mkdir ", options.dir, ": ", strerror(errno)));
  }
  rocksdb::Status s = rocksdb::DB::Open(db_options, options.dir, &db);
  if (!s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("opening metadata store ", options.dir, ": ", s.ToString()));
  }
  std::unique_ptr<MetaStore> store(new MetaStore(options, db));
  RETURN_IF_ERROR(store->Init());
  return store;
}

absl::Status MetaStore::Init() {
  absl::MutexLock l(&mu_);
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), keys::Counters(), &value);
  if (s.ok()) {
    if (!counters_.ParseFromString(value)) return absl::DataLossError("corrupt counters");
    std::map<uint64_t, uint64_t> grants;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
    for (it->Seek("L"); it->Valid() && it->key().starts_with("L"); it->Next()) {
      proto::GrantRecord g;
      if (!g.ParseFromArray(it->value().data(), it->value().size())) {
        return absl::DataLossError("corrupt grant record");
      }
      grants[keys::GetBigEndian64(it->key().data() + 1)] = g.blocks();
    }
    if (!it->status().ok()) return DbError(it->status(), "loading grants");
    // The per-session records are the truth; the total is derived from
    // them (a total written by an older version could disagree).
    ledger_.Load(counters_.capacity_blocks(), counters_.used_blocks(), std::move(grants));
    if (ledger_.granted() != counters_.granted_blocks()) {
      LOG(WARNING) << "ledger: granted total " << counters_.granted_blocks()
                   << " blocks disagrees with the sessions' grants, " << ledger_.granted()
                   << " blocks: using the latter";
      counters_.set_granted_blocks(ledger_.granted());
    }
    // The capacity is the volume's, not re-derived from free space at each
    // start (a full disk would make it 0): only an explicit one changes it.
    const uint64_t recorded = counters_.capacity_blocks();
    uint64_t wanted = SpaceLedger::BlocksWithin(options_.capacity_bytes);
    if (recorded == 0 && wanted == 0) {
      wanted = SpaceLedger::BlocksWithin(options_.new_volume_capacity_bytes);
    }
    if (wanted != 0 && wanted != recorded) {
      const uint64_t held = counters_.used_blocks() + counters_.granted_blocks();
      if (wanted < held) {
        return absl::FailedPreconditionError(absl::StrCat(
            "capacity ", SpaceLedger::Bytes(wanted),
            " bytes is below what the volume uses and grants (", SpaceLedger::Bytes(held),
            " bytes); capacity stays ", SpaceLedger::Bytes(recorded), " bytes"));
      }
      if (recorded != 0) {
        LOG(WARNING) << "capacity changed by --capacity: " << SpaceLedger::Bytes(recorded) << " -> "
                     << SpaceLedger::Bytes(wanted) << " bytes";
      }
      counters_.set_capacity_blocks(wanted);
      rocksdb::WriteOptions wo;
      wo.sync = true;
      s = db_->Put(wo, keys::Counters(), counters_.SerializeAsString());
      if (!s.ok()) return DbError(s, "recording the capacity");
    }
    ledger_.set_capacity(counters_.capacity_blocks());
    ledger_.Check();
    std::optional<proto::VolumeIdentity> stored;
    s = db_->Get(rocksdb::ReadOptions(), keys::Identity(), &value);
    if (s.ok()) {
      stored.emplace();
      if (!stored->ParseFromString(value) || stored->volume_id().empty()) {
        return absl::DataLossError("corrupt volume identity");
      }
    } else if (!s.IsNotFound()) {
      return DbError(s, "reading the volume identity");
    }
    return RaiseDataEpoch(std::move(stored));
  }
  if (!s.IsNotFound()) return DbError(s, "reading counters");
  // A new volume: the root directory, owned by root, mode 0755.
  const uint64_t capacity =
      options_.capacity_bytes != 0 ? options_.capacity_bytes : options_.new_volume_capacity_bytes;
  if (capacity < kBlockSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("capacity must be at least 4096 bytes (got ", capacity, ")"));
  }
  ledger_.set_capacity(SpaceLedger::BlocksWithin(capacity));
  counters_.set_capacity_blocks(ledger_.capacity());
  const int64_t now = options_.clock->NowNanos();
  proto::InodeRecord root;
  root.set_mode(S_IFDIR | 0755);
  root.set_nlink(2);
  root.set_parent(kRootIno);
  root.set_atime_ns(now);
  root.set_mtime_ns(now);
  root.set_ctime_ns(now);
  counters_.set_next_ino(kRootIno + 1);
  counters_.set_next_cookie(3);  // 1 and 2 are "." and ".."
  counters_.set_inodes(1);
  // The identity comes with the root: a store holds a volume with one, or
  // nothing (data_dir.h tells the two apart).
  identity_.set_volume_id(NewVolumeId());
  identity_.set_created_ns(now);
  identity_.set_data_epoch(std::max<uint64_t>(1, options_.epoch));
  rocksdb::WriteBatch batch;
  batch.Put(keys::Inode(kRootIno), root.SerializeAsString());
  batch.Put(keys::Counters(), counters_.SerializeAsString());
  batch.Put(keys::Identity(), identity_.SerializeAsString());
  RETURN_IF_ERROR(WriteAtOpen(&batch, "creating the root"));
  LOG(INFO) << "metadata store: new volume " << identity_.volume_id() << " in " << options_.dir
            << ", data epoch " << identity_.data_epoch();
  return absl::OkStatus();
}

absl::Status MetaStore::RaiseDataEpoch(std::optional<proto::VolumeIdentity> recorded) {
  proto::VolumeIdentity id;
  if (recorded.has_value()) {
    id = *std::move(recorded);
  } else {
    id.set_volume_id(NewVolumeId());
    LOG(WARNING) << "metadata store: the volume in " << options_.dir
                 << " has no identity (it was made before they were recorded); it is volume "
                 << id.volume_id() << " from now on";
  }
  const uint64_t was = id.data_epoch();
  id.set_data_epoch(std::max(was + 1, options_.epoch));
  rocksdb::WriteBatch batch;
  batch.Put(keys::Identity(), id.SerializeAsString());
  RETURN_IF_ERROR(WriteAtOpen(&batch, "raising the data epoch"));
  identity_ = id;
  LOG(INFO) << "metadata store: volume " << id.volume_id() << " in " << options_.dir
            << ", data epoch " << was << " -> " << id.data_epoch();
  return absl::OkStatus();
}

absl::Status MetaStore::WriteAtOpen(rocksdb::WriteBatch* batch, const char* what) {
  rocksdb::WriteOptions wo;
  wo.sync = true;
  rocksdb::Status s = db_->Write(wo, batch);
  if (!s.ok()) return DbError(s, what);
  // No client waits for it: the replica gets it with the first records (or
  // in its snapshot) before it counts as in sync.
  if (options_.change_sink != nullptr) {
    proto::ReplRecord rec;
    rec.set_meta_batch(batch->Data());
    options_.change_sink->Append(std::move(rec));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<proto::VolumeIdentity>> MetaStore::ReadIdentity(
    const std::string& dir) {
  rocksdb::Options o;
  o.info_log = NewRocksLogger();  // read-only: no meta/LOG either
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::OpenForReadOnly(o, dir, &raw);
  if (!s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("opening metadata store ", dir, " read-only: ", s.ToString()));
  }
  std::unique_ptr<rocksdb::DB> db(raw);
  std::string v;
  s = db->Get(rocksdb::ReadOptions(), keys::Identity(), &v);
  if (s.IsNotFound()) return std::optional<proto::VolumeIdentity>();
  if (!s.ok()) {
    return absl::InternalError(
        absl::StrCat("reading the volume identity in ", dir, ": ", s.ToString()));
  }
  proto::VolumeIdentity id;
  if (!id.ParseFromString(v) || id.volume_id().empty()) {
    return absl::DataLossError(absl::StrCat("corrupt volume identity in ", dir));
  }
  return std::optional<proto::VolumeIdentity>(std::move(id));
}

template <typename Fn>
absl::Status MetaStore::Mutate(Fn fn) {
  uint64_t ticket;
  uint64_t replicated_seq = 0;
  {
    absl::MutexLock l(&mu_);
    Txn txn(db_);
    proto::Counters saved = counters_;
    SpaceLedger::Durable saved_ledger = ledger_.Save();
    absl::Status st = fn(&txn);
    if (!st.ok()) {
      counters_ = saved;
      ledger_.Restore(std::move(saved_ledger));
      return st;
    }
    counters_.set_used_blocks(ledger_.used());
    counters_.set_granted_blocks(ledger_.granted());
    txn.batch()->Put(keys::Counters(), counters_.SerializeAsString());
    // Exactly-once: the request's record rides in the same batch.
    RequestTag* tag = RequestTag::Current();
    const bool record = tag != nullptr && tag->active();
    if (record) {
      proto::DedupeRecord d;
      d.set_value(tag->value);
      d.set_time_ns(options_.clock->NowNanos());
      txn.batch()->Put(keys::Dedupe(tag->client_id, tag->seq), d.SerializeAsString());
    }
    // Applied without fsync under mu_ so the next change reads this one;
    // the fsync happens in WaitDurable, outside mu_.
    rocksdb::Status s = db_->Write(rocksdb::WriteOptions(), txn.batch());
    if (!s.ok() && IsNoSpace(s) && options_.make_room && options_.make_room()) {
      LOG(WARNING) << "metadata store: the disk is full (" << s.ToString()
                   << "); writing again in room lent from the metadata reserve";
      rocksdb::Status resumed = ResumeLocked();
      s = resumed.ok() ? db_->Write(rocksdb::WriteOptions(), txn.batch()) : resumed;
    }
    if (!s.ok()) {
      counters_ = saved;
      ledger_.Restore(std::move(saved_ledger));
      return DbError(s, "write");
    }
    ledger_.Check();
    if (record) tag->recorded = true;
    ticket = applied_ticket_.fetch_add(1) + 1;
    // Queued for the replica in the order of application (under mu_).
    if (options_.change_sink != nullptr) {
      proto::ReplRecord rec;
      rec.set_meta_batch(txn.batch()->Data());
      replicated_seq = options_.change_sink->Append(std::move(rec));
    }
  }
  // The local fsync and the replica's apply run at the same time: the batch
  // is on its way to the replica already.
  RETURN_IF_ERROR(WaitDurable(ticket));
  if (options_.change_sink != nullptr) {
    return options_.change_sink->WaitReplicated(replicated_seq);
  }
  return absl::OkStatus();
}

rocksdb::Status MetaStore::ResumeLocked() {
  // A full disk is a retryable error to RocksDB: it has started its own
  // recovery already, and Resume() is Busy until that ends, which the room
  // just made lets happen at once (tens of milliseconds). Waited for, up to
  // 2 s: the first write after the room was made was EIO without the wait.
  rocksdb::Status s = db_->Resume();
  for (int i = 0; s.IsBusy() && i < 100; ++i) {
    absl::SleepFor(absl::Milliseconds(20));
    s = db_->Resume();
  }
  return s;
}

absl::StatusOr<uint64_t> MetaStore::Checkpoint(const std::string& dir) {
  absl::MutexLock l(&mu_);  // no batch is applied while the copy is cut
  rocksdb::Checkpoint* raw = nullptr;
  rocksdb::Status s = rocksdb::Checkpoint::Create(db_, &raw);
  if (!s.ok()) return DbError(s, "checkpoint");
  std::unique_ptr<rocksdb::Checkpoint> cp(raw);
  s = cp->CreateCheckpoint(dir);
  if (!s.ok()) return DbError(s, "checkpoint");
  return options_.change_sink != nullptr ? options_.change_sink->Head() : 0;
}

absl::StatusOr<proto::MetaDigest> MetaStore::DigestWithMark() {
  const rocksdb::Snapshot* snap;
  uint64_t seq = 0;
  {
    absl::MutexLock l(&mu_);  // every batch is applied and appended under mu_
    snap = db_->GetSnapshot();
    if (options_.change_sink != nullptr) {
      proto::ReplRecord mark;
      mark.set_digest_mark(true);
      seq = options_.change_sink->Append(std::move(mark));
    }
  }
  absl::StatusOr<proto::MetaDigest> d = DigestMeta(db_, snap, seq);
  db_->ReleaseSnapshot(snap);
  return d;
}

absl::Status MetaStore::ReadSnapshot(
    const std::function<absl::Status(rocksdb::DB* db, const rocksdb::Snapshot* snapshot)>& fn) {
  const rocksdb::Snapshot* snap = db_->GetSnapshot();
  absl::Status st = fn(db_, snap);
  db_->ReleaseSnapshot(snap);
  return st;
}

absl::Status MetaStore::WaitReplicatedAll() {
  if (options_.change_sink == nullptr) return absl::OkStatus();
  return options_.change_sink->WaitReplicated(options_.change_sink->Head());
}

absl::Status MetaStore::WaitDurable(uint64_t ticket) {
  absl::MutexLock l(&sync_mu_);
  while (durable_ticket_ < ticket) {
    if (sync_running_) {
      // Another thread is syncing; it or the next leader covers `ticket`.
      auto done = [this, ticket]() ABSL_SHARED_LOCKS_REQUIRED(sync_mu_) {
        return durable_ticket_ >= ticket || !sync_running_;
      };
      sync_mu_.Await(absl::Condition(&done));
      continue;
    }
    sync_running_ = true;
    const uint64_t target = applied_ticket_.load();
    sync_mu_.Unlock();
    rocksdb::Status s = db_->SyncWAL();
    sync_mu_.Lock();
    sync_running_ = false;
    if (!s.ok()) return DbError(s, "wal sync");
    durable_ticket_ = std::max(durable_ticket_, target);
  }
  return absl::OkStatus();
}

proto::Attr MetaStore::ToAttr(uint64_t ino, const proto::InodeRecord& rec) const {
  proto::Attr a;
  a.set_ino(ino);
  a.set_mode(rec.mode());
  a.set_nlink(rec.nlink());
  a.set_uid(rec.uid());
  a.set_gid(rec.gid());
  a.set_size(S_ISLNK(rec.mode()) ? rec.symlink_target().size() : rec.size());
  a.set_blocks(rec.allocated_blocks() * (kBlockSize / 512));
  a.set_rdev(rec.rdev());
  a.set_atime_ns(rec.atime_ns());
  a.set_mtime_ns(rec.mtime_ns());
  a.set_ctime_ns(rec.ctime_ns());
  return a;
}

// --- reads -------------------------------------------------------------------

absl::StatusOr<proto::InodeRecord> MetaStore::GetInode(uint64_t ino) {
  std::string v;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), keys::Inode(ino), &v);
  if (s.IsNotFound()) return ErrnoStatus(ENOENT, absl::StrCat("inode ", ino));
  if (!s.ok()) return DbError(s, "get inode");
  proto::InodeRecord rec;
  if (!rec.ParseFromString(v)) return ErrnoStatus(EIO, "corrupt inode record");
  return rec;
}

absl::StatusOr<proto::Attr> MetaStore::GetAttr(uint64_t ino) {
  ASSIGN_OR_RETURN(proto::InodeRecord rec, GetInode(ino));
  return ToAttr(ino, rec);
}

absl::StatusOr<proto::Attr> MetaStore::Lookup(const Caller& caller, uint64_t parent,
                                              const std::string& name) {
  if (name.size() > kNameMax) return ErrnoStatus(ENAMETOOLONG, "name");
  ASSIGN_OR_RETURN(proto::InodeRecord dir, GetInode(parent));
  if (!IsDir(dir)) return ErrnoStatus(ENOTDIR, "lookup parent");
  RETURN_IF_ERROR(CheckAccess(dir, caller, kMayExec));
  if (name == ".") return ToAttr(parent, dir);
  if (name == "..") return GetAttr(dir.parent());
  std::string v;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), keys::Dirent(parent, name), &v);
  if (s.IsNotFound()) return ErrnoStatus(ENOENT, name);
  if (!s.ok()) return DbError(s, "get dirent");
  proto::DirentRecord d;
  if (!d.ParseFromString(v)) return ErrnoStatus(EIO, "corrupt dirent record");
  return GetAttr(d.ino());
}

absl::StatusOr<std::string> MetaStore::ReadLink(uint64_t ino) {
  ASSIGN_OR_RETURN(proto::InodeRecord rec, GetInode(ino));
  if (!S_ISLNK(rec.mode())) return ErrnoStatus(EINVAL, "not a symlink");
  return rec.symlink_target();
}

absl::Status MetaStore::ReadDir(const Caller& caller, uint64_t ino, uint64_t cookie, uint32_t max,
                                proto::ReadDirReply* reply) {
  ASSIGN_OR_RETURN(proto::InodeRecord dir, GetInode(ino));
  if (!IsDir(dir)) return ErrnoStatus(ENOTDIR, "readdir");
  RETURN_IF_ERROR(CheckAccess(dir, caller, kMayRead));
  if (max == 0) max = 1;
  auto add = [&](const std::string& name, uint64_t c, proto::Attr attr) {
    proto::DirEntry* e = reply->add_entries();
    e->set_name(name);
    e->set_cookie(c);
    *e->mutable_attr() = std::move(attr);
  };
  if (cookie < 1) add(".", 1, ToAttr(ino, dir));
  if (cookie < 2 && reply->entries_size() < static_cast<int>(max)) {
    ASSIGN_OR_RETURN(proto::Attr up, GetAttr(dir.parent()));
    add("..", 2, up);
  }
  const std::string prefix = keys::Prefix('E', ino);
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(keys::DirCookie(ino, std::max<uint64_t>(cookie + 1, 3)));
       it->Valid() && it->key().starts_with(prefix); it->Next()) {
    if (reply->entries_size() >= static_cast<int>(max)) return absl::OkStatus();
    proto::DirentRecord d;
    if (!d.ParseFromArray(it->value().data(), it->value().size())) {
      return ErrnoStatus(EIO, "corrupt dirent record");
    }
    absl::StatusOr<proto::Attr> attr = GetAttr(d.ino());
    if (!attr.ok()) {
      if (ToErrno(attr.status()) == ENOENT) continue;  // removed meanwhile
      return attr.status();
    }
    add(d.name(), d.cookie(), *std::move(attr));
  }
  if (!it->status().ok()) return DbError(it->status(), "readdir");
  reply->set_eof(true);
  return absl::OkStatus();
}

absl::StatusOr<std::string> MetaStore::GetXattr(const Caller& caller, uint64_t ino,
                                                const std::string& name) {
  RETURN_IF_ERROR(ValidateXattr(name, 0));
  ASSIGN_OR_RETURN(proto::InodeRecord rec, GetInode(ino));
  if (name.rfind("trusted.", 0) == 0 && !caller.IsRoot()) {
    return ErrnoStatus(ENODATA, name);
  }
  if (name.rfind("user.", 0) == 0) RETURN_IF_ERROR(CheckAccess(rec, caller, kMayRead));
  std::string v;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), keys::Xattr(ino, name), &v);
  if (s.IsNotFound()) return ErrnoStatus(ENODATA, name);
  if (!s.ok()) return DbError(s, "get xattr");
  return v;
}

absl::StatusOr<std::vector<std::string>> MetaStore::ListXattr(const Caller& caller, uint64_t ino) {
  ASSIGN_OR_RETURN(proto::InodeRecord rec, GetInode(ino));
  std::vector<std::string> names;
  const std::string prefix = keys::Prefix('X', ino);
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    std::string name = it->key().ToString().substr(prefix.size());
    if (name.rfind("trusted.", 0) == 0 && !caller.IsRoot()) continue;
    names.push_back(std::move(name));
  }
  if (!it->status().ok()) return DbError(it->status(), "listxattr");
  return names;
}

absl::StatusOr<proto::Attr> MetaStore::CheckOpen(const Caller& caller, uint64_t ino, uint32_t flags,
                                                 bool created) {
  ASSIGN_OR_RETURN(proto::InodeRecord rec, GetInode(ino));
  int mask = 0;
  switch (flags & O_ACCMODE) {
    case O_RDONLY:
      mask = kMayRead;
      break;
    case O_WRONLY:
      mask = kMayWrite;
      break;
    default:
      mask = kMayRead | kMayWrite;
  }
  if (flags & O_TRUNC) mask |= kMayWrite;
  if (IsDir(rec) && (mask & kMayWrite)) return ErrnoStatus(EISDIR, "open");
  if (!(created && rec.uid() == caller.uid)) RETURN_IF_ERROR(CheckAccess(rec, caller, mask));
  return ToAttr(ino, rec);
}

SpaceInfo MetaStore::Space() {
  absl::MutexLock l(&mu_);
  SpaceInfo s;
  s.capacity_bytes = SpaceLedger::Bytes(ledger_.capacity());
  s.used_bytes = SpaceLedger::Bytes(ledger_.used());
  s.reserved_bytes = SpaceLedger::Bytes(ledger_.reserved());
  s.granted_bytes = SpaceLedger::Bytes(ledger_.granted());
  s.ledger_ok = ledger_.Check();
  s.inodes = counters_.inodes();
  s.next_ino = counters_.next_ino();
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek("G"); it->Valid() && it->key().starts_with("G"); it->Next()) {
    ++s.pending_deletes;
  }
  return s;
}

// --- namespace changes ------------------------------------------------------

proto::InodeRecord MetaStore::NewInode(const Caller& caller, const proto::InodeRecord& dir,
                                       uint32_t mode) {
  const int64_t now = options_.clock->NowNanos();
  proto::InodeRecord rec;
  rec.set_uid(caller.uid);
  // A setgid directory passes its group on, and its setgid bit to subdirs.
  if (dir.mode() & S_ISGID) {
    rec.set_gid(dir.gid());
    if (S_ISDIR(mode)) mode |= S_ISGID;
  } else {
    rec.set_gid(caller.gid);
  }
  // Only a member of the file's group (or root) may create it setgid.
  if (S_ISREG(mode) && (mode & S_ISGID) && !caller.IsRoot() && !caller.InGroup(rec.gid())) {
    mode &= ~S_ISGID;
  }
  rec.set_mode(mode);
  rec.set_nlink(S_ISDIR(mode) ? 2 : 1);
  rec.set_atime_ns(now);
  rec.set_mtime_ns(now);
  rec.set_ctime_ns(now);
  return rec;
}

absl::StatusOr<proto::Attr> MetaStore::CreateEntry(const Caller& caller, uint64_t parent,
                                                   const std::string& name,
                                                   proto::InodeRecord rec) {
  proto::Attr out;
  RETURN_IF_ERROR(Mutate([&](Txn* txn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    ASSIGN_OR_RETURN(proto::InodeRecord dir, txn->GetInode(parent));
    if (!IsDir(dir)) return ErrnoStatus(ENOTDIR, "create parent");
    if (dir.nlink() == 0) return ErrnoStatus(ENOENT, "parent was removed");
    // As on Linux: an existing name is EEXIST (or, for open(O_CREAT), opened)
    // without write permission on the directory; only search is needed.
    RETURN_IF_ERROR(CheckAccess(dir, caller, kMayExec));
    ASSIGN_OR_RETURN(auto existing, txn->GetDirent(parent, name));
    if (existing) return ErrnoStatus(EEXIST, name);
    RETURN_IF_ERROR(CheckAccess(dir, caller, kMayWrite));
    proto::InodeRecord inode = NewInode(caller, dir, rec.mode());
    inode.set_rdev(rec.rdev());
    inode.set_symlink_target(rec.symlink_target());
    const uint64_t ino = counters_.next_ino();
    counters_.set_next_ino(ino + 1);
    counters_.set_inodes(counters_.inodes() + 1);
    if (RequestTag* tag = RequestTag::Current()) tag->value = ino;  // a retry answers with it
    if (IsDir(inode)) {
      inode.set_parent(parent);
      dir.set_nlink(dir.nlink() + 1);
    }
    proto::DirentRecord d;
    d.set_ino(ino);
    d.set_cookie(counters_.next_cookie());
    d.set_type(inode.mode() & S_IFMT);
    counters_.set_next_cookie(d.cookie() + 1);
    dir.set_mtime_ns(inode.ctime_ns());
    dir.set_ctime_ns(inode.ctime_ns());
    txn->PutInode(parent, dir);
    txn->PutInode(ino, inode);
    txn->PutDirent(parent, name, d);
    out = ToAttr(ino, inode);
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<proto::Attr> MetaStore::MkNod(const Caller& caller, uint64_t parent,
                                             const std::string& name, uint32_t mode, uint64_t rdev,
                                             uint32_t umask, bool exclusive, bool* created_out) {
  if (created_out != nullptr) *created_out = false;
  RETURN_IF_ERROR(ValidateName(name));
  const uint32_t type = mode & S_IFMT;
  switch (type) {
    case S_IFREG:
    case S_IFDIR:
    case S_IFIFO:
    case S_IFSOCK:
      break;
    case S_IFCHR:
    case S_IFBLK:
      if (!caller.IsRoot()) return ErrnoStatus(EPERM, "device node");
      break;
    default:
      return ErrnoStatus(EINVAL, "file type");
  }
  if (type != S_IFDIR) exclusive = exclusive || type != S_IFREG;
  proto::InodeRecord rec;
  rec.set_mode(type | (mode & 07777 & ~umask));
  rec.set_rdev(type == S_IFCHR || type == S_IFBLK ? rdev : 0);
  // open(O_CREAT) without O_EXCL of an existing name opens it; a name
  // removed again between the two steps (another node) is created anew.
  absl::StatusOr<proto::Attr> created;
  for (int attempt = 0; attempt < 8; ++attempt) {
    created = CreateEntry(caller, parent, name, rec);
    if (created.ok() || type == S_IFDIR || exclusive || ToErrno(created.status()) != EEXIST) {
      if (created.ok() && created_out != nullptr) *created_out = true;
      return created;
    }
    absl::StatusOr<proto::Attr> attr = Lookup(caller, parent, name);
    if (!attr.ok() && ToErrno(attr.status()) == ENOENT) continue;
    RETURN_IF_ERROR(attr.status());
    // The kernel creates only after it found no such name: one that is not
    // a regular file now (a directory, a symlink made on another node)
    // means its view was stale; ESTALE makes it look the name up again and
    // retry the open, which then follows the symlink or says EISDIR or
    // ELOOP as POSIX wants.
    if (!S_ISREG(attr->mode())) return ErrnoStatus(ESTALE, "the name is no longer a regular file");
    return attr;
  }
  return created;
}

absl::StatusOr<proto::Attr> MetaStore::Symlink(const Caller& caller, uint64_t parent,
                                               const std::string& name, const std::string& target) {
  RETURN_IF_ERROR(ValidateName(name));
  RETURN_IF_ERROR(ValidateSymlinkTarget(target));
  proto::InodeRecord rec;
  rec.set_mode(S_IFLNK | 0777);
  rec.set_symlink_target(target);
  return CreateEntry(caller, parent, name, rec);
}

absl::StatusOr<proto::Attr> MetaStore::Link(const Caller& caller, uint64_t ino, uint64_t new_parent,
                                            const std::string& new_name) {
  RETURN_IF_ERROR(ValidateName(new_name));
  proto::Attr out;
  RETURN_IF_ERROR(Mutate([&](Txn* txn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    ASSIGN_OR_RETURN(proto::InodeRecord inode, txn->GetInode(ino));
    if (IsDir(inode)) return ErrnoStatus(EPERM, "hard link to a directory");
    if (inode.nlink() == 0) return ErrnoStatus(ENOENT, "link of a removed file");
    if (inode.nlink() >= 65000) return ErrnoStatus(EMLINK, "too many links");
    ASSIGN_OR_RETURN(proto::InodeRecord dir, txn->GetInode(new_parent));
    if (!IsDir(dir)) return ErrnoStatus(ENOTDIR, "link parent");
    if (dir.nlink() == 0) return ErrnoStatus(ENOENT, "parent was removed");
    RETURN_IF_ERROR(CheckAccess(dir, caller, kMayWrite | kMayExec));
    ASSIGN_OR_RETURN(auto existing, txn->GetDirent(new_parent, new_name));
    if (existing) return ErrnoStatus(EEXIST, new_name);
    const int64_t now = options_.clock->NowNanos();
    inode.set_nlink(inode.nlink() + 1);
    inode.set_ctime_ns(now);
    dir.set_mtime_ns(now);
    dir.set_ctime_ns(now);
    proto::DirentRecord d;
    d.set_ino(ino);
    d.set_cookie(counters_.next_cookie());
    d.set_type(inode.mode() & S_IFMT);
    counters_.set_next_cookie(d.cookie() + 1);
    txn->PutInode(new_parent, dir);
    txn->PutInode(ino, inode);
    txn->PutDirent(new_parent, new_name, d);
    out = ToAttr(ino, inode);
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<bool> MetaStore::DirIsEmpty(uint64_t ino) {
  const std::string prefix = keys::Prefix('E', ino);
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  it->Seek(prefix);
  if (!it->status().ok()) return DbError(it->status(), "dir scan");
  return !(it->Valid() && it->key().starts_with(prefix));
}

absl::StatusOr<Removed> MetaStore::Remove(const Caller& caller, uint64_t parent,
                                          const std::string& name, bool is_dir,
                                          uint64_t expected_ino) {
  if (name == ".") return ErrnoStatus(EINVAL, "rmdir .");
  if (name == "..") return ErrnoStatus(ENOTEMPTY, "rmdir ..");
  RETURN_IF_ERROR(ValidateName(name));
  Removed removed;
  RETURN_IF_ERROR(Mutate([&](Txn* txn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    ASSIGN_OR_RETURN(proto::InodeRecord dir, txn->GetInode(parent));
    if (!IsDir(dir)) return ErrnoStatus(ENOTDIR, "remove parent");
    RETURN_IF_ERROR(CheckAccess(dir, caller, kMayWrite | kMayExec));
    ASSIGN_OR_RETURN(auto d, txn->GetDirent(parent, name));
    if (!d) return ErrnoStatus(ENOENT, name);
    if (expected_ino != 0 && d->ino() != expected_ino) {
      return ErrnoStatus(ESTALE, "the name was replaced since the caller looked it up");
    }
    ASSIGN_OR_RETURN(proto::InodeRecord inode, txn->GetInode(d->ino()));
    if (is_dir && !IsDir(inode)) return ErrnoStatus(ENOTDIR, name);
    if (!is_dir && IsDir(inode)) return ErrnoStatus(EISDIR, name);
    RETURN_IF_ERROR(CheckSticky(dir, inode, caller));
    if (is_dir) {
      ASSIGN_OR_RETURN(bool empty, DirIsEmpty(d->ino()));
      if (!empty) return ErrnoStatus(ENOTEMPTY, name);
    }
    const int64_t now = options_.clock->NowNanos();
    txn->DeleteDirent(parent, name, *d);
    if (is_dir) {
      inode.set_nlink(0);
      dir.set_nlink(dir.nlink() - 1);
    } else {
      inode.set_nlink(inode.nlink() - 1);
    }
    inode.set_ctime_ns(now);
    dir.set_mtime_ns(now);
    dir.set_ctime_ns(now);
    txn->PutInode(parent, dir);
    txn->PutInode(d->ino(), inode);
    if (inode.nlink() == 0) txn->Put(keys::Orphan(d->ino()), OrphanValue(d->ino()));
    removed.ino = d->ino();
    removed.nlink = inode.nlink();
    return absl::OkStatus();
  }));
  return removed;
}

absl::StatusOr<bool> MetaStore::IsAncestor(Txn* txn, uint64_t ancestor, uint64_t dir) {
  // Walk up from `dir` through ".." (directories have one parent).
  for (int depth = 0; depth < 100000; ++depth) {
    if (dir == ancestor) return true;
    if (dir == kRootIno) return false;
    ASSIGN_OR_RETURN(proto::InodeRecord rec, txn->GetInode(dir));
    dir = rec.parent();
  }
  return ErrnoStatus(ELOOP, "directory tree too deep");
}

absl::StatusOr<Removed> MetaStore::Rename(const Caller& caller, uint64_t parent,
                                          const std::string& name, uint64_t new_parent,
                                          const std::string& new_name, uint32_t flags,
                                          uint64_t expected_ino, uint64_t expected_new_ino) {
  constexpr uint32_t kNoReplace = 1, kExchange = 2;
  if (flags & ~(kNoReplace | kExchange)) return ErrnoStatus(EINVAL, "rename flags");
  if ((flags & kNoReplace) && (flags & kExchange)) {
    return ErrnoStatus(EINVAL, "RENAME_NOREPLACE with RENAME_EXCHANGE");
  }
  if (name == "." || name == ".." || new_name == "." || new_name == "..") {
    return ErrnoStatus(EBUSY, "rename of . or ..");
  }
  RETURN_IF_ERROR(ValidateName(name));
  RETURN_IF_ERROR(ValidateName(new_name));
  Removed removed;
  RETURN_IF_ERROR(Mutate([&](Txn* txn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    ASSIGN_OR_RETURN(proto::InodeRecord src_dir, txn->GetInode(parent));
    ASSIGN_OR_RETURN(proto::InodeRecord dst_dir, txn->GetInode(new_parent));
    if (!IsDir(src_dir) || !IsDir(dst_dir)) return ErrnoStatus(ENOTDIR, "rename parent");
    RETURN_IF_ERROR(CheckAccess(src_dir, caller, kMayWrite | kMayExec));
    RETURN_IF_ERROR(CheckAccess(dst_dir, caller, kMayWrite | kMayExec));
    if (dst_dir.nlink() == 0) return ErrnoStatus(ENOENT, "target parent was removed");
    ASSIGN_OR_RETURN(auto src, txn->GetDirent(parent, name));
    if (!src) return ErrnoStatus(ENOENT, name);
    ASSIGN_OR_RETURN(auto dst, txn->GetDirent(new_parent, new_name));
    if ((expected_ino != 0 && src->ino() != expected_ino) ||
        (expected_new_ino != 0 && dst && dst->ino() != expected_new_ino)) {
      return ErrnoStatus(ESTALE, "a name was replaced since the caller looked it up");
    }
    if ((flags & kNoReplace) && dst) return ErrnoStatus(EEXIST, new_name);
    if ((flags & kExchange) && !dst) return ErrnoStatus(ENOENT, new_name);
    ASSIGN_OR_RETURN(proto::InodeRecord src_inode, txn->GetInode(src->ino()));
    RETURN_IF_ERROR(CheckSticky(src_dir, src_inode, caller));
    const bool src_is_dir = IsDir(src_inode);
    const bool cross = parent != new_parent;
    // Moving a directory rewrites its "..": that needs write permission on it.
    if (src_is_dir && cross) RETURN_IF_ERROR(CheckAccess(src_inode, caller, kMayWrite));
    if (src_is_dir && cross) {
      ASSIGN_OR_RETURN(bool loop, IsAncestor(txn, src->ino(), new_parent));
      if (loop) return ErrnoStatus(EINVAL, "rename a directory into itself");
    }
    if (dst && dst->ino() == src->ino()) {
      // rename(2) onto another name of the same file does nothing. The
      // kernel never sends one (it answers it itself when both of its
      // entries hold the same inode), so from a mount that says which
      // inodes it meant, this means its two entries differed: one is stale,
      // and the kernel would mark the target it cached as removed (a live
      // directory then lists empty on that node). ESTALE makes it look both
      // names up again.
      if (expected_ino != 0) {
        return ErrnoStatus(ESTALE, "source and target are one inode here, not for the caller");
      }
      return absl::OkStatus();
    }
    const int64_t now = options_.clock->NowNanos();

    std::optional<proto::InodeRecord> dst_inode;
    if (dst) {
      ASSIGN_OR_RETURN(dst_inode, txn->GetInode(dst->ino()));
      RETURN_IF_ERROR(CheckSticky(dst_dir, *dst_inode, caller));
    }
    if (flags & kExchange) {
      const bool dst_is_dir = IsDir(*dst_inode);
      if (dst_is_dir && cross) {
        RETURN_IF_ERROR(CheckAccess(*dst_inode, caller, kMayWrite));
        ASSIGN_OR_RETURN(bool loop, IsAncestor(txn, dst->ino(), parent));
        if (loop) return ErrnoStatus(EINVAL, "exchange a directory into itself");
      }
      // Each name now points at the other inode; positions stay.
      proto::DirentRecord a = *src, b = *dst;
      a.set_ino(dst->ino());
      a.set_type(dst_inode->mode() & S_IFMT);
      b.set_ino(src->ino());
      b.set_type(src_inode.mode() & S_IFMT);
      txn->PutDirent(parent, name, a);
      txn->PutDirent(new_parent, new_name, b);
      if (cross) {
        if (src_is_dir) src_inode.set_parent(new_parent);
        if (dst_is_dir) dst_inode->set_parent(parent);
        if (src_is_dir != dst_is_dir) {
          const int delta = src_is_dir ? 1 : -1;  // subdir moved to new_parent
          dst_dir.set_nlink(dst_dir.nlink() + delta);
          txn->PutInode(new_parent, dst_dir);
          ASSIGN_OR_RETURN(src_dir, txn->GetInode(parent));
          src_dir.set_nlink(src_dir.nlink() - delta);
        }
      }
      src_inode.set_ctime_ns(now);
      dst_inode->set_ctime_ns(now);
      txn->PutInode(src->ino(), src_inode);
      txn->PutInode(dst->ino(), *dst_inode);
    } else {
      if (dst) {
        const bool dst_is_dir = IsDir(*dst_inode);
        if (src_is_dir && !dst_is_dir) return ErrnoStatus(ENOTDIR, new_name);
        if (!src_is_dir && dst_is_dir) return ErrnoStatus(EISDIR, new_name);
        if (dst_is_dir) {
          ASSIGN_OR_RETURN(bool empty, DirIsEmpty(dst->ino()));
          if (!empty) return ErrnoStatus(ENOTEMPTY, new_name);
          dst_inode->set_nlink(0);
          dst_dir.set_nlink(dst_dir.nlink() - 1);
        } else {
          dst_inode->set_nlink(dst_inode->nlink() - 1);
        }
        dst_inode->set_ctime_ns(now);
        txn->PutInode(dst->ino(), *dst_inode);
        if (dst_inode->nlink() == 0) txn->Put(keys::Orphan(dst->ino()), OrphanValue(dst->ino()));
        removed.ino = dst->ino();
        removed.nlink = dst_inode->nlink();
        txn->DeleteDirent(new_parent, new_name, *dst);
      }
      txn->DeleteDirent(parent, name, *src);
      proto::DirentRecord moved = *src;
      moved.set_cookie(counters_.next_cookie());
      counters_.set_next_cookie(moved.cookie() + 1);
      txn->PutDirent(new_parent, new_name, moved);
      if (src_is_dir && cross) {
        src_inode.set_parent(new_parent);
        dst_dir.set_nlink(dst_dir.nlink() + 1);
      }
      src_inode.set_ctime_ns(now);
      txn->PutInode(src->ino(), src_inode);
      txn->PutInode(new_parent, dst_dir);
      if (src_is_dir && cross) {
        ASSIGN_OR_RETURN(src_dir, txn->GetInode(parent));
        src_dir.set_nlink(src_dir.nlink() - 1);
      }
    }
    // Both directories' times; re-read so one directory is not written twice
    // from stale copies.
    ASSIGN_OR_RETURN(dst_dir, txn->GetInode(new_parent));
    if (cross) {
      dst_dir.set_mtime_ns(now);
      dst_dir.set_ctime_ns(now);
      txn->PutInode(new_parent, dst_dir);
      src_dir.set_mtime_ns(now);
      src_dir.set_ctime_ns(now);
      txn->PutInode(parent, src_dir);
    } else {
      dst_dir.set_mtime_ns(now);
      dst_dir.set_ctime_ns(now);
      txn->PutInode(new_parent, dst_dir);
    }
    return absl::OkStatus();
  }));
  return removed;
}

absl::StatusOr<proto::InodeRecord> MetaStore::CheckTruncate(const Caller& caller, uint64_t ino,
                                                            uint64_t size, bool opened) {
  ASSIGN_OR_RETURN(proto::InodeRecord rec, GetInode(ino));
  if (IsDir(rec)) return ErrnoStatus(EISDIR, "truncate");
  if (!S_ISREG(rec.mode())) return ErrnoStatus(EINVAL, "truncate");
  if (size > kMaxFileSize) return ErrnoStatus(EFBIG, "truncate");
  if (!opened) RETURN_IF_ERROR(CheckAccess(rec, caller, kMayWrite));
  return rec;
}

absl::StatusOr<bool> MetaStore::HasChunk(uint64_t ino, uint64_t index) {
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), keys::Chunk(ino, index), &value);
  if (s.IsNotFound()) return false;
  if (!s.ok()) return DbError(s, "reading a chunk record");
  return true;
}

absl::StatusOr<std::string> MetaStore::ChunkBitmap(uint64_t ino, uint64_t index) {
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), keys::Chunk(ino, index), &value);
  if (s.IsNotFound()) return std::string();
  if (!s.ok()) return DbError(s, "reading a chunk record");
  proto::ChunkRecord chunk;
  if (!chunk.ParseFromString(value)) return ErrnoStatus(EIO, "corrupt chunk");
  return std::move(*chunk.mutable_bitmap());
}

absl::Status MetaStore::CutAllocation(Txn* txn, uint64_t ino, proto::InodeRecord* rec,
                                      uint64_t new_size) {
  const uint64_t cs = options_.chunk_size;
  const uint64_t blocks_per_chunk = cs / kBlockSize;
  // First block wholly past new_size, counted within its chunk.
  const uint64_t first_chunk = new_size / cs;
  const uint64_t first_block = (new_size % cs + kBlockSize - 1) / kBlockSize;
  const std::string prefix = keys::Prefix('C', ino);
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  uint64_t freed = 0;
  for (it->Seek(keys::Chunk(ino, first_chunk)); it->Valid() && it->key().starts_with(prefix);
       it->Next()) {
    const uint64_t index = keys::GetBigEndian64(it->key().data() + 9);
    proto::ChunkRecord chunk;
    if (!chunk.ParseFromArray(it->value().data(), it->value().size())) {
      return ErrnoStatus(EIO, "corrupt chunk record");
    }
    std::string* bitmap = chunk.mutable_bitmap();
    const int before = CountBits(*bitmap);
    const uint64_t from = index == first_chunk ? first_block : 0;
    for (uint64_t b = from; b < blocks_per_chunk && b / 8 < bitmap->size(); ++b) {
      (*bitmap)[b / 8] &= ~(1 << (b % 8));
    }
    freed += before - CountBits(*bitmap);
    if (CountBits(*bitmap) == 0) {
      txn->Delete(it->key().ToString());
    } else {
      txn->Put(it->key().ToString(), chunk.SerializeAsString());
    }
  }
  if (!it->status().ok()) return DbError(it->status(), "chunk scan");
  rec->set_allocated_blocks(rec->allocated_blocks() - freed);
  ledger_.FreeUsed(freed);
  return absl::OkStatus();
}

absl::StatusOr<proto::Attr> MetaStore::SetAttr(const Caller& caller,
                                               const proto::SetAttrRequest& req, bool opened) {
  using V = proto::SetAttrRequest;
  const uint32_t valid = req.valid();
  proto::Attr out;
  RETURN_IF_ERROR(Mutate([&](Txn* txn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    ASSIGN_OR_RETURN(proto::InodeRecord rec, txn->GetInode(req.ino()));
    const int64_t now = options_.clock->NowNanos();
    if (valid & V::MODE) {
      uint32_t mode = req.mode() & 07777;
      if (IsSetIdKill(rec.mode(), mode)) {
        // A write or truncate by a non-owner drops set-user-ID and
        // set-group-ID: FUSE's kernel asks for it as a chmod in the
        // writer's name (file_remove_privs). Anyone who may write the file
        // may do that (Linux's rule); a real chmod stays the owner's.
        if (!opened && !caller.IsRoot() && caller.uid != rec.uid() &&
            !CheckAccess(rec, caller, kMayWrite).ok()) {
          return ErrnoStatus(EPERM, "not the owner");  // chmod(2)'s answer
        }
      } else {
        RETURN_IF_ERROR(CheckOwner(rec, caller));
      }
      if (!caller.IsRoot() && !caller.InGroup(rec.gid())) mode &= ~S_ISGID;
      rec.set_mode((rec.mode() & S_IFMT) | mode);
    }
    if (valid & (V::UID | V::GID)) {
      const bool uid_change = (valid & V::UID) && req.uid() != rec.uid();
      const bool gid_change = (valid & V::GID) && req.gid() != rec.gid();
      if (!caller.IsRoot()) {
        if (uid_change) return ErrnoStatus(EPERM, "chown");
        if (gid_change && (caller.uid != rec.uid() || !caller.InGroup(req.gid()))) {
          return ErrnoStatus(EPERM, "chgrp");
        }
        if (!uid_change && !gid_change) RETURN_IF_ERROR(CheckOwner(rec, caller));
      }
      if (valid & V::UID) rec.set_uid(req.uid());
      if (valid & V::GID) rec.set_gid(req.gid());
      // A change of owner drops set-user-ID, and set-group-ID of executables.
      if ((uid_change || gid_change) && !IsDir(rec)) {
        uint32_t mode = rec.mode() & ~S_ISUID;
        if (mode & S_IXGRP) mode &= ~S_ISGID;
        rec.set_mode(mode);
      }
    }
    if (valid & V::SIZE) {
      if (IsDir(rec)) return ErrnoStatus(EISDIR, "truncate");
      if (!S_ISREG(rec.mode())) return ErrnoStatus(EINVAL, "truncate");
      if (req.size() > kMaxFileSize) return ErrnoStatus(EFBIG, "truncate");
      if (!opened) RETURN_IF_ERROR(CheckAccess(rec, caller, kMayWrite));
      if (req.size() < rec.size()) {
        RETURN_IF_ERROR(CutAllocation(txn, req.ino(), &rec, req.size()));
      }
      rec.set_size(req.size());
      rec.set_mtime_ns(now);
    }
    const bool explicit_times =
        (valid & (V::ATIME | V::MTIME)) && !(valid & (V::ATIME_NOW | V::MTIME_NOW));
    if (valid & (V::ATIME | V::MTIME | V::ATIME_NOW | V::MTIME_NOW)) {
      if (explicit_times) {
        RETURN_IF_ERROR(CheckOwner(rec, caller));
      } else if (!caller.IsRoot() && caller.uid != rec.uid()) {
        RETURN_IF_ERROR(CheckAccess(rec, caller, kMayWrite));
      }
      if (valid & V::ATIME_NOW) {
        rec.set_atime_ns(now);
      } else if (valid & V::ATIME) {
        rec.set_atime_ns(req.atime_ns());
      }
      if (valid & V::MTIME_NOW) {
        rec.set_mtime_ns(now);
      } else if (valid & V::MTIME) {
        rec.set_mtime_ns(req.mtime_ns());
      }
    }
    rec.set_ctime_ns(now);
    txn->PutInode(req.ino(), rec);
    out = ToAttr(req.ino(), rec);
    return absl::OkStatus();
  }));
  return out;
}

absl::Status MetaStore::SetXattr(const Caller& caller, uint64_t ino, const std::string& name,
                                 const std::string& value, uint32_t flags) {
  RETURN_IF_ERROR(ValidateXattr(name, value.size()));
  if (flags & ~(XATTR_CREATE | XATTR_REPLACE)) return ErrnoStatus(EINVAL, "xattr flags");
  return Mutate([&](Txn* txn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    ASSIGN_OR_RETURN(proto::InodeRecord rec, txn->GetInode(ino));
    if (name.rfind("trusted.", 0) == 0 && !caller.IsRoot()) {
      return ErrnoStatus(EPERM, "trusted xattr");
    }
    if (name.rfind("user.", 0) == 0) {
      if (!S_ISREG(rec.mode()) && !IsDir(rec)) return ErrnoStatus(EPERM, "user xattr type");
      if (IsDir(rec) && (rec.mode() & S_ISVTX) && !caller.IsRoot() && caller.uid != rec.uid()) {
        return ErrnoStatus(EPERM, "user xattr on sticky dir");
      }
      RETURN_IF_ERROR(CheckAccess(rec, caller, kMayWrite));
    } else {
      RETURN_IF_ERROR(CheckOwner(rec, caller));
    }
    ASSIGN_OR_RETURN(auto existing, txn->Get(keys::Xattr(ino, name)));
    if ((flags & XATTR_CREATE) && existing) return ErrnoStatus(EEXIST, name);
    if ((flags & XATTR_REPLACE) && !existing) return ErrnoStatus(ENODATA, name);
    txn->Put(keys::Xattr(ino, name), value);
    rec.set_ctime_ns(options_.clock->NowNanos());
    txn->PutInode(ino, rec);
    return absl::OkStatus();
  });
}

absl::Status MetaStore::RemoveXattr(const Caller& caller, uint64_t ino, const std::string& name) {
  RETURN_IF_ERROR(ValidateXattr(name, 0));
  return Mutate([&](Txn* txn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    ASSIGN_OR_RETURN(proto::InodeRecord rec, txn->GetInode(ino));
    if (name.rfind("trusted.", 0) == 0 && !caller.IsRoot()) {
      return ErrnoStatus(EPERM, "trusted xattr");
    }
    if (name.rfind("user.", 0) == 0) {
      RETURN_IF_ERROR(CheckAccess(rec, caller, kMayWrite));
    } else {
      RETURN_IF_ERROR(CheckOwner(rec, caller));
    }
    ASSIGN_OR_RETURN(auto existing, txn->Get(keys::Xattr(ino, name)));
    if (!existing) return ErrnoStatus(ENODATA, name);
    txn->Delete(keys::Xattr(ino, name));
    rec.set_ctime_ns(options_.clock->NowNanos());
    txn->PutInode(ino, rec);
    return absl::OkStatus();
  });
}

// --- space and data ------------------------------------------------------------

absl::StatusOr<Reservation> MetaStore::Reserve(uint64_t ino, uint64_t offset, uint64_t length,
                                               uint64_t grant_client) {
  absl::MutexLock l(&mu_);
  Txn txn(db_);
  uint64_t blocks = 0;
  RETURN_IF_ERROR(ForEachChunkRange(offset, length, options_.chunk_size,
                                    [&](uint64_t c, uint64_t lo, uint64_t hi) -> absl::Status {
                                      ASSIGN_OR_RETURN(auto v, txn.Get(keys::Chunk(ino, c)));
                                      proto::ChunkRecord chunk;
                                      if (v && !chunk.ParseFromString(*v))
                                        return ErrnoStatus(EIO, "corrupt chunk");
                                      for (uint64_t b = lo; b <= hi; ++b)
                                        blocks += !BitSet(chunk.bitmap(), b);
                                      return absl::OkStatus();
                                    }));
  return ledger_.Reserve(blocks, grant_client);
}

void MetaStore::Unreserve(const Reservation& r) {
  absl::MutexLock l(&mu_);
  ledger_.Release(r);
}

void MetaStore::PutGrant(Txn* txn, uint64_t client_id, uint64_t blocks) {
  if (blocks == 0) {
    txn->Delete(keys::Grant(client_id));
  } else {
    proto::GrantRecord g;
    g.set_blocks(blocks);
    txn->Put(keys::Grant(client_id), g.SerializeAsString());
  }
}

absl::StatusOr<proto::Attr> MetaStore::CommitWrite(uint64_t ino, uint64_t offset, uint64_t length,
                                                   bool extend, const Reservation& r) {
  proto::Attr out;
  bool released = false;
  absl::Status st = Mutate([&](Txn* txn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    // The reservation ends with this change whatever its outcome; only the
    // grant's debit is undone (with the ledger's durable part) if it fails.
    ledger_.Release(r);
    released = true;
    if (r.from_grant > 0) PutGrant(txn, r.client, ledger_.DebitGrant(r));
    ASSIGN_OR_RETURN(proto::InodeRecord rec, txn->GetInode(ino));
    if (!S_ISREG(rec.mode())) return ErrnoStatus(EINVAL, "write to a non-file");
    const uint64_t bitmap_bytes = options_.chunk_size / kBlockSize / 8;
    uint64_t added = 0;
    RETURN_IF_ERROR(ForEachChunkRange(offset, length, options_.chunk_size,
                                      [&](uint64_t c, uint64_t lo, uint64_t hi) -> absl::Status {
                                        ASSIGN_OR_RETURN(auto v, txn->Get(keys::Chunk(ino, c)));
                                        proto::ChunkRecord chunk;
                                        if (v && !chunk.ParseFromString(*v))
                                          return ErrnoStatus(EIO, "corrupt chunk");
                                        std::string* bitmap = chunk.mutable_bitmap();
                                        bitmap->resize(bitmap_bytes, '\0');
                                        for (uint64_t b = lo; b <= hi; ++b) {
                                          if (!BitSet(*bitmap, b)) {
                                            (*bitmap)[b / 8] |= static_cast<char>(1 << (b % 8));
                                            ++added;
                                          }
                                        }
                                        txn->Put(keys::Chunk(ino, c), chunk.SerializeAsString());
                                        return absl::OkStatus();
                                      }));
    ledger_.AddUsed(added);
    rec.set_allocated_blocks(rec.allocated_blocks() + added);
    if (extend && offset + length > rec.size()) rec.set_size(offset + length);
    const int64_t now = options_.clock->NowNanos();
    rec.set_mtime_ns(now);
    rec.set_ctime_ns(now);
    txn->PutInode(ino, rec);
    out = ToAttr(ino, rec);
    return absl::OkStatus();
  });
  if (!released) Unreserve(r);
  RETURN_IF_ERROR(st);
  return out;
}

absl::StatusOr<uint64_t> MetaStore::Grant(uint64_t client_id, uint64_t wanted_blocks,
                                          uint64_t return_blocks, uint64_t* added) {
  if (client_id == 0) return ErrnoStatus(EINVAL, "grant without a session");
  uint64_t total = 0;
  RETURN_IF_ERROR(Mutate([&](Txn* txn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    // A grant belongs to a recorded session: one that ended while this
    // request was on its way (its grant already released) gets nothing, or
    // the space would stay granted to nobody. The retry re-creates it.
    if (wanted_blocks > 0) {
      ASSIGN_OR_RETURN(auto session, txn->Get(keys::Session(client_id)));
      if (!session) {
        return absl::ResourceExhaustedError(
            absl::StrCat("session ", client_id, " has ended; retry"));
      }
    }
    total = ledger_.Grant(client_id, wanted_blocks, return_blocks, added);
    if (RequestTag* tag = RequestTag::Current()) tag->value = *added;
    PutGrant(txn, client_id, total);
    return absl::OkStatus();
  }));
  return total;
}

absl::Status MetaStore::EndSession(uint64_t client_id) {
  return Mutate([&](Txn* txn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    txn->Delete(keys::Session(client_id));
    if (ledger_.GrantOf(client_id) == 0) return absl::OkStatus();
    PutGrant(txn, client_id, ledger_.EndSession(client_id));
    return absl::OkStatus();
  });
}

absl::Status MetaStore::PutSession(uint64_t client_id, const proto::SessionRecord& rec) {
  return Mutate([&](Txn* txn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    txn->Put(keys::Session(client_id), rec.SerializeAsString());
    return absl::OkStatus();
  });
}

uint64_t MetaStore::GrantOf(uint64_t client_id) {
  absl::MutexLock l(&mu_);
  return ledger_.GrantOf(client_id);
}

uint64_t MetaStore::GrantedBlocks() {
  absl::MutexLock l(&mu_);
  return ledger_.granted();
}

std::vector<uint64_t> MetaStore::GrantHolders() {
  absl::MutexLock l(&mu_);
  return ledger_.Holders();
}

// --- orphans and deferred deletion -----------------------------------------

void MetaStore::SetOpenHolders(std::function<proto::OrphanRecord(uint64_t)> holders) {
  open_holders_ = std::move(holders);
}

std::string MetaStore::OrphanValue(uint64_t ino) const {
  return open_holders_ ? open_holders_(ino).SerializeAsString() : std::string();
}

absl::Status MetaStore::ReapIn(Txn* txn, uint64_t ino, const proto::InodeRecord& rec) {
  txn->Delete(keys::Orphan(ino));
  txn->Delete(keys::Inode(ino));
  txn->Delete(keys::Locks(ino));
  txn->Put(keys::Garbage(ino), rec.SerializeAsString());
  const std::string prefix = keys::Prefix('X', ino);
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    txn->Delete(it->key().ToString());
  }
  if (!it->status().ok()) return DbError(it->status(), "xattr scan");
  counters_.set_inodes(counters_.inodes() - 1);
  return absl::OkStatus();
}

absl::Status MetaStore::Reap(uint64_t ino) {
  return Mutate([&](Txn* txn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    ASSIGN_OR_RETURN(auto orphan, txn->Get(keys::Orphan(ino)));
    if (!orphan) return absl::OkStatus();
    ASSIGN_OR_RETURN(proto::InodeRecord rec, txn->GetInode(ino));
    if (rec.nlink() != 0) return absl::OkStatus();
    return ReapIn(txn, ino, rec);
  });
}

absl::StatusOr<bool> MetaStore::SyncOrphan(uint64_t ino, bool keep_unheld) {
  bool reaped = false;
  bool unchanged = false;
  absl::Status s = Mutate([&](Txn* txn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    ASSIGN_OR_RETURN(auto orphan, txn->Get(keys::Orphan(ino)));
    if (!orphan) return ErrnoStatus(ENOENT, "not an orphan");
    ASSIGN_OR_RETURN(proto::InodeRecord rec, txn->GetInode(ino));
    if (rec.nlink() != 0) return ErrnoStatus(ENOENT, "not an orphan");
    const std::string now = OrphanValue(ino);
    proto::OrphanRecord holders;
    if (!holders.ParseFromString(now)) return ErrnoStatus(EIO, "orphan record");
    if (holders.holders_size() == 0 && !keep_unheld) {
      reaped = true;
      return ReapIn(txn, ino, rec);
    }
    if (now == *orphan) {
      unchanged = true;
      return ErrnoStatus(EEXIST, "unchanged");
    }
    txn->Put(keys::Orphan(ino), now);
    return absl::OkStatus();
  });
  // Nothing to write: not (or no longer) an orphan, or the same holders.
  if (!s.ok() && (unchanged || ToErrno(s) == ENOENT)) return false;
  RETURN_IF_ERROR(s);
  return reaped;
}

template <typename Rec>
absl::StatusOr<std::vector<std::pair<uint64_t, Rec>>> MetaStore::ListRecords(char kind) {
  const std::string prefix(1, kind);
  std::vector<std::pair<uint64_t, Rec>> out;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    if (it->key().size() != 9) continue;
    Rec rec;
    if (!rec.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
      return ErrnoStatus(EIO, absl::StrCat("corrupt record ", it->key().ToString(true)));
    }
    out.emplace_back(keys::GetBigEndian64(it->key().data() + 1), std::move(rec));
  }
  if (!it->status().ok()) return DbError(it->status(), "scan");
  return out;
}

absl::StatusOr<std::vector<std::pair<uint64_t, proto::OrphanRecord>>> MetaStore::ListOrphans() {
  return ListRecords<proto::OrphanRecord>('O');
}

absl::StatusOr<std::vector<std::pair<uint64_t, proto::SessionRecord>>> MetaStore::ListSessions() {
  return ListRecords<proto::SessionRecord>('S');
}

absl::Status MetaStore::PutLocks(uint64_t ino, const proto::LockRecord& locks) {
  return Mutate([&](Txn* txn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    if (locks.locks_size() == 0) {
      txn->Delete(keys::Locks(ino));
    } else {
      txn->Put(keys::Locks(ino), locks.SerializeAsString());
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<std::vector<std::pair<uint64_t, proto::LockRecord>>> MetaStore::ListLocks() {
  return ListRecords<proto::LockRecord>('P');
}

absl::StatusOr<std::optional<proto::DedupeRecord>> MetaStore::FindDedupe(uint64_t client_id,
                                                                         uint64_t seq) {
  std::string v;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), keys::Dedupe(client_id, seq), &v);
  if (s.IsNotFound()) return std::optional<proto::DedupeRecord>();
  if (!s.ok()) return DbError(s, "dedupe lookup");
  proto::DedupeRecord d;
  if (!d.ParseFromString(v)) return ErrnoStatus(EIO, "corrupt dedupe record");
  return std::optional<proto::DedupeRecord>(d);
}

absl::StatusOr<int> MetaStore::ExpireDedupe(absl::Duration retention) {
  const int64_t cutoff = options_.clock->NowNanos() - absl::ToInt64Nanoseconds(retention);
  rocksdb::WriteBatch batch;
  int n = 0;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek("Q"); it->Valid() && it->key().starts_with("Q"); it->Next()) {
    proto::DedupeRecord d;
    if (!d.ParseFromArray(it->value().data(), static_cast<int>(it->value().size())) ||
        d.time_ns() < cutoff) {
      batch.Delete(it->key());
      ++n;
    }
  }
  if (!it->status().ok()) return DbError(it->status(), "dedupe scan");
  if (n == 0) return 0;
  // Not synced: a record that comes back after a crash only expires again.
  absl::MutexLock l(&mu_);  // every change goes in under mu_, in one order
  rocksdb::Status s = db_->Write(rocksdb::WriteOptions(), &batch);
  if (!s.ok()) return DbError(s, "dedupe expiry");
  if (options_.change_sink != nullptr) {  // the replica expires them too; no wait
    proto::ReplRecord rec;
    rec.set_meta_batch(batch.Data());
    options_.change_sink->Append(std::move(rec));
  }
  return n;
}

absl::StatusOr<std::vector<uint64_t>> MetaStore::ListGarbage() {
  const std::string prefix(1, 'G');
  std::vector<uint64_t> out;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    out.push_back(keys::GetBigEndian64(it->key().data() + 1));
  }
  if (!it->status().ok()) return DbError(it->status(), "garbage scan");
  return out;
}

absl::StatusOr<uint64_t> MetaStore::GarbageChunkSpan(uint64_t ino) {
  std::string v;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), keys::Garbage(ino), &v);
  if (!s.ok()) return DbError(s, "get garbage");
  proto::InodeRecord rec;
  if (!rec.ParseFromString(v)) return ErrnoStatus(EIO, "corrupt garbage record");
  const uint64_t cs = options_.chunk_size;
  uint64_t span = (rec.size() + cs - 1) / cs;
  const std::string prefix = keys::Prefix('C', ino);
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    span = std::max(span, keys::GetBigEndian64(it->key().data() + 9) + 1);
  }
  return span;
}

absl::Status MetaStore::FinishGarbage(uint64_t ino) {
  return Mutate([&](Txn* txn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    const std::string prefix = keys::Prefix('C', ino);
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
    uint64_t freed = 0;
    for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
      proto::ChunkRecord chunk;
      if (chunk.ParseFromArray(it->value().data(), it->value().size())) {
        freed += CountBits(chunk.bitmap());
      }
      txn->Delete(it->key().ToString());
    }
    txn->Delete(keys::Garbage(ino));
    ledger_.FreeUsed(freed);
    return absl::OkStatus();
  });
}

}  // namespace grantfs
