// The mount's metrics (--metrics_addr, docs/metrics.md): its FUSE ops by
// name and how long each took, and what its write cache, its space grant
// and the kernel hold now.
#include "absl/strings/str_cat.h"
#include "client/filesystem.h"
#include "client/fuse_ops.h"

namespace grantfs {

void FileSystem::WriteMetrics(MetricsText* out) {
  out->Gauge("grantfs_mount_kernel_inodes", "inodes the kernel holds (looked up, not forgotten)",
             static_cast<double>(inodes_.Size()));
  out->Gauge("grantfs_mount_fastwrite", "1 in fastwrite mode, 0 in writethrough",
             cache_ != nullptr ? 1 : 0);
  out->Gauge("grantfs_mount_leases", "1 when metadata leases are on", leases_ != nullptr ? 1 : 0);
  if (cache_ == nullptr) return;
  out->Gauge("grantfs_mount_dirty_bytes", "bytes written here and not yet on the server",
             static_cast<double>(cache_->dirty_bytes()));
  out->Gauge("grantfs_mount_dirty_limit_bytes",
             "most bytes the cache holds; writers past it wait (--dirty_limit_mb)",
             static_cast<double>(options_.cache.dirty_limit));
  out->Gauge("grantfs_mount_grant_available_bytes", "space of the grant not yet taken by writes",
             static_cast<double>(pool_->available()));
  out->Gauge("grantfs_mount_grant_outstanding_bytes",
             "space of the grant taken by cached writes not yet settled by the server",
             static_cast<double>(pool_->outstanding()));
  out->Gauge("grantfs_mount_grant_debt_bytes",
             "space owed after the server released this mount's grant (its session lapsed)",
             static_cast<double>(pool_->debt()));
}

void FuseAdapter::EnableMetrics() {
  ops_ = std::make_unique<OpLatencies>("grantfs_mount_op_seconds",
                                       "FUSE operations, by name, and how long each took");
}

std::string FuseAdapter::RenderMetrics() {
  MetricsText t;
  if (ops_ != nullptr) ops_->Write(&t);
  fs_->WriteMetrics(&t);
  return t.text();
}

}  // namespace grantfs
