// Which vector instruction sets this CPU supports, with the OS saving the wider registers on a
// context switch: what the CPU kernels (device/cpu/kernel_isa.h) and the block codecs
// (quant/block_codec.h) pick their tiers by. One detector for both; each user combines the flags
// by its own rule (the kernels' AVX-512 tier needs F, BW and VL, the codecs' needs F).
#pragma once

namespace braid {

struct CpuFeatures {
  bool avx2_f16c = false;    // AVX2 and F16C: 256-bit vectors, hardware fp16 conversion
  bool avx512f = false;      // AVX-512 Foundation: 512-bit vectors and mask registers
  bool avx512bw_vl = false;  // AVX-512 BW and VL: byte and word lanes, 128/256-bit encodings
};

// Detected on the first call (safe from a static initialiser), the same value after; all false
// off x86.
const CpuFeatures& HostCpuFeatures();

}  // namespace braid
