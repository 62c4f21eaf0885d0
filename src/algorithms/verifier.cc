// Symbolic execution of all ranks' schedules (see verifier.h).
//
// Model:
// - Every element of every rank's memory holds a symbol: the set of ranks whose input element
//   `elem` has been combined into it, and a canonical hash of the expression tree (commutative
//   at each node, so a+b and b+a hash alike but (a+b)+c and a+(b+c) do not). Equal hashes on all
//   ranks mean bitwise-identical results.
// - Memory is laid out per rank with the C API's in-place aliasing, so a write through kRecvBuf
//   is seen through kSendBuf where the two overlap.
// - Channels never synchronise with each other, so each channel is run to completion on all
//   ranks in turn; any memory one channel writes and another touches is a race and rejected,
//   which makes the result independent of how the engine interleaves channels.
// - Within a channel, a step's ops are posted together. A send completes only when matched by
//   the receive at the same position of its FIFO stream (rendezvous: the conservative choice, an
//   engine with bounded buffers behaves so), so a schedule that would need buffering to progress
//   is reported as a deadlock. Ops of one step that are not ordered (different peer or
//   direction, local ops) must not touch overlapping memory with a write among them.
#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "algorithms/verifier.h"

namespace braid {
namespace {

constexpr int kMaxRanks = 64;  // contributions are a 64-bit rank mask

struct Sym {
  uint64_t mask = 0;  // contributing ranks
  uint64_t tree = 0;  // canonical hash of the combination tree
  uint32_t elem = 0;  // input element index the contributions belong to
  uint32_t valid = 0;
};

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t LeafTree(int rank) {
  return Mix(0x5eed0000ull + static_cast<uint64_t>(rank));
}

uint64_t CombineTree(uint64_t a, uint64_t b) {
  const uint64_t lo = std::min(a, b), hi = std::max(a, b);
  return Mix(lo ^ Mix(hi + 0x1234567ull));
}

std::string RankList(uint64_t mask) {
  std::string s = "{";
  bool first = true;
  for (int r = 0; r < 64;) {
    if (!(mask >> r & 1)) {
      ++r;
      continue;
    }
    int e = r;
    while (e + 1 < 64 && (mask >> (e + 1) & 1)) ++e;
    if (!first) s += ',';
    s += std::to_string(r);
    if (e > r) {
      s += '-';
      s += std::to_string(e);
    }
    first = false;
    r = e + 1;
  }
  return s + "}";
}

std::string Describe(const Sym& s) {
  if (!s.valid) return "never-written memory";
  return "element " + std::to_string(s.elem) + " of ranks " + RankList(s.mask);
}

struct View {
  bool exists = false;  // the schedule may reference this slot
  bool writable = false;
  uint64_t base = 0;
  uint64_t size = 0;
};

struct ROp {  // an op of the current step, slices resolved to physical offsets
  StepOpKind kind;
  int peer = -1;
  uint64_t src = 0, dst = 0, count = 0;
  bool done = false;
};

struct Iv {  // memory an op of the current step touches
  uint64_t lo, hi;
  uint32_t op;
  bool write;
};

struct OpRef {
  int rank;
  uint32_t op;
};

struct Stream {
  std::vector<OpRef> sends, recvs;
  size_t sh = 0, rh = 0;
};

bool IsRecvKind(StepOpKind k) {
  return k == StepOpKind::kRecv || k == StepOpKind::kRecvReduce;
}
bool IsTransfer(StepOpKind k) {
  return k == StepOpKind::kSend || IsRecvKind(k);
}

class SymbolicRun {
 public:
  SymbolicRun(const Algorithm& algo, const CollArgs& args)
      : algo_(algo), a_(args), n_(args.nranks) {}

