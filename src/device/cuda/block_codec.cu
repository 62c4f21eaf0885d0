// GPU kernels of the block codecs (CUDA, and HIP through device/gpu_portability.h). Two families:
// - the fast path (G a multiple of 8, 16-byte aligned buffers: what cudaMalloc'd memory and whole
//   encodings give): one-pass encode, a lane group or a thread block per block of G, and a
//   thread-per-16-bytes decode (see "fast path" below; docs/quantization.md has the H100 numbers);
// - the general kernels for every other G or alignment: two passes per encode, one warp per block
//   computing its parameters (and thread 0 writing the layout's padding), then one thread per code
//   byte quantizing with its elements' block parameters, so an INT4 byte shared by two blocks
//   (odd G) has a single writer; decode one thread per code byte.
// Both compute what block_math.h computes, compiled with no fused multiply-add (nvcc --fmad=false,
// hipcc -ffp-contract=off) and IEEE division, so the bytes equal the CPU reference's
// (tests/unit/quant_cuda_compare.h checks both families). "Warp" below is 32 lanes: half of an AMD
// wavefront (gpu_portability.h says why the results are the same).
#include <string>

#include "device/cuda/block_codec.h"
#include "device/gpu_portability.h"
#include "quant/block_math.h"

namespace braid::quant::cuda {
namespace {

template <DataType T>
__device__ __forceinline__ float Load(const void* p, uint64_t i) {
  if constexpr (T == DataType::kFloat32) {
    return static_cast<const float*>(p)[i];
  } else {
    const uint16_t h = static_cast<const uint16_t*>(p)[i];
    return T == DataType::kFloat16 ? HalfToFloat(h) : Bf16ToFloat(h);
  }
}

template <DataType T>
__device__ __forceinline__ void Store(void* p, uint64_t i, float v) {
  if constexpr (T == DataType::kFloat32)
    static_cast<float*>(p)[i] = v;
  else
    static_cast<uint16_t*>(p)[i] = T == DataType::kFloat16 ? FloatToHalf(v) : FloatToBf16(v);
}

template <DataType T>
__device__ __forceinline__ void StoreNan(void* p, uint64_t i) {
  if constexpr (T == DataType::kFloat32)
    static_cast<uint32_t*>(p)[i] = kNanBitsF32;
  else
    static_cast<uint16_t*>(p)[i] = T == DataType::kFloat16 ? kNanBitsF16 : kNanBitsBf16;
}

// Parameters of element i's block (the encoding's parameters are 4-byte aligned when the
// encoding is, which cudaMalloc'd and 16-byte-aligned offsets guarantee).
__device__ __forceinline__ void Params(const BlockFormat f, const uint8_t* enc, uint64_t i,
                                       float* d, float* m) {
  const uint64_t b = i / f.block;
  const float* p = reinterpret_cast<const float*>(enc);
  if (f.symmetric) {
    *d = p[b];
    *m = 0.0f;
  } else {
    *d = p[2 * b];
    *m = p[2 * b + 1];
  }
}

template <DataType T>
__global__ void ParamsKernel(const BlockFormat f, const void* src, uint64_t n, uint8_t* enc) {
  const uint64_t nb = NumBlocks(f, n);
  const uint64_t warp = (blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x) / 32;
  const uint64_t nwarps = gridDim.x * static_cast<uint64_t>(blockDim.x) / 32;
  const unsigned lane = threadIdx.x % 32;
  if (warp == 0 && lane == 0) {
    const uint64_t params = ParamsBytes(f, n), codes_at = CodesOffset(f, n);
    const uint64_t codes_end = codes_at + CodesBytes(f, n), total = EncodedBytes(f, n);
    for (uint64_t k = params; k < codes_at; ++k) enc[k] = 0;
    for (uint64_t k = codes_end; k < total; ++k) enc[k] = 0;
  }
  for (uint64_t b = warp; b < nb; b += nwarps) {
    const uint64_t s = b * f.block, e = s + f.block < n ? s + f.block : n;
    uint32_t amax = 0;
    float lo = __uint_as_float(0x7f800000u), hi = -lo;
    for (uint64_t i = s + lane; i < e; i += 32) {
      const float x = Load<T>(src, i);
      const uint32_t a = __float_as_uint(x) & 0x7fffffffu;
      amax = a > amax ? a : amax;
      lo = x < lo ? x : lo;
      hi = x > hi ? x : hi;
    }
    for (int o = 16; o > 0; o /= 2) {
      const uint32_t a = gpu::ShflXor32(amax, o);
      const float l = gpu::ShflXor32(lo, o);
      const float h = gpu::ShflXor32(hi, o);
      amax = a > amax ? a : amax;
      lo = l < lo ? l : lo;
      hi = h > hi ? h : hi;
    }
    if (lane != 0) continue;
    float* p = reinterpret_cast<float*>(enc);
    if (f.symmetric) {
      p[b] = SymmetricScale(amax, f.bits);
    } else {
      float d, m;
      if (NonFiniteAbsBits(amax))
        d = m = __uint_as_float(kNanBitsF32);
      else
        AsymmetricParams(lo, hi, f.bits, &d, &m);
      p[2 * b] = d;
      p[2 * b + 1] = m;
    }
  }
}

template <DataType T>
__device__ __forceinline__ int32_t Code(const BlockFormat f, const void* src, const uint8_t* enc,
                                        uint64_t i) {
  float d, m;
  Params(f, enc, i, &d, &m);
  if (Poisoned(d)) return 0;
  const float x = Load<T>(src, i);
  return f.symmetric ? SymmetricCode(x, d, f.bits) : AsymmetricCode(x, d, m, f.bits);
}

template <DataType T>
__global__ void CodesKernel(const BlockFormat f, const void* src, uint64_t n, uint8_t* enc) {
  uint8_t* codes = enc + CodesOffset(f, n);
  const uint64_t nbytes = CodesBytes(f, n);
  const uint64_t stride = gridDim.x * static_cast<uint64_t>(blockDim.x);
  for (uint64_t k = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; k < nbytes;
       k += stride) {
    if (f.bits == 8) {
      codes[k] = static_cast<uint8_t>(Code<T>(f, src, enc, k));
    } else {
      const int32_t hi = Code<T>(f, src, enc, 2 * k);
      const int32_t lo = 2 * k + 1 < n ? Code<T>(f, src, enc, 2 * k + 1) : 0;
      codes[k] = static_cast<uint8_t>(((hi & 0xF) << 4) | (lo & 0xF));
    }
  }
}

template <DataType T>
__device__ __forceinline__ void DecodeOne(const BlockFormat f, const uint8_t* enc, uint64_t i,
                                          uint32_t code, void* dst, bool reduce) {
  float d, m;
  Params(f, enc, i, &d, &m);
  if (Poisoned(d)) {
    StoreNan<T>(dst, i);
    return;
  }
  int32_t q;
  if (f.bits == 8)
    q = f.symmetric ? static_cast<int8_t>(code) : static_cast<int32_t>(code);
  else
    q = f.symmetric ? SignExtend4(code) : static_cast<int32_t>(code);
  float v = f.symmetric ? SymmetricValue(q, d) : AsymmetricValue(q, d, m);
  if (reduce) v = __fadd_rn(Load<T>(dst, i), v);
  Store<T>(dst, i, v);
}

template <DataType T>
__global__ void DecodeKernel(const BlockFormat f, const uint8_t* enc, uint64_t n, void* dst,
                             bool reduce) {
  const uint8_t* codes = enc + CodesOffset(f, n);
  const uint64_t nbytes = CodesBytes(f, n);
  const uint64_t stride = gridDim.x * static_cast<uint64_t>(blockDim.x);
  for (uint64_t k = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; k < nbytes;
       k += stride) {
    const uint32_t byte = codes[k];
    if (f.bits == 8) {
      DecodeOne<T>(f, enc, k, byte, dst, reduce);
    } else {
      DecodeOne<T>(f, enc, 2 * k, byte >> 4, dst, reduce);
      if (2 * k + 1 < n) DecodeOne<T>(f, enc, 2 * k + 1, byte & 0xFu, dst, reduce);
    }
  }
}

// ---------------------------------------------------------------- fast path: G % 8 == 0
// The kernels above move a byte per thread and read every element's parameters from memory;
// on an H100 that reached 0.07-0.5 of a device-to-device copy. The ones below are what runs when
// G is a multiple of 8 and both buffers are 16-byte aligned (cudaMalloc'd memory, whole
// encodings): the data is cut into chunks of 8 elements, so a chunk never straddles two blocks,
// its typed side is one or two 16-byte accesses (fp32: 32 bytes, fp16/bf16: 16 bytes) and its
// codes one 8-byte (INT8) or 4-byte (INT4) word that one thread writes whole. Encode is one pass:
// the threads of a block's chunks reduce its statistics among themselves (warp shuffles; a thread
// block and shared memory for large G) and quantize the chunks they still hold in registers.

constexpr unsigned kThreads = 256;
constexpr unsigned kChunk = 8;  // elements per chunk
// Chunks a thread keeps in registers between the statistics and the codes; further chunks of the
// same block are read again (from L1/L2: the block was just read). 2 in the lane-group kernel
// (no re-read up to G = 512), 4 in the thread-block kernel (none up to G = 8192 for fp32 with 256
// threads, G = 4096 for fp16/bf16 with 128).
constexpr unsigned kLaneCache = 2;
constexpr unsigned kBlockCache = 4;

// 1.5 * 2^23: adding it to a float v with |v| <= 2^22 rounds v to an integer, half to even (the
// default rounding of the add), and leaves that integer, two's complement, in the low mantissa
// bits. Exact for the codes' range [-128, 255]: the same result as rint + a conversion, on the
// FP32 pipe instead of the slower conversion unit.
constexpr float kRoundMagic = 12582912.0f;
// 2^23: FromBits(0x4B000000 | k) - 2^23 == k exactly for 0 <= k < 2^23 (int -> float without the
// conversion unit).
constexpr uint32_t kIntMagicBits = 0x4B000000u;
constexpr float kIntMagic = 8388608.0f;

// NaN-propagating min and max (gpu::MaxNan/MinNan: PTX max.NaN/min.NaN on sm_80 and later, one
// FMNMX each): a NaN anywhere in a block makes its statistic NaN and an infinity makes it
// infinite, so "the statistics are not finite" is exactly the reference's poisoned-block rule,
// with no separate max of the |x| bits (fminf/fmaxf drop NaNs) and one instruction per element and
// statistic where the device has one.
using gpu::MaxNan;
using gpu::MinNan;

// A block's statistics. Symmetric: a = max |x| (the same value as the reference's unsigned max
// of the sign-cleared bits, for every non-NaN input), b unused. Asymmetric: a = min, b = max.
// Merging is order-independent: max/min are, and the sign of a zero does not matter (|x| is
// +0; AsymmetricParams adds +0 to the min, and max - min of zeros is a zero either way).
struct Stats {
  float a, b;
};

template <bool Sym>
__device__ __forceinline__ Stats NoStats() {
  if (Sym) return {0.0f, 0.0f};
  return {__uint_as_float(0x7f800000u), __uint_as_float(0xff800000u)};
}

template <bool Sym>
__device__ __forceinline__ void Merge(Stats& s, const Stats& o) {
  if (Sym) {
    s.a = MaxNan(s.a, o.a);
  } else {
    s.a = MinNan(s.a, o.a);
    s.b = MaxNan(s.b, o.b);
  }
}

template <bool Sym>
__device__ __forceinline__ void Accumulate(Stats& s, const float (&v)[kChunk]) {
#pragma unroll
  for (unsigned j = 0; j < kChunk; ++j) {
    if (Sym) {
      s.a = MaxNan(s.a, fabsf(v[j]));
    } else {
      s.a = MinNan(s.a, v[j]);
      s.b = MaxNan(s.b, v[j]);
    }
  }
}

template <bool Sym>
__device__ __forceinline__ Stats Shuffle(const Stats& s, unsigned offset) {
  Stats o;
  o.a = gpu::ShflXor32(s.a, offset);
  if (!Sym) o.b = gpu::ShflXor32(s.b, offset);
  return o;
}

template <DataType T>
__device__ __forceinline__ void Widen2(uint32_t w, float& a, float& b) {
  if constexpr (T == DataType::kBfloat16) {
    a = __uint_as_float(w << 16);
    b = __uint_as_float(w & 0xffff0000u);
  } else {
    // Exact for every finite value and infinity (subnormals kept; the NaN payload may differ from
    // HalfToFloat's, which no result depends on: a NaN poisons its block).
    gpu::Half2ToFloats(w, a, b);
  }
}

// Narrows two floats (first one at the lower address), rounding to nearest even without flushing
// subnormals, as FloatToBf16/FloatToHalf do for every non-NaN value (a NaN never reaches it:
// poisoned blocks store the canonical NaN).
template <DataType T>
__device__ __forceinline__ uint32_t Narrow2(float a, float b) {
  if constexpr (T == DataType::kBfloat16)
    return gpu::FloatsToBf162Rn(a, b);
  else
    return gpu::FloatsToHalf2Rn(a, b);
}

// Elements [e0, e0 + 8) into v; past n (the last chunk), v holds copies of v[0], which change
// neither the statistics nor anything stored (the codes past n are cleared, the values dropped).
template <DataType T>
__device__ __forceinline__ void LoadChunk(const void* __restrict__ src, uint64_t e0, uint64_t n,
                                          float (&v)[kChunk]) {
  if (e0 + kChunk <= n) {
    if constexpr (T == DataType::kFloat32) {
      const float4* p = reinterpret_cast<const float4*>(static_cast<const float*>(src) + e0);
      const float4 a = p[0], b = p[1];
      v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z,
      v[7] = b.w;
    } else {
      const uint4 w = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(src) + e0);
      Widen2<T>(w.x, v[0], v[1]);
      Widen2<T>(w.y, v[2], v[3]);
      Widen2<T>(w.z, v[4], v[5]);
      Widen2<T>(w.w, v[6], v[7]);
    }
  } else {
    v[0] = Load<T>(src, e0);
#pragma unroll
    for (unsigned j = 1; j < kChunk; ++j) v[j] = e0 + j < n ? Load<T>(src, e0 + j) : v[0];
  }
}

template <int Bits, bool Sym>
__device__ __forceinline__ void ParamsOf(const Stats& s, float* d, float* m) {
  if (Sym) {
    *d = SymmetricScale(__float_as_uint(s.a) & 0x7fffffffu, Bits);
    *m = 0.0f;
  } else if (NonFiniteAbsBits(__float_as_uint(s.a) & 0x7fffffffu) ||
             NonFiniteAbsBits(__float_as_uint(s.b) & 0x7fffffffu)) {
    *d = *m = __uint_as_float(kNanBitsF32);
  } else {
    AsymmetricParams(s.a, s.b, Bits, d, m);
  }
}

// SymmetricCode / AsymmetricCode, with the rounding and conversion done by kRoundMagic: returns
// an integer whose low `Bits` bits are the code. IEEE division (__fdiv_rn) and clamping before
// rounding, as the reference; fminf/fmaxf equal its compares for every non-NaN quotient (a
// finite x over a finite d > 0 never gives NaN).
template <int Bits, bool Sym>
__device__ __forceinline__ uint32_t CodeBits(float x, float d, float m) {
  // A zero dividend divides to a zero and codes 0; it is kept out of the division because it
  // sends __fdiv_rn down its slow path (FCHK), ~10x the fast one, and zeros are common: the min
  // of every asymmetric block, ReLU outputs, padding, constant data.
  const float num = Sym ? x : __fsub_rn(x, m);
  float v = __fdiv_rn(num == 0.0f ? 1.0f : num, d);
  v = num == 0.0f ? 0.0f : v;
  if (Sym) {
    v = fminf(fmaxf(v, -static_cast<float>(1 << (Bits - 1))),
              static_cast<float>((1 << (Bits - 1)) - 1));
  } else {
    v = fminf(fmaxf(v, 0.0f), static_cast<float>((1 << Bits) - 1));
  }
  return __float_as_uint(__fadd_rn(v, kRoundMagic));
}

// Quantizes and stores one chunk (elements [e0, e0 + 8), codes past n cleared).
template <int Bits, bool Sym>
__device__ __forceinline__ void StoreCodes(const float (&v)[kChunk], float d, float m, uint64_t e0,
                                           uint64_t n, uint8_t* __restrict__ codes) {
  uint32_t c[kChunk] = {};
  if (!Poisoned(d)) {  // a poisoned block's codes are all 0
#pragma unroll
    for (unsigned j = 0; j < kChunk; ++j) c[j] = CodeBits<Bits, Sym>(v[j], d, m);
  }
  const bool full = e0 + kChunk <= n;
  if (!full) {
#pragma unroll
    for (unsigned j = 1; j < kChunk; ++j) c[j] = e0 + j < n ? c[j] : 0u;
  }
  if (Bits == 8) {
    // Low bytes of c[0..3] -> one word, PRMT by PRMT.
    const uint32_t w0 =
        __byte_perm(__byte_perm(c[0], c[1], 0x0040), __byte_perm(c[2], c[3], 0x0040), 0x5410);
    const uint32_t w1 =
        __byte_perm(__byte_perm(c[4], c[5], 0x0040), __byte_perm(c[6], c[7], 0x0040), 0x5410);
    if (full) {
      *reinterpret_cast<uint2*>(codes + e0) = make_uint2(w0, w1);
    } else {
      const uint64_t w = static_cast<uint64_t>(w1) << 32 | w0;
#pragma unroll
      for (unsigned j = 0; j < kChunk; ++j)
        if (e0 + j < n) codes[e0 + j] = static_cast<uint8_t>(w >> (8 * j));
    }
  } else {
    uint32_t b[4];
#pragma unroll
    for (unsigned k = 0; k < 4; ++k) b[k] = ((c[2 * k] & 0xFu) << 4) | (c[2 * k + 1] & 0xFu);
    const uint32_t w =
        __byte_perm(__byte_perm(b[0], b[1], 0x0040), __byte_perm(b[2], b[3], 0x0040), 0x5410);
    if (full) {
      *reinterpret_cast<uint32_t*>(codes + e0 / 2) = w;
    } else {
#pragma unroll
      for (unsigned k = 0; k < kChunk / 2; ++k)
        if (e0 + 2 * k < n) codes[e0 / 2 + k] = static_cast<uint8_t>(w >> (8 * k));
    }
  }
}

template <bool Sym>
__device__ __forceinline__ void StoreParams(uint8_t* __restrict__ enc, uint64_t b, float d,
                                            float m) {
  if (Sym)
    reinterpret_cast<float*>(enc)[b] = d;
  else
    reinterpret_cast<float2*>(enc)[b] = make_float2(d, m);
}

__device__ __forceinline__ void ZeroPadding(const BlockFormat f, uint64_t n, uint8_t* enc) {
  const uint64_t params = ParamsBytes(f, n), codes_at = CodesOffset(f, n);
  const uint64_t codes_end = codes_at + CodesBytes(f, n), total = EncodedBytes(f, n);
  for (uint64_t k = params; k < codes_at; ++k) enc[k] = 0;
  for (uint64_t k = codes_end; k < total; ++k) enc[k] = 0;
}

// G <= 2048: a group of `lanes` (a power of two <= 32, <= G / 16 where G allows) consecutive
// lanes of a warp per block, so a warp covers 32 / lanes blocks at once and the statistics are a
// few shuffles (G = 32: 2 lanes of 2 chunks, 16 blocks per warp, 1 shuffle round). Lane `sub` of a
// group takes the block's chunks sub, sub + lanes, ...: together the warp's loads read one
// contiguous span (each instruction alone covers only part of it; the L1 serves the rest).
template <DataType T, int Bits, bool Sym>
__global__ void __launch_bounds__(kThreads)
    QuantizeLanes(const BlockFormat f, const void* __restrict__ src, uint64_t n,
                  uint8_t* __restrict__ enc, unsigned lanes_log2) {
  const uint64_t nb = NumBlocks(f, n);
  const uint32_t G = f.block, cpb = G / kChunk;
  uint8_t* codes = enc + CodesOffset(f, n);
  const unsigned lanes = 1u << lanes_log2, lane = threadIdx.x & 31u, sub = lane & (lanes - 1);
  const uint64_t warp = (blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x) >> 5;
  const uint64_t nwarps = gridDim.x * static_cast<uint64_t>(blockDim.x) >> 5;
  const unsigned bpw = 32u >> lanes_log2;
  if (blockIdx.x == 0 && threadIdx.x == 0) ZeroPadding(f, n, enc);
  // The loop bound is the same for the whole warp, so every lane reaches the shuffles.
  for (uint64_t b0 = warp * bpw; b0 < nb; b0 += nwarps * bpw) {
    const uint64_t b = b0 + (lane >> lanes_log2);
    const bool active = b < nb;
    const uint64_t s = b * G;
    const uint32_t len = active ? static_cast<uint32_t>(s + G < n ? G : n - s) : 0u;
    Stats st = NoStats<Sym>();
    float cache[kLaneCache][kChunk];
#pragma unroll
    for (unsigned k = 0; k < kLaneCache; ++k) {
      const uint32_t j = sub + k * lanes;
      if (j < cpb && j * kChunk < len) {
        LoadChunk<T>(src, s + j * kChunk, n, cache[k]);
        Accumulate<Sym>(st, cache[k]);
      }
    }
    for (uint32_t j = sub + kLaneCache * lanes; j < cpb && j * kChunk < len; j += lanes) {
      float v[kChunk];
      LoadChunk<T>(src, s + j * kChunk, n, v);
      Accumulate<Sym>(st, v);
    }
    for (unsigned o = lanes >> 1; o > 0; o >>= 1) Merge<Sym>(st, Shuffle<Sym>(st, o));
    if (!active) continue;
    float d, m;
    ParamsOf<Bits, Sym>(st, &d, &m);
    if (sub == 0) StoreParams<Sym>(enc, b, d, m);
#pragma unroll
    for (unsigned k = 0; k < kLaneCache; ++k) {
      const uint32_t j = sub + k * lanes;
      if (j < cpb && j * kChunk < len)
        StoreCodes<Bits, Sym>(cache[k], d, m, s + j * kChunk, n, codes);
    }
    for (uint32_t j = sub + kLaneCache * lanes; j < cpb && j * kChunk < len; j += lanes) {
      float v[kChunk];
      LoadChunk<T>(src, s + j * kChunk, n, v);
      StoreCodes<Bits, Sym>(v, d, m, s + j * kChunk, n, codes);
    }
  }
}

// G > 2048: a thread block per block of G elements (its threads take chunks tid, tid + Threads,
// ...), statistics reduced by shuffles then through shared memory; grid-stride over the blocks.
template <DataType T, int Bits, bool Sym, unsigned Threads>
__global__ void __launch_bounds__(Threads)
    QuantizeBlocks(const BlockFormat f, const void* __restrict__ src, uint64_t n,
                   uint8_t* __restrict__ enc) {
  __shared__ Stats partial[Threads / 32];
  const uint64_t nb = NumBlocks(f, n);
  const uint32_t G = f.block;
  uint8_t* codes = enc + CodesOffset(f, n);
  const unsigned tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
  if (blockIdx.x == 0 && tid == 0) ZeroPadding(f, n, enc);
  for (uint64_t b = blockIdx.x; b < nb; b += gridDim.x) {
    const uint64_t s = b * G;
    const uint32_t len = static_cast<uint32_t>(s + G < n ? G : n - s);
    Stats st = NoStats<Sym>();
    float cache[kBlockCache][kChunk];
#pragma unroll
    for (unsigned k = 0; k < kBlockCache; ++k) {
      const uint32_t j = tid + k * Threads;
      if (j * kChunk < len) {
        LoadChunk<T>(src, s + j * kChunk, n, cache[k]);
        Accumulate<Sym>(st, cache[k]);
      }
    }
    for (uint32_t j = tid + kBlockCache * Threads; j * kChunk < len; j += Threads) {
      float v[kChunk];
      LoadChunk<T>(src, s + j * kChunk, n, v);
      Accumulate<Sym>(st, v);
    }
    for (unsigned o = 16; o > 0; o >>= 1) Merge<Sym>(st, Shuffle<Sym>(st, o));
    if (lane == 0) partial[warp] = st;
    __syncthreads();
    st = partial[0];
#pragma unroll
    for (unsigned w = 1; w < Threads / 32; ++w) Merge<Sym>(st, partial[w]);
    __syncthreads();  // `partial` is rewritten by the next block's statistics
    float d, m;
    ParamsOf<Bits, Sym>(st, &d, &m);
    if (tid == 0) StoreParams<Sym>(enc, b, d, m);
#pragma unroll
    for (unsigned k = 0; k < kBlockCache; ++k) {
      const uint32_t j = tid + k * Threads;
      if (j * kChunk < len) StoreCodes<Bits, Sym>(cache[k], d, m, s + j * kChunk, n, codes);
    }
    for (uint32_t j = tid + kBlockCache * Threads; j * kChunk < len; j += Threads) {
      float v[kChunk];
      LoadChunk<T>(src, s + j * kChunk, n, v);
      StoreCodes<Bits, Sym>(v, d, m, s + j * kChunk, n, codes);
    }
  }
}

// Decode works on units of E = 16 / sizeof(T) elements (fp32: 4, fp16/bf16: 8): one 16-byte
// store per unit, so consecutive lanes write consecutive 16-byte pieces and every warp store
// covers whole 32-byte sectors. (Chunks of 8 fp32, two float4 stores a lane, left each store
// instruction half of every sector: fp32 dequantize reached 0.62-0.69 of memcpy on an H100.)
template <DataType T>
constexpr unsigned kUnit = T == DataType::kFloat32 ? 4 : 8;

// Values of one unit's codes as floats (exact small integers), from its INT8 code bytes (w0, then
// w1 for bytes 4-7) or INT4 code bytes (w0); magic-number conversion (kIntMagic) instead of I2F.
template <int Bits, bool Sym, unsigned E>
__device__ __forceinline__ void CodeValues(uint32_t w0, uint32_t w1, float (&q)[E]) {
  if (Bits == 8) {
    // Symmetric codes are two's complement: flipping the sign bit biases them by 128.
    const uint32_t flip = Sym ? 0x80808080u : 0u;
    const float bias = Sym ? kIntMagic + 128.0f : kIntMagic;
    w0 ^= flip;
    w1 ^= flip;
#pragma unroll
    for (unsigned j = 0; j < E; ++j) {
      // bytes (code, 0, 0, 0x4B): 0x4B0000xx
      const uint32_t w = j < 4 ? w0 : w1;
      q[j] =
          __fsub_rn(__uint_as_float(__byte_perm(w, kIntMagicBits >> 16, 0x5440 | (j & 3))), bias);
    }
  } else {
    const uint32_t flip = Sym ? 0x88888888u : 0u;
    const float bias = Sym ? kIntMagic + 8.0f : kIntMagic;
    w0 ^= flip;
#pragma unroll
    for (unsigned k = 0; k < E / 2; ++k) {
      q[2 * k] = __fsub_rn(__uint_as_float(((w0 >> (8 * k + 4)) & 0xFu) | kIntMagicBits), bias);
      q[2 * k + 1] = __fsub_rn(__uint_as_float(((w0 >> (8 * k)) & 0xFu) | kIntMagicBits), bias);
    }
  }
}

// Elements [e0, e0 + E) of a typed buffer (16 bytes), widened; past n, copies of v[0].
template <DataType T, unsigned E>
__device__ __forceinline__ void LoadUnit(const void* __restrict__ p, uint64_t e0, uint64_t n,
                                         float (&v)[E]) {
  if (e0 + E <= n) {
    if constexpr (T == DataType::kFloat32) {
      const float4 a = *reinterpret_cast<const float4*>(static_cast<const float*>(p) + e0);
      v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
    } else {
      const uint4 w = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p) + e0);
      Widen2<T>(w.x, v[0], v[1]);
      Widen2<T>(w.y, v[2], v[3]);
      Widen2<T>(w.z, v[4], v[5]);
      Widen2<T>(w.w, v[6], v[7]);
    }
  } else {
    v[0] = Load<T>(p, e0);
#pragma unroll
    for (unsigned j = 1; j < E; ++j) v[j] = e0 + j < n ? Load<T>(p, e0 + j) : v[0];
  }
}

