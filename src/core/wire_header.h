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

struct WireHeader {
  uint32_t magic = kWireMagic;
  uint8_t coll = 0;   // CollKind
  uint8_t dtype = 0;  // DataType of the user's call
  uint8_t op = 0;     // braidRedOp_t of the user's call (5 = any pre-multiplied sum)
  uint8_t flags = 0;
  uint64_t seq = 0;    // collectives: the communicator's collective number; p2p: per-peer number
  uint64_t count = 0;  // the user's count
  int32_t root = -1;
  uint32_t reserved = 0;
  uint64_t payload = 0;  // bytes that follow (before padding)
};
static_assert(sizeof(WireHeader) == 40, "wire header layout is part of the protocol");

inline constexpr uint64_t PaddedSize(uint64_t bytes) {
  return (bytes + 7) & ~uint64_t{7};
}

}  // namespace braid
