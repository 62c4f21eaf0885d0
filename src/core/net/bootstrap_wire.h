// Frames exchanged between a rank and the rendezvous service after the handshake (internal to
// bootstrap.cc and rendezvous.cc).
//
// Every frame: u32 tag, u32 arg, u64 payload length (little endian), then the payload.
//   kRegistered  service -> rank  arg = nranks, payload = the communicator nonce (16 bytes)
//   kGather      rank -> service  arg = ms the rank will wait for the reply (kWaitForever = no
//                                 limit), payload = its contribution (<= kMaxBootstrapMessage)
//   kReply       service -> rank  arg = nranks, payload = nranks x (u32 length, bytes)
//   kError       service -> rank  arg = ErrorClass, payload = message (<= kMaxErrorBytes)
// Every length is checked against its maximum before anything is allocated.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/net/bootstrap.h"

namespace braid::bootstrap_wire {

enum Tag : uint32_t {
  kRegistered = 0x42520001,
  kGather = 0x42520002,
  kReply = 0x42520003,
  kError = 0x42520004,
};

inline constexpr size_t kHeaderBytes = 16;
inline constexpr size_t kMaxErrorBytes = 16 * 1024;
inline constexpr int kMaxRanks = 1 << 20;
inline constexpr uint32_t kWaitForever = 0xffffffffu;
inline constexpr uint32_t kPurposeBootstrap = 1;

struct Header {
  uint32_t tag = 0;
  uint32_t arg = 0;
  uint64_t len = 0;
};

inline void EncodeHeader(const Header& h, uint8_t* out) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<uint8_t>(h.tag >> (8 * i));
  for (int i = 0; i < 4; ++i) out[4 + i] = static_cast<uint8_t>(h.arg >> (8 * i));
  for (int i = 0; i < 8; ++i) out[8 + i] = static_cast<uint8_t>(h.len >> (8 * i));
}

inline Header DecodeHeader(const uint8_t* in) {
  Header h;
  for (int i = 0; i < 4; ++i) h.tag |= static_cast<uint32_t>(in[i]) << (8 * i);
  for (int i = 0; i < 4; ++i) h.arg |= static_cast<uint32_t>(in[4 + i]) << (8 * i);
  for (int i = 0; i < 8; ++i) h.len |= static_cast<uint64_t>(in[8 + i]) << (8 * i);
  return h;
}

// A whole frame as one string (header + payload).
inline std::string MakeFrame(uint32_t tag, uint32_t arg, const std::string& payload) {
  std::string f(kHeaderBytes, '\0');
  EncodeHeader({tag, arg, payload.size()}, reinterpret_cast<uint8_t*>(f.data()));
  f += payload;
  return f;
}

inline uint64_t MaxReplyBytes(int nranks) {
  return static_cast<uint64_t>(nranks) * (4 + kMaxBootstrapMessage);
}

}  // namespace braid::bootstrap_wire
