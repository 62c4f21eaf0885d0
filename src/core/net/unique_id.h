// The unique id's contents and its 128-byte encoding (spec/nccl-compat.md section 2).
//
// Layout (little endian), all of it covered by the checks in DecodeUniqueId:
//   0  u32 magic 'BRD1'       4  u16 format version      6  u16 address family (AF_INET/6)
//   8  u16 port (host order) 10  u8[16] address         26  u8[32] secret (random)
//  58  u8[16] comm nonce (random; names shm objects, tags the communicator)
//  74  ... zero
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <array>
#include <cstdint>
#include <string>

#include "braid/braid.h"
#include "core/base/status.h"

namespace braid {

struct UniqueIdData {
  sockaddr_storage root{};           // rendezvous address (AF_INET or AF_INET6)
  std::array<uint8_t, 32> secret{};  // >= 128 random bits; never logged
  std::array<uint8_t, 16> nonce{};   // random; hex of it is the communicator tag
};

void EncodeUniqueId(const UniqueIdData& data, braidUniqueId* out);
// InvalidArgument for a blob that is not a braid unique id (bad magic/version/family/port).
Result<UniqueIdData> DecodeUniqueId(const braidUniqueId& id);
// Fills secret and nonce from OpenSSL's RAND_bytes.
Status RandomizeUniqueId(UniqueIdData* data);
// "10.0.0.1:4242" / "[::1]:4242"
std::string FormatAddress(const sockaddr_storage& addr);
std::string HexOf(const uint8_t* p, size_t n);

}  // namespace braid
