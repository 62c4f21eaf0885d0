// Event simulation of all ranks' schedules; the model is described in simulator.h.
//
// Each rank's schedule is compiled into flat per-lane transfer records as soon as it is built,
// then dropped. Two kinds of events drive the run: a transfer becoming ready (both ends posted,
// always at the current time, so these queue in a FIFO), which reserves the two ports of its
// class and schedules its end; and a transfer ending (a heap ordered by time), which lets the
// two lanes it belongs to post their next steps. Streams live in an open-addressing table,
// drained post queues are reset and message slots recycled, so the hot loop stays in flat,
// cache-friendly memory.
#include <algorithm>
#include <cstdint>
#include <queue>
#include <string>
#include <vector>

#include "algorithms/cost_model.h"
#include "algorithms/lowering.h"
#include "algorithms/simulator.h"

namespace braid {
namespace {

// One transfer of a lane in compiled form (8 bytes): which stream, which way, how much.
// Each rank's schedule is compiled to these as soon as it is built and then dropped, so the
// simulation walks flat arrays rather than every rank's step vectors. A large simulation reads
// them at one place per lane, thousands of lanes in turn, so every step costs cache misses:
// the records are kept small (a 1024-rank all-reduce compiles 4 million steps).
struct Xfer {
  static constexpr uint32_t kSend = 1u << 31;   // a send, else a receive
  static constexpr uint32_t kLarge = 1u << 30;  // the low bits index Simulation::large_bytes_
  static constexpr uint32_t kLow = kLarge - 1;
  uint32_t stream;
  uint32_t meta;  // kSend | kLarge | bytes (element count times its buffer's element size)
};

// One step in compiled form: its transfers and its dependency edges (local ops cost nothing).
struct CStep {
  uint32_t xfer_begin;
  uint32_t nxfers;
  uint32_t dep_begin;
  uint32_t ndeps;
};

// A dependency edge: the lane (of the same rank) and the step of it that must complete first.
struct Dep {
  uint32_t lane;
  uint32_t step;
};

struct Lane {
  int rank = 0;
  int channel = 0;
  size_t first = 0, end = 0;  // the lane's steps are steps_[first, end)
  size_t step = 0;            // the current step, relative to first (= steps completed)
  int pending = 0;
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

struct Msg {
  int src_lane, dst_lane;
  int src, dst;
  LinkClass cls;
  double bytes;
};

struct Event {
  double t;
  uint64_t seq;
  bool ready;  // false: transfer done
  uint32_t msg;
  bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};

constexpr int kMaxChannels = 1 << 16;  // stream keys hold the channel in 16 bits
constexpr size_t kMaxSteps = size_t{1} << 30;

class Simulation {
 public:
  Simulation(const CollArgs& a, const LinkModel& m)
      : a_(a), m_(m), n_(a.nranks), streams_(2 * static_cast<size_t>(a.nranks)) {}

