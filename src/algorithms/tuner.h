// The tuner: which algorithm serves which request.
//
// Decisions form a table keyed by (collective, size range) (memory type and group shape join
// the key as those features land). Defaults come from the cost model (simulator.h); users,
// tests and perf binaries override them with one grammar (spec/algorithms.md section 4):
//
//   spec   := entry (';' entry)*
//   entry  := coll ':' choice (',' choice)*
//   choice := algo ('@' size '-' size)?         size := number[K|M|G] | 'inf'  (1024-based)
//   coll   := allreduce | reducescatter | allgather | broadcast | reduce | alltoall | barrier | all
//
// e.g. "allreduce:ring@0-64K,rd@64K-inf;allgather:ring". An entry without a range covers every
// size. A forced algorithm that cannot serve a request falls back to the default choice for it
// (with a debug line), never to an error.
//
// The model ranks AllAlgorithms() and, for a layout that spans several nodes, the hierarchical
// algorithms too (HierarchicalAlgorithms(), builtin_algorithms.h; each refuses uneven groups).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/schedule.h"
#include "core/base/status.h"

namespace braid {

// Alpha-beta parameters of one link class.
struct LinkParams {
  double alpha_s = 5e-6;      // per-message latency, seconds
  double beta_bytes_s = 5e9;  // bandwidth, bytes per second
  bool operator==(const LinkParams&) const = default;
};

// Link classes. A transfer between two ranks runs on the innermost level the two share
// (LinkClassBetween in cost_model.h): a device group inside a node (the two GCDs of an MI250X,
// only where the layout names device groups), the node, or the inter-node link. The simulator
// gives every rank one send and one receive port per class inside its node, and every node one
// pair of ports per NIC for inter-node transfers, shared by its ranks (simulator.h). The first
// kNumCalibratedClasses are what link calibration and link profiles measure and store
// (link_calibration.h); the device-group link comes from the topology (LinkModel::group).
enum class LinkClass : uint8_t { kIntraNode = 0, kInterNode = 1, kDeviceGroup = 2 };
inline constexpr int kNumLinkClasses = 3;
inline constexpr int kNumCalibratedClasses = 2;

// The cost model's view of a machine: alpha-beta parameters per link class.
struct LinkModel {
  LinkParams intra{2e-6, 8e9};     // LinkClass::kIntraNode
  LinkParams inter{25e-6, 1.2e9};  // LinkClass::kInterNode: one node's link (its NIC), per node
  // The NICs that make up a node's link (a DGX-A100 has 8, one per GPU): `inter` is their sum,
  // so one transfer goes at inter.beta / nics_per_node through the NIC of its rank (local rank
  // mod nics_per_node), and transfers through different NICs proceed side by side, each paying
  // its own alpha. 1 (the emulated cluster, a calibrated link) is the whole link as one NIC.
  int nics_per_node = 1;
  // LinkClass::kDeviceGroup: between two ranks of one device group (Frontier: 200 GB/s between
  // the GCDs of one MI250X, against 50 for the node's other GCDs). Unset: the intra-node link
  // (host ranks of one node share one memory, whatever their group).
  std::optional<LinkParams> group = std::nullopt;
  // One-sided steps (IR v3) are priced by the kind of exposed memory they touch, not by a link
  // class: `board` is a host's shared-memory board (alpha: a flag one rank stores and a peer sees,
  // a cache line crossing cores; beta: what one rank copies into or out of mapped memory),
  // `cross_memory` a read of a peer's buffer in place (process_vm_readv: a syscall each, and the
  // kernel's copy). Defaults measured on the 2-core development VM (docs/performance.md "One IR"):
  // the board's alpha is what a post round costs through today's executor (an 8-byte 2-rank
  // all-reduce: 0.76 us a call, of which the copies are nothing), not the cache line alone
  // (about 0.1 us); CUDA IPC and RDMA writes will add theirs.
  LinkParams board{0.5e-6, 10e9};
  LinkParams cross_memory{2e-6, 7.5e9};
  // A staging copy between device memory and pinned host memory (device_staging.h: the NCCL
  // shim's stream agent copies device buffers in and out around a host collective). alpha: the
  // stream's flag round trip with the agent (which polls with naps of up to 200 us); beta: one
  // direction of a PCIe 4 x16 copy engine. Defaults until a GPU session measures them.
  LinkParams staging{10e-6, 20e9};
  // A device kernel over its peers' IPC-mapped buffers (device_kernel_schedule.h: the shim's
  // window and peer-buffer collectives). alpha: one agreement round of the ranks (their host
  // exchange and the streams' flags), paid where a rank waits for its peers' signal; beta: what
  // one rank's kernel reads or writes, through NVLink or the GPU's own memory. Defaults until a
  // GPU session measures them.
  LinkParams device_peer{10e-6, 150e9};
  // Whether the ranks of a node talk over TCP (every rank's first transport is tcp, e.g.
  // BRAID_TRANSPORTS=tcp), not shared memory: a round then costs system calls and wake-ups far
  // beyond its calibrated alpha, so algorithms that only save rounds pay there (Algorithm::
  // rankedOn).
  bool intra_tcp = false;
  // Field by field (the struct has padding, so memcmp does not compare models).
  bool operator==(const LinkModel&) const = default;
  const LinkParams& of(LinkClass c) const {
    switch (c) {
      case LinkClass::kInterNode:
        return inter;
      case LinkClass::kDeviceGroup:
        return group ? *group : intra;
      default:
        return intra;
    }
  }
  // One NIC: what one inter-node transfer that has its NIC to itself gets.
  LinkParams nic() const {
    return {inter.alpha_s, inter.beta_bytes_s / (nics_per_node > 1 ? nics_per_node : 1)};
  }
};

// The board's algorithm (algorithms/board_schedules.h), named in BRAID_ALGO ("oneshot" forces it
// where it applies, any other rule covering a call keeps the call off it:
// core/runtime/board_selection.h).
inline constexpr const char* kOneShotAlgorithm = "oneshot";

struct TunerRule {
  CollKind kind;
  uint64_t min_bytes = 0;           // inclusive
  uint64_t max_bytes = UINT64_MAX;  // exclusive; UINT64_MAX = inf
  std::string algorithm;
};

// Parses the override grammar. Unknown collective or algorithm names, bad sizes, empty ranges
// and syntax errors give an InvalidArgument naming the offending token.
Result<std::vector<TunerRule>> ParseTunerOverride(const std::string& spec);

class Tuner {
 public:
  // `override_spec` may be empty. `layout` may be null (flat).
  static Result<Tuner> Create(const std::string& override_spec, int nranks, const LinkModel& model,
                              const GroupLayout* layout);
  // The algorithm to run `args` with: the override's choice when it supports the request, else
  // the model's best among those that do. Never null for a valid request.
  const Algorithm* choose(const CollArgs& args) const;
  // The link model it was computed with, then the table, one line per rule, for braid-info and
  // debug logs.
  std::string describe() const;
  // The algorithm the first override rule covering (kind, bytes as CollBytes counts them) names,
  // or null when no rule covers it.
  const std::string* overrideFor(CollKind kind, uint64_t bytes) const;
  // The link model the table was computed with (what the simulator should cost requests on).
  const LinkModel& model() const { return model_; }

 private:
  std::vector<TunerRule> overrides_;
  std::vector<TunerRule> defaults_;
  int nranks_ = 1;
  LinkModel model_;
  const GroupLayout* layout_ = nullptr;
};

// Bytes that `args` moves as the tuner and the perf tables count them (the collective's full
// buffer: count * nranks for allgather/reducescatter/alltoall, count otherwise) times the type
// size.
uint64_t CollBytes(const CollArgs& args);

}  // namespace braid
