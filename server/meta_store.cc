#include "server/meta_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <random>

#include "absl/strings/str_cat.h"
#include "checkpoint/meta_digest.h"
#include "common/errno_status.h"
#include "common/names.h"
#include "common/rocks_logger.h"
#include "common/rocks_room.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "rocksdb/utilities/checkpoint.h"
#include "rocksdb/write_batch.h"
#include "server/dedupe.h"
#include "server/grant_policy.h"
#include "server/keys.h"

namespace grantfs {
namespace {

constexpr uint64_t kBlocksPerChunkBits = 8;  // bits per bitmap byte

absl::Status DbError(const rocksdb::Status& s, const char* what) {
  LOG(ERROR) << "metadata store: " << what << ": " << s.ToString();
  // A full disk is ENOSPC to the caller, anything else EIO.
  return ErrnoStatus(IsRocksNoSpace(s) ? ENOSPC : EIO, absl::StrCat(what, ": ", s.ToString()));
}

// A new volume's id: 128 random bits as 32 hex digits.
std::string NewVolumeId() {
  std::random_device rd;
  std::string id;
  for (int i = 0; i < 4; ++i) absl::StrAppend(&id, absl::Hex(rd(), absl::kZeroPad8));
  return id;
}

absl::Status ScanDb(
    rocksdb::DB* db, const std::string& from, const std::string& prefix,
    absl::FunctionRef<absl::StatusOr<bool>(absl::string_view, absl::string_view)> fn) {
  // The first key past every key that starts with `prefix` bounds the
  // iterator: a Seek then stops at the end of the prefix instead of walking
  // on through deletions after it (none: a prefix of only 0xff bytes).
  std::string end = prefix;
  while (!end.empty() && static_cast<unsigned char>(end.back()) == 0xff) end.pop_back();
  if (!end.empty()) end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
  const rocksdb::Slice upper(end);
  rocksdb::ReadOptions ro;
  if (!end.empty()) ro.iterate_upper_bound = &upper;
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(ro));
  for (it->Seek(from); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    ASSIGN_OR_RETURN(bool more, fn(absl::string_view(it->key().data(), it->key().size()),
                                   absl::string_view(it->value().data(), it->value().size())));
    if (!more) return absl::OkStatus();
  }
  if (!it->status().ok()) return DbError(it->status(), "scan");
  return absl::OkStatus();
}

}  // namespace

MetaTxn::MetaTxn(rocksdb::DB* db, proto::Counters* counters, SpaceLedger* ledger, Clock* clock)
    : db_(db),
      counters_(counters),
      ledger_(ledger),
      clock_(clock),
      batch_(std::make_unique<rocksdb::WriteBatch>()) {}

MetaTxn::~MetaTxn() = default;

absl::StatusOr<std::optional<std::string>> MetaTxn::Get(const std::string& key) {
  if (auto it = pending_.find(key); it != pending_.end()) return it->second;
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), key, &value);
  if (s.IsNotFound()) return std::optional<std::string>();
  if (!s.ok()) return DbError(s, "get");
  return std::optional<std::string>(std::move(value));
}

void MetaTxn::Put(const std::string& key, const std::string& value) {
  batch_->Put(key, value);
  pending_[key] = value;
}

void MetaTxn::Delete(const std::string& key) {
  batch_->Delete(key);
  pending_[key] = std::nullopt;
}

absl::Status MetaTxn::Scan(
    const std::string& from, const std::string& prefix,
    absl::FunctionRef<absl::StatusOr<bool>(absl::string_view, absl::string_view)> fn) {
  return ScanDb(db_, from, prefix, fn);
}

absl::StatusOr<proto::InodeRecord> MetaTxn::GetInode(uint64_t ino) {
  ASSIGN_OR_RETURN(auto v, Get(keys::Inode(ino)));
  if (!v) return ErrnoStatus(ENOENT, absl::StrCat("inode ", ino));
  proto::InodeRecord rec;
  if (!rec.ParseFromString(*v)) return ErrnoStatus(EIO, "corrupt inode record");
  return rec;
}

void MetaTxn::PutInode(uint64_t ino, const proto::InodeRecord& rec) {
  Put(keys::Inode(ino), rec.SerializeAsString());
}

