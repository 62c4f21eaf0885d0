// The authenticated handshake every braid TCP connection starts with (bootstrap and data).
//
// server -> client : "BRDH" u16 version, 32-byte nonce_s
// client -> server : 32-byte nonce_c, fixed-size hello (purpose, rank, nranks, channel),
//                    HMAC-SHA256(secret, "braid-c" | nonce_s | nonce_c | hello)
// server -> client : HMAC-SHA256(secret, "braid-s" | nonce_c | nonce_s | hello)
// All messages have fixed sizes, so nothing read before authentication is a length; a wrong MAC
// closes the connection. Fresh nonces on both sides defeat replays. Comparison is constant-time.
#pragma once

#include <cstdint>
#include <vector>

#include "core/clock.h"
#include "core/status.h"

namespace braid {

struct HandshakeHello {
  uint32_t purpose = 0;  // 1 = bootstrap, 2 = tcp data
  int32_t rank = -1;
  int32_t nranks = 0;
  int32_t channel = 0;
  uint8_t comm_nonce[16] = {};  // which communicator (the unique id's nonce)
};

// Blocking (poll-based, bounded by deadline) handshakes on a connected socket.
Status HandshakeClient(int fd, const std::vector<uint8_t>& secret, const HandshakeHello& hello,
                       Deadline deadline);
Result<HandshakeHello> HandshakeServer(int fd, const std::vector<uint8_t>& secret, Deadline deadline);

}  // namespace braid
