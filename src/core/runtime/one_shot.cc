#include "core/runtime/one_shot.h"

#include <sched.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "algorithms/schedule_builder.h"
#include "algorithms/tuner.h"
#include "core/base/clock.h"
#include "core/base/log.h"
#include "core/net/failure_notice.h"
#include "device/cpu/reduce_kernels.h"
#include "transport/cross_memory.h"

namespace braid {
namespace {

// Marks a signature as the one-shot path's (a garbage or stale board word never matches).
constexpr uint64_t kSignatureMagic = 0x6f73;  // "os", in the top 16 bits of word 0
// How long one sleep lasts before the waiter checks for failures again: bounds how late a peer's
// death, an abort or a revoke is noticed (the post itself wakes the sleeper at once).
constexpr int64_t kSleepSliceUs = 5000;
// What a call waits for a peer to do (Call::await).
enum class Wait {
  kPost,      // post this call
  kConsumed,  // read this rank's earlier posts, which this post overwrites
};

uint64_t PayloadBytes(const OpDesc& d, int nranks, int rank) {
  const uint64_t block = d.count * DataTypeSize(d.dtype);
  switch (d.kind) {
    case CollKind::kAllReduce:
    case CollKind::kReduce:
    case CollKind::kAllGather:
      return block;
    case CollKind::kBroadcast:
      return rank == d.root ? block : 0;
    case CollKind::kReduceScatter:
    case CollKind::kAllToAll:
      return block * static_cast<uint64_t>(nranks);
    default:
      return 0;  // barrier
  }
}

// The call as every rank must have made it. Not the payload size (a broadcast's root posts one,
// the others none) and not the pre-multiplied sum's scalar (each rank may scale by its own, as
// in NCCL).
BoardSignature SignatureOf(const OpDesc& d, int nranks, bool two_shot, bool by_ref) {
  BoardSignature s;
  s.words[0] = kSignatureMagic << 48 | static_cast<uint64_t>(d.kind) |
               static_cast<uint64_t>(d.dtype) << 8 | static_cast<uint64_t>(d.base_op) << 16 |
               uint64_t{d.avg} << 24 | uint64_t{d.premul} << 25 | uint64_t{two_shot} << 26 |
               uint64_t{by_ref} << 27;
  s.words[1] = d.count;
  s.words[2] = static_cast<uint64_t>(static_cast<uint32_t>(d.root)) |
               static_cast<uint64_t>(static_cast<uint32_t>(nranks)) << 32;
  return s;
}

// The call a peer's signature stands for, for messages ("allreduce(count=8, float, sum)").
std::string DescribeSignature(const BoardSignature& s) {
  const uint64_t w = s.words[0];
  const auto kind = static_cast<unsigned>(w & 0xff), dtype = static_cast<unsigned>(w >> 8 & 0xff),
             op = static_cast<unsigned>(w >> 16 & 0xff);
  if (w >> 48 != kSignatureMagic || kind >= static_cast<unsigned>(kNumCollKinds) ||
      !IsValidDataType(static_cast<int>(dtype)) || op >= static_cast<unsigned>(braidNumOps)) {
    char buf[48];
    std::snprintf(buf, sizeof(buf), "%llx", static_cast<unsigned long long>(w));
    return std::string("a call this rank cannot read (signature word 0x") + buf + ")";
  }
  OpDesc d;
  d.kind = static_cast<CollKind>(kind);
  d.dtype = static_cast<DataType>(dtype);
  d.base_op = static_cast<ReduceOp>(op);
  d.avg = (w >> 24 & 1) != 0;
  d.premul = (w >> 25 & 1) != 0;
  d.count = s.words[1];
  d.root = static_cast<int32_t>(static_cast<uint32_t>(s.words[2]));
  return DescribeCall(d) + (w >> 26 & 1 ? " (two-shot)" : "") +
         (w >> 27 & 1 ? " (by reference)" : "");
}

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// How many bytes the largest post of `d` on any rank holds (a broadcast's root posts the block,
// the others nothing): every rank places the call by it (LocalBoard::outbox).
uint64_t LargestPost(const OpDesc& d, int nranks) {
  const uint64_t block = d.count * DataTypeSize(d.dtype);
  switch (d.kind) {
    case CollKind::kReduceScatter:
    case CollKind::kAllToAll:
      return block * static_cast<uint64_t>(nranks);
    case CollKind::kBarrier:
      return 0;
    default:
      return block;
  }
}

// Whether the board runs all-reduce `d` two-shot (BRAID_BOARD_TWO_SHOT, config.h): each rank
// folds its 1/N of the message from every post and posts that part (a second post), then copies
// the N parts out. One-shot, every rank folds the whole message from N posts: N x the bytes read
// per rank where two-shot reads about 2 x, for one more wait for the peers. Only for a call on a
// large buffer (it runs alone, so its second post takes the next number: local_board.h's rules
// hold as for two calls) and with a part for every rank. `mode`: -1 auto, 0 never, 1 always.
// Auto: from 3 ranks (on 2 both read about 2 x) and kTwoShotBytes, where the bytes it saves
// outweigh the wait (measured, docs/performance.md: 3, 4 and 8 ranks on 2 cores, even at 16 KiB,
// one-shot ahead below). Every rank decides alike: the inputs are in the signature, and the mode
// is rank 0's (and in the signature too).
constexpr uint64_t kTwoShotBytes = 32 << 10;
bool TwoShot(const OpDesc& d, int nranks, BoardPlace place, int mode) {
  if (d.kind != CollKind::kAllReduce || place != BoardPlace::kBuffer ||
      d.count < static_cast<uint64_t>(nranks))
    return false;
  if (mode != -1) return mode == 1;
  return nranks >= 3 && d.count * DataTypeSize(d.dtype) >= kTwoShotBytes;
}

// An all-gather whose block is larger than the board's buffers runs in rounds (RoundsOf), a
// piece of every rank's block per round: each rank posts its piece and copies every rank's out.
// Without a BRAID_ALGO rule only where the host's ranks outnumber its cores, like a two-shot
// all-reduce in rounds (measured, docs/performance.md "All-gather in rounds"); each rank copies
// its block in once and N - 1 blocks out, where the engine's ring copies N - 1 blocks in and out.
bool GathersInRounds(const OpDesc& d, int nranks, uint64_t capacity) {
  return d.kind == CollKind::kAllGather && LargestPost(d, nranks) > capacity;
}

// Whether the board runs `d` by reference (BRAID_SINGLE_COPY_BYTES, braidComm::singleCopyBytes):
// each rank posts the addresses of its buffers instead of its data, and every rank reads what it
// needs straight out of its peers' buffers with one kernel copy (transport/cross_memory.h), then
// posts that it is done, so that no rank returns while a peer may still read its buffers. Data
// crosses memory once instead of twice (into the board, out of it): for an all-gather or a
// broadcast the copy lands in the receive buffer, for a reduction it lands in a small scratch
// that the fold reads while it is in cache. All-reduce goes two-shot: each rank folds its 1/N part
// from every rank's send buffer into its receive buffer, posts, then copies the other parts
// from their owners' receive buffers (Call::finishByReference). Every rank decides alike: the
// inputs are in the signature (which carries the choice too) and the threshold is agreed.
bool ByReference(const braidComm& comm, const OpDesc& d, int nranks) {
  const uint64_t from = comm.singleCopyBytes();
  if (from == 0) return false;
  switch (d.kind) {
    case CollKind::kAllReduce:
    case CollKind::kAllGather:
    case CollKind::kReduceScatter:
    case CollKind::kBroadcast:
      return LargestPost(d, nranks) >= from;
    default:
      return false;
  }
}

// What a call by reference posts: where this rank's buffers are in its own process, and its
// pre-multiplied sum's scalar (each rank may have its own; a reader scales what it reads).
struct RefPost {
  uint64_t send = 0;
  uint64_t recv = 0;
  uint8_t scalar[8] = {};
};
static_assert(sizeof(RefPost) <= 32, "a reference post must fit a board entry (shm_layout.h)");
// Elements a fold by reference reads from one peer at a time: three scratch pieces of this size
// (the piece read, the next one, this rank's own input when in place) stay in a core's L2.
constexpr uint64_t kFoldPieceBytes = 128 << 10;

// A two-shot all-reduce larger than the board's buffers runs in rounds, one two-shot call's
// posts per piece of the message (RoundsOf): as many rounds as the buffers need, in pieces of
// even size. Without a BRAID_ALGO rule it does at every size when ranks outnumber the host's
// cores, where it measured ahead of the engine (whose progress threads share the cores with the
// callers, docs/performance.md "Two-shot in rounds"); with a core per rank the engine's
// pipelined ring keeps large calls (not measured here: this host has 2 cores).
uint32_t RoundsOf(uint64_t bytes, uint64_t capacity) {
  return bytes <= capacity ? 1 : static_cast<uint32_t>((bytes + capacity - 1) / capacity);
}

// One call on the board: post() writes this rank's contribution, finish() waits for every peer's,
// compares the signatures and reads. A rank posts a batch of calls before it finishes any
// (RunOneShotCalls), which is what makes a group of small calls cost one wait.
class Call {
 public:
  Call(braidComm& comm, const OpDesc& d, uint32_t seq, uint32_t number)
      : comm_(comm),
        d_(d),
        board_(*comm.board()),
        seq_(seq),
        number_(number),
        n_(comm.nranks()),
        me_(comm.rank()),
        by_ref_(ByReference(comm, d, n_)),
        place_(by_ref_ ? BoardPlace::kEntry : board_.placeFor(LargestPost(d, comm.nranks()))),
        two_shot_(!by_ref_ && TwoShot(d, n_, place_, comm.config().board_two_shot)),
        rounds_(two_shot_ || (!by_ref_ && GathersInRounds(d, n_, board_.capacity()))
                    ? RoundsOf(d.count * DataTypeSize(d.dtype), board_.capacity())
                    : 1),
        mine_(SignatureOf(d, comm.nranks(), two_shot_, by_ref_)) {}

