// Ring algorithms (spec/algorithms.md section 1): reduce-scatter and all-gather in N-1 steps of
// one block each, all-reduce as the two back to back, broadcast and reduce as a chain pipelined
// slice by slice. Data flows from rank r to rank r+1.
//
// Channels take disjoint element ranges (of the whole buffer, or of every block for the
// per-rank-block collectives) and run concurrently. Within a step a block travels as slices of at
// most chunk_bytes, so the receiver reduces slice k while slice k+1 is on the wire. A channel
// whose blocks span more than a few chunks runs its steps in pieces (RingPieces): all the steps
// for the first few chunks of every block, then the next, so what a step sends is still in cache.
#include <algorithm>
#include <utility>

#include "algorithms/builtin_algorithms.h"
#include "algorithms/cost_model.h"
#include "algorithms/schedule_builder.h"

namespace braid {
namespace {

// Block b of the ring inside channel range `rc` (all-reduce splits each channel's range into N).
ElemRange RingBlock(const ElemRange& rc, int nranks, int b) {
  ElemRange x = EvenPart(rc.len, static_cast<uint64_t>(nranks), static_cast<uint64_t>(b));
  x.off += rc.off;
  return x;
}

// A ring step's block is cut into pieces of this many chunks (see RingPieces).
constexpr uint64_t kPieceChunks = 2;

// How many pieces a channel's range of `elems` runs in, one after another, where a ring step
// moves `block_bytes` of it. A ring step sends what the step before it wrote (a partial sum, the
// block just received, or at the turn from reduce-scatter to all-gather the reduced block); with
// blocks of tens of MiB that is back in DRAM by then, and the send reads it from there (for TCP,
// the kernel's copy into the socket; for shm, the copy into the ring). In pieces whose blocks
// are kPieceChunks chunks, each piece's steps run back to back and every send reads a block that
// is still in cache. Measured 2026-11-27 (docs/performance.md "The ring in pieces"): 0.50-0.89 of
// the unpieced time from 64 MiB on 2 and 4 ranks, shm and TCP (2-rank all-reduce: 0.50-0.83),
// 0.70-1.01 at 16 MiB; one and two chunks per piece measured alike, four slower.
uint64_t RingPieces(const CollArgs& a, uint64_t block_bytes, uint64_t elems) {
  const uint64_t piece_bytes = kPieceChunks * std::max<uint64_t>(a.chunk_bytes, 1);
  return std::clamp<uint64_t>(block_bytes / piece_bytes, 1, std::max<uint64_t>(elems, 1));
}

// The pieces of an all-reduce's channel range, whose ring steps move one N-th of it.
uint64_t AllReduceRingPieces(const CollArgs& a, uint64_t range_elems) {
  return RingPieces(a, range_elems / static_cast<uint64_t>(a.nranks) * DataTypeSize(a.dtype),
                    range_elems);
}

// The pieces of a per-rank-block collective's channel range (reduce-scatter, all-gather), whose
// steps move the whole range: from three ranks on (two make one step, which sends nothing that an
// earlier step wrote).
uint64_t BlockRingPieces(const CollArgs& a, const ElemRange& range) {
  return a.nranks > 2 ? RingPieces(a, range.len * DataTypeSize(a.dtype), range.len) : 1;
}

// The time of one ring step's `bytes` over `nch` channels, each channel's part sent in `pieces`
// steps (each with its own messages).
double PiecedTransferSeconds(uint64_t bytes, uint64_t pieces, uint64_t chunk_bytes,
                             const LinkParams& link, int nch) {
  return static_cast<double>(pieces) * TransferSeconds(bytes / pieces, chunk_bytes, link, nch);
}

// Where piece p of `pieces` of `range` lies.
ElemRange PieceOf(const ElemRange& range, uint64_t pieces, uint64_t p) {
  ElemRange x = EvenPart(range.len, pieces, p);
  x.off += range.off;
  return x;
}

RankSchedule AllReduce(const CollArgs& a, int r, int only = -1) {
  const int n = a.nranks;
  if (a.count == 0 || n == 1) return LocalCopySchedule(a.count, a.in_place);
  const uint16_t in = a.in_place ? kRecvBuf : kSendBuf;
  const uint64_t chunk = ChunkElems(a);
  const int nch = ChannelsFor(a, a.count, a.count * DataTypeSize(a.dtype));
  const int next = Mod(r + 1, n), prev = Mod(r - 1, n);
  RankSchedule s;
  s.channels.resize(nch);
  for (int c = 0; c < nch; ++c) {
    if (only >= 0 && c != only) continue;
    const ElemRange channel_range = EvenPart(a.count, nch, c);
    const uint64_t pieces = AllReduceRingPieces(a, channel_range.len);
    Channel& ch = s.channels[c];
    for (uint64_t p = 0; p < pieces; ++p) {
      const ElemRange rc = PieceOf(channel_range, pieces, p);
      // Reduce-scatter: at step k send block r-k (own input at k = 0, else the partial sum
      // received at step k-1) and fold block r-k-1 into recvbuf. Rank r ends owning block r+1.
      for (int k = 0; k < n - 1; ++k) {
        const ElemRange sb = RingBlock(rc, n, Mod(r - k, n));
        const ElemRange rb = RingBlock(rc, n, Mod(r - k - 1, n));
        Step st;
        AppendSends(st, next, k == 0 ? in : uint16_t{kRecvBuf}, sb.off, sb.len, chunk);
        AppendRecvReduces(st, prev, in, rb.off, kRecvBuf, rb.off, rb.len, chunk);
        AddStep(ch, std::move(st));
      }
      // All-gather of the reduced blocks: at step k forward block r+1-k, receive block r-k.
      for (int k = 0; k < n - 1; ++k) {
        const ElemRange sb = RingBlock(rc, n, Mod(r + 1 - k, n));
        const ElemRange rb = RingBlock(rc, n, Mod(r - k, n));
        Step st;
        AppendSends(st, next, kRecvBuf, sb.off, sb.len, chunk);
        AppendRecvs(st, prev, kRecvBuf, rb.off, rb.len, chunk);
        AddStep(ch, std::move(st));
      }
    }
  }
  return s;
}

RankSchedule ReduceScatter(const CollArgs& a, int r, int only = -1) {
  const int n = a.nranks;
  if (a.count == 0 || n == 1) return LocalCopySchedule(a.count, a.in_place);
  const uint64_t count = a.count;
  const uint64_t chunk = ChunkElems(a);
  const int nch = ChannelsFor(a, count, count * n * DataTypeSize(a.dtype));
  const int next = Mod(r + 1, n), prev = Mod(r - 1, n);
  // Partial sums travel through intermediate buffers. Out of place, recvbuf is free until the
  // end, so it alternates with one scratch block and the last step lands in recvbuf. In place,
  // recvbuf holds this rank's own input block (needed at the last step), so two scratch blocks
  // alternate instead.
  const int intermediates = n - 2;
  const uint64_t scratch_blocks =
      a.in_place ? std::min(intermediates, 2) : (intermediates > 0 ? 1 : 0);
  RankSchedule s;
  s.scratch_count = scratch_blocks * count;
  s.channels.resize(nch);
  // Where step k's reduction lands (buffer, offset of the channel's range).
  auto dest = [&](int k, const ElemRange& rc) -> std::pair<uint16_t, uint64_t> {
    if (k == n - 2) return {kRecvBuf, rc.off};
    const int from_end = n - 2 - k;  // >= 1
    if (!a.in_place)
      return from_end % 2 == 0 ? std::pair<uint16_t, uint64_t>{kRecvBuf, rc.off}
                               : std::pair<uint16_t, uint64_t>{kScratchBuf, rc.off};
    return {kScratchBuf, static_cast<uint64_t>((from_end - 1) % 2) * count + rc.off};
  };
  // Where this rank's own input for block b lives (in place, block r is recvbuf).
  auto input = [&](int b, const ElemRange& rc) -> std::pair<uint16_t, uint64_t> {
    if (a.in_place && b == r) return {kRecvBuf, rc.off};
    return {kSendBuf, static_cast<uint64_t>(b) * count + rc.off};
  };
  for (int c = 0; c < nch; ++c) {
    if (only >= 0 && c != only) continue;
    const ElemRange channel_range = EvenPart(count, nch, c);
    const uint64_t pieces = BlockRingPieces(a, channel_range);
    Channel& ch = s.channels[c];
    for (uint64_t p = 0; p < pieces; ++p) {
      const ElemRange rc = PieceOf(channel_range, pieces, p);
      // Step k sends block r-k-1 and folds block r-k-2, so the last step (k = N-2) completes
      // block r on this rank.
      for (int k = 0; k < n - 1; ++k) {
        Step st;
        const auto src = k == 0 ? input(Mod(r - 1, n), rc) : dest(k - 1, rc);
        AppendSends(st, next, src.first, src.second, rc.len, chunk);
        const auto local = input(Mod(r - k - 2, n), rc);
        const auto dst = dest(k, rc);
        AppendRecvReduces(st, prev, local.first, local.second, dst.first, dst.second, rc.len,
                          chunk);
        AddStep(ch, std::move(st));
      }
    }
  }
  return s;
}

RankSchedule AllGather(const CollArgs& a, int r, int only = -1) {
  const int n = a.nranks;
  if (a.count == 0) return RankSchedule{};
  if (n == 1) return LocalCopySchedule(a.count, a.in_place);
  const uint64_t count = a.count;
  const uint64_t chunk = ChunkElems(a);
  const int nch = ChannelsFor(a, count, count * n * DataTypeSize(a.dtype));
  const int next = Mod(r + 1, n), prev = Mod(r - 1, n);
  RankSchedule s;
  s.channels.resize(nch);
  for (int c = 0; c < nch; ++c) {
    if (only >= 0 && c != only) continue;
    const ElemRange channel_range = EvenPart(count, nch, c);
    const uint64_t pieces = BlockRingPieces(a, channel_range);
    Channel& ch = s.channels[c];
    for (uint64_t p = 0; p < pieces; ++p) {
      const ElemRange rc = PieceOf(channel_range, pieces, p);
      for (int k = 0; k < n - 1; ++k) {
        const uint64_t sb = static_cast<uint64_t>(Mod(r - k, n)) * count + rc.off;
        const uint64_t rb = static_cast<uint64_t>(Mod(r - k - 1, n)) * count + rc.off;
        Step st;
        if (k == 0 && !a.in_place) {
          // First touch reads the user's buffer directly; the own-block copy overlaps the
          // transfer.
          AppendSends(st, next, kSendBuf, rc.off, rc.len, chunk);
          AppendCopy(st, kSendBuf, rc.off, kRecvBuf, static_cast<uint64_t>(r) * count + rc.off,
                     rc.len);
        } else {
          AppendSends(st, next, kRecvBuf, sb, rc.len, chunk);
        }
        AppendRecvs(st, prev, kRecvBuf, rb, rc.len, chunk);
        AddStep(ch, std::move(st));
      }
    }
  }
  return s;
}

// Chain broadcast from the root along r -> r+1, one slice per step so every link is busy.
RankSchedule Broadcast(const CollArgs& a, int r) {
  const int n = a.nranks;
  const bool is_root = r == a.root;
  if (a.count == 0) return RankSchedule{};
  if (n == 1) return LocalCopySchedule(a.count, a.in_place);
  const uint64_t chunk = ChunkElems(a);
  const int nch = ChannelsFor(a, a.count, a.count * DataTypeSize(a.dtype));
  const int pos = Mod(r - a.root, n);
  const int next = Mod(r + 1, n), prev = Mod(r - 1, n);
  RankSchedule s;
  s.channels.resize(nch);
  for (int c = 0; c < nch; ++c) {
    const ElemRange rc = EvenPart(a.count, nch, c);
    const uint64_t ns = SliceCount(rc.len, chunk);
    Channel& ch = s.channels[c];
    if (is_root) {
      // The root streams every slice at once; the engine sends them in order.
      Step st;
      const uint16_t src = a.in_place ? kRecvBuf : kSendBuf;
      AppendSends(st, next, src, rc.off, rc.len, chunk);
      if (!a.in_place) AppendCopy(st, kSendBuf, rc.off, kRecvBuf, rc.off, rc.len);
      AddStep(ch, std::move(st));
    } else if (pos == n - 1) {
      Step st;
      AppendRecvs(st, prev, kRecvBuf, rc.off, rc.len, chunk);
      AddStep(ch, std::move(st));
    } else {
      // Step t receives slice t and forwards slice t-1.
      for (uint64_t t = 0; t <= ns; ++t) {
        Step st;
        if (t < ns) {
          const ElemRange sl = EvenPart(rc.len, ns, t);
          st.ops.push_back(
              StepOp{StepOpKind::kRecv, prev, {}, MakeSlice(kRecvBuf, rc.off + sl.off, sl.len)});
        }
        if (t > 0) {
          const ElemRange sl = EvenPart(rc.len, ns, t - 1);
          st.ops.push_back(
              StepOp{StepOpKind::kSend, next, MakeSlice(kRecvBuf, rc.off + sl.off, sl.len), {}});
        }
        AddStep(ch, std::move(st));
      }
    }
  }
  return s;
}

// Chain reduce along r -> r+1 ending at the root, one slice per step. Middle ranks may not write
// recvbuf (written on the root only) nor sendbuf, so a partial sum waits in one of two scratch
// slots between its arrival (step t) and its forwarding (step t+1).
RankSchedule Reduce(const CollArgs& a, int r) {
  const int n = a.nranks;
  const bool is_root = r == a.root;
  if (a.count == 0) return RankSchedule{};
  if (n == 1) return LocalCopySchedule(a.count, a.in_place);
  const uint64_t chunk = ChunkElems(a);
  const int nch = ChannelsFor(a, a.count, a.count * DataTypeSize(a.dtype));
  const int pos = Mod(r - a.root - 1, n);  // 0: chain start (root+1); n-1: the root
  const int next = Mod(r + 1, n), prev = Mod(r - 1, n);
  const uint16_t in = a.in_place ? kRecvBuf : kSendBuf;
  RankSchedule s;
  s.channels.resize(nch);
  uint64_t scratch_base = 0;
  for (int c = 0; c < nch; ++c) {
    const ElemRange rc = EvenPart(a.count, nch, c);
    const uint64_t ns = SliceCount(rc.len, chunk);
    Channel& ch = s.channels[c];
    if (pos == 0) {
      Step st;
      AppendSends(st, next, in, rc.off, rc.len, chunk);
      AddStep(ch, std::move(st));
    } else if (is_root) {
      Step st;
      AppendRecvReduces(st, prev, in, rc.off, kRecvBuf, rc.off, rc.len, chunk);
      AddStep(ch, std::move(st));
    } else {
      const uint64_t slot = EvenPart(rc.len, ns, 0).len;  // the first slice is the longest
      const uint64_t nslots = std::min<uint64_t>(ns, 2);
      auto slot_off = [&](uint64_t t) { return scratch_base + (t % nslots) * slot; };
      for (uint64_t t = 0; t <= ns; ++t) {
        Step st;
        if (t < ns) {
          const ElemRange sl = EvenPart(rc.len, ns, t);
          st.ops.push_back(StepOp{StepOpKind::kRecvReduce, prev,
                                  MakeSlice(in, rc.off + sl.off, sl.len),
                                  MakeSlice(kScratchBuf, slot_off(t), sl.len)});
        }
        if (t > 0) {
          const ElemRange sl = EvenPart(rc.len, ns, t - 1);
          st.ops.push_back(
              StepOp{StepOpKind::kSend, next, MakeSlice(kScratchBuf, slot_off(t - 1), sl.len), {}});
        }
        AddStep(ch, std::move(st));
      }
      scratch_base += nslots * slot;
    }
  }
  s.scratch_count = scratch_base;
  return s;
}

class Ring final : public Algorithm {
 public:
  const char* name() const override { return "ring"; }

