// Reduce: dst = a (op) b, one thread per 16-byte pack of elements (one per element where a pointer
// is not 16-byte aligned, and for the tail), each element through element_math.h's ReduceElement:
// the CPU kernels' conversions and operations, with x86's NaN bits.
#include "device/type_dispatch.h"
#include "device/cuda/kernels.h"
#include "device/cuda/launch.h"
#include "device/element_math.h"

namespace braid::cuda {
namespace {

using element::ReduceElement;
using element::StorageOf;
using element::X86Nan;

template <DataType kType, ReduceOp kOp>
__global__ void __launch_bounds__(kThreads)
    ReduceKernel(const StorageOf<kType>* a, const StorageOf<kType>* b, StorageOf<kType>* dst,
                 size_t n, bool vector) {
  using S = StorageOf<kType>;
  // No __restrict__: dst may be a or b. Each thread reads its elements before writing them.
  ForEach<S>(
      n, vector,
      [&](size_t p) {
        const Pack<S> x = LoadPack(a, p), y = LoadPack(b, p);
        Pack<S> r;
#pragma unroll
        for (size_t k = 0; k < Pack<S>::kCount; ++k)
          r.v[k] = ReduceElement<kType, kOp, X86Nan>(x.v[k], y.v[k]);
        StorePack(dst, p, r);
      },
      [&](size_t i) { dst[i] = ReduceElement<kType, kOp, X86Nan>(a[i], b[i]); });
}

template <DataType kType, ReduceOp kOp>
void Launch(const void* a, const void* b, void* dst, size_t n, gpuStream_t s) {
  using S = StorageOf<kType>;
  const bool vector = Aligned16(a) && Aligned16(b) && Aligned16(dst);
  const size_t units = vector ? n / Pack<S>::kCount + n % Pack<S>::kCount : n;
  ReduceKernel<kType, kOp><<<GridFor(units), kThreads, 0, s>>>(
      static_cast<const S*>(a), static_cast<const S*>(b), static_cast<S*>(dst), n, vector);
}

struct LaunchReduce {
  ReduceOp op;
  const void* a;
  const void* b;
  void* dst;
  size_t n;
  gpuStream_t s;
  template <DataType kType>
  void operator()() const {
    switch (op) {
      case ReduceOp::kSum:
        return Launch<kType, ReduceOp::kSum>(a, b, dst, n, s);
      case ReduceOp::kProd:
        return Launch<kType, ReduceOp::kProd>(a, b, dst, n, s);
      case ReduceOp::kMax:
        return Launch<kType, ReduceOp::kMax>(a, b, dst, n, s);
      case ReduceOp::kMin:
        return Launch<kType, ReduceOp::kMin>(a, b, dst, n, s);
    }
  }
};

}  // namespace

Status Reduce(DataType type, ReduceOp op, const void* a, const void* b, void* dst, size_t n,
              void* stream) {
  if (!IsValidDataType(static_cast<int>(type)))
    return InvalidArgument("GPU reduce: unknown data type " +
                           std::to_string(static_cast<int>(type)));
  if (static_cast<int>(op) >= kNumReduceOps)
    return InvalidArgument("GPU reduce: unknown reduction " + std::to_string(static_cast<int>(op)));
  if (n == 0) return Status::Ok();
  WithType(type, LaunchReduce{op, a, b, dst, n, static_cast<gpuStream_t>(stream)});
  return Launched("reduce");
}

}  // namespace braid::cuda
