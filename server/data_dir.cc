#include "server/data_dir.h"

#include <filesystem>
#include <set>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/meta_store.h"

namespace grantfs {
namespace {

namespace fs = std::filesystem;

absl::Status FsError(const std::string& what, const fs::path& path, const std::error_code& ec) {
  return absl::FailedPreconditionError(absl::StrCat(what, " ", path.string(), ": ", ec.message()));
}

// The first thing under `dir` that is not a directory ("" when none): a
// meta/ or chunks/ without a volume may hold empty directories only.
absl::StatusOr<std::string> FirstFile(const fs::path& dir) {
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, ec), end;
  if (ec) return FsError("reading", dir, ec);
  for (; it != end; it.increment(ec)) {
    if (ec) return FsError("reading", dir, ec);
    if (!it->is_directory(ec)) return fs::relative(it->path(), dir.parent_path()).string();
  }
  if (ec) return FsError("reading", dir, ec);
  return std::string();
}

}  // namespace

const char* DataDirStateName(DataDirState state) {
  switch (state) {
    case DataDirState::kMissing:
      return "missing";
    case DataDirState::kEmpty:
      return "empty";
    case DataDirState::kVolume:
      return "volume";
    case DataDirState::kForeign:
      return "foreign";
  }
  return "?";
}

absl::StatusOr<DataDirInfo> InspectDataDir(const std::string& dir) {
  DataDirInfo info;
  if (dir.empty()) return absl::InvalidArgumentError("no data directory given");
  const fs::path root(dir);
  std::error_code ec;
  const fs::file_status st = fs::status(root, ec);
  if (st.type() == fs::file_type::not_found) {
    info.state = DataDirState::kMissing;
    return info;
  }
  if (ec) return FsError("stat", root, ec);
  if (st.type() != fs::file_type::directory) {
    return absl::FailedPreconditionError(absl::StrCat(dir, " is not a directory"));
  }

  const bool partial = fs::exists(root / kPartialSnapshotFile, ec);
  if (ec) return FsError("stat", root / kPartialSnapshotFile, ec);
  if (partial) {
    // A replica's copy cut short is no copy (the replica discards it).
    info.state = DataDirState::kEmpty;
    info.detail = "an unfinished snapshot";
    return info;
  }
  const bool store = fs::exists(root / "meta" / "CURRENT", ec);
  if (ec) return FsError("stat", root / "meta" / "CURRENT", ec);
  if (store) {
    info.state = DataDirState::kVolume;
    ASSIGN_OR_RETURN(info.identity, MetaStore::ReadIdentity((root / "meta").string()));
    return info;
  }

  // What GrantFS itself leaves before a volume exists, and what mkfs puts
  // at the root of a fresh file system.
  static const std::set<std::string> kLeftovers = {"lost+found", "space.hold", kReplicaBootFile,
                                                   std::string(kReplicaBootFile) + ".tmp",
                                                   kCheckpointDir};
  info.state = DataDirState::kEmpty;
  fs::directory_iterator it(root, ec), end;
  if (ec) return FsError("reading", root, ec);
  for (; it != end; it.increment(ec)) {
    if (ec) return FsError("reading", root, ec);
    const std::string name = it->path().filename().string();
    if (kLeftovers.count(name)) continue;
    if ((name == "meta" || name == "chunks") && it->is_directory(ec)) {
      ASSIGN_OR_RETURN(std::string file, FirstFile(it->path()));
      if (file.empty()) continue;
      info.state = DataDirState::kForeign;
      info.detail = name == "meta" ? absl::StrCat("'", file, "' but no meta/CURRENT")
                                   : absl::StrCat("'", file, "' but no metadata store");
      return info;
    }
    info.state = DataDirState::kForeign;
    info.detail = absl::StrCat("'", name, "'");
    return info;
  }
  if (ec) return FsError("reading", root, ec);
  return info;
}

}  // namespace grantfs
