#include "device/cpu/kernel_isa.h"

#include "core/base/cpu_features.h"
#include "device/cpu/element_types.h"

namespace braid::cpu {

bool CpuSupports(KernelIsa isa) {
  // The tiers exist on x86 only (BRAID_KERNELS_X86); elsewhere every feature reads false.
  static const bool avx2_f16c = HostCpuFeatures().avx2_f16c;
  // The bf16 and fp16 conversions need 512-bit byte and word lanes: F, BW and VL.
  static const bool avx512 =
      avx2_f16c && HostCpuFeatures().avx512f && HostCpuFeatures().avx512bw_vl;
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
