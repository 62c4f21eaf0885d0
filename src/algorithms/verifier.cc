// Symbolic execution of all ranks' schedules (see verifier.h).
//
// Model:
// - Every element of every rank's memory holds a symbol: the set of ranks whose input element
//   `elem` has been combined into it, and a canonical hash of the expression tree (commutative
//   at each node, so a+b and b+a hash alike but (a+b)+c and a+(b+c) do not). Equal hashes on all
//   ranks mean bitwise-identical results. A byte of encoded data holds (encoding, byte index);
//   the encoding remembers the symbols it was made from.
// - Lossy codecs (the block codecs): values are not checked, contributions are. A decoded
//   element keeps its contributions but gets a new tree hash that covers the codec, its block
//   size, every symbol of its block (a block's scale depends on all of them) and its position in
//   the block. So an all-reduce whose ranks mix quantized and unquantized data, or quantize with
//   other block sizes or block boundaries, fails the bitwise-identity check across ranks, while
//   ranks that fold the same encodings in the same order pass it.
// - Memory is laid out per rank with the C API's in-place aliasing, so a write through kRecvBuf
//   is seen through kSendBuf where the two overlap; every scratch buffer is memory of its own.
// - Each (rank, channel) is a thread that runs its steps in order; a step with dependency edges
//   is posted once the steps it names have completed. Which interleaving the run takes does not
//   matter: memory two channels touch, with a write among the accesses, must be ordered by the
//   edges (happens-before as vector clocks over the rank's channels, computed from the edges
//   alone), else it is a race and rejected. So the result holds for every interleaving the
//   engine may take.
// - Within a channel, a step's ops are posted together. A send completes only when matched by
//   the receive at the same position of its FIFO stream (rendezvous: the conservative choice, an
//   engine with bounded buffers behaves so), so a schedule that would need buffering to progress
//   is reported as a deadlock. Ops of one step that are not ordered (different peer or
//   direction, local ops) must not touch overlapping memory with a write among them.
#include "algorithms/verifier.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "algorithms/codec.h"

namespace braid {
namespace {

constexpr int kMaxRanks = 64;  // contributions are a 64-bit rank mask
constexpr uint8_t kValue = 1, kEncoded = 2;

struct Sym {
  uint64_t mask = 0;    // contributing ranks (point-to-point: the sender)
  uint64_t tree = 0;    // hash of the combination tree; encoded byte: its encoding's index
  uint64_t scaled = 0;  // ranks whose contribution was pre-multiplied
  uint32_t elem = 0;    // input element index; encoded byte: its index in the encoding
  uint8_t valid = 0;    // 0: never written, kValue, kEncoded
  uint8_t divided = 0;  // AVG's division applied
};

struct Encoding {
  Codec codec;
  DataType dtype;
  std::vector<Sym> syms;
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

// Everything that determines a value symbol's value.
uint64_t ValueHash(const Sym& s) {
  return Mix(s.tree ^ Mix(s.mask ^ Mix(s.scaled ^ Mix((uint64_t{s.elem} << 1) | s.divided))));
}

// Trees of the elements decoded from a lossy encoding (see the model above).
std::vector<uint64_t> LossyTrees(const Codec& codec, const std::vector<Sym>& syms) {
  std::vector<uint64_t> trees(syms.size());
  const uint64_t g = std::max<uint64_t>(codec.block, 1);
  for (uint64_t b0 = 0; b0 < syms.size(); b0 += g) {
    const uint64_t b1 = std::min<uint64_t>(syms.size(), b0 + g);
    uint64_t h = Mix(0x10551ull ^ (static_cast<uint64_t>(codec.id) << 32) ^ g);
    for (uint64_t k = b0; k < b1; ++k) h = Mix(h ^ ValueHash(syms[k]));
    for (uint64_t k = b0; k < b1; ++k) trees[k] = Mix(h + k - b0);
  }
  return trees;
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
  if (s.valid == kEncoded) return "encoded bytes";
  return "element " + std::to_string(s.elem) + " of ranks " + RankList(s.mask) +
         (s.scaled ? " (pre-multiplied: " + RankList(s.scaled) + ")" : "") +
         (s.divided ? " (divided)" : "");
}

bool IsRecvKind(StepOpKind k) {
  return k == StepOpKind::kRecv || k == StepOpKind::kRecvReduce;
}
bool IsTransfer(StepOpKind k) {
  return k == StepOpKind::kSend || IsRecvKind(k);
}
bool ReadsSrc(StepOpKind k) {
  return k != StepOpKind::kRecv && k != StepOpKind::kDivide;
}
bool WritesDst(StepOpKind k) {
  return k != StepOpKind::kSend;
}
// Ops that read their destination before writing it.
bool ReadsDst(StepOpKind k) {
  return k == StepOpKind::kReduce || k == StepOpKind::kDivide || k == StepOpKind::kDequantizeReduce;
}

struct View {
  View() = default;
  View(bool e, bool w, uint64_t b, uint64_t n, DataType t = DataType::kUint8, std::string nm = {})
      : exists(e), writable(w), base(b), size(n), dtype(t), name(std::move(nm)) {}
  bool exists = false;  // the schedule may reference this slot
  bool writable = false;
  uint64_t base = 0;
  uint64_t size = 0;
  DataType dtype = DataType::kUint8;
  std::string name;
};

struct ROp {  // an op of the current step, slices resolved to physical offsets
  StepOpKind kind;
  int peer = -1;
  uint64_t src = 0, dst = 0;
  uint64_t scount = 0, dcount = 0;
  uint16_t sbuf = 0, dbuf = 0;
  Codec codec;
  bool done = false;
};

struct Iv {  // memory an op of the current step touches
  uint64_t lo, hi;
  uint32_t op;
  bool write;
};

struct OpRef {
  int thread;
  uint32_t op;
};

struct Stream {
  std::vector<OpRef> sends, recvs;
  size_t sh = 0, rh = 0;
};

struct Thread {
  int r = 0, c = 0;
  size_t si = 0;  // current step; also the number of completed steps
  int pending = 0;
  bool finished = false, posted = false;
  uint64_t know = 0, know_start = 0;  // barrier: ranks heard from (now, at the step's start)
  std::vector<ROp> cur;
  std::vector<uint64_t> know_done;  // know at each step's completion (for edges)
};

struct WriteStamp {
  int16_t ch = -1;
  uint32_t t = 0;  // step index + 1
};

class SymbolicRun {
 public:
  SymbolicRun(const CollArgs& args, std::string name, const ScheduleSource& source,
              const std::vector<std::vector<P2PSpec>>* p2p)
      : a_(args), name_(std::move(name)), source_(source), p2p_(p2p), n_(args.nranks) {}