absl::StatusOr<std::optional<proto::DirentRecord>> MetaTxn::GetDirent(uint64_t parent,
                                                                      const std::string& name) {
  ASSIGN_OR_RETURN(auto v, Get(keys::Dirent(parent, name)));
  if (!v) return std::optional<proto::DirentRecord>();
  proto::DirentRecord d;
  if (!d.ParseFromString(*v)) return ErrnoStatus(EIO, "corrupt dirent record");
  return std::optional<proto::DirentRecord>(d);
}

void MetaTxn::PutDirent(uint64_t parent, const std::string& name, const proto::DirentRecord& d) {
  Put(keys::Dirent(parent, name), d.SerializeAsString());
  proto::DirentRecord listed = d;
  listed.set_name(name);
  Put(keys::DirCookie(parent, d.cookie()), listed.SerializeAsString());
}

void MetaTxn::DeleteDirent(uint64_t parent, const std::string& name, const proto::DirentRecord& d) {
  Delete(keys::Dirent(parent, name));
  Delete(keys::DirCookie(parent, d.cookie()));
}

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

absl::Status MetaStore::Mutate(RequestTag* tag, absl::FunctionRef<absl::Status(MetaTxn*)> fn) {
  uint64_t ticket;
  uint64_t replicated_seq = 0;
  {
    absl::MutexLock l(&mu_);
    MetaTxn txn(db_, &counters_, &ledger_, options_.clock);
    if (tag != nullptr) txn.time_ns_ = tag->time_ns;
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
    txn.batch_.get()->Put(keys::Counters(), counters_.SerializeAsString());
    // Exactly-once: the request's record rides in the same batch.
    const bool record = tag != nullptr && tag->active();
    if (record) {
      proto::DedupeRecord d;
      d.set_value(tag->value);
      d.set_time_ns(options_.clock->NowNanos());
      txn.batch_.get()->Put(keys::Dedupe(tag->client_id, tag->seq), d.SerializeAsString());
    }
    // Applied without fsync under mu_ so the next change reads this one;
    // the fsync happens in WaitDurable, outside mu_.
    rocksdb::Status s = db_->Write(rocksdb::WriteOptions(), txn.batch_.get());
    if (!s.ok() && IsRocksNoSpace(s) && options_.make_room && options_.make_room()) {
      LOG(WARNING) << "metadata store: the disk is full (" << s.ToString()
                   << "); writing again in room lent from the metadata reserve";
      rocksdb::Status resumed = ResumeAfterRoom(db_);
      s = resumed.ok() ? db_->Write(rocksdb::WriteOptions(), txn.batch_.get()) : resumed;
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
      rec.set_meta_batch(txn.batch_.get()->Data());
      replicated_seq = options_.change_sink->Append(std::move(rec));
      replicated_seq = std::max(replicated_seq, PromiseLocked(false));
    }
  }
  if (tag != nullptr && tag->defer_durable) {
    tag->durable.ticket = std::max(tag->durable.ticket, ticket);
    tag->durable.replicated_seq = std::max(tag->durable.replicated_seq, replicated_seq);
    return absl::OkStatus();
  }
  // The local fsync and the replica's apply run at the same time: the batch
  // is on its way to the replica already.
  RETURN_IF_ERROR(WaitDurable(ticket));
  changes_durable_.fetch_add(1, std::memory_order_relaxed);
  if (options_.change_sink != nullptr) {
    return options_.change_sink->WaitReplicated(replicated_seq);
  }
  return absl::OkStatus();
}

RequestTag::Durability MetaStore::Applied() {
  absl::MutexLock l(&mu_);  // batches are applied and appended under mu_
  RequestTag::Durability d;
  d.ticket = applied_ticket_.load();
  if (options_.change_sink != nullptr) d.replicated_seq = options_.change_sink->Head();
  return d;
}

