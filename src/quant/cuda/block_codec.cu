// CUDA kernels of the block codecs. Two passes per encode: one warp per block computes its
// parameters (and thread 0 writes the layout's padding), then one thread per code byte quantizes
// with its elements' block parameters, so an INT4 byte shared by two blocks (odd G) has a single
// writer. Decode is one thread per code byte. All arithmetic is block_math.h's, compiled with
// --fmad=false and IEEE division, so the bytes equal the CPU reference's.
#include <cuda_runtime.h>

#include <string>

#include "quant/block_math.h"
#include "quant/cuda/block_codec_cuda.h"

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
      const uint32_t a = __shfl_xor_sync(0xffffffffu, amax, o);
      const float l = __shfl_xor_sync(0xffffffffu, lo, o);
      const float h = __shfl_xor_sync(0xffffffffu, hi, o);
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

Status Check(const BlockFormat& f, DataType type, const char* what) {
  if (!IsValidFormat(f))
    return InvalidArgument(std::string("CUDA block codec ") + what + ": invalid format (bits " +
                           std::to_string(f.bits) + ", block " + std::to_string(f.block) + ")");
  if (type != DataType::kFloat32 && type != DataType::kFloat16 && type != DataType::kBfloat16)
    return InvalidArgument(std::string("CUDA block codec ") + what + ": cannot handle " +
                           DataTypeName(type) + " (float, half and bfloat16 only)");
  return Status::Ok();
}

Status Launched(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return Status::Ok();
  return SystemError(std::string("CUDA block codec ") + what + ": kernel launch failed: " +
                     cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

unsigned Grid(uint64_t threads, unsigned block) {
  const uint64_t g = (threads + block - 1) / block;
  return static_cast<unsigned>(g < 65535u * 16u ? (g ? g : 1) : 65535u * 16u);
}

template <DataType T>
void LaunchQuantize(const BlockFormat& f, const void* src, uint64_t n, uint8_t* dst,
                    cudaStream_t s) {
  ParamsKernel<T><<<Grid(NumBlocks(f, n) * 32, 256), 256, 0, s>>>(f, src, n, dst);
  CodesKernel<T><<<Grid(CodesBytes(f, n), 256), 256, 0, s>>>(f, src, n, dst);
}

template <DataType T>
void LaunchDecode(const BlockFormat& f, const uint8_t* src, uint64_t n, void* dst, bool reduce,
                  cudaStream_t s) {
  DecodeKernel<T><<<Grid(CodesBytes(f, n), 256), 256, 0, s>>>(f, src, n, dst, reduce);
}

Status Decode(const BlockFormat& f, DataType type, const void* src, uint64_t n, void* dst,
              void* stream, bool reduce) {
  const char* what = reduce ? "dequantize-reduce" : "dequantize";
  BRAID_RETURN_IF_ERROR(Check(f, type, what));
  if (n == 0) return Status::Ok();
  auto* in = static_cast<const uint8_t*>(src);
  auto s = static_cast<cudaStream_t>(stream);
  if (type == DataType::kFloat32)
    LaunchDecode<DataType::kFloat32>(f, in, n, dst, reduce, s);
  else if (type == DataType::kFloat16)
    LaunchDecode<DataType::kFloat16>(f, in, n, dst, reduce, s);
  else
    LaunchDecode<DataType::kBfloat16>(f, in, n, dst, reduce, s);
  return Launched(what);
}

}  // namespace

bool DeviceAvailable(std::string* why) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    if (why)
      *why = std::string("no usable CUDA device: ") + cudaGetErrorName(e) + " (" +
             cudaGetErrorString(e) + ")";
    return false;
  }
  if (count == 0) {
    if (why) *why = "no CUDA device on this machine";
    return false;
  }
  return true;
}

Status Quantize(const BlockFormat& f, DataType type, const void* src, uint64_t n, void* dst,
                void* stream) {
  BRAID_RETURN_IF_ERROR(Check(f, type, "quantize"));
  if (n == 0) return Status::Ok();
  auto* out = static_cast<uint8_t*>(dst);
  auto s = static_cast<cudaStream_t>(stream);
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