  Status Run() {
    if (p2p_)
      prefix_ = "verify " + name_ + " point-to-point group (N=" + std::to_string(n_) + "): ";
    else
      prefix_ = "verify " + name_ + " " + CollKindName(a_.kind) + " (N=" + std::to_string(n_) +
                ", count=" + std::to_string(a_.count) + ", " + DataTypeName(a_.dtype) + ", " +
                (a_.in_place ? "in place" : "out of place") +
                ", nchannels=" + std::to_string(a_.nchannels) +
                ", chunk=" + std::to_string(a_.chunk_bytes) + "B" +
                (a_.kind == CollKind::kBroadcast || a_.kind == CollKind::kReduce
                     ? ", root=" + std::to_string(a_.root)
                     : "") +
                (a_.premul ? ", premulsum" : "") + (a_.avg ? ", avg" : "") + "): ";
    if (n_ < 1 || n_ > kMaxRanks)
      return InvalidArgument(prefix_ + "the verifier handles 1.." + std::to_string(kMaxRanks) +
                             " ranks");
    if (!p2p_ && a_.kind == CollKind::kSendRecv)
      return InvalidArgument(prefix_ + "point-to-point groups are verified by VerifyPointToPoint");
    if (a_.kind == CollKind::kAllToAll && a_.in_place)
      return InvalidArgument(prefix_ + "all-to-all has no in-place form");
    if (p2p_) BRAID_RETURN_IF_ERROR(CheckPairing());
    sched_.reserve(n_);
    size_t max_ch = 0;
    for (int r = 0; r < n_; ++r) {
      auto s = source_(r);
      if (!s.ok()) {
        Status st = s.status();
        return st.prepend(prefix_ + "build(rank " + std::to_string(r) + "): ");
      }
      if (!p2p_ && static_cast<int>(s->channels.size()) > a_.nchannels)
        return InternalError(prefix_ + "rank " + std::to_string(r) + " uses " +
                             std::to_string(s->channels.size()) + " channels, more than nchannels");
      // Edges and cycles first: the clocks below assume an acyclic graph.
      BRAID_RETURN_IF_ERROR(CheckScheduleStructure(*s, r, n_, prefix_));
      max_ch = std::max(max_ch, s->channels.size());
      sched_.push_back(std::move(*s));
    }
    max_ch_ = max_ch;
    track_channels_ = max_ch > 1;
    views_.resize(n_);
    for (int r = 0; r < n_; ++r) BRAID_RETURN_IF_ERROR(p2p_ ? SetUpP2PMemory(r) : SetUpMemory(r));
    if (track_channels_)
      for (int r = 0; r < n_; ++r) ComputeClocks(r);
    streams_.resize(std::max<size_t>(max_ch, 1) * n_ * n_);
    total_know_.assign(n_, 0);
    for (int r = 0; r < n_; ++r) total_know_[r] = uint64_t{1} << r;
    BRAID_RETURN_IF_ERROR(RunThreads());
    return p2p_ ? CheckFinalP2P() : CheckFinal();
  }

 private:
  // ---------------------------------------------------------------- memory
  uint64_t InSize() const { return SendCount(a_); }
  uint64_t OutSize() const { return RecvCount(a_); }

  Status CheckTable(int r) const {
    const auto& b = sched_[r].buffers;
    auto bad = [&](const std::string& m) {
      return InternalError(prefix_ + "rank " + std::to_string(r) + "'s buffer table: " + m);
    };
    if (b.size() < kFirstUserBuf) return bad("fewer than the collective's three slots");
    if (b[kSendBuf].role != BufferRole::kUserSend || b[kRecvBuf].role != BufferRole::kUserRecv)
      return bad("slots 0 and 1 must be the user's send and receive buffers");
    for (size_t i = 0; i < b.size(); ++i) {
      if (i >= kScratchBuf && b[i].role != BufferRole::kScratch)
        return bad("slot " + std::to_string(i) + " must be scratch");
      if (i <= kScratchBuf && b[i].dtype != a_.dtype)
        return bad("slot " + std::to_string(i) + " is " + DataTypeName(b[i].dtype) +
                   ", the collective's type is " + DataTypeName(a_.dtype));
    }
    if (b[kSendBuf].count != InSize() || b[kRecvBuf].count != OutSize())
      return bad("user buffer sizes differ from the collective's");
    return Status::Ok();
  }

  Status SetUpMemory(int r) {
    BRAID_RETURN_IF_ERROR(CheckTable(r));
    const auto& table = sched_[r].buffers;
    const uint64_t in = InSize(), out = OutSize(), cnt = a_.count;
    uint64_t scratch_total = 0;
    for (size_t i = kScratchBuf; i < table.size(); ++i) scratch_total += table[i].count;
    if (in > UINT32_MAX || out > UINT32_MAX || scratch_total > (uint64_t{1} << 32))
      return InvalidArgument(prefix_ + "buffers too large for the verifier");
    auto& views = views_[r];
    views.resize(table.size());
    View& send = views[kSendBuf];
    View& recv = views[kRecvBuf];
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
    send.dtype = recv.dtype = a_.dtype;
    send.name = "sendbuf";
    recv.name = "recvbuf";
    for (size_t i = kScratchBuf; i < table.size(); ++i) {
      views[i] = {true,           true,
                  total,          table[i].count,
                  table[i].dtype, i == kScratchBuf ? "scratch" : "scratch" + std::to_string(i)};
      total += table[i].count;
    }
    mem_.emplace_back(total);
    const bool has_input = !(a_.kind == CollKind::kBroadcast && !root);
    if (has_input) {
      for (uint64_t i = 0; i < in; ++i) {
        Sym& s = mem_[r][input_base + i];
        s.mask = uint64_t{1} << r;
        s.tree = LeafTree(r);
        s.elem = static_cast<uint32_t>(i);
        s.valid = kValue;
      }
    }
    AllocateStamps(r, total);
    return Status::Ok();
  }

