// The pointers of one peer reduce (device/device_runtime.h's PeerReduce), as the device reads
// them when they are bound late: a call on buffers that no window maps learns where its peers'
// buffers are in this process only once the ranks have exchanged them (nccl/peer_buffers.h),
// after its kernel was queued; the agent writes them into a host-mapped PeerPointers before it
// lets the kernel start. Plain data: the same layout for the host compiler, nvcc and hipcc.
#pragma once

namespace braid::device {

// Sources and destinations of one kernel: at most one per rank of a node (8 GPUs, several ranks
// per GPU).
inline constexpr int kMaxPeerRanks = 32;

struct PeerPointers {
  const void* src[kMaxPeerRanks];
  void* dst[kMaxPeerRanks];
};

}  // namespace braid::device
