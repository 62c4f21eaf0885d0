// FailureCause's wire form comes from another process: a record survives a round trip, and any
// record with a field out of range, unterminated or unprintable text, or stray bytes is refused.
#include "core/base/failure_cause.h"

#include <gtest/gtest.h>

#include <cstring>

namespace braid {
namespace {

FailureCause Sample() {
  FailureCause c;
  c.reason = FailureCause::Reason::kDied;
  c.rank = 2;
  c.pid = 4242;
  c.host = "node7";
  c.observer = 3;
  c.has_op = true;
  c.coll = "allreduce";
  c.seq = 12;
  return c;
}

TEST(FailureCause, DescribesRankHostPidAndOperation) {
  EXPECT_EQ(Sample().describe(), "rank 2 (host node7, pid 4242) died during allreduce #12");
  FailureCause s = Sample();
  s.reason = FailureCause::Reason::kStalled;
  s.seconds = 30;
  EXPECT_EQ(s.describe(),
            "rank 2 (host node7, pid 4242) stopped responding for 30 s during "
            "allreduce #12");
  EXPECT_EQ(s.errorClass(), ErrorClass::kTimeout);
  EXPECT_EQ(Sample().errorClass(), ErrorClass::kRemote);
}

TEST(FailureCause, ALongDetailKeepsWhatSaysWhy) {
  // Around an errno name; at the start of an out-of-memory reason; else the end.
  const std::string pad(200, 'x');
  const std::string emfile =
      FailureCause::FitDetail(pad + " accept failed (EMFILE: too many) " + pad);
  EXPECT_NE(emfile.find("(EMFILE"), std::string::npos) << emfile;
  const std::string oom = FailureCause::FitDetail(
      "rank 0/8: allgather(count=8388608, float, quantized int8/G=2048) #1 [qwz]: out of memory "
      "for the engine's buffers (about the message size in scratch): free memory or raise the "
      "limit (ulimit -v), or split the call");
  EXPECT_NE(oom.find("out of memory for the engine's buffers"), std::string::npos) << oom;
  const std::string tail = FailureCause::FitDetail(pad + " the reason at the end");
  EXPECT_NE(tail.find("the reason at the end"), std::string::npos) << tail;
  for (const std::string& s : {emfile, oom, tail}) EXPECT_LT(s.size(), FailureCause::kDetailBytes);
}

TEST(FailureCause, RoundTrips) {
  uint8_t w[FailureCause::kWireBytes];
  Sample().encode(w);
  auto c = FailureCause::Decode(w, 4);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->describe(), Sample().describe());
  EXPECT_EQ(c->observer, 3);
}

// A point-to-point deadlock names the blocked rank, the rank it waits on (the observer) and the
// collective that rank waits in; it is the program's error (invalid usage), and it travels.
TEST(FailureCause, ADeadlockNamesBothRanksAndIsAUsageError) {
  FailureCause c = Sample();
  c.reason = FailureCause::Reason::kP2pDeadlock;
  c.coll = "allgather";
  c.seq = 0;
  const std::string want =
      "rank 2 (host node7, pid 4242) is blocked in a point-to-point call waiting on rank 3, "
      "which waits for it in allgather #0, a collective it has not issued: a deadlock (a send "
      "must meet its receive between the same collectives on every rank)";
  EXPECT_EQ(c.describe(), want);
  EXPECT_EQ(c.errorClass(), ErrorClass::kInvalidUsage);
  uint8_t w[FailureCause::kWireBytes];
  c.encode(w);
  auto back = FailureCause::Decode(w, 4);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->describe(), want);
}

TEST(FailureCause, RefusesHostileRecords) {
  uint8_t good[FailureCause::kWireBytes];
  Sample().encode(good);
  EXPECT_FALSE(FailureCause::Decode(good, 2).has_value());  // rank 2 in a communicator of 2
  auto refused = [&](size_t off, uint8_t v) {
    uint8_t w[FailureCause::kWireBytes];
    std::memcpy(w, good, sizeof(w));
    w[off] = v;
    return !FailureCause::Decode(w, 4).has_value();
  };
  EXPECT_TRUE(refused(0, 0));                             // magic
  EXPECT_TRUE(refused(6, 0));                             // reason 0
  EXPECT_TRUE(refused(6, 200));                           // reason out of range
  EXPECT_TRUE(refused(6, 15));                            // one past the last reason
  EXPECT_FALSE(refused(6, 14));                           // the last (kP2pDeadlock)
  EXPECT_TRUE(refused(11, 0x80));                         // negative rank
  EXPECT_TRUE(refused(FailureCause::kWireBytes - 1, 1));  // reserved bytes
  FailureCause c = Sample();
  c.host = std::string(200, 'h');  // truncated by encode, so still terminated
  uint8_t w[FailureCause::kWireBytes];
  c.encode(w);
  auto d = FailureCause::Decode(w, 4);
  ASSERT_TRUE(d.has_value());
  EXPECT_LT(d->host.size(), FailureCause::kHostBytes);
  // An escape character, or text that fills its field with no terminator, is refused.
  const size_t host_off = [&] {
    for (size_t i = 0; i + 5 <= sizeof(good); ++i)
      if (std::memcmp(good + i, "node7", 5) == 0) return i;
    return size_t{0};
  }();
  ASSERT_GT(host_off, 0u);
  EXPECT_TRUE(refused(host_off, 0x1b));
  std::memcpy(w, good, sizeof(w));
  std::memset(w + host_off, 'x', FailureCause::kHostBytes);
  EXPECT_FALSE(FailureCause::Decode(w, 4).has_value());
}

TEST(CauseBoard, KeepsTheFirstStrongCauseOverAWeakOne) {
  CauseBoard b;
  FailureCause weak = Sample();
  weak.reason = FailureCause::Reason::kShutDown;
  weak.rank = 1;
  b.offer(weak);
  EXPECT_TRUE(b.first()->weak());
  b.offer(Sample());
  FailureCause later = Sample();
  later.rank = 0;
  b.offer(later);
  EXPECT_EQ(b.first()->rank, 2);
  EXPECT_TRUE(b.claimBroadcast());
  EXPECT_FALSE(b.claimBroadcast());
}

}  // namespace
}  // namespace braid
