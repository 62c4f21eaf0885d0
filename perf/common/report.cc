#include "common/report.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <utility>

namespace braid_perf {

namespace {

// nccl-tests' time column: fewer decimals as the time grows, always 7 wide.
std::string TimeStr(double us) {
  char buf[32];
  if (us >= 10000.0)
    std::snprintf(buf, sizeof buf, "%7.0f", us);
  else if (us >= 100.0)
    std::snprintf(buf, sizeof buf, "%7.1f", us);
  else
    std::snprintf(buf, sizeof buf, "%7.2f", us);
  return buf;
}

void PrintSide(FILE* out, const SideResult& s) {
  if (!s.ran) {
    std::fprintf(out, "  %7s  %6s  %6s  %6s", "N/A", "N/A", "N/A", "N/A");
    return;
  }
  std::fprintf(out, "  %7s  %6.2f  %6.2f", TimeStr(s.time_us).c_str(), s.algbw, s.busbw);
  if (s.checked && s.quantized)
    std::fprintf(out, "  %8.2e", s.rel_error);
  else if (s.checked)
    std::fprintf(out, "  %6llu", static_cast<unsigned long long>(s.wrong));
  else
    std::fprintf(out, "  %6s", "N/A");
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string JsonNumber(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

void JsonSide(FILE* f, const char* name, const SideResult& s) {
  std::fprintf(f, "\"%s\": ", name);
  if (!s.ran) {
    std::fprintf(f, "null");
    return;
  }
  std::fprintf(f, "{\"time_us\": %s, \"algbw_gbps\": %s, \"busbw_gbps\": %s, \"wrong\": ",
               JsonNumber(s.time_us).c_str(), JsonNumber(s.algbw).c_str(),
               JsonNumber(s.busbw).c_str());
  if (s.checked)
    std::fprintf(f, "%llu", static_cast<unsigned long long>(s.wrong));
  else
    std::fprintf(f, "null");
  if (s.checked && s.quantized)
    std::fprintf(f, ", \"rel_error\": %s", JsonNumber(s.rel_error).c_str());
  if (s.has_traffic)
    std::fprintf(f,
                 ", \"traffic\": {\"intra_node_bytes\": %s, \"inter_node_bytes\": %s, "
                 "\"max_rank_inter_node_bytes\": %s}",
                 JsonNumber(s.intra_node_bytes).c_str(), JsonNumber(s.inter_node_bytes).c_str(),
                 JsonNumber(s.max_rank_inter_node_bytes).c_str());
  std::fprintf(f, "}");
}

}  // namespace

void PrintHeader(FILE* out, const RunInfo& info, const Options& o,
                 const std::vector<DeviceLine>& devices) {
  std::fprintf(out, "# nccl-tests version braid-%s nccl-headers=%d nccl-library=%d\n",
               info.version.c_str(), info.header_code, info.library_code);
  std::fprintf(out, "# Collective test starting: %s\n", info.binary.c_str());
  std::fprintf(out, "# nThread %d nGpus %d minBytes %llu maxBytes %llu ", o.nthreads, o.ngpus,
               static_cast<unsigned long long>(o.min_bytes),
               static_cast<unsigned long long>(o.max_bytes));
  if (o.step_factor > 1)
    std::fprintf(out, "step: %llu(factor)", static_cast<unsigned long long>(o.step_factor));
  else
    std::fprintf(out, "step: %llu(bytes)", static_cast<unsigned long long>(o.step_bytes));
  std::fprintf(out, " warmup iters: %d iters: %d agg iters: %d validation: %d graph: 0\n",
               o.warmup_iters, o.iters, o.agg_iters, o.check_iters);
  std::fprintf(out, "#\n# Using devices\n");
  for (const DeviceLine& d : devices)
    std::fprintf(out, "#  Rank %2d Group  0 Pid %6d on %10s device %5s [%s] %s\n", d.rank, d.pid,
                 d.host.c_str(), d.device.c_str(), d.device_name.c_str(), d.summary.c_str());
  std::fprintf(out, "#\n");
  if (!info.memory_note.empty()) std::fprintf(out, "# %s\n#\n", info.memory_note.c_str());
  if (o.quantized) {
    std::fprintf(out,
                 "# Quantized: --quant %s --block %d (%d bits, %s), %s; relerr = ||result - "
                 "exact||_2 / ||exact||_2 over all ranks' outputs, bound %.1e\n#\n",
                 o.quant_name.c_str(), o.quant.blockSize, o.quant.bits,
                 o.quant.symmetric ? "symmetric" : "asymmetric",
                 info.binary == "all_gather_perf" ? "braidAllGatherQuantized"
                                                  : "braidReduceScatterQuantized",
                 o.quant_bound);
    std::fprintf(out,
                 "#                                                              out-of-place    "
                 "                     in-place\n"
                 "#       size         count      type   redop    root     time   algbw   busbw  "
                 "  relerr     time   algbw   busbw    relerr\n"
                 "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)  "
                 "             (us)  (GB/s)  (GB/s)\n");
  } else {
    std::fprintf(out,
                 "#                                                              out-of-place    "
                 "                   in-place\n"
                 "#       size         count      type   redop    root     time   algbw   busbw  "
                 "#wrong     time   algbw   busbw  #wrong\n"
                 "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)  "
                 "           (us)  (GB/s)  (GB/s)\n");
  }
  std::fflush(out);
}

void PrintRow(FILE* out, const RowResult& r) {
  std::fprintf(out, "%12llu  %12llu  %8s  %6s  %6d", static_cast<unsigned long long>(r.size),
               static_cast<unsigned long long>(r.count), r.type.c_str(), r.redop.c_str(), r.root);
  PrintSide(out, r.out_of_place);
  PrintSide(out, r.in_place);
  std::fprintf(out, "\n");
  std::fflush(out);
}

void PrintTraffic(FILE* out, const std::vector<RowResult>& rows) {
  std::fprintf(out,
               "#\n# Traffic per operation: bytes sent, summed over ranks (transport counters, "
               "payload and framing, timed iterations)\n"
               "#       size      type   redop       side      intra-node      inter-node  "
               "inter-node/rank max\n");
  for (const RowResult& r : rows)
    for (const auto& [name, s] :
         {std::pair<const char*, const SideResult&>{"out-of-place", r.out_of_place},
          {"in-place", r.in_place}}) {
      if (!s.ran || !s.has_traffic) continue;
      std::fprintf(out, "# %10llu  %8s  %6s  %12s  %14.0f  %14.0f  %19.0f\n",
                   static_cast<unsigned long long>(r.size), r.type.c_str(), r.redop.c_str(), name,
                   s.intra_node_bytes, s.inter_node_bytes, s.max_rank_inter_node_bytes);
    }
  std::fprintf(out, "#\n");
  std::fflush(out);
}

void PrintPredictions(FILE* out, const std::vector<RowResult>& rows) {
  std::fprintf(out,
               "#\n# Predicted by the cost model (braidGroupSimulateEnd) against measured, per "
               "operation\n"
               "#       size      type   redop       side   measured(us)  predicted(us)  "
               "measured/predicted\n");
  for (const RowResult& r : rows)
    for (const auto& [name, s] :
         {std::pair<const char*, const SideResult&>{"out-of-place", r.out_of_place},
          {"in-place", r.in_place}}) {
      if (!s.ran || !s.has_prediction) continue;
      std::fprintf(out, "# %10llu  %8s  %6s  %12s  %13.2f  %13.2f  %18.2f\n",
                   static_cast<unsigned long long>(r.size), r.type.c_str(), r.redop.c_str(), name,
                   s.time_us, s.predicted_us,
                   s.predicted_us > 0 ? s.time_us / s.predicted_us : 0.0);
    }
  std::fprintf(out, "#\n");
  std::fflush(out);
}

void PrintFooter(FILE* out, const RunInfo& info, const Options& o, uint64_t wrong, double avg_busbw,
                 double max_rel_error) {
  std::fprintf(out, "# Out of bounds values : %llu %s\n", static_cast<unsigned long long>(wrong),
               wrong ? "FAILED" : "OK");
  if (o.quantized && o.check_iters == 0)
    std::fprintf(out, "# Max relative error   : N/A (-c 0: not checked)\n");
  else if (o.quantized)
    std::fprintf(out, "# Max relative error   : %.2e (bound %.1e) %s\n", max_rel_error,
                 o.quant_bound, max_rel_error <= o.quant_bound ? "OK" : "FAILED");
  std::fprintf(out, "# Avg bus bandwidth    : %g \n", avg_busbw);
  std::fprintf(out, "#\n# Collective test concluded: %s\n", info.binary.c_str());
  std::fflush(out);
}

bool WriteJson(const std::string& path, const RunInfo& info, const Options& o,
               const std::vector<DeviceLine>& devices, const std::vector<RowResult>& rows,
               uint64_t wrong, double avg_busbw) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "%s: cannot write -J %s: %s\n", info.binary.c_str(), path.c_str(),
                 std::strerror(errno));
    return false;
  }
  static const char* kAverage[] = {"rank0", "avg", "min", "max"};
  std::fprintf(f, "{\n  \"test\": %s,\n", JsonString(info.binary).c_str());
  std::fprintf(f, "  \"version\": %s,\n", JsonString("braid-" + info.version).c_str());
  std::fprintf(f, "  \"launcher\": %s,\n", JsonString(info.launcher).c_str());
  std::fprintf(f, "  \"nranks\": %d,\n  \"nprocs\": %d,\n  \"nthreads\": %d,\n", info.nranks,
               info.nprocs, o.nthreads);
  std::fprintf(
      f,
      "  \"config\": {\"min_bytes\": %llu, \"max_bytes\": %llu, \"step_factor\": %llu, "
      "\"step_bytes\": %llu, \"iters\": %d, \"warmup_iters\": %d, \"agg_iters\": %d, "
      "\"check_iters\": %d, \"blocking\": %d, \"average\": \"%s\", \"timeout_s\": %d, "
      "\"algo\": %s, \"memtype\": %s, \"registration\": %d",
      static_cast<unsigned long long>(o.min_bytes), static_cast<unsigned long long>(o.max_bytes),
      static_cast<unsigned long long>(o.step_factor), static_cast<unsigned long long>(o.step_bytes),
      o.iters, o.warmup_iters, o.agg_iters, o.check_iters, o.blocking, kAverage[o.average],
      o.timeout_s, JsonString(o.algo).c_str(), JsonString(o.memtype).c_str(), o.registration);
  if (o.quantized)
    std::fprintf(f,
                 ", \"quant\": {\"codec\": %s, \"bits\": %d, \"symmetric\": %s, \"block\": %d, "
                 "\"bound\": %s}",
                 JsonString(o.quant_name).c_str(), o.quant.bits,
                 o.quant.symmetric ? "true" : "false", o.quant.blockSize,
                 JsonNumber(o.quant_bound).c_str());
  std::fprintf(f, "},\n");
  std::fprintf(f, "  \"devices\": [");
  for (size_t i = 0; i < devices.size(); ++i) {
    const DeviceLine& d = devices[i];
    std::fprintf(f, "%s\n    {\"rank\": %d, \"pid\": %d, \"host\": %s, \"summary\": %s}",
                 i ? "," : "", d.rank, d.pid, JsonString(d.host).c_str(),
                 JsonString(d.summary).c_str());
  }
  std::fprintf(f, "\n  ],\n  \"results\": [");
  for (size_t i = 0; i < rows.size(); ++i) {
    const RowResult& r = rows[i];
    std::fprintf(f,
                 "%s\n    {\"size\": %llu, \"count\": %llu, \"type\": %s, \"redop\": %s, "
                 "\"root\": %d, ",
                 i ? "," : "", static_cast<unsigned long long>(r.size),
                 static_cast<unsigned long long>(r.count), JsonString(r.type).c_str(),
                 JsonString(r.redop).c_str(), r.root);
    JsonSide(f, "out_of_place", r.out_of_place);
    std::fprintf(f, ", ");
    JsonSide(f, "in_place", r.in_place);
    std::fprintf(f, "}");
  }
  std::fprintf(f, "\n  ],\n  \"out_of_bounds\": %llu,\n  \"status\": \"%s\",\n",
               static_cast<unsigned long long>(wrong), wrong ? "FAILED" : "OK");
  std::fprintf(f, "  \"avg_bus_bandwidth_gbps\": %s\n}\n", JsonNumber(avg_busbw).c_str());
  bool ok = std::ferror(f) == 0;
  if (std::fclose(f) != 0) ok = false;
  if (!ok)
    std::fprintf(stderr, "%s: error while writing -J %s\n", info.binary.c_str(), path.c_str());
  return ok;
}

}  // namespace braid_perf
