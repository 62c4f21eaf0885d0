// all_gather_perf: braidAllGather (--quant: braidAllGatherQuantized, qwZ). Per-rank count rounded
// down to 16 bytes; busbw factor (n-1)/n.
#include "common/harness.h"

namespace {

using namespace braid_perf;

CollCounts Counts(size_t count, size_t elt, int n) {
  size_t base = (count / n) & ~(16 / elt - 1);  // whole 16-byte units per rank
  return CollCounts{base, base * n, base, base, 0};
}

double BusFactor(int n) {
  return static_cast<double>(n - 1) / n;
}

braidResult_t Start(const OpCall& c, braidRequest_t* req) {
  if (req) return braidIallGather(c.send, c.recv, c.count, c.type, c.comm, req);
  return braidAllGather(c.send, c.recv, c.count, c.type, c.comm);
}

braidResult_t StartQuant(const OpCall& c, braidRequest_t* req) {
  if (req) return braidIallGatherQuantized(c.send, c.recv, c.count, c.type, c.quant, c.comm, req);
  return braidAllGatherQuantized(c.send, c.recv, c.count, c.type, c.quant, c.comm);
}

ncclResult_t StartNccl(const NcclCall& c) {
  return c.nccl->allGather(c.send, c.recv, c.count, c.type, c.comm, c.stream);
}

std::vector<Block> Expected(int, int n, int, const CollCounts& c) {
  std::vector<Block> b;
  for (int q = 0; q < n; ++q) b.push_back({q * c.param, c.param, q, 0});
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  // --block default 2048: ZeRO++'s weight all-gather uses blocks of 2048-8192 elements.
  static const CollTest test{"all_gather_perf", "allgather", false,    false,      true, Counts,
                             BusFactor,         Start,       Expected, StartQuant, 2048, StartNccl};
  return PerfMain(argc, argv, test);
}
