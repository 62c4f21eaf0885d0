// The shared driver of the nccl-tests-compatible perf binaries (spec/nccl-compat.md section 3).
// Each binary describes its collective with a CollTest and calls PerfMain().
#pragma once

#include <cstddef>
#include <vector>

#include "braid/braid.h"
#include "common/data_model.h"
#include "common/device_api.h"

namespace braid_perf {

// Element counts of one row, as nccl-tests' getCollByteCount computes them.
struct CollCounts {
  size_t send = 0;   // elements in the send buffer
  size_t recv = 0;   // elements in the receive buffer
  size_t param = 0;  // the count passed to the call (and printed in the "count" column)
  // In place, everything lives in the receive buffer B: the call gets
  // sendbuff = B + rank * send_inplace_step and recvbuff = B + rank * recv_inplace_step.
  size_t send_inplace_step = 0;
  size_t recv_inplace_step = 0;
};

struct OpCall {
  const void* send;
  void* recv;
  size_t count;  // CollCounts::param
  braidDataType_t type;
  braidRedOp_t op;
  int root;
  int rank;
  int nranks;
  braidComm_t comm;
  const braidQuantConfig_t* quant;  // --quant: the codec; nullptr otherwise
};

// -M cuda: the same call through the NCCL API, on device buffers and this rank's stream.
struct NcclCall {
  const void* send;
  void* recv;
  size_t count;  // CollCounts::param
  ncclDataType_t type;
  size_t elt_size;  // bytes of one element of `type`
  ncclRedOp_t op;
  int root;
  int rank;
  int nranks;
  ncclComm_t comm;
  cudaStream_t stream;
  const NcclApi* nccl;
};

struct CollTest {
  const char* binary;      // "all_reduce_perf"
  const char* tuner_name;  // name in BRAID_ALGO grammar for -A, or nullptr (no algorithm choice)
  bool has_op;             // reduction collective: iterates over -o
  bool has_root;           // rooted: prints -r, otherwise root column is -1
  bool in_place;           // false: braid has no in-place form, in-place columns print N/A
  CollCounts (*counts)(size_t count, size_t elt_size, int nranks);
  double (*bus_factor)(int nranks);
  // Issues the operation: non-blocking when `request` is non-null (the callee may still complete
  // it at once and leave *request NULL), blocking otherwise.
  braidResult_t (*start)(const OpCall& call, braidRequest_t* request);
  // Which input elements `rank`'s output must hold (empty: this rank has no output).
  // Every rank's input is its first `send` input elements (index 0 at the send pointer).
  std::vector<Block> (*expected)(int rank, int nranks, int root, const CollCounts& c);
  // The quantized form (--quant), issued like `start`; nullptr: none (--quant is refused).
  braidResult_t (*start_quant)(const OpCall& call, braidRequest_t* request) = nullptr;
  int quant_block = 0;  // --block's default for this collective
  // -M cuda: queues the operation on `call.stream` (NCCL's semantics: it returns at once).
  ncclResult_t (*start_nccl)(const NcclCall& call) = nullptr;
};

// Parses the command line, creates the communicators, runs the table, returns the exit status.
int PerfMain(int argc, char** argv, const CollTest& test);

}  // namespace braid_perf
