// Argument checks with NCCL's error codes, done before braid sees a call.
#include <cstdint>
#include <string>

#include "nccl/shim.h"

namespace braid::nccl {

size_t TypeSize(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
    default:
      return 0;
  }
}

ncclResult_t CheckComm(ncclComm_t comm, const char* func) {
  if (!comm) return Fail(ncclInvalidArgument, std::string(func) + ": comm is NULL");
  return ncclSuccess;
}

ncclResult_t CheckType(ncclDataType_t t, const char* func) {
  if (static_cast<int>(t) < 0 || static_cast<int>(t) >= ncclNumTypes)
    return Fail(ncclInvalidArgument, std::string(func) + ": invalid datatype " +
                                         std::to_string(static_cast<int>(t)) + " (valid: 0.." +
                                         std::to_string(ncclNumTypes - 1) + ")");
  return ncclSuccess;
}

ncclResult_t CheckOp(ncclRedOp_t op, const char* func) {
  // Values >= ncclNumOps are operators from ncclRedOpCreatePreMulSum(); braid checks that they
  // exist on this communicator.
  if (static_cast<int>(op) < 0)
    return Fail(ncclInvalidArgument,
                std::string(func) + ": invalid reduction op " +
                    std::to_string(static_cast<int>(op)) +
                    " (built-in ops are 0..4; others come from ncclRedOpCreatePreMulSum)");
  return ncclSuccess;
}

ncclResult_t CheckPtr(const void* p, const char* what, const char* func) {
  if (!p) return Fail(ncclInvalidArgument, std::string(func) + ": " + what + " is NULL");
  return ncclSuccess;
}

void CommShape(ncclComm_t comm, int* rank, int* nranks) {
  *rank = -1;
  *nranks = -1;
  int r = -1, n = -1;
  if (braidCommUserRank(B(comm), &r) != braidSuccess) return;
  if (braidCommCount(B(comm), &n) != braidSuccess) return;
  *rank = r;
  *nranks = n;
}

ncclResult_t CheckRank(int value, int nranks, const char* what, const char* func) {
  if (nranks < 0) return ncclSuccess;  // shape unknown yet: braid checks
  if (value < 0 || value >= nranks)
    return Fail(ncclInvalidArgument, std::string(func) + ": invalid " + what + " " +
                                         std::to_string(value) + " (communicator has " +
                                         std::to_string(nranks) + " ranks)");
  return ncclSuccess;
}

ncclResult_t CheckBytes(size_t count, size_t elements, ncclDataType_t t, const char* func) {
  size_t size = TypeSize(t);
  if (size == 0 || elements == 0) return ncclSuccess;
  if (count > SIZE_MAX / size / elements)
    return Fail(ncclInvalidArgument, std::string(func) + ": count " + std::to_string(count) +
                                         " overflows the address space");
  return ncclSuccess;
}

}  // namespace braid::nccl
