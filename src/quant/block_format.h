// Block quantization formats (spec/algorithms.md section 3) and the layout of their encodings.
//
// A tensor of n elements is cut into nb = ceil(n / G) blocks of G elements, the last one short
// when G does not divide n. Each block gets its own parameters (fp32) and each element a b-bit
// code (b = 8 or 4):
//
//   symmetric:  d = absmax / 2^(b-1)  (d = 1 when that is 0: a zero block, or an absmax so small
//               that d underflows), q = clamp(round_half_even(x / d), -2^(b-1), 2^(b-1) - 1),
//               x' = q * d. +absmax clips to 2^(b-1) - 1 by design. Codes are two's complement.
//   asymmetric: m = min, d = (max - min) / (2^b - 1) (d = 1 when that is 0),
//               q = clamp(round_half_even((x - m) / d), 0, 2^b - 1), x' = m + q * d (a multiply
//               and an add, each rounded: never a fused multiply-add). Codes are unsigned.
//
// Non-finite inputs: a block holding a NaN or an infinity (or, asymmetric, whose max - min
// overflows fp32) is "poisoned": its parameters are the canonical quiet NaN (0x7fc00000), all its
// codes 0, and it decodes to the canonical NaN of the output type (fp32 0x7fc00000, fp16 0x7e00,
// bf16 0x7fc0); a dequantize-reduce stores that NaN into the accumulator. So an overflow in one
// rank's gradients reaches every rank's result (what loss scaling detects), as with an unquantized
// sum, at the price of the block's other elements and of the infinity's sign.
//
// Encoded layout (little-endian, no header; all offsets from the start of the encoding):
//
//   [0, S)        block parameters, block after block: symmetric 4 bytes per block (d),
//                 asymmetric 8 bytes per block (d, then m); S = nb * 4 or nb * 8
//   [S, P)        zero bytes, P = S rounded up to a multiple of 16
//   [P, P + C)    the codes, in element order. INT8: one byte per element (C = n). INT4: two per
//                 byte (C = ceil(n / 2)), element 2k in the high nibble and 2k + 1 in the low one:
//                 byte = ((q[2k] & 0xF) << 4) | (q[2k+1] & 0xF), so (-2, 3) packs to 0xE3; an odd
//                 n leaves the last low nibble 0. With an odd G a byte may hold codes of two
//                 blocks.
//   [P + C, T)    zero bytes, T = EncodedBytes = (P + C) rounded up to a multiple of 16
//
// The parameters come first so that a decoder reads them before the codes they apply to, and the
// 16-byte rounding keeps the codes and every encoding packed back to back (all-gathered frames)
// aligned for vector loads when the first one is. Padding is written as zeros so that encodings
// are byte-identical across CPU tiers and devices. The input type (fp32, fp16, bf16) does not
// change the encoding's size or meaning: fp16 data may be decoded into fp32, and so on.
#pragma once

#include <cstdint>

namespace braid::quant {

struct BlockFormat {
  uint8_t bits = 8;       // 8 or 4
  bool symmetric = true;  // false: min/max (asymmetric)
  uint32_t block = 32;    // G, elements per block, >= 1
};
inline constexpr bool operator==(const BlockFormat& a, const BlockFormat& b) {
  return a.bits == b.bits && a.symmetric == b.symmetric && a.block == b.block;
}

inline constexpr uint32_t kMaxBlock = 1u << 24;
inline constexpr uint64_t kEncodingAlignment = 16;

inline constexpr bool IsValidFormat(const BlockFormat& f) {
  return (f.bits == 8 || f.bits == 4) && f.block >= 1 && f.block <= kMaxBlock;
}
inline constexpr uint64_t AlignUp(uint64_t x) {
  return (x + kEncodingAlignment - 1) / kEncodingAlignment * kEncodingAlignment;
}
inline constexpr uint64_t NumBlocks(const BlockFormat& f, uint64_t n) {
  return (n + f.block - 1) / f.block;
}
// Bytes of one block's parameters.
inline constexpr uint64_t ParamBytes(const BlockFormat& f) {
  return f.symmetric ? 4 : 8;
}
inline constexpr uint64_t ParamsBytes(const BlockFormat& f, uint64_t n) {
  return NumBlocks(f, n) * ParamBytes(f);
}
// Offset of the codes (P above).
inline constexpr uint64_t CodesOffset(const BlockFormat& f, uint64_t n) {
  return AlignUp(ParamsBytes(f, n));
}
inline constexpr uint64_t CodesBytes(const BlockFormat& f, uint64_t n) {
  return f.bits == 8 ? n : (n + 1) / 2;
}
// Bytes of the encoding of n elements (0 for n = 0); what the IR's encoded slices hold.
inline constexpr uint64_t EncodedBytes(const BlockFormat& f, uint64_t n) {
  return n == 0 ? 0 : AlignUp(CodesOffset(f, n) + CodesBytes(f, n));
}

}  // namespace braid::quant
