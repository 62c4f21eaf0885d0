// Every collective x type x op x in/out-of-place x count, over real processes and real
// transports (shm and TCP), for every algorithm the tuner can be forced to, bit-exact against
// references computed in the test (reference.h).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/schedule.h"
#include "multirank/harness.h"
#include "multirank/reference.h"

namespace braid_test {
namespace {

using braid::CollKind;

struct Case {
  CollKind kind;
  DataType type;
  int op;  // braidRedOp_t, or kPreMul
  uint64_t count;
  bool in_place;
};
constexpr int kPreMul = -1;

bool Reduces(CollKind k) { return k == CollKind::kAllReduce || k == CollKind::kReduceScatter || k == CollKind::kReduce; }

std::string Name(const Case& c) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "%s %s %s count=%llu %s", braid::CollKindName(c.kind), braid::DataTypeName(c.type),
                Reduces(c.kind) ? (c.op == kPreMul ? "premulsum" : std::vector<const char*>{"sum", "prod", "max", "min", "avg"}[c.op]) : "-",
                static_cast<unsigned long long>(c.count), c.in_place ? "in-place" : "out-of-place");
  return buf;
}

// Runs one case on this rank; returns the number of wrong elements (prints the first).
uint64_t RunCase(braidComm_t comm, int rank, int n, const Case& c) {
  const size_t es = braid::DataTypeSize(c.type);
  const auto t = static_cast<braidDataType_t>(c.type);
  const int root = n > 1 ? (static_cast<int>(c.count) + 1) % n : 0;  // vary the root
  const uint64_t cnt = c.count;
  // Element counts of the user's buffers.
  uint64_t send_n = cnt, recv_n = cnt;
  switch (c.kind) {
    case CollKind::kAllGather: recv_n = cnt * n; break;
    case CollKind::kReduceScatter: send_n = cnt * n; break;
    case CollKind::kAllToAll: send_n = recv_n = cnt * n; break;
    default: break;
  }
  int op = c.op == kPreMul ? braidNumOps : c.op;  // input pattern for the pre-multiplied sum
  std::vector<uint8_t> send(send_n * es + 1), recv(recv_n * es + 1, 0xA5), want(recv_n * es + 1, 0xA5);
  // Inputs: element i of rank r's send buffer. For all-to-all and reduce-scatter the block sent
  // to rank q starts at q*cnt; the value depends on the global element index.
  for (uint64_t i = 0; i < send_n; ++i) Store(c.type, send.data(), i, InputValue(c.type, op, rank, i));

  braidRedOp_t rop = static_cast<braidRedOp_t>(c.op);
  if (c.op == kPreMul) {
    std::vector<uint8_t> two(8);
    Store(c.type, two.data(), 0, 2);
    if (braidRedOpCreatePreMulSum(&rop, two.data(), t, comm) != braidSuccess) {
      std::fprintf(stderr, "[rank %d] premulsum create: %s\n", rank, braidGetLastError(comm));
      return 1;
    }
  }

  // In place: put the input where the C API says the in-place form expects it.
  const void* sbuf = send.data();
  void* rbuf = recv.data();
  bool check_recv = true;
  if (c.in_place) {
    switch (c.kind) {
      case CollKind::kAllReduce:
      case CollKind::kBroadcast:
      case CollKind::kReduce:
        std::memcpy(recv.data(), send.data(), cnt * es);
        sbuf = recv.data();
        break;
      case CollKind::kAllGather:
        std::memcpy(recv.data() + rank * cnt * es, send.data(), cnt * es);
        sbuf = recv.data() + rank * cnt * es;
        break;
      case CollKind::kReduceScatter:
        // recvbuff = sendbuff + rank*count: the result lands inside the send buffer.
        sbuf = send.data();
        rbuf = send.data() + rank * cnt * es;
        break;
      default: break;
    }
  }

  braidResult_t rc = braidSuccess;
  switch (c.kind) {
    case CollKind::kAllReduce: rc = braidAllReduce(sbuf, rbuf, cnt, t, rop, comm); break;
    case CollKind::kReduceScatter: rc = braidReduceScatter(sbuf, rbuf, cnt, t, rop, comm); break;
    case CollKind::kAllGather: rc = braidAllGather(sbuf, rbuf, cnt, t, comm); break;
    case CollKind::kBroadcast: rc = braidBroadcast(sbuf, rbuf, cnt, t, root, comm); break;
    case CollKind::kReduce: rc = braidReduce(sbuf, rbuf, cnt, t, rop, root, comm); break;
    case CollKind::kAllToAll: rc = braidAllToAll(sbuf, rbuf, cnt, t, comm); break;
    default: break;
  }
  if (c.op == kPreMul) braidRedOpDestroy(rop, comm);
  if (rc != braidSuccess) {
    std::fprintf(stderr, "[rank %d] %s: returned %d: %s\n", rank, Name(c).c_str(), rc, braidGetLastError(comm));
    return cnt ? cnt : 1;
  }

  // Reference.
  switch (c.kind) {
    case CollKind::kAllReduce:
      for (uint64_t i = 0; i < cnt; ++i) StoreExpected(c.type, want.data(), i, op == braidNumOps ? braidNumOps : c.op, n, i);
      break;
    case CollKind::kReduceScatter:
      // Element rank*cnt+i of every rank's input, reduced.
      for (uint64_t i = 0; i < cnt; ++i) StoreExpected(c.type, want.data(), i, op == braidNumOps ? braidNumOps : c.op, n, rank * cnt + i);
      break;
    case CollKind::kAllGather:
      for (int q = 0; q < n; ++q)
        for (uint64_t i = 0; i < cnt; ++i) Store(c.type, want.data(), q * cnt + i, InputValue(c.type, op, q, i));
      break;
    case CollKind::kBroadcast:
      for (uint64_t i = 0; i < cnt; ++i) Store(c.type, want.data(), i, InputValue(c.type, op, root, i));
      break;
    case CollKind::kReduce:
      if (rank == root) {
        for (uint64_t i = 0; i < cnt; ++i) StoreExpected(c.type, want.data(), i, op == braidNumOps ? braidNumOps : c.op, n, i);
      } else {
        check_recv = !c.in_place;  // non-root recvbuff must be left untouched (0xA5)
      }
      break;
    case CollKind::kAllToAll:
      // Block q of my result is block `rank` of rank q's input.
      for (int q = 0; q < n; ++q)
        for (uint64_t i = 0; i < cnt; ++i)
          Store(c.type, want.data(), q * cnt + i, InputValue(c.type, op, q, rank * cnt + i));
      break;
    default: break;
  }
  if (!check_recv) return 0;
  const uint8_t* got = static_cast<const uint8_t*>(rbuf);
  uint64_t first = 0;
  uint64_t wrong = CountWrong(got, want.data(), recv_n, es, &first);
  if (c.kind == CollKind::kReduceScatter) wrong = CountWrong(got, want.data(), cnt, es, &first);
  if (wrong) {
    unsigned long long gv = 0, wv = 0;
    std::memcpy(&gv, got + first * es, es);
    std::memcpy(&wv, want.data() + first * es, es);
    std::fprintf(stderr, "[rank %d/%d] %s: %llu wrong elements, first at %llu: got 0x%llx want 0x%llx\n", rank, n,
                 Name(c).c_str(), static_cast<unsigned long long>(wrong), static_cast<unsigned long long>(first), gv, wv);
  }
  return wrong;
}

