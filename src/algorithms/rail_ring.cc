// The rail-aligned flat ring ("rail_ring", issue 43): the ring of ring.cc, one order of the ranks
// per channel, so that the channels cross between nodes through different NICs.
//
// braid's flat ring runs every channel in rank order, so all of them leave a node from its last
// rank and enter the next node at its first: one NIC of the node's k carries the whole ring's
// inter-node traffic (cost_model.h: a rank uses NIC local rank mod k). NCCL runs one ring per NIC
// instead. Here channel c of C visits the nodes in order and, inside each node of m ranks, the
// local ranks from s_c on, wrapping: it enters a node at local rank s_c and leaves it from local
// rank s_c - 1. With C <= m, s_c = c: the channels enter at locals 0..C-1 and leave from m-1,
// 0..C-2, consecutive ranks, so with k NICs (rank r on NIC r mod k, k dividing m) every NIC
// carries at most ceil(C / k) channels each way and the ring moves min(C, k) times the bytes of
// one NIC between nodes. (Until 2026-11-29 s_c was floor(c m / C), which spreads the channels
// over a node's ranks but, whenever m / C shares a factor with k, uses only k / gcd(m / C, k)
// NICs: with 4 ranks and 2 NICs a node, 2 channels left from locals 3 and 1, both NIC 1.)
// With C > m, s_c = floor(c m / C). (A physical rail-optimised fabric would also want the
// leaving and the entering NIC on the same rail; the model has no fabric, only the nodes' NIC
// ports.)
//
// Built by renaming: channel c of rank r's schedule is channel c of ring.cc's schedule for the
// rank at r's position in order c, with every peer mapped back through the order and, for the
// collectives whose buffers hold one block per rank, every block offset too (all-gather: the
// blocks of recvbuf; reduce-scatter: those of sendbuf; all-reduce's ring blocks are positions
// and stay as they are). Each channel takes its own element range and no step of ring.cc depends
// on another channel, so channels built from different orders run side by side as before.
//
// Ranked by the tuner only where a node has more than one NIC; on one NIC it is the ring.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/builtin_algorithms.h"
#include "algorithms/cost_model.h"
#include "algorithms/schedule_builder.h"

namespace braid {
namespace {

// The ranks of every node, by node index then local rank (ranks the layout does not place form
// one node of their own each, after the others).
std::vector<std::vector<int>> RanksByNode(const CollArgs& a) {
  const GroupLayout& l = *a.layout;
  std::vector<std::vector<int>> nodes(static_cast<size_t>(std::max(l.nnodes, 0)));
  std::vector<std::vector<int>> loose;
  for (int r = 0; r < a.nranks; ++r) {
    const int node = static_cast<size_t>(r) < l.node_of.size() ? l.node_of[r] : -1;
    if (node >= 0 && node < l.nnodes)
      nodes[static_cast<size_t>(node)].push_back(r);
    else
      loose.push_back({r});
  }
  for (auto& ranks : nodes)
    std::stable_sort(ranks.begin(), ranks.end(), [&](int x, int y) {
      return l.local_rank[static_cast<size_t>(x)] < l.local_rank[static_cast<size_t>(y)];
    });
  std::erase_if(nodes, [](const std::vector<int>& v) { return v.empty(); });
  nodes.insert(nodes.end(), loose.begin(), loose.end());
  return nodes;
}

// The local rank at which channel c of `nch` enters a node of m ranks (see the top of the file).
size_t ChannelStart(int c, int nch, size_t m) {
  if (static_cast<size_t>(nch) <= m) return static_cast<size_t>(c);
  return static_cast<size_t>(c) * m / static_cast<size_t>(nch);
}

// Channel c of `nch`'s ring: the ranks in ring order.
std::vector<int> ChannelOrder(const std::vector<std::vector<int>>& nodes, int c, int nch) {
  std::vector<int> order;
  for (const auto& ranks : nodes) {
    const size_t m = ranks.size();
    const size_t start = ChannelStart(c, nch, m);
    for (size_t i = 0; i < m; ++i) order.push_back(ranks[(start + i) % m]);
  }
  return order;
}

// The most of `nch` channels that leave (or enter) a node of m ranks through one of its `nics`
// NICs (rank r on NIC r mod nics).
int MostChannelsOnOneNic(int nch, size_t m, int nics) {
  if (m == 0) return nch;
  std::vector<int> leave(static_cast<size_t>(nics)), enter(static_cast<size_t>(nics));
  int most = 0;
  for (int c = 0; c < nch; ++c) {
    const size_t start = ChannelStart(c, nch, m);
    const size_t last = (start + m - 1) % m;
    most = std::max(most, ++enter[start % static_cast<size_t>(nics)]);
    most = std::max(most, ++leave[last % static_cast<size_t>(nics)]);
  }
  return most;
}

// The channels ring.cc would run for `a` (as its schedules would have them).
int RingChannels(const CollArgs& a) {
  const uint64_t esize = DataTypeSize(a.dtype);
  if (a.kind == CollKind::kAllReduce) return ChannelsFor(a, a.count, a.count * esize);
  return ChannelsFor(a, a.count, a.count * static_cast<uint64_t>(a.nranks) * esize);
}

class RailRing final : public Algorithm {
 public:
  const char* name() const override { return "rail_ring"; }

  bool supports(const CollArgs& a) const override {
    const bool kind = a.kind == CollKind::kAllReduce || a.kind == CollKind::kAllGather ||
                      a.kind == CollKind::kReduceScatter;
    return kind && a.layout != nullptr && a.layout->nnodes > 1 &&
           a.layout->node_of.size() == static_cast<size_t>(a.nranks) &&
           a.layout->local_rank.size() == static_cast<size_t>(a.nranks) &&
           RingAlgorithm().supports(a);
  }

