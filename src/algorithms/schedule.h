// The schedule IR: what one rank does for one collective, as data.
//
// An algorithm is a pure function (CollArgs, rank) -> RankSchedule. The engine executes it over
// transports, the simulator predicts its time, the verifier proves it correct, all from the
// same data (DESIGN.md 2.1). Algorithms build the data movement; BuildSchedule (lowering.h)
// completes what every schedule needs the same way (the buffer table, the pre-multiplied sum's
// scaling, AVG's division), so the three consumers read one lowered schedule, nothing on the side.
//
// Execution model (what the engine guarantees and what builders may rely on):
// - A rank's channels run concurrently; the steps of one channel run one after another. A step
//   with `deps` starts only once each named step (of another channel of the same rank) has
//   completed: the only synchronisation between channels. Memory that two channels touch, with a
//   write among the accesses, must be ordered by these edges (the verifier proves it).
// - All ops of a step are posted together and the step completes when all of them have; ops of
//   one step that use the same (peer, direction) are performed in the order listed.
// - Channel c of rank a and channel c of rank b are joined by one FIFO stream in each direction:
//   the k-th send from a to b on channel c is received by the k-th receive (kRecv or
//   kRecvReduce) of b from a on channel c, and both must have the same byte count.
// - Buffers are named by their index in RankSchedule::buffers; a slice counts elements of its
//   buffer's type (bytes for the kUint8 buffers that hold encoded data). A channel index must be
//   < CollArgs::nchannels.
// - One-sided steps (IR v3, docs/schedule-ir.md "One-sided steps") move data through memory a
//   rank exposes to its peers instead of through streams: a window on the host's board
//   (BufferRole::kWindow), or a user buffer the rank exposed for the call (kExpose). A slice whose
//   `rank` names a peer is that peer's memory. The ordering rules: a rank's kSignal makes every
//   write it made before (to its windows, its exposed buffers, or a peer's window by kPut)
//   visible to a peer whose kWait saw the signal's value; a window may be rewritten only once
//   every rank that reads it has signalled (kConsumed) that it is done. The verifier proves both
//   for every schedule, the simulator prices them, and the engine runs them on whichever thread
//   drives (the caller's, with no syscall while peers keep up).
#pragma once

#include <compare>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/base/datatype.h"
#include "core/base/memory_type.h"  // MemoryType: where a buffer lives