// Decode: a thread per unit (any G % 8 == 0: a unit has one block), grid-stride; kDecodeUnroll
// units per thread per round, all loads issued before the first use.
// (H100: 4 was no faster for fp32 and 10-20% slower for 16-bit dequantize-reduce; streaming
// stores, __stcs, changed nothing.)
constexpr unsigned kDecodeUnroll = 2;

template <DataType T, int Bits, bool Sym, bool Reduce>
__global__ void __launch_bounds__(kThreads)
    DecodeUnits(const BlockFormat f, const uint8_t* __restrict__ enc, uint64_t n,
                void* __restrict__ dst) {
  constexpr unsigned E = kUnit<T>;
  const uint8_t* codes = enc + CodesOffset(f, n);
  const uint32_t upb = f.block / E;
  const uint32_t nunits = static_cast<uint32_t>((n + E - 1) / E);
  const uint32_t stride = gridDim.x * blockDim.x;
  for (uint32_t c0 = blockIdx.x * blockDim.x + threadIdx.x; c0 < nunits;
       c0 += kDecodeUnroll * stride) {
    uint32_t w[kDecodeUnroll][2];
    float d[kDecodeUnroll], m[kDecodeUnroll];
    float acc[kDecodeUnroll][E];
#pragma unroll
    for (unsigned u = 0; u < kDecodeUnroll; ++u) {
      const uint32_t c = c0 + u * stride;
      if (c >= nunits) break;
      const uint64_t e0 = static_cast<uint64_t>(c) * E;
      const bool full = e0 + E <= n;
      const uint32_t b = c / upb;
      if (Sym) {
        d[u] = reinterpret_cast<const float*>(enc)[b];
        m[u] = 0.0f;
      } else {
        const float2 p = reinterpret_cast<const float2*>(enc)[b];
        d[u] = p.x;
        m[u] = p.y;
      }
      w[u][0] = w[u][1] = 0;
      if (full) {
        if (Bits == 8 && E == 8) {
          const uint2 x = *reinterpret_cast<const uint2*>(codes + e0);
          w[u][0] = x.x, w[u][1] = x.y;
        } else if (Bits == 8 || E == 8) {  // 4 code bytes
          w[u][0] = *reinterpret_cast<const uint32_t*>(codes + e0 * Bits / 8);
        } else {  // INT4, 4 elements: 2 code bytes
          w[u][0] = *reinterpret_cast<const uint16_t*>(codes + e0 / 2);
        }
      } else if (Bits == 8) {
#pragma unroll
        for (unsigned j = 0; j < E; ++j)
          if (e0 + j < n) w[u][j / 4] |= static_cast<uint32_t>(codes[e0 + j]) << (8 * (j & 3));
      } else {
#pragma unroll
        for (unsigned k = 0; k < E / 2; ++k)
          if (e0 + 2 * k < n) w[u][0] |= static_cast<uint32_t>(codes[e0 / 2 + k]) << (8 * k);
      }
      if (Reduce) LoadUnit<T, E>(dst, e0, n, acc[u]);
    }
#pragma unroll
    for (unsigned u = 0; u < kDecodeUnroll; ++u) {
      const uint32_t c = c0 + u * stride;
      if (c >= nunits) break;
      const uint64_t e0 = static_cast<uint64_t>(c) * E;
      float v[E];
      if (Poisoned(d[u])) {
#pragma unroll
        for (unsigned j = 0; j < E; ++j) v[j] = __uint_as_float(kNanBitsF32);
      } else {
        float q[E];
        CodeValues<Bits, Sym, E>(w[u][0], w[u][1], q);
#pragma unroll
        for (unsigned j = 0; j < E; ++j) {
          v[j] = Sym ? __fmul_rn(q[j], d[u]) : __fadd_rn(m[u], __fmul_rn(q[j], d[u]));
          if (Reduce) v[j] = __fadd_rn(acc[u][j], v[j]);
        }
      }
      if (e0 + E <= n) {
        if constexpr (T == DataType::kFloat32) {
          *reinterpret_cast<float4*>(static_cast<float*>(dst) + e0) =
              make_float4(v[0], v[1], v[2], v[3]);
        } else if (Poisoned(d[u])) {
          const uint32_t nan =
              T == DataType::kFloat16 ? kNanBitsF16 * 0x10001u : kNanBitsBf16 * 0x10001u;
          *reinterpret_cast<uint4*>(static_cast<uint16_t*>(dst) + e0) =
              make_uint4(nan, nan, nan, nan);
        } else {
          *reinterpret_cast<uint4*>(static_cast<uint16_t*>(dst) + e0) =
              make_uint4(Narrow2<T>(v[0], v[1]), Narrow2<T>(v[2], v[3]), Narrow2<T>(v[4], v[5]),
                         Narrow2<T>(v[6], v[7]));
        }
      } else {
#pragma unroll
        for (unsigned j = 0; j < E; ++j) {
          if (e0 + j >= n) break;
          if (Poisoned(d[u]))
            StoreNan<T>(dst, e0 + j);
          else
            Store<T>(dst, e0 + j, v[j]);
        }
      }
    }
  }
}

