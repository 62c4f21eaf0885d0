// The quantized collectives of ZeRO++ (spec/algorithms.md section 3), as schedule builders: the
// verifier proves their data flow, the simulator prices their encoded bytes, the engine runs them.
// They serve only requests that name a block codec (CollArgs::codec, from
// braidAllGatherQuantized / braidReduceScatterQuantized) and nothing else.
//
// qwz (all-gather): each rank encodes its shard once, the encodings are all-gathered, every rank
// decodes all N of them, its own included, so every rank ends with the same bits. On a grid of
// g nodes x M ranks (g, M > 1) the encodings travel as in H-Ring: a ring across the nodes among
// the ranks of equal local rank (each encoding crosses every node link once, the fewest cross-node
// bytes there are), then a ring inside the node passing on the g encodings of each local rank.
// Otherwise one ring in rank order.
//
// qgz (reduce-scatter, SUM; AVG divides at the end): every contribution crosses the codec once per
// hop, own piece included, and is summed after decoding, never re-encoded along a ring.
// - Two hops on a grid of g nodes x M ranks (g, M > 1): rank (i, j) encodes each of its N input
//   blocks, sends to local peer (i, j2) the g blocks destined for ranks (*, j2) (the swizzle:
//   one contiguous run per peer), and sums what it receives, in local order, in fp32: the node's
//   partial sums of blocks (i', j) for every node i'. It re-encodes each partial from fp32 and
//   sends it to (i', j), the rank of equal local rank on node i'; the sums of what it receives,
//   in node order, are its output. Cross-node bytes: one encoding per block instead of M.
//   Large blocks run as a pipeline of pieces over the channels (TwoHops), so the codec work of
//   one piece overlaps the inter-node transfer of the one before.
// - One hop otherwise (one node, one rank per node, or nodes of unequal size): an all-to-all of
//   encoded blocks and a sum in rank order.
// Sums: hop 1 accumulates in fp32; the last hop adds into the output type, each addition done in
// fp32 and rounded once (for fp32 output, plain fp32 sums).
#include <algorithm>
#include <limits>

#include "algorithms/builtin_algorithms.h"
#include "algorithms/codec.h"
#include "algorithms/hierarchical.h"
#include "algorithms/lowering.h"
#include "algorithms/schedule_builder.h"

namespace braid {
namespace {

bool QuantizedRequest(const CollArgs& a, CollKind kind) {
  return a.kind == kind && a.codec.id != CodecId::kNone && a.codec.id != CodecId::kTest &&
         CodecSupports(a.codec, a.dtype) && a.nranks >= 1 && !a.premul;
}

// qgZ's pipeline (TwoHops): at most this many pieces per block, each of at least this many
// elements (below that, a piece's messages and steps cost more than the overlap saves).
constexpr uint64_t kMaxPieces = 8;
constexpr uint64_t kMinPieceElems = 16384;

uint64_t Chunk(const CollArgs& a) {
  return std::max<uint64_t>(a.chunk_bytes, 1);
}

class QuantizedAllGather final : public Algorithm {
 public:
  const char* name() const override { return "qwz"; }
  bool supports(const CollArgs& a) const override {
    return QuantizedRequest(a, CollKind::kAllGather);
  }