absl::Status MetaStore::WaitDurable(const RequestTag::Durability& d) {
  if (d.ticket == 0) return absl::OkStatus();
  RETURN_IF_ERROR(WaitDurable(d.ticket));
  if (options_.change_sink != nullptr && d.replicated_seq != 0) {
    return options_.change_sink->WaitReplicated(d.replicated_seq);
  }
  return absl::OkStatus();
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

uint64_t MetaStore::Promise() {
  absl::MutexLock l(&mu_);
  PromiseLocked(true);
  return promise_seq_.load();
}

uint64_t MetaStore::PromiseLocked(bool exact) {
  if (options_.change_sink == nullptr) return 0;
  const uint64_t promised = SpaceLedger::Bytes(ledger_.granted()) + options_.promise_reserve_bytes;
  if (promised_.has_value() && (exact ? promised == *promised_ : promised <= *promised_)) return 0;
  promised_ = promised;
  const uint64_t seq = options_.change_sink->Promise(promised);
  promise_seq_.store(seq);
  return seq;
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
    wal_syncs_.fetch_add(1, std::memory_order_relaxed);
    sync_mu_.Lock();
    sync_running_ = false;
    if (!s.ok()) return DbError(s, "wal sync");
    durable_ticket_ = std::max(durable_ticket_, target);
  }
  return absl::OkStatus();
}

CommitStats MetaStore::Commits() const {
  CommitStats c;
  c.changes = changes_durable_.load(std::memory_order_relaxed);
  c.wal_syncs = wal_syncs_.load(std::memory_order_relaxed);
  return c;
}

SpaceInfo MetaStore::SpaceCountsLocked() {
  SpaceInfo s;
  s.capacity_bytes = SpaceLedger::Bytes(ledger_.capacity());
  s.used_bytes = SpaceLedger::Bytes(ledger_.used());
  s.reserved_bytes = SpaceLedger::Bytes(ledger_.reserved());
  s.granted_bytes = SpaceLedger::Bytes(ledger_.granted());
  s.inodes = counters_.inodes();
  s.next_ino = counters_.next_ino();
  s.counts_seq = ++counts_seq_;
  return s;
}

SpaceInfo MetaStore::SpaceCounts() {
  absl::MutexLock l(&mu_);
  return SpaceCountsLocked();
}

SpaceInfo MetaStore::Space() {
  SpaceInfo s;
  {
    absl::MutexLock l(&mu_);
    s = SpaceCountsLocked();
    s.ledger_ok = ledger_.Check();
  }
  // Outside mu_ (readers never take it: changes go on meanwhile), and
  // bounded to the prefix (tombstones past it are not walked).
  absl::Status scanned =
      ScanDb(db_, "G", "G", [&](absl::string_view, absl::string_view) -> absl::StatusOr<bool> {
        ++s.pending_deletes;
        return true;
      });
  if (!scanned.ok()) LOG(WARNING) << "counting pending deletes: " << scanned;
  return s;
}

absl::Status CorruptRecord(absl::string_view key) {
  return ErrnoStatus(
      EIO, absl::StrCat("corrupt record ", rocksdb::Slice(key.data(), key.size()).ToString(true)));
}

absl::StatusOr<std::optional<std::string>> MetaStore::Get(const std::string& key) {
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), key, &value);
  if (s.IsNotFound()) return std::optional<std::string>();
  if (!s.ok()) return DbError(s, "get");
  return std::optional<std::string>(std::move(value));
}

absl::Status MetaStore::Scan(
    const std::string& from, const std::string& prefix,
    absl::FunctionRef<absl::StatusOr<bool>(absl::string_view, absl::string_view)> fn) {
  return ScanDb(db_, from, prefix, fn);
}

absl::Status MetaStore::DeleteUnsynced(const std::vector<std::string>& keys, const char* what) {
  if (keys.empty()) return absl::OkStatus();
  rocksdb::WriteBatch batch;
  for (const std::string& key : keys) batch.Delete(key);
  absl::MutexLock l(&mu_);  // every change goes in under mu_, in one order
  rocksdb::Status s = db_->Write(rocksdb::WriteOptions(), &batch);
  if (!s.ok()) return DbError(s, what);
  if (options_.change_sink != nullptr) {  // the replica applies it too; no wait
    proto::ReplRecord rec;
    rec.set_meta_batch(batch.Data());
    options_.change_sink->Append(std::move(rec));
  }
  return absl::OkStatus();
}

}  // namespace grantfs
