#include "device/cpu/kernel_isa.h"

#include "device/cpu/element_types.h"

#if BRAID_KERNELS_X86
#include <cpuid.h>
#endif

namespace braid::cpu {

namespace {

bool DetectAvx2F16c() {
#if BRAID_KERNELS_X86
  // Also safe when called from a static initialiser that runs before libgcc's own.
  __builtin_cpu_init();
  // "avx2" also checks that the OS saves the YMM registers. F16C is read from CPUID directly
  // because not every compiler's __builtin_cpu_supports knows it (clang 14 does not).
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
  return __builtin_cpu_supports("avx2") && f16c;
#else
  return false;
#endif
}

bool DetectAvx512() {
#if BRAID_KERNELS_X86
  // __builtin_cpu_supports also checks that the OS saves the ZMM and mask registers.
  return DetectAvx2F16c() && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}

}  // namespace

bool CpuSupports(KernelIsa isa) {
  static const bool avx2_f16c = DetectAvx2F16c();
  static const bool avx512 = DetectAvx512();
  switch (isa) {
    case KernelIsa::kPortable:
      return true;
    case KernelIsa::kAvx2F16c:
      return avx2_f16c;
    case KernelIsa::kAvx512:
      return avx512;
  }
  return false;
}

KernelIsa BestKernelIsa() {
  static const KernelIsa best = CpuSupports(KernelIsa::kAvx512)     ? KernelIsa::kAvx512
                                : CpuSupports(KernelIsa::kAvx2F16c) ? KernelIsa::kAvx2F16c
                                                                    : KernelIsa::kPortable;
  return best;
}

KernelIsa KernelIsaFor(DataType type) {
  static const KernelIsa direct =
      CpuSupports(KernelIsa::kAvx2F16c) ? KernelIsa::kAvx2F16c : KernelIsa::kPortable;
  const int t = static_cast<int>(type);
  return IsValidDataType(t) && kIsNarrowFloat[static_cast<size_t>(t)] ? BestKernelIsa() : direct;
}

const char* KernelIsaName(KernelIsa isa) {
  switch (isa) {
    case KernelIsa::kPortable:
      return "portable";
    case KernelIsa::kAvx2F16c:
      return "avx2+f16c";
    case KernelIsa::kAvx512:
      return "avx512";
  }
  return "?";
}

}  // namespace braid::cpu
