#include "core/base/cpu_features.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace braid {
namespace {

CpuFeatures Detect() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  // Also safe when called from a static initialiser that runs before libgcc's own.
  __builtin_cpu_init();
  // __builtin_cpu_supports also checks that the OS saves the registers: YMM for "avx2", ZMM and
  // the mask registers for "avx512*" (XGETBV). F16C is read from CPUID directly because not every
  // compiler's __builtin_cpu_supports knows it (clang 14 does not).
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
  f.avx2_f16c = __builtin_cpu_supports("avx2") && f16c;
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw_vl = __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
#endif
  return f;
}

}  // namespace

const CpuFeatures& HostCpuFeatures() {
  static const CpuFeatures features = Detect();
  return features;
}

}  // namespace braid