  // A call by reference posts in entries but, like a large call, runs alone: it makes more than
  // one post, and its later ones wait for every peer.
  bool small() const { return !by_ref_ && place_ != BoardPlace::kBuffer; }
  // Starts loading every peer's post of this call (LocalBoard::prefetch).
  void prefetch() const {
    for (int p = 0; p < n_; ++p)
      if (p != me_) board_.prefetch(p, seq_, place_);
  }
  // The last post number this call takes (a two-shot call takes two per round; one by reference
  // takes its addresses' post and a "done" post, and an all-reduce one more between them).
  uint32_t lastSeq() const {
    if (by_ref_) return seq_ + (d_.kind == CollKind::kAllReduce ? 2 : 1);
    return two_shot_ ? seq_ + 2 * rounds_ - 1 : seq_ + rounds_ - 1;
  }
  uint32_t number() const { return number_; }
  Status post();
  Status finish();

 private:
  std::string context() const {
    // Numbered from 0 like the engine's collectives, in a sequence of their own (an engine
    // operation queued earlier takes its number when it starts, which may be after this call).
    return comm_.where() + ": " + DescribeCall(d_) + " (board call #" + std::to_string(number_) +
           "): ";
  }
  // Writes this rank's contribution to post `seq`: its payload, or round `round`'s piece of it
  // (a two-shot all-reduce in rounds), at the start of the post's buffer.
  void fillOutbox(uint32_t seq, uint32_t round);
  // Elements of round `round`'s piece of a two-shot all-reduce (all of them in one round).
  ElemRange piece(uint32_t round) const { return EvenPart(d_.count, rounds_, round); }
  // Waits until `ready()` holds, a condition on `peer`'s side of the board: spins, then calls
  // `sleep(slice_us)` (which sleeps until the condition may hold, or the slice passes) until
  // BRAID_TIMEOUT from the first wait of this call that had to sleep. `what` says what the peer
  // has not done, for the timeout's message.
  template <typename Ready, typename Sleep>
  Status await(int peer, Ready ready, Sleep sleep, Wait what);
  // Waits for `peer`'s post `seq` (of this call).
  Status waitFor(int peer, uint32_t seq);
  // Waits for every peer's post `seq`, from the next rank on (so that ranks do not all poll rank
  // 0 first).
  Status waitForAll(uint32_t seq);
  // Makes this rank's later post `seq` of the call (its outbox written) visible and waits for
  // every peer's.
  Status postAndWaitForAll(uint32_t seq);
  // Makes this rank's later post `seq` of the call visible (its outbox written) and wakes the
  // peers that sleep on it.
  void publishPost(uint32_t seq);
  // Waits until every peer has consumed what post `seq` overwrites (its entry, and its payload
  // where it lives on a large buffer).
  Status awaitFree(uint32_t seq, BoardPlace place);
  // The rest of a two-shot all-reduce, once every post of this call is known to match: round 0's
  // second post, then every later round's two posts.
  Status finishTwoShot();
  // Round `round` of a two-shot all-reduce from its first post (`first`, made by every rank):
  // fold this rank's part into the second post, then copy every rank's part out.
  Status secondShot(uint32_t round, uint32_t first);
  // The rest of an all-gather in rounds (GathersInRounds), once round 0's posts matched.
  Status finishGatherInRounds();
  // The rest of a call by reference (ByReference), once its first post matched on every rank.
  Status finishByReference();
  // Post `seq` of a call by reference (no payload: "this rank is past this point"), then every
  // peer's.
  Status postMark(uint32_t seq);
  // Copies `bytes` at `remote` in `peer`'s process to `dst`.
  Status pull(int peer, uint64_t remote, void* dst, uint64_t bytes);
  // dst = rank-order fold of `count` elements at byte `offset` of every rank's send buffer
  // (scaled by its scalar for a pre-multiplied sum), read piece by piece.
  Status foldByReference(std::span<const RefPost> refs, uint64_t offset, std::byte* dst,
                         uint64_t count);
  // A failure noticed while waiting: a peer's death, an abort or revoke of this communicator, or
  // another rank's failure announced to this one. Ok when none.
  Status failureSeen(int peer);
  Status fail(const Status& st, const std::optional<FailureCause>& local);
  Status timedOut(int peer, Wait what);
  void consume();
  // dst = rank-order fold of block `offset` (bytes) of every rank's post `seq`, `count` elements.
  void fold(uint32_t seq, uint64_t offset, void* dst, uint64_t count) const;

