// all_reduce_perf: braidAllReduce. busbw = algbw * 2(n-1)/n.
#include "common/harness.h"

namespace {

using namespace braid_perf;

CollCounts Counts(size_t count, size_t, int) {
  return CollCounts{count, count, count, 0, 0};
}

double BusFactor(int n) {
  return 2.0 * (n - 1) / n;
}

braidResult_t Start(const OpCall& c, braidRequest_t* req) {
  if (req) return braidIallReduce(c.send, c.recv, c.count, c.type, c.op, c.comm, req);
  return braidAllReduce(c.send, c.recv, c.count, c.type, c.op, c.comm);
}

ncclResult_t StartNccl(const NcclCall& c) {
  return c.nccl->allReduce(c.send, c.recv, c.count, c.type, c.op, c.comm, c.stream);
}

std::vector<Block> Expected(int, int, int, const CollCounts& c) {
  return {{0, c.param, 0, 0}};
}

}  // namespace

int main(int argc, char** argv) {
  static const CollTest test{"all_reduce_perf", "allreduce", true,     false,   true, Counts,
                             BusFactor,         Start,       Expected, nullptr, 0,    StartNccl};
  return PerfMain(argc, argv, test);
}