  Result<double> Run(const Algorithm& algo) {
    for (int r = 0; r < n_; ++r) {
      auto s = BuildSchedule(algo, a_, r);
      if (!s.ok()) return s.status();
      BRAID_RETURN_IF_ERROR(Compile(r, *s));
      // Ranks' schedules are usually alike: size the tables once from rank 0's.
      if (r == 0) {
        xfers_.reserve(xfers_.size() * static_cast<size_t>(n_) + 1);
        steps_.reserve(steps_.size() * static_cast<size_t>(n_) + 1);
      }
    }
    if (!deps_.empty()) parked_.resize(lanes_.size());
    AssignPorts();
    send_free_.assign(nports_, 0);
    recv_free_.assign(nports_, 0);
    for (size_t l = 0; l < lanes_.size(); ++l) BRAID_RETURN_IF_ERROR(Enter(static_cast<int>(l), 0));
    for (;;) {
      // Transfers become ready at the time their second end is posted, which is always the
      // current time: they queue in a FIFO, merged with the heap by (time, seq).
      Event e;
      if (ready_head_ < ready_.size() &&
          (events_.empty() || !(ready_[ready_head_] > events_.top()))) {
        e = ready_[ready_head_++];
        if (ready_head_ == ready_.size()) {
          ready_.clear();
          ready_head_ = 0;
        }
      } else if (!events_.empty()) {
        e = events_.top();
        events_.pop();
      } else {
        break;
      }
      if (e.ready) {
        const Msg& msg = msgs_[e.msg];
        const LinkParams& link = msg.cls == LinkClass::kInterNode ? nic_ : m_.of(msg.cls);
        double& send_port = send_free_[Port(msg.src, msg.cls)];
        double& recv_port = recv_free_[Port(msg.dst, msg.cls)];
        const double start = std::max({e.t, send_port, recv_port});
        const double end = start + link.alpha_s + msg.bytes / link.beta_bytes_s;
        send_port = end;
        recv_port = end;
        events_.push({end, seq_++, false, e.msg});
        continue;
      }
      const int lanes[2] = {msgs_[e.msg].src_lane, msgs_[e.msg].dst_lane};
      free_msgs_.push_back(e.msg);
      for (int l : lanes)
        if (--lanes_[l].pending == 0) {
          ++lanes_[l].step;
          BRAID_RETURN_IF_ERROR(Wake(l, e.t));
          BRAID_RETURN_IF_ERROR(Enter(l, e.t));
        }
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
  // Appends rank's channels as lanes of compiled steps.
  Status Compile(int rank, const RankSchedule& s) {
    if (s.channels.size() > static_cast<size_t>(kMaxChannels))
      return InternalError("simulate: rank " + std::to_string(rank) + " has " +
                           std::to_string(s.channels.size()) + " channels, more than " +
                           std::to_string(kMaxChannels));
    const auto lane_base = static_cast<uint32_t>(lanes_.size());
    for (size_t c = 0; c < s.channels.size(); ++c) {
      const auto& steps = s.channels[c].steps;
      if (steps.size() > kMaxSteps)
        return InternalError("simulate: rank " + std::to_string(rank) + " channel " +
                             std::to_string(c) + " has too many steps");
      Lane lane;
      lane.rank = rank;
      lane.channel = static_cast<int>(c);
      lane.first = steps_.size();
      for (size_t k = 0; k < steps.size(); ++k) {
        if (xfers_.size() + steps[k].ops.size() > UINT32_MAX ||
            deps_.size() + steps[k].deps.size() > UINT32_MAX)
          return InternalError("simulate: more than 2^32 transfers or edges in all");
        CStep cs{static_cast<uint32_t>(xfers_.size()), 0, static_cast<uint32_t>(deps_.size()), 0};
        for (const StepRef& d : steps[k].deps) deps_.push_back({lane_base + d.channel, d.step});
        cs.ndeps = static_cast<uint32_t>(steps[k].deps.size());
        for (const StepOp& op : steps[k].ops) {
          const bool send = op.kind == StepOpKind::kSend;
          if (!send && op.kind != StepOpKind::kRecv && op.kind != StepOpKind::kRecvReduce) continue;
          if (op.peer < 0 || op.peer >= n_)
            return InternalError("simulate: rank " + std::to_string(rank) + " channel " +
                                 std::to_string(c) + " step " + std::to_string(k) + " names peer " +
                                 std::to_string(op.peer) + " outside [0, " + std::to_string(n_) +
                                 ")");
          const Slice& sl = send ? op.src : op.dst;
          Xfer x;
          x.stream = streams_.Find(send ? Key(rank, op.peer, lane.channel)
                                        : Key(op.peer, rank, lane.channel));
          const uint64_t bytes = sl.count * DataTypeSize(s.buffers[sl.buffer].dtype);
          x.meta = send ? Xfer::kSend : 0;
          if (bytes <= Xfer::kLow) {
            x.meta |= static_cast<uint32_t>(bytes);
          } else {
            if (large_bytes_.size() > Xfer::kLow)
              return InternalError("simulate: too many transfers of 1 GiB or more");
            x.meta |= Xfer::kLarge | static_cast<uint32_t>(large_bytes_.size());
            large_bytes_.push_back(bytes);
          }
          xfers_.push_back(x);
          ++cs.nxfers;
        }
        steps_.push_back(cs);
      }
      lane.end = steps_.size();
      lanes_.push_back(lane);
    }
    return Status::Ok();
  }

  // Port owners (simulator.h): every rank owns its intra-node ports; the inter-node ports belong
  // to the rank's NIC: NIC (local rank mod nics_per_node) of its node, shared by the node's
  // ranks that map to it. A rank the layout does not place is a node (and NIC) of its own.
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
    nports_ = static_cast<size_t>(n_ + nodes * nics + n_) * kNumLinkClasses;
  }

  size_t Port(int rank, LinkClass c) const {
    const size_t owner = c == LinkClass::kIntraNode
                             ? static_cast<size_t>(rank)
                             : static_cast<size_t>(n_) + static_cast<size_t>(nic_of_[rank]);
    return owner * kNumLinkClasses + static_cast<size_t>(c);
  }

  // Posts the lane's current step at time t, once its edges allow (else parks the lane on the
  // lane it waits for); steps without transfers complete at once.
  Status Enter(int lane, double t) {
    for (;;) {
      Lane& l = lanes_[lane];
      if (l.first + l.step >= l.end) {
        l.finished = true;
        end_ = std::max(end_, t);
        return Status::Ok();
      }
      const CStep& cs = steps_[l.first + l.step];
      for (uint32_t i = 0; i < cs.ndeps; ++i) {
        const Dep& d = deps_[cs.dep_begin + i];
        if (lanes_[d.lane].step <= d.step) {
          parked_[d.lane].push_back(lane);
          return Status::Ok();
        }
      }
      if (cs.nxfers == 0) {
        ++l.step;
        BRAID_RETURN_IF_ERROR(Wake(lane, t));
        continue;
      }
      for (uint32_t i = 0; i < cs.nxfers; ++i) {
        const Xfer& x = xfers_[cs.xfer_begin + i];
        Stream& s = streams_[x.stream];
        const uint64_t bytes =
            x.meta & Xfer::kLarge ? large_bytes_[x.meta & Xfer::kLow] : x.meta & Xfer::kLow;
        (x.meta & Xfer::kSend ? s.sends : s.recvs).push_back({lane, bytes, t});
      }
      l.pending = static_cast<int>(cs.nxfers);
      for (uint32_t i = 0; i < cs.nxfers; ++i)
        BRAID_RETURN_IF_ERROR(Match(xfers_[cs.xfer_begin + i].stream));
      return Status::Ok();
    }
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
      const Msg msg{snd.lane,
                    rcv.lane,
                    src,
                    dst,
                    LinkClassBetween(a_.layout, src, dst),
                    static_cast<double>(snd.bytes)};
      uint32_t slot;
      if (free_msgs_.empty()) {
        slot = static_cast<uint32_t>(msgs_.size());
        msgs_.push_back(msg);
      } else {
        slot = free_msgs_.back();
        free_msgs_.pop_back();
        msgs_[slot] = msg;
      }
      ready_.push_back({std::max(snd.t, rcv.t), seq_++, true, slot});
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

  const CollArgs a_;
  const LinkModel m_;
  const LinkParams nic_ = m_.nic();  // what one inter-node transfer gets on its NIC
  const int n_;
  std::vector<Lane> lanes_;
  std::vector<CStep> steps_;                   // every lane's steps, lane after lane
  std::vector<Xfer> xfers_;                    // every step's transfers, in step order
  std::vector<uint64_t> large_bytes_;          // sizes of the transfers of >= 1 GiB
  std::vector<Dep> deps_;                      // every step's edges, in step order
  std::vector<std::vector<int>> parked_;       // per lane: lanes waiting for its next step
  std::vector<double> send_free_, recv_free_;  // per (port owner, link class): when it frees
  std::vector<int> nic_of_;                    // per rank: its node's NIC (inter-node ports)
  size_t nports_ = 0;
  StreamTable streams_;
  std::vector<Msg> msgs_;
  std::vector<uint32_t> free_msgs_;  // slots of msgs_ whose transfer ended
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;  // ends
  std::vector<Event> ready_;  // transfers ready at the current time, in seq order
  size_t ready_head_ = 0;
  uint64_t seq_ = 0;
  double end_ = 0;
};

}  // namespace

Result<double> SimulateSeconds(const Algorithm& algo, const CollArgs& args,
                               const LinkModel& model) {
  if (args.nranks < 1) return InvalidArgument("simulate: nranks must be >= 1");
  if (!algo.supports(args))
    return InvalidArgument(std::string("simulate: ") + algo.name() + " does not support " +
                           CollKindName(args.kind));
  Simulation sim(args, model);
  return sim.Run(algo);
}

}  // namespace braid
