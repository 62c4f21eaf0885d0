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
// call of a point-to-point group) or engine memory the schedule needs (scratch).
enum class BufferRole : uint8_t { kUserSend, kUserRecv, kScratch, kUserP2P };

struct BufferDesc {
  BufferRole role = BufferRole::kScratch;
  DataType dtype = DataType::kFloat32;  // what a slice of it counts
  uint64_t count = 0;                   // elements of dtype (scratch: what the engine allocates)
  MemoryType memory = MemoryType::kHost;
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

struct Slice {
  uint16_t buffer = kSendBuf;
  uint64_t offset = 0;  // elements
  uint64_t count = 0;   // elements
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
};
inline constexpr int kNumStepOpKinds = 10;
const char* StepOpKindName(StepOpKind k);

struct StepOp {
  StepOpKind kind;
  int32_t peer = -1;  // kSend / kRecv / kRecvReduce
  Slice src;          // kSend, kRecvReduce (local operand), kCopy, kReduce, kScale, quantize kinds
  Slice dst;          // all but kSend
  Codec codec = CodecId::kNone;  // quantize kinds (and the block size of block codecs)
};

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
  // buffers beyond kScratchBuf with AddBuffer; BuildSchedule completes it.
  std::vector<BufferDesc> buffers;
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
  // A quantized collective (braidAllGatherQuantized, braidReduceScatterQuantized): the block
  // codec its data travels in. kNone for every other call; only the quantized builders (qwz,
  // qgz) serve a request that names one, and they serve nothing else.
  Codec codec;
  int nchannels = 1;                  // maximum channels the engine can run (streams per peer)
  uint64_t chunk_bytes = 512 * 1024;  // pipelining granularity
  const GroupLayout* layout = nullptr;
  // Member by member: a call's whole shape (the plan cache's key, braidComm::planCache).
  bool operator==(const CollArgs&) const = default;
  auto operator<=>(const CollArgs&) const = default;
};

}  // namespace braid
