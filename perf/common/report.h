// The nccl-tests table (so existing parsers keep working) and its JSON twin (-J).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "common/options.h"

namespace braid_perf {

struct SideResult {
  bool ran = false;  // false: no in-place form, printed as N/A
  double time_us = 0;
  double algbw = 0;  // GB/s, 1e9 bytes per second
  double busbw = 0;
  bool checked = false;    // -c 0: #wrong is N/A
  uint64_t wrong = 0;      // --quant: 1 when rel_error is above the bound
  bool quantized = false;  // --quant: print rel_error in place of #wrong
  double rel_error = 0;    // ||result - exact||_2 / ||exact||_2
  // --traffic: bytes sent per operation in the timed iterations, summed over ranks, to peers on
  // the sender's node and on other nodes; and the most one rank sent to other nodes.
  bool has_traffic = false;
  double intra_node_bytes = 0;
  double inter_node_bytes = 0;
  double max_rank_inter_node_bytes = 0;
  // --predict: the model's seconds for one call (braidGroupSimulateEnd), in microseconds.
  bool has_prediction = false;
  double predicted_us = 0;
};

struct RowResult {
  uint64_t size = 0;   // bytes, the "size" column
  uint64_t count = 0;  // elements, the "count" column
  std::string type;
  std::string redop;
  int root = -1;
  SideResult out_of_place, in_place;
};

struct DeviceLine {
  int rank;
  int pid;
  std::string host;
  std::string summary;          // transports from braidCommDescribe
  std::string device = "host";  // -M cuda: the CUDA device ordinal
  std::string device_name = "cpu";
};

struct RunInfo {
  std::string binary;
  std::string launcher;
  int nranks = 1;
  int nprocs = 1;
  std::string version;  // library version "0.1.0"
  int header_code = 0;
  int library_code = 0;
  // -M cuda: which NCCL library and CUDA driver ran the calls (one '#' line after the devices).
  std::string memory_note;
};

void PrintHeader(FILE* out, const RunInfo& info, const Options& o,
                 const std::vector<DeviceLine>& devices);
void PrintRow(FILE* out, const RowResult& row);
// --traffic: one line per row and side, after the table (every line a '#' comment, so parsers of
// the nccl-tests table are unaffected).
void PrintTraffic(FILE* out, const std::vector<RowResult>& rows);
// --predict: one '#' line per row and side, the measured and predicted time and their ratio.
void PrintPredictions(FILE* out, const std::vector<RowResult>& rows);
// Totals over `rows`: wrong elements (--quant: sides above the bound) and the average bus
// bandwidth of every printed busbw; --quant: also the largest relative error.
void PrintFooter(FILE* out, const RunInfo& info, const Options& o, uint64_t wrong, double avg_busbw,
                 double max_rel_error);
// Writes the JSON document; false (after printing why) when the file cannot be written.
bool WriteJson(const std::string& path, const RunInfo& info, const Options& o,
               const std::vector<DeviceLine>& devices, const std::vector<RowResult>& rows,
               uint64_t wrong, double avg_busbw);

}  // namespace braid_perf
