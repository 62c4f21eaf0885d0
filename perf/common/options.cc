#include "common/options.h"

#include <getopt.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace braid_perf {

namespace {

constexpr int kOptQuant = 1000;  // long-only options
constexpr int kOptBlock = 1001;
constexpr int kOptTraffic = 1002;
constexpr int kOptPredict = 1003;
constexpr long kMaxQuantBlock = 1 << 20;  // braid.h: blockSize 1 .. 2^20

void PrintUsage(FILE* out, const char* binary, bool has_op, int quant_block) {
  std::fprintf(
      out,
      "usage: %s [options]   (launch with braidrun -n N, mpirun -np N, srun or torchrun)\n"
      "  -b, --minbytes SIZE       smallest size (K/M/G suffixes, 1024-based; default 32M)\n"
      "  -e, --maxbytes SIZE       largest size (default 32M)\n"
      "  -i, --stepbytes SIZE      additive step when -f is 1 (default 1M)\n"
      "  -f, --stepfactor N        multiplicative step (default 1: use -i)\n"
      "  -n, --iters N             timed iterations (default 20)\n"
      "  -w, --warmup_iters N      warm-up iterations (default 1)\n"
      "  -m, --agg_iters N         operations aggregated per iteration in a group (default 1)\n"
      "  -c, --check N             checked runs per row, 0 disables (default 1)\n"
      "  -o, --op OP               %s\n"
      "  -d, --datatype TYPE       int8 uint8 int32 uint32 int64 uint64 half float double\n"
      "                            bfloat16 f8e4m3 f8e5m2 all (default float)\n"
      "  -r, --root N              root rank of broadcast/reduce (default 0)\n"
      "  -z, --blocking 0|1        1: blocking calls; 0: non-blocking calls (default 0)\n"
      "  -a, --average 0-3         combine times across ranks: 0 rank 0, 1 avg, 2 min, 3 max\n"
      "                            (default 1)\n"
      "  -T, --timeout SECONDS     per-operation stall deadline (default BRAID_TIMEOUT)\n"
      "  -J, --output_file FILE    also write the results as JSON\n"
      "  -t, --nthreads N          ranks (threads) per process (default 1)\n"
      "  -g, --ngpus N             ranks per thread: only 1 (host memory)\n"
      "  -G, --cudagraph N         accepted; no graphs are captured\n"
      "  -A, --algo ALGO           force an algorithm (e.g. ring, rd, tree) or a full BRAID_ALGO\n"
      "                            spec ('allreduce:ring@0-64K,rd@64K-inf')\n"
      "  -M, --memtype TYPE        buffer memory: host (braid.h's calls), or cuda (also device):\n"
      "                            cuMemAlloc buffers, NCCL calls on a stream (libnccl.so.2:\n"
      "                            this build's, or BRAID_PERF_NCCL=path; CUDA driver\n"
      "                            libcuda.so.1, or BRAID_PERF_LIBCUDA=path)\n"
      "  -R, --local_register N    with -M cuda: register the buffers, 1 ncclCommRegister, 2\n"
      "                            ncclCommWindowRegister symmetric windows (braid: one node's\n"
      "                            all-reduce then runs on the device through CUDA IPC); 0 none\n"
      "                            (default 0)\n"
      "  -F, --corrupt             plant one wrong element per checked row (tests the checker;\n"
      "                            also BRAID_PERF_CORRUPT=1)\n"
      "      --traffic             after the table, the bytes sent per operation to peers on\n"
      "                            the same node and on other nodes (transport counters,\n"
      "                            timed iterations, summed over ranks)\n"
      "      --predict             after the table, the cost model's prediction for each row's\n"
      "                            call (braidGroupSimulateEnd) beside the measured time\n"
      "  -h, --help                this text\n",
      binary, has_op ? "sum prod max min avg mulsum all (default sum)" : "ignored (no reduction)");
  if (quant_block > 0)
    std::fprintf(
        out,
        "      --quant CODEC         run the quantized collective: int8, int4 (symmetric, absmax\n"
        "                            scale) or int8asym, int4asym (min/max); -d float, half,\n"
        "                            bfloat16 or all (those three)%s\n"
        "                            The relerr column replaces #wrong: the relative L2 error\n"
        "                            ||result - exact|| / ||exact|| over all ranks' outputs;\n"
        "                            a row fails above %g (8 bits) or %g (4 bits)\n"
        "      --block G             elements per quantization block, 1..%ld (default %d)\n",
        has_op ? ";\n                            -o sum, avg or all (those two)" : "",
        QuantBound(8), QuantBound(4), kMaxQuantBlock, quant_block);
  else
    std::fprintf(out, "      --quant, --block      only all_gather_perf and reduce_scatter_perf\n");
  std::fprintf(out,
               "Exit status: 0 OK, 7 when any element was wrong (--quant: an error above the "
               "bound),\n2 bad usage, 1 runtime error.\n");
}

bool ParseLong(const char* s, long lo, long hi, long* out) {
  if (!s || !*s) return false;
  errno = 0;
  char* end = nullptr;
  long v = std::strtol(s, &end, 10);
  if (errno != 0 || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

}  // namespace

double QuantBound(int bits) {
  // From measurements on the data model (docs/quantization.md, "In the perf binaries"), with
  // margin: worst seen 8.0e-3 / 1.30e-1 on one node for G from 1 to 2^20, 1.22e-2 / 2.04e-1 with
  // two hops (emulated 2x2 reduce-scatter, G = 2^20). The data is bounded (|x| <= 3.45 sigma),
  // so a larger block cannot push the scale, and the error, much further.
  return bits == 8 ? 2e-2 : 2.5e-1;
}

bool ParseSize(const char* s, uint64_t* out) {
  if (!s || *s < '0' || *s > '9') return false;
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(s, &end, 10);
  if (errno != 0) return false;
  uint64_t mult = 1;
  if (*end == 'K' || *end == 'k')
    mult = 1ull << 10;
  else if (*end == 'M' || *end == 'm')
    mult = 1ull << 20;
  else if (*end == 'G' || *end == 'g')
    mult = 1ull << 30;
  else if (*end != '\0')
    return false;
  if (mult != 1 && end[1] != '\0') return false;
  if (v > UINT64_MAX / mult) return false;
  *out = v * mult;
  return true;
}

bool ParseOptions(int argc, char** argv, const char* binary, bool has_op, int quant_block,
                  Options* o, int* exit_status) {
  static const option kLong[] = {{"minbytes", required_argument, nullptr, 'b'},
                                 {"maxbytes", required_argument, nullptr, 'e'},
                                 {"stepbytes", required_argument, nullptr, 'i'},
                                 {"stepfactor", required_argument, nullptr, 'f'},
                                 {"iters", required_argument, nullptr, 'n'},
                                 {"warmup_iters", required_argument, nullptr, 'w'},
                                 {"agg_iters", required_argument, nullptr, 'm'},
                                 {"check", required_argument, nullptr, 'c'},
                                 {"op", required_argument, nullptr, 'o'},
                                 {"datatype", required_argument, nullptr, 'd'},
                                 {"root", required_argument, nullptr, 'r'},
                                 {"blocking", required_argument, nullptr, 'z'},
                                 {"average", required_argument, nullptr, 'a'},
                                 {"timeout", required_argument, nullptr, 'T'},
                                 {"output_file", required_argument, nullptr, 'J'},
                                 {"nthreads", required_argument, nullptr, 't'},
                                 {"ngpus", required_argument, nullptr, 'g'},
                                 {"cudagraph", required_argument, nullptr, 'G'},
                                 {"algo", required_argument, nullptr, 'A'},
                                 {"memtype", required_argument, nullptr, 'M'},
                                 {"local_register", required_argument, nullptr, 'R'},
                                 {"corrupt", no_argument, nullptr, 'F'},
                                 {"quant", required_argument, nullptr, kOptQuant},
                                 {"block", required_argument, nullptr, kOptBlock},
                                 {"traffic", no_argument, nullptr, kOptTraffic},
                                 {"predict", no_argument, nullptr, kOptPredict},
                                 {"help", no_argument, nullptr, 'h'},
                                 {nullptr, 0, nullptr, 0}};
  *exit_status = 2;
  std::string op_arg = "sum", type_arg = "float";
  long block = 0;  // --block, 0: not given
  auto bad = [&](const char* what, const char* value, const char* expected) {
    if (value && *value)
      std::fprintf(stderr, "%s: %s '%s': %s\n", binary, what, value, expected);
    else
      std::fprintf(stderr, "%s: %s: %s\n", binary, what, expected);
    std::fprintf(stderr, "Run '%s -h' for the list of options.\n", binary);
    return false;
  };
  opterr = 0;  // our own messages
  optind = 1;
  int c;
  while ((c = getopt_long(argc, argv, ":b:e:i:f:n:w:m:c:o:d:r:z:a:T:J:t:g:G:A:M:R:Fh", kLong,
                          nullptr)) != -1) {
    long v = 0;
    switch (c) {
      case 'b':
        if (!ParseSize(optarg, &o->min_bytes))
          return bad("-b", optarg, "expected a size like 8, 64K, 1M or 2G");
        break;
      case 'e':
        if (!ParseSize(optarg, &o->max_bytes))
          return bad("-e", optarg, "expected a size like 8, 64K, 1M or 2G");
        break;
      case 'i':
        if (!ParseSize(optarg, &o->step_bytes))
          return bad("-i", optarg, "expected a size like 8, 64K, 1M or 2G");
        break;
      case 'f':
        if (!ParseLong(optarg, 1, 1 << 20, &v))
          return bad("-f", optarg, "expected an integer >= 1");
        o->step_factor = static_cast<uint64_t>(v);
        break;
      case 'n':
        if (!ParseLong(optarg, 1, 1 << 30, &v))
          return bad("-n", optarg, "expected an integer >= 1");
        o->iters = static_cast<int>(v);
        break;
      case 'w':
        if (!ParseLong(optarg, 0, 1 << 30, &v))
          return bad("-w", optarg, "expected an integer >= 0");
        o->warmup_iters = static_cast<int>(v);
        break;
      case 'm':
        if (!ParseLong(optarg, 1, 1 << 20, &v))
          return bad("-m", optarg, "expected an integer >= 1");
        o->agg_iters = static_cast<int>(v);
        break;
      case 'c':
        if (!ParseLong(optarg, 0, 1 << 20, &v))
          return bad("-c", optarg, "expected an integer >= 0");
        o->check_iters = static_cast<int>(v);
        break;
      case 'o':
        op_arg = optarg;
        break;
      case 'd':
        type_arg = optarg;
        break;
      case 'r':
        if (!ParseLong(optarg, 0, 1 << 30, &v)) return bad("-r", optarg, "expected a rank >= 0");
        o->root = static_cast<int>(v);
        break;
      case 'z':
        if (!ParseLong(optarg, 0, 1, &v)) return bad("-z", optarg, "expected 0 or 1");
        o->blocking = static_cast<int>(v);
        break;
      case 'a':
        if (!ParseLong(optarg, 0, 3, &v))
          return bad("-a", optarg, "expected 0 (rank 0), 1 (avg), 2 (min) or 3 (max)");
        o->average = static_cast<int>(v);
        break;
      case 'T':
        if (!ParseLong(optarg, 0, 7 * 24 * 3600, &v))
          return bad("-T", optarg, "expected seconds >= 0 (0: BRAID_TIMEOUT)");
        o->timeout_s = static_cast<int>(v);
        break;
      case 'J':
        if (!*optarg) return bad("-J", optarg, "expected a file name");
        o->json_file = optarg;
        break;
      case 't':
        if (!ParseLong(optarg, 1, 1024, &v)) return bad("-t", optarg, "expected 1..1024 threads");
        o->nthreads = static_cast<int>(v);
        break;
      case 'g':
        if (!ParseLong(optarg, 1, 1 << 20, &v))
          return bad("-g", optarg, "expected an integer >= 1");
        if (v != 1)
          return bad(
              "-g", optarg,
              "only 1 rank per thread with host memory; use -t N for more ranks per process");
        o->ngpus = 1;
        break;
      case 'G':
        if (!ParseLong(optarg, 0, 1 << 20, &v))
          return bad("-G", optarg, "expected an integer >= 0");
        o->graph_iters = static_cast<int>(v);
        break;
      case 'A':
        if (!*optarg) return bad("-A", optarg, "expected an algorithm name");
        o->algo = optarg;
        break;
      case 'M':
        o->memtype = optarg;
        if (o->memtype == "device") o->memtype = "cuda";
        if (o->memtype == "hip")
          return bad("-M", optarg,
                     "braid has no HIP runtime yet (its HIP kernels build, nothing drives an AMD "
                     "GPU); use -M host or -M cuda");
        if (o->memtype != "host" && o->memtype != "cuda")
          return bad("-M", optarg, "expected host, cuda (or device) or hip");
        break;
      case 'R':
        if (!ParseLong(optarg, 0, 2, &v))
          return bad("-R", optarg,
                     "expected 0 (none), 1 (ncclCommRegister) or 2 (symmetric windows)");
        o->registration = static_cast<int>(v);
        break;
      case 'F':
        o->corrupt = true;
        break;
      case kOptQuant: {
        if (quant_block <= 0)
          return bad("--quant", optarg,
                     "this binary has no quantized form (only all_gather_perf and "
                     "reduce_scatter_perf have one)");
        const std::string q = optarg;
        if (q != "int8" && q != "int4" && q != "int8asym" && q != "int4asym")
          return bad("--quant", optarg, "expected int8, int4, int8asym or int4asym");
        o->quantized = true;
        o->quant_name = q;
        o->quant.bits = q.compare(0, 4, "int8") == 0 ? 8 : 4;
        o->quant.symmetric = q.size() == 4 ? 1 : 0;
        break;
      }
      case kOptBlock:
        if (quant_block <= 0)
          return bad("--block", optarg,
                     "this binary has no quantized form (only all_gather_perf and "
                     "reduce_scatter_perf have one)");
        if (!ParseLong(optarg, 1, kMaxQuantBlock, &block))
          return bad("--block", optarg, "expected elements per block, 1..1048576");
        break;
      case kOptTraffic:
        o->traffic = true;
        break;
      case kOptPredict:
        o->predict = true;
        break;
      case 'h':
        PrintUsage(stdout, binary, has_op, quant_block);
        *exit_status = 0;
        return false;
      case ':': {
        std::string flag = optopt ? std::string("-") + static_cast<char>(optopt) : argv[optind - 1];
        return bad(flag.c_str(), "", "this option needs a value");
      }
      default: {
        std::string flag = optopt ? std::string("-") + static_cast<char>(optopt) : argv[optind - 1];
        std::fprintf(stderr, "%s: unknown option '%s'\n", binary, flag.c_str());
        PrintUsage(stderr, binary, has_op, quant_block);
        return false;
      }
    }
  }
  if (optind < argc) return bad("argument", argv[optind], "unexpected (all options take flags)");

  const char* corrupt_env = std::getenv("BRAID_PERF_CORRUPT");
  if (corrupt_env && std::strcmp(corrupt_env, "") != 0 && std::strcmp(corrupt_env, "0") != 0)
    o->corrupt = true;

  if (o->min_bytes > o->max_bytes) {
    std::fprintf(stderr, "%s: -b %llu is larger than -e %llu\n", binary,
                 static_cast<unsigned long long>(o->min_bytes),
                 static_cast<unsigned long long>(o->max_bytes));
    return false;
  }
  if (o->step_factor <= 1 && o->step_bytes == 0 && o->min_bytes != o->max_bytes)
    return bad("-i", "0", "the step must be positive when -f is 1");

  if (o->registration != 0 && o->memtype != "cuda")
    return bad("-R", std::to_string(o->registration).c_str(),
               "registration is for device buffers: needs -M cuda");
  if (o->memtype == "cuda") {
    // The device path runs the NCCL API, which has none of these.
    if (o->quantized)
      return bad("--quant", o->quant_name.c_str(), "host memory only, not with -M cuda");
    if (o->traffic) return bad("--traffic", nullptr, "host memory only, not with -M cuda");
    if (o->predict) return bad("--predict", nullptr, "host memory only, not with -M cuda");
    if (!o->algo.empty())
      return bad("-A", o->algo.c_str(),
                 "host memory only; with -M cuda set BRAID_ALGO, which braid's libnccl.so.2 reads");
  }
  if (block != 0 && !o->quantized)
    return bad("--block", std::to_string(block).c_str(), "needs --quant CODEC");
  if (o->quantized) {
    o->quant.blockSize = block ? static_cast<int>(block) : quant_block;
    o->quant_bound = QuantBound(o->quant.bits);
  }

  o->ops.clear();
  if (o->quantized && has_op) {
    // The quantized reduce-scatter sums: SUM or AVG only.
    if (op_arg == "all") {
      o->ops.push_back(FindOp("sum"));
      o->ops.push_back(FindOp("avg"));
    } else if (op_arg == "sum" || op_arg == "avg") {
      o->ops.push_back(FindOp(op_arg.c_str()));
    } else {
      return bad("-o", op_arg.c_str(),
                 "with --quant expected sum, avg or all (a quantized reduce-scatter sums)");
    }
  } else if (!has_op) {
    o->ops.push_back(nullptr);  // one pass, printed as "none"
  } else if (op_arg == "all") {
    for (const OpInfo& op : AllOps()) o->ops.push_back(&op);
  } else if (const OpInfo* op = FindOp(op_arg.c_str())) {
    o->ops.push_back(op);
  } else {
    return bad("-o", op_arg.c_str(), "expected sum, prod, max, min, avg, mulsum or all");
  }
  o->types.clear();
  if (o->quantized) {
    // The codecs take float32, float16 and bfloat16.
    if (type_arg == "all") {
      for (const char* n : {"float", "half", "bfloat16"}) o->types.push_back(FindType(n));
    } else if (type_arg == "float" || type_arg == "half" || type_arg == "bfloat16") {
      o->types.push_back(FindType(type_arg));
    } else {
      return bad("-d", type_arg.c_str(),
                 "with --quant expected float, half, bfloat16 or all (the quantized collectives "
                 "take those three)");
    }
  } else if (type_arg == "all") {
    for (const TypeInfo& t : AllTypes()) o->types.push_back(&t);
  } else if (const TypeInfo* t = FindType(type_arg)) {
    o->types.push_back(t);
  } else {
    return bad("-d", type_arg.c_str(),
               "expected int8, uint8, int32, uint32, int64, uint64, half, float, double, "
               "bfloat16, f8e4m3, f8e5m2 or all");
  }
  *exit_status = 0;
  return true;
}

}  // namespace braid_perf
