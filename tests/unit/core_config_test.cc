// The configuration table: every variable parses, bad values are refused with the variable, the
// value and what is accepted; NCCL_* aliases apply unless the BRAID_* name is set.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

#include "core/base/config.h"

namespace braid {
namespace {

class ConfigEnvTest : public ::testing::Test {
 protected:
  void SetUp() override { Clear(); }
  void TearDown() override { Clear(); }
  static void Clear() {
    for (const auto& v : ConfigTable()) {
      unsetenv(v.name);
      if (v.alias) unsetenv(v.alias);
    }
  }
};

TEST(ByteSize, ParsesSuffixesAndRejectsGarbage) {
  EXPECT_EQ(*ParseByteSize("0"), 0u);
  EXPECT_EQ(*ParseByteSize("123"), 123u);
  EXPECT_EQ(*ParseByteSize("64K"), 64u << 10);
  EXPECT_EQ(*ParseByteSize("1m"), 1u << 20);
  EXPECT_EQ(*ParseByteSize("2G"), 2ull << 30);
  for (const char* bad :
       {"", "K", "-1", "12Q", "1.5M", " 4K", "99999999999999999999", "17179869184G"}) {
    auto r = ParseByteSize(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().cls(), ErrorClass::kInvalidArgument) << bad;
  }
}

TEST_F(ConfigEnvTest, DefaultsMatchTheTable) {
  auto c = LoadConfigFromEnv();
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->timeout_ms, 300000);
  EXPECT_EQ(c->nchannels, 2);
  EXPECT_EQ(c->chunk_bytes, 512u * 1024);
  EXPECT_EQ(c->shm_ring_bytes, 1u << 20);
  EXPECT_TRUE(c->inline_blocking);
  EXPECT_TRUE(c->link_calibration);
  EXPECT_EQ(c->link_profile, "");
  for (const auto& v : ConfigTable()) {
    EXPECT_TRUE(std::string(v.name).rfind("BRAID_", 0) == 0) << v.name;
    EXPECT_NE(std::string(v.doc), "") << v.name;
  }
}

TEST_F(ConfigEnvTest, ValuesAndAliases) {
  setenv("BRAID_TIMEOUT", "7", 1);
  setenv("BRAID_NCHANNELS", "4", 1);
  setenv("BRAID_CHUNK_BYTES", "1M", 1);
  setenv("NCCL_BUFFSIZE", "4M", 1);  // alias of BRAID_SHM_RING_BYTES
  setenv("NCCL_SOCKET_IFNAME", "eth", 1);
  setenv("BRAID_SOCKET_IFNAME", "=lo", 1);  // BRAID_* wins over the alias
  setenv("NCCL_ALGO", "ring", 1);
  setenv("BRAID_LINK_CALIBRATION", "0", 1);
  setenv("BRAID_LINK_PROFILE", "/tmp/links.profile", 1);
  auto c = LoadConfigFromEnv();
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->timeout_ms, 7000);
  EXPECT_EQ(c->nchannels, 4);
  EXPECT_EQ(c->chunk_bytes, 1u << 20);
  EXPECT_EQ(c->shm_ring_bytes, 4u << 20);
  EXPECT_EQ(c->socket_ifname, "=lo");
  EXPECT_EQ(c->algo, "ring");
  EXPECT_TRUE(c->algo_from_nccl);
  EXPECT_FALSE(c->link_calibration);
  EXPECT_EQ(c->link_profile, "/tmp/links.profile");
  setenv("BRAID_ALGO", "allreduce:rd", 1);
  c = LoadConfigFromEnv();
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->algo, "allreduce:rd");
  EXPECT_FALSE(c->algo_from_nccl);
}

TEST_F(ConfigEnvTest, BadValuesNameTheVariable) {
  struct Case {
    const char* var;
    const char* value;
    const char* says;
  } cases[] = {
      {"BRAID_TIMEOUT", "0", "out of range"},
      {"BRAID_TIMEOUT", "abc", "not an integer"},
      {"BRAID_TIMEOUT", "5s", "not an integer"},
      {"BRAID_NCHANNELS", "17", "out of range"},
      {"BRAID_CHUNK_BYTES", "1K", "out of range"},
      {"BRAID_CHUNK_BYTES", "lots", "not a size"},
      {"BRAID_SHM_RING_BYTES", "1G", "out of range"},
      {"NCCL_BUFFSIZE", "12X", "unknown size suffix"},
      {"BRAID_SPIN_US", "-1", "out of range"},
      {"BRAID_INLINE", "yes", "not an integer"},
      {"BRAID_LINK_CALIBRATION", "2", "out of range"},
      {"BRAID_LINK_CALIBRATION", "off", "not an integer"},
      {"BRAID_BOARD_TWO_SHOT", "yes", "expected auto, 0 or 1"},
      {"BRAID_STAGING_MAX_BYTES", "1P", "unknown size suffix"},
      {"BRAID_STAGING_MAX_BYTES", "-4K", "not a size"},
      {"BRAID_STAGING_CHUNK_BYTES", "4Q", "unknown size suffix"},
      {"BRAID_STAGING_CHUNK_BYTES", "1K", "expected 0 or at least 64K"},
  };
  for (const auto& k : cases) {
    Clear();
    setenv(k.var, k.value, 1);
    auto c = LoadConfigFromEnv();
    ASSERT_FALSE(c.ok()) << k.var << "=" << k.value;
    EXPECT_EQ(c.status().cls(), ErrorClass::kInvalidArgument);
    const std::string& m = c.status().message();
    EXPECT_NE(m.find(k.value), std::string::npos) << m;
    EXPECT_NE(m.find(k.says), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace braid