  Status Run() {
    prefix_ = std::string("verify ") + algo_.name() + " " + CollKindName(a_.kind) +
              " (N=" + std::to_string(n_) + ", count=" + std::to_string(a_.count) + ", " +
              DataTypeName(a_.dtype) + ", " + (a_.in_place ? "in place" : "out of place") +
              ", nchannels=" + std::to_string(a_.nchannels) +
              ", chunk=" + std::to_string(a_.chunk_bytes) + "B" +
              (a_.kind == CollKind::kBroadcast || a_.kind == CollKind::kReduce
                   ? ", root=" + std::to_string(a_.root)
                   : "") +
              "): ";
    if (n_ < 1 || n_ > kMaxRanks)
      return InvalidArgument(prefix_ + "the verifier handles 1.." + std::to_string(kMaxRanks) +
                             " ranks");
    if (a_.kind == CollKind::kSendRecv)
      return InvalidArgument(prefix_ +
                             "point-to-point groups are built by the engine, not verified here");
    if (a_.kind == CollKind::kAllToAll && a_.in_place)
      return InvalidArgument(prefix_ + "all-to-all has no in-place form");
    if (!algo_.supports(a_))
      return InvalidArgument(prefix_ + "the algorithm does not support this request");
    sched_.reserve(n_);
    size_t max_ch = 0;
    for (int r = 0; r < n_; ++r) {
      auto s = algo_.build(a_, r);
      if (!s.ok()) {
        Status st = s.status();
        return st.prepend(prefix_ + "build(rank " + std::to_string(r) + "): ");
      }
      if (static_cast<int>(s->channels.size()) > a_.nchannels)
        return InternalError(prefix_ + "rank " + std::to_string(r) + " uses " +
                             std::to_string(s->channels.size()) + " channels, more than nchannels");
      max_ch = std::max(max_ch, s->channels.size());
      sched_.push_back(std::move(*s));
    }
    track_channels_ = max_ch > 1;
    views_.resize(n_);
    for (int r = 0; r < n_; ++r) BRAID_RETURN_IF_ERROR(SetUpMemory(r));
    streams_.resize(static_cast<size_t>(n_) * n_);
    know_.assign(n_, 0);
    know_start_.assign(n_, 0);
    total_know_.assign(n_, 0);
    for (int r = 0; r < n_; ++r) total_know_[r] = uint64_t{1} << r;
    cur_.resize(n_);
    si_.assign(n_, 0);
    pending_.assign(n_, 0);
    for (size_t c = 0; c < max_ch; ++c) BRAID_RETURN_IF_ERROR(RunChannel(static_cast<int>(c)));
    return CheckFinal();
  }

 private:
  // ---------------------------------------------------------------- memory
  uint64_t InSize() const {
    switch (a_.kind) {
      case CollKind::kReduceScatter:
      case CollKind::kAllToAll:
        return a_.count * n_;
      case CollKind::kBarrier:
        return 0;
      default:
        return a_.count;
    }
  }
  uint64_t OutSize() const {
    switch (a_.kind) {
      case CollKind::kAllGather:
      case CollKind::kAllToAll:
        return a_.count * n_;
      case CollKind::kBarrier:
        return 0;
      default:
        return a_.count;
    }
  }

  Status SetUpMemory(int r) {
    const uint64_t in = InSize(), out = OutSize(), cnt = a_.count;
    if (in > UINT32_MAX || out > UINT32_MAX || sched_[r].scratch_count > (uint64_t{1} << 32))
      return InvalidArgument(prefix_ + "buffers too large for the verifier");
    View& send = views_[r][kSendBuf];
    View& recv = views_[r][kRecvBuf];
    View& scr = views_[r][kScratchBuf];
    const bool root = r == a_.root;
    const bool in_place = a_.in_place && a_.kind != CollKind::kBarrier;
    uint64_t input_base = 0;  // where this rank's input sits in its memory
    uint64_t total = 0;
    if (!in_place) {
      send = {true, false, 0, in};
      recv = {true, true, in, out};
      total = in + out;
      input_base = 0;
    } else if (a_.kind == CollKind::kAllGather) {
      recv = {true, true, 0, out};
      send = {false, false, static_cast<uint64_t>(r) * cnt, cnt};  // must be read through recvbuf
      total = out;
      input_base = static_cast<uint64_t>(r) * cnt;
    } else if (a_.kind == CollKind::kReduceScatter) {
      send = {true, false, 0, in};
      recv = {true, true, static_cast<uint64_t>(r) * cnt, cnt};
      total = in;
    } else {  // all-reduce, broadcast, reduce: one buffer
      send = {true, false, 0, cnt};
      recv = {true, true, 0, cnt};
      total = cnt;
    }
    if (a_.kind == CollKind::kReduce && !root) recv.writable = false;  // written on the root only
    if (a_.kind == CollKind::kBroadcast && !root && !in_place) send.exists = false;  // root only
    scr = {true, true, total, sched_[r].scratch_count};
    total += sched_[r].scratch_count;
    mem_.emplace_back(total);
    const bool has_input = !(a_.kind == CollKind::kBroadcast && !root);
    if (has_input) {
      for (uint64_t i = 0; i < in; ++i) {
        Sym& s = mem_[r][input_base + i];
        s = {uint64_t{1} << r, LeafTree(r), static_cast<uint32_t>(i), 1};
      }
    }
    if (track_channels_) {
      wch_.emplace_back(total, int16_t{-1});
      rch_.emplace_back(total, int16_t{-1});
      rmulti_.emplace_back(total, uint8_t{0});
    }
    return Status::Ok();
  }