  braidComm& comm_;
  const OpDesc& d_;
  LocalBoard& board_;
  const uint32_t seq_;     // its (first) post's number
  const uint32_t number_;  // the call's, counted from 0 (messages)
  const int n_;
  const int me_;
  const bool by_ref_;
  const BoardPlace place_;
  const bool two_shot_;
  const uint32_t rounds_;  // of a two-shot all-reduce or an all-gather in rounds; 1 otherwise
  const BoardSignature mine_;
  // Set when a wait first goes past spinning, for the call (or the round of a two-shot call in
  // rounds: a call of many rounds may take longer than BRAID_TIMEOUT while every rank keeps up).
  std::optional<Deadline> deadline_;
};

void Call::fillOutbox(uint32_t seq, uint32_t round) {
  if (by_ref_) {
    RefPost ref;
    ref.send = reinterpret_cast<uint64_t>(d_.sendbuf);
    ref.recv = reinterpret_cast<uint64_t>(d_.recvbuf);
    std::memcpy(ref.scalar, d_.scalar, sizeof(ref.scalar));
    std::memcpy(board_.outbox(seq, place_), &ref, sizeof(ref));
    return;
  }
  uint64_t bytes = PayloadBytes(d_, n_, me_);
  if (bytes == 0) return;
  const uint64_t esize = DataTypeSize(d_.dtype);
  const auto* in = static_cast<const std::byte*>(d_.sendbuf);
  if (rounds_ > 1) {
    const ElemRange x = piece(round);
    in += x.off * esize;
    bytes = x.len * esize;
  }
  std::byte* out = board_.outbox(seq, place_);
  const bool reduces = d_.kind == CollKind::kAllReduce || d_.kind == CollKind::kReduce ||
                       d_.kind == CollKind::kReduceScatter;
  if (reduces && d_.premul)
    ScaleKernel(d_.dtype, in, out, bytes / esize, d_.scalar);
  else
    std::memcpy(out, in, bytes);
}

Status Call::failureSeen(int peer) {
  if (board_.dead(peer)) return board_.deathError(peer);
  if (comm_.asyncErrorCode() != braidSuccess) return comm_.asyncError();
  if (auto cause = comm_.causes().first(); cause && !cause->weak())
    return Status::Error(cause->errorClass(), cause->describe());
  return Status::Ok();
}

Status Call::fail(const Status& st, const std::optional<FailureCause>& local) {
  // The cause names the call by its number on the board ("allreduce #3"): board calls and engine
  // collectives are numbered apart (see context()).
  // An abort or revoke of this communicator already marked it failed and told the peers.
  if (comm_.asyncErrorCode() != braidSuccess) return Status(st).prepend(context());
  const Status final = comm_.failWithCause(Status(st).prepend(context()), context(),
                                           CollKindName(d_.kind), number_, local);
  // Like an engine failure: the operations in flight (non-blocking calls, views) end with it too.
  comm_.abortOperations(final);
  return final;
}

template <typename Ready, typename Sleep>
Status Call::await(int peer, Ready ready, Sleep sleep, Wait what) {
  if (ready()) return Status::Ok();
  // Spin while the peer is likely on its way: it is, on a host with a core per rank, unless
  // the program is unbalanced. With more ranks than cores a spinning rank takes the core its
  // peer needs, so it yields instead.
  // Spinning found nothing yet: from here the hang report names the rank this call waits for.
  comm_.boardProgress().waiting_on.store(peer, std::memory_order_relaxed);
  const bool yield = n_ > comm_.hostCpus();
  const int64_t spin_us = comm_.config().spin_us;
  // Spinning, the clock is read only every 64 polls (a post usually lands sooner, and a clock
  // read costs as much as a few polls).
  int64_t start = 0;
  for (uint32_t i = 1;; ++i) {
    if (ready()) return Status::Ok();
    // A sched_yield may take a whole time slice: then every round reads the clock.
    if (yield || (i & 63) == 0) {
      const int64_t now = NowMicros();
      if (start == 0) start = now;
      if (now - start >= spin_us) break;
    }
    if (yield)
      sched_yield();
    else
      CpuRelax();
  }
  // About to sleep: a peer may sleep on one of this rank's posts of the batch too.
  board_.publish();
  if (!deadline_) deadline_ = Deadline::After(comm_.config().timeout_ms);
  const Deadline deadline = *deadline_;
  for (;;) {
    sleep(kSleepSliceUs);
    if (ready()) return Status::Ok();
    // A death seen here was reported as the cause by deathError.
    if (Status st = failureSeen(peer); !st.ok()) return fail(st, std::nullopt);
    // The peer is not where this call needs it but sends this rank data for an operation this
    // rank has not issued (e.g. a call on a split view where this rank called its root): it is
    // in another call and both would wait for BRAID_TIMEOUT.
    if (comm_.peerAheadOnStreams(peer) && !ready())
      return fail(
          InvalidUsage("call mismatch: rank " + std::to_string(peer) +
                       " is in an operation this rank has not issued (it sent data for it) "
                       "instead of this call: another collective, a call on a split view where "
                       "this rank called its root, or this call in another form (non-blocking, "
                       "or inside a group, where this rank made it blocking: small blocking calls "
                       "run on the shared-memory board, so every rank must use the same form)"),
          std::nullopt);
    if (deadline.expired()) return timedOut(peer, what);
  }
}

Status Call::waitFor(int peer, uint32_t seq) {
  return await(
      peer, [&] { return board_.posted(peer, seq); },
      [&](int64_t us) { board_.sleepUntilPosted(peer, seq, us); }, Wait::kPost);
}

Status Call::waitForAll(uint32_t seq) {
  for (int k = 1; k < n_; ++k) BRAID_RETURN_IF_ERROR(waitFor((me_ + k) % n_, seq));
  return Status::Ok();
}

void Call::publishPost(uint32_t seq) {
  comm_.boardProgress().started.store(seq, std::memory_order_release);
  board_.post(seq, mine_);
  board_.publish();
}

Status Call::postAndWaitForAll(uint32_t seq) {
  publishPost(seq);
  return waitForAll(seq);
}

Status Call::awaitFree(uint32_t seq, BoardPlace place) {
  // What post `seq` overwrites must have been read by every peer (local_board.h): the entry and
  // a small slot were post seq - kEntries's, a large buffer post seq - 2's at the latest. Peers
  // that keep up have (a peer posted seq - 1 only after reading seq - 2, and this rank saw that
  // post), so this costs a load of each peer's `consumed` word every kEntries small calls.
  const uint32_t entry_free = seq - LocalBoard::kEntries;
  for (int k = 1; k < n_; ++k) {
    const int peer = (me_ + k) % n_;
    BRAID_RETURN_IF_ERROR(await(
        peer, [&] { return board_.consumed(peer, entry_free); },
        [&](int64_t us) { board_.sleepUntilConsumed(peer, entry_free, us); }, Wait::kConsumed));
  }
  if (place == BoardPlace::kBuffer) {
    const uint32_t buffer_free = seq - 2;
    for (int k = 1; k < n_; ++k) {
      const int peer = (me_ + k) % n_;
      BRAID_RETURN_IF_ERROR(await(
          peer, [&] { return board_.consumed(peer, buffer_free); },
          [&](int64_t us) { board_.sleepUntilConsumed(peer, buffer_free, us); }, Wait::kConsumed));
    }
  }
  return Status::Ok();
}

Status Call::post() {
  BRAID_RETURN_IF_ERROR(awaitFree(seq_, place_));
  fillOutbox(seq_, 0);
  board_.post(seq_, mine_);
  return Status::Ok();
}

Status Call::finishTwoShot() {
  for (uint32_t round = 0;; ++round) {
    const uint32_t first = seq_ + 2 * round;
    BRAID_RETURN_IF_ERROR(secondShot(round, first));
    if (round + 1 == rounds_) return Status::Ok();
    // The next round's first post, to this rank's buffer of `first`: every peer has read that
    // (folded its part) once it posted first + 1, which this rank waited for, so the wait costs a
    // load. Every rank posts it only after this round's every post matched (the call's
    // signature): no round can differ from round 0.
    const uint32_t next = first + 2;
    deadline_.reset();
    BRAID_RETURN_IF_ERROR(awaitFree(next, place_));
    fillOutbox(next, round + 1);
    BRAID_RETURN_IF_ERROR(postAndWaitForAll(next));
  }
}

Status Call::secondShot(uint32_t round, uint32_t first) {
  // The second post goes to this rank's other large buffer, last used by post first - 1 at the
  // latest, which every peer consumed before it posted `first` (a large call runs alone): the
  // wait costs a load. Its part: this rank's 1/N of the piece's elements, folded in rank order
  // from every post (the bits of the one-shot fold), at its place in the buffer.
  const uint32_t second = first + 1;
  BRAID_RETURN_IF_ERROR(awaitFree(second, place_));
  const uint64_t esize = DataTypeSize(d_.dtype);
  const ElemRange x = piece(round);
  const auto n = static_cast<uint64_t>(n_);
  const ElemRange part = EvenPart(x.len, n, static_cast<uint64_t>(me_));
  fold(first, part.off * esize, board_.outbox(second, place_) + part.off * esize, part.len);
  // Every rank's `first` is read: a peer may overwrite it with the next round's first post while
  // this rank waits for the second posts.
  board_.consume(first);
  BRAID_RETURN_IF_ERROR(postAndWaitForAll(second));
  // Every part from its owner's post (this rank's own from its own).
  auto* recv = static_cast<std::byte*>(d_.recvbuf) + x.off * esize;
  for (uint64_t r = 0; r < n; ++r) {
    const ElemRange y = EvenPart(x.len, n, r);
    std::memcpy(recv + y.off * esize,
                board_.inbox(static_cast<int>(r), second, place_) + y.off * esize, y.len * esize);
  }
  board_.consume(second);
  return Status::Ok();
}

Status Call::finishGatherInRounds() {
  const uint64_t esize = DataTypeSize(d_.dtype);
  const uint64_t block = d_.count * esize;
  auto* recv = static_cast<std::byte*>(d_.recvbuf);
  for (uint32_t round = 0;; ++round) {
    const uint32_t s = seq_ + round;
    const bool last = round + 1 == rounds_;
    // Every peer's post of this round is in. The next round's piece goes out first, so that this
    // rank's copy in overlaps its peers' copies out: post s + 1 reuses this rank's buffer of post
    // s - 1, which its peers consume as soon as they have copied that round out.
    if (!last) {
      deadline_.reset();
      BRAID_RETURN_IF_ERROR(awaitFree(s + 1, place_));
      fillOutbox(s + 1, round + 1);
      publishPost(s + 1);
    }
    const ElemRange x = piece(round);
    for (int r = 0; r < n_; ++r) {
      if (r == me_ && d_.in_place) continue;  // this rank's block is its send buffer
      std::memcpy(recv + static_cast<uint64_t>(r) * block + x.off * esize,
                  board_.inbox(r, s, place_), x.len * esize);
    }
    board_.consume(s);
    if (last) return Status::Ok();
    BRAID_RETURN_IF_ERROR(waitForAll(s + 1));
  }
}

Status Call::finishByReference() {
  // Every rank's addresses, copied: once this rank consumes the post its entry may be reused.
  // (A call by reference moves at least BRAID_SINGLE_COPY_BYTES: one allocation is nothing.)
  std::vector<RefPost> refs(static_cast<size_t>(n_));
  for (int r = 0; r < n_; ++r)
    std::memcpy(&refs[static_cast<size_t>(r)], board_.inbox(r, seq_, place_), sizeof(RefPost));
  board_.consume(seq_);
  const uint64_t esize = DataTypeSize(d_.dtype);
  const uint64_t block = d_.count * esize;
  auto* recv = static_cast<std::byte*>(d_.recvbuf);
  const auto me = static_cast<uint64_t>(me_);
  uint32_t next = seq_ + 1;
  // Peers from the next rank on, so that the ranks do not all read rank 0 first.
  const auto peer = [&](int k) { return (me_ + k) % n_; };
  switch (d_.kind) {
    case CollKind::kAllGather:
      // In place, this rank's block is its send buffer already; peers read it, this rank writes
      // only the others.
      for (int k = 1; k < n_; ++k) {
        const int r = peer(k);
        BRAID_RETURN_IF_ERROR(pull(r, refs[static_cast<size_t>(r)].send,
                                   recv + static_cast<uint64_t>(r) * block, block));
      }
      if (!d_.in_place) std::memcpy(recv + me * block, d_.sendbuf, block);
      break;
    case CollKind::kBroadcast:
      if (me_ != d_.root)
        BRAID_RETURN_IF_ERROR(pull(d_.root, refs[static_cast<size_t>(d_.root)].send, recv, block));
      else if (!d_.in_place)
        std::memcpy(recv, d_.sendbuf, block);
      break;
    case CollKind::kReduceScatter:
      // In place the receive buffer is this rank's block of its send buffer, which only this
      // rank reads (each peer reads its own block).
      BRAID_RETURN_IF_ERROR(foldByReference(refs, me * block, recv, d_.count));
      break;
    case CollKind::kAllReduce: {
      // This rank's part, folded from every send buffer. In place, it overwrites only that part
      // of its send buffer, which no peer reads (each reads its own part).
      const auto n = static_cast<uint64_t>(n_);
      const ElemRange part = EvenPart(d_.count, n, me);
      BRAID_RETURN_IF_ERROR(
          foldByReference(refs, part.off * esize, recv + part.off * esize, part.len));
      // Every part is folded before any rank copies one, or writes one over its own send buffer
      // (in place) that its owner has yet to read.
      BRAID_RETURN_IF_ERROR(postMark(next));
      board_.consume(next++);
      for (int k = 1; k < n_; ++k) {
        const int r = peer(k);
        const ElemRange y = EvenPart(d_.count, n, static_cast<uint64_t>(r));
        BRAID_RETURN_IF_ERROR(pull(r, refs[static_cast<size_t>(r)].recv + y.off * esize,
                                   recv + y.off * esize, y.len * esize));
      }
      break;
    }
    default:
      return InternalError(context() + "no by-reference form for this collective");
  }
  // Peers read this rank's buffers until they post this: only then may the call return (and its
  // caller reuse or free them).
  BRAID_RETURN_IF_ERROR(postMark(next));
  board_.consume(next);
  return Status::Ok();
}

Status Call::postMark(uint32_t seq) {
  // The entry of post seq - kEntries must be read: a load (every peer posted since).
  BRAID_RETURN_IF_ERROR(awaitFree(seq, place_));
  return postAndWaitForAll(seq);
}

Status Call::pull(int peer, uint64_t remote, void* dst, uint64_t bytes) {
  if (bytes == 0) return Status::Ok();
  const int err = ReadPeerMemory(comm_.rankInfos()[static_cast<size_t>(peer)].pid, remote, dst,
                                 static_cast<size_t>(bytes));
  if (err == 0) return Status::Ok();
  // Gone: its pid names no process (or a zombie's, which has no memory left to read).
  if (err == ESRCH || board_.dead(peer)) return fail(board_.deathError(peer), std::nullopt);
  return fail(
      SystemError("reading " + std::to_string(bytes) + " bytes of rank " + std::to_string(peer) +
                  "'s buffer in place (cross-memory attach) failed: " + std::strerror(err) +
                  (err == EFAULT ? " (a buffer smaller than the call's count, on that "
                                   "rank or this one?)"
                                 : "")),
      std::nullopt);
}

Status Call::foldByReference(std::span<const RefPost> refs, uint64_t offset, std::byte* dst,
                             uint64_t count) {
  const uint64_t esize = DataTypeSize(d_.dtype);
  const uint64_t per = std::max<uint64_t>(1, kFoldPieceBytes / esize);
  std::vector<std::byte>& scratch = comm_.boardScratch();
  scratch.resize(3 * per * esize);
  std::byte* const first = scratch.data();
  std::byte* const other = first + per * esize;
  std::byte* const own_copy = other + per * esize;
  const auto* send = static_cast<const std::byte*>(d_.sendbuf);
  for (uint64_t done = 0; done < count; done += per) {
    const uint64_t len = std::min(per, count - done);
    const uint64_t at = offset + done * esize;
    const uint64_t bytes = len * esize;
    std::byte* out = dst + done * esize;
    // In place `out` is this rank's own input, which the fold overwrites before it reaches this
    // rank's turn: read it first.
    const std::byte* own = send + at;
    if (d_.in_place) {
      std::memcpy(own_copy, own, bytes);
      own = own_copy;
    }
    // Rank r's piece, in `tmp` unless it is this rank's and needs no scaling.
    const auto input = [&](int r, std::byte* tmp, const std::byte** in) -> Status {
      const RefPost& ref = refs[static_cast<size_t>(r)];
      if (r == me_) {
        *in = own;
      } else {
        BRAID_RETURN_IF_ERROR(pull(r, ref.send + at, tmp, bytes));
        *in = tmp;
      }
      if (d_.premul) {
        ScaleKernel(d_.dtype, *in, tmp, len, ref.scalar);
        *in = tmp;
      }
      return Status::Ok();
    };
    const std::byte* x = nullptr;
    const std::byte* y = nullptr;
    BRAID_RETURN_IF_ERROR(input(0, first, &x));
    BRAID_RETURN_IF_ERROR(input(1, other, &y));
    ReduceKernel(d_.dtype, d_.base_op, x, y, out, len);
    for (int r = 2; r < n_; ++r) {
      BRAID_RETURN_IF_ERROR(input(r, other, &y));
      ReduceKernel(d_.dtype, d_.base_op, out, y, out, len);
    }
    if (d_.avg) DivideKernel(d_.dtype, out, len, static_cast<uint64_t>(n_));
  }
  return Status::Ok();
}

Status Call::timedOut(int peer, Wait what) {
  const bool posting = what == Wait::kPost;
  const int64_t timeout_s = comm_.config().timeout_ms / 1000;
  const Status st = TimeoutError(
      "rank " + std::to_string(peer) + " did not " +
      (posting ? "make this call" : "read this rank's earlier calls") + " within " +
      std::to_string(timeout_s) +
      " s (BRAID_TIMEOUT): it is stopped, hung, or it called a different collective or count "
      "(every rank must make the same calls in the same order)");
  // Another rank named the cause already (its notice arrived while this one waited).
  if (comm_.causes().hasStrong()) return fail(st, std::nullopt);
  // Every rank waits for every post, so every survivor sees the missing rank itself: whether it
  // answers a liveness probe tells a stopped process from one that runs but is elsewhere.
  const RankInfo& info = comm_.rankInfos()[static_cast<size_t>(peer)];
  FailureCause c;
  c.rank = peer;
  c.pid = info.pid;
  c.host = info.hostname;
  c.seconds = static_cast<uint32_t>(timeout_s);
  c.reason = ProbeAlive(comm_.controlPeers(), peer, Deadline::After(kLivenessProbeMs))
                 ? FailureCause::Reason::kNoProgress
                 : FailureCause::Reason::kStalled;
  // A peer that has not read an earlier call but runs may itself wait for a third rank's post
  // (it posted ahead in a group): that rank, not this peer, is the cause, and the ranks waiting
  // for its post name it.
  if (!posting && c.reason == FailureCause::Reason::kNoProgress) return fail(st, std::nullopt);
  return fail(st, c);
}

void Call::fold(uint32_t seq, uint64_t offset, void* dst, uint64_t count) const {
  const auto at = [&](int r) { return board_.inbox(r, seq, place_) + offset; };
  // n_ >= 2: a communicator of one rank has no board (braidComm::connectTransports).
  ReduceKernel(d_.dtype, d_.base_op, at(0), at(1), dst, count);
  for (int r = 2; r < n_; ++r) ReduceKernel(d_.dtype, d_.base_op, dst, at(r), dst, count);
  if (d_.avg) DivideKernel(d_.dtype, dst, count, static_cast<uint64_t>(n_));
}

void Call::consume() {
  const uint64_t block = d_.count * DataTypeSize(d_.dtype);
  auto* recv = static_cast<std::byte*>(d_.recvbuf);
  switch (d_.kind) {
    case CollKind::kAllReduce:
      fold(seq_, 0, recv, d_.count);
      break;
    case CollKind::kReduce:
      if (me_ == d_.root) fold(seq_, 0, recv, d_.count);
      break;
    case CollKind::kReduceScatter:
      fold(seq_, static_cast<uint64_t>(me_) * block, recv, d_.count);
      break;
    case CollKind::kAllGather:
      for (int r = 0; r < n_; ++r)
        std::memcpy(recv + static_cast<uint64_t>(r) * block, board_.inbox(r, seq_, place_), block);
      break;
    case CollKind::kAllToAll:
      for (int r = 0; r < n_; ++r)
        std::memcpy(recv + static_cast<uint64_t>(r) * block,
                    board_.inbox(r, seq_, place_) + static_cast<uint64_t>(me_) * block, block);
      break;
    case CollKind::kBroadcast:
      if (me_ != d_.root)
        std::memcpy(recv, board_.inbox(d_.root, seq_, place_), block);
      else if (!d_.in_place)
        std::memcpy(recv, d_.sendbuf, block);
      break;
    default:
      break;  // barrier
  }
}

Status Call::finish() {
  // Every peer's post before any payload is read: the signatures must all agree.
  BRAID_RETURN_IF_ERROR(waitForAll(seq_));
  for (int k = 1; k < n_; ++k) {
    const int peer = (me_ + k) % n_;
    const BoardSignature theirs = board_.signature(peer, seq_);
    if (theirs == mine_) continue;
    // Every rank finds a difference (if a differs from b, every rank differs from one of them)
    // at the same call, and every rank has posted it: the board stays in step and the
    // communicator usable, as after any argument error.
    board_.consume(seq_);
    return InvalidUsage(context() + "call mismatch: rank " + std::to_string(peer) + " called " +
                        DescribeSignature(theirs) + " at this point; every rank must make " +
                        "the same calls in the same order (nothing was transferred)");
  }
  // Every post of the call matches: a two-shot call goes on to its second post (and consumes
  // both at the end), so every rank takes the same numbers; so do a call by reference and an
  // all-gather in rounds.
  if (two_shot_) return finishTwoShot();
  if (by_ref_) return finishByReference();
  if (rounds_ > 1) return finishGatherInRounds();
  consume();
  board_.consume(seq_);
  return Status::Ok();
}

// One call of a batch, constructed in place when posted. Not std::optional<Call>: an array of
// those is zero-filled whole on construction (1.5 KiB for kEntries slots, with GCC), which was a
// tenth of a small call's time.
class CallSlot {
 public:
  CallSlot() {}  // leaves call_ unconstructed
  CallSlot(const CallSlot&) = delete;
  CallSlot& operator=(const CallSlot&) = delete;
  ~CallSlot() { reset(); }