  Status SetUpP2PMemory(int r) {
    const auto& calls = (*p2p_)[r];
    const auto& table = sched_[r].buffers;
    if (table.size() != calls.size())
      return InternalError(prefix_ + "rank " + std::to_string(r) + "'s buffer table has " +
                           std::to_string(table.size()) + " slots for " +
                           std::to_string(calls.size()) + " calls");
    auto& views = views_[r];
    views.resize(table.size());
    uint64_t total = 0;
    for (size_t i = 0; i < table.size(); ++i) {
      if (table[i].role != BufferRole::kUserP2P || table[i].dtype != DataType::kUint8 ||
          table[i].count != calls[i].bytes)
        return InternalError(prefix_ + "rank " + std::to_string(r) + " slot " + std::to_string(i) +
                             " does not describe call " + std::to_string(i) + "'s buffer");
      views[i] = {true,           !calls[i].is_send, total,
                  calls[i].bytes, DataType::kUint8,  "call" + std::to_string(i)};
      total += calls[i].bytes;
    }
    if (total > (uint64_t{1} << 32))
      return InvalidArgument(prefix_ + "buffers too large for the verifier");
    mem_.emplace_back(total);
    for (size_t i = 0; i < calls.size(); ++i) {
      if (!calls[i].is_send) continue;
      for (uint64_t k = 0; k < calls[i].bytes; ++k) {
        Sym& s = mem_[r][views[i].base + k];
        s.mask = uint64_t{1} << r;
        s.tree = i;
        s.elem = static_cast<uint32_t>(k);
        s.valid = kValue;
      }
    }
    AllocateStamps(r, total);
    return Status::Ok();
  }

  void AllocateStamps(int r, uint64_t total) {
    if (!track_channels_) return;
    wst_.emplace_back(total);
    rst_.emplace_back(total * max_ch_, 0);
  }

  // "recvbuf[12]" for a physical offset of rank r's memory.
  std::string Where(int r, uint64_t phys) const {
    const auto& views = views_[r];
    std::vector<size_t> order;
    if (views.size() > kRecvBuf && !p2p_) order.push_back(kRecvBuf);
    for (size_t i = 0; i < views.size(); ++i)
      if (p2p_ || i != kRecvBuf) order.push_back(i);
    for (size_t b : order) {
      const View& v = views[b];
      if (phys >= v.base && phys < v.base + v.size)
        return v.name + "[" + std::to_string(phys - v.base) + "]";
    }
    return "offset " + std::to_string(phys);
  }

  // ---------------------------------------------------------------- clocks
  // vc(c, s)[c'] = how many steps of channel c' happen before or at step s of channel c, through
  // the channel order and the dependency edges (acyclic: checked before).
  void ComputeClocks(int r) {
    const auto& chs = sched_[r].channels;
    const size_t nch = max_ch_;
    auto& offs = vc_off_.emplace_back(chs.size() + 1, 0);
    for (size_t c = 0; c < chs.size(); ++c) offs[c + 1] = offs[c] + chs[c].steps.size();
    auto& vc = vc_.emplace_back(offs.back() * nch, 0);
    std::vector<size_t> done(chs.size(), 0);
    for (bool progress = true; progress;) {
      progress = false;
      for (size_t c = 0; c < chs.size(); ++c) {
        const auto& steps = chs[c].steps;
        while (done[c] < steps.size() &&
               std::all_of(steps[done[c]].deps.begin(), steps[done[c]].deps.end(),
                           [&](const StepRef& d) { return done[d.channel] > d.step; })) {
          const size_t s = done[c];
          uint32_t* v = &vc[(offs[c] + s) * nch];
          if (s > 0) std::copy_n(&vc[(offs[c] + s - 1) * nch], nch, v);
          for (const StepRef& d : steps[s].deps) {
            const uint32_t* dv = &vc[(offs[d.channel] + d.step) * nch];
            for (size_t k = 0; k < nch; ++k) v[k] = std::max(v[k], dv[k]);
          }
          v[c] = static_cast<uint32_t>(s + 1);
          ++done[c];
          progress = true;
        }
      }
    }
  }

  const uint32_t* ClockOf(const Thread& th) const {
    return &vc_[th.r][(vc_off_[th.r][th.c] + th.si) * max_ch_];
  }

  // ---------------------------------------------------------------- errors
  std::string OpName(const StepOp& op) const {
    std::string s = StepOpKindName(op.kind);
    if (op.kind == StepOpKind::kSend) s += " to rank " + std::to_string(op.peer);
    if (IsRecvKind(op.kind)) s += " from rank " + std::to_string(op.peer);
    const uint64_t cnt = op.kind == StepOpKind::kSend ? op.src.count : op.dst.count;
    return s + ", " + std::to_string(cnt) + " elements";
  }
  std::string At(const Thread& th, int op) const {
    std::string s = "rank " + std::to_string(th.r) + " channel " + std::to_string(th.c) + " step " +
                    std::to_string(th.si);
    if (op >= 0)
      s += " op " + std::to_string(op) + " (" +
           OpName(sched_[th.r].channels[th.c].steps[th.si].ops[op]) + ")";
    return s;
  }
  Status Fail(const Thread& th, int op, const std::string& msg) const {
    return InternalError(prefix_ + At(th, op) + ": " + msg);
  }

