// "qtest": an all-reduce through the lossless test codec (codec.h), the IR v2 proof vehicle until
// the quantized collectives arrive. It exercises what those need, in the engine, the verifier and
// the simulator alike: scratch buffers of another type (the frames, kUint8), quantize and
// dequantize-reduce steps, transfers of encoded bytes, and dependency edges between channels.
//
// Rank r: channel 0 encodes its input once (step 0). Channel c then exchanges frames with the
// peers q where (r + q) % nch == c (a symmetric assignment, so both ends use the same channel),
// after step 0 of channel 0 (an edge). Channel 0 finally folds the frames in rank order,
// recv = x0, then recv += x1, ... one step each, after the last step of every other channel
// (edges). With the lossless codec the result equals the rank-order fold bit for bit, on every
// rank. All-to-all traffic, so never cheaper than the others: the tuner never picks it; it runs
// by name only (BRAID_ALGO=qtest).
#include <limits>

#include "algorithms/builtin_algorithms.h"
#include "algorithms/codec.h"
#include "algorithms/lowering.h"
#include "algorithms/schedule_builder.h"

namespace braid {
namespace {

class TestCodecAllReduce final : public Algorithm {
 public:
  const char* name() const override { return "qtest"; }

  bool supports(const CollArgs& a) const override {
    return a.kind == CollKind::kAllReduce && a.nranks >= 1 &&
           CodecSupports(CodecId::kTest, a.dtype);
  }

  Result<RankSchedule> build(const CollArgs& a, int rank) const override {
    BRAID_RETURN_IF_ERROR(CheckBuildArgs(*this, a, rank));
    const int n = a.nranks;
    if (n == 1 || a.count == 0) return LocalCopySchedule(a.count, a.in_place);
    const uint64_t enc = EncodedBytes(CodecId::kTest, a.dtype, a.count);
    const int nch = std::max(1, std::min(a.nchannels, n - 1));
    const uint64_t chunk = std::max<uint64_t>(a.chunk_bytes, 1);  // bytes: frames are kUint8

    RankSchedule s;
    const uint16_t own = AddBuffer(s, DataType::kUint8, enc);
    const uint16_t frames = AddBuffer(s, DataType::kUint8, enc * static_cast<uint64_t>(n));
    s.channels.resize(nch);

    Step encode;
    encode.ops.push_back(
        {StepOpKind::kQuantize, -1, {kSendBuf, 0, a.count}, {own, 0, enc}, CodecId::kTest});
    s.channels[0].steps.push_back(std::move(encode));

    for (int c = 0; c < nch; ++c) {
      Step exchange;
      for (int q = 0; q < n; ++q) {
        if (q == rank || (rank + q) % nch != c) continue;
        AppendSends(exchange, q, own, 0, enc, chunk);
        AppendRecvs(exchange, q, frames, static_cast<uint64_t>(q) * enc, enc, chunk);
      }
      if (exchange.ops.empty()) continue;
      if (c != 0) exchange.deps.push_back({0, 0});
      s.channels[c].steps.push_back(std::move(exchange));
    }

    std::vector<StepRef> after_exchange;
    for (int c = 1; c < nch; ++c)
      if (!s.channels[c].steps.empty())
        after_exchange.push_back(
            {static_cast<uint16_t>(c), static_cast<uint32_t>(s.channels[c].steps.size() - 1)});
    for (int q = 0; q < n; ++q) {
      Step fold;
      if (q == 0) fold.deps = after_exchange;
      const Slice frame{q == rank ? own : frames, q == rank ? 0 : static_cast<uint64_t>(q) * enc,
                        enc};
      fold.ops.push_back({q == 0 ? StepOpKind::kDequantize : StepOpKind::kDequantizeReduce,
                          -1,
                          frame,
                          {kRecvBuf, 0, a.count},
                          CodecId::kTest});
      s.channels[0].steps.push_back(std::move(fold));
    }
    return s;
  }

  double estimate_seconds(const CollArgs&, const LinkModel&) const override {
    return std::numeric_limits<double>::infinity();
  }
};

}  // namespace

const Algorithm& TestCodecAllReduceAlgorithm() {
  static const TestCodecAllReduce qtest;
  return qtest;
}

}  // namespace braid
