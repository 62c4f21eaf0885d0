// The shim's device kernels proven by the verifier (algorithms/device_kernel_schedule.h): each
// rank's device::PeerReduce for a collective, as nccl/peer_reduce_plan.h's Build makes it for the
// device path, turned into slices of its ranks' buffers and into a one-sided schedule per rank.
// The verifier then proves, for every rank count 1..9, type size, op, root and placement: every
// output holds exactly the collective's contributions (AVG divided once), no two
// ranks touch an element without an order between them (an in-place all-reduce's segments), no
// rank reads or writes a peer's buffer before the peer exposed it and agreed, and no write into a
// rank's buffer can outlive that rank's call. Mutations show that each of those is checked. (The
// order of a reduction's sources, which makes the result bit-exact against the host path, is
// not the verifier's to see: each element is reduced by one rank; the multirank tests compare
// bits.)
//
// Build works on addresses: each rank's buffers get addresses of their own here (the send buffer
// and, apart, the receive buffer; one buffer in place, as the C API lays it out), and every
// pointer Build returns must fall inside one of them (else the kernel would touch memory no call
// names: a failure too).
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "algorithms/device_kernel_schedule.h"
#include "algorithms/lowering.h"
#include "algorithms/simulator.h"
#include "algorithms/tuner.h"
#include "algorithms/verifier.h"
#include "nccl/peer_reduce_plan.h"

namespace {

using braid::CollArgs;
using braid::CollKind;
using braid::KernelSlices;
using braid::RankSchedule;
using braid::Result;
using braid::Slice;
using braid::Status;
using braid::nccl::Plan;
using braid::nccl::WindowKind;

struct Shape {
  WindowKind kind;
  ncclDataType_t type = ncclFloat32;
  ncclRedOp_t op = ncclSum;
  int root = 0;
  size_t count = 0;
  int nranks = 1;
  bool in_place = false;

  std::string name() const {
    return std::string(braid::nccl::KindName(static_cast<int32_t>(kind))) +
           " n=" + std::to_string(nranks) + " count=" + std::to_string(count) +
           " type=" + std::to_string(static_cast<int>(type)) +
           " op=" + std::to_string(static_cast<int>(op)) + " root=" + std::to_string(root) +
           (in_place ? " in place" : "");
  }
};

CollKind KindOf(WindowKind k) {
  switch (k) {
    case WindowKind::kAllReduce:
      return CollKind::kAllReduce;
    case WindowKind::kAllGather:
      return CollKind::kAllGather;
    case WindowKind::kReduceScatter:
      return CollKind::kReduceScatter;
    case WindowKind::kBroadcast:
      return CollKind::kBroadcast;
    case WindowKind::kReduce:
      return CollKind::kReduce;
    default:
      return CollKind::kAllToAll;
  }
}

braid::DataType TypeOf(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
      return braid::DataType::kInt8;
    case ncclFloat16:
      return braid::DataType::kFloat16;
    case ncclFloat64:
      return braid::DataType::kFloat64;
    default:
      return braid::DataType::kFloat32;
  }
}

CollArgs ArgsOf(const Shape& s) {
  CollArgs a;
  a.kind = KindOf(s.kind);
  a.dtype = TypeOf(s.type);
  a.op = s.op == ncclAvg ? braid::ReduceOp::kSum : static_cast<braid::ReduceOp>(s.op);
  a.avg = s.op == ncclAvg;
  a.count = s.count;
  a.root = s.root;
  a.nranks = s.nranks;
  a.in_place = s.in_place;
  a.memory = braid::MemoryType::kCuda;
  return a;
}

// Rank k's buffers at addresses of their own: 1 GiB apart per rank, the receive buffer half way.
constexpr uintptr_t kRankSpan = uintptr_t{1} << 30;
uintptr_t SendAddr(int k) {
  return kRankSpan * static_cast<uintptr_t>(k + 1);
}

