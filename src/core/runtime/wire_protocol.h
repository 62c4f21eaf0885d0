// The engine's wire protocol: how one schedule transfer travels as a framed message (a 48-byte
// WireHeader naming the call, the payload, zero padding to a multiple of 8 bytes) and the helpers
// that move a frame over a non-blocking Endpoint a piece at a time. Matching needs no tags: on
// every directed stream (peer, lane, direction) messages follow the order in which the ranks
// issued their operations (see StreamGate), and every rank issues collectives in the same order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "algorithms/schedule.h"
#include "core/runtime/operation.h"
#include "core/base/status.h"
#include "core/runtime/wire_header.h"
#include "transport/transport.h"

namespace braid {

enum Phase : uint8_t { kHeader = 0, kPayload = 1, kPadding = 2, kDone = 3, kCorked = 4 };
// kCorked: a send whose whole message the endpoint buffered (Endpoint::cork); done once the
// endpoint's flushedThrough() reaches OpProgress::cork_end. Its place in the stream is fixed.

// Progress of one transfer of the current step of a channel.
struct OpProgress {
  Phase phase = kHeader;
  uint64_t done = 0;      // bytes of the current phase (elements of a local step: active_op.cc)
  bool drop = false;      // a received message of a conflicting call: read past, never used
  bool released = false;  // the StreamGate has been told this transfer's order is fixed
  uint64_t cork_end = 0;  // kCorked: the endpoint's stream position at the message's end
  WireHeader hdr;
};

inline bool IsTransfer(StepOpKind k) {
  return IsTransferKind(k);
}
inline bool IsRecv(StepOpKind k) {
  return IsRecvKind(k);
}

// The op id a header carries (pre-multiplied sums travel as braidNumOps).
uint8_t WireOp(const OpDesc& d);
// A quantized call's codec as WireHeader::codec carries it, and back (an unknown id reads as
// kNone: it only names the peer's call in a message).
inline uint32_t PackCodec(const Codec& c) {
  return static_cast<uint32_t>(c.id) | (c.block << 8);
}
inline Codec UnpackCodec(uint32_t v) {
  const uint32_t id = v & 0xff;
  return id <= static_cast<uint32_t>(CodecId::kInt4Asym) ? Codec(static_cast<CodecId>(id), v >> 8)
                                                         : Codec();
}
// What the peer called, reconstructed from its header, for mismatch messages.
std::string DescribeHeader(const WireHeader& h);
// "allreduce(count=4, float, sum) #3" from a signature.
std::string DescribeSignature(const CallSignature& s);

// Sends one framed message as far as the stream allows, and at most about `*budget` bytes
// (decremented; a fair share of the progress loop, see ActiveOp). `pr.hdr` (with `payload` set)
// is filled by the caller before the first call; `payload` points at pr.hdr.payload bytes.
// A small message may be corked instead (phase kCorked): the endpoint is then added to
// `*corked` (when not null), whose owner must flush it before sleeping.
Status SendFramed(Endpoint* ep, OpProgress& pr, const std::byte* payload, int64_t* budget,
                  bool* moved, std::vector<Endpoint*>* corked = nullptr);
// A kCorked send (the caller advances it here, not through SendFramed): done (phase kDone) once
// the endpoint flushed its message; flushes if not.
Status AdvanceCorked(Endpoint* ep, OpProgress& pr, bool* moved);
// Reads the rest of an incoming header into `pr.hdr`; true once it is complete and valid.
Result<bool> RecvHeader(Endpoint* ep, int peer, OpProgress& pr, bool* moved);
// Skips the padding after a payload; marks the transfer done at its end.
Status RecvPadding(Endpoint* ep, OpProgress& pr, bool* moved);

}  // namespace braid
