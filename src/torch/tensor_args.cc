#include "tensor_args.h"

#include <c10/util/Exception.h>

#include <cerrno>
#include <cstdlib>

namespace braid_torch {

std::optional<braidDataType_t> BraidType(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return braidFloat32;
    case at::kDouble:
      return braidFloat64;
    case at::kHalf:
      return braidFloat16;
    case at::kBFloat16:
      return braidBfloat16;
    case at::kInt:
      return braidInt32;
    case at::kLong:
      return braidInt64;
    case at::kByte:
    case at::kBool:  // one byte, 0 or 1
      return braidUint8;
    case at::kChar:
      return braidInt8;
    default:
      return std::nullopt;
  }
}

std::string DtypeName(at::ScalarType t) {
  // torch's Python names (torch.float32), which users see, not c10's (Float).
  switch (t) {
    case at::kFloat:
      return "float32";
    case at::kDouble:
      return "float64";
    case at::kHalf:
      return "float16";
    case at::kBFloat16:
      return "bfloat16";
    case at::kInt:
      return "int32";
    case at::kLong:
      return "int64";
    case at::kShort:
      return "int16";
    case at::kByte:
      return "uint8";
    case at::kChar:
      return "int8";
    case at::kBool:
      return "bool";
    case at::kComplexFloat:
      return "complex64";
    case at::kComplexDouble:
      return "complex128";
    default:
      return c10::toString(t);
  }
}

size_t TypeBytes(braidDataType_t type) {
  switch (type) {
    case braidInt8:
    case braidUint8:
    case braidFloat8e4m3:
    case braidFloat8e5m2:
      return 1;
    case braidFloat16:
    case braidBfloat16:
      return 2;
    case braidInt32:
    case braidUint32:
    case braidFloat32:
      return 4;
    default:
      return 8;
  }
}

size_t BlockingBytesFromEnv() {
  const char* env = std::getenv("BRAID_TORCH_BLOCKING_BYTES");
  if (!env || !*env) return size_t{256} << 10;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(env, &end, 10);
  int shift = 0;
  if (*end == 'K' || *end == 'k') shift = 10;
  if (*end == 'M' || *end == 'm') shift = 20;
  if (*end == 'G' || *end == 'g') shift = 30;
  if (shift) ++end;
  TORCH_CHECK(end != env && *end == '\0' && errno == 0 && env[0] != '-' && (v >> (60 - shift)) == 0,
              "braid: BRAID_TORCH_BLOCKING_BYTES='", env,
              "' is not a size (bytes, with an optional K, M or G; 0 turns blocking calls off)");
  return static_cast<size_t>(v) << shift;
}

Payload MovePayload(const at::Tensor& t) {
  Payload p;
  p.ptr = t.data_ptr();
  if (auto type = BraidType(t.scalar_type())) {
    p.type = *type;
    p.count = static_cast<size_t>(t.numel());
  } else {
    p.type = braidUint8;
    p.count = static_cast<size_t>(t.numel()) * t.element_size();
  }
  return p;
}

Payload ReducePayload(const at::Tensor& t, const char* op) {
  auto type = BraidType(t.scalar_type());
  TORCH_CHECK(type, "braid: ", op, ": braid has no reduction on ", DtypeName(t.scalar_type()),
              " tensors (it reduces float32, float64, float16, bfloat16, int8, uint8, int32, "
              "int64 and bool)");
  return Payload{t.data_ptr(), static_cast<size_t>(t.numel()), *type};
}

Reduction MapReduceOp(const c10d::ReduceOp& op, at::ScalarType dtype, braidComm_t comm,
                      const char* what) {
  const bool is_bool = dtype == at::kBool;
  Reduction r;
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      r.op = is_bool ? braidMax : braidSum;  // logical or, as torch's NCCL backend
      return r;
    case c10d::ReduceOp::AVG:
      TORCH_CHECK(!is_bool, "braid: ", what, ": ReduceOp.AVG is undefined on bool tensors");
      r.op = braidAvg;
      return r;
    case c10d::ReduceOp::PRODUCT:
      r.op = is_bool ? braidMin : braidProd;  // logical and
      return r;
    case c10d::ReduceOp::MIN:
      r.op = braidMin;
      return r;
    case c10d::ReduceOp::MAX:
      r.op = braidMax;
      return r;
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR: {
      const char* name = op.op_ == c10d::ReduceOp::BAND  ? "BAND"
                         : op.op_ == c10d::ReduceOp::BOR ? "BOR"
                                                         : "BXOR";
      TORCH_CHECK(is_bool, "braid: ", what, ": ReduceOp.", name,
                  " is supported on bool tensors only (braid has no bitwise reduction on ",
                  DtypeName(dtype), "; use backend gloo for it)");
      if (op.op_ == c10d::ReduceOp::BAND) r.op = braidMin;
      if (op.op_ == c10d::ReduceOp::BOR) r.op = braidMax;
      if (op.op_ == c10d::ReduceOp::BXOR) {
        r.op = braidSum;
        r.parity = true;
      }
      return r;
    }
    case c10d::ReduceOp::PREMUL_SUM: {
      auto* supp = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
      TORCH_CHECK(supp, "braid: ", what, ": PREMUL_SUM without its factor");
      auto type = BraidType(dtype);
      TORCH_CHECK(type && !is_bool, "braid: ", what, ": PREMUL_SUM on ", DtypeName(dtype));
      at::Tensor factor;
      if (!supp->tensor_factors.empty()) {
        TORCH_CHECK(supp->tensor_factors.size() == 1 && supp->tensor_factors[0].numel() == 1,
                    "braid: ", what, ": PREMUL_SUM takes one factor (one tensor of one element)");
        CheckHostTensor(supp->tensor_factors[0], what);
        factor = supp->tensor_factors[0].to(dtype).contiguous();
      } else {
        factor = at::scalar_tensor(supp->double_factor, at::TensorOptions().dtype(dtype));
      }
      braidRedOp_t premul;
      const braidResult_t rc = braidRedOpCreatePreMulSum(&premul, factor.data_ptr(), *type, comm);
      TORCH_CHECK(rc == braidSuccess, "braid: ", what, ": braidRedOpCreatePreMulSum failed (",
                  braidGetErrorString(rc), "): ", braidGetLastError(nullptr));
      r.op = premul;
      r.premul = true;
      return r;
    }
    default:
      TORCH_CHECK(false, "braid: ", what, ": unknown ReduceOp ", static_cast<int>(op.op_));
  }
}

void CheckHostTensor(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.defined(), "braid: ", what, ": an undefined tensor");
  TORCH_CHECK(t.layout() == at::kStrided, "braid: ", what,
              ": only dense tensors are supported, not layout ", t.layout());
  TORCH_CHECK(t.device().is_cpu(), "braid: ", what, ": the tensor is on ", t.device().str(),
              "; braid's torch backend runs on CPU tensors until braid's device path (its GPU "
              "issue: collectives on device buffers) is built. Move the tensor to the CPU, or "
              "use backend 'nccl' or 'gloo' for device tensors.");
}

}  // namespace braid_torch
