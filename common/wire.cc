#include "common/wire.h"

namespace grantfs {
namespace {

void DropRef(void* ref) { delete static_cast<std::shared_ptr<const std::string>*>(ref); }

}  // namespace

void AppendVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

void AppendVarintField(uint32_t field, uint64_t v, std::string* out) {
  AppendVarint(static_cast<uint64_t>(field) << 3, out);  // wire type 0
  AppendVarint(v, out);
}

void AppendBytesKey(uint32_t field, uint64_t len, std::string* out) {
  AppendVarint((static_cast<uint64_t>(field) << 3) | 2, out);  // wire type 2
  AppendVarint(len, out);
}

grpc::Slice SharedSlice(std::shared_ptr<const std::string> s) {
  if (s->empty()) return grpc::Slice();
  char* bytes = const_cast<char*>(s->data());
  const size_t size = s->size();
  return grpc::Slice(bytes, size, DropRef, new std::shared_ptr<const std::string>(std::move(s)));
}

}  // namespace grantfs