Status Check(const BlockFormat& f, DataType type, const char* what) {
  if (!IsValidFormat(f))
    return InvalidArgument(std::string(BRAID_GPU_RUNTIME_NAME " block codec ") + what +
                           ": invalid format (bits " + std::to_string(f.bits) + ", block " +
                           std::to_string(f.block) + ")");
  if (type != DataType::kFloat32 && type != DataType::kFloat16 && type != DataType::kBfloat16)
    return InvalidArgument(std::string(BRAID_GPU_RUNTIME_NAME " block codec ") + what +
                           ": cannot handle " + DataTypeName(type) +
                           " (float, half and bfloat16 only)");
  return Status::Ok();
}

Status Launched(const char* what) {
  const gpuError_t e = gpuGetLastError();
  if (e == gpuSuccess) return Status::Ok();
  return SystemError(std::string(BRAID_GPU_RUNTIME_NAME " block codec ") + what +
                     ": kernel launch failed: " + gpuGetErrorName(e) + " (" + gpuGetErrorString(e) +
                     ")");
}

unsigned Grid(uint64_t threads, unsigned block) {
  const uint64_t g = (threads + block - 1) / block;
  return static_cast<unsigned>(g < 65535u * 16u ? (g ? g : 1) : 65535u * 16u);
}

