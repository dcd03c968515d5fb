#include "server/mount_table.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/mount_spec.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "server/keys.h"

namespace grantfs {
namespace {

uint64_t RandomIncarnation() {
  std::random_device rd;
  uint64_t v = 0;
  while (v == 0) v = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return v;
}

// The record of `path` as the change sees it (nullopt: none).
absl::StatusOr<std::optional<proto::GlobalMountRecord>> GetRecord(MetaTxn* txn,
                                                                  const std::string& path) {
  const std::string key = keys::GlobalMount(path);
  ASSIGN_OR_RETURN(std::optional<std::string> v, txn->Get(key));
  if (!v) return std::nullopt;
  proto::GlobalMountRecord rec;
  if (!rec.ParseFromString(*v)) return CorruptRecord(key);
  return rec;
}

// A generation newer than `old` (a nanosecond time when the clock allows).
uint64_t NextGeneration(MetaTxn* txn, uint64_t old) {
  return std::max<uint64_t>(static_cast<uint64_t>(std::max<int64_t>(txn->NowNanos(), 0)), old + 1);
}

}  // namespace

MountTable::MountTable(MetaStore* store) : store_(store), incarnation_(RandomIncarnation()) {}

uint64_t MountTable::version() {
  absl::MutexLock l(&mu_);
  return version_;
}

void MountTable::Publish(const std::string& path, std::optional<proto::GlobalMountRecord> rec) {
  absl::MutexLock l(&mu_);
  if (rec) {
    published_[path] = *std::move(rec);
  } else {
    published_.erase(path);
  }
  ++version_;
}

void MountTable::Unsure() {
  absl::MutexLock l(&mu_);
  stale_ = true;
}

absl::Status MountTable::LoadBeforeChange() {
  bool stale;
  {
    absl::MutexLock l(&mu_);
    stale = stale_;
    if (!stale) return LoadLocked();
  }
  // What a failed change left in the store is shown only once it is on the
  // replica too (or this primary goes on alone): everything applied so far.
  RETURN_IF_ERROR(store_->WaitDurable(store_->Applied()));
  absl::MutexLock l(&mu_);
  loaded_ = false;
  RETURN_IF_ERROR(LoadLocked());
  stale_ = false;
  ++version_;  // it may differ from what was shown
  return absl::OkStatus();
}

absl::Status MountTable::LoadLocked() {
  if (loaded_) return absl::OkStatus();
  std::map<std::string, proto::GlobalMountRecord> table;
  const std::string prefix(1, keys::kGlobalMountKind);
  RETURN_IF_ERROR(store_->Scan(
      prefix, prefix, [&](absl::string_view key, absl::string_view value) -> absl::StatusOr<bool> {
        proto::GlobalMountRecord rec;
        if (!rec.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
          return CorruptRecord(key);
        }
        table[rec.path()] = std::move(rec);
        return true;
      }));
  published_ = std::move(table);
  loaded_ = true;
  return absl::OkStatus();
}

void MountTable::Shutdown() {
  absl::MutexLock l(&mu_);
  shutdown_ = true;
}

void MountTable::WaitChanged(uint64_t incarnation, uint64_t version, absl::Duration timeout) {
  if (incarnation != incarnation_) return;
  absl::MutexLock l(&mu_);
  auto changed = [this, version]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return shutdown_ || version_ != version;
  };
  mu_.AwaitWithTimeout(absl::Condition(&changed), timeout);
}

absl::StatusOr<proto::GlobalMountTable> MountTable::List() {
  proto::GlobalMountTable table;
  table.set_incarnation(incarnation_);
  absl::MutexLock l(&mu_);
  RETURN_IF_ERROR(LoadLocked());
  table.set_version(version_);
  for (const auto& [path, rec] : published_) *table.add_mounts() = rec;
  return table;
}