  // ---------------------------------------------------------------- ops
  Result<uint64_t> Resolve(const Thread& th, int op, const Slice& s, bool write) const {
    const auto& views = views_[th.r];
    if (s.buffer >= views.size())
      return Fail(th, op,
                  "refers to buffer slot " + std::to_string(s.buffer) + ", which the table lacks");
    const View& v = views[s.buffer];
    if (!v.exists)
      return Fail(th, op,
                  "references " + v.name + ", which this rank may not use " +
                      (a_.in_place && a_.kind == CollKind::kAllGather
                           ? "(in-place all-gather: the input is recvbuf's own block)"
                           : "(broadcast reads sendbuf on the root only)"));
    if (write && !v.writable)
      return Fail(th, op,
                  "writes " + v.name + ", which is " +
                      (p2p_                   ? std::string("a send buffer")
                       : s.buffer == kSendBuf ? std::string("the read-only input")
                                              : std::string("written on the root only")));
    if (s.offset > v.size || s.count > v.size - s.offset)
      return Fail(th, op,
                  "slice [" + std::to_string(s.offset) + ", " + std::to_string(s.offset + s.count) +
                      ") of " + v.name + " is out of bounds (size " + std::to_string(v.size) + ")");
    return v.base + s.offset;
  }

  Status UnwrittenError(const Thread& th, int op, uint64_t phys) const {
    return Fail(th, op, "reads " + Where(th.r, phys) + ", which nothing has written");
  }

  Status CombineError(const Thread& th, int op, uint64_t phys, const Sym& a, const Sym& b) const {
    if (a.valid == kEncoded || b.valid == kEncoded)
      return Fail(th, op,
                  "combines encoded bytes at " + Where(th.r, phys) +
                      " as if they were values (decode them first)");
    if (a.divided || b.divided)
      return Fail(th, op, "combines an already divided (AVG) value at " + Where(th.r, phys));
    if (a.elem != b.elem)
      return Fail(th, op,
                  "combines input element " + std::to_string(a.elem) + " with element " +
                      std::to_string(b.elem) + " at " + Where(th.r, phys) + " (misaligned slices)");
    return Fail(th, op,
                "double contribution at " + Where(th.r, phys) + ": ranks " +
                    RankList(a.mask & b.mask) + " of element " + std::to_string(a.elem) +
                    " would be counted twice");
  }

  static bool Combinable(const Sym& a, const Sym& b) {
    return a.valid == kValue && b.valid == kValue && a.elem == b.elem && !(a.mask & b.mask) &&
           !a.divided && !b.divided;
  }
  static Sym Combined(const Sym& a, const Sym& b) {
    Sym s;
    s.mask = a.mask | b.mask;
    s.tree = CombineTree(a.tree, b.tree);
    s.scaled = a.scaled | b.scaled;
    s.elem = a.elem;
    s.valid = kValue;
    return s;
  }

  // Records the access of thread `th` (at its current step) to [lo, lo+n) of its rank's memory;
  // an access of another channel not ordered with it by the edges, with a write among the two,
  // is a race.
  Status Access(const Thread& th, int op, uint64_t lo, uint64_t n, bool write) {
    if (!track_channels_) return Status::Ok();
    const uint32_t* vc = ClockOf(th);
    const size_t nch = max_ch_;
    const auto c = static_cast<int16_t>(th.c);
    const auto t = static_cast<uint32_t>(th.si + 1);
    auto& wst = wst_[th.r];
    auto& rst = rst_[th.r];
    for (uint64_t i = lo; i < lo + n; ++i) {
      int other = -1;
      const WriteStamp& w = wst[i];
      if (w.ch >= 0 && w.ch != c && vc[w.ch] < w.t) other = w.ch;
      if (write)
        for (size_t k = 0; k < nch && other < 0; ++k)
          if (static_cast<int>(k) != c && rst[i * nch + k] > vc[k]) other = static_cast<int>(k);
      if (other >= 0)
        return Fail(th, op,
                    (write ? "writes " : "reads ") + Where(th.r, i) + ", which channel " +
                        std::to_string(other) +
                        " also uses with no dependency edge ordering the two: channels run "
                        "concurrently, so this is a race");
      if (write)
        wst[i] = {c, t};
      else
        rst[i * nch + th.c] = t;
    }
    return Status::Ok();
  }

  // Two ops of one step are ordered only when both transfer with the same peer in the same
  // direction (the engine performs those in list order).
  static bool Ordered(const ROp& x, const ROp& y) {
    return IsTransfer(x.kind) && IsTransfer(y.kind) && x.peer == y.peer &&
           IsRecvKind(x.kind) == IsRecvKind(y.kind);
  }

  Status CheckStepRaces(const Thread& th) {
    std::vector<Iv>& iv = iv_;
    iv.clear();
    const auto& cur = th.cur;
    for (uint32_t i = 0; i < cur.size(); ++i) {
      const ROp& o = cur[i];
      if (ReadsSrc(o.kind) && o.scount) iv.push_back({o.src, o.src + o.scount, i, false});
      if (WritesDst(o.kind) && o.dcount) {
        const bool same = ReadsSrc(o.kind) && o.src == o.dst;
        if (!same || o.kind == StepOpKind::kRecvReduce)
          iv.push_back({o.dst, o.dst + o.dcount, i, true});
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
        return Fail(th, static_cast<int>(second),
                    "overlaps op " + std::to_string(first) + " (" +
                        OpName(sched_[th.r].channels[th.c].steps[th.si].ops[first]) + ") at " +
                        Where(th.r, x.lo) +
                        " with a write; ops of one step run concurrently, so this is a race");
      }
      active.push_back(x);
    }
    return Status::Ok();
  }

  DataType TypeOf(int r, uint16_t buf) const { return views_[r][buf].dtype; }