// Grid of the fast kernels: as many 256-thread blocks as fit on the device at once (the
// occupancy calculator, so the register count decides), fewer when there is less work; the
// kernels loop grid-stride over the rest, so the grid is one full wave.
template <typename Kernel>
unsigned FullGrid(Kernel kernel, uint64_t work_threads, unsigned threads = kThreads) {
  int dev = 0, sms = 0, per_sm = 0;
  if (gpuGetDevice(&dev) != gpuSuccess ||
      gpuDeviceGetAttribute(&sms, gpuDevAttrMultiProcessorCount, dev) != gpuSuccess || sms <= 0)
    sms = 132;
  if (gpuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0) != gpuSuccess ||
      per_sm <= 0)
    per_sm = 2048 / threads;
  const uint64_t want = (work_threads + threads - 1) / threads;
  const uint64_t full = static_cast<uint64_t>(sms) * per_sm;
  return static_cast<unsigned>(want < full ? (want ? want : 1) : full);
}

// Whether the fast kernels apply: chunks of 8 inside one block, 16-byte aligned typed buffer and
// encoding (vector accesses), and chunk and unit indices that fit 32 bits (n < 2^34).
bool Fast(const BlockFormat& f, const void* typed, const void* enc, uint64_t n) {
  return f.block % kChunk == 0 && reinterpret_cast<uintptr_t>(typed) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(enc) % 16 == 0 && n < (1ull << 34);
}