  Result<RankSchedule> build(const CollArgs& a, int rank) const override {
    BRAID_RETURN_IF_ERROR(CheckBuildArgs(*this, a, rank));
    const int n = a.nranks;
    const uint64_t count = a.count;
    RankSchedule s;
    s.channels.resize(1);
    if (count == 0) return s;
    const uint64_t enc = EncodedBytes(a.codec, a.dtype, count);
    const uint16_t frames = AddBuffer(s, DataType::kUint8, enc * static_cast<uint64_t>(n));
    auto frame = [&](int q) { return Slice{frames, static_cast<uint64_t>(q) * enc, enc}; };
    // In place, the rank's input is its own block of the output.
    const Slice input =
        a.in_place ? Slice{kRecvBuf, rank * count, count} : Slice{kSendBuf, 0, count};
    Channel& ch = s.channels[0];
    Step encode;
    encode.ops.push_back({StepOpKind::kQuantize, -1, input, frame(rank), a.codec});
    ch.steps.push_back(std::move(encode));
    // One ring step: send the frames of ranks `out` to `next`, receive those of `in` from `prev`
    // (equal lists of whole frames on both sides, so the k-th send meets the k-th receive).
    auto ring_step = [&](int next, int prev, const std::vector<int>& out,
                         const std::vector<int>& in) {
      Step st;
      for (int q : out)
        AppendSends(st, next, frames, static_cast<uint64_t>(q) * enc, enc, Chunk(a));
      for (int q : in) AppendRecvs(st, prev, frames, static_cast<uint64_t>(q) * enc, enc, Chunk(a));
      ch.steps.push_back(std::move(st));
    };
    auto grid = GroupGridFor(a);
    if (grid && grid->g > 1 && grid->m > 1) {
      const GroupGrid& G = *grid;
      const int i = G.group_of[rank], j = G.pos_of[rank];
      // Across nodes, among the ranks of local rank j: the encodings of (*, j).
      for (int t = 0; t + 1 < G.g; ++t)
        ring_step(G.at(i + 1, j), G.at(i - 1, j), {G.at(i - t, j)}, {G.at(i - t - 1, j)});
      // Inside the node: the g encodings of local rank j - t, then of j - t - 1, ...
      auto column = [&](int jj) {
        std::vector<int> v;
        for (int ii = 0; ii < G.g; ++ii) v.push_back(G.at(ii, jj));
        return v;
      };
      for (int t = 0; t + 1 < G.m; ++t)
        ring_step(G.at(i, j + 1), G.at(i, j - 1), column(j - t), column(j - t - 1));
    } else {
      for (int t = 0; t + 1 < n; ++t)
        ring_step((rank + 1) % n, (rank + n - 1) % n, {Mod(rank - t, n)}, {Mod(rank - t - 1, n)});
    }
    Step decode;
    for (int q = 0; q < n; ++q)
      decode.ops.push_back({StepOpKind::kDequantize, -1, frame(q),
                            Slice{kRecvBuf, static_cast<uint64_t>(q) * count, count}, a.codec});
    ch.steps.push_back(std::move(decode));
    return s;
  }

  double estimate_seconds(const CollArgs&, const LinkModel&) const override {
    return std::numeric_limits<double>::infinity();  // never ranked: asked for by name
  }
};

class QuantizedReduceScatter final : public Algorithm {
 public:
  const char* name() const override { return "qgz"; }
  bool supports(const CollArgs& a) const override {
    return QuantizedRequest(a, CollKind::kReduceScatter) && a.op == ReduceOp::kSum;
  }

  Result<RankSchedule> build(const CollArgs& a, int rank) const override {
    BRAID_RETURN_IF_ERROR(CheckBuildArgs(*this, a, rank));
    RankSchedule s;
    s.channels.resize(1);
    if (a.count == 0) return s;
    auto grid = GroupGridFor(a);
    if (grid && grid->g > 1 && grid->m > 1) return TwoHops(a, rank, *grid, s);
    return OneHop(a, rank, s);
  }

  double estimate_seconds(const CollArgs&, const LinkModel&) const override {
    return std::numeric_limits<double>::infinity();
  }

 private:
  // This rank's input block for global rank q. In place (braid.h: recvbuff == sendbuff + rank *
  // recvcount) the own block is read through kRecvBuf, the alias that exists.
  static Slice InputBlock(const CollArgs& a, int rank, int q) {
    if (a.in_place && q == rank) return Slice{kRecvBuf, 0, a.count};
    return Slice{kSendBuf, static_cast<uint64_t>(q) * a.count, a.count};
  }
  static Slice Output(const CollArgs& a) { return Slice{kRecvBuf, 0, a.count}; }

