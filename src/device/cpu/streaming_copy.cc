#include "device/cpu/streaming_copy.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace braid::cpu {
namespace {

#if defined(__x86_64__)
// Bytes before dst + head are copied ordinarily, so that every stream store is aligned.
size_t HeadToAlign(const void* dst, size_t align, size_t n) {
  const size_t head = (align - (reinterpret_cast<uintptr_t>(dst) & (align - 1))) & (align - 1);
  return head < n ? head : n;
}

// SSE2: the x86-64 baseline (i386 builds take memcpy).
void StreamSse2(std::byte* dst, const std::byte* src, size_t n) {
  size_t i = HeadToAlign(dst, 16, n);
  std::memcpy(dst, src, i);
  for (; i + 64 <= n; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
  }
  for (; i + 16 <= n; i += 16)
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
  std::memcpy(dst + i, src + i, n - i);
  _mm_sfence();
}

__attribute__((target("avx2"))) void StreamAvx2(std::byte* dst, const std::byte* src, size_t n) {
  size_t i = HeadToAlign(dst, 32, n);
  std::memcpy(dst, src, i);
  for (; i + 64 <= n; i += 64) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 32));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 32), b);
  }
  for (; i + 32 <= n; i += 32)
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
  std::memcpy(dst + i, src + i, n - i);
  _mm_sfence();
}
#endif

}  // namespace

void StreamingCopyWithIsa(KernelIsa isa, void* dst, const void* src, size_t n) {
  if (n == 0) return;  // memcpy's pointers must be valid even for no bytes
#if defined(__x86_64__)
  auto* d = static_cast<std::byte*>(dst);
  const auto* s = static_cast<const std::byte*>(src);
  if (isa != KernelIsa::kPortable && CpuSupports(KernelIsa::kAvx2F16c))
    StreamAvx2(d, s, n);
  else
    StreamSse2(d, s, n);
#else
  (void)isa;
  std::memcpy(dst, src, n);
#endif
}

void StreamingCopy(void* dst, const void* src, size_t n) {
  static const KernelIsa isa = BestKernelIsa();
  StreamingCopyWithIsa(isa, dst, src, n);
}

}  // namespace braid::cpu