  bool supports(const CollArgs& a) const override {
    switch (a.kind) {
      case CollKind::kAllReduce:
      case CollKind::kReduceScatter:
      case CollKind::kAllGather:
      case CollKind::kBroadcast:
      case CollKind::kReduce:
        return a.nranks >= 1;
      default:
        return false;
    }
  }

  Result<RankSchedule> build(const CollArgs& a, int rank) const override {
    BRAID_RETURN_IF_ERROR(CheckBuildArgs(*this, a, rank));
    switch (a.kind) {
      case CollKind::kAllReduce:
        return AllReduce(a, rank);
      case CollKind::kReduceScatter:
        return ReduceScatter(a, rank);
      case CollKind::kAllGather:
        return AllGather(a, rank);
      case CollKind::kBroadcast:
        return Broadcast(a, rank);
      case CollKind::kReduce:
        return Reduce(a, rank);
      default:
        return InvalidArgument("ring: unsupported collective");
    }
  }

  double estimate_seconds(const CollArgs& a, const LinkModel& m) const override {
    const int n = a.nranks;
    if (n <= 1) return 0;
    const LinkParams l = FlatRingLink(a, m);
    const uint64_t esize = DataTypeSize(a.dtype);
    switch (a.kind) {
      case CollKind::kAllReduce: {
        // Channels as AllReduce() takes them; each ring step moves one block split over them.
        // A channel in pieces sends each piece's part of a block as a step of its own.
        const int nch = ChannelsFor(a, a.count, a.count * esize);
        const uint64_t block = (a.count + n - 1) / n * esize;
        const uint64_t pieces = AllReduceRingPieces(a, a.count / static_cast<uint64_t>(nch));
        return 2.0 * (n - 1) * PiecedTransferSeconds(block, pieces, a.chunk_bytes, l, nch);
      }
      case CollKind::kReduceScatter:
      case CollKind::kAllGather: {
        const int nch = ChannelsFor(a, a.count, a.count * static_cast<uint64_t>(n) * esize);
        const uint64_t pieces =
            BlockRingPieces(a, ElemRange{0, a.count / static_cast<uint64_t>(nch)});
        return (n - 1) * PiecedTransferSeconds(a.count * esize, pieces, a.chunk_bytes, l, nch);
      }
      case CollKind::kBroadcast:
      case CollKind::kReduce: {
        // ns slices through a pipeline of N-1 links: ns + N - 2 slice times.
        const uint64_t bytes = a.count * esize;
        const uint64_t chunk = std::max<uint64_t>(a.chunk_bytes, 1);
        const uint64_t ns = std::max<uint64_t>((bytes + chunk - 1) / chunk, 1);
        const double slice = static_cast<double>(bytes) / static_cast<double>(ns);
        return static_cast<double>(ns + n - 2) * (l.alpha_s + slice / l.beta_bytes_s);
      }
      default:
        return 0;
    }
  }
};

}  // namespace

const Algorithm& RingAlgorithm() {
  static const Ring ring;
  return ring;
}

Result<RankSchedule> BuildRingChannel(const CollArgs& a, int rank, int channel) {
  BRAID_RETURN_IF_ERROR(CheckBuildArgs(RingAlgorithm(), a, rank));
  switch (a.kind) {
    case CollKind::kAllReduce:
      return AllReduce(a, rank, channel);
    case CollKind::kReduceScatter:
      return ReduceScatter(a, rank, channel);
    case CollKind::kAllGather:
      return AllGather(a, rank, channel);
    default:
      return InvalidArgument(
          "ring: one channel is built for all-reduce, reduce-scatter and "
          "all-gather only");
  }
}

}  // namespace braid
