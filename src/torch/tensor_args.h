// What braid is handed for a torch tensor: its element type (or raw bytes for a type braid does
// not reduce), the reduction that implements a torch ReduceOp on it, and the checks that turn a
// tensor braid cannot take (a CUDA or sparse tensor, int16 in a reduction, ...) into a clear
// error before anything is issued. Tensors braid writes must be contiguous: a non-contiguous one
// is staged in a contiguous buffer and copied back when the collective completes.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <optional>
#include <string>

#include "braid/braid.h"

namespace braid_torch {

// braid's element type for `t`, if braid has one (bool travels as uint8).
std::optional<braidDataType_t> BraidType(at::ScalarType t);

// A contiguous host buffer as braid's calls take it: pointer, count and type.
struct Payload {
  void* ptr = nullptr;
  size_t count = 0;
  braidDataType_t type = braidUint8;
};

// Bytes of one element of braid's `type`.
size_t TypeBytes(braidDataType_t type);
// BRAID_TORCH_BLOCKING_BYTES (bytes, with an optional K, M or G; default 256K): calls up to this
// size run as braid's blocking calls (see collectives.h). Throws on a malformed value.
size_t BlockingBytesFromEnv();

// For collectives that only move data: the element type when braid has it, else the bytes
// (int16, complex, ...), so every torch dtype can be moved. `t` must be contiguous.
Payload MovePayload(const at::Tensor& t);
// For reductions: braid's element type, or an error naming the dtype and the op.
Payload ReducePayload(const at::Tensor& t, const char* op);

// How a torch ReduceOp runs in braid on a tensor of `dtype`.
struct Reduction {
  braidRedOp_t op = braidSum;
  bool parity = false;  // bool BXOR: a uint8 sum, then & 1 (the sum's parity survives
                        // uint8 wrap-around)
  bool premul = false;  // a PREMUL_SUM operator created for this call: destroy after it
};
// Maps `op` (SUM, AVG, PRODUCT, MIN, MAX; BAND/BOR/BXOR on bool; PREMUL_SUM with a factor) or
// throws an error naming what braid cannot do. For PREMUL_SUM, creates braid's operator on
// `comm` (the caller destroys it once the call is issued).
Reduction MapReduceOp(const c10d::ReduceOp& op, at::ScalarType dtype, braidComm_t comm,
                      const char* what);

// Throws unless `t` is a dense (strided) CPU tensor: a CUDA tensor names the missing device path.
void CheckHostTensor(const at::Tensor& t, const char* what);

// "float32", "int64", ... as torch prints them.
std::string DtypeName(at::ScalarType t);

}  // namespace braid_torch
