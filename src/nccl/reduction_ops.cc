// Pre-multiplied sums: ncclRedOpCreatePreMulSum / ncclRedOpDestroy.
#include <string>

#include "nccl/cuda_driver.h"
#include "nccl/shim.h"
#include "nccl/stream_path.h"

using namespace braid::nccl;

NCCL_API_EXPORT ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar,
                                                       ncclDataType_t datatype,
                                                       ncclScalarResidence_t residence,
                                                       ncclComm_t comm) {
  const char* func = "ncclRedOpCreatePreMulSum";
  NCCL_CHECK(CheckComm(comm, func));
  NCCL_CHECK(CheckPtr(op, "op", func));
  NCCL_CHECK(CheckPtr(scalar, "scalar", func));
  NCCL_CHECK(CheckType(datatype, func));
  if (residence != ncclScalarDevice && residence != ncclScalarHostImmediate)
    return Fail(ncclInvalidArgument, std::string(func) + ": invalid residence " +
                                         std::to_string(static_cast<int>(residence)) +
                                         " (ncclScalarDevice or ncclScalarHostImmediate)");
  // braid captures the value now. A device-resident scalar is therefore read now too, rather
  // than when each collective runs; programs that rewrite it between calls must recreate the op.
  alignas(8) unsigned char value[8];
  if (!CopyToHost(value, scalar, TypeSize(datatype)))
    return Fail(ncclUnhandledCudaError,
                std::string(func) + ": cannot read the scalar from device memory");
  braidRedOp_t b = braidSum;
  braidResult_t r = braidRedOpCreatePreMulSum(&b, value, B(datatype), B(comm));
  if (r == braidSuccess) *op = static_cast<ncclRedOp_t>(b);
  return FromBraid(r, func);
}
NCCL_WEAK_ALIAS(ncclResult_t, ncclRedOpCreatePreMulSum,
                (ncclRedOp_t * op, void* scalar, ncclDataType_t datatype,
                 ncclScalarResidence_t residence, ncclComm_t comm))

NCCL_API_EXPORT ncclResult_t pncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  const char* func = "ncclRedOpDestroy";
  NCCL_CHECK(CheckComm(comm, func));
  if (static_cast<int>(op) >= 0 && static_cast<int>(op) < ncclNumOps)
    return Fail(ncclInvalidArgument, std::string(func) + ": operator " +
                                         std::to_string(static_cast<int>(op)) +
                                         " is a built-in and cannot be destroyed");
  NCCL_CHECK(CheckOp(op, func));
  // braid keeps the operator's state with every call already issued, so destroying it here is
  // safe even inside a group before ncclGroupEnd(). Not for stream-ordered calls: they reach
  // braid when the agent runs them, so while some may be queued (or collected in the open group)
  // the operator is destroyed after them, on the agent's thread (PyTorch destroys it right after
  // the call). braid never reuses an operator's id, so later calls cannot pick up another scalar.
  if (DestroyRedOpAfterQueued(comm, op)) return ncclSuccess;
  return FromBraid(braidRedOpDestroy(B(op), B(comm)), func);
}
NCCL_WEAK_ALIAS(ncclResult_t, ncclRedOpDestroy, (ncclRedOp_t op, ncclComm_t comm))
