// The shm transport's small-message board (transport/shm/shm_board.h) on its own: what a post
// carries in each place, the consumed marks a poster waits for, and that publish() wakes a reader
// asleep on a post. The board's executor (core/runtime/engine_board_calls.cc) leans on that wake: a
// reader that outran its spin sleeps on the post's number, and a publish that missed it would cost
// the reader its whole sleep on every such call.
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "../common/proc_state.h"
#include "transport/local_board.h"
#include "transport_shm_harness.h"

namespace braid::shm_test {
namespace {

using braid_test_common::ProcState;

class ShmBoardTest : public GuardedTest {
 protected:
  // Two ranks of one host, each with a board of 64 KiB posts.
  void SetUp() override {
    GuardedTest::SetUp();
    ASSERT_TRUE(BuildGroup({"A", "A"}, 1, 64 << 10, &g_, 64 << 10).ok());
    poster_ = g_.inst[0]->localBoard();
    reader_ = g_.inst[1]->localBoard();
    ASSERT_NE(poster_, nullptr);
    ASSERT_NE(reader_, nullptr);
  }
  static BoardSignature Sig(uint32_t seq) { return BoardSignature{{seq, ~uint64_t{seq}, 42}}; }

  Group g_;
  LocalBoard* poster_ = nullptr;
  LocalBoard* reader_ = nullptr;
};

TEST_F(ShmBoardTest, EachRankCoversItsPeerAndAPostLandsInThePlaceItsSizeNames) {
  EXPECT_TRUE(poster_->covers(1));
  EXPECT_TRUE(reader_->covers(0));
  EXPECT_FALSE(reader_->covers(2));
  EXPECT_FALSE(reader_->covers(-1));
  EXPECT_EQ(reader_->capacity(), uint64_t{64} << 10);
  uint32_t seq = 1;
  for (const BoardPlace place : {BoardPlace::kEntry, BoardPlace::kSlot, BoardPlace::kBuffer}) {
    const uint64_t bytes = place == BoardPlace::kEntry  ? poster_->entryCapacity()
                           : place == BoardPlace::kSlot ? poster_->slotCapacity()
                                                        : poster_->capacity();
    EXPECT_EQ(poster_->placeFor(bytes), place);
    std::vector<std::byte> payload(bytes);
    for (uint64_t i = 0; i < bytes; ++i) payload[i] = PatternByte(i, seq);
    std::memcpy(poster_->outbox(seq, place), payload.data(), bytes);
    EXPECT_FALSE(reader_->posted(0, seq));
    poster_->post(seq, Sig(seq));
    poster_->publish();
    ASSERT_TRUE(reader_->posted(0, seq));
    EXPECT_EQ(reader_->signature(0, seq), Sig(seq));
    EXPECT_EQ(std::memcmp(reader_->inbox(0, seq, place), payload.data(), bytes), 0);
    // The poster may reuse what the post took only once the reader says it has read it.
    EXPECT_FALSE(poster_->consumed(1, seq));
    reader_->consume(seq);
    EXPECT_TRUE(poster_->consumed(1, seq));
    EXPECT_TRUE(poster_->consumed(1, seq - 1));
    EXPECT_FALSE(poster_->consumed(1, seq + 1));
    ++seq;
  }
}

TEST_F(ShmBoardTest, PublishWakesAReaderAsleepOnAnyPostOfTheBatch) {
  // The reader sleeps on the second post of three for up to a minute: only the poster's one
  // publish for the batch can end that sleep in half of it.
  std::atomic<pid_t> tid{0};
  bool seen = false;
  std::thread reader([&] {
    tid.store(static_cast<pid_t>(syscall(SYS_gettid)));
    seen = reader_->sleepUntilPosted(0, 2, int64_t{60} * 1000 * 1000);
  });
  while (tid.load() == 0) std::this_thread::yield();
  // Asleep (in the futex) before anything is posted, or the test would not test the wake.
  while (ProcState(tid.load()) != 'S') std::this_thread::yield();
  const auto start = std::chrono::steady_clock::now();
  for (uint32_t seq = 1; seq <= 3; ++seq) poster_->post(seq, Sig(seq));
  poster_->publish();
  reader.join();
  EXPECT_TRUE(seen);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30))
      << "publish() did not wake the sleeping reader";
  EXPECT_EQ(reader_->signature(0, 2), Sig(2));
}

TEST_F(ShmBoardTest, AReaderSleepingOnALaterPostStaysAsleepUntilItsTimeout) {
  // Post 1 does not satisfy a reader of post 2: it wakes, looks and sleeps again (or times out).
  poster_->post(1, Sig(1));
  poster_->publish();
  EXPECT_FALSE(reader_->sleepUntilPosted(0, 2, 2000));
  EXPECT_TRUE(reader_->posted(0, 1));
  EXPECT_FALSE(reader_->posted(0, 2));
}

TEST_F(ShmBoardTest, APosterWaitingForItsPeerToConsumeSeesItWithoutAWake) {
  poster_->post(1, Sig(1));
  poster_->publish();
  bool seen = false;
  std::thread poster([&] {
    while (!poster_->sleepUntilConsumed(1, 1, 1000)) {
    }
    seen = true;
  });
  ASSERT_TRUE(reader_->posted(0, 1));
  reader_->consume(1);
  poster.join();
  EXPECT_TRUE(seen);
  EXPECT_TRUE(poster_->consumed(1, 1));
}

}  // namespace
}  // namespace braid::shm_test
