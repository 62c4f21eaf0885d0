// alltoall_perf: braidAllToAll, `base` elements per peer (rounded down to 16 bytes); busbw factor
// (n-1)/n. braid has no in-place all-to-all, so the in-place columns are N/A.
#include "common/harness.h"

namespace {

using namespace braid_perf;

CollCounts Counts(size_t count, size_t elt, int n) {
  size_t base = (count / n) & ~(16 / elt - 1);  // whole 16-byte units per peer
  return CollCounts{base * n, base * n, base, 0, 0};
}

double BusFactor(int n) {
  return static_cast<double>(n - 1) / n;
}

braidResult_t Start(const OpCall& c, braidRequest_t* req) {
  if (req) return braidIallToAll(c.send, c.recv, c.count, c.type, c.comm, req);
  return braidAllToAll(c.send, c.recv, c.count, c.type, c.comm);
}

// Block q of my output is block `rank` of q's input.
// nccl-tests' form: one group of a send to and a receive from every rank.
ncclResult_t StartNccl(const NcclCall& c) {
  ncclResult_t r = c.nccl->groupStart();
  if (r != ncclSuccess) return r;
  const size_t block = c.count * c.elt_size;
  ncclResult_t first = ncclSuccess;
  for (int q = 0; q < c.nranks && first == ncclSuccess; ++q) {
    first = c.nccl->send(static_cast<const char*>(c.send) + q * block, c.count, c.type, q, c.comm,
                         c.stream);
    if (first == ncclSuccess)
      first = c.nccl->recv(static_cast<char*>(c.recv) + q * block, c.count, c.type, q, c.comm,
                           c.stream);
  }
  r = c.nccl->groupEnd();
  return first != ncclSuccess ? first : r;
}

std::vector<Block> Expected(int rank, int n, int, const CollCounts& c) {
  std::vector<Block> b;
  for (int q = 0; q < n; ++q) b.push_back({q * c.param, c.param, q, rank * c.param});
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  static const CollTest test{"alltoall_perf", "alltoall", false,    false,   false, Counts,
                             BusFactor,       Start,      Expected, nullptr, 0,     StartNccl};
  return PerfMain(argc, argv, test);
}
