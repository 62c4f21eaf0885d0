// Event simulation of all ranks' schedules; the model is described in simulator.h.
//
// Each rank's schedule is compiled into flat per-lane transfer records as soon as it is built,
// then dropped. Two kinds of events drive the run: a transfer becoming ready (both ends posted,
// always at the current time, so these queue in a FIFO), which reserves the two ports of its
// class and schedules its end; and a transfer ending (a heap ordered by time), which lets the
// two lanes it belongs to post their next steps. Each event carries what processing it needs
// (no table of messages to look up), streams live in an open-addressing table and drained post
// queues are reset, so the hot loop stays in flat, cache-friendly memory.
#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <queue>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/cost_model.h"
#include "algorithms/lowering.h"
#include "algorithms/simulator.h"

namespace braid {
namespace {

// Compiled steps. Each rank's schedule is compiled as soon as it is built and then dropped, so
// the simulation walks one flat array rather than every rank's step vectors. A large simulation
// reads it at one place per lane, thousands of lanes in turn, so every step costs cache misses
// (a 1024-rank all-reduce compiles 4 million steps): a step is a few consecutive 8-byte words,
// its header (transfers in the low 32 bits, edges in the high 32), its edges (Dep) and its
// transfers (Xfer), one miss where three arrays cost three.

// One transfer: which stream, which way, how much.
struct Xfer {
  static constexpr uint32_t kSend = 1u << 31;   // a send, else a receive
  static constexpr uint32_t kLarge = 1u << 30;  // the low bits index Simulation::large_bytes_
  static constexpr uint32_t kLow = kLarge - 1;
  uint32_t stream;
  uint32_t meta;  // kSend | kLarge | bytes (element count times its buffer's element size)
};

// A dependency edge: the lane (of the same rank) and the step of it that must complete first.
struct Dep {
  uint32_t lane;
  uint32_t step;
};

static_assert(sizeof(Xfer) == 8 && sizeof(Dep) == 8);

// A step with one-sided ops (IR v3) says so in its header; after its transfers come a word with
// their count, a word with the seconds its data ops take, and one word per signal or wait.
constexpr uint64_t kOneSidedStep = uint64_t{1} << 31;
uint64_t StepHeader(uint64_t nxfers, uint64_t ndeps, bool one_sided = false) {
  return nxfers | ndeps << 32 | (one_sided ? kOneSidedStep : 0);
}
uint32_t StepXfers(uint64_t header) {
  return static_cast<uint32_t>(header & (kOneSidedStep - 1));
}
bool StepOneSided(uint64_t header) {
  return (header & kOneSidedStep) != 0;
}
// A signal or a wait: value (relative post number) in the low 32 bits, the peer (waits) above.
struct SigWait {
  static constexpr uint64_t kSignal = uint64_t{1} << 63;
  static constexpr uint64_t kConsumed = uint64_t{1} << 62;
  static uint64_t Pack(bool signal, Counter c, int32_t value, int peer) {
    return (signal ? kSignal : 0) | (c == Counter::kConsumed ? kConsumed : 0) |
           static_cast<uint64_t>(static_cast<uint32_t>(peer) & 0x3fffffff) << 32 |
           static_cast<uint32_t>(value);
  }
  static bool Signal(uint64_t w) { return (w & kSignal) != 0; }
  static int Counter(uint64_t w) { return (w & kConsumed) ? 1 : 0; }
  static int32_t Value(uint64_t w) { return static_cast<int32_t>(static_cast<uint32_t>(w)); }
  static int Peer(uint64_t w) { return static_cast<int>((w >> 32) & 0x3fffffff); }
};
uint32_t StepDeps(uint64_t header) {
  return static_cast<uint32_t>(header >> 32);
}

// One rank's schedule compiled, before it joins the simulation's tables: made by the thread that
// built the schedule (which then frees it where it was allocated), appended in rank order by
// Simulation::Append. Its own numbering: an edge's lane is the rank's channel, a transfer's
// stream an index into `keys`, a large transfer's size an index into `large`.
struct CompiledRank {
  int rank = 0;
  std::vector<size_t> lane_words;  // words of `code` per channel, channel after channel
  std::vector<uint64_t> code;
  std::vector<uint64_t> keys;   // per transfer, its stream's key
  std::vector<uint64_t> large;  // sizes of its transfers of >= 1 GiB
  bool device_kernels = false;  // RankSchedule::device_kernels
};

struct Lane {
  int rank = 0;
  int channel = 0;
  size_t pos = 0, end = 0;  // the current step's header and the lane's end, in code_
  uint32_t step = 0;        // steps completed
  uint32_t step_words = 0;  // the current step's size (header, edges, transfers, one-sided)
  int pending = 0;          // transfers and waits of the step not complete
  double ready_at = 0;      // one-sided step: when its data ops (and met waits) are done
  bool finished = false;
};

struct Posted {
  int lane;
  uint64_t bytes;
  double t;
};

// One FIFO stream (src, dst, channel). Posts wait here for their counterpart; a queue that
// drains is reset, so memory stays proportional to the posts in flight.
struct Stream {
  std::vector<Posted> sends, recvs;
  size_t sh = 0, rh = 0;
  // Of its two ranks (the key's: with a symmetry, the receiver's lane is its image on node 0).
  LinkClass cls = LinkClass::kIntraNode;
  int dst = 0;  // the key's receiver
};

// Stream key -> index into a vector of streams, by linear probing. Keys are arithmetic
// progressions (ring: (N+1)*src+1) that would collide in a plain modulo; mix them first.
class StreamTable {
 public:
  explicit StreamTable(size_t expected) {
    size_t cap = 16;
    while (cap < 2 * expected) cap *= 2;
    keys_.assign(cap, 0);
    slots_.assign(cap, kEmpty);
  }

  // The index of `key`'s stream, created on first use.
  uint32_t Find(uint64_t key) {
    if (2 * (streams_.size() + 1) > slots_.size()) Grow();
    const size_t mask = slots_.size() - 1;
    for (size_t i = Mix(key) & mask;; i = (i + 1) & mask) {
      if (slots_[i] == kEmpty) {
        keys_[i] = key;
        slots_[i] = static_cast<uint32_t>(streams_.size());
        streams_.emplace_back();
        return slots_[i];
      }
      if (keys_[i] == key) return slots_[i];
    }
  }

