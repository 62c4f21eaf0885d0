// Inputs whose exact results are known in every type, and the checks against them.
//
// Reductions: rank r's element i is a small integer in(r, i), periodic in i, chosen per
// (type, op, nranks) so that every partial result of any reduction order is exactly
// representable (sums of values in [-M, M] with n*M within the type's exact range; products of
// +-1 and +-2 with at most max_pow2 factors of two). So the result is bit-exact whatever the
// algorithm; only floating-point avg (a division) is allowed 2 ulps.
// Copies (all-gather, broadcast, all-to-all, send/recv): element i of rank r is a hash of
// (r, i, seed), so a block landing in the wrong place is always caught.
// Quantized collectives (--quant): element i of rank r is an approximately Gaussian real,
// (b0 + b1 + b2 + b3 - 510) / 128 for the four low bytes b of a hash of (r, i, seed) (mean 0,
// sigma 1.155, |x| <= 3.98 = 3.45 sigma), rounded to the type. The exact result is computed in
// double (exact: a few such values), and a run is judged by its relative L2 error against it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/datatypes.h"

namespace braid_perf {

enum class OpKind { kSum, kProd, kMax, kMin, kAvg, kMulSum, kNone };

struct OpInfo {
  const char* name;  // "sum" ... "mulsum"; "none" for collectives without a reduction
  OpKind kind;
};
// sum prod max min avg mulsum, in nccl-tests' "-o all" order.
const std::vector<OpInfo>& AllOps();
const OpInfo* FindOp(const char* name);

// Where the expected values of a run of output elements come from.
struct Block {
  size_t dst = 0;        // first element in the output buffer
  size_t count = 0;      // elements
  int src_rank = 0;      // copies: the rank whose input this is (reductions: unused)
  size_t src_index = 0;  // index of the first element in the source's input numbering
};

// The scalar every rank passes to braidRedOpCreatePreMulSum for "mulsum".
constexpr int kMulSumScalar = 2;

class DataModel {
 public:
  // `op.kind == kNone` builds a copy model. `quantized`: the model of the quantized collectives
  // (float types, sum/avg or copies; judged by error(), not verify()).
  DataModel(const TypeInfo& type, OpKind op, int nranks, bool quantized = false);

  // Writes this rank's input elements [first, first + count) to `buf` (the element at `buf` is
  // input index `first`). `seed` varies the data between check iterations.
  void fill(void* buf, int rank, size_t first, size_t count, uint64_t seed) const;
  // Counts output elements that differ from what `blocks` say they must hold.
  uint64_t verify(const void* buf, const std::vector<Block>& blocks, uint64_t seed) const;
  // Quantized model: adds sum((got - exact)^2) to *err2 and sum(exact^2) to *ref2 over the
  // output elements of `blocks`.
  void error(const void* buf, const std::vector<Block>& blocks, uint64_t seed, double* err2,
             double* ref2) const;

 private:
  int64_t input(int rank, uint64_t i) const;  // reductions, i < period_
  uint64_t copyBits(int rank, uint64_t i, uint64_t seed) const;
  double quantValue(int rank, uint64_t i, uint64_t seed) const;  // quantized model, exact

  const TypeInfo& type_;
  OpKind op_;
  int nranks_;
  bool copy_;
  bool quantized_ = false;
  // Reductions: M for sum-like ops, the value range for max/min, T for prod.
  int64_t m_ = 0;
  int64_t range_ = 1;
  int64_t offset_ = 0;
  int prod_t_ = 0;
  bool sparse_ = false;  // sum with nranks > exact range: one rank contributes 1 per element
  bool rotate_ = true;   // prod: which ranks contribute a 2 rotates with i (nranks <= 64)
  uint64_t period_ = 1;
  uint64_t tolerance_ulps_ = 0;
  std::vector<uint64_t> expected_;  // bits per i mod period_
};

}  // namespace braid_perf