  bool rankedOn(const LinkModel& m) const override { return m.nics_per_node > 1; }

  Result<RankSchedule> build(const CollArgs& a, int rank) const override {
    BRAID_RETURN_IF_ERROR(CheckBuildArgs(*this, a, rank));
    if (a.count == 0) return RingAlgorithm().build(a, rank);  // nothing moves: no order matters
    const auto nodes = RanksByNode(a);
    const int nch = RingChannels(a);
    RankSchedule s;
    for (int c = 0; c < nch; ++c) {
      const std::vector<int> order = ChannelOrder(nodes, c, nch);
      std::vector<int> pos(static_cast<size_t>(a.nranks));
      for (size_t p = 0; p < order.size(); ++p)
        pos[static_cast<size_t>(order[p])] = static_cast<int>(p);
      BRAID_ASSIGN_OR_RETURN(RankSchedule v, BuildRingChannel(a, pos[rank], c));
      if (v.channels.size() != static_cast<size_t>(nch) ||
          (c > 0 && v.scratch_count != s.scratch_count))
        return InternalError("rail_ring: ring.cc built " + std::to_string(v.channels.size()) +
                             " channels for " + std::to_string(nch));
      if (c == 0) {
        s = std::move(v);
        Rename(a, order, s.channels[0]);
        continue;
      }
      s.channels[static_cast<size_t>(c)] = std::move(v.channels[static_cast<size_t>(c)]);
      Rename(a, order, s.channels[static_cast<size_t>(c)]);
    }
    return s;
  }

  double estimate_seconds(const CollArgs& a, const LinkModel& m) const override {
    const int n = a.nranks;
    if (n <= 1) return 0;
    const int nch = RingChannels(a);
    const uint64_t esize = DataTypeSize(a.dtype);
    // One ring step moves `bytes` split over the channels: the channels' intra-node hops share
    // each rank's link (as ring.cc's do), their crossings spread over the node's NICs, as many
    // on one as the largest node's channel starts put there (ceil(C / k) where k divides m).
    const uint64_t bytes =
        a.kind == CollKind::kAllReduce ? (a.count + n - 1) / n * esize : a.count * esize;
    const int nics = std::max(m.nics_per_node, 1);
    std::vector<size_t> per_node(a.layout ? static_cast<size_t>(std::max(a.layout->nnodes, 1)) : 1);
    if (a.layout)
      for (int node : a.layout->node_of)
        if (node >= 0 && node < a.layout->nnodes) ++per_node[static_cast<size_t>(node)];
    const size_t largest = *std::max_element(per_node.begin(), per_node.end());
    const int per_nic =
        largest > 0 ? MostChannelsOnOneNic(nch, largest, nics) : (nch + nics - 1) / nics;
    const uint64_t per_channel = (bytes + nch - 1) / static_cast<uint64_t>(nch);
    // A rank's intra-node port carries the channels it does not leave its node on: channel c
    // leaves from local rank ChannelStart - 1, so with C >= m every rank sends one channel (or
    // more) across instead (8 of 8 on a DGX: 7 intra-node sends a step, not 8). The busiest rank
    // sets the step; uneven nodes are charged every channel.
    int intra_channels = nch;
    const GroupLayout* l = a.layout;
    if (l && l->nnodes > 0 && a.nranks % l->nnodes == 0) {
      const int ranks = a.nranks / l->nnodes;
      std::vector<int> leaves(static_cast<size_t>(ranks), 0);
      for (int c = 0; c < nch; ++c) {
        const size_t start = ChannelStart(c, nch, static_cast<size_t>(ranks));
        ++leaves[(start + static_cast<size_t>(ranks) - 1) % static_cast<size_t>(ranks)];
      }
      intra_channels = nch - *std::min_element(leaves.begin(), leaves.end());
    }
    const double intra = intra_channels == 0  // one rank per node: no intra-node hop
                             ? 0.0
                             : TransferSeconds(per_channel * static_cast<uint64_t>(intra_channels),
                                               a.chunk_bytes, m.intra, intra_channels);
    const double inter = TransferSeconds(per_channel * static_cast<uint64_t>(per_nic),
                                         a.chunk_bytes, m.nic(), per_nic);
    const double step = std::max(intra, inter);
    return (a.kind == CollKind::kAllReduce ? 2.0 : 1.0) * (n - 1) * step;
  }

 private:
  // Channel `ch` of ring.cc's schedule for position pos[rank] of `order`, renamed for `rank`:
  // peers through the order, and block offsets of the per-rank buffers (see the header).
  static void Rename(const CollArgs& a, const std::vector<int>& order, Channel& ch) {
    uint16_t blocked = 0xffff;  // no buffer: all-reduce's blocks are positions
    if (a.kind == CollKind::kAllGather) blocked = kRecvBuf;
    if (a.kind == CollKind::kReduceScatter) blocked = kSendBuf;
    auto rename = [&](Slice& sl) {
      if (sl.buffer != blocked || sl.count == 0 || a.count == 0) return;
      const uint64_t block = sl.offset / a.count;
      sl.offset =
          static_cast<uint64_t>(order[static_cast<size_t>(block)]) * a.count + sl.offset % a.count;
    };
    for (Step& st : ch.steps)
      for (StepOp& op : st.ops) {
        if (IsTransferKind(op.kind) && op.peer >= 0 && op.peer < static_cast<int>(order.size()))
          op.peer = order[static_cast<size_t>(op.peer)];
        rename(op.src);
        rename(op.dst);
      }
  }
};

}  // namespace

const Algorithm& RailRingAlgorithm() {
  static const RailRing ring;
  return ring;
}

}  // namespace braid