  Stream& operator[](uint32_t index) { return streams_[index]; }

 private:
  static constexpr uint32_t kEmpty = UINT32_MAX;

  static size_t Mix(uint64_t x) {
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return static_cast<size_t>(x ^ (x >> 31));
  }

  void Grow() {
    std::vector<uint64_t> keys(keys_.size() * 2, 0);
    std::vector<uint32_t> slots(slots_.size() * 2, kEmpty);
    const size_t mask = slots.size() - 1;
    for (size_t j = 0; j < slots_.size(); ++j) {
      if (slots_[j] == kEmpty) continue;
      size_t i = Mix(keys_[j]) & mask;
      while (slots[i] != kEmpty) i = (i + 1) & mask;
      keys[i] = keys_[j];
      slots[i] = slots_[j];
    }
    keys_.swap(keys);
    slots_.swap(slots);
  }

  std::vector<uint64_t> keys_;
  std::vector<uint32_t> slots_;
  std::vector<Stream> streams_;
};

// A transfer whose two ends are posted (at time t): it starts once its two ports are free.
// Everything it needs travels with it, so processing it touches no table but the ports.
struct ReadyXfer {
  double t;
  uint64_t seq;
  int src_lane, dst_lane;
  int src, dst;
  double bytes;
  LinkClass cls;
  int pair_dst;  // the receiver the stream's key names (symmetric runs: dst is its image)
};

// A transfer's end: the two lanes it belongs to may go on.
struct EndXfer {
  double t;
  uint64_t seq;
  int src_lane, dst_lane;
  uint32_t port;  // its send port
};

constexpr int kMaxChannels = 1 << 16;  // stream keys hold the channel in 16 bits
constexpr size_t kMaxSteps = size_t{1} << 30;

class Simulation {
 public:
  Simulation(const CollArgs& a, const LinkModel& m)
      : a_(a), m_(m), n_(a.nranks), streams_(2 * static_cast<size_t>(a.nranks)) {}

  // A symmetric run met transfers that were ready at one instant and queued for one port
  // (simulator.h): its prediction may not be the full simulation's; run every rank instead.
  bool QueuedTies() const { return queued_ties_; }

  // With a symmetry found (simulator.h), the ranks simulated (one node's) and which one.
  int SimulatedRanks() const { return sym_ == Symmetry::kNone ? n_ : per_node_; }
  const char* SymmetryName() const {
    return sym_ == Symmetry::kShift ? "shift" : sym_ == Symmetry::kXor ? "xor" : "";
  }

  // Schedules from elsewhere (SimulateLoweredSeconds) instead of BuildSchedule's: every rank
  // simulated, built on this thread.
  void UseSource(ScheduleSource source) { source_ = std::move(source); }

  Result<double> Run(const Algorithm& algo, const SimulateOptions& o) {
    const int threads = a_.nranks >= kParallelBuildRanks && !source_ ? o.threads : 1;
    bool symmetric = false;
    if (o.symmetry && !source_ && SymmetryCandidate(o.min_nodes)) {
      BRAID_ASSIGN_OR_RETURN(symmetric, BuildSymmetric(algo, std::max(threads, 1)));
    }
    if (!symmetric) {
      BRAID_RETURN_IF_ERROR(threads > 1 ? BuildAndCompileInParallel(algo, threads)
                                        : BuildAndCompile(algo));
    }
    if (has_deps_) parked_.resize(lanes_.size());
    AssignPorts();
    if (nports_ >= (size_t{1} << kPortBits))
      return InvalidArgument("simulate: " + std::to_string(n_) + " ranks are too many ports");
    send_free_.assign(nports_, 0);
    if (sym_ != Symmetry::kNone) last_taken_.assign(nports_, {-1.0, UINT64_MAX});
    recv_free_.assign(nports_, 0);
    port_ends_.assign(nports_, PortEnds{});
    port_queues_.assign(nports_, PortQueue{});
    if (has_one_sided_) {
      counters_.assign(static_cast<size_t>(n_), {});
      counter_waits_.assign(static_cast<size_t>(n_), {});
    }
    for (size_t l = 0; l < lanes_.size(); ++l) BRAID_RETURN_IF_ERROR(Enter(static_cast<int>(l), 0));
    for (;;) {
      // One-sided steps whose data ops and waits are done (IR v3): before anything later.
      if (!local_ends_.empty() && (ends_.empty() || local_ends_.top().t <= ends_.top().t) &&
          (ready_head_ >= ready_.size() || local_ends_.top().t <= ready_[ready_head_].t)) {
        const LocalEnd e = local_ends_.top();
        local_ends_.pop();
        Advance(lanes_[e.lane]);
        BRAID_RETURN_IF_ERROR(Wake(e.lane, e.t));
        BRAID_RETURN_IF_ERROR(Enter(e.lane, e.t));
        continue;
      }
      // Transfers become ready at the time their second end is posted, which is always the
      // current time: they queue in a FIFO, merged with the heap of ends by (time, seq).
      if (ready_head_ < ready_.size()) {
        const ReadyXfer& r = ready_[ready_head_];
        if (ends_.empty() || r.t < ends_.top().t ||
            (r.t == ends_.top().t && r.seq < ends_.top().key >> kPortBits)) {
          const LinkParams& link = r.cls == LinkClass::kInterNode ? nic_ : m_.of(r.cls);
          const size_t send_index = Port(r.src, r.cls);
          double& send_port = send_free_[send_index];
          double& recv_port = recv_free_[Port(r.dst, r.cls)];
          const double start = std::max({r.t, send_port, recv_port});
          if (sym_ != Symmetry::kNone && r.cls == LinkClass::kInterNode) {
            NoteTaken(r, start > r.t, send_index, Port(r.dst, r.cls));
          }
          const double end = start + link.alpha_s + r.bytes / link.beta_bytes_s;
          send_port = end;
          recv_port = end;
          PushEnd({end, seq_++, r.src_lane, r.dst_lane, static_cast<uint32_t>(send_index)});
          if (++ready_head_ == ready_.size()) {
            ready_.clear();
            ready_head_ = 0;
          }
          continue;
        }
      }
      if (ends_.empty()) break;
      const EndXfer e = PopEnd();
      const int lanes[2] = {e.src_lane, e.dst_lane};
      for (int l : lanes)
        if (--lanes_[l].pending == 0) BRAID_RETURN_IF_ERROR(StepDone(l, e.t));
    }
    for (const Lane& l : lanes_)
      if (!l.finished)
        return InternalError("simulate " + std::string(algo.name()) + " " + CollKindName(a_.kind) +
                             ": rank " + std::to_string(l.rank) + " channel " +
                             std::to_string(l.channel) + " deadlocks at step " +
                             std::to_string(l.step));
    return end_;
  }

