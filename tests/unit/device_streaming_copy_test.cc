// StreamingCopy (device/cpu/streaming_copy.h): every tier this CPU has copies every length and
// every alignment of source and destination exactly, and writes nothing outside the destination.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "device/cpu/kernel_isa.h"
#include "device/cpu/streaming_copy.h"

namespace braid::cpu {
namespace {

std::vector<KernelIsa> SupportedIsas() {
  std::vector<KernelIsa> v;
  for (int i = 0; i < kNumKernelIsas; ++i)
    if (CpuSupports(static_cast<KernelIsa>(i))) v.push_back(static_cast<KernelIsa>(i));
  return v;
}

// Copies `n` bytes from src + src_off to dst + dst_off (both buffers 64-byte aligned plus the
// offsets) and checks the copy and the guard bytes on either side of it.
void CheckCopy(KernelIsa isa, size_t n, size_t src_off, size_t dst_off) {
  constexpr size_t kGuard = 80;
  alignas(64) static std::byte src_mem[(3 << 20) + 256];
  alignas(64) static std::byte dst_mem[(3 << 20) + 256];
  ASSERT_LE(n + src_off, sizeof(src_mem));
  ASSERT_LE(n + dst_off + kGuard, sizeof(dst_mem));
  for (size_t i = 0; i < n + src_off; ++i)
    src_mem[i] = static_cast<std::byte>((i * 131 + 7) & 0xff);
  std::memset(dst_mem, 0xA5, n + dst_off + kGuard);
  StreamingCopyWithIsa(isa, dst_mem + dst_off, src_mem + src_off, n);
  ASSERT_EQ(std::memcmp(dst_mem + dst_off, src_mem + src_off, n), 0)
      << KernelIsaName(isa) << " n " << n << " src+" << src_off << " dst+" << dst_off;
  for (size_t i = 0; i < dst_off; ++i)
    ASSERT_EQ(dst_mem[i], std::byte{0xA5}) << KernelIsaName(isa) << " wrote before the destination";
  for (size_t i = 0; i < kGuard; ++i)
    ASSERT_EQ(dst_mem[dst_off + n + i], std::byte{0xA5})
        << KernelIsaName(isa) << " n " << n << " dst+" << dst_off << " wrote past the end";
}

TEST(StreamingCopy, EveryLengthAndAlignmentOnEveryTier) {
  for (KernelIsa isa : SupportedIsas())
    for (size_t n : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{31}, size_t{33},
                     size_t{63}, size_t{64}, size_t{65}, size_t{127}, size_t{200}, size_t{4099}})
      for (size_t src_off = 0; src_off < 64; src_off += 7)
        for (size_t dst_off = 0; dst_off < 64; ++dst_off) CheckCopy(isa, n, src_off, dst_off);
}

TEST(StreamingCopy, MegabytesAtOddOffsets) {
  // Beyond kStreamingCopyMinBytes, where the engine uses it, with an odd tail.
  for (KernelIsa isa : SupportedIsas()) {
    CheckCopy(isa, (3 << 20) - 13, 3, 61);
    CheckCopy(isa, kStreamingCopyMinBytes, 0, 0);
  }
}

TEST(StreamingCopy, TheDefaultTierMatchesMemcpy) {
  std::vector<uint8_t> src(kStreamingCopyMinBytes + 37), dst(src.size() + 1, 0x5A);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i ^ (i >> 8));
  StreamingCopy(dst.data() + 1, src.data(), src.size());
  EXPECT_EQ(std::memcmp(dst.data() + 1, src.data(), src.size()), 0);
  EXPECT_EQ(dst[0], 0x5A);
  StreamingCopy(nullptr, nullptr, 0);  // no bytes: touches nothing
}

}  // namespace
}  // namespace braid::cpu