  // "recvbuf[12]" for a physical offset of rank r's memory.
  std::string Where(int r, uint64_t phys) const {
    static const char* const kNames[] = {"sendbuf", "recvbuf", "scratch"};
    for (uint16_t b : {kRecvBuf, kSendBuf, kScratchBuf}) {
      const View& v = views_[r][b];
      if (phys >= v.base && phys < v.base + v.size)
        return std::string(kNames[b]) + "[" + std::to_string(phys - v.base) + "]";
    }
    return "offset " + std::to_string(phys);
  }

  // ---------------------------------------------------------------- errors
  std::string OpName(const StepOp& op) const {
    std::string s = StepOpKindName(op.kind);
    if (op.kind == StepOpKind::kSend) s += " to rank " + std::to_string(op.peer);
    if (IsRecvKind(op.kind)) s += " from rank " + std::to_string(op.peer);
    const uint64_t cnt = op.kind == StepOpKind::kSend ? op.src.count : op.dst.count;
    return s + ", " + std::to_string(cnt) + " elements";
  }
  std::string At(int r, int step, int op) const {
    std::string s = "rank " + std::to_string(r) + " channel " + std::to_string(c_) + " step " +
                    std::to_string(step);
    if (op >= 0)
      s += " op " + std::to_string(op) + " (" + OpName(sched_[r].channels[c_].steps[step].ops[op]) +
           ")";
    return s;
  }
  Status Fail(int r, int op, const std::string& msg) const {
    return InternalError(prefix_ + At(r, si_[r], op) + ": " + msg);
  }

  // ---------------------------------------------------------------- ops
  Result<uint64_t> Resolve(int r, int op, const Slice& s, bool write) const {
    if (s.buffer > kScratchBuf)
      return Fail(
          r, op,
          "refers to buffer slot " + std::to_string(s.buffer) + ", which collectives do not have");
    static const char* const kNames[] = {"sendbuf", "recvbuf", "scratch"};
    const View& v = views_[r][s.buffer];
    if (!v.exists)
      return Fail(r, op,
                  std::string("references ") + kNames[s.buffer] + ", which this rank may not use " +
                      (a_.in_place && a_.kind == CollKind::kAllGather
                           ? "(in-place all-gather: the input is recvbuf's own block)"
                           : "(broadcast reads sendbuf on the root only)"));
    if (write && !v.writable)
      return Fail(r, op,
                  std::string("writes ") + kNames[s.buffer] + ", which is " +
                      (s.buffer == kSendBuf ? "the read-only input" : "written on the root only"));
    if (s.offset > v.size || s.count > v.size - s.offset)
      return Fail(r, op,
                  std::string("slice [") + std::to_string(s.offset) + ", " +
                      std::to_string(s.offset + s.count) + ") of " + kNames[s.buffer] +
                      " is out of bounds (size " + std::to_string(v.size) + ")");
    return v.base + s.offset;
  }

  // The per-element checks are inline with an out-of-line error path: they run for every
  // element moved, the messages almost never.
  Status UnwrittenError(int r, int op, uint64_t phys) const {
    return Fail(r, op, "reads " + Where(r, phys) + ", which nothing has written");
  }

  Status CombineError(int r, int op, uint64_t phys, const Sym& a, const Sym& b) const {
    if (a.elem != b.elem)
      return Fail(r, op,
                  "combines input element " + std::to_string(a.elem) + " with element " +
                      std::to_string(b.elem) + " at " + Where(r, phys) + " (misaligned slices)");
    return Fail(r, op,
                "double contribution at " + Where(r, phys) + ": ranks " +
                    RankList(a.mask & b.mask) + " of element " + std::to_string(a.elem) +
                    " would be counted twice");
  }