 private:
  // How many compiled ranks the helpers may hold ahead of the rank being appended, per thread:
  // bounds their memory (each is dropped once appended).
  static constexpr int kBuildAheadPerThread = 4;

  // Builds and compiles one rank's schedule (any thread); the schedule is freed here.
  Result<CompiledRank> BuildAndCompileRank(const Algorithm& algo, int rank) const {
    auto s = BuildSchedule(algo, a_, rank);
    if (!s.ok()) return s.status();
    CompiledRank cr;
    BRAID_RETURN_IF_ERROR(CompileRank(rank, *s, &cr));
    return cr;
  }

  Status BuildAndCompile(const Algorithm& algo) {
    CompiledRank cr;  // reused: its arrays keep their capacity from rank to rank
    for (int r = 0; r < n_; ++r) {
      auto s = source_ ? source_(r) : BuildSchedule(algo, a_, r);
      if (!s.ok()) return s.status();
      BRAID_RETURN_IF_ERROR(CompileRank(r, *s, &cr));
      BRAID_RETURN_IF_ERROR(Append(cr));
    }
    return Status::Ok();
  }

  // Building (and compiling) the schedules is about half of a large simulation and each rank's
  // is independent, while appending to the shared tables goes in rank order. So `threads - 1`
  // helpers build ranks ahead (a bounded window) and this thread appends them in order, building
  // too whenever the next rank is not ready and the window has room. Each schedule is built,
  // compiled and freed by one thread (handing whole schedules to another thread to free made
  // the allocator the bottleneck). An error stops everyone; the first in rank order is reported.
  Status BuildAndCompileInParallel(const Algorithm& algo, int threads) {
    const int window = kBuildAheadPerThread * threads;
    std::vector<std::optional<Result<CompiledRank>>> built(static_cast<size_t>(window));
    std::mutex mu;
    std::condition_variable cv;
    int next = 0;      // the next rank to build
    int appended = 0;  // ranks appended so far
    bool stop = false;
    // Builds one more rank if the window allows (lock held on entry and exit); false if not.
    auto build_one = [&](std::unique_lock<std::mutex>& lock) {
      if (stop || next >= n_ || next >= appended + window) return false;
      const int r = next++;
      lock.unlock();
      auto cr = BuildAndCompileRank(algo, r);
      lock.lock();
      built[static_cast<size_t>(r % window)] = std::move(cr);
      cv.notify_all();
      return true;
    };
    std::vector<std::thread> helpers;
    for (int h = 1; h < threads; ++h)
      helpers.emplace_back([&] {
        std::unique_lock<std::mutex> lock(mu);
        while (!stop && next < n_)
          if (!build_one(lock)) cv.wait(lock);
      });
    Status st;
    {
      std::unique_lock<std::mutex> lock(mu);
      while (appended < n_) {
        auto& slot = built[static_cast<size_t>(appended % window)];
        if (!slot) {
          if (!build_one(lock)) cv.wait(lock);
          continue;
        }
        Result<CompiledRank> cr = std::move(*slot);
        slot.reset();
        lock.unlock();
        st = cr.ok() ? Append(*cr) : cr.status();
        lock.lock();
        if (!st.ok()) break;
        ++appended;
        cv.notify_all();
      }
      stop = true;
    }
    cv.notify_all();
    for (auto& t : helpers) t.join();
    return st;
  }