  // All-to-all of encoded blocks; decode-and-sum in rank order into the output.
  static Result<RankSchedule> OneHop(const CollArgs& a, int rank, RankSchedule& s) {
    const int n = a.nranks;
    const uint64_t enc = EncodedBytes(a.codec, a.dtype, a.count);
    const uint16_t out_frames = AddBuffer(s, DataType::kUint8, enc * n);
    const uint16_t in_frames = AddBuffer(s, DataType::kUint8, enc * n);
    Channel& ch = s.channels[0];
    Step encode;
    for (int q = 0; q < n; ++q)
      encode.ops.push_back({StepOpKind::kQuantize, -1, InputBlock(a, rank, q),
                            Slice{out_frames, static_cast<uint64_t>(q) * enc, enc}, a.codec});
    ch.steps.push_back(std::move(encode));
    Step exchange;
    for (int k = 1; k < n; ++k) {  // peer order rank+1, rank+2, ...: sends and receives pair up
      const int to = (rank + k) % n, from = Mod(rank - k, n);
      AppendSends(exchange, to, out_frames, static_cast<uint64_t>(to) * enc, enc, Chunk(a));
      AppendRecvs(exchange, from, in_frames, static_cast<uint64_t>(from) * enc, enc, Chunk(a));
    }
    if (!exchange.ops.empty()) ch.steps.push_back(std::move(exchange));
    const Slice out = Output(a);
    Step fold;
    for (int q = 0; q < n; ++q) {
      const Slice src = q == rank ? Slice{out_frames, static_cast<uint64_t>(q) * enc, enc}
                                  : Slice{in_frames, static_cast<uint64_t>(q) * enc, enc};
      Step st;
      st.ops.push_back({q == 0 ? StepOpKind::kDequantize : StepOpKind::kDequantizeReduce, -1, src,
                        out, a.codec});
      ch.steps.push_back(std::move(st));
    }
    return std::move(s);
  }

  // Two hops, pipelined: every block is cut into pieces at block-of-G boundaries (so each piece
  // encodes whole codec blocks and the decoded values are those of encoding the block at once),
  // and piece p runs the whole two-hop sequence on channel p mod C (C = the channels the engine
  // offers, at most the pieces). Piece p's first encode waits for piece p-1's re-encode (an edge
  // across channels), so the codec work of piece p runs while piece p-1's encodings cross the
  // node links: on slow links the time is about the link's plus one piece's work, instead of the
  // sum of both. A channel's next piece also waits for its previous piece to finish, which
  // bounds the scratch in flight to C pieces' worth of sends.
  static Result<RankSchedule> TwoHops(const CollArgs& a, int rank, const GroupGrid& gr,
                                      RankSchedule& s) {
    const uint64_t g_elems = std::max<uint64_t>(a.codec.block, 1);
    const uint64_t blocks = (a.count + g_elems - 1) / g_elems;
    const uint64_t nch = static_cast<uint64_t>(std::max(a.nchannels, 1));
    const uint64_t want = nch < 2 ? 1
                                  : std::clamp<uint64_t>(a.count / kMinPieceElems, 1,
                                                         std::min<uint64_t>(kMaxPieces, blocks));
    const uint64_t piece_blocks = (blocks + want - 1) / want;
    const uint64_t pieces = (blocks + piece_blocks - 1) / piece_blocks;
    s.channels.resize(std::min(pieces, nch));
    StepRef prev_encode2;
    for (uint64_t p = 0; p < pieces; ++p) {
      const uint64_t lo = p * piece_blocks * g_elems;
      const uint64_t len = std::min(a.count, lo + piece_blocks * g_elems) - lo;
      const uint16_t c = static_cast<uint16_t>(p % s.channels.size());
      std::vector<StepRef> after;
      if (p > 0) after.push_back(prev_encode2);
      prev_encode2 = {c, TwoHopsPiece(a, rank, gr, lo, len, std::move(after), s, c)};
    }
    return std::move(s);
  }

