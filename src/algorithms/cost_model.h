// The closed-form alpha-beta cost model the tuner ranks algorithms with (spec/algorithms.md
// section 4). A message of b bytes over a link costs alpha + b / beta; a transfer cut at
// chunk_bytes costs one alpha per message. The simulator (simulator.h) runs the same model as an
// event simulation and the tests check that the two agree.
#pragma once

#include <cstdint>

#include "algorithms/algorithm.h"
#include "algorithms/schedule.h"
#include "algorithms/tuner.h"

namespace braid {

// The class of the link between ranks a and b: the innermost level of `layout` the two share
// (no layout or one node: intra-node; a rank outside the layout: the outermost class).
LinkClass LinkClassBetween(const GroupLayout* layout, int a, int b);

// The parameters of that link on `model`.
const LinkParams& LinkBetween(const CollArgs& args, const LinkModel& model, int a, int b);

// A node's NIC shared by k transfers at once (simulator.h: a node's ranks share its inter-node
// ports, so k transfers take k times one): alpha and 1/beta times k. k <= 1 gives `link`.
LinkParams SharedLink(const LinkParams& link, int k);
// k inter-node transfers of one node at once, spread over its model.nics_per_node NICs (the
// ranks' local ranks differ, so they take different NICs round robin): each NIC carries
// ceil(k / nics) of them at model.nic()'s rate. With one NIC, SharedLink(model.inter, k).
LinkParams NodeLink(const LinkModel& model, int k);

// The most ranks any node of args.layout holds: how many of a node's ranks can cross to other
// nodes at once (1 without a layout that spans nodes).
int RanksPerNic(const CollArgs& args);

// The most edges r -> r+1 (mod N) of the flat ring that leave one node, or enter one: how many
// ring transfers share a node's NIC in one step (1 for contiguous nodes, M when the nodes
// interleave). 0 when the ring never leaves a node.
int RingNicLoad(const CollArgs& args);

// The link of one step in which every rank r sends to partner(r) (mod N): intra-node when no
// rank's partner is on another node, else the inter-node link shared by the most such transfers
// that leave or enter one node. For the per-step closed forms of recursive doubling, Bruck,
// dissemination and the binomial tree, whose early steps stay inside contiguous nodes.
LinkParams PartnerLink(const CollArgs& args, const LinkModel& model,
                       int64_t (*partner)(int64_t r, int64_t d, int64_t n), int64_t d);
// r ^ d (-1: none, beyond N), and r + d mod N.
inline int64_t XorPartner(int64_t r, int64_t d, int64_t n) {
  return (r ^ d) < n ? r ^ d : -1;
}
inline int64_t ShiftPartner(int64_t r, int64_t d, int64_t n) {
  return ((r + d) % n + n) % n;
}
// A binomial tree's level d (root 0): the d ranks that hold the data send to r + d.
inline int64_t TreePartner(int64_t r, int64_t d, int64_t n) {
  return r < d && r + d < n ? r + d : -1;
}

// One-sided schedules (IR v3): whether `s` has windows or one-sided ops, and what one of its
// data ops costs (a copy, scale, reduce, get, put or combine: its bytes at model.board's rate,
// or model.cross_memory's for a read of a peer's exposed buffer, a syscall each). Signals and
// waits cost model.board.alpha between the signal and the wait that sees it. Their local ops are
// priced (they are the call: a one-shot all-reduce is copies), a two-sided schedule's are free.
bool IsOneSidedSchedule(const RankSchedule& s);
double OneSidedOpSeconds(const RankSchedule& s, const StepOp& op, const LinkModel& model);
// Seconds of a staging copy (device_staging.h: a kCopy between memory types) on
// model.staging; 0 for any other op.
double StagingCopySeconds(const RankSchedule& s, const StepOp& op, const LinkModel& model);

// Whether args.layout puts every rank on one node (or there is no layout).
inline bool OnOneNode(const CollArgs& args) {
  return !args.layout || args.layout->nnodes <= 1;
}

// The link a flat algorithm's critical path runs on: a flat algorithm's steps are as slow as
// their slowest link, which is the inter-node one as soon as the group spans nodes, shared by
// RanksPerNic(args) transfers (the worst step of a tree, recursive doubling or pairwise exchange
// has every rank of a node talking across nodes at once).
LinkParams FlatLink(const CollArgs& args, const LinkModel& model);
// The same for the flat ring: the inter-node link shared by RingNicLoad(args) transfers.
LinkParams FlatRingLink(const CollArgs& args, const LinkModel& model);

// Seconds to move `bytes` as consecutive messages of at most chunk_bytes over `link` (at least
// one message, so zero bytes still cost one alpha).
double TransferSeconds(uint64_t bytes, uint64_t chunk_bytes, const LinkParams& link);
// The same `bytes` split evenly over `nch` channels (the builders' EvenPart over ChannelsFor's
// count), each channel's share cut into messages of at most chunk_bytes. The channels' messages
// take the same port one after another (simulator.h), so each pays its own alpha: a 64 KiB step
// on two channels is two 32 KiB messages, not one.
double TransferSeconds(uint64_t bytes, uint64_t chunk_bytes, const LinkParams& link, int nch);

// ceil(log2(n)) for n >= 1.
int CeilLog2(int n);
// floor(log2(n)) for n >= 1.
int FloorLog2(int n);
// Whether n (>= 1) is a power of two: where butterflies (rank XOR 2^k) pair every rank.
inline bool IsPowerOfTwo(int n) {
  return n >= 1 && (n & (n - 1)) == 0;
}

// The default estimate for algorithms without a closed form: rank 0's schedule walked step by
// step, each step costing its busiest port (one send and one receive port per link class, as in
// the simulator). Rank 0's inter-node transfers are charged as shared with RanksPerNic(args)
// ranks of its node doing alike (the schedules are symmetric), as the simulator's shared NIC
// would serialise them.
double EstimateFromRankSchedule(const Algorithm& algo, const CollArgs& args,
                                const LinkModel& model);

}  // namespace braid