  // `rank`'s schedule in compiled form (CompiledRank). Reads nothing but the arguments, so any
  // thread may run it.
  Status CompileRank(int rank, const RankSchedule& s, CompiledRank* out) const {
    if (s.channels.size() > static_cast<size_t>(kMaxChannels))
      return InternalError("simulate: rank " + std::to_string(rank) + " has " +
                           std::to_string(s.channels.size()) + " channels, more than " +
                           std::to_string(kMaxChannels));
    out->rank = rank;
    out->lane_words.clear();
    out->code.clear();
    out->keys.clear();
    out->large.clear();
    size_t words = 0, nops = 0;  // (bounds: sized once, no regrowth)
    for (const auto& ch : s.channels)
      for (const auto& st : ch.steps) {
        words += 3 + st.deps.size() + st.ops.size();
        nops += st.ops.size();
      }
    const bool one_sided = IsOneSidedSchedule(s);
    out->device_kernels = s.device_kernels;
    out->code.reserve(words);
    out->keys.reserve(nops);
    for (size_t c = 0; c < s.channels.size(); ++c) {
      const auto& steps = s.channels[c].steps;
      if (steps.size() > kMaxSteps)
        return InternalError("simulate: rank " + std::to_string(rank) + " channel " +
                             std::to_string(c) + " has too many steps");
      const size_t lane_begin = out->code.size();
      for (size_t k = 0; k < steps.size(); ++k) {
        if (steps[k].ops.size() > UINT32_MAX || steps[k].deps.size() > UINT32_MAX ||
            out->keys.size() + steps[k].ops.size() > UINT32_MAX)
          return InternalError("simulate: more than 2^32 transfers or edges in a schedule");
        const size_t header = out->code.size();
        out->code.push_back(0);
        for (const StepRef& d : steps[k].deps)
          out->code.push_back(std::bit_cast<uint64_t>(Dep{d.channel, d.step}));
        uint64_t nxfers = 0;
        for (const StepOp& op : steps[k].ops) {
          const bool send = op.kind == StepOpKind::kSend;
          if (!send && op.kind != StepOpKind::kRecv && op.kind != StepOpKind::kRecvReduce) continue;
          if (op.peer < 0 || op.peer >= n_)
            return InternalError("simulate: rank " + std::to_string(rank) + " channel " +
                                 std::to_string(c) + " step " + std::to_string(k) + " names peer " +
                                 std::to_string(op.peer) + " outside [0, " + std::to_string(n_) +
                                 ")");
          const Slice& sl = send ? op.src : op.dst;
          const int ch = static_cast<int>(c);
          Xfer x{static_cast<uint32_t>(out->keys.size()), send ? Xfer::kSend : 0};
          out->keys.push_back(send ? Key(rank, op.peer, ch) : Key(op.peer, rank, ch));
          const uint64_t bytes = sl.count * DataTypeSize(s.buffers[sl.buffer].dtype);
          if (bytes <= Xfer::kLow) {
            x.meta |= static_cast<uint32_t>(bytes);
          } else {
            if (out->large.size() >= Xfer::kLow)
              return InternalError("simulate: too many transfers of 1 GiB or more");
            x.meta |= Xfer::kLarge | static_cast<uint32_t>(out->large.size());
            out->large.push_back(bytes);
          }
          out->code.push_back(std::bit_cast<uint64_t>(x));
          ++nxfers;
        }
        // Staging copies of device buffers (device_staging.h) take time of their own, as a
        // one-sided step's data ops do.
        double staging = 0;
        for (const StepOp& op : steps[k].ops) staging += StagingCopySeconds(s, op, m_);
        const bool timed = one_sided || staging > 0;
        if (timed) {
          // Its data ops' seconds and its signals and waits (cost_model.h prices them).
          const size_t count_at = out->code.size();
          out->code.push_back(0);
          double work = staging;
          if (one_sided)
            for (const StepOp& op : steps[k].ops) work += OneSidedOpSeconds(s, op, m_);
          out->code.push_back(std::bit_cast<uint64_t>(work));
          uint64_t nsw = 0;
          for (const StepOp& op : steps[k].ops) {
            if (op.kind != StepOpKind::kSignal && op.kind != StepOpKind::kWait) continue;
            if (op.kind == StepOpKind::kWait && (op.peer < 0 || op.peer >= n_))
              return InternalError("simulate: rank " + std::to_string(rank) + " waits for rank " +
                                   std::to_string(op.peer));
            out->code.push_back(SigWait::Pack(op.kind == StepOpKind::kSignal, op.counter, op.value,
                                              op.peer < 0 ? 0 : op.peer));
            ++nsw;
          }
          out->code[count_at] = nsw;
        }
        out->code[header] = StepHeader(nxfers, steps[k].deps.size(), timed);
      }
      out->lane_words.push_back(out->code.size() - lane_begin);
    }
    return Status::Ok();
  }

  // Appends a compiled rank's channels as lanes (ranks in order), resolving its streams.
  Status Append(const CompiledRank& cr) {
    if (cr.device_kernels) device_kernels_ = true;
    if (large_bytes_.size() + cr.large.size() > Xfer::kLow)
      return InternalError("simulate: too many transfers of 1 GiB or more");
    const auto lane_base = static_cast<uint32_t>(lanes_.size());
    const auto large_base = static_cast<uint32_t>(large_bytes_.size());
    size_t pos = code_.size();
    for (size_t c = 0; c < cr.lane_words.size(); ++c) {
      Lane lane;
      lane.rank = cr.rank;
      lane.channel = static_cast<int>(c);
      lane.pos = pos;
      lane.end = pos + cr.lane_words[c];
      pos = lane.end;
      lanes_.push_back(lane);
    }
    for (size_t i = 0; i < cr.code.size();) {
      const uint64_t header = cr.code[i++];
      code_.push_back(header);
      if (StepDeps(header)) has_deps_ = true;
      for (uint32_t k = 0; k < StepDeps(header); ++k, ++i) {
        Dep d = std::bit_cast<Dep>(cr.code[i]);
        d.lane += lane_base;
        code_.push_back(std::bit_cast<uint64_t>(d));
      }
      for (uint32_t k = 0; k < StepXfers(header); ++k, ++i) {
        Xfer x = std::bit_cast<Xfer>(cr.code[i]);
        const uint64_t key =
            sym_ == Symmetry::kNone ? cr.keys[x.stream] : OntoNodeZero(cr.keys[x.stream]);
        x.stream = streams_.Find(key);
        streams_[x.stream].cls = LinkClassBetween(a_.layout, KeySrc(key), KeyDst(key));
        streams_[x.stream].dst = KeyDst(key);
        if (x.meta & Xfer::kLarge)
          x.meta = (x.meta & ~Xfer::kLow) | ((x.meta & Xfer::kLow) + large_base);
        code_.push_back(std::bit_cast<uint64_t>(x));
      }
      if (StepOneSided(header)) {
        has_one_sided_ = true;
        const uint64_t nsw = cr.code[i];
        for (uint64_t k = 0; k < 2 + nsw; ++k) {
          uint64_t w = cr.code[i++];
          // A peer's counter is, by the symmetry, its image's on node 0.
          if (k >= 2 && sym_ != Symmetry::kNone && !SigWait::Signal(w))
            w = SigWait::Pack(false, SigWait::Counter(w) ? Counter::kConsumed : Counter::kPosted,
                              SigWait::Value(w), SigWait::Peer(w) % per_node_);
          code_.push_back(w);
        }
      }
    }
    large_bytes_.insert(large_bytes_.end(), cr.large.begin(), cr.large.end());
    // Ranks' schedules are usually alike: size the table once from rank 0's.
    if (cr.rank == 0) code_.reserve(code_.size() * static_cast<size_t>(SimulatedRanks()) + 1);
    return Status::Ok();
  }