  Status RunLocal(Thread& th, uint32_t i) {
    ROp& o = th.cur[i];
    const int oi = static_cast<int>(i);
    Sym* m = mem_[th.r].data();
    switch (o.kind) {
      case StepOpKind::kCopy:
        for (uint64_t k = 0; k < o.scount; ++k) {
          if (!m[o.src + k].valid) return UnwrittenError(th, oi, o.src + k);
          m[o.dst + k] = m[o.src + k];
        }
        break;
      case StepOpKind::kReduce:
        for (uint64_t k = 0; k < o.scount; ++k) {
          const Sym& x = m[o.src + k];
          Sym& y = m[o.dst + k];
          if (!x.valid) return UnwrittenError(th, oi, o.src + k);
          if (!y.valid) return UnwrittenError(th, oi, o.dst + k);
          if (!Combinable(x, y)) return CombineError(th, oi, o.dst + k, x, y);
          y = Combined(x, y);
        }
        break;
      case StepOpKind::kScale:
        if (!a_.premul)
          return Fail(th, oi, "scales data, but the call is not a pre-multiplied sum");
        for (uint64_t k = 0; k < o.scount; ++k) {
          Sym x = m[o.src + k];
          if (!x.valid) return UnwrittenError(th, oi, o.src + k);
          if (x.valid != kValue) return CombineError(th, oi, o.src + k, x, x);
          if (x.scaled & x.mask)
            return Fail(th, oi,
                        "pre-multiplies " + Where(th.r, o.src + k) + " twice (ranks " +
                            RankList(x.scaled & x.mask) + ")");
          x.scaled |= x.mask;
          x.tree = Mix(x.tree ^ 0x5ca1edull);
          m[o.dst + k] = x;
        }
        break;
      case StepOpKind::kDivide: {
        if (!a_.avg) return Fail(th, oi, "divides data, but the call is not an AVG");
        const uint64_t all = n_ == 64 ? ~uint64_t{0} : (uint64_t{1} << n_) - 1;
        for (uint64_t k = 0; k < o.dcount; ++k) {
          Sym& y = m[o.dst + k];
          if (!y.valid) return UnwrittenError(th, oi, o.dst + k);
          if (y.valid != kValue) return CombineError(th, oi, o.dst + k, y, y);
          if (y.divided) return Fail(th, oi, "divides " + Where(th.r, o.dst + k) + " twice");
          if (y.mask != all)
            return Fail(th, oi,
                        "divides " + Where(th.r, o.dst + k) +
                            " before the sum is complete: it holds " + Describe(y));
          y.divided = 1;
          y.tree = Mix(y.tree ^ 0xd1b1dull);
        }
        break;
      }
      case StepOpKind::kQuantize: {
        Encoding e{o.codec, TypeOf(th.r, o.sbuf), {}};
        e.syms.reserve(o.scount);
        for (uint64_t k = 0; k < o.scount; ++k) {
          const Sym& x = m[o.src + k];
          if (!x.valid) return UnwrittenError(th, oi, o.src + k);
          if (x.valid != kValue)
            return Fail(th, oi, "encodes " + Where(th.r, o.src + k) + ", which is encoded already");
          e.syms.push_back(x);
        }
        const uint64_t id = encodings_.size();
        encodings_.push_back(std::move(e));
        for (uint64_t k = 0; k < o.dcount; ++k) {
          Sym s;
          s.tree = id;
          s.elem = static_cast<uint32_t>(k);
          s.valid = kEncoded;
          m[o.dst + k] = s;
        }
        break;
      }
      case StepOpKind::kDequantize:
      case StepOpKind::kDequantizeReduce: {
        // The source must be exactly one whole encoding, of this codec and type, byte for byte.
        const Sym& first = m[o.src];
        if (o.scount == 0) break;
        if (!first.valid) return UnwrittenError(th, oi, o.src);
        bool whole = first.valid == kEncoded && first.elem == 0;
        for (uint64_t k = 1; whole && k < o.scount; ++k) {
          const Sym& b = m[o.src + k];
          whole = b.valid == kEncoded && b.tree == first.tree && b.elem == k;
        }
        const Encoding* e = whole ? &encodings_[first.tree] : nullptr;
        if (!whole || EncodedBytes(e->codec, e->dtype, e->syms.size()) != o.scount)
          return Fail(th, oi,
                      "decodes " + Where(th.r, o.src) + ".." + Where(th.r, o.src + o.scount - 1) +
                          ", which is not one whole encoding");
        // A block codec's encoding does not depend on the input type (quant/block_format.h): it
        // may be decoded into any type the codec supports (qgz decodes bf16 inputs into fp32
        // sums). The test codec's frame names its type, which must match.
        const DataType into = TypeOf(th.r, o.dbuf);
        const bool type_ok =
            BlockFormatOf(o.codec) ? CodecSupports(o.codec, into) : e->dtype == into;
        if (e->codec != o.codec || !type_ok || e->syms.size() != o.dcount)
          return Fail(th, oi,
                      std::string("decodes with codec ") + CodecName(o.codec) + " into " +
                          std::to_string(o.dcount) + " " + DataTypeName(TypeOf(th.r, o.dbuf)) +
                          " an encoding made by " + CodecName(e->codec) + " of " +
                          std::to_string(e->syms.size()) + " " + DataTypeName(e->dtype));
        const bool lossy = CodecIsLossy(e->codec);
        const std::vector<uint64_t> trees =
            lossy ? LossyTrees(e->codec, e->syms) : std::vector<uint64_t>{};
        for (uint64_t k = 0; k < o.dcount; ++k) {
          Sym& y = m[o.dst + k];
          Sym x = e->syms[k];
          if (lossy) x.tree = trees[k];
          if (o.kind == StepOpKind::kDequantize) {
            y = x;
            continue;
          }
          if (!y.valid) return UnwrittenError(th, oi, o.dst + k);
          if (!Combinable(y, x)) return CombineError(th, oi, o.dst + k, y, x);
          y = Combined(y, x);
        }
        break;
      }
      default:
        return Fail(th, oi, "is not a local op");
    }
    o.done = true;
    return Status::Ok();
  }

