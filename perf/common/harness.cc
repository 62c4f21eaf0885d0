#include "common/harness.h"

#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "common/launch.h"
#include "common/options.h"
#include "common/report.h"
#include "common/traffic.h"

namespace braid_perf {

namespace {

constexpr int kExitWrong = 7;
constexpr int kExitUsage = 2;
constexpr int kExitRuntime = 1;
constexpr size_t kDeviceLineBytes = 256;
constexpr size_t kMaxInFlight = 8;  // non-blocking ops issued before waiting for the oldest
constexpr unsigned char kPoison = 0xA5;

// One page-aligned, pre-touched host buffer (first-touch page faults stay out of the timings).
class HostBuffer {
 public:
  explicit HostBuffer(size_t bytes) : bytes_(std::max<size_t>(bytes, 64)) {
    size_t rounded = (bytes_ + 4095) & ~size_t{4095};
    if (posix_memalign(&p_, 4096, rounded) != 0) p_ = nullptr;
    if (p_) std::memset(p_, 0, rounded);
  }
  ~HostBuffer() { std::free(p_); }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  unsigned char* get() const { return static_cast<unsigned char*>(p_); }
  size_t bytes() const { return bytes_; }

 private:
  size_t bytes_;
  void* p_ = nullptr;
};

braidRedOp_t BuiltinOp(OpKind k) {
  switch (k) {
    case OpKind::kProd:
      return braidProd;
    case OpKind::kMax:
      return braidMax;
    case OpKind::kMin:
      return braidMin;
    case OpKind::kAvg:
      return braidAvg;
    default:
      return braidSum;
  }
}

uint64_t NextSize(uint64_t size, const Options& o) {
  if (o.step_factor > 1) return size == 0 ? 1 : size * o.step_factor;
  return size + o.step_bytes;
}

// What the threads of this process share.
struct Shared {
  const CollTest* test;
  const DeviceApi* dev = nullptr;  // -M cuda
  Options opt;
  Launch launch;
  RunInfo info;
  int world = 1;
  std::vector<RowResult> rows;  // written by world rank 0 only
  std::vector<DeviceLine> devices;
  uint64_t total_wrong = 0;
  double max_rel_error = 0;  // --quant
  double busbw_sum = 0;
  int busbw_count = 0;
  bool json_failed = false;
};

// One rank of the test, run by one thread.
class RankRunner {
 public:
  RankRunner(Shared* s, int thread)
      : s_(*s), t_(*s->test), o_(s->opt), comm_(s->launch.comms[thread]), api_(s->dev) {
    braidCommUserRank(comm_, &rank_);
    braidCommCount(comm_, &nranks_);
    printer_ = rank_ == 0;
  }

  void run() {
    if (api_) selectDevice();
    gatherDevices();
    if (o_.traffic && !traffic_.Init(comm_))
      fatal("--traffic: finding the peers on this node", braidErrInternal);
    if (printer_) PrintHeader(stdout, s_.info, o_, s_.devices);

    send_ = std::make_unique<HostBuffer>(o_.max_bytes);
    recv_ = std::make_unique<HostBuffer>(o_.max_bytes);
    if (!send_->get() || !recv_->get())
      fatal("allocating 2 x " + std::to_string(o_.max_bytes) + " bytes of host memory",
            braidErrSystem, false);
    if (api_) setUpDevice();

    for (const TypeInfo* type : o_.types) {
      for (const OpInfo* op : o_.ops) {
        runTypeOp(*type, op);
      }
    }

    if (printer_) {
      const double avg = s_.busbw_count ? s_.busbw_sum / s_.busbw_count : 0;
      if (o_.traffic) PrintTraffic(stdout, s_.rows);
      if (o_.predict) PrintPredictions(stdout, s_.rows);
      PrintFooter(stdout, s_.info, o_, s_.total_wrong, avg, s_.max_rel_error);
      if (!o_.json_file.empty() &&
          !WriteJson(o_.json_file, s_.info, o_, s_.devices, s_.rows, s_.total_wrong, avg))
        s_.json_failed = true;
    }
    // Nobody exits before rank 0 has printed: a launcher stops the job at the first non-zero
    // exit (status 7 after wrong elements), which must not cut the report short.
    check(braidBarrier(comm_), "braidBarrier (end)");
    if (api_) tearDownDevice();
  }