  static bool Combinable(const Sym& a, const Sym& b) {
    return a.elem == b.elem && !(a.mask & b.mask);
  }
  static Sym Combined(const Sym& a, const Sym& b) {
    return {a.mask | b.mask, CombineTree(a.tree, b.tree), a.elem, 1};
  }

  // Records channel c_'s access to [lo, lo+n) of rank r; any overlap of one channel's write with
  // another channel's access is a race, since channels never synchronise.
  Status Access(int r, int op, uint64_t lo, uint64_t n, bool write) {
    if (!track_channels_) return Status::Ok();
    const int16_t c = static_cast<int16_t>(c_);
    for (uint64_t i = lo; i < lo + n; ++i) {
      int16_t& w = wch_[r][i];
      int16_t& rd = rch_[r][i];
      uint8_t& multi = rmulti_[r][i];
      int other = -1;
      if (w != -1 && w != c) other = w;
      if (write && rd != -1 && (rd != c || multi)) other = rd != c ? rd : -2;
      if (other != -1)
        return Fail(r, op,
                    (write ? "writes " : "reads ") + Where(r, i) + ", which channel " +
                        (other >= 0 ? std::to_string(other) : std::string("another")) +
                        " also uses: channels run concurrently, so this is a race");
      if (write) {
        w = c;
      } else if (rd == -1) {
        rd = c;
      } else if (rd != c) {
        multi = 1;
      }
    }
    return Status::Ok();
  }

  // Two ops of one step are ordered only when both transfer with the same peer in the same
  // direction (the engine performs those in list order).
  static bool Ordered(const ROp& x, const ROp& y) {
    return IsTransfer(x.kind) && IsTransfer(y.kind) && x.peer == y.peer &&
           IsRecvKind(x.kind) == IsRecvKind(y.kind);
  }

  Status CheckStepRaces(int r) {
    std::vector<Iv>& iv = iv_;
    iv.clear();
    const auto& cur = cur_[r];
    for (uint32_t i = 0; i < cur.size(); ++i) {
      const ROp& o = cur[i];
      if (o.count == 0) continue;
      switch (o.kind) {
        case StepOpKind::kSend:
          iv.push_back({o.src, o.src + o.count, i, false});
          break;
        case StepOpKind::kRecv:
          iv.push_back({o.dst, o.dst + o.count, i, true});
          break;
        case StepOpKind::kRecvReduce:
        case StepOpKind::kCopy:
        case StepOpKind::kReduce:
          iv.push_back({o.src, o.src + o.count, i, o.kind == StepOpKind::kReduce});
          if (o.src != o.dst) iv.push_back({o.dst, o.dst + o.count, i, true});
          break;
      }
    }
    if (iv.size() < 2) return Status::Ok();
    std::sort(iv.begin(), iv.end(), [](const Iv& x, const Iv& y) { return x.lo < y.lo; });
    std::vector<Iv>& active = active_;
    active.clear();
    for (const Iv& x : iv) {
      std::erase_if(active, [&](const Iv& y) { return y.hi <= x.lo; });
      for (const Iv& y : active) {
        if (!(x.write || y.write) || x.op == y.op || Ordered(cur[x.op], cur[y.op])) continue;
        const uint32_t first = std::min(x.op, y.op), second = std::max(x.op, y.op);
        return Fail(r, static_cast<int>(second),
                    "overlaps op " + std::to_string(first) + " (" +
                        OpName(sched_[r].channels[c_].steps[si_[r]].ops[first]) + ") at " +
                        Where(r, x.lo) +
                        " with a write; ops of one step run concurrently, so this is a race");
      }
      active.push_back(x);
    }
    return Status::Ok();
  }