  Status Post(int t) {
    Thread& th = threads_[t];
    const Step& st = sched_[th.r].channels[th.c].steps[th.si];
    auto& cur = th.cur;
    cur.clear();
    th.posted = true;
    for (uint32_t i = 0; i < st.ops.size(); ++i) {
      const StepOp& op = st.ops[i];
      const int oi = static_cast<int>(i);
      ROp ro;
      ro.kind = op.kind;
      ro.peer = op.peer;
      ro.codec = op.codec;
      if (ReadsSrc(op.kind)) {
        BRAID_ASSIGN_OR_RETURN(ro.src, Resolve(th, oi, op.src, false));
        ro.scount = op.src.count;
        ro.sbuf = op.src.buffer;
      }
      if (WritesDst(op.kind)) {
        BRAID_ASSIGN_OR_RETURN(ro.dst, Resolve(th, oi, op.dst, true));
        ro.dcount = op.dst.count;
        ro.dbuf = op.dst.buffer;
      }
      const bool same_type = !(ReadsSrc(op.kind) && WritesDst(op.kind)) ||
                             TypeOf(th.r, ro.sbuf) == TypeOf(th.r, ro.dbuf);
      switch (op.kind) {
        case StepOpKind::kRecvReduce:
        case StepOpKind::kCopy:
        case StepOpKind::kReduce:
        case StepOpKind::kScale: {
          if (ro.scount != ro.dcount || !same_type)
            return Fail(th, oi,
                        "src has " + std::to_string(ro.scount) + " elements but dst has " +
                            std::to_string(ro.dcount) + (same_type ? "" : " of another type"));
          const bool overlap = ro.src < ro.dst + ro.dcount && ro.dst < ro.src + ro.scount;
          if (overlap && (ro.src != ro.dst || op.kind == StepOpKind::kReduce) && ro.dcount > 0)
            return Fail(
                th, oi,
                "src and dst overlap" +
                    std::string(op.kind == StepOpKind::kReduce ? "" : " without being identical"));
          break;
        }
        case StepOpKind::kQuantize:
        case StepOpKind::kDequantize:
        case StepOpKind::kDequantizeReduce: {
          const bool overlap = ro.src < ro.dst + ro.dcount && ro.dst < ro.src + ro.scount;
          if (overlap && ro.dcount > 0 && ro.scount > 0) return Fail(th, oi, "src and dst overlap");
          break;
        }
        default:
          break;
      }
      cur.push_back(ro);
    }
    BRAID_RETURN_IF_ERROR(CheckStepRaces(th));
    for (uint32_t i = 0; i < cur.size(); ++i) {
      const ROp& o = cur[i];
      const int oi = static_cast<int>(i);
      if (ReadsSrc(o.kind)) BRAID_RETURN_IF_ERROR(Access(th, oi, o.src, o.scount, false));
      if (ReadsDst(o.kind)) BRAID_RETURN_IF_ERROR(Access(th, oi, o.dst, o.dcount, false));
      if (WritesDst(o.kind)) BRAID_RETURN_IF_ERROR(Access(th, oi, o.dst, o.dcount, true));
    }
    // Local ops now (they conflict with nothing else in the step, so their timing is free).
    int transfers = 0;
    for (uint32_t i = 0; i < cur.size(); ++i) {
      if (IsTransfer(cur[i].kind))
        ++transfers;
      else
        BRAID_RETURN_IF_ERROR(RunLocal(th, i));
    }
    th.pending = transfers;
    if (transfers == 0) {
      done_.push_back(t);
      return Status::Ok();
    }
    for (uint32_t i = 0; i < cur.size(); ++i) {
      const ROp& o = cur[i];
      if (o.kind == StepOpKind::kSend)
        streams_[StreamId(th.c, th.r, o.peer)].sends.push_back({t, i});
      else if (IsRecvKind(o.kind))
        streams_[StreamId(th.c, o.peer, th.r)].recvs.push_back({t, i});
    }
    for (uint32_t i = 0; i < cur.size(); ++i) {
      const ROp& o = cur[i];
      if (o.kind == StepOpKind::kSend) BRAID_RETURN_IF_ERROR(Match(StreamId(th.c, th.r, o.peer)));
      if (IsRecvKind(o.kind)) BRAID_RETURN_IF_ERROR(Match(StreamId(th.c, o.peer, th.r)));
    }
    return Status::Ok();
  }

  size_t StreamId(int c, int from, int to) const {
    return (static_cast<size_t>(c) * n_ + from) * n_ + to;
  }

