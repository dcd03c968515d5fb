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
  if (leases_ != nullptr) {
    const LeaseCache::Stats s = leases_->stats();
    out->Counter("grantfs_mount_lease_hits_total",
                 "lookups, getattrs and listings answered from leases",
                 static_cast<double>(s.hits));
    out->Counter("grantfs_mount_lease_misses_total", "the same, asked of the server",
                 static_cast<double>(s.misses));
    out->Counter("grantfs_mount_lease_recalls_total", "leases the server recalled from this mount",
                 static_cast<double>(s.recalls));
    out->Gauge("grantfs_mount_leased_attrs", "inodes whose attributes are leased now",
               static_cast<double>(s.attrs));
    out->Gauge("grantfs_mount_leased_names", "names (there or not) leased now",
               static_cast<double>(s.names));
  }
  out->Gauge("grantfs_mount_ns_grants", "1 when namespace grants are on", ns_ != nullptr ? 1 : 0);
  if (ns_ != nullptr) {
    const NsGrants::Stats s = ns_->stats();
    out->Counter("grantfs_mount_ns_local_changes_total",
                 "creates and removals made by the mount in its granted directories",
                 static_cast<double>(s.local));
    out->Counter("grantfs_mount_ns_fallbacks_total",
                 "changes in granted directories that went to the server as calls",
                 static_cast<double>(s.fallback));
    out->Counter("grantfs_mount_ns_grant_recalls_total",
                 "namespace grants the server recalled from this mount",
                 static_cast<double>(s.recalls));
    out->Gauge("grantfs_mount_ns_granted_dirs", "directories granted to this mount now",
               static_cast<double>(s.granted));
    out->Gauge("grantfs_mount_ns_log_entries", "namespace log entries not yet applied",
               static_cast<double>(s.pending));
  }
  if (prefetch_ != nullptr) {
    const ListingPrefetch::Stats s = prefetch_->stats();
    out->Counter("grantfs_mount_listings_read_ahead_total",
                 "directory listings read ahead of a walk (--readdir_ahead)",
                 static_cast<double>(s.fetched));
  }
  if (clean_ != nullptr) {
    out->Counter("grantfs_mount_kept_reads_total",
                 "reads answered from acknowledged writes kept here (--clean_cache_mb), no call",
                 static_cast<double>(reads_kept()));
    out->Gauge("grantfs_mount_kept_bytes", "bytes of acknowledged writes kept for re-reads",
               static_cast<double>(clean_->bytes()));
  }
  if (cache_ == nullptr) return;
  const WriteCache::Counters wc = cache_->counters();
  out->Counter("grantfs_mount_flushed_bytes_total",
               "bytes of cached writes the server acknowledged",
               static_cast<double>(wc.flushed_bytes));
  out->Gauge("grantfs_mount_waiting_writers", "writers waiting now for room in the cache",
             static_cast<double>(wc.waiting_writers));
  out->Counter("grantfs_mount_throttled_writes_total",
               "writes that waited for room in the cache (the dirty limit)",
               static_cast<double>(wc.throttled_writes));
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