 private:
  [[noreturn]] void fatal(const std::string& what, braidResult_t r, bool from_braid = true) {
    std::fprintf(stderr, "%s: rank %d: %s failed: %s%s%s\n", t_.binary, rank_, what.c_str(),
                 braidGetErrorString(r), from_braid ? ": " : "",
                 from_braid ? braidGetLastError(comm_) : "");
    AbortJob(s_.launch, kExitRuntime);
  }

  void check(braidResult_t r, const char* what) {
    if (r != braidSuccess) fatal(what, r);
  }

  // -M cuda: errors of the driver and of NCCL end the job like braid's.
  void checkCuda(int rc, const char* what) {
    if (rc == 0) return;
    std::fprintf(stderr, "%s: rank %d: %s failed: %s\n", t_.binary, rank_, what,
                 api_->cudaError(rc).c_str());
    AbortJob(s_.launch, kExitRuntime);
  }
  void checkNccl(ncclResult_t r, const char* what) {
    if (r == ncclSuccess) return;
    const char* last = api_->nccl.getLastError ? api_->nccl.getLastError(nccl_) : nullptr;
    std::fprintf(stderr, "%s: rank %d: %s failed: %s%s%s\n", t_.binary, rank_, what,
                 api_->nccl.getErrorString(r), last && *last ? ": " : "", last ? last : "");
    AbortJob(s_.launch, kExitRuntime);
  }

  // -R with an NCCL that predates the registration calls.
  void missingEntry(const char* name) {
    std::fprintf(stderr, "%s: rank %d: -R %d: %s has no %s\n", t_.binary, rank_, o_.registration,
                 api_->libnccl.c_str(), name);
    AbortJob(s_.launch, kExitRuntime);
  }

