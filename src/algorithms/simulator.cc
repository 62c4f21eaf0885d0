// Event simulation of all ranks' schedules (see simulator.h).
//
// Each (rank, channel) is a lane that posts its steps one after another. A transfer starts once
// both its send and its receive are posted (rendezvous, as the verifier assumes) and both ports
// are free: every rank has one send port and one receive port, shared by all its channels, and a
// message holds both for alpha + bytes / beta of its link class. Ready transfers take the ports
// first come, first served. Local copies and reductions are free in this model.
#include <algorithm>
#include <cstdint>
#include <queue>
#include <string>
#include <unordered_map>
#include <vector>

#include "algorithms/cost_model.h"
#include "algorithms/simulator.h"

namespace braid {
namespace {

struct Lane {
  int rank = 0;
  int channel = 0;
  size_t step = 0;
  int pending = 0;
  bool finished = false;
};

struct Posted {
  int lane;
  uint64_t count;
  double t;
};

struct Stream {
  std::vector<Posted> sends, recvs;
  size_t sh = 0, rh = 0;
};

struct Msg {
  int src_lane, dst_lane;
  int src, dst;
  double bytes;
};

// Stream keys are arithmetic progressions (ring: 257*src+1 for N = 256) that the identity hash
// would pile into one bucket of a prime-sized table; mix them first.
struct KeyHash {
  size_t operator()(uint64_t x) const {
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return static_cast<size_t>(x ^ (x >> 31));
  }
};

struct Event {
  double t;
  uint64_t seq;
  bool ready;  // false: transfer done
  uint32_t msg;
  bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};

class Simulation {
 public:
  Simulation(const CollArgs& a, const LinkModel& m) : a_(a), m_(m), n_(a.nranks) {}

  Result<double> Run(const Algorithm& algo) {
    std::vector<RankSchedule> sched;
    sched.reserve(n_);
    int max_ch = 0;
    for (int r = 0; r < n_; ++r) {
      auto s = algo.build(a_, r);
      if (!s.ok()) return s.status();
      max_ch = std::max(max_ch, static_cast<int>(s->channels.size()));
      sched.push_back(std::move(*s));
    }
    sched_ = &sched;
    max_ch_ = std::max(max_ch, 1);
    esize_ = static_cast<double>(DataTypeSize(a_.dtype));
    send_free_.assign(n_, 0);
    recv_free_.assign(n_, 0);
    for (int r = 0; r < n_; ++r) {
      for (size_t c = 0; c < sched[r].channels.size(); ++c)
        lanes_.push_back({r, static_cast<int>(c)});
    }
    for (size_t l = 0; l < lanes_.size(); ++l) BRAID_RETURN_IF_ERROR(Enter(static_cast<int>(l), 0));
    while (!events_.empty()) {
      const Event e = events_.top();
      events_.pop();
      Msg& msg = msgs_[e.msg];
      if (e.ready) {
        const LinkParams& link = LinkBetween(a_, m_, msg.src, msg.dst);
        const double start = std::max({e.t, send_free_[msg.src], recv_free_[msg.dst]});
        const double end = start + link.alpha_s + msg.bytes / link.beta_bytes_s;
        send_free_[msg.src] = end;
        recv_free_[msg.dst] = end;
        events_.push({end, seq_++, false, e.msg});
        continue;
      }
      for (int l : {msg.src_lane, msg.dst_lane})
        if (--lanes_[l].pending == 0) BRAID_RETURN_IF_ERROR(Complete(l, e.t));
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
  const std::vector<Step>& Steps(int lane) const {
    return (*sched_)[lanes_[lane].rank].channels[lanes_[lane].channel].steps;
  }

  // Posts the lane's current step at time t (or finishes the lane).
  Status Enter(int lane, double t) {
    for (;;) {
      Lane& l = lanes_[lane];
      const auto& steps = Steps(lane);
      if (l.step >= steps.size()) {
        l.finished = true;
        end_ = std::max(end_, t);
        return Status::Ok();
      }
      int transfers = 0;
      std::vector<uint64_t>& touched = touched_;
      touched.clear();
      for (const StepOp& op : steps[l.step].ops) {
        if (op.kind == StepOpKind::kSend) {
          const uint64_t id = Key(l.rank, op.peer, l.channel);
          streams_[id].sends.push_back({lane, op.src.count, t});
          touched.push_back(id);
          ++transfers;
        } else if (op.kind == StepOpKind::kRecv || op.kind == StepOpKind::kRecvReduce) {
          const uint64_t id = Key(op.peer, l.rank, l.channel);
          streams_[id].recvs.push_back({lane, op.dst.count, t});
          touched.push_back(id);
          ++transfers;
        }
      }
      l.pending = transfers;
      for (uint64_t id : touched) BRAID_RETURN_IF_ERROR(Match(id));
      if (transfers > 0) return Status::Ok();
      ++l.step;  // only local ops: they cost nothing
    }
  }

  Status Complete(int lane, double t) {
    ++lanes_[lane].step;
    return Enter(lane, t);
  }

  Status Match(uint64_t id) {
    Stream& s = streams_[id];
    while (s.sh < s.sends.size() && s.rh < s.recvs.size()) {
      const Posted& snd = s.sends[s.sh++];
      const Posted& rcv = s.recvs[s.rh++];
      if (snd.count != rcv.count)
        return InternalError("simulate: rank " + std::to_string(lanes_[snd.lane].rank) + " sends " +
                             std::to_string(snd.count) + " elements to rank " +
                             std::to_string(lanes_[rcv.lane].rank) + " which receives " +
                             std::to_string(rcv.count) + " on channel " +
                             std::to_string(lanes_[snd.lane].channel));
      msgs_.push_back({snd.lane, rcv.lane, lanes_[snd.lane].rank, lanes_[rcv.lane].rank,
                       static_cast<double>(snd.count) * esize_});
      events_.push({std::max(snd.t, rcv.t), seq_++, true, static_cast<uint32_t>(msgs_.size() - 1)});
    }
    return Status::Ok();
  }

  uint64_t Key(int src, int dst, int ch) const {
    return (static_cast<uint64_t>(src) * n_ + static_cast<uint64_t>(dst)) * max_ch_ +
           static_cast<uint64_t>(ch);
  }

  const CollArgs a_;
  const LinkModel m_;
  const int n_;
  const std::vector<RankSchedule>* sched_ = nullptr;
  int max_ch_ = 1;
  double esize_ = 1;
  std::vector<Lane> lanes_;
  std::vector<double> send_free_, recv_free_;
  std::unordered_map<uint64_t, Stream, KeyHash> streams_;
  std::vector<Msg> msgs_;
  std::vector<uint64_t> touched_;  // streams the step being posted uses
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
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
