// The cases of the collective tests: run one collective on this rank with inputs from
// reference.h and count the elements that differ bit-wise from the reference.
#pragma once
#include <cstdio>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/schedule.h"
#include "multirank/harness.h"
#include "multirank/reference.h"

namespace braid_test {

using braid::CollKind;

struct Case {
  CollKind kind;
  DataType type;
  int op;  // braidRedOp_t, or kPreMul
  uint64_t count;
  bool in_place;
};
constexpr int kPreMul = -1;

inline bool Reduces(CollKind k) {
  return k == CollKind::kAllReduce || k == CollKind::kReduceScatter || k == CollKind::kReduce;
}

inline std::string Name(const Case& c) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "%s %s %s count=%llu %s", braid::CollKindName(c.kind),
                braid::DataTypeName(c.type),
                Reduces(c.kind) ? (c.op == kPreMul ? "premulsum"
                                                   : std::vector<const char*>{"sum", "prod", "max",
                                                                              "min", "avg"}[c.op])
                                : "-",
                static_cast<unsigned long long>(c.count), c.in_place ? "in-place" : "out-of-place");
  return buf;
}

// Runs one case on this rank; returns the number of wrong elements (prints the first).
inline uint64_t RunCase(braidComm_t comm, int rank, int n, const Case& c) {
  const size_t es = braid::DataTypeSize(c.type);
  const auto t = static_cast<braidDataType_t>(c.type);
  const int root = n > 1 ? (static_cast<int>(c.count) + 1) % n : 0;  // vary the root
  const uint64_t cnt = c.count;
  // Element counts of the user's buffers.
  uint64_t send_n = cnt, recv_n = cnt;
  switch (c.kind) {
    case CollKind::kAllGather:
      recv_n = cnt * n;
      break;
    case CollKind::kReduceScatter:
      send_n = cnt * n;
      break;
    case CollKind::kAllToAll:
      send_n = recv_n = cnt * n;
      break;
    default:
      break;
  }
  int op = c.op == kPreMul ? braidNumOps : c.op;  // input pattern for the pre-multiplied sum
  std::vector<uint8_t> send(send_n * es + 1), recv(recv_n * es + 1, 0xA5),
      want(recv_n * es + 1, 0xA5);
  // Inputs: element i of rank r's send buffer. For all-to-all and reduce-scatter the block sent
  // to rank q starts at q*cnt; the value depends on the global element index.
  const uint64_t period = InputPeriod(c.type, op);
  TileElements(send.data(), send_n, es, period,
               [&](void* b, uint64_t i) { Store(c.type, b, i, InputValue(c.type, op, rank, i)); });

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
      default:
        break;
    }
  }

  braidResult_t rc = braidSuccess;
  switch (c.kind) {
    case CollKind::kAllReduce:
      rc = braidAllReduce(sbuf, rbuf, cnt, t, rop, comm);
      break;
    case CollKind::kReduceScatter:
      rc = braidReduceScatter(sbuf, rbuf, cnt, t, rop, comm);
      break;
    case CollKind::kAllGather:
      rc = braidAllGather(sbuf, rbuf, cnt, t, comm);
      break;
    case CollKind::kBroadcast:
      rc = braidBroadcast(sbuf, rbuf, cnt, t, root, comm);
      break;
    case CollKind::kReduce:
      rc = braidReduce(sbuf, rbuf, cnt, t, rop, root, comm);
      break;
    case CollKind::kAllToAll:
      rc = braidAllToAll(sbuf, rbuf, cnt, t, comm);
      break;
    default:
      break;
  }
  if (c.op == kPreMul) braidRedOpDestroy(rop, comm);
  if (rc != braidSuccess) {
    std::fprintf(stderr, "[rank %d] %s: returned %d: %s\n", rank, Name(c).c_str(), rc,
                 braidGetLastError(comm));
    return cnt ? cnt : 1;
  }

  // Reference: one period of the inputs element by element, then tiled (TileElements).
  const int rop_ref = op == braidNumOps ? braidNumOps : c.op;
  // Element i of `block` (cnt elements from `b`) is rank q's input element `from` + i.
  auto inputs_of = [&](uint8_t* block, int q, uint64_t from) {
    TileElements(block, cnt, es, period, [&](void* b, uint64_t i) {
      Store(c.type, b, i, InputValue(c.type, op, q, from + i));
    });
  };
  // Element i is the reduction over the ranks of input element `from` + i.
  auto reduced_from = [&](uint64_t from) {
    TileElements(want.data(), cnt, es, period,
                 [&](void* b, uint64_t i) { StoreExpected(c.type, b, i, rop_ref, n, from + i); });
  };
  switch (c.kind) {
    case CollKind::kAllReduce:
      reduced_from(0);
      break;
    case CollKind::kReduceScatter:
      reduced_from(rank * cnt);  // element rank*cnt+i of every rank's input, reduced
      break;
    case CollKind::kAllGather:
      for (int q = 0; q < n; ++q) inputs_of(want.data() + q * cnt * es, q, 0);
      break;
    case CollKind::kBroadcast:
      inputs_of(want.data(), root, 0);
      break;
    case CollKind::kReduce:
      if (rank == root)
        reduced_from(0);
      else
        check_recv = !c.in_place;  // non-root recvbuff must be left untouched (0xA5)
      break;
    case CollKind::kAllToAll:
      // Block q of my result is block `rank` of rank q's input.
      for (int q = 0; q < n; ++q) inputs_of(want.data() + q * cnt * es, q, rank * cnt);
      break;
    default:
      break;
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
    std::fprintf(stderr,
                 "[rank %d/%d] %s: %llu wrong elements, first at %llu: got 0x%llx want 0x%llx\n",
                 rank, n, Name(c).c_str(), static_cast<unsigned long long>(wrong),
                 static_cast<unsigned long long>(first), gv, wv);
  }
  return wrong;
}

inline const CollKind kColls[] = {CollKind::kAllReduce, CollKind::kReduceScatter,
                                  CollKind::kAllGather, CollKind::kBroadcast,
                                  CollKind::kReduce,    CollKind::kAllToAll};
inline const DataType kTypes[] = {
    DataType::kInt8,    DataType::kUint8,    DataType::kInt32,      DataType::kUint32,
    DataType::kInt64,   DataType::kUint64,   DataType::kFloat16,    DataType::kFloat32,
    DataType::kFloat64, DataType::kBfloat16, DataType::kFloat8e4m3, DataType::kFloat8e5m2};
inline const int kOps[] = {braidSum, braidProd, braidMax, braidMin, braidAvg, kPreMul};

inline std::vector<Case> Matrix(const std::vector<uint64_t>& counts,
                                const std::vector<DataType>& types, const std::vector<int>& ops) {
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

inline int RunCases(braidComm_t comm, int rank, int n, const std::vector<Case>& cases) {
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
        std::fprintf(stderr, "[rank %d] send/recv count %llu wrong at %llu\n", rank,
                     (unsigned long long)cnt, (unsigned long long)i);
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

}  // namespace braid_test
