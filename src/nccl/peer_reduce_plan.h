// What each rank's device kernel does in a collective over its peers' buffers (the device path
// of nccl/window_collectives.cc): the call as one rank sees it (Plan), and that rank's
// device::PeerReduce over its peers' buffers (Build). One place, so that the kernels the shim
// queues and the schedules the verifier proves them by
// (tests/unit/algorithms_device_kernel_test.cc, algorithms/device_kernel_schedule.h) come from the
// same arithmetic.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "device/device_runtime.h"
#include "nccl/shim.h"

namespace braid::nccl {

enum class WindowKind : int32_t {
  kAllReduce = 1,
  kAllGather = 2,
  kReduceScatter = 3,
  kBroadcast = 4,
  kReduce = 5,
  kAllToAll = 6,
  kGather = 7,
  kScatter = 8
};
const char* KindName(int32_t k);  // "all-reduce", ...

// The call as this rank sees it.
struct Plan {
  WindowKind kind = WindowKind::kAllReduce;
  ncclDataType_t type = ncclFloat32;
  ncclRedOp_t op = ncclSum;
  int root = 0;
  size_t count = 0;  // as passed: per rank for all-gather, reduce-scatter, all-to-all (per
                     // pair), gather and scatter
  int rank = -1, nranks = -1;
  const void* send = nullptr;  // this rank's, null where it has none
  void* recv = nullptr;
  // An in-place all-to-all: the user's buffer, copied into `send` (device scratch) on the stream
  // before the ranks agree (DeviceWork::prepare); null otherwise.
  const void* copy_from = nullptr;

  size_t elt() const { return TypeSize(type); }
  bool reduces() const {
    return kind == WindowKind::kAllReduce || kind == WindowKind::kReduceScatter ||
           kind == WindowKind::kReduce;
  }
  // Gather and scatter: the one shared buffer is the root's.
  bool rootOnly() const { return kind == WindowKind::kGather || kind == WindowKind::kScatter; }
  // Whether the peers read every rank's input / write every rank's output (the root's alone
  // when rootOnly()).
  bool sharesSend() const { return reduces() || kind == WindowKind::kScatter; }
  bool sharesRecv() const {
    return kind == WindowKind::kAllReduce || kind == WindowKind::kAllGather ||
           kind == WindowKind::kBroadcast || kind == WindowKind::kAllToAll ||
           kind == WindowKind::kGather;
  }
  size_t sendBytes() const {
    const bool blocks = kind == WindowKind::kReduceScatter || kind == WindowKind::kAllToAll ||
                        kind == WindowKind::kScatter;
    return count * elt() * (blocks ? static_cast<size_t>(nranks) : 1);
  }
  size_t recvBytes() const {
    const bool blocks = kind == WindowKind::kAllGather || kind == WindowKind::kAllToAll ||
                        kind == WindowKind::kGather;
    return count * elt() * (blocks ? static_cast<size_t>(nranks) : 1);
  }
  // This rank's buffers: the input, except a broadcast's or a scatter's off the root; the
  // output, except a reduce's or a gather's off the root.
  bool usesSend() const {
    return (kind != WindowKind::kBroadcast && kind != WindowKind::kScatter) || rank == root;
  }
  bool usesRecv() const {
    return (kind != WindowKind::kReduce && kind != WindowKind::kGather) || rank == root;
  }
  // Whether this rank's buffer is one the peers reach.
  bool sendShared() const { return sharesSend() && (!rootOnly() || rank == root); }
  bool recvShared() const { return sharesRecv() && (!rootOnly() || rank == root); }
};

// Rank k's buffer in this process.
using PeerAt = std::function<char*(int k)>;

// This rank's device work for `c`, its peers' buffers at send_of(k) and recv_of(k):
//   all-reduce      segment `rank` (whole 64-byte groups) of every input, reduced in rank order,
//                   into every output;
//   all-gather      push: this rank's block into block `rank` of every output;
//   reduce-scatter  pull: block `rank` of every input, reduced in rank order, into this output;
//   broadcast       the root pushes its input into every output (the others move nothing);
//   reduce          the root pulls every input, reduced in rank order, into its output;
//   all-to-all      pairwise: block j of this rank's input into block `rank` of output j;
//   gather          this rank's input into block `rank` of the root's output;
//   scatter         block `rank` of the root's input into this rank's output.
device::PeerReduce Build(const Plan& c, const PeerAt& send_of, const PeerAt& recv_of);

}  // namespace braid::nccl
