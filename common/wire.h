// Hand-built protobuf wire form for the two bulk paths (a mount's Write, the
// replication stream), so that bulk bytes go to gRPC by reference instead of
// being copied into a message and again into gRPC's buffer.
//
// Protobuf lets the fields of a message come in any order and takes the last
// value of a repeated scalar field, so a message may be sent as its
// ordinary serialization followed by more fields: the receiver parses one
// ordinary message. See docs/protocol.md ("Bulk bytes").
#ifndef GRANTFS_COMMON_WIRE_H_
#define GRANTFS_COMMON_WIRE_H_

#include <grpcpp/support/slice.h>

#include <cstdint>
#include <memory>
#include <string>

namespace grantfs {

// Appends protobuf's base-128 varint encoding of `v`.
void AppendVarint(uint64_t v, std::string* out);

// Appends the key of varint field `field` and its value.
void AppendVarintField(uint32_t field, uint64_t v, std::string* out);

// Appends the key of length-delimited field `field` (bytes, string, message)
// and its length `len`: the field's `len` bytes must follow.
void AppendBytesKey(uint32_t field, uint64_t len, std::string* out);

// A slice over the bytes of `s`, which it keeps alive until gRPC drops the
// slice (possibly after the call that sent it returned). `s` must not
// change meanwhile.
grpc::Slice SharedSlice(std::shared_ptr<const std::string> s);

}  // namespace grantfs

#endif  // GRANTFS_COMMON_WIRE_H_