  // -M cuda: the device of this rank, as nccl-tests picks it: the rank's index among the ranks of
  // its host, modulo the devices the driver sees (so several ranks may share one GPU), made
  // current on this thread for everything after (the buffers, the stream, the NCCL communicator).
  void selectDevice() {
    char host[64] = {};
    gethostname(host, sizeof host - 1);
    std::vector<char> all(sizeof host * nranks_);
    check(braidAllGather(host, all.data(), sizeof host, braidUint8, comm_),
          "braidAllGather (host names)");
    int local = 0;
    for (int r = 0; r < rank_; ++r)
      local += std::strncmp(all.data() + r * sizeof host, host, sizeof host) == 0;
    const int ordinal = local % api_->device_count;
    int dev = 0;
    void* ctx = nullptr;
    checkCuda(api_->cu.deviceGet(&dev, ordinal), "cuDeviceGet");
    checkCuda(api_->cu.primaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    checkCuda(api_->cu.ctxSetCurrent(ctx), "cuCtxSetCurrent");
    cuda_device_ = ordinal;
    char name[96] = "cuda";
    if (api_->cu.deviceGetName) api_->cu.deviceGetName(name, sizeof name - 1, dev);
    device_name_ = name;
  }

  // -M cuda: the device buffers (the host buffers stay, as the images the data is made and
  // checked in), the stream, and the NCCL communicator over the id rank 0 made.
  void setUpDevice() {
    const size_t bytes = std::max<uint64_t>(o_.max_bytes, 64);
    checkCuda(api_->cu.memAlloc(&dsend_, bytes), "cuMemAlloc (send buffer)");
    checkCuda(api_->cu.memAlloc(&drecv_, bytes), "cuMemAlloc (receive buffer)");
    checkCuda(api_->cu.streamCreate(&stream_, 0), "cuStreamCreate");
    ncclUniqueId id;
    std::memset(&id, 0, sizeof id);
    if (rank_ == 0) checkNccl(api_->nccl.getUniqueId(&id), "ncclGetUniqueId");
    check(braidBroadcast(&id, &id, sizeof id, braidUint8, 0, comm_), "braidBroadcast (NCCL id)");
    checkNccl(api_->nccl.commInitRank(&nccl_, nranks_, id, rank_), "ncclCommInitRank");
    // -R: both buffers registered (collective for windows: every rank registers in this order).
    if (o_.registration == 1) {
      if (!api_->nccl.commRegister || !api_->nccl.commDeregister) missingEntry("ncclCommRegister");
      checkNccl(api_->nccl.commRegister(nccl_, reinterpret_cast<void*>(dsend_), bytes, &reg_send_),
                "ncclCommRegister (send buffer)");
      checkNccl(api_->nccl.commRegister(nccl_, reinterpret_cast<void*>(drecv_), bytes, &reg_recv_),
                "ncclCommRegister (receive buffer)");
    } else if (o_.registration == 2) {
      if (!api_->nccl.commWindowRegister || !api_->nccl.commWindowDeregister)
        missingEntry("ncclCommWindowRegister");
      checkNccl(api_->nccl.commWindowRegister(nccl_, reinterpret_cast<void*>(dsend_), bytes,
                                              &win_send_, NCCL_WIN_COLL_SYMMETRIC),
                "ncclCommWindowRegister (send buffer)");
      checkNccl(api_->nccl.commWindowRegister(nccl_, reinterpret_cast<void*>(drecv_), bytes,
                                              &win_recv_, NCCL_WIN_COLL_SYMMETRIC),
                "ncclCommWindowRegister (receive buffer)");
    }
  }

  void tearDownDevice() {
    checkCuda(api_->cu.streamSynchronize(stream_), "cuStreamSynchronize (end)");
    if (reg_send_) checkNccl(api_->nccl.commDeregister(nccl_, reg_send_), "ncclCommDeregister");
    if (reg_recv_) checkNccl(api_->nccl.commDeregister(nccl_, reg_recv_), "ncclCommDeregister");
    if (win_send_)
      checkNccl(api_->nccl.commWindowDeregister(nccl_, win_send_), "ncclCommWindowDeregister");
    if (win_recv_)
      checkNccl(api_->nccl.commWindowDeregister(nccl_, win_recv_), "ncclCommWindowDeregister");
    reg_send_ = reg_recv_ = nullptr;
    win_send_ = win_recv_ = nullptr;
    checkNccl(api_->nccl.commDestroy(nccl_), "ncclCommDestroy");
    nccl_ = nullptr;
    checkCuda(api_->cu.memFree(dsend_), "cuMemFree");
    checkCuda(api_->cu.memFree(drecv_), "cuMemFree");
    checkCuda(api_->cu.streamDestroy(stream_), "cuStreamDestroy");
  }

  // Synchronises the stream, then asks for the communicator's asynchronous error: a stream-ordered
  // call that failed released its stream (braid) and must not pass for a fast one.
  void syncStream(const char* what) {
    checkCuda(api_->cu.streamSynchronize(stream_), what);
    ncclResult_t async = ncclSuccess;
    checkNccl(api_->nccl.commGetAsyncError(nccl_, &async), "ncclCommGetAsyncError");
    checkNccl(async, "a stream-ordered call (asynchronous error)");
  }

  // Queues a copy on this rank's stream (ordered with its NCCL calls).
  void queueCopy(void* dst, const void* src, size_t bytes, const char* what) {
    if (bytes == 0) return;
    checkCuda(api_->cu.memcpyAsync(reinterpret_cast<uintptr_t>(dst),
                                   reinterpret_cast<uintptr_t>(src), bytes, stream_),
              what);
  }

  void gatherDevices() {
    char line[kDeviceLineBytes] = {};
    char host[64] = "?";
    gethostname(host, sizeof host - 1);
    char desc[kDeviceLineBytes] = {};
    if (braidCommDescribe(comm_, desc, sizeof desc) != braidSuccess) desc[0] = '\0';
    // The transport part of "rank 0/4 host h pid 42 transports shm:3 tcp:0 channels 2".
    const char* summary = std::strstr(desc, "transports");
    const std::string device = api_ ? std::to_string(cuda_device_) : "host";
    const std::string device_name = api_ ? device_name_ : "cpu";
    std::snprintf(line, sizeof line, "%d|%s|%s|%s|%s", static_cast<int>(getpid()), host,
                  device.c_str(), device_name.c_str(), summary ? summary : desc);
    std::vector<char> all(kDeviceLineBytes * nranks_);
    check(braidAllGather(line, all.data(), kDeviceLineBytes, braidUint8, comm_), "braidAllGather");
    if (!printer_) return;
    for (int r = 0; r < nranks_; ++r) {
      std::string entry(all.data() + r * kDeviceLineBytes,
                        strnlen(all.data() + r * kDeviceLineBytes, kDeviceLineBytes));
      // pid|host|device|device name|transports
      std::vector<std::string> f;
      for (size_t at = 0, bar; f.size() < 4; at = bar + 1) {
        bar = entry.find('|', at);
        if (bar == std::string::npos) break;
        f.push_back(entry.substr(at, bar - at));
        if (f.size() == 4) f.push_back(entry.substr(bar + 1));
      }
      f.resize(5);
      DeviceLine d{r, std::atoi(f[0].c_str()), f[1], f[4], f[2], f[3]};
      s_.devices.push_back(d);
    }
  }

  void runTypeOp(const TypeInfo& type, const OpInfo* op) {
    const OpKind kind = op ? op->kind : OpKind::kNone;
    braidRedOp_t red = BuiltinOp(kind);
    nccl_op_ = static_cast<ncclRedOp_t>(red);  // braid's values are NCCL's
    bool custom_op = false;
    if (kind == OpKind::kMulSum && api_) {
      uint64_t scalar = EncodeInt(type, kMulSumScalar);
      checkNccl(api_->nccl.redOpCreatePreMulSum(&nccl_op_, &scalar,
                                                static_cast<ncclDataType_t>(type.type),
                                                ncclScalarHostImmediate, nccl_),
                "ncclRedOpCreatePreMulSum");
      custom_op = true;
    } else if (kind == OpKind::kMulSum) {
      uint64_t scalar = EncodeInt(type, kMulSumScalar);
      check(braidRedOpCreatePreMulSum(&red, &scalar, type.type, comm_),
            "braidRedOpCreatePreMulSum");
      custom_op = true;
    }
    DataModel model(type, kind, nranks_, o_.quantized);
    for (uint64_t size = o_.min_bytes; size <= o_.max_bytes; size = NextSize(size, o_)) {
      runRow(type, op, red, model, size);
      if (size == o_.max_bytes && o_.step_factor <= 1 && o_.step_bytes == 0) break;
    }
    if (custom_op && api_)
      checkNccl(api_->nccl.redOpDestroy(nccl_op_, nccl_), "ncclRedOpDestroy");
    else if (custom_op)
      check(braidRedOpDestroy(red, comm_), "braidRedOpDestroy");
  }

  void runRow(const TypeInfo& type, const OpInfo* op, braidRedOp_t red, const DataModel& model,
              uint64_t size) {
    const size_t count = size / type.size;
    CollCounts c = t_.counts(count, type.size, nranks_);
    RowResult row;
    row.size = std::max(c.send, c.recv) * type.size;
    row.count = c.param;
    row.type = type.name;
    row.redop = op ? op->name : "none";
    row.root = t_.has_root ? o_.root : -1;
    row.out_of_place = side(type, red, model, c, false, row.size);
    if (t_.in_place) row.in_place = side(type, red, model, c, true, row.size);
    if (printer_) {
      PrintRow(stdout, row);
      for (const SideResult* sr : {&row.out_of_place, &row.in_place}) {
        if (!sr->ran) continue;
        s_.busbw_sum += sr->busbw;
        ++s_.busbw_count;
        s_.total_wrong += sr->wrong;
        if (sr->checked && sr->quantized && !(sr->rel_error <= s_.max_rel_error))
          s_.max_rel_error = sr->rel_error;  // NaN sticks
      }
      s_.rows.push_back(row);
    } else {
      // Every rank knows the totals (they were all-reduced): keep them for the exit status.
      s_.total_wrong += row.out_of_place.wrong + row.in_place.wrong;
    }
  }

  struct Ptrs {
    unsigned char* send;
    unsigned char* recv;
    unsigned char* base;  // start of the region this op may touch in the receive buffer
    size_t shift;
  };

  // Host addresses, or with `on_device` (-M cuda) the same offsets in the device buffers.
  Ptrs pointers(const CollCounts& c, size_t elt, bool in_place, uint64_t iter,
                bool on_device = false) const {
    // Move the buffers between iterations (as nccl-tests does) so the library cannot rely on
    // seeing the same pointer twice.
    const size_t total = std::max(c.send, c.recv) * elt;
    const size_t steps = total ? std::max<size_t>(o_.max_bytes / total, 1) : 1;
    const size_t shift = total * (iter % steps);
    Ptrs p;
    p.shift = shift;
    unsigned char* send = on_device ? reinterpret_cast<unsigned char*>(dsend_) : send_->get();
    unsigned char* recv = on_device ? reinterpret_cast<unsigned char*>(drecv_) : recv_->get();
    p.base = recv + shift;
    if (in_place) {
      p.send = p.base + static_cast<size_t>(rank_) * c.send_inplace_step * elt;
      p.recv = p.base + static_cast<size_t>(rank_) * c.recv_inplace_step * elt;
    } else {
      p.send = send + shift;
      p.recv = p.base;
    }
    return p;
  }

  OpCall call(const TypeInfo& type, braidRedOp_t red, const CollCounts& c, const Ptrs& p) const {
    OpCall oc{p.send, p.recv, c.param, type.type, red, o_.root, rank_, nranks_, comm_, nullptr};
    if (o_.quantized) oc.quant = &o_.quant;
    return oc;
  }

  NcclCall ncclCall(const TypeInfo& type, const CollCounts& c, const Ptrs& p) const {
    return NcclCall{p.send,
                    p.recv,
                    c.param,
                    static_cast<ncclDataType_t>(type.type),
                    type.size,
                    nccl_op_,
                    o_.root,
                    rank_,
                    nranks_,
                    nccl_,
                    static_cast<cudaStream_t>(stream_),
                    &api_->nccl};
  }

  braidResult_t start(const OpCall& oc, braidRequest_t* req) const {
    return o_.quantized ? t_.start_quant(oc, req) : t_.start(oc, req);
  }

  // Waits for in-flight requests (oldest first) until none overlaps [lo, hi) or all are done.
  // The requests live in a fixed ring, oldest at inflight_head_: this runs once per -z 0 call, and
  // its cost is counted against the library's. A std::deque here cost 273 instructions more per
  // 8-byte call (callgrind, rank 0 of all_reduce_perf -b 8 -e 4096 -z 0: 695 in issue against
  // 422), about 4 % of the call. The overlap test looks at every slot of the ring, a free one
  // holding the empty range [0, 0), with no branch and no index arithmetic: walking the ring
  // from its head cost about 25 instructions per call in flight (422 in issue with 8 in flight
  // against 244 with one).
  void waitInFlight(size_t lo, size_t hi, bool all) {
    while (inflight_count_ > 0) {
      if (!all && inflight_count_ < kMaxInFlight) {
        bool overlap = false;
        for (size_t k = 0; k < kMaxInFlight; ++k)
          overlap |= (inflight_lo_[k] < hi) & (lo < inflight_hi_[k]);
        if (!overlap) return;
      }
      const size_t k = inflight_head_;
      braidRequest_t req = inflight_req_[k];
      inflight_lo_[k] = inflight_hi_[k] = 0;
      inflight_head_ = (k + 1) % kMaxInFlight;
      --inflight_count_;
      check(braidWait(&req, -1), "braidWait");
    }
  }

  // Issues operation number `iter` of a run: blocking (-z 1, groups, collectives without a
  // non-blocking form), or non-blocking with at most one op in flight per buffer region.
  void issue(const TypeInfo& type, braidRedOp_t red, const CollCounts& c, bool in_place,
             uint64_t iter, bool nonblocking) {
    if (api_) {
      // NCCL's calls return at once; -z 1 waits for each before the next.
      Ptrs d = pointers(c, type.size, in_place, iter, true);
      checkNccl(t_.start_nccl(ncclCall(type, c, d)), t_.binary);
      if (!nonblocking) syncStream("cuStreamSynchronize (-z 1)");
      return;
    }
    Ptrs p = pointers(c, type.size, in_place, iter);
    OpCall oc = call(type, red, c, p);
    if (!nonblocking) {
      check(start(oc, nullptr), t_.binary);
      return;
    }
    const size_t total = std::max(c.send, c.recv) * type.size;
    waitInFlight(p.shift, p.shift + std::max<size_t>(total, 1), false);
    braidRequest_t req = nullptr;
    check(start(oc, &req), t_.binary);
    if (req) {  // (waitInFlight left room: fewer than kMaxInFlight are in flight)
      const size_t k = (inflight_head_ + inflight_count_) % kMaxInFlight;
      inflight_req_[k] = req;
      inflight_lo_[k] = p.shift;
      inflight_hi_[k] = p.shift + std::max<size_t>(total, 1);
      ++inflight_count_;
    }
  }

  // One timed run of n iterations of m ops; returns seconds per op.
  double timedRun(const TypeInfo& type, braidRedOp_t red, const CollCounts& c, bool in_place) {
    if (api_) return timedRunDevice(type, red, c, in_place);
    const bool nonblocking = o_.blocking == 0 && o_.agg_iters == 1;
    for (int w = 0; w < o_.warmup_iters; ++w) issue(type, red, c, in_place, w, nonblocking);
    waitInFlight(0, 0, true);
    check(braidBarrier(comm_), "braidBarrier");
    TrafficBytes before;
    if (o_.traffic && !traffic_.Read(&before))
      fatal("--traffic: reading the counters", braidErrInternal);
    auto t0 = std::chrono::steady_clock::now();
    for (int it = 0; it < o_.iters; ++it) {
      if (o_.agg_iters > 1) check(braidGroupStart(), "braidGroupStart");
      for (int a = 0; a < o_.agg_iters; ++a)
        issue(type, red, c, in_place, static_cast<uint64_t>(it) * o_.agg_iters + a, nonblocking);
      if (o_.agg_iters > 1) check(braidGroupEnd(), "braidGroupEnd");
    }
    waitInFlight(0, 0, true);
    auto t1 = std::chrono::steady_clock::now();
    const double ops = static_cast<double>(o_.iters) * o_.agg_iters;
    if (o_.traffic) {
      // Read after the clock stopped, so the counters cost the timing nothing. What this rank
      // received is counted once its operations completed here (traffic.cc).
      TrafficBytes after;
      if (!traffic_.Read(&after)) fatal("--traffic: reading the counters", braidErrInternal);
      per_op_[0] = static_cast<double>(after.intra_node - before.intra_node) / ops;
      per_op_[1] = static_cast<double>(after.inter_node - before.inter_node) / ops;
    }
    return std::chrono::duration<double>(t1 - t0).count() / ops;
  }

  // -M cuda: nccl-tests' loop. The iterations are queued on the stream (in a group of -m calls),
  // and the clock stops when the stream has run them all.
  double timedRunDevice(const TypeInfo& type, braidRedOp_t red, const CollCounts& c,
                        bool in_place) {
    const bool each = o_.blocking != 0 && o_.agg_iters == 1;
    for (int w = 0; w < o_.warmup_iters; ++w) issue(type, red, c, in_place, w, !each);
    syncStream("cuStreamSynchronize (warm-up)");
    check(braidBarrier(comm_), "braidBarrier");
    auto t0 = std::chrono::steady_clock::now();
    for (int it = 0; it < o_.iters; ++it) {
      if (o_.agg_iters > 1) checkNccl(api_->nccl.groupStart(), "ncclGroupStart");
      for (int a = 0; a < o_.agg_iters; ++a)
        issue(type, red, c, in_place, static_cast<uint64_t>(it) * o_.agg_iters + a, !each);
      if (o_.agg_iters > 1) {
        checkNccl(api_->nccl.groupEnd(), "ncclGroupEnd");
        if (o_.blocking) syncStream("cuStreamSynchronize (-z 1)");
      }
    }
    syncStream("cuStreamSynchronize");
    auto t1 = std::chrono::steady_clock::now();
    return std::chrono::duration<double>(t1 - t0).count() /
           (static_cast<double>(o_.iters) * o_.agg_iters);
  }

  double combine(double seconds) {
    if (o_.average == 0) return seconds;  // rank 0's own time (only rank 0 prints)
    braidRedOp_t op = o_.average == 1 ? braidSum : o_.average == 2 ? braidMin : braidMax;
    double v = seconds;
    check(braidAllReduce(&v, &v, 1, braidFloat64, op, comm_), "braidAllReduce (times)");
    return o_.average == 1 ? v / nranks_ : v;
  }

  // Returns the number of wrong elements; --quant: 1 when the relative error (*rel_error) is
  // above the bound, else 0.
  uint64_t checkRuns(const TypeInfo& type, braidRedOp_t red, const DataModel& model,
                     const CollCounts& c, bool in_place, double* rel_error) {
    double err2[2] = {0, 0};  // --quant: sum of squared errors, of squared exact values
    const std::vector<Block> blocks = t_.expected(rank_, nranks_, o_.root, c);
    // The rank that plants the fault must have an output: rank 0, or the root of a reduce.
    const int corrupt_rank = t_.expected(0, nranks_, o_.root, c).empty() ? o_.root : 0;
    uint64_t wrong = 0;
    for (int k = 0; k < o_.check_iters; ++k) {
      // Check iteration k uses the offset of iteration k, so moved pointers are checked too.
      Ptrs p = pointers(c, type.size, in_place, static_cast<uint64_t>(k));
      const size_t total = std::max(c.send, c.recv) * type.size;
      const size_t region = in_place ? total : c.recv * type.size;
      std::memset(p.base, kPoison, region);
      model.fill(p.send, rank_, 0, c.send, static_cast<uint64_t>(k));
      if (api_) {
        // The host images go to the device, the call runs, the result comes back: all in
        // stream order, then one synchronise.
        Ptrs d = pointers(c, type.size, in_place, static_cast<uint64_t>(k), true);
        queueCopy(d.base, p.base, region, "cuMemcpyAsync (to the device)");
        if (!in_place) queueCopy(d.send, p.send, c.send * type.size, "cuMemcpyAsync (send)");
        checkNccl(t_.start_nccl(ncclCall(type, c, d)), t_.binary);
        queueCopy(p.base, d.base, region, "cuMemcpyAsync (from the device)");
        syncStream("cuStreamSynchronize (check)");
      } else {
        check(start(call(type, red, c, p), nullptr), t_.binary);
      }
      if (o_.corrupt && rank_ == corrupt_rank && !blocks.empty() && blocks[0].count > 0) {
        unsigned char* e = p.recv + blocks[0].dst * type.size;
        if (o_.quantized) {
          // A value far off the data (|x| < 4): an error no codec's bound admits.
          uint64_t b = EncodeReal(type, 60000.0);
          std::memcpy(e, &b, type.size);
        } else {
          // Flip a high exponent/value bit: far outside any tolerance.
          e[type.size - 1] ^= 0x40;
        }
      }
      if (o_.quantized)
        model.error(p.recv, blocks, static_cast<uint64_t>(k), &err2[0], &err2[1]);
      else
        wrong += model.verify(p.recv, blocks, static_cast<uint64_t>(k));
    }
    if (o_.quantized) {
      // One relative error over every rank's output and every checked run.
      check(braidAllReduce(err2, err2, 2, braidFloat64, braidSum, comm_),
            "braidAllReduce (errors)");
      *rel_error = err2[1] > 0 ? std::sqrt(err2[0] / err2[1]) : (err2[0] > 0 ? HUGE_VAL : 0);
      return *rel_error <= o_.quant_bound ? 0 : 1;  // NaN fails too
    }
    check(braidAllReduce(&wrong, &wrong, 1, braidUint64, braidSum, comm_),
          "braidAllReduce (wrong counts)");
    return wrong;
  }

  SideResult side(const TypeInfo& type, braidRedOp_t red, const DataModel& model,
                  const CollCounts& c, bool in_place, uint64_t row_bytes) {
    SideResult r;
    r.ran = true;
    if (o_.quantized) {
      // Time the codec on the data it is checked with (finite, Gaussian-like), not on whatever
      // the buffer holds.
      Ptrs p = pointers(c, type.size, in_place, 0);
      model.fill(p.send, rank_, 0, c.send, 0);
    }
    const double sec = combine(timedRun(type, red, c, in_place));
    if (o_.traffic) {
      double sums[2] = {per_op_[0], per_op_[1]}, max_inter = per_op_[1];
      check(braidAllReduce(sums, sums, 2, braidFloat64, braidSum, comm_),
            "braidAllReduce (traffic)");
      check(braidAllReduce(&max_inter, &max_inter, 1, braidFloat64, braidMax, comm_),
            "braidAllReduce (traffic)");
      r.has_traffic = true;
      r.intra_node_bytes = sums[0];
      r.inter_node_bytes = sums[1];
      r.max_rank_inter_node_bytes = max_inter;
    }
    r.time_us = sec * 1e6;
    if (o_.predict) {
      // The same call, recorded in a group and priced instead of run.
      Ptrs p = pointers(c, type.size, in_place, 0);
      double predicted = 0;
      check(braidGroupStart(), "braidGroupStart (predict)");
      check(start(call(type, red, c, p), nullptr), t_.binary);
      check(braidGroupSimulateEnd(&predicted), "braidGroupSimulateEnd");
      r.has_prediction = true;
      r.predicted_us = predicted * 1e6;
    }
    r.algbw = sec > 0 ? static_cast<double>(row_bytes) / 1e9 / sec : 0;
    r.busbw = r.algbw * t_.bus_factor(nranks_);
    if (o_.check_iters > 0) {
      r.checked = true;
      r.quantized = o_.quantized;
      r.wrong = checkRuns(type, red, model, c, in_place, &r.rel_error);
    }
    return r;
  }

  Shared& s_;
  const CollTest& t_;
  const Options& o_;
  braidComm_t comm_;
  int rank_ = 0;
  int nranks_ = 1;
  bool printer_ = false;
  std::unique_ptr<HostBuffer> send_, recv_;
  // A ring (waitInFlight): the requests and their buffer ranges [lo, hi), a free slot [0, 0).
  std::array<braidRequest_t, kMaxInFlight> inflight_req_{};
  std::array<size_t, kMaxInFlight> inflight_lo_{}, inflight_hi_{};
  size_t inflight_head_ = 0, inflight_count_ = 0;
  // -M cuda
  const DeviceApi* api_ = nullptr;
  int cuda_device_ = -1;
  std::string device_name_;
  unsigned long long dsend_ = 0, drecv_ = 0;              // device buffers (CUdeviceptr)
  void *reg_send_ = nullptr, *reg_recv_ = nullptr;        // -R 1: ncclCommRegister handles
  ncclWindow_t win_send_ = nullptr, win_recv_ = nullptr;  // -R 2: symmetric windows
  void* stream_ = nullptr;
  ncclComm_t nccl_ = nullptr;
  ncclRedOp_t nccl_op_ = ncclSum;
  NodeTraffic traffic_;        // --traffic
  double per_op_[2] = {0, 0};  // --traffic: this rank's last timed run, intra and inter
};

}  // namespace

int PerfMain(int argc, char** argv, const CollTest& test) {
  Shared s;
  s.test = &test;
  int status = 0;
  if (!ParseOptions(argc, argv, test.binary, test.has_op, test.start_quant ? test.quant_block : 0,
                    &s.opt, &status))
    return status;
  Options& o = s.opt;

  // Options that need a braidConfig_t: an algorithm override and a stall deadline.
  braidConfig_t config = BRAID_CONFIG_INITIALIZER;
  std::string algo_spec;
  if (!o.algo.empty()) {
    if (!test.tuner_name) {
      std::fprintf(stderr, "%s: -A: this collective has no algorithm choice\n", test.binary);
      return kExitUsage;
    }
    // A bare name applies to this collective; a full spec ("allreduce:ring;...") is passed on.
    algo_spec = o.algo.find(':') == std::string::npos ? std::string(test.tuner_name) + ":" + o.algo
                                                      : o.algo;
    config.algorithms = algo_spec.c_str();
  }
  if (o.timeout_s > 0) config.timeout_ms = static_cast<int64_t>(o.timeout_s) * 1000;
  const bool need_config = !o.algo.empty() || o.timeout_s > 0;

  DeviceApi device_api;
  if (o.memtype == "cuda") {
    if (!test.start_nccl) {
      std::fprintf(stderr, "%s: -M cuda: this collective has no NCCL form\n", test.binary);
      return kExitUsage;
    }
    std::string why;
    // Before the communicators: braid's libnccl.so.2 must find the driver this process uses.
    if (!LoadDeviceApi(&device_api, &why)) {
      std::fprintf(stderr, "%s: -M cuda: %s\n", test.binary, why.c_str());
      return kExitRuntime;
    }
    s.dev = &device_api;
    const int v = device_api.nccl_version;
    s.info.memory_note = "Device memory: cuMemAlloc buffers, NCCL calls on a stream through " +
                         device_api.libnccl + " (NCCL " + std::to_string(v / 10000) + "." +
                         std::to_string(v / 100 % 100) + "." + std::to_string(v % 100) +
                         "), driver " + device_api.libcuda;
  }

  if (!CreateCommunicators(&argc, &argv, o.nthreads, config, need_config, test.binary, &s.launch))
    return kExitRuntime;
  s.world = s.launch.nprocs * s.launch.nthreads;
  if (test.has_root && o.root >= s.world) {
    // Every process says it: the launcher stops the others as soon as one exits, so a message
    // left to rank 0 alone could be lost when another rank exits first.
    std::fprintf(stderr, "%s: -r %d: the root must be a rank in 0..%d\n", test.binary, o.root,
                 s.world - 1);
    DestroyCommunicators(&s.launch);
    return kExitUsage;
  }

  int version = 0;
  braidGetVersion(&version);
  s.info.binary = test.binary;
  s.info.launcher = s.launch.launcher;
  s.info.nranks = s.world;
  s.info.nprocs = s.launch.nprocs;
  s.info.version = std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) +
                   "." + std::to_string(version % 100);
  s.info.header_code = BRAID_VERSION_CODE;
  s.info.library_code = version;

  // Thread 0 runs on the main thread; with -t N the others get their own. Each thread has its
  // own Shared copy, made before any thread starts; only thread 0 of world rank 0 prints.
  std::vector<Shared> locals(o.nthreads > 1 ? o.nthreads - 1 : 0, s);
  std::vector<std::thread> threads;
  for (int t = 1; t < o.nthreads; ++t)
    threads.emplace_back([&locals, t]() { RankRunner(&locals[t - 1], t).run(); });
  RankRunner(&s, 0).run();
  for (auto& th : threads) th.join();

  int exit_status = s.total_wrong ? kExitWrong : 0;
  if (s.json_failed && exit_status == 0) exit_status = kExitRuntime;
  DestroyCommunicators(&s.launch);
  return exit_status;
}

}  // namespace braid_perf