namespace braid {

enum class CollKind : uint8_t {
  kAllReduce = 0,
  kReduceScatter,
  kAllGather,
  kBroadcast,
  kReduce,
  kAllToAll,
  kSendRecv,  // a group of point-to-point operations (built by the engine, not by an algorithm)
  kBarrier,
};
inline constexpr int kNumCollKinds = 8;
const char* CollKindName(CollKind k);  // "allreduce", "reducescatter", ... (tuner grammar names)

// Whose a buffer is: the user's (the collective's send and receive buffers, or one buffer per
// call of a point-to-point group), engine memory the schedule needs (scratch), or a window: this
// rank's memory on the host's board, which every peer of the host can read (and write by kPut)
// in place.
enum class BufferRole : uint8_t { kUserSend, kUserRecv, kScratch, kUserP2P, kWindow };

// Where a window lives on the board (transport/board_windows.h): in its post's entry (a few bytes
// in the cache line of the post's flag), in one of kWindowEntries small slots, or in one of two
// large buffers. Post s of a place shares its memory with post s - WindowDepth(place).
enum class WindowPlace : uint8_t { kEntry = 0, kSlot = 1, kBuffer = 2 };
inline constexpr uint32_t kWindowEntries = 16;
constexpr uint32_t WindowDepth(WindowPlace p) {
  return p == WindowPlace::kBuffer ? 2 : kWindowEntries;
}

struct BufferDesc {
  BufferRole role = BufferRole::kScratch;
  DataType dtype = DataType::kFloat32;  // what a slice of it counts
  uint64_t count = 0;                   // elements of dtype (scratch: what the engine allocates)
  MemoryType memory = MemoryType::kHost;
  // kWindow only: its place on the board and its post, counted from the call's first post (the
  // call's epoch, which the engine assigns when the call starts: schedules are independent of it).
  WindowPlace place = WindowPlace::kEntry;
  uint32_t post = 0;
};

// The first slots of every collective schedule's buffer table. Builders use them directly and
// may add scratch buffers of other types (AddBuffer, lowering.h); kScratchBuf has
// RankSchedule::scratch_count elements of the collective's type. A point-to-point group's table
// holds one kUserP2P buffer per call instead, in call order.
enum BufferSlot : uint16_t { kSendBuf = 0, kRecvBuf = 1, kScratchBuf = 2, kFirstUserBuf = 3 };

// Codecs of quantized transfers. Encoded data lives in kUint8 buffers; its size is EncodedBytes
// (codec.h). kTest is lossless and self-checking, for proving the IR, engine, verifier and
// simulator. The block codecs are src/quant's (spec/algorithms.md section 3, layout in
// quant/block_format.h): symmetric (absmax) or asymmetric (min/max) INT8 and INT4, lossy.
enum class CodecId : uint8_t {
  kNone = 0,
  kTest = 1,
  kInt8 = 2,      // symmetric INT8, one fp32 scale per block
  kInt4 = 3,      // symmetric INT4, one fp32 scale per block
  kInt8Asym = 4,  // asymmetric INT8, fp32 scale and min per block
  kInt4Asym = 5,  // asymmetric INT4, fp32 scale and min per block
};

// What a quantize-kind op names: the codec and its block size G (elements per block; block
// codecs only, 0 otherwise). Each op carries its own, so the engine, the simulator and the
// verifier read one value; an encoding must be decoded with the codec and block it was made
// with (the verifier proves it). Converts from a bare CodecId (block 0) for kNone and kTest.
struct Codec {
  constexpr Codec() = default;
  constexpr Codec(CodecId i, uint32_t b = 0) : id(i), block(b) {}  // NOLINT: implicit on purpose
  bool operator==(const Codec&) const = default;
  auto operator<=>(const Codec&) const = default;
  CodecId id = CodecId::kNone;
  uint32_t block = 0;
};

// Whose memory a slice names: this rank's (kLocal), else a peer's window or exposed buffer.
inline constexpr int16_t kLocal = -1;

struct Slice {
  constexpr Slice() = default;
  constexpr Slice(uint16_t b, uint64_t o, uint64_t c, int16_t r = kLocal)
      : buffer(b), rank(r), offset(o), count(c) {}
  uint16_t buffer = kSendBuf;
  int16_t rank = kLocal;  // one-sided ops: the peer whose window or exposed buffer it is
  uint64_t offset = 0;    // elements
  uint64_t count = 0;     // elements
  bool remote() const { return rank != kLocal; }
};

enum class StepOpKind : uint8_t {
  kSend,        // send `src` to `peer`
  kRecv,        // receive from `peer` into `dst`
  kRecvReduce,  // dst = reduce(src, incoming from `peer`); src and dst may be the same slice
  kCopy,        // dst = src (local; src and dst do not overlap unless identical)
  kReduce,      // dst = reduce(src, dst) (local)
  kScale,       // dst = src * the call's scalar (the pre-multiplied sum's prologue)
  kDivide,      // dst = dst / nranks (AVG's epilogue; src unused)
  // Quantized transfers. `codec` names the codec; the typed side counts elements, the encoded
  // side bytes (EncodedBytes of the typed count).
  kQuantize,          // dst (encoded) = encode(src)
  kDequantize,        // dst = decode(src (encoded))
  kDequantizeReduce,  // dst = reduce(dst, decode(src (encoded)))
  // One-sided steps (IR v3). A remote slice (Slice::rank) names a peer's window (kWindow) or a
  // user buffer the peer exposed; kReduce's src may be remote too (dst = reduce(peer's, dst)).
  kExpose,   // peers may read user buffer src.buffer (whole) until this rank's call ends
  kGet,      // dst (local) = src (a peer's)
  kPut,      // dst (a peer's window) = src (local)
  kCombine,  // dst (local) = reduce(src, src2), either operand local or a peer's
  kSignal,   // this rank's `counter` = the call's epoch + `value` (release)
  kWait,     // until `peer`'s `counter` >= the call's epoch + `value` (acquire)
};
inline constexpr int kNumStepOpKinds = 16;
const char* StepOpKindName(StepOpKind k);

// The counters a rank publishes to its peers (one-sided steps), as post numbers:
// kPosted: its posts up to this number are complete and visible (the call's signature with
//   them, which every waiter compares: the call agreement of a one-sided schedule);
// kConsumed: it has read every peer's posts up to this number, wherever they live (so their
//   memory may be written again).
enum class Counter : uint8_t { kPosted = 0, kConsumed = 1 };

struct StepOp {
  StepOpKind kind;
  int32_t peer = -1;  // kSend / kRecv / kRecvReduce / kWait
  Slice src = {};     // kSend, kRecvReduce (local operand), kCopy, kReduce, kScale, quantize kinds,
                      // kExpose, kGet, kPut, kCombine
  Slice dst = {};     // all but kSend, kExpose, kSignal, kWait
  Codec codec = CodecId::kNone;        // quantize kinds (and the block size of block codecs)
  Slice src2 = {};                     // kCombine's second operand
  Counter counter = Counter::kPosted;  // kSignal, kWait
  int32_t value = 0;  // kSignal, kWait: a post number relative to the call's epoch (may be < 0)
};

// What each kind of op touches (one place, so that the lowering's checks, the verifier, the
// simulator and the engine agree).
constexpr bool IsTransferKind(StepOpKind k) {
  return k == StepOpKind::kSend || k == StepOpKind::kRecv || k == StepOpKind::kRecvReduce;
}
constexpr bool IsRecvKind(StepOpKind k) {
  return k == StepOpKind::kRecv || k == StepOpKind::kRecvReduce;
}
constexpr bool IsQuantizeKind(StepOpKind k) {
  return k == StepOpKind::kQuantize || k == StepOpKind::kDequantize ||
         k == StepOpKind::kDequantizeReduce;
}
// Steps over exposed memory and counters (IR v3): their executor is the board's, not a stream.
constexpr bool IsOneSidedKind(StepOpKind k) {
  return k == StepOpKind::kExpose || k == StepOpKind::kGet || k == StepOpKind::kPut ||
         k == StepOpKind::kCombine || k == StepOpKind::kSignal || k == StepOpKind::kWait;
}
// Whether an op of kind `k` reads its `src` slice (kExpose lets peers read it), reads `src2`,
// writes `dst`, and reads `dst` before writing it.
constexpr bool ReadsSrcKind(StepOpKind k) {
  return k != StepOpKind::kRecv && k != StepOpKind::kDivide && k != StepOpKind::kSignal &&
         k != StepOpKind::kWait;
}
constexpr bool ReadsSrc2Kind(StepOpKind k) {
  return k == StepOpKind::kCombine;
}
constexpr bool WritesDstKind(StepOpKind k) {
  return k != StepOpKind::kSend && k != StepOpKind::kExpose && k != StepOpKind::kSignal &&
         k != StepOpKind::kWait;
}
constexpr bool ReadsDstKind(StepOpKind k) {
  return k == StepOpKind::kReduce || k == StepOpKind::kDivide || k == StepOpKind::kDequantizeReduce;
}

// A step of another channel of the same rank that must complete before a step starts.
struct StepRef {
  uint16_t channel = 0;
  uint32_t step = 0;
  bool operator==(const StepRef&) const = default;
};

struct Step {
  Step() = default;
  Step(std::vector<StepOp> o, std::vector<StepRef> d = {})
      : ops(std::move(o)), deps(std::move(d)) {}
  std::vector<StepOp> ops;
  std::vector<StepRef> deps;  // cross-channel edges (see the execution model above)
};

struct Channel {
  std::vector<Step> steps;
};

struct RankSchedule {
  std::vector<Channel> channels;
  uint64_t scratch_count = 0;  // elements of kScratchBuf (a builder's view; lowering fills buffers)
  // The buffer table, indexed by Slice::buffer. Builders leave it empty or append scratch
  // buffers (AddBuffer) or windows beyond kScratchBuf; BuildSchedule completes it.
  std::vector<BufferDesc> buffers;
  // Posts on the board the schedule takes (1 + its largest kSignal of kPosted; 0: none), the
  // same on every rank: the engine advances the board's numbering by it (set by BuildSchedule).
  uint32_t posts = 0;
  // It exposes a buffer (kExpose) or reads one a peer exposed: the call's first post carries
  // the exposure record (set by BuildSchedule).
  bool exposure = false;
  // One-sided schedules: the step (of channel 0) of the last post or put, after which the rank
  // only reads and consumes (set by BuildSchedule).
  uint32_t last_post_step = 0;
  // A device kernel's work (algorithms/device_kernel_schedule.h), never run by the engine: its
  // ops touch device memory (mapped by CUDA IPC), and its puts may write a buffer a peer exposed
  // (an IPC mapping reads and writes), where a host schedule's puts write windows only.
  bool device_kernels = false;
};

// How ranks sit on nodes, for hierarchical algorithms (unused by the flat ones).
struct GroupLayout {
  int nnodes = 1;
  std::vector<int> node_of;     // node index per rank
  std::vector<int> local_rank;  // index inside its node per rank
  // The device group inside its node per rank (0, 1, ... by first appearance in the node: the
  // MI250X of a Frontier GCD), for the 3-level algorithms and the device-group link class.
  // Empty: no level below the node (every rank of a node meets the others on the node's link).
  std::vector<int> dgroup_of;
};

// What an algorithm is asked to build.
struct CollArgs {
  CollKind kind = CollKind::kAllReduce;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  // Element count, by collective (as in the C API):
  //   allreduce, broadcast, reduce: the whole buffer; reducescatter: recvcount (per rank);
  //   allgather: sendcount (per rank); alltoall: per peer; barrier: 0.
  uint64_t count = 0;
  int root = 0;  // broadcast, reduce
  int nranks = 1;
  // In place per the C API's conventions (braid.h): the builder must then read and write only
  // through the aliases that exist (e.g. for all-gather, the rank's own block of kRecvBuf is
  // its input and kSendBuf must not be referenced).
  bool in_place = false;
  // Reductions the IR lowers: a pre-multiplied sum scales each rank's input by the call's scalar
  // first (op must be kSum), AVG divides the sum by nranks on the ranks that hold a result.
  bool premul = false;
  bool avg = false;
  MemoryType memory = MemoryType::kHost;  // where the user's buffers live
  // Device buffers (memory != kHost) are staged through host memory (algorithms/
  // device_staging.h); an element-wise collective larger than this runs in pieces of it (0: whole).
  uint64_t staging_piece_bytes = 0;
  // A quantized collective (braidAllGatherQuantized, braidReduceScatterQuantized): the block
  // codec its data travels in. kNone for every other call; only the quantized builders (qwz,
  // qgz) serve a request that names one, and they serve nothing else.
  Codec codec;
  // The host's board, for one-sided schedules (board_algorithms.h); capacity 0 when the
  // communicator has none (it spans hosts, or is a split view).
  struct Board {
    uint64_t capacity = 0;           // bytes of a large buffer (BRAID_ONESHOT_BYTES)
    uint64_t slot_bytes = 0;         // bytes of a small slot
    uint64_t entry_bytes = 0;        // bytes of an entry's payload
    int8_t two_shot = -1;            // BRAID_BOARD_TWO_SHOT: -1 auto, 0 never, 1 always
    uint64_t by_reference_from = 0;  // BRAID_SINGLE_COPY_BYTES as agreed (0: never)
    bool operator==(const Board&) const = default;
    auto operator<=>(const Board&) const = default;
  } board;
  int nchannels = 1;                  // maximum channels the engine can run (streams per peer)
  uint64_t chunk_bytes = 512 * 1024;  // pipelining granularity
  const GroupLayout* layout = nullptr;
  // Member by member: a call's whole shape (the plan cache's key, braidComm::planCache).
  bool operator==(const CollArgs&) const = default;
  auto operator<=>(const CollArgs&) const = default;
};

}  // namespace braid