template <DataType T, int Bits, bool Sym>
void LaunchQuantizeFast(const BlockFormat& f, const void* src, uint64_t n, uint8_t* dst,
                        gpuStream_t s) {
  const uint64_t nb = NumBlocks(f, n);
  const uint32_t cpb = f.block / kChunk;
  // Two chunks per lane where the block has them (G = 32: two lanes per block, 16 blocks per
  // warp): more independent loads and divisions per thread, half the shuffles. H100, G = 32
  // quantize: one chunk per lane reached 0.42-0.58 of memcpy for bf16 and 0.72-0.89 for fp32,
  // two 0.56-0.78 and 0.82-0.87; four (16-bit) helped INT4 and slowed INT8, kept at two.
  // The thread-block kernel gives 16-bit types half the threads for the same reason (a 16-bit
  // chunk is half the bytes of an fp32 one).
  const uint32_t per_thread = 2;
  if (cpb <= 256) {
    unsigned log2 = 0;
    while (log2 < 5 && (2u << log2) * per_thread <= cpb) ++log2;
    auto* k = QuantizeLanes<T, Bits, Sym>;
    k<<<FullGrid(k, nb << log2), kThreads, 0, s>>>(f, src, n, dst, log2);
  } else {
    constexpr unsigned threads = T == DataType::kFloat32 ? 256 : 128;
    auto* k = QuantizeBlocks<T, Bits, Sym, threads>;
    k<<<FullGrid(k, nb * threads, threads), threads, 0, s>>>(f, src, n, dst);
  }
}

