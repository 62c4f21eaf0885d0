// The quantized collectives end to end (issue 12): braidAllGatherQuantized (qwZ) and
// braidReduceScatterQuantized (qgZ, two hops on emulated nodes of equal size, one hop otherwise)
// over the real transports, checked bit for bit against a reference this test computes with the
// src/quant codecs in the order the spec fixes: every contribution encoded once per hop, decoded
// and summed (hop 1 in fp32, the last hop into the output type), in rank order. Also: the error
// against the exact sum stays within the codec's bound, and bad arguments are refused on every
// rank without breaking the communicator.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "core/base/datatype.h"
#include "multirank/harness.h"
#include "quant/block_codec.h"

namespace braid_test {
namespace {

#define CHECK_OR_FAIL(cond, ...)                                   \
  do {                                                             \
    if (!(cond)) {                                                 \
      std::fprintf(stderr, "[rank %d] %s: ", rank, #cond);         \
      std::fprintf(stderr, __VA_ARGS__);                           \
      std::fprintf(stderr, " (%s)\n", braidGetLastError(nullptr)); \
      return 1;                                                    \
    }                                                              \
  } while (0)

using braid::DataType;
using braid::Status;
namespace quant = braid::quant;

// Rank r's input element i of a call: smooth values of varied magnitude per block.
float In(int r, uint64_t i) {
  const double x = static_cast<double>(i) * 0.37 + r * 1.7;
  return static_cast<float>(std::sin(x) * (1.0 + (i / 32) % 5) + 0.01 * r);
}

struct Shape {
  int g, m;  // nodes, ranks per node (m = 0: nodes of uneven size, see NodeOf)
};
int Ranks(const Shape& s) {
  return s.m > 0 ? s.g * s.m : 3;
}
// Rank r's node: contiguous blocks of m, or {0, 0, 1} for the uneven shape.
int NodeOf(const Shape& s, int r) {
  return s.m > 0 ? r / s.m : (r < 2 ? 0 : 1);
}

quant::BlockFormat Format(const braidQuantConfig_t& q) {
  quant::BlockFormat f;
  f.bits = static_cast<uint8_t>(q.bits);
  f.symmetric = q.symmetric != 0;
  f.block = static_cast<uint32_t>(q.blockSize);
  return f;
}

std::vector<uint8_t> Encode(const quant::BlockFormat& f, const std::vector<float>& x) {
  std::vector<uint8_t> e(quant::EncodedBytes(f, x.size()));
  if (!x.empty())
    EXPECT_TRUE(quant::Quantize(f, DataType::kFloat32, x.data(), x.size(), e.data()).ok());
  return e;
}

// qgZ's result on rank `me` of n (fp32 output), as the spec orders it.
std::vector<float> ReferenceReduceScatter(const Shape& s, const quant::BlockFormat& f, int me,
                                          uint64_t count, bool avg) {
  const int n = Ranks(s);
  auto block = [&](int r, int dest) {  // rank r's input block destined to rank `dest`
    std::vector<float> b(count);
    for (uint64_t i = 0; i < count; ++i) b[i] = In(r, static_cast<uint64_t>(dest) * count + i);
    return b;
  };
  std::vector<float> out(count, 0.0f);
  auto fold = [&](std::vector<float>& acc, const std::vector<uint8_t>& e, bool first) {
    const Status st =
        first ? quant::Dequantize(f, DataType::kFloat32, e.data(), count, acc.data())
              : quant::DequantizeReduce(f, DataType::kFloat32, e.data(), count, acc.data());
    EXPECT_TRUE(st.ok());
  };
  const bool two_hops = s.m > 1 && s.g > 1;
  if (!two_hops) {
    for (int q = 0; q < n; ++q) fold(out, Encode(f, block(q, me)), q == 0);
  } else {
    const int j = me % s.m;
    for (int node = 0; node < s.g; ++node) {
      std::vector<float> partial(count, 0.0f);
      for (int j1 = 0; j1 < s.m; ++j1)
        fold(partial, Encode(f, block(node * s.m + j1, me)), j1 == 0);
      (void)j;
      fold(out, Encode(f, partial), node == 0);
    }
  }
  if (avg)
    for (float& v : out) v = v / static_cast<float>(n);
  return out;
}

braidComm_t InitOnNode(const Shape& s, int rank, int n, const braidUniqueId& id) {
  setenv("BRAID_HOSTID", ("qnode" + std::to_string(NodeOf(s, rank))).c_str(), 1);
  braidComm_t comm = nullptr;
  if (braidCommInitRank(&comm, n, id, rank) != braidSuccess) return nullptr;
  return comm;
}

using Param = std::tuple<int, int>;  // g, m (m = 0: uneven)
class Quantized : public ::testing::TestWithParam<Param> {
 protected:
  Shape shape() const { return {std::get<0>(GetParam()), std::get<1>(GetParam())}; }
  JobOptions Options() const {
    JobOptions o;
    o.nranks = Ranks(shape());
    o.timeout_s = 180;
    o.init = false;
    o.env = {{"BRAID_TIMEOUT", "60"}};
    return o;
  }
};

TEST_P(Quantized, ReduceScatterMatchesTheReferenceBitForBit) {
  const Shape s = shape();
  auto out = RunJob(Options(), [s](braidComm_t, int rank, int n, const braidUniqueId& id) {
    braidComm_t comm = InitOnNode(s, rank, n, id);
    CHECK_OR_FAIL(comm, "init");
    for (braidQuantConfig_t q :
         {braidQuantConfig_t{8, 32, 1}, braidQuantConfig_t{4, 64, 1}, braidQuantConfig_t{4, 7, 0}})
      for (uint64_t count : {uint64_t{1}, uint64_t{100}, uint64_t{5000}})
        for (bool avg : {false, true})
          for (bool in_place : {false, true}) {
            std::vector<float> send(count * n), recv(count, -7.0f);
            for (uint64_t i = 0; i < send.size(); ++i) send[i] = In(rank, i);
            const void* sp = send.data();
            void* rp = recv.data();
            if (in_place) rp = send.data() + static_cast<uint64_t>(rank) * count;
            CHECK_OR_FAIL(
                braidReduceScatterQuantized(sp, rp, count, braidFloat32, avg ? braidAvg : braidSum,
                                            &q, comm) == braidSuccess,
                "call: %s", braidGetLastError(comm));
            const float* got = static_cast<const float*>(rp);
            const auto want = ReferenceReduceScatter(s, Format(q), rank, count, avg);
            for (uint64_t i = 0; i < count; ++i)
              CHECK_OR_FAIL(std::memcmp(&got[i], &want[i], sizeof(float)) == 0,
                            "int%d/G=%d%s count %llu%s%s: element %llu is %.9g, want %.9g", q.bits,
                            q.blockSize, q.symmetric ? "" : " asym",
                            static_cast<unsigned long long>(count), avg ? " avg" : "",
                            in_place ? " in place" : "", static_cast<unsigned long long>(i), got[i],
                            want[i]);
            // And close to the exact sum: the L2 error relative to the contributions' L2 norm
            // (a sum may cancel; each contribution's quantization error does not) within what
            // two hops of the codec allow (INT8: about 1%, INT4: about 20%).
            double err = 0, norm = 0;
            for (uint64_t i = 0; i < count; ++i) {
              double exact = 0;
              for (int r = 0; r < n; ++r) {
                const double x = In(r, static_cast<uint64_t>(rank) * count + i);
                exact += x;
                norm += x * x / (avg ? static_cast<double>(n) * n : 1.0);
              }
              if (avg) exact /= n;
              err += (got[i] - exact) * (got[i] - exact);
            }
            if (count >= 100)
              CHECK_OR_FAIL(std::sqrt(err / norm) < (q.bits == 8 ? 0.02 : 0.3), "relative error %g",
                            std::sqrt(err / norm));
          }
    CHECK_OR_FAIL(braidCommDestroy(comm) == braidSuccess, "destroy");
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

TEST_P(Quantized, AllGatherIsTheSameOnEveryRankAndMatchesTheCodec) {
  const Shape s = shape();
  auto out = RunJob(Options(), [s](braidComm_t, int rank, int n, const braidUniqueId& id) {
    braidComm_t comm = InitOnNode(s, rank, n, id);
    CHECK_OR_FAIL(comm, "init");
    for (braidDataType_t t : {braidFloat32, braidBfloat16})
      for (braidQuantConfig_t q : {braidQuantConfig_t{8, 4096, 1}, braidQuantConfig_t{4, 33, 0}})
        for (uint64_t count : {uint64_t{3}, uint64_t{10000}})
          for (bool in_place : {false, true}) {
            const DataType dt = static_cast<DataType>(t);
            const size_t es = braid::DataTypeSize(dt);
            // Inputs in the call's type: fp32 values, narrowed for bf16 by the codec's own
            // decode of an fp32 encoding (any exact bf16 values would do).
            auto input_of = [&](int r) {
              std::vector<uint8_t> v(count * es);
              for (uint64_t i = 0; i < count; ++i) {
                float x = In(r, i);
                if (t == braidFloat32) {
                  std::memcpy(&v[i * es], &x, 4);
                } else {
                  uint32_t bits;
                  std::memcpy(&bits, &x, 4);
                  const uint16_t b = static_cast<uint16_t>(bits >> 16);  // truncation: exact bf16
                  std::memcpy(&v[i * es], &b, 2);
                }
              }
              return v;
            };
            std::vector<uint8_t> recv(count * es * n, 0xEE);
            std::vector<uint8_t> mine = input_of(rank);
            const void* sp = mine.data();
            if (in_place) {
              std::memcpy(recv.data() + rank * count * es, mine.data(), mine.size());
              sp = recv.data() + rank * count * es;
            }
            CHECK_OR_FAIL(
                braidAllGatherQuantized(sp, recv.data(), count, t, &q, comm) == braidSuccess,
                "call: %s", braidGetLastError(comm));
            const quant::BlockFormat f = Format(q);
            for (int r = 0; r < n; ++r) {
              const std::vector<uint8_t> in = input_of(r);
              std::vector<uint8_t> enc(quant::EncodedBytes(f, count)), dec(count * es);
              CHECK_OR_FAIL(quant::Quantize(f, dt, in.data(), count, enc.data()).ok() &&
                                quant::Dequantize(f, dt, enc.data(), count, dec.data()).ok(),
                            "reference");
              CHECK_OR_FAIL(std::memcmp(recv.data() + r * count * es, dec.data(), dec.size()) == 0,
                            "type %d int%d/G=%d count %llu%s: block of rank %d differs", t, q.bits,
                            q.blockSize, static_cast<unsigned long long>(count),
                            in_place ? " in place" : "", r);
            }
          }
    CHECK_OR_FAIL(braidCommDestroy(comm) == braidSuccess, "destroy");
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// Refused on the calling rank, before anything moves; the communicator stays usable.
TEST_P(Quantized, BadArgumentsAreRefused) {
  const Shape s = shape();
  auto out = RunJob(Options(), [s](braidComm_t, int rank, int n, const braidUniqueId& id) {
    braidComm_t comm = InitOnNode(s, rank, n, id);
    CHECK_OR_FAIL(comm, "init");
    std::vector<float> a(8 * n, 1.0f), b(8 * n, 0.0f);
    const braidQuantConfig_t good{8, 32, 1};
    struct Bad {
      braidQuantConfig_t q;
      braidDataType_t t;
      braidRedOp_t op;
      const char* what;
    };
    for (const Bad& x : {Bad{{6, 32, 1}, braidFloat32, braidSum, "bits must be 8 or 4"},
                         Bad{{8, 0, 1}, braidFloat32, braidSum, "blockSize"},
                         Bad{{8, 32, 2}, braidFloat32, braidSum, "symmetric"},
                         Bad{good, braidInt32, braidSum, "float32, float16 or bfloat16"},
                         Bad{good, braidFloat32, braidMax, "braidSum or braidAvg"}}) {
      braidResult_t r = braidReduceScatterQuantized(a.data(), b.data(), 8, x.t, x.op, &x.q, comm);
      CHECK_OR_FAIL(r == braidErrInvalidArgument, "%s: returned %d", x.what, static_cast<int>(r));
      CHECK_OR_FAIL(std::strstr(braidGetLastError(comm), x.what) != nullptr, "%s: message %s",
                    x.what, braidGetLastError(comm));
    }
    CHECK_OR_FAIL(braidAllGatherQuantized(a.data(), b.data(), 8, braidFloat32, nullptr, comm) ==
                      braidErrInvalidArgument,
                  "NULL quant accepted");
    // Ranks that quantize differently fail the call agreement on every rank (no data moved).
    const braidQuantConfig_t mine{8, rank == 0 ? 32 : 64, 1};
    CHECK_OR_FAIL(braidAllGatherQuantized(a.data(), b.data(), 8, braidFloat32, &mine, comm) ==
                      braidErrInvalidUsage,
                  "mismatched block sizes accepted");
    CHECK_OR_FAIL(std::strstr(braidGetLastError(comm), "int8/G=") != nullptr, "message %s",
                  braidGetLastError(comm));
    // Still usable: a quantized call and a plain one.
    CHECK_OR_FAIL(
        braidAllGatherQuantized(a.data(), b.data(), 8, braidFloat32, &good, comm) == braidSuccess,
        "after the refusals");
    CHECK_OR_FAIL(
        braidAllReduce(a.data(), b.data(), 8, braidFloat32, braidSum, comm) == braidSuccess &&
            b[0] == static_cast<float>(n),
        "plain call");
    CHECK_OR_FAIL(braidCommDestroy(comm) == braidSuccess, "destroy");
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

std::string ShapeName(const ::testing::TestParamInfo<Param>& info) {
  const int g = std::get<0>(info.param), m = std::get<1>(info.param);
  return m == 0 ? std::string("uneven_2plus1") : std::to_string(g) + "x" + std::to_string(m);
}

// 2x2 and 2x3: two hops (intra-node shm, inter-node tcp); 1x3: one node, one hop; 2+1: uneven.
INSTANTIATE_TEST_SUITE_P(Shapes, Quantized,
                         ::testing::Values(Param{2, 2}, Param{2, 3}, Param{1, 3}, Param{2, 0}),
                         ShapeName);

}  // namespace
}  // namespace braid_test