  // Port owners (simulator.h): every rank owns its intra-node and device-group ports; the
  // inter-node ports belong to the rank's NIC: NIC (local rank mod nics_per_node) of its node,
  // shared by the node's ranks that map to it. A rank the layout does not place is a node (and NIC)
  // of its own.
  void AssignPorts() {
    const GroupLayout* l = a_.layout;
    const bool placed = l && l->nnodes > 1;
    const int nodes = placed ? l->nnodes : 0;
    const int nics = std::max(m_.nics_per_node, 1);
    nic_of_.resize(static_cast<size_t>(n_));
    for (int r = 0; r < n_; ++r) {
      const size_t ur = static_cast<size_t>(r);
      const int node = placed && ur < l->node_of.size() ? l->node_of[r] : -1;
      const int local = placed && ur < l->local_rank.size() ? std::max(l->local_rank[r], 0) : 0;
      nic_of_[r] = node >= 0 && node < nodes ? node * nics + local % nics : nodes * nics + r;
    }
    owners_ = static_cast<size_t>(n_ + nodes * nics + n_);
    nports_ = owners_ * kNumLinkClasses;
  }

  // Class-major, so that the ports a phase uses (one class at a time, usually) sit together.
  size_t Port(int rank, LinkClass c) const {
    const size_t owner = c != LinkClass::kInterNode
                             ? static_cast<size_t>(rank)
                             : static_cast<size_t>(n_) + static_cast<size_t>(nic_of_[rank]);
    return static_cast<size_t>(c) * owners_ + owner;
  }

  // Posts the lane's current step at time t, once its edges allow (else parks the lane on the
  // lane it waits for); steps without transfers complete at once.
  Status Enter(int lane, double t) {
    for (;;) {
      Lane& l = lanes_[lane];
      if (l.pos >= l.end) {
        l.finished = true;
        end_ = std::max(end_, t);
        return Status::Ok();
      }
      const uint64_t* w = &code_[l.pos];
      const uint32_t nxfers = StepXfers(w[0]);
      const uint32_t ndeps = StepDeps(w[0]);
      for (uint32_t i = 0; i < ndeps; ++i) {
        const Dep d = std::bit_cast<Dep>(w[1 + i]);
        if (lanes_[d.lane].step <= d.step) {
          parked_[d.lane].push_back(lane);
          return Status::Ok();
        }
      }
      l.step_words = 1 + ndeps + nxfers;
      l.pending = 0;
      l.ready_at = t;
      if (StepOneSided(w[0])) {
        const uint64_t* os = w + 1 + ndeps + nxfers;
        const uint64_t nsw = os[0];
        l.step_words += static_cast<uint32_t>(2 + nsw);
        l.ready_at = t + std::bit_cast<double>(os[1]);
        for (uint64_t k = 0; k < nsw; ++k) {
          const uint64_t sw = os[2 + k];
          if (SigWait::Signal(sw)) {
            Signal(l.rank, SigWait::Counter(sw), SigWait::Value(sw), t);
            continue;
          }
          const int32_t value = SigWait::Value(sw);
          if (value < 0) continue;  // a post of an earlier call: done before this one
          const auto& history = counters_[static_cast<size_t>(SigWait::Peer(sw))]
                                         [static_cast<size_t>(SigWait::Counter(sw))];
          const auto seen = std::find_if(history.begin(), history.end(),
                                         [&](const auto& h) { return h.first >= value; });
          if (seen != history.end()) {
            l.ready_at = std::max(l.ready_at, seen->second + SignalAlpha());
            continue;
          }
          counter_waits_[static_cast<size_t>(SigWait::Peer(sw))]
                        [static_cast<size_t>(SigWait::Counter(sw))]
                            .push_back({lane, value});
          ++l.pending;
        }
      }
      if (nxfers == 0) {
        if (l.pending > 0) return Status::Ok();  // a wait parked it
        if (l.ready_at > t) {
          local_ends_.push({l.ready_at, lane});
          return Status::Ok();
        }
        Advance(l);
        BRAID_RETURN_IF_ERROR(Wake(lane, t));
        continue;
      }
      const uint64_t* xfers = w + 1 + ndeps;
      for (uint32_t i = 0; i < nxfers; ++i) {
        const Xfer x = std::bit_cast<Xfer>(xfers[i]);
        Stream& s = streams_[x.stream];
        const uint64_t bytes =
            x.meta & Xfer::kLarge ? large_bytes_[x.meta & Xfer::kLow] : x.meta & Xfer::kLow;
        (x.meta & Xfer::kSend ? s.sends : s.recvs).push_back({lane, bytes, t});
      }
      l.pending += static_cast<int>(nxfers);
      for (uint32_t i = 0; i < nxfers; ++i)
        BRAID_RETURN_IF_ERROR(Match(std::bit_cast<Xfer>(xfers[i]).stream));
      return Status::Ok();
    }
  }

  // Every transfer and wait of lane `lane`'s step is done at time t: the step completes once its
  // data ops are too.
  Status StepDone(int lane, double t) {
    Lane& l = lanes_[lane];
    if (l.ready_at > t) {
      local_ends_.push({l.ready_at, lane});
      return Status::Ok();
    }
    Advance(l);
    BRAID_RETURN_IF_ERROR(Wake(lane, t));
    return Enter(lane, t);
  }

  // Rank `rank` sets its counter `c` to `value` at time t: the waits it meets see it
  // model.board.alpha later.
  void Signal(int rank, int c, int32_t value, double t) {
    counters_[static_cast<size_t>(rank)][static_cast<size_t>(c)].push_back({value, t});
    auto& parked = counter_waits_[static_cast<size_t>(rank)][static_cast<size_t>(c)];
    for (size_t i = 0; i < parked.size();) {
      if (parked[i].second > value) {
        ++i;
        continue;
      }
      const int w = parked[i].first;
      parked[i] = parked.back();
      parked.pop_back();
      Lane& wl = lanes_[w];
      wl.ready_at = std::max(wl.ready_at, t + SignalAlpha());
      if (--wl.pending == 0) local_ends_.push({std::max(wl.ready_at, t), w});
    }
  }

  // The lane's current step completed: on to the next.
  static void Advance(Lane& l) {
    l.pos += l.step_words;
    ++l.step;
  }

  // Lane `lane` completed a step at time t: the lanes parked on it try again.
  Status Wake(int lane, double t) {
    if (parked_.empty() || parked_[lane].empty()) return Status::Ok();
    std::vector<int> waiting;
    waiting.swap(parked_[lane]);
    for (int w : waiting) BRAID_RETURN_IF_ERROR(Enter(w, t));
    return Status::Ok();
  }

