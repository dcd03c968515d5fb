#include "common/fault_injection_env.h"

#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/errno_status.h"
#include "common/status_macros.h"

namespace grantfs {
namespace {

const char* OpName(FileOp op) {
  static constexpr const char* kNames[kFileOpCount] = {
      "open",      "pwrite",    "pread", "fdatasync", "fstat",
      "ftruncate", "fallocate", "mkdir", "unlink",    "fsync (directory)"};
  return kNames[static_cast<size_t>(op)];
}

std::string Parent(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// A File whose calls go through the Env's rules, and whose syncs it notes.
class FaultFile : public File {
 public:
  FaultFile(FaultInjectionEnv* env, std::string path, std::unique_ptr<File> base)
      : env_(env), path_(std::move(path)), base_(std::move(base)) {}

  absl::StatusOr<size_t> Write(uint64_t offset, const char* data, size_t n) override {
    RETURN_IF_ERROR(env_->Inject(FileOp::kWrite, path_));
    return base_->Write(offset, data, n);
  }
  absl::StatusOr<size_t> Read(uint64_t offset, size_t n, char* out) override {
    RETURN_IF_ERROR(env_->Inject(FileOp::kRead, path_));
    return base_->Read(offset, n, out);
  }
  absl::Status DataSync() override {
    RETURN_IF_ERROR(env_->Inject(FileOp::kDataSync, path_));
    RETURN_IF_ERROR(base_->DataSync());
    env_->NoteSynced(path_);
    return absl::OkStatus();
  }
  absl::StatusOr<uint64_t> Size() override {
    RETURN_IF_ERROR(env_->Inject(FileOp::kSize, path_));
    return base_->Size();
  }
  absl::Status Truncate(uint64_t size) override {
    RETURN_IF_ERROR(env_->Inject(FileOp::kTruncate, path_));
    return base_->Truncate(size);
  }
  absl::Status Allocate(uint64_t offset, uint64_t length) override {
    RETURN_IF_ERROR(env_->Inject(FileOp::kAllocate, path_));
    return base_->Allocate(offset, length);
  }

 private:
  FaultInjectionEnv* const env_;
  const std::string path_;
  const std::unique_ptr<File> base_;
};

}  // namespace

void FaultInjectionEnv::FailNext(FileOp op, int err, int count, int skip) {
  absl::MutexLock l(&mu_);
  rules_[static_cast<size_t>(op)] = Rule{err, skip, count};
}

void FaultInjectionEnv::ClearFaults() {
  absl::MutexLock l(&mu_);
  rules_ = {};
  refuse_direct_ = false;
}

void FaultInjectionEnv::set_refuse_direct(bool refuse) {
  absl::MutexLock l(&mu_);
  refuse_direct_ = refuse;
}

int64_t FaultInjectionEnv::calls(FileOp op) const {
  absl::MutexLock l(&mu_);
  return calls_[static_cast<size_t>(op)];
}

int64_t FaultInjectionEnv::injected() const {
  absl::MutexLock l(&mu_);
  return injected_;
}

void FaultInjectionEnv::set_before(FileOp op, std::function<void(const std::string&)> fn) {
  absl::MutexLock l(&mu_);
  before_[static_cast<size_t>(op)] = std::move(fn);
}

absl::Status FaultInjectionEnv::Inject(FileOp op, const std::string& path) {
  std::function<void(const std::string&)> before;
  {
    absl::MutexLock l(&mu_);
    before = before_[static_cast<size_t>(op)];
  }
  if (before) before(path);
  absl::MutexLock l(&mu_);
  ++calls_[static_cast<size_t>(op)];
  Rule& r = rules_[static_cast<size_t>(op)];
  if (r.count == 0) return absl::OkStatus();
  if (r.skip > 0) {
    --r.skip;
    return absl::OkStatus();
  }
  if (r.count > 0) --r.count;
  ++injected_;
  return ErrnoStatus(r.err, absl::StrCat(OpName(op), " ", path, " (injected)"));
}

absl::StatusOr<FaultInjectionEnv::Durable> FaultInjectionEnv::ReadNow(const std::string& path) {
  Durable d;
  absl::StatusOr<std::unique_ptr<File>> f = base_->Open(path, OpenOptions{});
  if (!f.ok()) {
    if (ToErrno(f.status()) == ENOENT) return d;
    return f.status();
  }
  d.exists = true;
  ASSIGN_OR_RETURN(uint64_t size, (*f)->Size());
  d.data.resize(size);
  size_t done = 0;
  while (done < size) {
    ASSIGN_OR_RETURN(size_t n, (*f)->Read(done, size - done, d.data.data() + done));
    if (n == 0) break;
    done += n;
  }
  d.data.resize(done);
  return d;
}

void FaultInjectionEnv::TrackLocked(const std::string& path) {
  if (durable_.count(path)) return;
  // What the file holds before this Env first changes it counts as synced.
  absl::StatusOr<Durable> now = ReadNow(path);
  durable_[path] = now.ok() ? *std::move(now) : Durable{};
}

void FaultInjectionEnv::NoteSynced(const std::string& path) {
  absl::MutexLock l(&mu_);
  absl::StatusOr<Durable> now = ReadNow(path);
  if (now.ok()) durable_[path] = *std::move(now);
}

absl::StatusOr<std::unique_ptr<File>> FaultInjectionEnv::Open(const std::string& path,
                                                              const OpenOptions& options) {
  RETURN_IF_ERROR(Inject(FileOp::kOpen, path));
  {
    absl::MutexLock l(&mu_);
    if (options.direct && refuse_direct_) {
      return ErrnoStatus(EINVAL, absl::StrCat("open ", path, " O_DIRECT (refused)"));
    }
    if (options.write) TrackLocked(path);
  }
  ASSIGN_OR_RETURN(std::unique_ptr<File> f, base_->Open(path, options));
  return std::unique_ptr<File>(new FaultFile(this, path, std::move(f)));
}

absl::Status FaultInjectionEnv::CreateDir(const std::string& path) {
  RETURN_IF_ERROR(Inject(FileOp::kCreateDir, path));
  return base_->CreateDir(path);
}

absl::Status FaultInjectionEnv::Remove(const std::string& path) {
  RETURN_IF_ERROR(Inject(FileOp::kRemove, path));
  absl::MutexLock l(&mu_);
  TrackLocked(path);
  return base_->Remove(path);
}

absl::Status FaultInjectionEnv::SyncDir(const std::string& path) {
  RETURN_IF_ERROR(Inject(FileOp::kSyncDir, path));
  RETURN_IF_ERROR(base_->SyncDir(path));
  // The names in `path` are durable now: made files exist (with the bytes
  // of their last sync), removed ones are gone.
  absl::MutexLock l(&mu_);
  for (auto& [file, durable] : durable_) {
    if (Parent(file) != path) continue;
    absl::StatusOr<Durable> now = ReadNow(file);
    if (!now.ok()) continue;
    if (!now->exists) {
      durable = Durable{};
    } else if (!durable.exists) {
      durable.exists = true;
      durable.data.clear();
    }
  }
  return absl::OkStatus();
}

std::vector<std::string> FaultInjectionEnv::UnsyncedFiles() {
  absl::MutexLock l(&mu_);
  std::vector<std::string> out;
  for (const auto& [path, durable] : durable_) {
    absl::StatusOr<Durable> now = ReadNow(path);
    if (!now.ok() || now->exists != durable.exists || now->data != durable.data) {
      out.push_back(path);
    }
  }
  return out;
}

absl::Status FaultInjectionEnv::DropUnsyncedData() {
  absl::MutexLock l(&mu_);
  for (const auto& [path, durable] : durable_) {
    if (!durable.exists) {
      absl::Status s = base_->Remove(path);
      if (!s.ok() && ToErrno(s) != ENOENT) return s;
      continue;
    }
    OpenOptions o;
    o.write = true;
    o.create = true;
    ASSIGN_OR_RETURN(std::unique_ptr<File> f, base_->Open(path, o));
    // Emptied, then only the blocks that hold something written back, so
    // that holes stay holes.
    RETURN_IF_ERROR(f->Truncate(0));
    RETURN_IF_ERROR(f->Truncate(durable.data.size()));
    constexpr size_t kBlock = 4096;
    const std::string zeros(kBlock, '\0');
    for (size_t at = 0; at < durable.data.size(); at += kBlock) {
      const size_t n = std::min(kBlock, durable.data.size() - at);
      if (durable.data.compare(at, n, zeros, 0, n) == 0) continue;
      size_t done = 0;
      while (done < n) {
        ASSIGN_OR_RETURN(size_t w, f->Write(at + done, durable.data.data() + at + done, n - done));
        if (w == 0) return ErrnoStatus(EIO, absl::StrCat("putting back ", path));
        done += w;
      }
    }
    RETURN_IF_ERROR(f->DataSync());
  }
  return absl::OkStatus();
}

}  // namespace grantfs
