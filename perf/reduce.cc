// reduce_perf: braidReduce to -r; only the root's output is checked. busbw = algbw.
#include "common/harness.h"

namespace {

using namespace braid_perf;

CollCounts Counts(size_t count, size_t, int) {
  return CollCounts{count, count, count, 0, 0};
}

double BusFactor(int) {
  return 1.0;
}

braidResult_t Start(const OpCall& c, braidRequest_t* req) {
  if (req) return braidIreduce(c.send, c.recv, c.count, c.type, c.op, c.root, c.comm, req);
  return braidReduce(c.send, c.recv, c.count, c.type, c.op, c.root, c.comm);
}

ncclResult_t StartNccl(const NcclCall& c) {
  return c.nccl->reduce(c.send, c.recv, c.count, c.type, c.op, c.root, c.comm, c.stream);
}

std::vector<Block> Expected(int rank, int, int root, const CollCounts& c) {
  if (rank != root) return {};
  return {{0, c.param, 0, 0}};
}

}  // namespace

int main(int argc, char** argv) {
  static const CollTest test{"reduce_perf", "reduce", true,     true,    true, Counts,
                             BusFactor,     Start,    Expected, nullptr, 0,    StartNccl};
  return PerfMain(argc, argv, test);
}