const CollKind kColls[] = {CollKind::kAllReduce, CollKind::kReduceScatter, CollKind::kAllGather,
                           CollKind::kBroadcast, CollKind::kReduce,        CollKind::kAllToAll};
const DataType kTypes[] = {DataType::kInt8,     DataType::kUint8,   DataType::kInt32,      DataType::kUint32,
                           DataType::kInt64,    DataType::kUint64,  DataType::kFloat16,    DataType::kFloat32,
                           DataType::kFloat64,  DataType::kBfloat16, DataType::kFloat8e4m3, DataType::kFloat8e5m2};
const int kOps[] = {braidSum, braidProd, braidMax, braidMin, braidAvg, kPreMul};

std::vector<Case> Matrix(const std::vector<uint64_t>& counts, const std::vector<DataType>& types,
                         const std::vector<int>& ops) {
  std::vector<Case> cases;
  for (uint64_t cnt : counts)
    for (CollKind k : kColls)
      for (DataType t : types)
        for (int op : (Reduces(k) ? ops : std::vector<int>{braidSum}))
          for (bool ip : {false, true}) {
            if (ip && k == CollKind::kAllToAll) continue;
            cases.push_back({k, t, op, cnt, ip});
          }
  return cases;
}

int RunCases(braidComm_t comm, int rank, int n, const std::vector<Case>& cases) {
  uint64_t bad = 0;
  for (const Case& c : cases) bad += RunCase(comm, rank, n, c);
  // Send/recv: a ring in a group plus a send to self, then a barrier.
  for (uint64_t cnt : {uint64_t{1}, uint64_t{7}, uint64_t{100003}}) {
    std::vector<int32_t> out(cnt), in(cnt, -1), self_in(cnt, -1);
    for (uint64_t i = 0; i < cnt; ++i) out[i] = static_cast<int32_t>(rank * 1000003 + i);
    braidGroupStart();
    braidSend(out.data(), cnt, braidInt32, (rank + 1) % n, comm);
    braidRecv(in.data(), cnt, braidInt32, (rank + n - 1) % n, comm);
    braidSend(out.data(), cnt, braidInt32, rank, comm);
    braidRecv(self_in.data(), cnt, braidInt32, rank, comm);
    if (braidGroupEnd() != braidSuccess) {
      std::fprintf(stderr, "[rank %d] send/recv group: %s\n", rank, braidGetLastError(comm));
      ++bad;
      continue;
    }
    int from = (rank + n - 1) % n;
    for (uint64_t i = 0; i < cnt; ++i) {
      if (in[i] != static_cast<int32_t>(from * 1000003 + i) || self_in[i] != out[i]) {
        std::fprintf(stderr, "[rank %d] send/recv count %llu wrong at %llu\n", rank, (unsigned long long)cnt,
                     (unsigned long long)i);
        ++bad;
        break;
      }
    }
  }
  if (braidBarrier(comm) != braidSuccess) {
    std::fprintf(stderr, "[rank %d] barrier: %s\n", rank, braidGetLastError(comm));
    ++bad;
  }
  return bad ? 1 : 0;
}

