#include "checkpoint/meta_digest.h"

#include <map>
#include <memory>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "rocksdb/db.h"

namespace grantfs {
namespace {

constexpr char kReplicaPositionKind = 'R';  // checkpoint/replica.cc: the copy's own position
constexpr uint64_t kFnvOffset = 14695981039346656037ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;

void Mix(uint64_t* h, const char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    *h ^= static_cast<unsigned char>(p[i]);
    *h *= kFnvPrime;
  }
}

void MixLength(uint64_t* h, uint64_t n) {
  char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<char>(n >> (8 * i));
  Mix(h, b, sizeof(b));
}

}  // namespace

absl::StatusOr<proto::MetaDigest> DigestMeta(rocksdb::DB* db, const rocksdb::Snapshot* snapshot,
                                             uint64_t seq) {
  struct Sum {
    uint64_t records = 0, bytes = 0, hash = kFnvOffset;
  };
  std::map<char, Sum> sums;
  rocksdb::ReadOptions ro;
  ro.snapshot = snapshot;
  ro.fill_cache = false;  // one pass over everything: keep the cache for the server
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(ro));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const rocksdb::Slice k = it->key(), v = it->value();
    const char kind = k.empty() ? '\0' : k[0];
    if (kind == kReplicaPositionKind) continue;
    Sum& s = sums[kind];
    ++s.records;
    s.bytes += k.size() + v.size();
    MixLength(&s.hash, k.size());
    Mix(&s.hash, k.data(), k.size());
    MixLength(&s.hash, v.size());
    Mix(&s.hash, v.data(), v.size());
  }
  if (!it->status().ok()) {
    return absl::DataLossError(absl::StrCat("digesting the metadata: ", it->status().ToString()));
  }
  proto::MetaDigest d;
  d.set_seq(seq);
  for (const auto& [kind, s] : sums) {
    proto::MetaDigest::Kind* k = d.add_kinds();
    k->set_kind(std::string(1, kind));
    k->set_records(s.records);
    k->set_bytes(s.bytes);
    k->set_hash(s.hash);
  }
  return d;
}

std::vector<std::string> CompareDigests(const proto::MetaDigest& primary,
                                        const proto::MetaDigest& replica) {
  std::map<std::string, std::pair<const proto::MetaDigest::Kind*, const proto::MetaDigest::Kind*>>
      kinds;
  for (const auto& k : primary.kinds()) kinds[k.kind()].first = &k;
  for (const auto& k : replica.kinds()) kinds[k.kind()].second = &k;
  std::vector<std::string> out;
  for (const auto& [name, pr] : kinds) {
    const auto [p, r] = pr;
    const std::string label = absl::CEscape(name);
    if (p == nullptr || r == nullptr) {
      out.push_back(absl::StrCat(label, ": ", p ? p->records() : r->records(), " records on the ",
                                 p ? "primary" : "replica", ", none on the ",
                                 p ? "replica" : "primary"));
    } else if (p->records() != r->records() || p->bytes() != r->bytes()) {
      out.push_back(absl::StrCat(label, ": ", p->records(), " records (", p->bytes(),
                                 " bytes) on the primary, ", r->records(), " (", r->bytes(),
                                 " bytes) on the replica"));
    } else if (p->hash() != r->hash()) {
      out.push_back(absl::StrFormat("%s: %d records on both, contents differ (%016x vs %016x)",
                                    label, p->records(), p->hash(), r->hash()));
    }
  }
  return out;
}

}  // namespace grantfs