  // Piece [lo, lo + len) of every block on channel `ch`; its first step waits for `after`.
  // Returns the index of its re-encode step (the next piece's edge).
  static uint32_t TwoHopsPiece(const CollArgs& a, int rank, const GroupGrid& gr, uint64_t lo,
                               uint64_t len, std::vector<StepRef> after, RankSchedule& s,
                               uint16_t channel) {
    const int g = gr.g, m = gr.m, i = gr.group_of[rank], j = gr.pos_of[rank];
    const uint64_t count = len;
    const uint64_t enc = EncodedBytes(a.codec, a.dtype, count);
    const uint64_t enc32 = EncodedBytes(a.codec, DataType::kFloat32, count);
    // Hop 1 staging: [local peer j2][node i'] encodings of input block (i', j2); received:
    // [local peer j1][node i'] encodings of blocks (i', j).
    const uint16_t stage = AddBuffer(s, DataType::kUint8, enc * g * m);
    const uint16_t got1 = AddBuffer(s, DataType::kUint8, enc * g * m);
    // The node's partial sums of blocks (i', j), fp32, and their encodings: [node i'].
    const uint16_t partial = AddBuffer(s, DataType::kFloat32, count * g);
    const uint16_t stage2 = AddBuffer(s, DataType::kUint8, enc32 * g);
    const uint16_t got2 = AddBuffer(s, DataType::kUint8, enc32 * g);
    auto at = [](uint16_t buf, uint64_t unit, uint64_t idx, uint64_t n) {
      return Slice{buf, idx * unit, n};
    };
    auto piece = [&](Slice whole) { return Slice{whole.buffer, whole.offset + lo, count}; };
    Channel& ch = s.channels[channel];  // after AddBuffer, which does not touch channels

    Step encode;
    encode.deps = std::move(after);
    for (int j2 = 0; j2 < m; ++j2)
      for (int ii = 0; ii < g; ++ii)
        encode.ops.push_back({StepOpKind::kQuantize, -1, piece(InputBlock(a, rank, gr.at(ii, j2))),
                              at(stage, enc, static_cast<uint64_t>(j2) * g + ii, enc), a.codec});
    ch.steps.push_back(std::move(encode));

    // Hop 1: intra-node all-to-all of g encodings per peer (one contiguous run each way).
    Step hop1;
    for (int k = 1; k < m; ++k) {
      const int to = (j + k) % m, from = Mod(j - k, m);
      AppendSends(hop1, gr.at(i, to), stage, static_cast<uint64_t>(to) * g * enc, g * enc,
                  Chunk(a));
      AppendRecvs(hop1, gr.at(i, from), got1, static_cast<uint64_t>(from) * g * enc, g * enc,
                  Chunk(a));
    }
    ch.steps.push_back(std::move(hop1));
    // partial[i'] = sum over local j1 (in order) of decode(block (i', j) from j1), in fp32.
    for (int j1 = 0; j1 < m; ++j1) {
      Step st;
      const uint16_t src = j1 == j ? stage : got1;
      for (int ii = 0; ii < g; ++ii)
        st.ops.push_back({j1 == 0 ? StepOpKind::kDequantize : StepOpKind::kDequantizeReduce, -1,
                          at(src, enc, static_cast<uint64_t>(j1) * g + ii, enc),
                          at(partial, count, static_cast<uint64_t>(ii), count), a.codec});
      ch.steps.push_back(std::move(st));
    }
    // Hop 2: re-encode each partial from fp32, send it to (i', j), sum what arrives in node order.
    Step encode2;
    for (int ii = 0; ii < g; ++ii)
      encode2.ops.push_back({StepOpKind::kQuantize, -1,
                             at(partial, count, static_cast<uint64_t>(ii), count),
                             at(stage2, enc32, static_cast<uint64_t>(ii), enc32), a.codec});
    ch.steps.push_back(std::move(encode2));
    const uint32_t encode2_index = static_cast<uint32_t>(ch.steps.size() - 1);
    Step hop2;
    for (int k = 1; k < g; ++k) {
      const int to = (i + k) % g, from = Mod(i - k, g);
      AppendSends(hop2, gr.at(to, j), stage2, static_cast<uint64_t>(to) * enc32, enc32, Chunk(a));
      AppendRecvs(hop2, gr.at(from, j), got2, static_cast<uint64_t>(from) * enc32, enc32, Chunk(a));
    }
    ch.steps.push_back(std::move(hop2));
    const Slice out = piece(Output(a));
    for (int ii = 0; ii < g; ++ii) {
      Step st;
      st.ops.push_back({ii == 0 ? StepOpKind::kDequantize : StepOpKind::kDequantizeReduce, -1,
                        at(ii == i ? stage2 : got2, enc32, static_cast<uint64_t>(ii), enc32), out,
                        a.codec});
      ch.steps.push_back(std::move(st));
    }
    return encode2_index;
  }
};

}  // namespace

const Algorithm& QuantizedAllGatherAlgorithm() {
  static const QuantizedAllGather qwz;
  return qwz;
}

const Algorithm& QuantizedReduceScatterAlgorithm() {
  static const QuantizedReduceScatter qgz;
  return qgz;
}

}  // namespace braid
