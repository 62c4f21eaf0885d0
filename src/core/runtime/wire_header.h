// The header the engine puts in front of every message on every transport.
//
// Transports carry bytes; the engine frames each schedule send as header + payload + padding to
// a multiple of 8 bytes (so shared-memory rings never split an element). The header names the
// operation on the sender's side, so a receiver whose own call differs (another collective,
// count, type, op, root, or sequence number) reports both sides instead of corrupting data or
// hanging (spec/reliability.md item 7).
#pragma once

#include <cstdint>

namespace braid {

inline constexpr uint32_t kWireMagic = 0x4d445242;  // "BRDM"

// WireHeader::flags bits.
inline constexpr uint8_t kWireAgreement = 1;  // a call-agreement message (see CallConflict)
// A data message that is also its sender's call agreement (two ranks, see CallConflict): its
// header's signature is checked before its payload is used.
inline constexpr uint8_t kWireCarriesAgreement = 2;
// A rank's last message on a stream (issue 42): it leaves the communicator with every call
// complete, by braidCommDestroy or by exiting without one; `reserved` holds the
// FailureCause::Reason (kDestroyed or kExited) and nothing follows. A peer that reads it where it
// expected data fails at once naming why, instead of reading the close as a crash ("died") once
// the process is gone. Sent only at a message boundary with the engine idle (braidComm::leave).
inline constexpr uint8_t kWireGoodbye = 4;

struct WireHeader {
  uint32_t magic = kWireMagic;
  uint8_t coll = 0;   // CollKind
  uint8_t dtype = 0;  // DataType of the user's call
  uint8_t op = 0;     // braidRedOp_t of the user's call (5 = any pre-multiplied sum)
  uint8_t flags = 0;
  uint64_t seq = 0;    // collectives: the communicator's collective number; p2p: per-peer number
  uint64_t count = 0;  // the user's count
  int32_t root = -1;
  // The communicator the call belongs to: 0 for a communicator made by init, a split view's id
  // otherwise (views share their root's streams, see braidComm::initView).
  uint32_t comm = 0;
  uint64_t payload = 0;  // bytes that follow (before padding)
  // A quantized collective's codec: CodecId | block size << 8 (0 for every other call), so that
  // ranks that quantize differently fail the call agreement instead of misreading encodings.
  uint32_t codec = 0;
  uint32_t reserved = 0;
};
static_assert(sizeof(WireHeader) == 48, "wire header layout is part of the protocol");

// What one rank called, as carried in a header; compared field by field.
struct CallSignature {
  uint8_t coll = 0, dtype = 0, op = 0, pad = 0;
  int32_t root = -1;
  uint64_t seq = 0;
  uint64_t count = 0;
  uint32_t comm = 0;
  uint32_t codec = 0;
  bool operator==(const CallSignature&) const = default;
};
static_assert(sizeof(CallSignature) == 32);

inline CallSignature SignatureOf(const WireHeader& h) {
  CallSignature s;
  s.coll = h.coll;
  s.dtype = h.dtype;
  s.op = h.op;
  s.root = h.root;
  s.seq = h.seq;
  s.count = h.count;
  s.comm = h.comm;
  s.codec = h.codec;
  return s;
}

// Call agreement (spec/reliability.md item 7): before a collective moves data, its ranks run a
// dissemination exchange of headers (flag kWireAgreement, the sender's own signature). A rank
// that receives a signature unlike its own records the pair; a recorded conflict travels as the
// payload of every later agreement message it sends, so after ceil(log2 N) rounds either every
// rank holds a conflict or all signatures are equal. Then every rank fails (or none does), and no
// data has moved: the streams stay in step and the communicator stays usable.
//
// Two ranks whose data schedule starts with one exchange (each sends the other one message and
// receives one, a small all-reduce say) skip the separate exchange: that first data message
// carries the flag kWireCarriesAgreement and its header is the agreement. A receiver whose call
// differs, or that meets a plain agreement message instead (the peer's call does not start so),
// drops the payload unread, finishes sending its own first message and fails like the agreement
// would: each side sent one message and read one, so the streams stay in step, and no user buffer
// was written. It saves a round trip per call, the agreement's whole cost on two ranks.
//
// On a larger power of two the agreement's rounds are a butterfly (rank r and r XOR 2^k in
// round k, DisseminationAlgorithm), and a small call whose data moves in that same butterfly
// (recursive doubling) carries the agreement in every round's message the same way. A rank that
// knows of a conflict sends its round's message as a plain agreement message with the record
// instead of its data, so the news spreads exactly as in the agreement; every rank sends and
// reads one message per round either way, so a mix of carried and plain rounds keeps the
// streams in step. The data of earlier rounds is combined before later rounds could report a
// conflict, so such a call writes a shadow of its receive buffer and copies it out only after
// the last round matched: no user buffer is written on a conflict. It halves a small call's
// rounds (4 ranks: 2 instead of 4).
struct CallConflict {
  int32_t rank_a = -1;  // the rank that noticed
  int32_t rank_b = -1;  // the rank whose call differed
  CallSignature a, b;
};
static_assert(sizeof(CallConflict) == 72, "part of the protocol; a multiple of 8");

inline constexpr uint64_t PaddedSize(uint64_t bytes) {
  return (bytes + 7) & ~uint64_t{7};
}

}  // namespace braid
