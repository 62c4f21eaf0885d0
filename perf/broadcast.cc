// broadcast_perf: braidBroadcast from -r. busbw = algbw.
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
  if (req) return braidIbroadcast(c.send, c.recv, c.count, c.type, c.root, c.comm, req);
  return braidBroadcast(c.send, c.recv, c.count, c.type, c.root, c.comm);
}

ncclResult_t StartNccl(const NcclCall& c) {
  return c.nccl->broadcast(c.send, c.recv, c.count, c.type, c.root, c.comm, c.stream);
}

std::vector<Block> Expected(int, int, int root, const CollCounts& c) {
  return {{0, c.param, root, 0}};
}

}  // namespace

int main(int argc, char** argv) {
  static const CollTest test{"broadcast_perf", "broadcast", false,    true,    true, Counts,
                             BusFactor,        Start,       Expected, nullptr, 0,    StartNccl};
  return PerfMain(argc, argv, test);
}