  Status Post(int r) {
    const Step& st = sched_[r].channels[c_].steps[si_[r]];
    auto& cur = cur_[r];
    cur.clear();
    for (uint32_t i = 0; i < st.ops.size(); ++i) {
      const StepOp& op = st.ops[i];
      const int oi = static_cast<int>(i);
      ROp ro;
      ro.kind = op.kind;
      ro.peer = op.peer;
      if (IsTransfer(op.kind) && (op.peer < 0 || op.peer >= n_))
        return Fail(r, oi, "peer " + std::to_string(op.peer) + " is not a rank");
      switch (op.kind) {
        case StepOpKind::kSend: {
          BRAID_ASSIGN_OR_RETURN(ro.src, Resolve(r, oi, op.src, false));
          ro.count = op.src.count;
          break;
        }
        case StepOpKind::kRecv: {
          BRAID_ASSIGN_OR_RETURN(ro.dst, Resolve(r, oi, op.dst, true));
          ro.count = op.dst.count;
          break;
        }
        case StepOpKind::kRecvReduce:
        case StepOpKind::kCopy:
        case StepOpKind::kReduce: {
          BRAID_ASSIGN_OR_RETURN(ro.src, Resolve(r, oi, op.src, false));
          BRAID_ASSIGN_OR_RETURN(ro.dst, Resolve(r, oi, op.dst, true));
          if (op.src.count != op.dst.count)
            return Fail(r, oi,
                        "src has " + std::to_string(op.src.count) + " elements but dst has " +
                            std::to_string(op.dst.count));
          ro.count = op.dst.count;
          const bool overlap = ro.src < ro.dst + ro.count && ro.dst < ro.src + ro.count;
          if (overlap && (ro.src != ro.dst || op.kind == StepOpKind::kReduce) && ro.count > 0)
            return Fail(
                r, oi,
                "src and dst overlap" +
                    std::string(op.kind == StepOpKind::kReduce ? "" : " without being identical"));
          break;
        }
        default:
          return Fail(r, oi, "unknown op kind " + std::to_string(static_cast<int>(op.kind)));
      }
      cur.push_back(ro);
    }
    BRAID_RETURN_IF_ERROR(CheckStepRaces(r));
    for (uint32_t i = 0; i < cur.size(); ++i) {
      const ROp& o = cur[i];
      const int oi = static_cast<int>(i);
      if (o.kind != StepOpKind::kRecv) BRAID_RETURN_IF_ERROR(Access(r, oi, o.src, o.count, false));
      if (o.kind == StepOpKind::kReduce)
        BRAID_RETURN_IF_ERROR(Access(r, oi, o.dst, o.count, false));
      if (o.kind != StepOpKind::kSend) BRAID_RETURN_IF_ERROR(Access(r, oi, o.dst, o.count, true));
    }
    // Local ops now (they conflict with nothing else in the step, so their timing is free).
    int transfers = 0;
    for (uint32_t i = 0; i < cur.size(); ++i) {
      ROp& o = cur[i];
      const int oi = static_cast<int>(i);
      Sym* m = mem_[r].data();
      if (o.kind == StepOpKind::kCopy) {
        for (uint64_t k = 0; k < o.count; ++k) {
          if (!m[o.src + k].valid) return UnwrittenError(r, oi, o.src + k);
          m[o.dst + k] = m[o.src + k];
        }
        o.done = true;
      } else if (o.kind == StepOpKind::kReduce) {
        for (uint64_t k = 0; k < o.count; ++k) {
          const Sym& x = m[o.src + k];
          Sym& y = m[o.dst + k];
          if (!x.valid) return UnwrittenError(r, oi, o.src + k);
          if (!y.valid) return UnwrittenError(r, oi, o.dst + k);
          if (!Combinable(x, y)) return CombineError(r, oi, o.dst + k, x, y);
          y = Combined(x, y);
        }
        o.done = true;
      } else {
        ++transfers;
      }
    }
    pending_[r] = transfers;
    if (transfers == 0) {
      done_.push_back(r);
      return Status::Ok();
    }
    for (uint32_t i = 0; i < cur.size(); ++i) {
      const ROp& o = cur[i];
      if (o.kind == StepOpKind::kSend) {
        const size_t id = static_cast<size_t>(r) * n_ + o.peer;
        Touch(id);
        streams_[id].sends.push_back({r, i});
      } else if (IsRecvKind(o.kind)) {
        const size_t id = static_cast<size_t>(o.peer) * n_ + r;
        Touch(id);
        streams_[id].recvs.push_back({r, i});
      }
    }
    for (uint32_t i = 0; i < cur.size(); ++i) {
      const ROp& o = cur[i];
      if (o.kind == StepOpKind::kSend)
        BRAID_RETURN_IF_ERROR(Match(static_cast<size_t>(r) * n_ + o.peer));
      if (IsRecvKind(o.kind)) BRAID_RETURN_IF_ERROR(Match(static_cast<size_t>(o.peer) * n_ + r));
    }
    return Status::Ok();
  }

