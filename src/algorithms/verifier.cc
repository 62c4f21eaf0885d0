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
#include <array>
#include <climits>
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

bool IsTransfer(StepOpKind k) {
  return IsTransferKind(k);
}
// Which slices an op touches (schedule.h). kExpose names a buffer, not memory it accesses.
bool ReadsSrc(StepOpKind k) {
  return ReadsSrcKind(k) && k != StepOpKind::kExpose;
}
bool WritesDst(StepOpKind k) {
  return WritesDstKind(k);
}
bool ReadsDst(StepOpKind k) {
  return ReadsDstKind(k);
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
  uint64_t src = 0, dst = 0, src2 = 0;
  uint64_t scount = 0, dcount = 0;
  uint16_t sbuf = 0, dbuf = 0, s2buf = 0;
  int sr = 0, dr = 0, s2r = 0;  // whose memory each slice is (a peer's for one-sided ops)
  Codec codec;
  Counter counter = Counter::kPosted;
  int64_t value = 0;  // kSignal, kWait: the absolute post number
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
  // One-sided schedules: happens-before across ranks. clock[u] = steps of thread u that happen
  // before this thread's next step (its own entry: the steps it completed); consumed[r] = the
  // largest value of rank r's kConsumed counter this thread knows of (through waits, and
  // through whatever it learned from the threads it synchronised with).
  std::vector<uint32_t> clock;
  std::vector<int64_t> consumed;
  std::vector<std::vector<uint32_t>> clock_done;  // clock at each step's completion (for edges)
  std::vector<std::vector<int64_t>> consumed_done;
  std::vector<uint32_t> clock_start;  // clock when the current step was posted
};

// A rank's counter as it was set by one kSignal: what a waiter that sees it learns.
struct SignalRec {
  int64_t value = 0;
  std::vector<uint32_t> clock;
  std::vector<int64_t> consumed;
  uint64_t know = 0;
};

// Memory that ranks share through one-sided steps (a window, or a buffer its owner exposes):
// who wrote it last, what it holds (a window: the post its content belongs to), who has read
// that content.
struct Access1 {
  int32_t thread = -1;  // -1: content from before the call
  uint32_t step = 0;
  uint32_t op = 0;
};
struct SharedCell {
  Access1 write;
  int64_t post = 0;  // windows: the post whose data it holds
  std::vector<Access1> reads;
};

