// The unique id's 128-byte encoding: round trip, and rejection of anything that is not one.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "core/net/socket.h"
#include "core/net/unique_id.h"

namespace braid {
namespace {

UniqueIdData MakeId(const char* hostport) {
  UniqueIdData d;
  auto addr = ParseHostPort(hostport);
  EXPECT_TRUE(addr.ok()) << addr.status().message();
  d.root = *addr;
  EXPECT_TRUE(RandomizeUniqueId(&d).ok());
  return d;
}

TEST(UniqueId, RoundTripIpv4) {
  UniqueIdData d = MakeId("127.0.0.1:4242");
  braidUniqueId id;
  EncodeUniqueId(d, &id);
  auto back = DecodeUniqueId(id);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(FormatAddress(back->root), "127.0.0.1:4242");
  EXPECT_EQ(back->secret, d.secret);
  EXPECT_EQ(back->nonce, d.nonce);
  // The documented layout.
  EXPECT_EQ(std::memcmp(id.internal, "BRD1", 4), 0);
  EXPECT_EQ(static_cast<uint8_t>(id.internal[8]) | (static_cast<uint8_t>(id.internal[9]) << 8),
            4242);
  EXPECT_EQ(std::memcmp(id.internal + 26, d.secret.data(), 32), 0);
  EXPECT_EQ(std::memcmp(id.internal + 58, d.nonce.data(), 16), 0);
  for (int i = 74; i < BRAID_UNIQUE_ID_BYTES; ++i) EXPECT_EQ(id.internal[i], 0) << i;
}

TEST(UniqueId, RoundTripIpv6) {
  UniqueIdData d = MakeId("[::1]:65535");
  braidUniqueId id;
  EncodeUniqueId(d, &id);
  auto back = DecodeUniqueId(id);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(FormatAddress(back->root), "[::1]:65535");
  EXPECT_EQ(back->secret, d.secret);
}

TEST(UniqueId, SecretsAreRandom) {
  UniqueIdData a = MakeId("127.0.0.1:1"), b = MakeId("127.0.0.1:1");
  EXPECT_NE(a.secret, b.secret);
  EXPECT_NE(a.nonce, b.nonce);
  EXPECT_EQ(HexOf(a.nonce.data(), 16).size(), 32u);
  const uint8_t bytes[] = {0x00, 0xab, 0xff};
  EXPECT_EQ(HexOf(bytes, 3), "00abff");
}

TEST(UniqueId, DecodeRejectsGarbage) {
  braidUniqueId zero{};
  auto r = DecodeUniqueId(zero);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().cls(), ErrorClass::kInvalidArgument);
  EXPECT_NE(r.status().message().find("not a braid unique id"), std::string::npos);

  std::mt19937 rng(7);
  for (int t = 0; t < 1000; ++t) {
    braidUniqueId id;
    for (auto& c : id.internal) c = static_cast<char>(rng());
    EXPECT_FALSE(DecodeUniqueId(id).ok());
  }

  UniqueIdData d = MakeId("127.0.0.1:4242");
  braidUniqueId good;
  EncodeUniqueId(d, &good);
  auto corrupt = [&](int offset, char value) {
    braidUniqueId id = good;
    id.internal[offset] = value;
    return DecodeUniqueId(id);
  };
  EXPECT_FALSE(corrupt(0, 'X').ok());  // magic
  EXPECT_FALSE(corrupt(4, 9).ok());    // version
  EXPECT_FALSE(corrupt(6, 99).ok());   // family
  EXPECT_FALSE(corrupt(20, 1).ok());   // IPv4 padding
  EXPECT_FALSE(corrupt(100, 1).ok());  // reserved tail
  braidUniqueId port0 = good;
  port0.internal[8] = port0.internal[9] = 0;
  EXPECT_FALSE(DecodeUniqueId(port0).ok());
  EXPECT_TRUE(corrupt(30, 1).ok());  // the secret is free-form
}

}  // namespace
}  // namespace braid