  void Touch(size_t id) {
    Stream& s = streams_[id];
    if (s.sends.empty() && s.recvs.empty()) touched_.push_back(id);
  }

  Status Match(size_t id) {
    Stream& s = streams_[id];
    while (s.sh < s.sends.size() && s.rh < s.recvs.size()) {
      const OpRef sr = s.sends[s.sh++], rr = s.recvs[s.rh++];
      ROp& so = cur_[sr.rank][sr.op];
      ROp& ro = cur_[rr.rank][rr.op];
      if (so.count != ro.count)
        return InternalError(
            prefix_ + "count mismatch: " + At(sr.rank, si_[sr.rank], static_cast<int>(sr.op)) +
            " is matched on the FIFO stream by " +
            At(rr.rank, si_[rr.rank], static_cast<int>(rr.op)));
      const int from = sr.rank, to = rr.rank;
      const Sym* in = mem_[from].data() + so.src;
      Sym* m = mem_[to].data();
      const bool reduce = ro.kind == StepOpKind::kRecvReduce;
      for (uint64_t k = 0; k < so.count; ++k) {
        const Sym v = in[k];
        if (!v.valid) return UnwrittenError(from, static_cast<int>(sr.op), so.src + k);
        if (!reduce) {
          m[ro.dst + k] = v;
          continue;
        }
        const Sym local = m[ro.src + k];
        if (!local.valid) return UnwrittenError(to, static_cast<int>(rr.op), ro.src + k);
        if (!Combinable(local, v))
          return CombineError(to, static_cast<int>(rr.op), ro.dst + k, local, v);
        m[ro.dst + k] = Combined(local, v);
      }
      know_[to] |= know_start_[from];
      so.done = ro.done = true;
      if (--pending_[from] == 0) done_.push_back(from);
      if (--pending_[to] == 0) done_.push_back(to);
    }
    return Status::Ok();
  }

  size_t Steps(int r) const {
    return static_cast<size_t>(c_) < sched_[r].channels.size() ? sched_[r].channels[c_].steps.size()
                                                               : 0;
  }

  Status RunChannel(int c) {
    c_ = c;
    for (size_t id : touched_) streams_[id] = Stream{};
    touched_.clear();
    done_.clear();
    for (int r = 0; r < n_; ++r) {
      si_[r] = 0;
      know_[r] = know_start_[r] = uint64_t{1} << r;
    }
    for (int r = 0; r < n_; ++r)
      if (Steps(r) > 0) BRAID_RETURN_IF_ERROR(Post(r));
    while (!done_.empty()) {
      const int r = done_.back();
      done_.pop_back();
      know_start_[r] = know_[r];
      if (++si_[r] < Steps(r)) BRAID_RETURN_IF_ERROR(Post(r));
    }
    std::string stuck;
    int listed = 0;
    for (int r = 0; r < n_ && listed < 4; ++r) {
      if (si_[r] >= Steps(r)) continue;
      const auto& ops = sched_[r].channels[c_].steps[si_[r]].ops;
      for (uint32_t i = 0; i < cur_[r].size() && listed < 4; ++i) {
        if (cur_[r][i].done) continue;
        const int p = cur_[r][i].peer;
        const std::string peer_state =
            si_[p] >= Steps(p)
                ? "rank " + std::to_string(p) + " has finished its channel " + std::to_string(c) +
                      " steps"
                : "rank " + std::to_string(p) + " waits at step " + std::to_string(si_[p]);
        stuck += (listed ? "; " : "") + At(r, si_[r], static_cast<int>(i)) + " is never matched (" +
                 peer_state + ")";
        ++listed;
        (void)ops;
      }
    }
    if (listed > 0)
      return InternalError(prefix_ + "deadlock or unmatched transfer on channel " +
                           std::to_string(c) + ": " + stuck);
    for (int r = 0; r < n_; ++r) total_know_[r] |= know_[r];
    return Status::Ok();
  }