struct Layout {
  Shape s;
  size_t elt = 0;
  size_t send_bytes = 0, recv_bytes = 0;
  uintptr_t send(int k) const { return SendAddr(k); }
  uintptr_t recv(int k) const {
    if (!s.in_place) return SendAddr(k) + kRankSpan / 2;
    // The C API's in-place layouts: the all-gather's input is the rank's block of its output,
    // the reduce-scatter's output the rank's block of its input, otherwise one buffer.
    if (s.kind == WindowKind::kReduceScatter) return send(k) + s.count * elt * k;
    return SendAddr(k);
  }
  uintptr_t input(int k) const {
    if (s.in_place && s.kind == WindowKind::kAllGather) return recv(k) + s.count * elt * k;
    return send(k);
  }
};

// The slice of `p` (count elements) as rank `me` names it: a receive buffer when written (or
// read in place where the send buffer is the receive buffer's alias, as the verifier lays it).
Result<Slice> SliceOf(const Layout& l, int me, const void* p, size_t count, bool write) {
  const auto at = reinterpret_cast<uintptr_t>(p);
  for (int k = 0; k < l.s.nranks; ++k) {
    const auto rank = static_cast<int16_t>(k == me ? braid::kLocal : k);
    const auto in = [&](uintptr_t base, size_t bytes) {
      return at >= base && at + count * l.elt <= base + bytes && (at - base) % l.elt == 0;
    };
    const bool recv_alias = write || (l.s.in_place && l.s.kind == WindowKind::kAllGather);
    if (!recv_alias && in(l.send(k), l.send_bytes))
      return Slice(braid::kSendBuf, (at - l.send(k)) / l.elt, count, rank);
    if (in(l.recv(k), l.recv_bytes))
      return Slice(braid::kRecvBuf, (at - l.recv(k)) / l.elt, count, rank);
  }
  return braid::InternalError("a kernel of rank " + std::to_string(me) + " touches " +
                              std::to_string(count) + " elements at " + std::to_string(at) +
                              ", in no buffer of the call");
}

// Every rank's kernel, from Build, in slices.
Result<std::vector<std::vector<KernelSlices>>> KernelsOf(const Shape& s) {
  Layout l{s};
  Plan probe;
  probe.kind = s.kind;
  probe.type = s.type;
  probe.count = s.count;
  probe.nranks = s.nranks;
  l.elt = probe.elt();
  l.send_bytes = probe.sendBytes();
  l.recv_bytes = probe.recvBytes();
  std::vector<std::vector<KernelSlices>> all(static_cast<size_t>(s.nranks));
  for (int r = 0; r < s.nranks; ++r) {
    Plan c = probe;
    c.op = s.op;
    c.root = s.root;
    c.rank = r;
    c.send = c.usesSend() ? reinterpret_cast<const void*>(l.input(r)) : nullptr;
    c.recv = c.usesRecv() ? reinterpret_cast<void*>(l.recv(r)) : nullptr;
    const braid::device::PeerReduce k = braid::nccl::Build(
        c, [&](int q) { return reinterpret_cast<char*>(l.input(q)); },
        [&](int q) { return reinterpret_cast<char*>(l.recv(q)); });
    if (k.count == 0) continue;  // nothing for this rank (a segment past the end, a non-root)
    // What the slices cannot carry, checked against the call: the kernel's type, op and
    // divisor (the schedule takes them from the call's arguments).
    const bool reduces = c.reduces();
    const bool avg = reduces && s.op == ncclAvg;
    if (k.type != static_cast<braid::DataType>(s.type) ||
        (reduces && k.op != (avg ? braid::ReduceOp::kSum : static_cast<braid::ReduceOp>(s.op))) ||
        k.divide_by != (avg ? static_cast<uint64_t>(s.nranks) : 0))
      return braid::InternalError("rank " + std::to_string(r) +
                                  "'s kernel has another type, op or divisor than the call");
    KernelSlices ks;
    ks.pairwise = k.pairwise;
    // AVG: the kernel divides by N (checked above) when N > 1; by one rank it is the identity,
    // which the IR still writes as a division (the verifier asks every AVG result for one).
    ks.divide = avg;
    for (const void* p : k.src) {
      auto sl = SliceOf(l, r, p, k.count, false);
      if (!sl.ok()) return sl.status();
      ks.src.push_back(*sl);
    }
    for (void* p : k.dst) {
      auto sl = SliceOf(l, r, p, k.count, true);
      if (!sl.ok()) return sl.status();
      ks.dst.push_back(*sl);
    }
    all[static_cast<size_t>(r)].push_back(std::move(ks));
  }
  return all;
}

