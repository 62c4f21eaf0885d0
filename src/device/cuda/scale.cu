// Scale (dst = src * scalar, the pre-multiplied sum's first step) and Divide (buf /= divisor,
// Avg's final step), element by element through element_math.h's ScaleElement and DivideElement:
// the CPU kernels' arithmetic, with x86's NaN bits. Layout as in reduce.cu.
#include <cstring>

#include "device/type_dispatch.h"
#include "device/cuda/kernels.h"
#include "device/cuda/launch.h"
#include "device/element_math.h"

namespace braid::cuda {
namespace {

using element::ComputeOf;
using element::DivideElement;
using element::Divisor;
using element::ElementOf;
using element::ScaleElement;
using element::StorageOf;
using element::X86Nan;

size_t Units(size_t n, size_t per_pack, bool vector) {
  return vector ? n / per_pack + n % per_pack : n;
}

// ---------------------------------------------------------------- scale

// The scalar is `s` or, when `s_at` is not null, the value there in device memory (read by every
// thread: one cached load).
template <DataType kType>
__global__ void __launch_bounds__(kThreads)
    ScaleKernel(const StorageOf<kType>* src, StorageOf<kType>* dst, size_t n, bool vector,
                ComputeOf<kType> s, const StorageOf<kType>* s_at) {
  using S = StorageOf<kType>;
  if (s_at != nullptr) s = ElementOf<kType>::ToCompute(*s_at);
  ForEach<S>(
      n, vector,
      [&](size_t p) {
        Pack<S> x = LoadPack(src, p);
#pragma unroll
        for (size_t k = 0; k < Pack<S>::kCount; ++k)
          x.v[k] = ScaleElement<kType, X86Nan>(x.v[k], s);
        StorePack(dst, p, x);
      },
      [&](size_t i) { dst[i] = ScaleElement<kType, X86Nan>(src[i], s); });
}

struct LaunchScale {
  const void* src;
  void* dst;
  size_t n;
  const void* scalar;
  ScalarAt scalar_at;
  gpuStream_t stream;
  template <DataType kType>
  void operator()() const {
    using S = StorageOf<kType>;
    ComputeOf<kType> s{};
    const S* s_at = nullptr;
    if (scalar_at == ScalarAt::kHost) {
      S v;
      std::memcpy(&v, scalar, sizeof(S));  // the scalar may be unaligned host memory
      s = ElementOf<kType>::ToCompute(v);
    } else {
      s_at = static_cast<const S*>(scalar);
    }
    const bool vector = Aligned16(src) && Aligned16(dst);
    ScaleKernel<kType><<<GridFor(Units(n, Pack<S>::kCount, vector)), kThreads, 0, stream>>>(
        static_cast<const S*>(src), static_cast<S*>(dst), n, vector, s, s_at);
  }
};

// ---------------------------------------------------------------- divide

template <DataType kType>
__global__ void __launch_bounds__(kThreads)
    DivideKernel(StorageOf<kType>* buf, size_t n, bool vector, Divisor d) {
  using S = StorageOf<kType>;
  ForEach<S>(
      n, vector,
      [&](size_t p) {
        Pack<S> x = LoadPack(buf, p);
#pragma unroll
        for (size_t k = 0; k < Pack<S>::kCount; ++k)
          x.v[k] = DivideElement<kType, X86Nan>(x.v[k], d);
        StorePack(buf, p, x);
      },
      [&](size_t i) { buf[i] = DivideElement<kType, X86Nan>(buf[i], d); });
}

struct LaunchDivide {
  void* buf;
  size_t n;
  Divisor d;
  gpuStream_t stream;
  template <DataType kType>
  void operator()() const {
    using S = StorageOf<kType>;
    const bool vector = Aligned16(buf);
    DivideKernel<kType><<<GridFor(Units(n, Pack<S>::kCount, vector)), kThreads, 0, stream>>>(
        static_cast<S*>(buf), n, vector, d);
  }
};

}  // namespace

Status Scale(DataType type, const void* src, void* dst, size_t n, const void* scalar,
             ScalarAt scalar_at, void* stream) {
  if (!IsValidDataType(static_cast<int>(type)))
    return InvalidArgument("GPU scale: unknown data type " +
                           std::to_string(static_cast<int>(type)));
  if (n == 0) return Status::Ok();
  if (scalar == nullptr) return InvalidArgument("GPU scale: no scalar");
  WithType(type, LaunchScale{src, dst, n, scalar, scalar_at, static_cast<gpuStream_t>(stream)});
  return Launched("scale");
}

Status Divide(DataType type, void* buf, size_t n, uint64_t divisor, void* stream) {
  if (!IsValidDataType(static_cast<int>(type)))
    return InvalidArgument("GPU divide: unknown data type " +
                           std::to_string(static_cast<int>(type)));
  // As DivideKernel: by 1 every bit stays (no pass, which would quieten fp16 signalling NaNs and
  // saturate e5m2 infinities); by 0 (no ranks) nothing is done.
  if (n == 0 || divisor <= 1) return Status::Ok();
  WithType(type,
           LaunchDivide{buf, n, element::MakeDivisor(divisor), static_cast<gpuStream_t>(stream)});
  return Launched("divide");
}

}  // namespace braid::cuda