// Memory of one place and slot of a rank's board side: the windows whose posts fall there.
struct WindowRegion {
  WindowPlace place;
  uint32_t slot;
  uint64_t base, count;
  DataType dtype;
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
      // A staged call's channel 0 is its device stream (device_staging.h), not an engine channel.
      const int channels = a_.nchannels + (a_.memory != MemoryType::kHost ? 1 : 0);
      if (!p2p_ && static_cast<int>(s->channels.size()) > channels)
        return InternalError(prefix_ + "rank " + std::to_string(r) + " uses " +
                             std::to_string(s->channels.size()) + " channels, more than nchannels");
      // Edges and cycles first: the clocks below assume an acyclic graph.
      BRAID_RETURN_IF_ERROR(CheckScheduleStructure(*s, r, n_, prefix_));
      max_ch = std::max(max_ch, s->channels.size());
      sched_.push_back(std::move(*s));
    }
    max_ch_ = max_ch;
    track_channels_ = max_ch > 1;
    for (const RankSchedule& rs : sched_) one_sided_ = one_sided_ || UsesOneSided(rs);
    views_.resize(n_);
    for (int r = 0; r < n_; ++r) BRAID_RETURN_IF_ERROR(p2p_ ? SetUpP2PMemory(r) : SetUpMemory(r));
    if (track_channels_)
      for (int r = 0; r < n_; ++r) ComputeClocks(r);
    streams_.resize(std::max<size_t>(max_ch, 1) * n_ * n_);
    total_know_.assign(n_, 0);
    for (int r = 0; r < n_; ++r) total_know_[r] = uint64_t{1} << r;
    BRAID_RETURN_IF_ERROR(RunThreads());
    if (one_sided_) BRAID_RETURN_IF_ERROR(CheckOneSidedEnd());
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
      if (i >= kScratchBuf && b[i].role != BufferRole::kScratch && b[i].role != BufferRole::kWindow)
        return bad("slot " + std::to_string(i) + " must be scratch or a window");
      if (b[i].role == BufferRole::kWindow && i < kFirstUserBuf)
        return bad("slot " + std::to_string(i) + " cannot be a window");
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
      if (table[i].role == BufferRole::kWindow) continue;
      views[i] = {true,           true,
                  total,          table[i].count,
                  table[i].dtype, i == kScratchBuf ? "scratch" : "scratch" + std::to_string(i)};
      total += table[i].count;
    }
    // Windows: every window whose post falls on the same place and slot of the board (post s and
    // s + WindowDepth share memory) is one region, as large as the largest of them.
    const uint64_t window_base = total;
    std::vector<WindowRegion> regions;
    for (size_t i = kScratchBuf; i < table.size(); ++i) {
      const BufferDesc& b = table[i];
      if (b.role != BufferRole::kWindow) continue;
      const uint32_t depth = WindowDepth(b.place);
      const uint32_t slot = static_cast<uint32_t>((kEpoch + b.post) % depth);
      auto it = std::find_if(regions.begin(), regions.end(), [&](const WindowRegion& w) {
        return w.place == b.place && w.slot == slot;
      });
      if (it == regions.end()) {
        regions.push_back({b.place, slot, 0, 0, b.dtype});
        it = regions.end() - 1;
      }
      if (it->dtype != b.dtype)
        return InternalError(prefix_ + "rank " + std::to_string(r) + ": windows " + "of types " +
                             DataTypeName(it->dtype) + " and " + DataTypeName(b.dtype) +
                             " share board memory");
      it->count = std::max(it->count, b.count);
    }
    for (WindowRegion& w : regions) {
      w.base = total;
      total += w.count;
    }
    for (size_t i = kScratchBuf; i < table.size(); ++i) {
      const BufferDesc& b = table[i];
      if (b.role != BufferRole::kWindow) continue;
      const uint32_t slot = static_cast<uint32_t>((kEpoch + b.post) % WindowDepth(b.place));
      const WindowRegion& w = *std::find_if(regions.begin(), regions.end(), [&](const auto& x) {
        return x.place == b.place && x.slot == slot;
      });
      static const char* kPlaces[] = {"entry", "slot", "buffer"};
      views[i] = {true,
                  true,
                  w.base,
                  b.count,
                  b.dtype,
                  std::string("window ") + std::to_string(i) + " (" +
                      kPlaces[static_cast<int>(b.place)] + " of post " + std::to_string(b.post) +
                      ")"};
    }
    mem_.emplace_back(total);
    if (one_sided_) {
      meta_.emplace_back(total);
      shared_.emplace_back(total, uint8_t{0});
      // A window's memory holds, before the call, the post that last used it: the largest post
      // before the call's epoch that falls on its slot.
      for (const WindowRegion& w : regions) {
        const int64_t depth = WindowDepth(w.place);
        const int64_t prev = kEpoch - 1 - ((kEpoch - 1 - w.slot) % depth);
        for (uint64_t k = 0; k < w.count; ++k) {
          meta_[r][w.base + k].post = prev;
          shared_[r][w.base + k] = kWindowMemory;
        }
      }
      (void)window_base;
      // Buffers this rank exposes anywhere in its schedule are shared for the whole call.
      for (const Channel& ch : sched_[r].channels)
        for (const Step& st : ch.steps)
          for (const StepOp& op : st.ops)
            if (op.kind == StepOpKind::kExpose && op.src.buffer < views.size()) {
              const View& v = views[op.src.buffer];
              for (uint64_t k = 0; k < v.size; ++k)
                if (shared_[r][v.base + k] == 0) shared_[r][v.base + k] = kExposedMemory;
            }
    }
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
  // The physical offset of slice `s` in the memory of rank *owner (this rank's, or for a slice
  // on a peer, the peer's: a window, or a buffer the peer exposes).
  Result<uint64_t> Resolve(const Thread& th, int op, const Slice& s, bool write, int* owner) const {
    const int r = s.remote() ? s.rank : th.r;
    *owner = r;
    if (s.remote() && (!one_sided_ || r < 0 || r >= n_ || r == th.r))
      return Fail(th, op, "names rank " + std::to_string(s.rank) + "'s memory");
    const auto& views = views_[r];
    if (s.buffer >= views.size())
      return Fail(th, op,
                  "refers to buffer slot " + std::to_string(s.buffer) + ", which the table lacks");
    const View& v = views[s.buffer];
    // A peer's input is readable through its send buffer also where the peer's own schedule
    // reads it elsewhere (an all-gather in place: its block of the receive buffer).
    const bool peer_input = s.remote() && s.buffer == kSendBuf;
    if (!v.exists && !peer_input)
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
                      ") of " + (s.remote() ? "rank " + std::to_string(r) + "'s " : "") + v.name +
                      " is out of bounds (size " + std::to_string(v.size) + ")");
    return v.base + s.offset;
  }

  Status UnwrittenError(const Thread& th, int op, uint64_t phys) const {
    return UnwrittenError(th, op, th.r, phys);
  }
  Status UnwrittenError(const Thread& th, int op, int owner, uint64_t phys) const {
    return Fail(th, op,
                "reads " + (owner == th.r ? "" : "rank " + std::to_string(owner) + "'s ") +
                    Where(owner, phys) + ", which nothing has written");
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
    // Memory other ranks touch too (windows, exposed buffers) is checked access by access, with
    // the same rule for ops of one step (SharedAccess).
    const auto mine = [&](int owner, uint64_t at) { return owner == th.r && !IsShared(owner, at); };
    for (uint32_t i = 0; i < cur.size(); ++i) {
      const ROp& o = cur[i];
      if (ReadsSrc(o.kind) && o.scount && mine(o.sr, o.src))
        iv.push_back({o.src, o.src + o.scount, i, false});
      if (ReadsSrc2Kind(o.kind) && o.dcount && mine(o.s2r, o.src2))
        iv.push_back({o.src2, o.src2 + o.dcount, i, false});
      if (WritesDst(o.kind) && o.dcount && mine(o.dr, o.dst)) {
        const bool same = ReadsSrc(o.kind) && o.src == o.dst && o.sr == o.dr;
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
    Sym* ms = mem_[o.sr].data();  // the source's memory (a peer's for a get)
    Sym* md = mem_[o.dr].data();  // the destination's (a peer's window for a put)
    switch (o.kind) {
      case StepOpKind::kCopy:
      case StepOpKind::kGet:
      case StepOpKind::kPut:
        for (uint64_t k = 0; k < o.scount; ++k) {
          if (!ms[o.src + k].valid) return UnwrittenError(th, oi, o.sr, o.src + k);
          md[o.dst + k] = ms[o.src + k];
        }
        break;
      case StepOpKind::kReduce:
        for (uint64_t k = 0; k < o.scount; ++k) {
          const Sym& x = ms[o.src + k];
          Sym& y = m[o.dst + k];
          if (!x.valid) return UnwrittenError(th, oi, o.sr, o.src + k);
          if (!y.valid) return UnwrittenError(th, oi, o.dst + k);
          if (!Combinable(x, y)) return CombineError(th, oi, o.dst + k, x, y);
          y = Combined(x, y);
        }
        break;
      case StepOpKind::kCombine: {
        const Sym* m2 = mem_[o.s2r].data();
        for (uint64_t k = 0; k < o.dcount; ++k) {
          const Sym x = ms[o.src + k], y = m2[o.src2 + k];
          if (!x.valid) return UnwrittenError(th, oi, o.sr, o.src + k);
          if (!y.valid) return UnwrittenError(th, oi, o.s2r, o.src2 + k);
          if (!Combinable(x, y)) return CombineError(th, oi, o.dst + k, x, y);
          m[o.dst + k] = Combined(x, y);
        }
        break;
      }
      case StepOpKind::kExpose:
        exposed_[static_cast<size_t>(th.r) * kExposable + o.sbuf] = {
            ThreadIndex(th), static_cast<uint32_t>(th.si), i};
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
    if (one_sided_) {
      th.clock[static_cast<size_t>(t)] = static_cast<uint32_t>(th.si);
      th.clock_start = th.clock;
    }
    for (uint32_t i = 0; i < st.ops.size(); ++i) {
      const StepOp& op = st.ops[i];
      const int oi = static_cast<int>(i);
      ROp ro;
      ro.kind = op.kind;
      ro.peer = op.peer;
      ro.codec = op.codec;
      ro.sr = ro.dr = ro.s2r = th.r;
      if (IsOneSidedKind(op.kind) && !one_sided_)
        return Fail(th, oi, "is a one-sided step in a schedule without windows");
      if (op.kind == StepOpKind::kExpose) {
        if (op.src.buffer >= kExposable || op.src.buffer >= views_[th.r].size())
          return Fail(th, oi, "exposes buffer slot " + std::to_string(op.src.buffer));
        ro.sbuf = op.src.buffer;
      } else if (ReadsSrc(op.kind)) {
        BRAID_ASSIGN_OR_RETURN(ro.src, Resolve(th, oi, op.src, false, &ro.sr));
        ro.scount = op.src.count;
        ro.sbuf = op.src.buffer;
      }
      if (ReadsSrc2Kind(op.kind)) {
        BRAID_ASSIGN_OR_RETURN(ro.src2, Resolve(th, oi, op.src2, false, &ro.s2r));
        ro.s2buf = op.src2.buffer;
        if (op.src2.count != op.dst.count) return Fail(th, oi, "its operands differ in count");
      }
      if (WritesDst(op.kind)) {
        BRAID_ASSIGN_OR_RETURN(ro.dst, Resolve(th, oi, op.dst, true, &ro.dr));
        ro.dcount = op.dst.count;
        ro.dbuf = op.dst.buffer;
      }
      if (op.kind == StepOpKind::kSignal || op.kind == StepOpKind::kWait) {
        ro.counter = op.counter;
        ro.value = kEpoch + op.value;
      }
      const bool same_type = !(ReadsSrc(op.kind) && WritesDst(op.kind)) ||
                             TypeOf(ro.sr, ro.sbuf) == TypeOf(ro.dr, ro.dbuf);
      switch (op.kind) {
        case StepOpKind::kRecvReduce:
        case StepOpKind::kCopy:
        case StepOpKind::kReduce:
        case StepOpKind::kScale:
        case StepOpKind::kGet:
        case StepOpKind::kPut:
        case StepOpKind::kCombine: {
          if (ro.scount != ro.dcount || !same_type ||
              (op.kind == StepOpKind::kCombine &&
               TypeOf(ro.s2r, ro.s2buf) != TypeOf(ro.dr, ro.dbuf)))
            return Fail(th, oi,
                        "src has " + std::to_string(ro.scount) + " elements but dst has " +
                            std::to_string(ro.dcount) + (same_type ? "" : " of another type"));
          const bool overlap =
              ro.sr == ro.dr && ro.src < ro.dst + ro.dcount && ro.dst < ro.src + ro.scount;
          if (overlap && (ro.src != ro.dst || op.kind == StepOpKind::kReduce) && ro.dcount > 0)
            return Fail(
                th, oi,
                "src and dst overlap" +
                    std::string(op.kind == StepOpKind::kReduce ? "" : " without being identical"));
          const bool overlap2 = op.kind == StepOpKind::kCombine && ro.s2r == ro.dr &&
                                ro.src2 < ro.dst + ro.dcount && ro.dst < ro.src2 + ro.dcount;
          if (overlap2 && ro.src2 != ro.dst && ro.dcount > 0)
            return Fail(th, oi, "src2 and dst overlap without being identical");
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
      const uint16_t s_buf = o.sbuf, d_buf = o.dbuf;
      if (ReadsSrc(o.kind))
        BRAID_RETURN_IF_ERROR(Touch(th, oi, o.sr, s_buf, o.src, o.scount, false));
      if (ReadsSrc2Kind(o.kind))
        BRAID_RETURN_IF_ERROR(Touch(th, oi, o.s2r, o.s2buf, o.src2, o.dcount, false));
      if (ReadsDst(o.kind))
        BRAID_RETURN_IF_ERROR(Touch(th, oi, o.dr, d_buf, o.dst, o.dcount, false));
      if (WritesDst(o.kind))
        BRAID_RETURN_IF_ERROR(Touch(th, oi, o.dr, d_buf, o.dst, o.dcount, true));
    }
    // Local ops now (they conflict with nothing else in the step, so their timing is free); so
    // are one-sided ops, whose order with other ranks' is the happens-before SharedAccess checks.
    int pending = 0;
    for (uint32_t i = 0; i < cur.size(); ++i) {
      const StepOpKind k = cur[i].kind;
      if (IsTransfer(k) || k == StepOpKind::kWait)
        ++pending;
      else if (k == StepOpKind::kSignal)
        BRAID_RETURN_IF_ERROR(Signal(t, i));
      else
        BRAID_RETURN_IF_ERROR(RunLocal(th, i));
    }
    th.pending = pending;
    if (pending == 0) {
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
      if (o.kind == StepOpKind::kWait) BRAID_RETURN_IF_ERROR(Wait(t, i));
    }
    return Status::Ok();
  }

  // ---------------------------------------------------------------- one-sided (IR v3)
  // Whether `rs` has windows or one-sided ops: then happens-before is tracked across ranks.
  static bool UsesOneSided(const RankSchedule& rs) {
    for (const BufferDesc& b : rs.buffers)
      if (b.role == BufferRole::kWindow) return true;
    for (const Channel& ch : rs.channels)
      for (const Step& st : ch.steps)
        for (const StepOp& op : st.ops)
          if (IsOneSidedKind(op.kind) || op.src.remote()) return true;
    return false;
  }
  int ThreadIndex(const Thread& th) const { return base_[th.r] + th.c; }
  bool IsShared(int owner, uint64_t phys) const { return one_sided_ && shared_[owner][phys] != 0; }
  // Whether access `a` happens before thread th's current step (op `op` of it): an earlier step
  // of a thread th has synchronised with. Ops of one step are concurrent, except an op with
  // itself (a reduce reads and writes its destination).
  bool Before(const Access1& a, const Thread& th, uint32_t op) const {
    if (a.thread < 0) return true;
    const int t = ThreadIndex(th);
    if (a.thread == t && a.step == th.si) return a.op == op;
    return th.clock[static_cast<size_t>(a.thread)] > a.step;
  }
  std::string AccessName(const Access1& a) const {
    const Thread& w = threads_[static_cast<size_t>(a.thread)];
    return "rank " + std::to_string(w.r) + " channel " + std::to_string(w.c) + " step " +
           std::to_string(a.step);
  }

  // Records an access of thread `th` (its current step, op `op`) to [at, at + n) of rank
  // `owner`'s memory: private memory of this rank goes to Access (races between its channels);
  // shared memory (a window, an exposed buffer) to SharedAccess.
  Status Touch(const Thread& th, int op, int owner, uint16_t buf, uint64_t at, uint64_t n,
               bool write) {
    if (n == 0) return Status::Ok();
    const BufferDesc& b = sched_[owner].buffers[buf];
    if (owner == th.r && !IsShared(owner, at)) return Access(th, op, at, n, write);
    if (owner != th.r && b.role != BufferRole::kWindow) {
      // A peer's buffer: readable once the peer has exposed it (and signalled since).
      const Access1& e = exposed_[static_cast<size_t>(owner) * kExposable + buf];
      if (e.thread < 0 || !Before(e, th, static_cast<uint32_t>(op)))
        return Fail(th, op,
                    (write ? "writes rank " : "reads rank ") + std::to_string(owner) + "'s " +
                        views_[owner][buf].name +
                        ", which that rank has not exposed to it (an expose, then a signal this "
                        "rank waits for, must come first)");
    }
    const int64_t post = b.role == BufferRole::kWindow ? kEpoch + b.post : -1;
    return SharedAccess(th, static_cast<uint32_t>(op), owner, at, n, write, post);
  }

  Status SharedAccess(const Thread& th, uint32_t op, int owner, uint64_t lo, uint64_t n, bool write,
                      int64_t post) {
    const int t = ThreadIndex(th);
    const std::string whose = owner == th.r ? "its own " : "rank " + std::to_string(owner) + "'s ";
    for (uint64_t i = lo; i < lo + n; ++i) {
      SharedCell& c = meta_[owner][i];
      if (!Before(c.write, th, op) && !write && post >= 0 && c.post > post)
        return Fail(th, static_cast<int>(op),
                    "reads " + whose + Where(owner, i) + " for post " + PostName(post) +
                        ", which " + AccessName(c.write) + " rewrote for post " + PostName(c.post) +
                        " with nothing ordering the two: a region reused too early (the writer "
                        "must wait until this rank has consumed post " +
                        PostName(post) + ")");
      if (!Before(c.write, th, op))
        return Fail(th, static_cast<int>(op),
                    (write ? "writes " : "reads ") + whose + Where(owner, i) + ", which " +
                        AccessName(c.write) +
                        " writes with nothing ordering the two (a get or put before the signal "
                        "that publishes it, or a missing wait)");
      if (!write) {
        if (post >= 0 && c.post != post)
          return Fail(th, static_cast<int>(op),
                      "reads " + whose + Where(owner, i) + " for post " + PostName(post) +
                          ", but it holds post " + PostName(c.post) +
                          "'s data: a get before the signal of its post (no wait for it)");
        if (post >= 0 && counter_[th.r][1] >= post)
          return Fail(th, static_cast<int>(op),
                      "reads post " + PostName(post) +
                          " after signalling that it had consumed it (its memory may be "
                          "rewritten already)");
        c.reads.push_back({t, static_cast<uint32_t>(th.si), op});
        if (post >= 0) window_reads_[th.r].push_back({post, {t, static_cast<uint32_t>(th.si), op}});
        continue;
      }
      for (const Access1& r : c.reads)
        if (!Before(r, th, op))
          return Fail(th, static_cast<int>(op),
                      "writes " + whose + Where(owner, i) + " while " + AccessName(r) +
                          " may still read it (a region reused too early: the write must wait "
                          "until that rank has consumed it)");
      if (c.write.thread < 0 && post >= 0 && c.post < kEpoch) {
        // What the window held before the call: every rank read it, and the reuse rule asks for
        // each one's consumed counter to have passed it.
        for (int r = 0; r < n_; ++r)
          if (th.consumed[static_cast<size_t>(r)] < c.post)
            return Fail(th, static_cast<int>(op),
                        "writes " + whose + Where(owner, i) + " (post " + PostName(post) +
                            ") over post " + PostName(c.post) + " before rank " +
                            std::to_string(r) +
                            (r == th.r ? " (this rank: its earlier calls may still read it)" : "") +
                            " has consumed it: a region reused too early (a missing wait for "
                            "that rank's consumed counter)");
      }
      c.write = {t, static_cast<uint32_t>(th.si), op};
      c.reads.clear();
      if (post >= 0) c.post = post;
    }
    return Status::Ok();
  }

  static std::string PostName(int64_t post) {
    const int64_t rel = post - kEpoch;
    return rel >= 0 ? std::to_string(rel) : "e" + std::to_string(rel);
  }

  // Merges what a waiter learns from signal `rec` (or a sender from its message).
  void Learn(Thread& th, const std::vector<uint32_t>& clock, const std::vector<int64_t>& consumed) {
    for (size_t k = 0; k < clock.size(); ++k) th.clock[k] = std::max(th.clock[k], clock[k]);
    for (size_t k = 0; k < consumed.size(); ++k)
      th.consumed[k] = std::max(th.consumed[k], consumed[k]);
  }

  Status Signal(int t, uint32_t i) {
    Thread& th = threads_[t];
    const ROp& o = th.cur[i];
    const int c = static_cast<int>(o.counter);
    if (th.c != signal_channel_[th.r]) {
      if (signal_channel_[th.r] >= 0)
        return Fail(th, static_cast<int>(i),
                    "signals from a second channel (a rank's counters move on one channel, or "
                    "their order would depend on the interleaving)");
      signal_channel_[th.r] = th.c;
    }
    int64_t& value = counter_[th.r][c];
    if (o.counter == Counter::kPosted ? o.value <= value : o.value < value)
      return Fail(th, static_cast<int>(i),
                  std::string(o.counter == Counter::kPosted ? "posts " : "consumes ") +
                      PostName(o.value) + " after " + PostName(value) +
                      " (counters only move forward)");
    if (o.counter == Counter::kConsumed)
      for (const auto& [post, read] : window_reads_[th.r])
        if (post <= o.value && !Before(read, th, i))
          return Fail(th, static_cast<int>(i),
                      "signals that it has consumed post " + PostName(o.value) + " while its " +
                          "read of post " + PostName(post) + " (" + AccessName(read) +
                          ") may not have happened yet");
    value = o.value;
    SignalRec rec;
    rec.value = o.value;
    rec.clock = th.clock_start;
    rec.consumed = th.consumed;
    // What a waiter learns of this rank's own counter: its value now (before the call: every
    // earlier post, which the call's previous calls consumed before this call began).
    rec.consumed[static_cast<size_t>(th.r)] = counter_[th.r][1];
    rec.know = th.know_start;
    signals_[th.r][c].push_back(std::move(rec));
    // Wake the waits this satisfies.
    auto& parked = waits_[th.r][c];
    std::vector<OpRef> still;
    for (const OpRef& w : parked) {
      const ROp& wo = threads_[w.thread].cur[w.op];
      if (wo.value <= value)
        Satisfy(w.thread, w.op, signals_[th.r][c].back());
      else
        still.push_back(w);
    }
    parked.swap(still);
    return Status::Ok();
  }

  void Satisfy(int t, uint32_t i, const SignalRec& rec) {
    Thread& th = threads_[t];
    Learn(th, rec.clock, rec.consumed);
    th.know |= rec.know;
    th.cur[i].done = true;
    if (--th.pending == 0) done_.push_back(t);
  }

  Status Wait(int t, uint32_t i) {
    Thread& th = threads_[t];
    const ROp& o = th.cur[i];
    const int c = static_cast<int>(o.counter);
    const auto p = static_cast<size_t>(o.peer);
    if (o.value < kEpoch) {
      // A post before this call: complete (and, for kConsumed, its memory free) before the
      // call began. The wait orders nothing of this call but tells what is free.
      if (o.counter == Counter::kConsumed) th.consumed[p] = std::max(th.consumed[p], o.value);
      th.cur[i].done = true;
      if (--th.pending == 0) done_.push_back(t);
      return Status::Ok();
    }
    for (const SignalRec& rec : signals_[p][c])
      if (rec.value >= o.value) {
        Satisfy(t, i, rec);
        return Status::Ok();
      }
    waits_[p][c].push_back({t, i});
    return Status::Ok();
  }

  // After every thread ran: exposed buffers were read only before their owner's call ended
  // (its caller may reuse them at once), and every window read was consumed.
  Status CheckOneSidedEnd() const {
    for (int q = 0; q < n_; ++q) {
      std::vector<uint32_t> end(threads_.size(), 0);
      for (size_t c = 0; c < sched_[q].channels.size(); ++c) {
        const Thread& th = threads_[static_cast<size_t>(base_[q]) + c];
        for (size_t k = 0; k < end.size(); ++k) end[k] = std::max(end[k], th.clock[k]);
        end[static_cast<size_t>(base_[q]) + c] = static_cast<uint32_t>(th.si);
      }
      for (uint64_t i = 0; i < meta_[q].size(); ++i) {
        if (shared_[q][i] != kExposedMemory) continue;
        // A peer's put into it (a device kernel's, through its IPC mapping) must end before this
        // rank's call does, or its caller would see the buffer before the write.
        const Access1& w = meta_[q][i].write;
        if (w.thread >= 0 && threads_[static_cast<size_t>(w.thread)].r != q &&
            end[static_cast<size_t>(w.thread)] <= w.step)
          return InternalError(prefix_ + "rank " + std::to_string(q) + "'s call may return while " +
                               AccessName(w) + " still writes " + Where(q, i) +
                               " (a missing wait for that rank's post that it is done)");
        for (const Access1& r : meta_[q][i].reads)
          if (threads_[static_cast<size_t>(r.thread)].r != q &&
              end[static_cast<size_t>(r.thread)] <= r.step)
            return InternalError(prefix_ + "rank " + std::to_string(q) +
                                 "'s call may return while " + AccessName(r) + " still reads " +
                                 Where(q, i) +
                                 " (a missing wait for that rank's post that it is done)");
      }
      int64_t last_read = -1;
      for (const auto& wr : window_reads_[q]) last_read = std::max(last_read, wr.first);
      if (last_read >= 0 && counter_[q][1] < last_read)
        return InternalError(prefix_ + "rank " + std::to_string(q) + " reads post " +
                             PostName(last_read) +
                             " but never signals that it consumed it (its peers could never "
                             "reuse that memory)");
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
      if (one_sided_) {
        std::vector<int64_t> none;
        Learn(rth, sth.clock_start, none);
      }
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
    for (const StepRef& d : st.deps) {
      const Thread& dt = ThreadOf(th.r, d.channel);
      th.know |= dt.know_done[d.step];
      if (one_sided_) Learn(th, dt.clock_done[d.step], dt.consumed_done[d.step]);
    }
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
    if (one_sided_) {
      for (Thread& th : threads_) {
        th.clock.assign(threads_.size(), 0);
        // Its own counter too: the rank's earlier calls may still read its windows (calls run
        // side by side), so the reuse rule holds for it as for every peer.
        th.consumed.assign(static_cast<size_t>(n_), INT64_MIN);
      }
      exposed_.assign(static_cast<size_t>(n_) * kExposable, Access1{});
      counter_.assign(static_cast<size_t>(n_), {kEpoch - 1, kEpoch - 1});
      signals_.resize(static_cast<size_t>(n_));
      waits_.resize(static_cast<size_t>(n_));
      window_reads_.resize(static_cast<size_t>(n_));
      signal_channel_.assign(static_cast<size_t>(n_), -1);
    }
    waiting_.resize(n_);
    for (int t = 0; t < static_cast<int>(threads_.size()); ++t) BRAID_RETURN_IF_ERROR(TryPost(t));
    while (!done_.empty()) {
      const int t = done_.back();
      done_.pop_back();
      Thread& th = threads_[t];
      th.know_done[th.si] = th.know;
      if (one_sided_) {
        th.clock[static_cast<size_t>(t)] = static_cast<uint32_t>(th.si + 1);
        if (sched_[th.r].channels.size() > 1) {
          th.clock_done.push_back(th.clock);
          th.consumed_done.push_back(th.consumed);
        }
      }
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
        if (th.cur[i].kind == StepOpKind::kWait) {
          const int64_t at = counter_[static_cast<size_t>(p)][static_cast<int>(th.cur[i].counter)];
          stuck += (listed ? "; " : "") + At(th, static_cast<int>(i)) + " waits for rank " +
                   std::to_string(p) + "'s " +
                   (th.cur[i].counter == Counter::kPosted ? "posted" : "consumed") +
                   " counter to reach " + PostName(th.cur[i].value) + ", which it never does (it " +
                   "reached " + PostName(at) + ")";
          ++listed;
          continue;
        }
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

  // One-sided schedules (IR v3). The call's epoch: any value works (windows of posts s and
  // s + depth share memory whatever it is), large enough that earlier calls' posts are positive.
  static constexpr int64_t kEpoch = int64_t{1} << 20;
  static constexpr uint16_t kExposable = kFirstUserBuf + 1;  // slots a rank can expose
  static constexpr uint8_t kWindowMemory = 1, kExposedMemory = 2;
  bool one_sided_ = false;
  std::vector<std::vector<SharedCell>> meta_;  // per rank, per cell of its memory
  std::vector<std::vector<uint8_t>> shared_;   // per rank, per cell: 0, kWindowMemory, kExposed...
  std::vector<Access1> exposed_;               // per rank and exposable slot: its kExpose
  std::vector<std::array<int64_t, 2>> counter_;                 // per rank: posted, consumed
  std::vector<std::array<std::vector<SignalRec>, 2>> signals_;  // per rank and counter, in order
  std::vector<std::array<std::vector<OpRef>, 2>> waits_;        // parked waits on a rank's counter
  std::vector<std::vector<std::pair<int64_t, Access1>>> window_reads_;  // per reader: (post, read)
  std::vector<int> signal_channel_;  // per rank: the channel its signals come from (-1: none yet)
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