// ---------------------------------------------------------------- every type x op, small counts

using SmallParam = std::tuple<int, std::string, std::string>;  // nranks, transport, algorithm
class CollectivesSmall : public ::testing::TestWithParam<SmallParam> {};

TEST_P(CollectivesSmall, EveryTypeOpAndPlacementIsBitExact) {
  auto [n, transport, algo] = GetParam();
  JobOptions opt;
  opt.nranks = n;
  opt.timeout_s = 240;
  opt.env = {{"BRAID_TRANSPORTS", transport}, {"BRAID_TIMEOUT", "60"}};
  if (algo != "default") opt.env.push_back({"BRAID_ALGO", "all:" + algo});
  std::vector<DataType> types(std::begin(kTypes), std::end(kTypes));
  std::vector<int> ops(std::begin(kOps), std::end(kOps));
  auto cases = Matrix({0, 1, 7, 1000}, types, ops);
  auto out = RunJob(opt, [&](braidComm_t comm, int rank, int nranks, const braidUniqueId&) {
    return RunCases(comm, rank, nranks, cases);
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

std::vector<std::string> AlgorithmChoices() {
  std::vector<std::string> v{"default"};
  for (const auto* a : braid::AllAlgorithms()) v.push_back(a->name());
  return v;
}

INSTANTIATE_TEST_SUITE_P(Ranks, CollectivesSmall,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 5, 8), ::testing::Values("shm", "tcp"),
                                            ::testing::ValuesIn(AlgorithmChoices())),
                         [](const auto& info) {
                           return "n" + std::to_string(std::get<0>(info.param)) + "_" + std::get<1>(info.param) +
                                  "_" + std::get<2>(info.param);
                         });

// ---------------------------------------------------------------- large counts

using LargeParam = std::tuple<int, std::string>;
class CollectivesLarge : public ::testing::TestWithParam<LargeParam> {};

// count 1000003 (odd, not divisible by any rank count) for each element size and every op.
TEST_P(CollectivesLarge, OddMillionElementsBitExact) {
  auto [n, transport] = GetParam();
  JobOptions opt;
  opt.nranks = n;
  opt.timeout_s = 400;
  opt.env = {{"BRAID_TRANSPORTS", transport}, {"BRAID_TIMEOUT", "120"}};
  auto cases = Matrix({1000003}, {DataType::kInt8, DataType::kBfloat16, DataType::kFloat32, DataType::kFloat64},
                      {braidSum, braidMax, braidAvg});
  auto more = Matrix({1000003}, {DataType::kFloat8e4m3, DataType::kFloat16, DataType::kUint64, DataType::kInt32},
                     {braidProd, braidMin, kPreMul});
  cases.insert(cases.end(), more.begin(), more.end());
  auto out = RunJob(opt, [&](braidComm_t comm, int rank, int nranks, const braidUniqueId&) {
    return RunCases(comm, rank, nranks, cases);
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// A 64 MiB buffer (the collective's largest buffer) for every collective, float sum.
TEST_P(CollectivesLarge, SixtyFourMiBBitExact) {
  auto [n, transport] = GetParam();
  JobOptions opt;
  opt.nranks = n;
  opt.timeout_s = 400;
  opt.env = {{"BRAID_TRANSPORTS", transport}, {"BRAID_TIMEOUT", "120"}};
  auto out = RunJob(opt, [&](braidComm_t comm, int rank, int nranks, const braidUniqueId&) {
    std::vector<Case> cases;
    const uint64_t elems = (64ull << 20) / sizeof(float);
    for (CollKind k : kColls) {
      bool spread = k == CollKind::kAllGather || k == CollKind::kReduceScatter || k == CollKind::kAllToAll;
      cases.push_back({k, DataType::kFloat32, braidSum, spread ? elems / nranks : elems, false});
    }
    return RunCases(comm, rank, nranks, cases);
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

INSTANTIATE_TEST_SUITE_P(Ranks, CollectivesLarge,
                         ::testing::Combine(::testing::Values(2, 3, 4, 8), ::testing::Values("shm", "tcp")),
                         [](const auto& info) {
                           return "n" + std::to_string(std::get<0>(info.param)) + "_" + std::get<1>(info.param);
                         });

}  // namespace
}  // namespace braid_test
