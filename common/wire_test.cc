#include "common/wire.h"

#include <grpcpp/support/byte_buffer.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "proto/grantfs.pb.h"
#include "proto/replication.pb.h"

namespace grantfs {
namespace {

std::string Flatten(const grpc::ByteBuffer& bb) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(bb.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices)
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

TEST(WireTest, VarintsMatchProtobufsEncoding) {
  for (uint64_t v : {1ull, 127ull, 128ull, 300ull, 16383ull, 16384ull, (1ull << 35) + 7, ~0ull}) {
    proto::ReplRecord want;
    want.set_seq(v);
    std::string got;
    AppendVarintField(proto::ReplRecord::kSeqFieldNumber, v, &got);
    EXPECT_EQ(got, want.SerializeAsString()) << v;
  }
  // Zero, which proto3 leaves out, is one byte.
  std::string zero;
  AppendVarintField(1, 0, &zero);
  EXPECT_EQ(zero, std::string("\x08\x00", 2));
}

TEST(WireTest, AMessageFollowedByItsBytesFieldParsesAsOne) {
  std::mt19937_64 rng(1);
  for (size_t size : {0ul, 1ul, 127ul, 128ul, 70000ul, 3ul << 20}) {
    std::string bytes(size, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    proto::WriteRequest head;
    head.set_ino(9);
    head.set_offset(size * 3);
    head.mutable_header()->set_seq(5);
    std::string wire = head.SerializeAsString();
    AppendBytesKey(proto::WriteRequest::kDataFieldNumber, size, &wire);
    auto data = std::make_shared<const std::string>(bytes);
    grpc::Slice slices[2] = {grpc::Slice(wire), SharedSlice(data)};
    grpc::ByteBuffer bb(slices, 2);
    proto::WriteRequest got;
    ASSERT_TRUE(got.ParseFromString(Flatten(bb))) << size;
    EXPECT_EQ(got.ino(), 9u);
    EXPECT_EQ(got.offset(), size * 3);
    EXPECT_EQ(got.header().seq(), 5u);
    EXPECT_TRUE(got.data() == bytes) << size;
  }
}

TEST(WireTest, SharedSliceKeepsTheStringUntilTheLastSliceGoes) {
  auto s = std::make_shared<const std::string>(1000, 'x');
  {
    grpc::Slice a = SharedSlice(s);
    EXPECT_EQ(s.use_count(), 2);
    EXPECT_EQ(a.begin(), reinterpret_cast<const uint8_t*>(s->data()));  // not a copy
    grpc::ByteBuffer bb(&a, 1);
    grpc::ByteBuffer copy = bb;  // gRPC's copies take references
    EXPECT_EQ(s.use_count(), 2);
  }
  EXPECT_EQ(s.use_count(), 1);
}

}  // namespace
}  // namespace grantfs