template <DataType T>
void LaunchQuantize(const BlockFormat& f, const void* src, uint64_t n, uint8_t* dst,
                    gpuStream_t s) {
  if (Fast(f, src, dst, n)) {
    if (f.bits == 8 && f.symmetric) return LaunchQuantizeFast<T, 8, true>(f, src, n, dst, s);
    if (f.bits == 8) return LaunchQuantizeFast<T, 8, false>(f, src, n, dst, s);
    if (f.symmetric) return LaunchQuantizeFast<T, 4, true>(f, src, n, dst, s);
    return LaunchQuantizeFast<T, 4, false>(f, src, n, dst, s);
  }
  ParamsKernel<T><<<Grid(NumBlocks(f, n) * 32, 256), 256, 0, s>>>(f, src, n, dst);
  CodesKernel<T><<<Grid(CodesBytes(f, n), 256), 256, 0, s>>>(f, src, n, dst);
}

template <DataType T, int Bits, bool Sym>
void LaunchDecodeFast(const BlockFormat& f, const uint8_t* src, uint64_t n, void* dst, bool reduce,
                      gpuStream_t s) {
  auto* k = reduce ? DecodeUnits<T, Bits, Sym, true> : DecodeUnits<T, Bits, Sym, false>;
  k<<<FullGrid(k, (n + kUnit<T> - 1) / kUnit<T>), kThreads, 0, s>>>(f, src, n, dst);
}