using Mutate = std::function<void(int rank, RankSchedule* s)>;
using MutateKernels = std::function<void(std::vector<std::vector<KernelSlices>>* k)>;

Status Verify(const Shape& s, const Mutate& mutate = nullptr,
              const MutateKernels& mutate_kernels = nullptr) {
  auto kernels = KernelsOf(s);
  if (!kernels.ok()) return kernels.status();
  if (mutate_kernels) mutate_kernels(&*kernels);
  const CollArgs a = ArgsOf(s);
  return braid::VerifyLoweredSchedules(a, "device kernels", [&](int r) -> Result<RankSchedule> {
    auto sched = braid::DeviceKernelSchedule(a, r, *kernels);
    if (sched.ok() && mutate) mutate(r, &*sched);
    return sched;
  });
}

TEST(DeviceKernelSchedules, EveryCollectiveRankCountTypeOpAndPlacementIsProven) {
  int proven = 0;
  for (WindowKind kind :
       {WindowKind::kAllReduce, WindowKind::kAllGather, WindowKind::kReduceScatter,
        WindowKind::kBroadcast, WindowKind::kReduce, WindowKind::kAllToAll}) {
    const bool reduces = kind == WindowKind::kAllReduce || kind == WindowKind::kReduceScatter ||
                         kind == WindowKind::kReduce;
    for (int n = 1; n <= 9; ++n)
      for (ncclDataType_t type : {ncclInt8, ncclFloat16, ncclFloat32, ncclFloat64})
        // Counts below, at and past a 64-byte group per rank (an all-reduce's segments: some
        // ranks get none), and uneven ones.
        for (size_t count : {size_t{1}, size_t{5}, size_t{64}, size_t{131}})
          for (bool in_place : {false, true}) {
            if (in_place && kind == WindowKind::kAllToAll) continue;  // no in-place form in the IR
            for (ncclRedOp_t op : {ncclSum, ncclMax, ncclAvg}) {
              if (!reduces && op != ncclSum) continue;
              Shape s{kind, type, op, n - 1, count, n, in_place};
              Status st = Verify(s);
              ASSERT_TRUE(st.ok()) << s.name() << ": " << st.message();
              ++proven;
            }
          }
  }
  EXPECT_EQ(proven, 3312);  // every shape above, none skipped by accident
}

TEST(DeviceKernelSchedules, RootsOtherThanTheLastRank) {
  for (WindowKind kind : {WindowKind::kBroadcast, WindowKind::kReduce})
    for (int root = 0; root < 5; ++root)
      for (bool in_place : {false, true}) {
        Shape s{kind, ncclFloat32, ncclSum, root, 77, 5, in_place};
        Status st = Verify(s);
        EXPECT_TRUE(st.ok()) << s.name() << ": " << st.message();
      }
}

// Two ranks' all-reduce segments overlapping by an element: both write it into every output with
// nothing ordering them.
TEST(DeviceKernelSchedules, OverlappingSegmentsAreARace) {
  const Shape s{WindowKind::kAllReduce, ncclFloat32, ncclSum, 0, 64, 4, true};
  Status st = Verify(s, nullptr, [](auto* k) {
    for (auto& src : (*k)[1][0].src) {
      --src.offset;
      ++src.count;
    }
    for (auto& dst : (*k)[1][0].dst) {
      --dst.offset;
      ++dst.count;
    }
  });
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("nothing ordering"), std::string::npos) << st.message();
}

// A segment left out: the outputs miss its elements.
TEST(DeviceKernelSchedules, AMissingSegmentLeavesTheOutputUnwritten) {
  const Shape s{WindowKind::kAllReduce, ncclFloat32, ncclSum, 0, 64, 4, false};
  Status st = Verify(s, nullptr, [](auto* k) { (*k)[2].clear(); });
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("never-written"), std::string::npos) << st.message();
}

// Without the last wait (the finish barrier), a rank's call may end while a peer still writes its
// output: the reason `done` waits for every rank's kernel.
TEST(DeviceKernelSchedules, ACallThatEndsBeforeItsPeersWritesEndIsRefused) {
  for (WindowKind kind : {WindowKind::kAllReduce, WindowKind::kAllGather, WindowKind::kAllToAll}) {
    const Shape s{kind, ncclFloat32, ncclSum, 0, 64, 3, false};
    Status st = Verify(s, [](int, RankSchedule* r) { r->channels[0].steps.pop_back(); });
    ASSERT_FALSE(st.ok()) << s.name();
    EXPECT_NE(st.message().find("may return while"), std::string::npos) << st.message();
  }
}

