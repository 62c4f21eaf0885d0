// The simulator: predicts a schedule's time on a modelled network by executing every rank's
// schedule as an event simulation (DESIGN.md 2.1). The tuner's tests, tests/sim and
// braidGroupSimulateEnd use it.
//
// The model:
// - Lanes. Each (rank, channel) posts its steps one after another; the transfers of a step are
//   posted together and the step completes when all of them have. Local ops (copy, reduce) are
//   free.
// - Matching. Channel c from rank a to rank b is one FIFO stream, as in the engine: the k-th send
//   meets the k-th receive. A transfer is ready once both are posted (rendezvous, as the
//   verifier assumes).
// - Link classes. A transfer runs on the class LinkClassBetween(layout, src, dst) (cost_model.h:
//   device group, intra-node or inter-node). A
//   message of b bytes on class c costs model.of(c).alpha_s + b / model.of(c).beta_bytes_s.
// - Ports. Every rank has one send port and one receive port for intra-node transfers, and
//   another pair for transfers inside its device group (the xGMI links of an MI250X's two GCDs
//   are not the links to the node's other GCDs, so the two overlap). Inter-node
//   transfers go through the node's NIC: one send port and one receive port per node (the
//   layout's node_of; a rank the layout does not place is a node of its own), shared by all the
//   node's ranks. With model.nics_per_node = k > 1, the node has k NICs, each with its own pair
//   of ports at inter.beta / k, and a rank uses NIC (local rank mod k). A ready transfer holds its
//   sender's send port and its receiver's receive port of its class for its whole cost, starting
//   once both are free; ready transfers take the ports first come, first served (ties in the order
//   they became ready).
// - What the inter-node parameters mean. model.inter is one node's link: alpha and beta of one
//   transfer that has the NIC to itself, which is what link calibration measures (one pair of
//   ranks on two nodes, link_calibration.h) and what a shaped link of an emulated cluster
//   (docs/emulated-cluster.md: one tbf per node link and direction) gives. M ranks of a node
//   sending across nodes at once take M times as long, as on that cluster; a node with one NIC
//   per GPU (a DGX) is described by nics_per_node = M and `inter` the sum of its NICs.
// So transfers on different classes overlap (an intra-node ring and an inter-node ring run side
// by side, which is what HO-Ring needs), while transfers on one port serialise, whatever channel
// they are on: a rank's channels to peers on its node share one link (the shm copy path), a
// node's ranks share its NIC, and the engine's channels add concurrency, not bandwidth.
// Serialising rather than sharing bandwidth gives the same finish time for the last of a set of
// transfers and keeps every message at alpha + b / beta, as the closed forms in cost_model.h
// assume (they charge k transfers sharing one NIC k times).
//
// Cost: O(messages x log(transfers in flight)) time, memory for the compiled steps of every rank
// plus the posts in flight (schedules are built a few at a time, compiled and dropped). Building
// the schedules is about half of a large simulation: with `threads` > 1 (and at least
// kParallelBuildRanks ranks) helper threads build and compile them while the caller appends them
// in rank order; the event loop itself is sequential.
#pragma once

#include "algorithms/algorithm.h"
#include "algorithms/lowering.h"
#include "algorithms/tuner.h"
#include "core/base/status.h"

namespace braid {

inline constexpr int kParallelBuildRanks = 64;

// Clusters of identical nodes (a layout of G nodes x M ranks, rank = node * M + local rank, every
// node alike) usually run schedules that look the same from every node: the flat ring, H-Ring,
// HO-Ring and the tori map onto themselves when every rank moves by M (a shift of the nodes),
// recursive doubling when the nodes' indices are XORed. The simulation is then the same on every
// node, event for event, and it suffices to run one node's ranks: a transfer between node 0 and
// node j stands for its images between every pair of nodes j apart, holding node 0's send port
// and node 0's receive port (the receiver's image is on node 0 too). A 2048 x 8 ring simulates
// 8 ranks instead of 16,384: O(M x steps) instead of O(N x steps).
//
// The symmetry is checked, not assumed: node 0's schedules are compared with those of sample
// nodes (1, 2, G/4, G/2, 3G/4, G-2, G-1) mapped back onto node 0 (the same steps, edges, byte
// counts, streams and waits); uneven blocks or a ring not in node order fail the check and run
// in full, and so do rooted collectives (broadcast, reduce: the root's node is unlike the others
// and a sample could miss it) and schedules whose steps send to (or receive from) several other
// nodes at once. Where it applies, the prediction is the full simulation's: the events of node j
// happen when node 0's do. One thing can part them: transfers ready at the same instant that
// queue for one NIC. The full simulation serves them in the order the ranks happen to post (node
// 0's first, node G-1's last), which is not the same on every node, so when the symmetric run
// sees two rank pairs tie at a NIC port it discards its answer and simulates every rank (with
// one NIC per rank, as on a DGX, they never do; with several ranks behind one NIC, HO-Ring's
// inter-node rings do). tests/unit/algorithms_simulator_test.cc compares the two on every
// built-in algorithm and collective and finds them equal to the last bit.
struct SimulateOptions {
  int threads = 1;       // see SimulateSeconds
  bool symmetry = true;  // run one node's ranks where the check above passes
  int min_nodes = 8;     // below it the check costs as much as the full simulation
  // Keep a symmetric run's answer even when it met ties at a shared NIC (SimulationResult::ties
  // says so) instead of simulating every rank: for clusters too large for that (perf/sim_at_scale
  // above 4096 ranks). Its prediction is then the model's with every node serving its ties in
  // node 0's order, which the full simulation need not share.
  bool accept_ties = false;
};

struct SimulationResult {
  double seconds = 0;
  int simulated_ranks = 0;    // N, or M when a symmetry was used
  const char* symmetry = "";  // "", "shift" or "xor"
  bool ties = false;          // a symmetric answer kept despite ties (accept_ties)
};

Result<SimulationResult> Simulate(const Algorithm& algo, const CollArgs& args,
                                  const LinkModel& model, const SimulateOptions& options);

// Predicted seconds for `algo` serving `args` on `model`, the classes of the links coming from
// args.layout (no layout: every link intra-node). `threads`: how many threads may build the
// ranks' schedules (the prediction does not depend on it). Inside a communicator's call
// (braidGroupSimulateEnd) one, so that a rank never starts threads of its own; tools that
// simulate clusters (perf/sim_at_scale) pass the machine's cores.
Result<double> SimulateSeconds(const Algorithm& algo, const CollArgs& args, const LinkModel& model,
                               int threads = 1);

// The same for schedules from elsewhere (`source(rank)`, lowered already: the device kernels'
// schedules, device_kernel_schedule.h), every rank simulated.
Result<double> SimulateLoweredSeconds(const CollArgs& args, const LinkModel& model,
                                      const ScheduleSource& source);

}  // namespace braid
