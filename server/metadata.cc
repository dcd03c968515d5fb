#include "server/metadata.h"

#include <utility>

#include "common/status_macros.h"

namespace grantfs {

absl::StatusOr<std::unique_ptr<Metadata>> Metadata::Open(const MetaStoreOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<MetaStore> store, MetaStore::Open(options));
  return std::make_unique<Metadata>(std::move(store));
}

Metadata::Metadata(std::unique_ptr<MetaStore> store)
    : store_(std::move(store)),
      inodes_(store_.get()),
      orphans_(store_.get()),
      names_(store_.get(), &inodes_, &orphans_),
      space_(store_.get()),
      sessions_(store_.get()),
      locks_(store_.get()) {}

}  // namespace grantfs
