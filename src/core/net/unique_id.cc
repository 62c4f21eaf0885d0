#include "core/net/unique_id.h"

#include <arpa/inet.h>
#include <openssl/rand.h>

#include <cstring>

#include "core/net/handshake.h"

namespace braid {
namespace {

// The bytes "BRD1" read as a little-endian u32.
constexpr uint32_t kMagic = 0x31445242u;
constexpr uint16_t kFormatVersion = 1;
constexpr size_t kOffMagic = 0, kOffVersion = 4, kOffFamily = 6, kOffPort = 8, kOffAddr = 10,
                 kOffSecret = 26, kOffNonce = 58, kOffEnd = 74;
static_assert(kOffEnd <= BRAID_UNIQUE_ID_BYTES);

void Put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
void Put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint16_t Get16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}
uint32_t Get32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

bool AllZero(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (p[i]) return false;
  return true;
}

}  // namespace

void EncodeUniqueId(const UniqueIdData& data, braidUniqueId* out) {
  uint8_t b[BRAID_UNIQUE_ID_BYTES] = {};
  Put32(b + kOffMagic, kMagic);
  Put16(b + kOffVersion, kFormatVersion);
  Put16(b + kOffFamily, static_cast<uint16_t>(data.root.ss_family));
  if (data.root.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(data.root);
    Put16(b + kOffPort, ntohs(in.sin_port));
    std::memcpy(b + kOffAddr, &in.sin_addr, 4);
  } else if (data.root.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(data.root);
    Put16(b + kOffPort, ntohs(in6.sin6_port));
    std::memcpy(b + kOffAddr, &in6.sin6_addr, 16);
  }
  std::memcpy(b + kOffSecret, data.secret.data(), data.secret.size());
  std::memcpy(b + kOffNonce, data.nonce.data(), data.nonce.size());
  std::memcpy(out->internal, b, sizeof(b));
}

Result<UniqueIdData> DecodeUniqueId(const braidUniqueId& id) {
  uint8_t b[BRAID_UNIQUE_ID_BYTES];
  std::memcpy(b, id.internal, sizeof(b));
  const char* what =
      "not a braid unique id (was it created by braidGetUniqueId/ncclGetUniqueId "
      "of this library and passed unchanged to every rank?)";
  if (Get32(b + kOffMagic) != kMagic) return InvalidArgument(std::string(what) + ": bad magic");
  uint16_t version = Get16(b + kOffVersion);
  if (version != kFormatVersion)
    return InvalidArgument("unique id format version " + std::to_string(version) +
                           " is not supported (this library reads version " +
                           std::to_string(kFormatVersion) + "): all ranks must use one braid");
  uint16_t family = Get16(b + kOffFamily);
  uint16_t port = Get16(b + kOffPort);
  if (family != AF_INET && family != AF_INET6)
    return InvalidArgument(std::string(what) + ": bad address family " + std::to_string(family));
  if (port == 0) return InvalidArgument(std::string(what) + ": port 0");
  if (family == AF_INET && !AllZero(b + kOffAddr + 4, 12))
    return InvalidArgument(std::string(what) + ": bad IPv4 address padding");
  if (!AllZero(b + kOffEnd, BRAID_UNIQUE_ID_BYTES - kOffEnd))
    return InvalidArgument(std::string(what) + ": reserved bytes are not zero");

  UniqueIdData d;
  if (family == AF_INET) {
    auto& in = reinterpret_cast<sockaddr_in&>(d.root);
    in.sin_family = AF_INET;
    in.sin_port = htons(port);
    std::memcpy(&in.sin_addr, b + kOffAddr, 4);
  } else {
    auto& in6 = reinterpret_cast<sockaddr_in6&>(d.root);
    in6.sin6_family = AF_INET6;
    in6.sin6_port = htons(port);
    std::memcpy(&in6.sin6_addr, b + kOffAddr, 16);
  }
  std::memcpy(d.secret.data(), b + kOffSecret, d.secret.size());
  std::memcpy(d.nonce.data(), b + kOffNonce, d.nonce.size());
  return d;
}

Status RandomizeUniqueId(UniqueIdData* data) {
  CryptoLock lock;
  if (RAND_bytes(data->secret.data(), static_cast<int>(data->secret.size())) != 1 ||
      RAND_bytes(data->nonce.data(), static_cast<int>(data->nonce.size())) != 1)
    return SystemError("OpenSSL RAND_bytes failed: the system random generator is unavailable");
  return Status::Ok();
}

std::string FormatAddress(const sockaddr_storage& addr) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (addr.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(addr);
    inet_ntop(AF_INET, &in.sin_addr, buf, sizeof(buf));
    return std::string(buf) + ":" + std::to_string(ntohs(in.sin_port));
  }
  if (addr.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(addr);
    inet_ntop(AF_INET6, &in6.sin6_addr, buf, sizeof(buf));
    // Appended piecewise: GCC 12 warns (-Wrestrict, a false positive) on "[" + std::string.
    std::string s = "[";
    s += buf;
    s += "]:";
    s += std::to_string(ntohs(in6.sin6_port));
    return s;
  }
  return "<no address>";
}

std::string HexOf(const uint8_t* p, size_t n) {
  static const char kDigits[] = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = kDigits[p[i] >> 4];
    s[2 * i + 1] = kDigits[p[i] & 15];
  }
  return s;
}

}  // namespace braid
