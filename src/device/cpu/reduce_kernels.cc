// ReduceKernel: dst = a (op) b, one instantiation per type x op x tier, picked from a constant
// table. The loops are plain C++ that GCC vectorises; see element_types.h for the two shapes.
#include "device/cpu/reduce_kernels.h"

#include <array>
#include <utility>

#include "device/cpu/element_ops.h"
#include "device/cpu/element_types.h"
#include "device/cpu/kernel_isa.h"

namespace braid::cpu {
namespace {

// dst[i] = f(a[i], b[i]), in chunks with a compile-time trip count (what GCC's -O2 vectoriser
// needs, see element_types.h), then the remainder.
template <class S, class F>
BRAID_KERNEL_INLINE void ZipChunked(const S* a, const S* b, S* dst, size_t n, F f) {
  size_t i = 0;
  for (; i + kDirectChunk <= n; i += kDirectChunk) {
    const S* ca = a + i;
    const S* cb = b + i;
    S* cd = dst + i;
    BRAID_LOOP_INDEPENDENT
    for (size_t j = 0; j < kDirectChunk; ++j) cd[j] = f(ca[j], cb[j]);
  }
  for (; i < n; ++i) dst[i] = f(a[i], b[i]);
}

template <ReduceOp kOp, class T>
BRAID_KERNEL_INLINE void ReduceDirect(const T* a, const T* b, T* dst, size_t n) {
  ZipChunked(a, b, dst, n, [](T x, T y) BRAID_KERNEL_LAMBDA { return Combine<kOp>(x, y); });
}

// One block of at most kNarrowBlock elements; a whole block is read before any of dst is written,
// which is what makes dst == a or dst == b safe.
template <ReduceOp kOp, class Format, class S>
BRAID_KERNEL_INLINE void ReduceNarrowBlock(const S* a, const S* b, S* dst, size_t m) {
  float fa[kNarrowBlock];
  float fb[kNarrowBlock];
  Format::Widen(a, fa, m);
  Format::Widen(b, fb, m);
  for (size_t j = 0; j < m; ++j) fa[j] = Combine<kOp>(fa[j], fb[j]);
  Format::Narrow(fa, dst, m);
}

template <ReduceOp kOp, class Format, class S>
BRAID_KERNEL_INLINE void ReduceNarrow(const S* a, const S* b, S* dst, size_t n) {
  if constexpr (Format::kFused) {
    ZipChunked(a, b, dst, n, [](S x, S y) BRAID_KERNEL_LAMBDA {
      return Format::FromFloat(Combine<kOp>(Format::ToFloat(x), Format::ToFloat(y)));
    });
  } else {
    size_t i = 0;
    // Full blocks with a compile-time length (vectorised at -O2), then the remainder.
    for (; i + kNarrowBlock <= n; i += kNarrowBlock) {
      ReduceNarrowBlock<kOp, Format>(a + i, b + i, dst + i, kNarrowBlock);
    }
    if (i < n) ReduceNarrowBlock<kOp, Format>(a + i, b + i, dst + i, n - i);
  }
}

template <ReduceOp kOp, DataType kType, KernelIsa kIsa>
BRAID_KERNEL_INLINE void ReduceTyped(const void* a, const void* b, void* dst, size_t n) {
  using Traits = ElementTraits<kType>;
  if constexpr (Traits::kNarrowFloat) {
    using S = typename Traits::Storage;
    ReduceNarrow<kOp, FormatFor<kType, kIsa>>(static_cast<const S*>(a), static_cast<const S*>(b),
                                              static_cast<S*>(dst), n);
  } else {
    using T = typename Traits::Value;
    ReduceDirect<kOp>(static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(dst), n);
  }
}

using ReduceFn = void (*)(const void*, const void*, void*, size_t);

template <ReduceOp kOp, DataType kType>
void ReducePortable(const void* a, const void* b, void* dst, size_t n) {
  ReduceTyped<kOp, kType, KernelIsa::kPortable>(a, b, dst, n);
}

#if BRAID_KERNELS_X86
template <ReduceOp kOp, DataType kType>
BRAID_TARGET_AVX2_F16C void ReduceAvx2F16c(const void* a, const void* b, void* dst, size_t n) {
  ReduceTyped<kOp, kType, KernelIsa::kAvx2F16c>(a, b, dst, n);
}
template <ReduceOp kOp, DataType kType>
BRAID_TARGET_AVX512 void ReduceAvx512(const void* a, const void* b, void* dst, size_t n) {
  ReduceTyped<kOp, kType, KernelIsa::kAvx512>(a, b, dst, n);
}
#endif

constexpr size_t kTableSize = size_t{kNumKernelIsas} * kNumDataTypes * kNumReduceOps;

template <size_t kIndex>
constexpr ReduceFn TableEntry() {
  constexpr auto isa = static_cast<KernelIsa>(kIndex / (kNumDataTypes * kNumReduceOps));
  constexpr auto type = static_cast<DataType>(kIndex / kNumReduceOps % kNumDataTypes);
  constexpr auto op = static_cast<ReduceOp>(kIndex % kNumReduceOps);
#if BRAID_KERNELS_X86
  if constexpr (isa == KernelIsa::kAvx2F16c) return &ReduceAvx2F16c<op, type>;
  if constexpr (isa == KernelIsa::kAvx512) return &ReduceAvx512<op, type>;
#endif
  return &ReducePortable<op, type>;
}

template <size_t... kIndex>
constexpr std::array<ReduceFn, kTableSize> MakeTable(std::index_sequence<kIndex...>) {
  return {TableEntry<kIndex>()...};
}

constexpr std::array<ReduceFn, kTableSize> kReduceTable =
    MakeTable(std::make_index_sequence<kTableSize>());

// The table entry of (isa, type, op): what ReduceKernelWithIsa calls and ResolveReduceKernel
// returns.
ReduceFn TableEntryFor(KernelIsa isa, int type, int op) {
  if (!CpuSupports(isa)) isa = KernelIsa::kPortable;
  return kReduceTable[(static_cast<size_t>(isa) * kNumDataTypes + static_cast<size_t>(type)) *
                          kNumReduceOps +
                      static_cast<size_t>(op)];
}

}  // namespace

void ReduceKernelWithIsa(KernelIsa isa, DataType type, ReduceOp op, const void* a, const void* b,
                         void* dst, size_t n) {
  const int t = static_cast<int>(type);
  const int o = static_cast<int>(op);
  // The interface has no error path: an unknown type or op is the caller's bug and does nothing.
  if (n == 0 || !IsValidDataType(t) || o < 0 || o >= kNumReduceOps) return;
  TableEntryFor(isa, t, o)(a, b, dst, n);
}

}  // namespace braid::cpu

namespace braid {

void ReduceKernel(DataType type, ReduceOp op, const void* a, const void* b, void* dst, size_t n) {
  cpu::ReduceKernelWithIsa(cpu::KernelIsaFor(type), type, op, a, b, dst, n);
}

ReduceKernelFn ResolveReduceKernel(DataType type, ReduceOp op) {
  const int t = static_cast<int>(type);
  const int o = static_cast<int>(op);
  if (!IsValidDataType(t) || o < 0 || o >= kNumReduceOps) return nullptr;
  return cpu::TableEntryFor(cpu::KernelIsaFor(type), t, o);
}

}  // namespace braid