absl::StatusOr<MountTable::Added> MountTable::Add(const std::string& path_in,
                                                  const std::string& subdir_in,
                                                  const std::string& options_in,
                                                  const std::string& created_by) {
  ASSIGN_OR_RETURN(const std::string path, NormalizeMountPath(path_in));
  ASSIGN_OR_RETURN(const std::string subdir, NormalizeMountSubdir(subdir_in));
  ASSIGN_OR_RETURN(const std::string options, NormalizeMountOptions(options_in));
  Added out;
  absl::MutexLock change(&change_mu_);
  RETURN_IF_ERROR(LoadBeforeChange());
  bool wrote = false;  // the checks passed: a failure now may leave the change
  absl::Status s = store_->Mutate(nullptr, [&](MetaTxn* txn) -> absl::Status {
    ASSIGN_OR_RETURN(std::optional<proto::GlobalMountRecord> old, GetRecord(txn, path));
    if (old) {
      if (old->removing()) {
        return absl::FailedPreconditionError(
            absl::StrCat(path, " is being unmounted (grantfsctl umount -g ", path,
                         " finishes it, -f where a node is busy)"));
      }
      if (old->subdir() != subdir || old->options() != options) {
        return absl::AlreadyExistsError(absl::StrCat(path, " is already a global mount of ",
                                                     old->subdir(), " with options '",
                                                     old->options(), "'"));
      }
      out.mount = *old;
      out.existed = true;
      return absl::OkStatus();
    }
    // No global mount inside another: a node would mount one over the other.
    const std::string prefix(1, keys::kGlobalMountKind);
    absl::Status nest = absl::OkStatus();
    RETURN_IF_ERROR(txn->Scan(
        prefix, prefix, [&](absl::string_view key, absl::string_view) -> absl::StatusOr<bool> {
          const std::string other(key.substr(1));
          if (PathsNest(other, path)) {
            nest = absl::FailedPreconditionError(absl::StrCat(path, " and the global mount ", other,
                                                              " would be one inside the other"));
            return false;
          }
          return true;
        }));
    RETURN_IF_ERROR(nest);
    proto::GlobalMountRecord rec;
    rec.set_path(path);
    rec.set_subdir(subdir);
    rec.set_options(options);
    rec.set_generation(NextGeneration(txn, 0));
    rec.set_created_ns(txn->NowNanos());
    rec.set_created_by(created_by);
    txn->Put(keys::GlobalMount(path), rec.SerializeAsString());
    wrote = true;
    out.mount = rec;
    return absl::OkStatus();
  });
  if (!s.ok()) {
    if (wrote) Unsure();
    return s;
  }
  if (!out.existed) {
    LOG(INFO) << "global mount added: " << path << " (directory " << subdir << ", options '"
              << options << "', by '" << created_by << "')";
    Publish(path, out.mount);
  }
  return out;
}

absl::StatusOr<proto::GlobalMountRecord> MountTable::MarkRemoving(const std::string& path_in,
                                                                  bool force) {
  ASSIGN_OR_RETURN(const std::string path, NormalizeMountPath(path_in));
  proto::GlobalMountRecord out;
  absl::MutexLock change(&change_mu_);
  RETURN_IF_ERROR(LoadBeforeChange());
  bool wrote = false;  // the checks passed: a failure now may leave the change
  absl::Status s = store_->Mutate(nullptr, [&](MetaTxn* txn) -> absl::Status {
    ASSIGN_OR_RETURN(std::optional<proto::GlobalMountRecord> rec, GetRecord(txn, path));
    if (!rec) return absl::NotFoundError(absl::StrCat(path, " is not a global mount"));
    rec->set_removing(true);
    rec->set_force(rec->force() || force);
    rec->set_generation(NextGeneration(txn, rec->generation()));
    txn->Put(keys::GlobalMount(path), rec->SerializeAsString());
    wrote = true;
    out = *rec;
    return absl::OkStatus();
  });
  if (!s.ok()) {
    if (wrote) Unsure();
    return s;
  }
  LOG(INFO) << "global mount " << path << " marked for removal" << (force ? " (forced)" : "");
  Publish(path, out);
  return out;
}

absl::Status MountTable::Forget(const std::string& path_in, uint64_t generation) {
  ASSIGN_OR_RETURN(const std::string path, NormalizeMountPath(path_in));
  absl::MutexLock change(&change_mu_);
  RETURN_IF_ERROR(LoadBeforeChange());
  bool wrote = false;  // the checks passed: a failure now may leave the change
  absl::Status s = store_->Mutate(nullptr, [&](MetaTxn* txn) -> absl::Status {
    ASSIGN_OR_RETURN(std::optional<proto::GlobalMountRecord> rec, GetRecord(txn, path));
    if (!rec) return absl::NotFoundError(absl::StrCat(path, " is not a global mount"));
    if (!rec->removing()) {
      return absl::FailedPreconditionError(
          absl::StrCat(path, " is not being unmounted (grantfsctl umount -g first)"));
    }
    if (generation != 0 && rec->generation() != generation) {
      return absl::FailedPreconditionError(absl::StrCat(
          path, " changed meanwhile (generation ", rec->generation(), ", not ", generation, ")"));
    }
    txn->Delete(keys::GlobalMount(path));
    wrote = true;
    return absl::OkStatus();
  });
  if (!s.ok()) {
    if (wrote) Unsure();
    return s;
  }
  LOG(INFO) << "global mount " << path << " removed from the table";
  Publish(path, std::nullopt);
  return absl::OkStatus();
}

}  // namespace grantfs