  Status Match(uint32_t id) {
    Stream& s = streams_[id];
    while (s.sh < s.sends.size() && s.rh < s.recvs.size()) {
      const Posted& snd = s.sends[s.sh++];
      const Posted& rcv = s.recvs[s.rh++];
      if (snd.bytes != rcv.bytes)
        return InternalError("simulate: rank " + std::to_string(lanes_[snd.lane].rank) + " sends " +
                             std::to_string(snd.bytes) + " bytes to rank " +
                             std::to_string(lanes_[rcv.lane].rank) + " which receives " +
                             std::to_string(rcv.bytes) + " on channel " +
                             std::to_string(lanes_[snd.lane].channel));
      const int src = lanes_[snd.lane].rank, dst = lanes_[rcv.lane].rank;
      ready_.push_back({std::max(snd.t, rcv.t), seq_++, snd.lane, rcv.lane, src, dst,
                        static_cast<double>(snd.bytes), s.cls, s.dst});
    }
    if (s.sh == s.sends.size()) {
      s.sends.clear();
      s.sh = 0;
    }
    if (s.rh == s.recvs.size()) {
      s.recvs.clear();
      s.rh = 0;
    }
    return Status::Ok();
  }

  uint64_t Key(int src, int dst, int ch) const {
    return (static_cast<uint64_t>(src) * static_cast<uint64_t>(n_) + static_cast<uint64_t>(dst)) *
               kMaxChannels +
           static_cast<uint64_t>(ch);
  }
  int KeySrc(uint64_t key) const { return static_cast<int>(key / kMaxChannels / n_); }
  int KeyDst(uint64_t key) const { return static_cast<int>(key / kMaxChannels % n_); }
  int KeyChannel(uint64_t key) const { return static_cast<int>(key % kMaxChannels); }

  // --- Symmetry (simulator.h) ---
  // The layout is G identical nodes of M ranks in rank order, enough of them to be worth it.
  bool SymmetryCandidate(int min_nodes) const {
    const GroupLayout* l = a_.layout;
    if (!l || l->nnodes < std::max(min_nodes, 2) || a_.nranks % l->nnodes != 0) return false;
    // A root's node differs from the others, and a sample may miss it.
    if (a_.kind == CollKind::kBroadcast || a_.kind == CollKind::kReduce) return false;
    const int m = a_.nranks / l->nnodes;
    if (static_cast<int>(l->node_of.size()) != n_ || static_cast<int>(l->local_rank.size()) != n_)
      return false;
    const bool groups = !l->dgroup_of.empty();
    if (groups && static_cast<int>(l->dgroup_of.size()) != n_) return false;
    for (int r = 0; r < n_; ++r)
      if (l->node_of[r] != r / m || l->local_rank[r] != r % m ||
          (groups && l->dgroup_of[r] != l->dgroup_of[r % m]))
        return false;
    return true;
  }

  // The node that symmetry element g_b puts node x on, where g_b takes node b to node 0 (the
  // inverse of the element that takes node 0 to node b: both are their own kind).
  int NodeToZero(int x, int b) const {
    return sym_ == Symmetry::kShift ? (x - b + nodes_) % nodes_ : x ^ b;
  }
  int RankToZero(int r, int b) const {
    return NodeToZero(r / per_node_, b) * per_node_ + r % per_node_;
  }
  // A stream's key mapped by g_b.
  uint64_t KeyToZero(uint64_t key, int b) const {
    return Key(RankToZero(KeySrc(key), b), RankToZero(KeyDst(key), b), KeyChannel(key));
  }
  // A stream's key moved so that its sender is on node 0: every stream of the cluster stands for
  // its images, and this is the one node 0 simulates (the receiver's lane, on node 0, posts the
  // stream's image whose receiver is there; both meet on this key).
  uint64_t OntoNodeZero(uint64_t key) const { return KeyToZero(key, KeySrc(key) / per_node_); }

  // Whether `sample` (rank j * M + r's schedule, compiled) is `rep` (rank r's) moved to node j:
  // the same steps, edges, byte counts and waits, and every stream and waited-on peer g_j's image.
  bool SameUpToSymmetry(const CompiledRank& rep, const CompiledRank& sample, int j) const {
    if (rep.lane_words != sample.lane_words || rep.large != sample.large ||
        rep.code.size() != sample.code.size() || rep.keys.size() != sample.keys.size())
      return false;
    for (size_t k = 0; k < rep.keys.size(); ++k)
      if (KeyToZero(sample.keys[k], j) != rep.keys[k]) return false;
    for (size_t i = 0; i < rep.code.size();) {
      const uint64_t header = rep.code[i];
      if (sample.code[i] != header) return false;
      const size_t words = 1 + StepDeps(header) + StepXfers(header);
      for (size_t k = 1; k < words; ++k)
        if (rep.code[i + k] != sample.code[i + k]) return false;
      i += words;
      if (!StepOneSided(header)) continue;
      const uint64_t nsw = rep.code[i];
      if (sample.code[i] != nsw || rep.code[i + 1] != sample.code[i + 1]) return false;
      for (uint64_t k = 0; k < nsw; ++k) {
        const uint64_t a = rep.code[i + 2 + k], b = sample.code[i + 2 + k];
        if (SigWait::Signal(a) != SigWait::Signal(b) ||
            SigWait::Counter(a) != SigWait::Counter(b) || SigWait::Value(a) != SigWait::Value(b))
          return false;
        if (!SigWait::Signal(a) && RankToZero(SigWait::Peer(b), j) != SigWait::Peer(a))
          return false;
      }
      i += 2 + nsw;
    }
    return true;
  }

  // Whether a step of `rep` (a rank of node 0) sends to ranks of two or more other nodes, or
  // receives from two or more (a ring step sends to one and receives from another: fine): the
  // bursts of the ordered reductions and of a direct all-to-all. Their transfers are ready at one
  // instant and queue for the node's NIC; the full simulation serves such ties in the order the
  // ranks happen to post (rank numbering), which is not the same on every node, so node 0's
  // order does not stand for node j's (the predictions differed by up to 3x).
  bool TalksToSeveralNodesInAStep(const CompiledRank& rep) const {
    for (size_t i = 0; i < rep.code.size();) {
      const uint64_t header = rep.code[i];
      const size_t first = i + 1 + StepDeps(header);
      int node[2] = {-1, -1};  // the other node it sends to, receives from
      for (uint32_t k = 0; k < StepXfers(header); ++k) {
        const Xfer x = std::bit_cast<Xfer>(rep.code[first + k]);
        const uint64_t key = rep.keys[x.stream];
        const bool send = (x.meta & Xfer::kSend) != 0;
        const int pn = (send ? KeyDst(key) : KeySrc(key)) / per_node_;
        if (pn == 0) continue;
        if (node[send] >= 0 && pn != node[send]) return true;
        node[send] = pn;
      }
      i = first + StepXfers(header);
      if (StepOneSided(header)) i += 2 + rep.code[i];
    }
    return false;
  }

