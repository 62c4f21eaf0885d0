// The quantized collectives' builders (quantized.cc): qwz (all-gather) and qgz (reduce-scatter,
// one hop, or two hops on a grid of nodes) proven by the verifier for every N in 1..8, every grid
// g x M in 1..4 (contiguous and interleaved nodes), uneven nodes (one hop), odd counts, every
// block codec, fp32/fp16/bf16, in and out of place, SUM and AVG. They serve only requests that
// name a codec; the simulator prices their cross-node bytes (two hops: one encoding per block).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/builtin_algorithms.h"
#include "algorithms/codec.h"
#include "algorithms/lowering.h"
#include "algorithms/verifier.h"

namespace braid {
namespace {

const Codec kCodecs[] = {
    {CodecId::kInt8, 32}, {CodecId::kInt4, 7}, {CodecId::kInt8Asym, 100}, {CodecId::kInt4Asym, 1}};

CollArgs Args(CollKind kind, int n, uint64_t count, DataType dt, bool in_place, Codec codec) {
  CollArgs a;
  a.kind = kind;
  a.nranks = n;
  a.count = count;
  a.dtype = dt;
  a.in_place = in_place;
  a.codec = codec;
  a.chunk_bytes = 96;  // several messages per encoding
  return a;
}

// Node of rank r: g nodes of m ranks, contiguous (r / m) or interleaved (r % g).
GroupLayout Grid(int g, int m, bool interleaved) {
  GroupLayout l;
  l.nnodes = g;
  const int n = g * m;
  l.node_of.resize(n);
  l.local_rank.resize(n);
  for (int r = 0; r < n; ++r) {
    l.node_of[r] = interleaved ? r % g : r / m;
    l.local_rank[r] = interleaved ? r / g : r % m;
  }
  return l;
}

TEST(QuantizedCollectives, AllGatherVerifiesForEveryShape) {
  const Algorithm& qwz = QuantizedAllGatherAlgorithm();
  for (const Codec& codec : kCodecs)
    for (int n = 1; n <= 8; ++n)
      for (uint64_t count : {0, 1, 33, 257})
        for (DataType dt : {DataType::kFloat32, DataType::kFloat16, DataType::kBfloat16})
          for (bool in_place : {false, true}) {
            const CollArgs a = Args(CollKind::kAllGather, n, count, dt, in_place, codec);
            ASSERT_TRUE(qwz.supports(a));
            const Status st = VerifySchedule(qwz, a);
            ASSERT_TRUE(st.ok()) << CodecName(codec) << " n=" << n << " count=" << count << ": "
                                 << st.message();
          }
}

TEST(QuantizedCollectives, ReduceScatterVerifiesOnOneAndTwoHops) {
  const Algorithm& qgz = QuantizedReduceScatterAlgorithm();
  for (const Codec& codec : kCodecs)
    for (int g = 1; g <= 4; ++g)
      for (int m = 1; m <= 4; ++m)
        for (bool interleaved : {false, true})
          for (uint64_t count : {1, 45})
            for (DataType dt : {DataType::kFloat32, DataType::kBfloat16})
              for (bool in_place : {false, true})
                for (bool avg : {false, true}) {
                  const GroupLayout l = Grid(g, m, interleaved);
                  CollArgs a = Args(CollKind::kReduceScatter, g * m, count, dt, in_place, codec);
                  a.layout = &l;
                  a.avg = avg;
                  ASSERT_TRUE(qgz.supports(a));
                  const Status st = VerifySchedule(qgz, a);
                  ASSERT_TRUE(st.ok()) << CodecName(codec) << " " << g << "x" << m
                                       << (interleaved ? " interleaved" : "") << " count=" << count
                                       << (avg ? " avg" : "") << ": " << st.message();
                }
}

// Large counts run the two hops as a pipeline of pieces (cut at codec-block boundaries) spread
// over the channels, chained by edges across channels; the verifier proves each layout.
TEST(QuantizedCollectives, TwoHopsPipelineVerifiesOnEveryChannelCount) {
  const Algorithm& qgz = QuantizedReduceScatterAlgorithm();
  for (const Codec codec : {Codec{CodecId::kInt4, 7}, Codec{CodecId::kInt8, 32}})
    for (auto [g, m] : {std::pair{2, 2}, std::pair{2, 3}})
      for (int nch : {1, 2, 3})
        for (bool in_place : {false, true}) {
          const GroupLayout l = Grid(g, m, true);
          CollArgs a = Args(CollKind::kReduceScatter, g * m, 3 * 16384 + 45, DataType::kFloat16,
                            in_place, codec);
          a.layout = &l;
          a.nchannels = nch;
          a.chunk_bytes = 1 << 16;
          auto s = BuildSchedule(qgz, a, 0);
          ASSERT_TRUE(s.ok()) << s.status().message();
          // One channel: no pipeline; more: four pieces (count / 16384) over min(4, nch).
          EXPECT_EQ(s->channels.size(), static_cast<size_t>(nch == 1 ? 1 : std::min(4, nch)));
          const Status st = VerifySchedule(qgz, a);
          ASSERT_TRUE(st.ok()) << CodecName(codec) << " " << g << "x" << m << " nch=" << nch << ": "
                               << st.message();
        }
}

TEST(QuantizedCollectives, UnevenNodesTakeOneHop) {
  // Nodes of 2 and 1 ranks: not a grid, so the one-hop schedule (an all-to-all of encodings).
  GroupLayout l;
  l.nnodes = 2;
  l.node_of = {0, 0, 1};
  l.local_rank = {0, 1, 0};
  CollArgs a =
      Args(CollKind::kReduceScatter, 3, 50, DataType::kFloat32, false, {CodecId::kInt8, 16});
  a.layout = &l;
  const Status st = VerifySchedule(QuantizedReduceScatterAlgorithm(), a);
  EXPECT_TRUE(st.ok()) << st.message();
}

TEST(QuantizedCollectives, ServeOnlyQuantizedRequests) {
  const Algorithm& qwz = QuantizedAllGatherAlgorithm();
  const Algorithm& qgz = QuantizedReduceScatterAlgorithm();
  CollArgs plain = Args(CollKind::kAllGather, 4, 10, DataType::kFloat32, false, Codec());
  EXPECT_FALSE(qwz.supports(plain));
  CollArgs test_codec =
      Args(CollKind::kAllGather, 4, 10, DataType::kFloat32, false, CodecId::kTest);
  EXPECT_FALSE(qwz.supports(test_codec));
  CollArgs ints = Args(CollKind::kAllGather, 4, 10, DataType::kInt32, false, {CodecId::kInt8, 32});
  EXPECT_FALSE(qwz.supports(ints));
  CollArgs rs =
      Args(CollKind::kReduceScatter, 4, 10, DataType::kFloat32, false, {CodecId::kInt8, 32});
  EXPECT_FALSE(qwz.supports(rs));
  EXPECT_TRUE(qgz.supports(rs));
  rs.op = ReduceOp::kMax;
  EXPECT_FALSE(qgz.supports(rs));  // sums only
  EXPECT_EQ(QuantizedAlgorithmFor(CollKind::kAllGather), &qwz);
  EXPECT_EQ(QuantizedAlgorithmFor(CollKind::kReduceScatter), &qgz);
  EXPECT_EQ(QuantizedAlgorithmFor(CollKind::kAllReduce), nullptr);
  EXPECT_EQ(FindAlgorithm("qgz"), &qgz);
  // Never in the tuner's ranked sets.
  for (const auto* list : {&AllAlgorithms(), &HierarchicalAlgorithms()})
    for (const Algorithm* algo : *list) EXPECT_NE(std::string(algo->name()).rfind("q", 0), 0u);
}

// Cross-node bytes of the two-hop qgz: each rank sends one encoding of `count` elements to each
// other node (g - 1 of them), where a one-hop all-to-all would send M per node.
TEST(QuantizedCollectives, TwoHopsSendOneEncodingPerBlockAcrossNodes) {
  const int g = 2, m = 4, n = g * m;
  const GroupLayout l = Grid(g, m, false);
  const Codec codec{CodecId::kInt4, 32};
  CollArgs a = Args(CollKind::kReduceScatter, n, 4096, DataType::kFloat32, false, codec);
  a.layout = &l;
  const uint64_t enc = EncodedBytes(codec, DataType::kFloat32, a.count);
  auto cross_node_bytes = [&](const CollArgs& args) {
    uint64_t bytes = 0;
    for (int r = 0; r < n; ++r) {
      auto s = BuildSchedule(QuantizedReduceScatterAlgorithm(), args, r);
      EXPECT_TRUE(s.ok()) << s.status().message();
      for (const auto& ch : s->channels)
        for (const auto& st : ch.steps)
          for (const auto& op : st.ops)
            if (op.kind == StepOpKind::kSend && l.node_of[op.peer] != l.node_of[r])
              bytes += op.src.count;  // kUint8 buffers: elements are bytes
    }
    return bytes;
  };
  EXPECT_EQ(cross_node_bytes(a), static_cast<uint64_t>(n) * (g - 1) * enc);
  CollArgs flat = a;
  flat.layout = nullptr;  // one group: the one-hop all-to-all
  // Read with the grid's nodes: every rank sends M encodings to the other node.
  EXPECT_EQ(cross_node_bytes(flat), static_cast<uint64_t>(n) * (g - 1) * m * enc);
}

}  // namespace
}  // namespace braid