  // ---------------------------------------------------------------- final contents
  Status Expect(int r, uint64_t i, uint64_t mask, uint64_t elem) const {
    const View& v = views_[r][kRecvBuf];
    const Sym& s = mem_[r][v.base + i];
    if (!s.valid || s.mask != mask || s.elem != elem)
      return InternalError(prefix_ + "wrong result on rank " + std::to_string(r) + ": recvbuf[" +
                           std::to_string(i) + "] holds " + Describe(s) + ", expected element " +
                           std::to_string(elem) + " of ranks " + RankList(mask));
    return Status::Ok();
  }

  Status CheckFinal() const {
    const uint64_t all = n_ == 64 ? ~uint64_t{0} : (uint64_t{1} << n_) - 1;
    const uint64_t cnt = a_.count;
    switch (a_.kind) {
      case CollKind::kAllReduce:
        for (int r = 0; r < n_; ++r)
          for (uint64_t i = 0; i < cnt; ++i) BRAID_RETURN_IF_ERROR(Expect(r, i, all, i));
        for (int r = 1; r < n_; ++r)
          for (uint64_t i = 0; i < cnt; ++i)
            if (mem_[r][views_[r][kRecvBuf].base + i].tree !=
                mem_[0][views_[0][kRecvBuf].base + i].tree)
              return InternalError(prefix_ + "ranks 0 and " + std::to_string(r) +
                                   " compute recvbuf[" + std::to_string(i) +
                                   "] with different association orders: results would not be "
                                   "bitwise identical across ranks");
        break;
      case CollKind::kReduceScatter:
        for (int r = 0; r < n_; ++r)
          for (uint64_t i = 0; i < cnt; ++i) BRAID_RETURN_IF_ERROR(Expect(r, i, all, r * cnt + i));
        break;
      case CollKind::kAllGather:
        for (int r = 0; r < n_; ++r)
          for (int b = 0; b < n_; ++b)
            for (uint64_t i = 0; i < cnt; ++i)
              BRAID_RETURN_IF_ERROR(Expect(r, b * cnt + i, uint64_t{1} << b, i));
        break;
      case CollKind::kBroadcast:
        for (int r = 0; r < n_; ++r)
          for (uint64_t i = 0; i < cnt; ++i)
            BRAID_RETURN_IF_ERROR(Expect(r, i, uint64_t{1} << a_.root, i));
        break;
      case CollKind::kReduce:
        for (uint64_t i = 0; i < cnt; ++i) BRAID_RETURN_IF_ERROR(Expect(a_.root, i, all, i));
        break;
      case CollKind::kAllToAll:
        for (int q = 0; q < n_; ++q)
          for (int p = 0; p < n_; ++p)
            for (uint64_t i = 0; i < cnt; ++i)
              BRAID_RETURN_IF_ERROR(Expect(q, p * cnt + i, uint64_t{1} << p, q * cnt + i));
        break;
      case CollKind::kBarrier:
        for (int r = 0; r < n_; ++r)
          if (total_know_[r] != all)
            return InternalError(prefix_ + "rank " + std::to_string(r) +
                                 " can leave the barrier without hearing from ranks " +
                                 RankList(all & ~total_know_[r]));
        break;
      case CollKind::kSendRecv:
        break;
    }
    return Status::Ok();
  }

  const Algorithm& algo_;
  const CollArgs a_;
  const int n_;
  std::string prefix_;
  std::vector<RankSchedule> sched_;
  std::vector<std::vector<Sym>> mem_;
  std::vector<std::array<View, 3>> views_;
  bool track_channels_ = false;
  std::vector<std::vector<int16_t>> wch_, rch_;
  std::vector<std::vector<uint8_t>> rmulti_;
  int c_ = 0;  // channel being run
  std::vector<Stream> streams_;
  std::vector<size_t> touched_;
  std::vector<Iv> iv_, active_;
  std::vector<std::vector<ROp>> cur_;
  std::vector<size_t> si_;
  std::vector<int> pending_;
  std::vector<int> done_;
  std::vector<uint64_t> know_, know_start_, total_know_;
};

}  // namespace

Status VerifySchedule(const Algorithm& algo, const CollArgs& args) {
  SymbolicRun run(algo, args);
  return run.Run();
}

}  // namespace braid
