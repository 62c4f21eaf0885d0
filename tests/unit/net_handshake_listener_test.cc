// HandshakeListener (spec/reliability.md item 4): strangers are accepted and dropped within about
// a second, all at once rather than one after another, and never delay a peer that knows the
// secret; the owner's check refuses authenticated connections it does not want; a process out of
// descriptors refuses connections with the remedy instead of leaving them queued.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "core/net/handshake.h"
#include "core/net/handshake_listener.h"
#include "core/net/socket.h"

namespace braid {
namespace {

// A listener's 1 s handshake limit plus slack for a loaded CI machine.
constexpr int64_t kDropBoundMs = kHandshakeTimeoutMs + 1500;
constexpr uint32_t kPurpose = 3;

std::vector<uint8_t> Secret() {
  return std::vector<uint8_t>(32, 0x42);
}

sockaddr_storage Loopback() {
  return LoopbackInterface().addr;
}

int64_t ElapsedMs(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

std::unique_ptr<HandshakeListener> StartListener() {
  auto l = HandshakeListener::Start(
      Loopback(), Secret(),
      [](const HandshakeHello& h) {
        return h.purpose == kPurpose ? std::string() : "not a control connection";
      },
      "test listener");
  EXPECT_TRUE(l.ok()) << l.status().message();
  return l.ok() ? std::move(*l) : nullptr;
}

HandshakeHello Hello(uint32_t purpose, int rank) {
  HandshakeHello h;
  h.purpose = purpose;
  h.rank = rank;
  h.nranks = 8;
  return h;
}

// Connects and authenticates as `rank` with `purpose`.
Status Authenticate(const sockaddr_storage& addr, uint32_t purpose, int rank, Fd* out = nullptr) {
  auto fd = ConnectWithDeadline(addr, Deadline::After(3000));
  if (!fd.ok()) return fd.status();
  Status st = HandshakeClient(fd->get(), Secret(), Hello(purpose, rank), Deadline::After(5000));
  if (out) *out = std::move(*fd);
  return st;
}

// Waits until the server closes `fd`; ms since `since`, or -1 at `limit_ms`.
int64_t WaitClosed(int fd, Clock::time_point since, int limit_ms) {
  Deadline d = Deadline::After(limit_ms);
  char buf[256];
  while (!d.expired()) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, d.remainingMs(100)) <= 0) continue;
    ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return ElapsedMs(since);
  }
  return -1;
}

TEST(HandshakeListener, IdleStrangersGoWithinASecondAndDoNotDelayAPeer) {
  auto l = StartListener();
  ASSERT_NE(l, nullptr);
  // More idle strangers than any backlog default, all connected before the peer comes.
  const int kStrangers = 300;
  std::vector<Fd> strangers;
  std::vector<Clock::time_point> since;
  for (int i = 0; i < kStrangers; ++i) {
    since.push_back(Clock::now());
    auto fd = ConnectWithDeadline(l->address(), Deadline::After(3000));
    ASSERT_TRUE(fd.ok()) << "stranger " << i << ": " << fd.status().message();
    strangers.push_back(std::move(*fd));
  }
  // The peer is served at once, although every stranger before it sends nothing.
  Fd peer;
  Deadline quick = Deadline::After(kHandshakeTimeoutMs / 2);
  ASSERT_TRUE(Authenticate(l->address(), kPurpose, 7, &peer).ok());
  auto conn = l->next(quick);
  ASSERT_TRUE(conn.ok()) << conn.status().message();
  EXPECT_EQ(conn->hello.rank, 7);
  EXPECT_EQ(conn->hello.purpose, kPurpose);
  // Bytes the peer sends after the handshake are the owner's.
  ASSERT_EQ(send(peer.get(), "id", 2, MSG_NOSIGNAL), 2);
  char got[2] = {};
  ASSERT_TRUE(RecvAll(conn->fd.get(), got, 2, Deadline::After(3000)).ok());
  EXPECT_EQ(std::string(got, 2), "id");

  for (int i = 0; i < kStrangers; ++i) {
    int64_t ms = WaitClosed(strangers[i].get(), since[i], 10000);
    EXPECT_GE(ms, 0) << "stranger " << i << " was never dropped";
    EXPECT_LE(ms, kDropBoundMs) << "stranger " << i;
  }
  EXPECT_GE(l->dropped(), static_cast<uint64_t>(kStrangers));
}

TEST(HandshakeListener, CheckRefusesAuthenticatedConnectionsItDoesNotWant) {
  auto l = StartListener();
  ASSERT_NE(l, nullptr);
  EXPECT_FALSE(Authenticate(l->address(), kPurpose + 1, 1).ok());
  auto conn = l->next(Deadline::After(200));
  EXPECT_FALSE(conn.ok());
  EXPECT_EQ(conn.status().cls(), ErrorClass::kTimeout);
  // Wrong secret: refused by the handshake itself.
  auto fd = ConnectWithDeadline(l->address(), Deadline::After(3000));
  ASSERT_TRUE(fd.ok());
  std::vector<uint8_t> wrong(32, 0x17);
  EXPECT_FALSE(HandshakeClient(fd->get(), wrong, Hello(kPurpose, 1), Deadline::After(3000)).ok());
  EXPECT_GE(l->dropped(), 2u);
}

// The listener's process has no descriptor left: a connecting peer is refused at once with a
// SystemError naming EMFILE and 'ulimit -n', not left in the backlog until its deadline.
TEST(HandshakeListener, OutOfDescriptorsRefusesWithTheRemedy) {
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  std::fflush(nullptr);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto l = StartListener();
    if (!l) _exit(1);
    // One connection served first: the listener's thread is running before the descriptors run
    // out (UBSan's vptr check on the thread's first call probes memory through a pipe, and reports
    // an invalid vptr when it cannot make one).
    if (!Authenticate(l->address(), kPurpose, 1).ok() || !l->next(Deadline::After(5000)).ok())
      _exit(3);
    rlimit rl{};
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = 64;
    setrlimit(RLIMIT_NOFILE, &rl);
    while (open("/dev/null", O_RDONLY | O_CLOEXEC) >= 0) {
    }
    sockaddr_storage addr = l->address();
    if (write(ready[1], &addr, sizeof(addr)) != static_cast<ssize_t>(sizeof(addr))) _exit(2);
    for (;;) pause();
  }
  close(ready[1]);
  sockaddr_storage addr{};
  ASSERT_EQ(read(ready[0], &addr, sizeof(addr)), static_cast<ssize_t>(sizeof(addr)));
  close(ready[0]);
  Status st = Authenticate(addr, kPurpose, 1);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_EQ(st.cls(), ErrorClass::kSystem) << st.message();
  EXPECT_NE(st.message().find("EMFILE"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("ulimit -n"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace braid
