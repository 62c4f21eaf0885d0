// reduce_scatter_perf: braidReduceScatter (--quant: braidReduceScatterQuantized, qgZ). Per-rank
// count rounded down to 16 bytes; busbw factor (n-1)/n.
#include "common/harness.h"

namespace {

using namespace braid_perf;

CollCounts Counts(size_t count, size_t elt, int n) {
  size_t base = (count / n) & ~(16 / elt - 1);  // whole 16-byte units per rank
  return CollCounts{base * n, base, base, 0, base};
}

double BusFactor(int n) {
  return static_cast<double>(n - 1) / n;
}

braidResult_t Start(const OpCall& c, braidRequest_t* req) {
  if (req) return braidIreduceScatter(c.send, c.recv, c.count, c.type, c.op, c.comm, req);
  return braidReduceScatter(c.send, c.recv, c.count, c.type, c.op, c.comm);
}

braidResult_t StartQuant(const OpCall& c, braidRequest_t* req) {
  if (req)
    return braidIreduceScatterQuantized(c.send, c.recv, c.count, c.type, c.op, c.quant, c.comm,
                                        req);
  return braidReduceScatterQuantized(c.send, c.recv, c.count, c.type, c.op, c.quant, c.comm);
}

ncclResult_t StartNccl(const NcclCall& c) {
  return c.nccl->reduceScatter(c.send, c.recv, c.count, c.type, c.op, c.comm, c.stream);
}

std::vector<Block> Expected(int rank, int, int, const CollCounts& c) {
  return {{0, c.param, 0, rank * c.param}};
}

}  // namespace

int main(int argc, char** argv) {
  static const CollTest test{"reduce_scatter_perf",
                             "reducescatter",
                             true,
                             false,
                             true,
                             Counts,
                             BusFactor,
                             Start,
                             Expected,
                             StartQuant,
                             32,  // --block default 32: the G of issue 12's error figures
                             StartNccl};
  return PerfMain(argc, argv, test);
}