// Without the agreement (the wait for every peer's first post), a kernel would touch a peer's
// buffer before that peer exposed it (and before it knows the call is the same).
TEST(DeviceKernelSchedules, AKernelBeforeTheAgreementIsRefused) {
  const Shape s{WindowKind::kAllGather, ncclFloat32, ncclSum, 0, 64, 3, false};
  Status st = Verify(s, [](int, RankSchedule* r) {
    auto& steps = r->channels[0].steps;
    // expose, signal 0, wait 0, ...: drop the wait.
    for (size_t i = 0; i < steps.size(); ++i)
      if (!steps[i].ops.empty() && steps[i].ops[0].kind == braid::StepOpKind::kWait) {
        steps.erase(steps.begin() + static_cast<std::ptrdiff_t>(i));
        break;
      }
  });
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("has not exposed"), std::string::npos) << st.message();
}

// A put into a peer's buffer is a device kernel's right alone: a host schedule that writes a
// peer's exposed buffer is refused by the structure check.
TEST(DeviceKernelSchedules, AHostScheduleMayNotWriteAPeersExposedBuffer) {
  const Shape s{WindowKind::kAllGather, ncclFloat32, ncclSum, 0, 8, 2, false};
  Status st = Verify(s, [](int, RankSchedule* r) {
    r->device_kernels = false;
    for (auto& b : r->buffers) b.memory = braid::MemoryType::kHost;
  });
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("which is not a window"), std::string::npos) << st.message();
}

// The simulator prices a device kernel's schedule on LinkModel::device_peer: an all-gather's
// kernel puts the rank's block into every output at once (one step of N puts of `bytes`), between
// the agreement (a signal seen after alpha) and the finish (another alpha): on N ranks,
// 2 alpha + N x bytes / beta, exactly. Doubling beta halves the kernel's part.
TEST(DeviceKernelSchedules, TheSimulatorPricesTheKernelsOnTheDevicePeerLink) {
  const Shape s{WindowKind::kAllGather, ncclFloat32, ncclSum, 0, 1 << 20, 4, false};
  auto kernels = KernelsOf(s);
  ASSERT_TRUE(kernels.ok()) << kernels.status().message();
  const CollArgs a = ArgsOf(s);
  const auto source = [&](int r) { return braid::DeviceKernelSchedule(a, r, *kernels); };
  braid::LinkModel m;
  m.device_peer = {7e-6, 100e9};
  const double bytes = 4.0 * (1 << 20);
  // The fold copies the block into scratch (bytes), then N puts or copies of it.
  const double want = 2 * 7e-6 + (bytes + 4 * bytes) / 100e9;
  auto t = braid::SimulateLoweredSeconds(a, m, source);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_NEAR(*t, want, want * 1e-9);
  m.device_peer.beta_bytes_s = 200e9;
  auto faster = braid::SimulateLoweredSeconds(a, m, source);
  ASSERT_TRUE(faster.ok());
  EXPECT_NEAR(*faster, 2 * 7e-6 + (bytes + 4 * bytes) / 200e9, want * 1e-9);
}

// The device kernels' rules are theirs alone: an algorithm whose schedule claims them is refused
// by BuildSchedule, so the engine never runs a schedule that writes a peer's exposed buffer.
TEST(DeviceKernelSchedules, AnAlgorithmMayNotClaimTheDeviceKernelsRules) {
  struct Claims final : braid::Algorithm {
    const char* name() const override { return "claims"; }
    bool supports(const CollArgs&) const override { return true; }
    Result<RankSchedule> build(const CollArgs&, int) const override {
      RankSchedule s;
      s.channels.resize(1);
      s.device_kernels = true;
      return s;
    }
  } claims;
  CollArgs a;
  a.count = 4;
  a.nranks = 2;
  auto s = braid::BuildSchedule(claims, a, 0);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("device kernels"), std::string::npos) << s.status().message();
}

}  // namespace
