// DivideKernel (Avg's final step) and ScaleKernel (pre-multiplied sum's first step): one pass
// over a buffer with one operand fixed, per type x tier, like reduce_kernels.cc.
#include <array>
#include <cstring>
#include <type_traits>
#include <utility>

#include "device/cpu/element_ops.h"
#include "device/cpu/element_types.h"
#include "device/cpu/kernel_isa.h"
#include "device/cpu/reduce_kernels.h"

namespace braid::cpu {
namespace {

// Applies f to every element of src into dst (dst may equal src), in chunks with a compile-time
// trip count so that the -O2 vectoriser accepts them.
template <class T, class F>
BRAID_KERNEL_INLINE void MapDirect(const T* src, T* dst, size_t n, F f) {
  size_t i = 0;
  for (; i + kDirectChunk <= n; i += kDirectChunk) {
    const T* cs = src + i;
    T* cd = dst + i;
    BRAID_LOOP_INDEPENDENT
    for (size_t j = 0; j < kDirectChunk; ++j) cd[j] = f(cs[j]);
  }
  for (; i < n; ++i) dst[i] = f(src[i]);
}

template <class Format, class S, class F>
BRAID_KERNEL_INLINE void MapNarrowBlock(const S* src, S* dst, size_t m, F f) {
  float x[kNarrowBlock];
  Format::Widen(src, x, m);
  for (size_t j = 0; j < m; ++j) x[j] = f(x[j]);
  Format::Narrow(x, dst, m);
}

// Widens to fp32, applies f, rounds back once.
template <class Format, class S, class F>
BRAID_KERNEL_INLINE void MapNarrow(const S* src, S* dst, size_t n, F f) {
  size_t i = 0;
  for (; i + kNarrowBlock <= n; i += kNarrowBlock) {
    MapNarrowBlock<Format>(src + i, dst + i, kNarrowBlock, f);
  }
  if (i < n) MapNarrowBlock<Format>(src + i, dst + i, n - i, f);
}

// ---------------------------------------------------------------- divide

using element::DivideTowardZero;

template <DataType kType, KernelIsa kIsa>
BRAID_KERNEL_INLINE void DivideTyped(void* buf, size_t n, uint64_t divisor) {
  using Traits = ElementTraits<kType>;
  if constexpr (Traits::kNarrowFloat) {
    using S = typename Traits::Storage;
    const float d = static_cast<float>(divisor);
    S* p = static_cast<S*>(buf);
    MapNarrow<FormatFor<kType, kIsa>>(p, p, n, [d](float x) BRAID_KERNEL_LAMBDA { return x / d; });
  } else {
    using T = typename Traits::Value;
    T* p = static_cast<T*>(buf);
    if constexpr (std::is_same_v<T, float>) {
      const double d = static_cast<double>(divisor);
      MapDirect(p, p, n, [d](float x) BRAID_KERNEL_LAMBDA {
        return static_cast<float>(static_cast<double>(x) / d);
      });
    } else if constexpr (std::is_same_v<T, double>) {
      const double d = static_cast<double>(divisor);
      MapDirect(p, p, n, [d](double x) BRAID_KERNEL_LAMBDA { return x / d; });
    } else if constexpr (std::is_same_v<T, int8_t> || std::is_same_v<T, uint8_t> ||
                         std::is_same_v<T, int32_t>) {
      // Exact and vectorisable (x86 has no vector integer division): for |x| < 2^32 the fp64
      // quotient is within |x| * 2^-53 < 1/d of the true one, and a non-integer true quotient is at
      // least 1/d away from every integer, so truncating the fp64 quotient truncates the true one.
      // The truncated quotient lies between 0 and x, so it fits int32_t and then T.
      const double d = static_cast<double>(divisor);
      MapDirect(p, p, n, [d](T x) BRAID_KERNEL_LAMBDA {
        return static_cast<T>(static_cast<int32_t>(static_cast<double>(x) / d));
      });
    } else if constexpr (std::is_signed_v<T>) {
      MapDirect(p, p, n, [divisor](T x) BRAID_KERNEL_LAMBDA {
        return static_cast<T>(DivideTowardZero(x, divisor));
      });
    } else {
      MapDirect(p, p, n,
                [divisor](T x) BRAID_KERNEL_LAMBDA { return static_cast<T>(x / divisor); });
    }
  }
}

// ---------------------------------------------------------------- scale

template <DataType kType, KernelIsa kIsa>
BRAID_KERNEL_INLINE void ScaleTyped(const void* src, void* dst, size_t n, const void* scalar) {
  using Traits = ElementTraits<kType>;
  if constexpr (Traits::kNarrowFloat) {
    using S = typename Traits::Storage;
    using Format = typename Traits::Format;  // the portable one: a single value
    S s_storage;
    std::memcpy(&s_storage, scalar, sizeof(S));
    float s;
    Format::Widen(&s_storage, &s, 1);
    MapNarrow<FormatFor<kType, kIsa>>(static_cast<const S*>(src), static_cast<S*>(dst), n,
                                      [s](float x) BRAID_KERNEL_LAMBDA { return x * s; });
  } else {
    using T = typename Traits::Value;
    T s;
    std::memcpy(&s, scalar, sizeof(T));  // the scalar may be unaligned host memory
    if constexpr (std::is_integral_v<T>) {
      MapDirect(static_cast<const T*>(src), static_cast<T*>(dst), n,
                [s](T x) BRAID_KERNEL_LAMBDA { return Multiply(x, s); });
    } else {
      MapDirect(static_cast<const T*>(src), static_cast<T*>(dst), n,
                [s](T x) BRAID_KERNEL_LAMBDA { return x * s; });
    }
  }
}

// ---------------------------------------------------------------- per-tier entry points

using DivideFn = void (*)(void*, size_t, uint64_t);
using ScaleFn = void (*)(const void*, void*, size_t, const void*);

template <DataType kType>
void DividePortable(void* buf, size_t n, uint64_t divisor) {
  DivideTyped<kType, KernelIsa::kPortable>(buf, n, divisor);
}
template <DataType kType>
void ScalePortable(const void* src, void* dst, size_t n, const void* scalar) {
  ScaleTyped<kType, KernelIsa::kPortable>(src, dst, n, scalar);
}

#if BRAID_KERNELS_X86
template <DataType kType>
BRAID_TARGET_AVX2_F16C void DivideAvx2F16c(void* buf, size_t n, uint64_t divisor) {
  DivideTyped<kType, KernelIsa::kAvx2F16c>(buf, n, divisor);
}
template <DataType kType>
BRAID_TARGET_AVX2_F16C void ScaleAvx2F16c(const void* src, void* dst, size_t n,
                                          const void* scalar) {
  ScaleTyped<kType, KernelIsa::kAvx2F16c>(src, dst, n, scalar);
}
template <DataType kType>
BRAID_TARGET_AVX512 void DivideAvx512(void* buf, size_t n, uint64_t divisor) {
  DivideTyped<kType, KernelIsa::kAvx512>(buf, n, divisor);
}
template <DataType kType>
BRAID_TARGET_AVX512 void ScaleAvx512(const void* src, void* dst, size_t n, const void* scalar) {
  ScaleTyped<kType, KernelIsa::kAvx512>(src, dst, n, scalar);
}
#endif

constexpr size_t kTableSize = size_t{kNumKernelIsas} * kNumDataTypes;

template <size_t kIndex>
constexpr std::pair<DivideFn, ScaleFn> TableEntry() {
  constexpr auto isa = static_cast<KernelIsa>(kIndex / kNumDataTypes);
  constexpr auto type = static_cast<DataType>(kIndex % kNumDataTypes);
#if BRAID_KERNELS_X86
  if constexpr (isa == KernelIsa::kAvx2F16c) return {&DivideAvx2F16c<type>, &ScaleAvx2F16c<type>};
  if constexpr (isa == KernelIsa::kAvx512) return {&DivideAvx512<type>, &ScaleAvx512<type>};
#endif
  return {&DividePortable<type>, &ScalePortable<type>};
}

template <size_t... kIndex>
constexpr std::array<std::pair<DivideFn, ScaleFn>, kTableSize> MakeTable(
    std::index_sequence<kIndex...>) {
  return {TableEntry<kIndex>()...};
}

constexpr std::array<std::pair<DivideFn, ScaleFn>, kTableSize> kScaleTable =
    MakeTable(std::make_index_sequence<kTableSize>());

size_t TableIndex(KernelIsa isa, int type) {
  if (!CpuSupports(isa)) isa = KernelIsa::kPortable;
  return static_cast<size_t>(isa) * kNumDataTypes + type;
}

}  // namespace

void DivideKernelWithIsa(KernelIsa isa, DataType type, void* buf, size_t n, uint64_t divisor) {
  const int t = static_cast<int>(type);
  // Dividing by 1 leaves every bit as it was (without the pass, fp16 signalling NaNs would be
  // quietened and e5m2 infinities saturated). Dividing by 0 is meaningless (no ranks) and is left
  // a no-op rather than undefined behaviour, since this interface has no error path.
  if (n == 0 || divisor <= 1 || !IsValidDataType(t)) return;
  kScaleTable[TableIndex(isa, t)].first(buf, n, divisor);
}

void ScaleKernelWithIsa(KernelIsa isa, DataType type, const void* src, void* dst, size_t n,
                        const void* scalar) {
  const int t = static_cast<int>(type);
  if (n == 0 || !IsValidDataType(t)) return;
  kScaleTable[TableIndex(isa, t)].second(src, dst, n, scalar);
}

}  // namespace braid::cpu

namespace braid {

void DivideKernel(DataType type, void* buf, size_t n, uint64_t divisor) {
  cpu::DivideKernelWithIsa(cpu::KernelIsaFor(type), type, buf, n, divisor);
}

void ScaleKernel(DataType type, const void* src, void* dst, size_t n, const void* scalar) {
  cpu::ScaleKernelWithIsa(cpu::KernelIsaFor(type), type, src, dst, n, scalar);
}

}  // namespace braid