  Status Match(size_t id) {
    Stream& s = streams_[id];
    while (s.sh < s.sends.size() && s.rh < s.recvs.size()) {
      const OpRef sr = s.sends[s.sh++], rr = s.recvs[s.rh++];
      Thread& sth = threads_[sr.thread];
      Thread& rth = threads_[rr.thread];
      ROp& so = sth.cur[sr.op];
      ROp& ro = rth.cur[rr.op];
      const DataType st = TypeOf(sth.r, so.sbuf), rt = TypeOf(rth.r, ro.dbuf);
      if (so.scount != ro.dcount || st != rt)
        return InternalError(prefix_ + (so.scount != ro.dcount ? "count" : "type") +
                             " mismatch: " + At(sth, static_cast<int>(sr.op)) + " of " +
                             DataTypeName(st) + " is matched on the FIFO stream by " +
                             At(rth, static_cast<int>(rr.op)) + " of " + DataTypeName(rt));
      const Sym* in = mem_[sth.r].data() + so.src;
      Sym* m = mem_[rth.r].data();
      const bool reduce = ro.kind == StepOpKind::kRecvReduce;
      for (uint64_t k = 0; k < so.scount; ++k) {
        const Sym v = in[k];
        if (!v.valid) return UnwrittenError(sth, static_cast<int>(sr.op), so.src + k);
        if (!reduce) {
          m[ro.dst + k] = v;
          continue;
        }
        const Sym local = m[ro.src + k];
        if (!local.valid) return UnwrittenError(rth, static_cast<int>(rr.op), ro.src + k);
        if (!Combinable(local, v))
          return CombineError(rth, static_cast<int>(rr.op), ro.dst + k, local, v);
        m[ro.dst + k] = Combined(local, v);
      }
      rth.know |= sth.know_start;
      so.done = ro.done = true;
      if (--sth.pending == 0) done_.push_back(sr.thread);
      if (--rth.pending == 0) done_.push_back(rr.thread);
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

  size_t Steps(const Thread& th) const { return sched_[th.r].channels[th.c].steps.size(); }
  Thread& ThreadOf(int r, int c) { return threads_[base_[r] + c]; }

  // Posts the thread's current step if its edges allow, else parks it on its rank's wait list.
  Status TryPost(int t) {
    Thread& th = threads_[t];
    if (th.si >= Steps(th)) {
      th.finished = true;
      total_know_[th.r] |= th.know;
      return Status::Ok();
    }
    const Step& st = sched_[th.r].channels[th.c].steps[th.si];
    for (const StepRef& d : st.deps)
      if (ThreadOf(th.r, d.channel).si <= d.step) {
        waiting_[th.r].push_back(t);
        return Status::Ok();
      }
    for (const StepRef& d : st.deps) th.know |= ThreadOf(th.r, d.channel).know_done[d.step];
    th.know_start = th.know;
    return Post(t);
  }

  Status RunThreads() {
    base_.assign(n_, 0);
    for (int r = 0; r < n_; ++r) {
      base_[r] = static_cast<int>(threads_.size());
      for (size_t c = 0; c < sched_[r].channels.size(); ++c) {
        Thread th;
        th.r = r;
        th.c = static_cast<int>(c);
        th.know = uint64_t{1} << r;
        th.know_done.assign(sched_[r].channels[c].steps.size(), 0);
        threads_.push_back(std::move(th));
      }
    }
    waiting_.resize(n_);
    for (int t = 0; t < static_cast<int>(threads_.size()); ++t) BRAID_RETURN_IF_ERROR(TryPost(t));
    while (!done_.empty()) {
      const int t = done_.back();
      done_.pop_back();
      Thread& th = threads_[t];
      th.know_done[th.si] = th.know;
      th.posted = false;
      ++th.si;
      BRAID_RETURN_IF_ERROR(TryPost(t));
      if (!waiting_[th.r].empty()) {
        std::vector<int> parked;
        parked.swap(waiting_[th.r]);
        for (int w : parked) BRAID_RETURN_IF_ERROR(TryPost(w));
      }
    }
    std::string stuck;
    int listed = 0;
    for (const Thread& th : threads_) {
      if (th.finished || listed >= 4) continue;
      if (!th.posted) {
        for (const StepRef& d : sched_[th.r].channels[th.c].steps[th.si].deps)
          if (threads_[base_[th.r] + d.channel].si <= d.step) {
            stuck += (listed ? "; " : "") + At(th, -1) + " waits on channel " +
                     std::to_string(d.channel) + " step " + std::to_string(d.step) +
                     ", which never completes";
            ++listed;
            break;
          }
        continue;
      }
      for (uint32_t i = 0; i < th.cur.size() && listed < 4; ++i) {
        if (th.cur[i].done) continue;
        const int p = th.cur[i].peer;
        std::string peer_state;
        if (th.c >= static_cast<int>(sched_[p].channels.size())) {
          peer_state = "rank " + std::to_string(p) + " has no channel " + std::to_string(th.c);
        } else {
          const Thread& pt = threads_[base_[p] + th.c];
          peer_state =
              pt.finished ? "rank " + std::to_string(p) + " has finished its channel " +
                                std::to_string(th.c) + " steps"
                          : "rank " + std::to_string(p) + " waits at step " + std::to_string(pt.si);
        }
        stuck += (listed ? "; " : "") + At(th, static_cast<int>(i)) + " is never matched (" +
                 peer_state + ")";
        ++listed;
      }
    }
    if (listed > 0) return InternalError(prefix_ + "deadlock or unmatched transfer: " + stuck);
    return Status::Ok();
  }

  // ---------------------------------------------------------------- final contents
  Status Expect(int r, uint64_t i, uint64_t mask, uint64_t elem, bool reduction) const {
    const View& v = views_[r][kRecvBuf];
    const Sym& s = mem_[r][v.base + i];
    const bool scaled_ok = !reduction || (a_.premul ? s.scaled == mask : s.scaled == 0);
    const bool divided_ok = !reduction || (s.divided != 0) == a_.avg;
    if (s.valid != kValue || s.mask != mask || s.elem != elem || !scaled_ok || !divided_ok)
      return InternalError(prefix_ + "wrong result on rank " + std::to_string(r) + ": recvbuf[" +
                           std::to_string(i) + "] holds " + Describe(s) + ", expected element " +
                           std::to_string(elem) + " of ranks " + RankList(mask) +
                           (reduction && a_.premul ? ", each pre-multiplied once" : "") +
                           (reduction && a_.avg ? ", divided once" : ""));
    if (!reduction && (s.scaled || s.divided))
      return InternalError(prefix_ + "rank " + std::to_string(r) + ": recvbuf[" +
                           std::to_string(i) + "] was scaled or divided by a data-movement call");
    return Status::Ok();
  }

  Status CheckFinal() const {
    const uint64_t all = n_ == 64 ? ~uint64_t{0} : (uint64_t{1} << n_) - 1;
    const uint64_t cnt = a_.count;
    switch (a_.kind) {
      case CollKind::kAllReduce:
        for (int r = 0; r < n_; ++r)
          for (uint64_t i = 0; i < cnt; ++i) BRAID_RETURN_IF_ERROR(Expect(r, i, all, i, true));
        for (int r = 1; r < n_; ++r)
          for (uint64_t i = 0; i < cnt; ++i)
            if (mem_[r][views_[r][kRecvBuf].base + i].tree !=
                mem_[0][views_[0][kRecvBuf].base + i].tree)
              return InternalError(prefix_ + "ranks 0 and " + std::to_string(r) +
                                   " compute recvbuf[" + std::to_string(i) +
                                   "] with different association orders (or through different "
                                   "quantizations): results would not be bitwise identical "
                                   "across ranks");
        break;
      case CollKind::kReduceScatter:
        for (int r = 0; r < n_; ++r)
          for (uint64_t i = 0; i < cnt; ++i)
            BRAID_RETURN_IF_ERROR(Expect(r, i, all, r * cnt + i, true));
        break;
      case CollKind::kAllGather:
        for (int r = 0; r < n_; ++r)
          for (int b = 0; b < n_; ++b)
            for (uint64_t i = 0; i < cnt; ++i)
              BRAID_RETURN_IF_ERROR(Expect(r, b * cnt + i, uint64_t{1} << b, i, false));
        break;
      case CollKind::kBroadcast:
        for (int r = 0; r < n_; ++r)
          for (uint64_t i = 0; i < cnt; ++i)
            BRAID_RETURN_IF_ERROR(Expect(r, i, uint64_t{1} << a_.root, i, false));
        break;
      case CollKind::kReduce:
        for (uint64_t i = 0; i < cnt; ++i) BRAID_RETURN_IF_ERROR(Expect(a_.root, i, all, i, true));
        break;
      case CollKind::kAllToAll:
        for (int q = 0; q < n_; ++q)
          for (int p = 0; p < n_; ++p)
            for (uint64_t i = 0; i < cnt; ++i)
              BRAID_RETURN_IF_ERROR(Expect(q, p * cnt + i, uint64_t{1} << p, q * cnt + i, false));
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

  // The group itself must pair up: per ordered pair of ranks, as many sends as receives, the
  // k-th of each of equal size (what braidGroupEnd's checks and the wire enforce at run time).
  Status CheckPairing() const {
    if (static_cast<int>(p2p_->size()) != n_)
      return InvalidArgument(prefix_ + "calls for " + std::to_string(p2p_->size()) + " ranks");
    for (int p = 0; p < n_; ++p)
      for (int q = 0; q < n_; ++q) {
        std::vector<uint64_t> sends, recvs;
        for (const auto& c : (*p2p_)[p])
          if (c.is_send && c.peer == q) sends.push_back(c.bytes);
        for (const auto& c : (*p2p_)[q])
          if (!c.is_send && c.peer == p) recvs.push_back(c.bytes);
        if (sends != recvs)
          return InvalidArgument(prefix_ + "the calls do not pair: rank " + std::to_string(p) +
                                 " sends " + std::to_string(sends.size()) + " messages to rank " +
                                 std::to_string(q) + ", which receives " +
                                 std::to_string(recvs.size()) + " (or their sizes differ)");
      }
    return Status::Ok();
  }

  Status CheckFinalP2P() const {
    for (int q = 0; q < n_; ++q) {
      std::vector<size_t> nth_from(n_, 0);
      const auto& calls = (*p2p_)[q];
      for (size_t i = 0; i < calls.size(); ++i) {
        if (calls[i].is_send) continue;
        const int p = calls[i].peer;
        const size_t k = nth_from[p]++;
        size_t j = 0, seen = 0;
        for (; j < (*p2p_)[p].size(); ++j) {
          const auto& c = (*p2p_)[p][j];
          if (c.is_send && c.peer == q && seen++ == k) break;
        }
        for (uint64_t b = 0; b < calls[i].bytes; ++b) {
          const Sym& s = mem_[q][views_[q][i].base + b];
          if (s.valid != kValue || s.mask != (uint64_t{1} << p) || s.tree != j || s.elem != b)
            return InternalError(
                prefix_ + "wrong result on rank " + std::to_string(q) + ": byte " +
                std::to_string(b) + " of call " + std::to_string(i) + " (receive #" +
                std::to_string(k) + " from rank " + std::to_string(p) + ") holds " +
                (s.valid == kValue ? "byte " + std::to_string(s.elem) + " of call " +
                                         std::to_string(s.tree) + " of ranks " + RankList(s.mask)
                                   : Describe(s)) +
                ", expected byte " + std::to_string(b) + " of rank " + std::to_string(p) +
                "'s call " + std::to_string(j));
        }
      }
    }
    return Status::Ok();
  }

  const CollArgs a_;
  const std::string name_;
  const ScheduleSource& source_;
  const std::vector<std::vector<P2PSpec>>* p2p_;
  const int n_;
  std::string prefix_;
  std::vector<RankSchedule> sched_;
  std::vector<std::vector<Sym>> mem_;
  std::vector<std::vector<View>> views_;
  std::vector<Encoding> encodings_;
  size_t max_ch_ = 0;
  bool track_channels_ = false;
  std::vector<std::vector<WriteStamp>> wst_;
  std::vector<std::vector<uint32_t>> rst_;   // per cell, per channel: last read step + 1
  std::vector<std::vector<size_t>> vc_off_;  // per rank, per channel: first step's index
  std::vector<std::vector<uint32_t>> vc_;    // per rank: clocks, max_ch_ per step
  std::vector<Thread> threads_;
  std::vector<int> base_;                  // per rank: its channel 0's thread
  std::vector<std::vector<int>> waiting_;  // per rank: threads parked on an edge
  std::vector<Stream> streams_;
  std::vector<Iv> iv_, active_;
  std::vector<int> done_;
  std::vector<uint64_t> total_know_;
};

}  // namespace

Status VerifySchedule(const Algorithm& algo, const CollArgs& args) {
  if (!algo.supports(args))
    return InvalidArgument(std::string("verify ") + algo.name() +
                           ": the algorithm does not support this request");
  const ScheduleSource source = [&](int r) { return BuildSchedule(algo, args, r); };
  SymbolicRun run(args, algo.name(), source, nullptr);
  return run.Run();
}

Status VerifyLoweredSchedules(const CollArgs& args, const std::string& name,
                              const ScheduleSource& source) {
  SymbolicRun run(args, name, source, nullptr);
  return run.Run();
}

Status VerifyPointToPoint(const std::vector<std::vector<P2PSpec>>& calls,
                          const ScheduleSource& source) {
  CollArgs args;
  args.kind = CollKind::kSendRecv;
  args.dtype = DataType::kUint8;
  args.nranks = static_cast<int>(calls.size());
  args.nchannels = 1;
  const ScheduleSource fallback = [&](int r) {
    return BuildPointToPointSchedule(calls[r], r, args.nranks);
  };
  SymbolicRun run(args, "p2p", source ? source : fallback, &calls);
  return run.Run();
}

}  // namespace braid