  // Transfer r takes NIC ports `send` and `recv` (symmetric runs only), `queued` if it waited. If
  // the transfer that last took one of them became ready at the same instant between another pair
  // of ranks, the two queued in an order the full simulation may not share: it breaks such ties by
  // the order the ranks post, which differs from node to node (node 0's ranks post first, node
  // G-1's last), so node 0's order need not stand for node j's. Say so (the caller then runs every
  // rank). Ties between the channels of one pair queue in channel order in both; ports inside a
  // node see the same order in both (both ends post on the same node). (Then records r as the last
  // transfer to take both ports.)
  void NoteTaken(const ReadyXfer& r, bool queued, size_t send, size_t recv) {
    const uint64_t pair = static_cast<uint64_t>(r.src) << 32 | static_cast<uint32_t>(r.pair_dst);
    for (size_t port : {send, recv}) {
      auto& [t, other] = last_taken_[port];
      if (queued && t == r.t && other != pair) queued_ties_ = true;
      t = r.t;
      other = pair;
    }
  }

  // Runs fn(0 .. count-1) on `threads` threads (the caller is one); the first error by index.
  template <typename Fn>
  static Status ParallelFor(int count, int threads, Fn fn) {
    std::vector<Status> errors(static_cast<size_t>(count));
    std::atomic<int> next{0};
    auto work = [&] {
      for (int i; (i = next.fetch_add(1)) < count;) errors[static_cast<size_t>(i)] = fn(i);
    };
    std::vector<std::thread> helpers;
    for (int t = 1; t < std::min(threads, count); ++t) helpers.emplace_back(work);
    work();
    for (auto& t : helpers) t.join();
    for (auto& e : errors) BRAID_RETURN_IF_ERROR(e);
    return Status::Ok();
  }

  // Builds node 0's schedules, checks them against sample nodes' under a shift, then an XOR, of
  // the nodes, and on a match appends node 0's ranks alone (true). False: no symmetry holds, and
  // nothing was appended (the caller simulates every rank).
  Result<bool> BuildSymmetric(const Algorithm& algo, int threads) {
    nodes_ = a_.layout->nnodes;
    per_node_ = n_ / nodes_;
    std::vector<CompiledRank> reps(static_cast<size_t>(per_node_));
    BRAID_RETURN_IF_ERROR(ParallelFor(per_node_, threads, [&](int r) -> Status {
      BRAID_ASSIGN_OR_RETURN(reps[static_cast<size_t>(r)], BuildAndCompileRank(algo, r));
      return Status::Ok();
    }));
    for (const CompiledRank& cr : reps)
      if (TalksToSeveralNodesInAStep(cr)) return false;
    // Asymmetries that are not the root's (uneven blocks, a chain's ends) show on every node, or
    // at the ends of the node order: spread samples, both ends included.
    std::vector<int> samples = {1,          2,         nodes_ / 4, nodes_ / 2, 3 * nodes_ / 4,
                                nodes_ - 2, nodes_ - 1};
    std::erase_if(samples, [&](int j) { return j <= 0 || j >= nodes_; });
    std::sort(samples.begin(), samples.end());
    samples.erase(std::unique(samples.begin(), samples.end()), samples.end());
    const auto nsamples = static_cast<int>(samples.size());
    for (Symmetry sym : {Symmetry::kShift, Symmetry::kXor}) {
      if (sym == Symmetry::kXor && !std::has_single_bit(static_cast<unsigned>(nodes_))) continue;
      sym_ = sym;
      std::atomic<bool> same{true};
      BRAID_RETURN_IF_ERROR(ParallelFor(nsamples * per_node_, threads, [&](int i) -> Status {
        if (!same.load(std::memory_order_relaxed)) return Status::Ok();
        const int j = samples[static_cast<size_t>(i / per_node_)], r = i % per_node_;
        // Rank r of node j: g_j's inverse takes node 0 to node j (for both kinds, j * M + r).
        BRAID_ASSIGN_OR_RETURN(CompiledRank cr, BuildAndCompileRank(algo, j * per_node_ + r));
        if (!SameUpToSymmetry(reps[static_cast<size_t>(r)], cr, j)) same = false;
        return Status::Ok();
      }));
      if (!same) continue;
      for (const CompiledRank& cr : reps) BRAID_RETURN_IF_ERROR(Append(cr));
      return true;
    }
    sym_ = Symmetry::kNone;
    return false;
  }

