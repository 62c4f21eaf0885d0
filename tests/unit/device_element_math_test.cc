// The GPU kernels' arithmetic, checked without a GPU: element_math.h's per-element forms (what
// each GPU thread runs, src/device/cuda) evaluated on the host with a NaN policy that first turns
// every NaN result into CUDA's canonical 0x7fff... (as the GPU's adders and multipliers do) and
// then applies X86Nan, as the GPU kernels do; against the CPU kernels on every tier this CPU runs,
// byte for byte, on the cases of device_kernel_cases.h. What this cannot check is the GPU's own
// IEEE arithmetic (rounding, subnormals: nvcc --fmad=false -prec-div=true -ftz=false) and the
// kernels' indexing; tests/gpu/device_kernels_check.cc does, on a GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "device/cpu/kernel_isa.h"
#include "device/element_math.h"
#include "device/type_dispatch.h"
#include "device_kernel_cases.h"

namespace braid {
namespace {

using test::KernelCase;
using test::KernelKind;

// A NaN result as a GPU makes it (canonical, payload lost), then fixed as the GPU kernels fix it.
struct GpuLikeNan {
  template <class F>
  static F Fix(F a, F b, F result) {
    using Bits = element::FloatBitsType<F>;
    if (result != result) result = element::BitCast<F>(static_cast<Bits>(~Bits{0} >> 1));
    return element::X86Nan::Fix(a, b, result);
  }
};

template <class T>
std::vector<T> AsArray(const std::vector<uint8_t>& bytes) {
  std::vector<T> v(bytes.size() / sizeof(T));
  std::memcpy(v.data(), bytes.data(), bytes.size());
  return v;
}

template <DataType kType, ReduceOp kOp>
void ReduceAll(const element::StorageOf<kType>* a, const element::StorageOf<kType>* b,
               element::StorageOf<kType>* r, size_t n) {
  for (size_t i = 0; i < n; ++i) r[i] = element::ReduceElement<kType, kOp, GpuLikeNan>(a[i], b[i]);
}

struct RunElements {
  const KernelCase& c;
  std::vector<uint8_t>* out;
  template <DataType kType>
  void operator()() const {
    using S = element::StorageOf<kType>;
    const std::vector<S> a = AsArray<S>(c.a);
    std::vector<S> r = a;
    if (c.kind == KernelKind::kReduce) {
      const std::vector<S> b = AsArray<S>(c.b);
      switch (c.op) {
        case ReduceOp::kSum:
          ReduceAll<kType, ReduceOp::kSum>(a.data(), b.data(), r.data(), c.n);
          break;
        case ReduceOp::kProd:
          ReduceAll<kType, ReduceOp::kProd>(a.data(), b.data(), r.data(), c.n);
          break;
        case ReduceOp::kMax:
          ReduceAll<kType, ReduceOp::kMax>(a.data(), b.data(), r.data(), c.n);
          break;
        case ReduceOp::kMin:
          ReduceAll<kType, ReduceOp::kMin>(a.data(), b.data(), r.data(), c.n);
          break;
      }
    } else if (c.kind == KernelKind::kScale) {
      S sv;
      std::memcpy(&sv, c.scalar.data(), sizeof(S));
      const auto s = element::ElementOf<kType>::ToCompute(sv);
      for (size_t i = 0; i < c.n; ++i) r[i] = element::ScaleElement<kType, GpuLikeNan>(a[i], s);
    } else if (c.kind == KernelKind::kDivide && c.divisor > 1) {
      const element::Divisor d = element::MakeDivisor(c.divisor);
      for (size_t i = 0; i < c.n; ++i) r[i] = element::DivideElement<kType, GpuLikeNan>(a[i], d);
    }
    out->resize(c.a.size());
    std::memcpy(out->data(), r.data(), out->size());
  }
};

std::vector<cpu::KernelIsa> TestedIsas() {
  std::vector<cpu::KernelIsa> isas{cpu::KernelIsa::kPortable};
  if (cpu::CpuSupports(cpu::KernelIsa::kAvx2F16c)) isas.push_back(cpu::KernelIsa::kAvx2F16c);
  if (cpu::CpuSupports(cpu::KernelIsa::kAvx512)) isas.push_back(cpu::KernelIsa::kAvx512);
  return isas;
}

TEST(DeviceElementMath, GpuElementFormsMatchCpuKernelsOnEveryTier) {
  const std::vector<cpu::KernelIsa> isas = TestedIsas();
  int cases = 0, failures = 0;
  test::ForEachKernelCase(
      [&](const KernelCase& c) {
        if (c.kind == KernelKind::kCopy) return;
        ++cases;
        std::vector<uint8_t> got;
        ASSERT_TRUE(WithType(c.type, RunElements{c, &got}));
        for (cpu::KernelIsa isa : isas) {
          const std::string diff = test::FirstDifference(c, test::CpuKernelResult(c, isa), got);
          if (!diff.empty() && ++failures <= 20)
            ADD_FAILURE() << "tier " << cpu::KernelIsaName(isa) << ": " << diff;
        }
      },
      /*large=*/false);
  EXPECT_EQ(failures, 0);
  EXPECT_GT(cases, 3000);
}

// X86Nan's rule itself, against this (x86) CPU's own arithmetic where the rule is defined: one
// NaN operand, or a NaN made by the operation.
TEST(DeviceElementMath, X86NanRuleIsTheFpuRule) {
#if BRAID_KERNELS_X86
  const float qa = element::BitsToFloat(0x7fc01234u), sa = element::BitsToFloat(0xff801234u);
  const float inf = element::BitsToFloat(0x7f800000u);
  volatile float one = 1.0f, zero = 0.0f;  // volatile: computed at run time, by the FPU
  for (float nan : {qa, sa}) {
    volatile float v = nan;
    for (float x : {1.0f, -0.0f, inf}) {
      volatile float vx = x;
      EXPECT_EQ(element::FloatBits(GpuLikeNan::Fix(nan, x, 0.0f * nan)),
                element::FloatBits(v + vx));
      EXPECT_EQ(element::FloatBits(GpuLikeNan::Fix(x, nan, 0.0f * nan)),
                element::FloatBits(vx * v));
    }
  }
  volatile float vi = inf;
  EXPECT_EQ(element::FloatBits(element::Combine<ReduceOp::kSum, float, GpuLikeNan>(inf, -inf)),
            element::FloatBits(vi - vi));
  EXPECT_EQ(element::FloatBits(element::Combine<ReduceOp::kProd, float, GpuLikeNan>(0.0f, inf)),
            element::FloatBits(zero * vi));
  EXPECT_EQ(element::FloatBits(vi - vi), 0xffc00000u);
  (void)one;
#else
  GTEST_SKIP() << "X86Nan is x86's rule; this CPU is not x86";
#endif
}

}  // namespace
}  // namespace braid