template <DataType T>
void LaunchDecode(const BlockFormat& f, const uint8_t* src, uint64_t n, void* dst, bool reduce,
                  gpuStream_t s) {
  if (Fast(f, dst, src, n)) {
    if (f.bits == 8 && f.symmetric) return LaunchDecodeFast<T, 8, true>(f, src, n, dst, reduce, s);
    if (f.bits == 8) return LaunchDecodeFast<T, 8, false>(f, src, n, dst, reduce, s);
    if (f.symmetric) return LaunchDecodeFast<T, 4, true>(f, src, n, dst, reduce, s);
    return LaunchDecodeFast<T, 4, false>(f, src, n, dst, reduce, s);
  }
  DecodeKernel<T><<<Grid(CodesBytes(f, n), 256), 256, 0, s>>>(f, src, n, dst, reduce);
}

Status Decode(const BlockFormat& f, DataType type, const void* src, uint64_t n, void* dst,
              void* stream, bool reduce) {
  const char* what = reduce ? "dequantize-reduce" : "dequantize";
  BRAID_RETURN_IF_ERROR(Check(f, type, what));
  if (n == 0) return Status::Ok();
  auto* in = static_cast<const uint8_t*>(src);
  auto s = static_cast<gpuStream_t>(stream);
  if (type == DataType::kFloat32)
    LaunchDecode<DataType::kFloat32>(f, in, n, dst, reduce, s);
  else if (type == DataType::kFloat16)
    LaunchDecode<DataType::kFloat16>(f, in, n, dst, reduce, s);
  else
    LaunchDecode<DataType::kBfloat16>(f, in, n, dst, reduce, s);
  return Launched(what);
}

}  // namespace

Status Quantize(const BlockFormat& f, DataType type, const void* src, uint64_t n, void* dst,
                void* stream) {
  BRAID_RETURN_IF_ERROR(Check(f, type, "quantize"));
  if (n == 0) return Status::Ok();
  auto* out = static_cast<uint8_t*>(dst);
  auto s = static_cast<gpuStream_t>(stream);
  if (type == DataType::kFloat32)
    LaunchQuantize<DataType::kFloat32>(f, src, n, out, s);
  else if (type == DataType::kFloat16)
    LaunchQuantize<DataType::kFloat16>(f, src, n, out, s);
  else
    LaunchQuantize<DataType::kBfloat16>(f, src, n, out, s);
  return Launched("quantize");
}

Status Dequantize(const BlockFormat& f, DataType type, const void* src, uint64_t n, void* dst,
                  void* stream) {
  return Decode(f, type, src, n, dst, stream, false);
}

Status DequantizeReduce(const BlockFormat& f, DataType type, const void* src, uint64_t n, void* dst,
                        void* stream) {
  return Decode(f, type, src, n, dst, stream, true);
}

}  // namespace braid::quant::cuda
