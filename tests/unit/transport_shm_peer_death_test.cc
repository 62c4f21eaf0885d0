// A peer process that dies (SIGKILL) is reported as a RemoteError naming it, through the pidfd,
// within about a second, after the bytes it had already sent are delivered.
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <cstring>
#include <thread>

#include "../common/proc_state.h"
#include "transport_shm_harness.h"

namespace braid::shm_test {
namespace {

using braid_test_common::kPollSyscalls;
using braid_test_common::ThisThreadId;
using braid_test_common::WaitUntilBlockedIn;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr size_t kRing = 64 << 10;

// Length-prefixed messages over a socketpair, each bounded by a poll() timeout.
bool WriteMsg(int fd, const std::string& s) {
  uint32_t n = static_cast<uint32_t>(s.size());
  std::string buf(reinterpret_cast<char*>(&n), sizeof(n));
  buf += s;
  return write(fd, buf.data(), buf.size()) == static_cast<ssize_t>(buf.size());
}

bool ReadExact(int fd, void* p, size_t n, int timeout_ms) {
  auto* c = static_cast<char*>(p);
  while (n > 0) {
    pollfd pf{fd, POLLIN, 0};
    if (poll(&pf, 1, timeout_ms) != 1) return false;
    ssize_t r = read(fd, c, n);
    if (r <= 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool ReadMsg(int fd, std::string* s, int timeout_ms = 10000) {
  uint32_t n = 0;
  if (!ReadExact(fd, &n, sizeof(n), timeout_ms) || n > (1 << 20)) return false;
  s->resize(n);
  return ReadExact(fd, s->data(), n, timeout_ms);
}

// One side of a two-process communicator (rank 0 = parent, rank 1 = child).
struct Side {
  Doorbell bell;
  std::unique_ptr<TransportInstance> inst;
  std::unique_ptr<Endpoint> ep;
};

// Runs the init lifecycle against the other process over `sock`. Returns "" or an error.
std::string Init(int rank, const std::string& tag, int sock, pid_t parent_pid, pid_t child_pid,
                 Side* s) {
  auto ctx = MakeContext(rank, {"A", "A"}, tag, 1, kRing);
  ctx.ranks[0].pid = parent_pid;
  ctx.ranks[1].pid = child_pid;
  auto bell = Doorbell::Bind(ctx.doorbell_name);
  if (!bell.ok()) return bell.status().message();
  s->bell = std::move(bell.value());
  auto inst = ShmTransportFactory()->create(ctx);
  if (!inst.ok()) return inst.status().message();
  s->inst = std::move(inst.value());
  std::vector<std::string> blobs(2);
  blobs[static_cast<size_t>(rank)] = s->inst->localBlob();
  if (!WriteMsg(sock, blobs[static_cast<size_t>(rank)])) return "write blob";
  if (!ReadMsg(sock, &blobs[static_cast<size_t>(1 - rank)])) return "read blob";
  if (!s->inst->canConnect(1 - rank, blobs)) return "canConnect false";
  std::vector<std::vector<std::unique_ptr<Endpoint>>> out;
  Status st = s->inst->connect({1 - rank}, blobs, Deadline::After(10000), &out);
  if (!st.ok()) return st.message();
  s->ep = std::move(out[0][0]);
  // Barrier, then unlink.
  std::string ack;
  if (!WriteMsg(sock, "connected") || !ReadMsg(sock, &ack)) return "barrier";
  st = s->inst->finishConnect();
  return st.ok() ? "" : st.message();
}

// The child: rank 1. Sends `nbytes` to rank 0, says so, then waits to be killed (never long:
// alarm() ends it if the parent forgets). Exit codes tell the parent what went wrong.
[[noreturn]] void ChildMain(const std::string& tag, int sock, pid_t parent, size_t nbytes) {
  alarm(30);
  Side s;
  if (!Init(1, tag, sock, parent, getpid(), &s).empty()) _exit(2);
  std::vector<std::byte> buf(nbytes);
  for (size_t i = 0; i < nbytes; ++i) buf[i] = PatternByte(i, 5);
  size_t off = 0;
  while (off < nbytes) {
    auto n = s.ep->send(buf.data() + off, nbytes - off);
    if (!n.ok()) _exit(3);
    off += *n;
  }
  if (!WriteMsg(sock, "sent")) _exit(4);
  for (;;) pause();
}

class ShmPeerDeathTest : public GuardedTest {
 protected:
  // Forks the child, runs init in both, waits until the child sent `nbytes`.
  void StartPeer(size_t nbytes) {
    tag_ = UniqueTag();
    int sv[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    const pid_t parent = getpid();
    child_ = fork();
    ASSERT_GE(child_, 0);
    if (child_ == 0) {
      close(sv[0]);
      ChildMain(tag_, sv[1], parent, nbytes);
    }
    close(sv[1]);
    sock_ = sv[0];
    std::string err = Init(0, tag_, sock_, parent, child_, &side_);
    ASSERT_EQ(err, "");
    std::string msg;
    ASSERT_TRUE(ReadMsg(sock_, &msg)) << "child did not finish sending";
    ASSERT_EQ(msg, "sent");
    EXPECT_TRUE(ShmEntries(tag_).empty()) << "both sides unlinked after init";
  }

  void KillPeer() {
    ASSERT_EQ(kill(child_, SIGKILL), 0);
    killed_at_ = steady_clock::now();
  }

  void TearDown() override {
    if (child_ > 0) {
      kill(child_, SIGKILL);
      int status;
      waitpid(child_, &status, 0);
    }
    if (sock_ >= 0) close(sock_);
    EXPECT_TRUE(ShmEntries(tag_).empty()) << "a killed rank leaves nothing in /dev/shm";
    GuardedTest::TearDown();
  }

  void ExpectNamesThePeer(const Status& st) {
    EXPECT_EQ(st.cls(), ErrorClass::kRemote) << st.message();
    EXPECT_NE(st.message().find("rank 1"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("pid " + std::to_string(child_)), std::string::npos)
        << st.message();
    EXPECT_NE(st.message().find("exited"), std::string::npos) << st.message();
  }

  std::string tag_;
  pid_t child_ = -1;
  int sock_ = -1;
  Side side_;
  steady_clock::time_point killed_at_;
};

// Reads until an error, sleeping like the engine. Returns the error and the bytes read first.
Status ReadUntilError(Endpoint* ep, Doorbell& bell, std::vector<std::byte>* got, int* timeouts) {
  std::vector<std::byte> buf(3000);
  auto deadline = steady_clock::now() + std::chrono::seconds(10);
  while (steady_clock::now() < deadline) {
    auto n = ep->recv(buf.data(), buf.size());
    if (!n.ok()) return n.status();
    got->insert(got->end(), buf.begin(), buf.begin() + static_cast<ptrdiff_t>(*n));
    if (*n == 0 && Sleep(ep, bell, false, true, 5000) == 0) ++*timeouts;
  }
  return TimeoutError("no error within 10 s");
}

TEST_F(ShmPeerDeathTest, SleepingReaderLearnsOfDeathAfterDrainingTheRing) {
  const size_t nbytes = 40000;  // fits the ring: all of it is in flight when the peer dies
  ASSERT_NO_FATAL_FAILURE(StartPeer(nbytes));
  KillPeer();
  std::vector<std::byte> got;
  int timeouts = 0;
  Status st = ReadUntilError(side_.ep.get(), side_.bell, &got, &timeouts);
  auto took = steady_clock::now() - killed_at_;
  ExpectNamesThePeer(st);
  EXPECT_LT(took, milliseconds(1000));
  EXPECT_EQ(timeouts, 0) << "the pidfd woke the sleeper";
  ASSERT_EQ(got.size(), nbytes) << "bytes sent before the death are delivered first";
  for (size_t i = 0; i < nbytes; ++i) ASSERT_EQ(got[i], PatternByte(i, 5)) << i;
  // Every later call fails the same way, in both directions.
  std::byte b[8];
  auto r = side_.ep->recv(b, 8);
  ASSERT_FALSE(r.ok());
  ExpectNamesThePeer(r.status());
  auto p = side_.ep->peek(8);
  ASSERT_FALSE(p.ok());
  auto s = side_.ep->send(b, 8);
  ASSERT_FALSE(s.ok());
  ExpectNamesThePeer(s.status());
  std::vector<pollfd> fds;
  EXPECT_TRUE(side_.ep->arm(true, true, fds)) << "a dead peer is progress to report";
  side_.ep->disarm(fds);
}

TEST_F(ShmPeerDeathTest, ReaderBlockedOnEmptyRingWakesWhenPeerDies) {
  ASSERT_NO_FATAL_FAILURE(StartPeer(16));
  std::byte b[16];
  ASSERT_EQ(*side_.ep->recv(b, 16), 16u);
  // Sleep first, kill while asleep: only the pidfd can wake us.
  std::vector<pollfd> fds{pollfd{side_.bell.fd(), POLLIN, 0}};
  ASSERT_FALSE(side_.ep->arm(false, true, fds));
  ASSERT_EQ(fds.size(), 2u) << "the peer's pidfd is watched";
  const pid_t sleeper = ThisThreadId();
  bool was_asleep = false;
  std::thread killer([&] {
    was_asleep = WaitUntilBlockedIn(sleeper, kPollSyscalls);
    KillPeer();
  });
  int rc = poll(fds.data(), fds.size(), 5000);
  side_.ep->disarm(fds);
  killer.join();
  EXPECT_TRUE(was_asleep) << "the reader never slept in poll()";
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(fds[1].revents & POLLIN);
  std::vector<std::byte> got;
  int timeouts = 0;
  Status st = ReadUntilError(side_.ep.get(), side_.bell, &got, &timeouts);
  ExpectNamesThePeer(st);
  EXPECT_TRUE(got.empty());
  EXPECT_LT(steady_clock::now() - killed_at_, milliseconds(1000));
}

TEST_F(ShmPeerDeathTest, WriterBlockedOnFullRingWakesWhenPeerDies) {
  ASSERT_NO_FATAL_FAILURE(StartPeer(8));
  std::vector<std::byte> buf(kRing);
  ASSERT_EQ(*side_.ep->send(buf.data(), buf.size()), kRing);  // the child never reads
  ASSERT_EQ(*side_.ep->send(buf.data(), 1), 0u);
  // Killed once the writer sleeps in poll() on the full ring: only the pidfd can wake it.
  const pid_t sleeper = ThisThreadId();
  bool was_asleep = false;
  std::thread killer([&] {
    was_asleep = WaitUntilBlockedIn(sleeper, kPollSyscalls);
    KillPeer();
  });
  Status st;
  int timeouts = 0;
  auto deadline = steady_clock::now() + std::chrono::seconds(10);
  while (steady_clock::now() < deadline) {
    auto n = side_.ep->send(buf.data(), 1);
    if (!n.ok()) {
      st = n.status();
      break;
    }
    ASSERT_EQ(*n, 0u);
    if (Sleep(side_.ep.get(), side_.bell, true, false, 5000) == 0) ++timeouts;
  }
  killer.join();
  EXPECT_TRUE(was_asleep) << "the writer never slept in poll()";
  ExpectNamesThePeer(st);
  EXPECT_EQ(timeouts, 0);
  EXPECT_LT(steady_clock::now() - killed_at_, milliseconds(1000));
}

}  // namespace
}  // namespace braid::shm_test
