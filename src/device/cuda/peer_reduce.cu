// The peer reduce (device/device_runtime.h's PeerReduce): one rank's part of a collective over
// buffers of every rank of the node (peer windows mapped by CUDA IPC): acc = src[0] (op) src[1]
// (op) ... in order, each step through element_math.h's ReduceElement (rounded back to the
// type after every step, as the CPU kernels do), then AVG's division, then written to every
// dst[r]. One thread per 16-byte pack (or element). Reads the host-mapped `skip` word first: the
// ranks disagreed on the call, do nothing. With `late`, the pointers are read from host memory
// (written by the agent before the kernel may start), and 16-byte packs are used when they all
// allow it. (The table is read before `skip` is known: a skipped call's table holds stale
// pointers, never dereferenced.) Pairwise (all-to-all): dst[k] = src[k] for each k, no reduction.
//
// Built twice: into braid_device_cuda with the other kernels, and as a fatbin embedded in
// libbraid (src/CMakeLists.txt) that braid's CUDA runtime loads with cuModuleLoadData and
// launches with cuLaunchKernel, so the library needs no CUDA runtime library. The kernels have C
// names for cuModuleGetFunction (peer_reduce_args.h).
#include "device/cuda/launch.h"
#include "device/cuda/peer_reduce_args.h"
#include "device/element_math.h"

namespace braid::cuda {
namespace {

using element::DivideElement;
using element::Divisor;
using element::ReduceElement;
using element::StorageOf;
using element::X86Nan;

template <DataType kType, ReduceOp kOp>
__device__ __forceinline__ StorageOf<kType> Finish(StorageOf<kType> acc, const PeerReduceArgs& a) {
  if (a.divide_by > 1)
    return DivideElement<kType, X86Nan>(acc, Divisor{a.divide_by, a.divide_wide, a.divide_narrow});
  return acc;
}

template <DataType kType, ReduceOp kOp>
__device__ void PeerReduceBody(const PeerReduceArgs& a) {
  using S = StorageOf<kType>;
  const int nsrc = a.nsrc, ndst = a.ndst;
  // One read of `skip` per block, shared, so that every thread of a block takes the same branch
  // (an abort may write `skip` while the kernel runs), and of the late-bound pointers: host
  // memory, read once per block into shared memory.
  __shared__ uint32_t skip;
  __shared__ const void* late_src[kMaxPeerRanks];
  __shared__ void* late_dst[kMaxPeerRanks];
  if (threadIdx.x == 0) skip = *static_cast<const volatile uint32_t*>(a.skip);
  if (a.late) {
    const volatile device::PeerPointers* t = a.late;
    if (threadIdx.x < static_cast<unsigned>(nsrc)) late_src[threadIdx.x] = t->src[threadIdx.x];
    if (threadIdx.x < static_cast<unsigned>(ndst)) late_dst[threadIdx.x] = t->dst[threadIdx.x];
  }
  __syncthreads();
  if (skip == a.skip_value) return;
  const void* const* src = a.src;
  void* const* dst = a.dst;
  bool vector = a.vector != 0;
  if (a.late) {
    src = late_src;
    dst = late_dst;
    for (int r = 0; r < nsrc; ++r) vector = vector && reinterpret_cast<uintptr_t>(src[r]) % 16 == 0;
    for (int r = 0; r < ndst; ++r) vector = vector && reinterpret_cast<uintptr_t>(dst[r]) % 16 == 0;
  }
  if (a.pairwise) {
    // All-to-all: each pair copied in turn by the whole grid (a pair's block is typically large;
    // one pass per pair keeps each thread's loads and stores on one source and destination).
    for (int r = 0; r < nsrc; ++r) {
      const S* s = static_cast<const S*>(src[r]);
      S* d = static_cast<S*>(dst[r]);
      ForEach<S>(
          a.count, vector, [&](size_t p) { StorePack(d, p, LoadPack(s, p)); },
          [&](size_t i) { d[i] = s[i]; });
    }
    return;
  }
  ForEach<S>(
      a.count, vector,
      [&](size_t p) {
        Pack<S> acc = LoadPack(static_cast<const S*>(src[0]), p);
        for (int r = 1; r < nsrc; ++r) {
          const Pack<S> x = LoadPack(static_cast<const S*>(src[r]), p);
#pragma unroll
          for (size_t k = 0; k < Pack<S>::kCount; ++k)
            acc.v[k] = ReduceElement<kType, kOp, X86Nan>(acc.v[k], x.v[k]);
        }
#pragma unroll
        for (size_t k = 0; k < Pack<S>::kCount; ++k) acc.v[k] = Finish<kType, kOp>(acc.v[k], a);
        for (int r = 0; r < ndst; ++r) StorePack(static_cast<S*>(dst[r]), p, acc);
      },
      [&](size_t i) {
        S acc = static_cast<const S*>(src[0])[i];
        for (int r = 1; r < nsrc; ++r)
          acc = ReduceElement<kType, kOp, X86Nan>(acc, static_cast<const S*>(src[r])[i]);
        acc = Finish<kType, kOp>(acc, a);
        for (int r = 0; r < ndst; ++r) static_cast<S*>(dst[r])[i] = acc;
      });
}

}  // namespace
}  // namespace braid::cuda

// C names, one per type and op (braid's DataType and ReduceOp values).
#define BRAID_PEER_REDUCE(T, O)                                                                    \
  extern "C" __global__ void __launch_bounds__(braid::cuda::kThreads)                              \
      braid_peer_reduce_##T##_##O(braid::cuda::PeerReduceArgs a) {                                 \
    braid::cuda::PeerReduceBody<static_cast<braid::DataType>(T), static_cast<braid::ReduceOp>(O)>( \
        a);                                                                                        \
  }
#define BRAID_PEER_REDUCE_OPS(T) \
  BRAID_PEER_REDUCE(T, 0) BRAID_PEER_REDUCE(T, 1) BRAID_PEER_REDUCE(T, 2) BRAID_PEER_REDUCE(T, 3)
BRAID_PEER_REDUCE_OPS(0)
BRAID_PEER_REDUCE_OPS(1)
BRAID_PEER_REDUCE_OPS(2)
BRAID_PEER_REDUCE_OPS(3)
BRAID_PEER_REDUCE_OPS(4)
BRAID_PEER_REDUCE_OPS(5)
BRAID_PEER_REDUCE_OPS(6)
BRAID_PEER_REDUCE_OPS(7)
BRAID_PEER_REDUCE_OPS(8)
BRAID_PEER_REDUCE_OPS(9)
BRAID_PEER_REDUCE_OPS(10)
BRAID_PEER_REDUCE_OPS(11)
