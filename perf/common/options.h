// Command-line options of the perf binaries: nccl-tests' letters and meanings, plus -A and -M.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/data_model.h"
#include "common/datatypes.h"

namespace braid_perf {

struct Options {
  uint64_t min_bytes = 32 << 20;       // -b
  uint64_t max_bytes = 32 << 20;       // -e
  uint64_t step_bytes = 1 << 20;       // -i
  uint64_t step_factor = 1;            // -f (> 1: multiply, else add step_bytes)
  int iters = 20;                      // -n
  int warmup_iters = 1;                // -w
  int agg_iters = 1;                   // -m
  int check_iters = 1;                 // -c
  std::vector<const OpInfo*> ops;      // -o
  std::vector<const TypeInfo*> types;  // -d
  int root = 0;                        // -r
  int blocking = 0;                    // -z
  int average = 1;                     // -a: 0 rank 0, 1 avg, 2 min, 3 max
  int timeout_s = 0;                   // -T (0: BRAID_TIMEOUT)
  std::string json_file;               // -J
  int nthreads = 1;                    // -t
  int ngpus = 1;                       // -g
  int graph_iters = 0;                 // -G (accepted, no graphs on host memory)
  std::string algo;                    // -A
  std::string memtype = "host";        // -M
  int registration = 0;                // -R: 0 none, 1 ncclCommRegister, 2 symmetric windows
  bool corrupt = false;                // -F or BRAID_PERF_CORRUPT=1: plant one wrong element
  // --quant CODEC [--block G]: the quantized form of the collective (all_gather_perf,
  // reduce_scatter_perf), checked by its relative L2 error instead of bit for bit.
  bool quantized = false;
  std::string quant_name;         // "int8", "int4", "int8asym", "int4asym"
  braidQuantConfig_t quant = {};  // bits, blockSize, symmetric
  double quant_bound = 0;         // the relative L2 error above which a row fails
  // --traffic: after the table, the bytes per operation sent within and across nodes (transport
  // counters over the timed iterations, summed over ranks).
  bool traffic = false;
  // --predict: after the table, what the cost model predicts for each row's call on this
  // communicator (braidGroupSimulateEnd: the algorithm the call runs, its schedule on the
  // communicator's calibrated links) beside the measured time.
  bool predict = false;
};

// The relative L2 error bound of a codec on the perf data model (see QuantBound in options.cc).
double QuantBound(int bits);

// Parses argv. On a bad flag or value prints a message naming it (and the usage) to stderr and
// returns false; `*exit_status` is then the status to exit with (0 for -h).
// `quant_block`: the default --block of the binary's quantized form; 0 when it has none (then
// --quant and --block are refused).
bool ParseOptions(int argc, char** argv, const char* binary, bool has_op, int quant_block,
                  Options* out, int* exit_status);

// "1K" = 1024, "256M", "2G"; false for anything else.
bool ParseSize(const char* s, uint64_t* out);

}  // namespace braid_perf
