// sendrecv_perf: every rank sends to rank+1 and receives from rank-1 in one group (a ring shift).
// busbw = algbw. braid.h defines no in-place send/recv, so the in-place columns are N/A.
#include "common/harness.h"

namespace {

using namespace braid_perf;

CollCounts Counts(size_t count, size_t, int) {
  return CollCounts{count, count, count, 0, 0};
}

double BusFactor(int) {
  return 1.0;
}

// Always a blocking group: the send and the receive must be fused to never deadlock.
braidResult_t Start(const OpCall& c, braidRequest_t* req) {
  if (req) *req = nullptr;
  braidResult_t r = braidGroupStart();
  if (r != braidSuccess) return r;
  braidResult_t s = braidSend(c.send, c.count, c.type, (c.rank + 1) % c.nranks, c.comm);
  braidResult_t v = braidRecv(c.recv, c.count, c.type, (c.rank - 1 + c.nranks) % c.nranks, c.comm);
  r = braidGroupEnd();
  if (s != braidSuccess) return s;
  if (v != braidSuccess) return v;
  return r;
}

ncclResult_t StartNccl(const NcclCall& c) {
  ncclResult_t r = c.nccl->groupStart();
  if (r != ncclSuccess) return r;
  ncclResult_t s = c.nccl->send(c.send, c.count, c.type, (c.rank + 1) % c.nranks, c.comm, c.stream);
  ncclResult_t v =
      c.nccl->recv(c.recv, c.count, c.type, (c.rank - 1 + c.nranks) % c.nranks, c.comm, c.stream);
  r = c.nccl->groupEnd();
  if (s != ncclSuccess) return s;
  if (v != ncclSuccess) return v;
  return r;
}

std::vector<Block> Expected(int rank, int n, int, const CollCounts& c) {
  return {{0, c.param, (rank - 1 + n) % n, 0}};
}

}  // namespace

int main(int argc, char** argv) {
  static const CollTest test{"sendrecv_perf", nullptr, false,    false,   false, Counts,
                             BusFactor,       Start,   Expected, nullptr, 0,     StartNccl};
  return PerfMain(argc, argv, test);
}