  Call& emplace(braidComm& comm, const OpDesc& d, uint32_t seq, uint32_t number) {
    reset();
    new (&call_) Call(comm, d, seq, number);
    live_ = true;
    return call_;
  }
  void reset() {
    if (live_) call_.~Call();
    live_ = false;
  }
  explicit operator bool() const { return live_; }
  Call* operator->() { return &call_; }

 private:
  union {
    Call call_;
  };
  bool live_ = false;
};

}  // namespace

bool OneShotTakes(const braidComm& comm, const OpDesc& d) {
  const LocalBoard* board = comm.board();
  if (!board || d.codec.id != CodecId::kNone) return false;
  switch (d.kind) {
    case CollKind::kAllReduce:
    case CollKind::kReduce:
    case CollKind::kBroadcast:
    case CollKind::kAllGather:
    case CollKind::kReduceScatter:
    case CollKind::kAllToAll:
    case CollKind::kBarrier:
      break;
    default:
      return false;
  }
  const int n = comm.nranks();
  const uint64_t block = d.count * DataTypeSize(d.dtype);
  const uint64_t post = LargestPost(d, n);
  const bool by_ref = ByReference(comm, d, n);
  bool fits_default =
      by_ref || post <= OneShotDefaultLimit(board->capacity(), n, comm.hostCpus(), d.kind);
  if (!by_ref && post > board->capacity()) {
    // Only in rounds: a two-shot all-reduce, or an all-gather.
    if (!TwoShot(d, n, BoardPlace::kBuffer, comm.config().board_two_shot) &&
        !GathersInRounds(d, n, board->capacity()))
      return false;
    fits_default = n > comm.hostCpus();
  }
  // BRAID_ALGO: a rule that covers the call decides (CollBytes counts as the tuner does).
  const uint64_t coll_bytes =
      d.kind == CollKind::kAllGather ? block * static_cast<uint64_t>(n) : post;
  if (const std::string* rule = comm.tuner().overrideFor(d.kind, coll_bytes))
    return *rule == kOneShotAlgorithm;
  return fits_default;
}

uint64_t OneShotCoreBytes(CollKind kind) {
  // With a core per rank the engine overtakes the board where its pipelining pays: on the board
  // every rank copies its whole post in, then (once every peer has posted) reads the peers'
  // posts, one after the other, where the engine's ring overlaps one chunk's copy with the next
  // one's. Measured on 2 ranks, board (forced) against engine, 2026-11-27 (docs/performance.md
  // "Re-measured per collective"): all-gather and all-reduce cross over between 16 and 32 KiB
  // (a post of 32 KiB: 1.13-1.62 x the engine's time), reduce-scatter and broadcast between 32
  // and 64 KiB (broadcast reads one post, reduce-scatter a 1/N part of each).
  return kind == CollKind::kBroadcast || kind == CollKind::kReduceScatter ? 32 << 10 : 16 << 10;
}

uint64_t OneShotDefaultLimit(uint64_t capacity, int nranks, int host_cpus, CollKind kind) {
  // With more ranks than cores the engine's progress threads and wake-ups cost more than the
  // board's copies, and the board wins up to its size (3, 4 and 8 ranks on 2 cores).
  return nranks > host_cpus ? capacity : std::min(capacity, OneShotCoreBytes(kind));
}

namespace {

// RunOneShotCalls with room for `kBatch` calls per batch: 1 for a call outside a group
// (RunOneShot), whose one slot is all it constructs and destroys, LocalBoard::kEntries for a group.
template <size_t kBatch>
void RunBoardCalls(braidComm& comm, std::span<const OpDesc* const> calls, Status* results) {
  std::lock_guard<std::mutex> lock(comm.boardMutex());
  braidComm::BoardProgress& progress = comm.boardProgress();
  // A batch: calls posted before the first of them is read, up to kEntries small calls or one
  // large call alone (the rules in local_board.h). Then every post this rank waits for its
  // peers to consume comes before its batch. Why that never deadlocks, whatever batches the
  // ranks choose (even when they place a mismatched call differently): let c be the last post
  // every rank has consumed. A rank that has consumed c exactly is in the batch that starts at
  // c + 1 (posting it, or reading it), so each of its posts waits only for posts up to c to be
  // consumed, which they are: it posts its whole batch, c + 1 included. A rank that has consumed
  // more has posted c + 1 already. So every rank's post c + 1 is made, and every rank consumes
  // c + 1.
  // On the stack: a call outside a group comes through here too, and should not allocate.
  std::array<CallSlot, kBatch> batch;
  size_t nbatch = 0;
  size_t next = 0;
  // The call the hang report names: the first one posted and not yet complete.
  const auto show = [&](const OpDesc& d) {
    progress.kind.store(static_cast<int>(d.kind), std::memory_order_relaxed);
    progress.count.store(d.count, std::memory_order_relaxed);
  };
  const auto failed_earlier = [&](size_t i) {
    Status st = comm.asyncError();
    return st.prepend(comm.where() + ": " + DescribeCall(*calls[i]) +
                      ": not completed because the communicator failed: ");
  };
  while (next < calls.size()) {
    const size_t first = next;
    nbatch = 0;
    uint32_t seq = progress.started.load(std::memory_order_relaxed);
    uint32_t number = progress.calls_started.load(std::memory_order_relaxed);
    while (next < calls.size() && nbatch < batch.size()) {
      CallSlot& call = batch[nbatch];
      const bool small = call.emplace(comm, *calls[next], seq + 1, number).small();
      // A large call runs alone.
      if (!small && nbatch > 0) {
        call.reset();
        break;
      }
      ++nbatch;
      const size_t i = next++;
      if (comm.asyncErrorCode() != braidSuccess) {
        results[i] = failed_earlier(i);
        call.reset();
        continue;
      }
      if (nbatch == 1) show(*calls[i]);
      progress.started.store(++seq, std::memory_order_release);
      progress.calls_started.store(++number, std::memory_order_release);
      results[i] = call->post();
      if (!results[i].ok()) call.reset();  // the communicator failed
      if (!small) break;
    }
    // One fence for the whole batch (wakes a peer that sleeps on any of its posts).
    comm.board()->publish();
    // The peers' posts of a batch are read one call after the other; loading them all first
    // overlaps their cache misses.
    if (nbatch > 1)
      for (size_t k = 0; k < nbatch; ++k)
        if (batch[k]) batch[k]->prefetch();
    for (size_t k = 0; k < nbatch; ++k) {
      if (!batch[k]) continue;  // not posted: its result is set
      show(*calls[first + k]);
      if (comm.asyncErrorCode() != braidSuccess)
        results[first + k] = failed_earlier(first + k);
      else
        results[first + k] = batch[k]->finish();
      progress.waiting_on.store(-1, std::memory_order_relaxed);
      progress.completed.store(batch[k]->lastSeq(), std::memory_order_release);
      progress.calls_completed.store(batch[k]->number() + 1, std::memory_order_release);
      batch[k].reset();
    }
    // Also after a failure (a post or a read that did not complete): nothing is in progress.
    progress.waiting_on.store(-1, std::memory_order_relaxed);
    progress.completed.store(progress.started.load(std::memory_order_relaxed),
                             std::memory_order_release);
    progress.calls_completed.store(progress.calls_started.load(std::memory_order_relaxed),
                                   std::memory_order_release);
  }
}

}  // namespace

void RunOneShotCalls(braidComm& comm, std::span<const OpDesc* const> calls, Status* results) {
  RunBoardCalls<LocalBoard::kEntries>(comm, calls, results);
}

Status RunOneShot(braidComm& comm, const OpDesc& d) {
  const OpDesc* call = &d;
  Status st;
  RunBoardCalls<1>(comm, std::span<const OpDesc* const>(&call, 1), &st);
  return st;
}

}  // namespace braid