  const CollArgs a_;
  const LinkModel m_;
  enum class Symmetry { kNone, kShift, kXor };
  Symmetry sym_ = Symmetry::kNone;
  int nodes_ = 1, per_node_ = 1;  // with a symmetry: G and M
  bool queued_ties_ = false;      // see QueuedTies()
  std::vector<std::pair<double, uint64_t>>
      last_taken_;                   // per port: its last transfer's ready time, rank pair
  const LinkParams nic_ = m_.nic();  // what one inter-node transfer gets on its NIC
  const int n_;
  std::vector<Lane> lanes_;
  std::vector<uint64_t> code_;                 // every lane's compiled steps, lane after lane
  bool has_deps_ = false;                      // some step has an edge
  std::vector<uint64_t> large_bytes_;          // sizes of the transfers of >= 1 GiB
  std::vector<std::vector<int>> parked_;       // per lane: lanes waiting for its next step
  std::vector<double> send_free_, recv_free_;  // per (port owner, link class): when it frees
  std::vector<int> nic_of_;                    // per rank: its node's NIC (inter-node ports)
  size_t owners_ = 0, nports_ = 0;
  StreamTable streams_;
  // Transfer ends. A send port's transfers end in the order they took it (each starts when the
  // previous one ended), so each port keeps its own in a FIFO and only the first of each is in
  // the heap: the heap holds one end per busy port, not one per transfer in flight (H-Ring's
  // g pieces per step queued tens of thousands, and half its simulation was heap pops). The
  // order of events, and so every prediction, is the one a heap of all ends gives.
  // The heap's entries are 16 bytes (time, then sequence number and port in one word: the
  // sequence numbers are unique, so the word orders as they do); the lanes wait in the port's
  // record, which the pop reads anyway.
  static constexpr int kPortBits = 24;
  struct HeapEnd {
    double t;
    uint64_t key;  // seq << kPortBits | port
    bool operator>(const HeapEnd& o) const { return t != o.t ? t > o.t : key > o.key; }
  };
  // Per send port: the lanes of its end in the heap and how many wait behind it (hot, 12 bytes,
  // touched by every push and pop), and the waiting ends themselves (touched only when a port
  // has more than one transfer in flight).
  struct PortEnds {
    int src_lane = 0, dst_lane = 0;
    uint32_t waiting = 0;  // + 1 when an end of this port is in the heap
  };
  struct PortQueue {
    size_t head = 0;
    std::vector<EndXfer> q;
  };
  void ToHeap(PortEnds& p, const EndXfer& e) {
    p.src_lane = e.src_lane;
    p.dst_lane = e.dst_lane;
    ends_.push({e.t, e.seq << kPortBits | e.port});
  }
  void PushEnd(const EndXfer& e) {
    PortEnds& p = port_ends_[e.port];
    if (p.waiting++ > 0) {
      port_queues_[e.port].q.push_back(e);
      return;
    }
    ToHeap(p, e);
  }
  EndXfer PopEnd() {
    const HeapEnd h = ends_.top();
    ends_.pop();
    const uint32_t port = static_cast<uint32_t>(h.key & ((uint64_t{1} << kPortBits) - 1));
    PortEnds& p = port_ends_[port];
    const EndXfer e{h.t, h.key >> kPortBits, p.src_lane, p.dst_lane, port};
    if (--p.waiting > 0) {
      PortQueue& pq = port_queues_[port];
      ToHeap(p, pq.q[pq.head]);
      if (++pq.head == pq.q.size()) {
        pq.q.clear();
        pq.head = 0;
      }
    }
    return e;
  }
  std::priority_queue<HeapEnd, std::vector<HeapEnd>, std::greater<HeapEnd>> ends_;
  std::vector<PortEnds> port_ends_;     // per send port
  std::vector<PortQueue> port_queues_;  // per send port
  std::vector<ReadyXfer> ready_;        // transfers ready at the current time, in seq order
  size_t ready_head_ = 0;
  uint64_t seq_ = 0;
  double end_ = 0;
  // One-sided schedules (IR v3): each rank's counters as they were signalled (value, time), the
  // waits parked on them (lane, value), and the one-sided steps' completions.
  bool has_one_sided_ = false;
  // Device kernels' schedules (device_kernel_schedule.h): a signal is seen after the ranks'
  // agreement round (LinkModel::device_peer's alpha), not the board's flag.
  bool device_kernels_ = false;
  double SignalAlpha() const { return device_kernels_ ? m_.device_peer.alpha_s : m_.board.alpha_s; }
  ScheduleSource source_;
  std::vector<std::array<std::vector<std::pair<int32_t, double>>, 2>> counters_;
  std::vector<std::array<std::vector<std::pair<int, int32_t>>, 2>> counter_waits_;
  struct LocalEnd {
    double t;
    int lane;
    bool operator>(const LocalEnd& o) const { return t != o.t ? t > o.t : lane > o.lane; }
  };
  std::priority_queue<LocalEnd, std::vector<LocalEnd>, std::greater<LocalEnd>> local_ends_;
};

}  // namespace

Result<double> SimulateSeconds(const Algorithm& algo, const CollArgs& args, const LinkModel& model,
                               int threads) {
  BRAID_ASSIGN_OR_RETURN(SimulationResult r,
                         Simulate(algo, args, model, SimulateOptions{.threads = threads}));
  return r.seconds;
}

Result<SimulationResult> Simulate(const Algorithm& algo, const CollArgs& args,
                                  const LinkModel& model, const SimulateOptions& options) {
  if (args.nranks < 1) return InvalidArgument("simulate: nranks must be >= 1");
  if (!algo.supports(args))
    return InvalidArgument(std::string("simulate: ") + algo.name() + " does not support " +
                           CollKindName(args.kind));
  if (options.threads < 1) return InvalidArgument("simulate: threads must be >= 1");
  // (Below a few dozen ranks the builds take less than starting a thread: Run uses one.)
  auto run = [&](const SimulateOptions& o) -> Result<SimulationResult> {
    Simulation sim(args, model);
    SimulationResult r;
    BRAID_ASSIGN_OR_RETURN(r.seconds, sim.Run(algo, o));
    r.simulated_ranks = sim.SimulatedRanks();
    r.symmetry = sim.SymmetryName();
    r.ties = sim.QueuedTies();
    return r;
  };
  BRAID_ASSIGN_OR_RETURN(SimulationResult r, run(options));
  if (!r.ties || options.accept_ties) return r;
  // Ties queued at a port in the symmetric run: every rank, then.
  SimulateOptions full = options;
  full.symmetry = false;
  return run(full);
}

Result<double> SimulateLoweredSeconds(const CollArgs& args, const LinkModel& model,
                                      const ScheduleSource& source) {
  if (args.nranks < 1) return InvalidArgument("simulate: nranks must be >= 1");
  // Only a name for messages: the schedules come from `source`.
  struct Lowered final : Algorithm {
    const char* name() const override { return "lowered"; }
    bool supports(const CollArgs&) const override { return true; }
    Result<RankSchedule> build(const CollArgs&, int) const override {
      return InternalError("simulate: a lowered run builds nothing");
    }
  } lowered;
  Simulation sim(args, model);
  sim.UseSource(source);
  SimulateOptions o;
  o.symmetry = false;
  return sim.Run(lowered, o);
}

}  // namespace braid
