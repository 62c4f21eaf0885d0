// The TCP shutdown marker without a peek per receive: the kernel's receive counters
// (tcp_receive_counters.h) as the endpoint relies on them, and the marker recognised after a
// read dropped it, whatever the handshake read before the endpoint took the socket, and when
// the peer shut down (or died) before that. Raw loopback pairs, so that the bytes before the
// endpoint are under the test's control. Every wait is bounded.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <string>

#include "../common/accept_one.h"
#include "core/base/clock.h"
#include "core/net/socket.h"
#include "transport/tcp/tcp_endpoint.h"
#include "transport/tcp/tcp_receive_counters.h"

namespace braid {
namespace {

struct RawPair {
  Fd a, b;  // a connected b's listener
};

RawPair Connect() {
  RawPair p;
  auto l = ListenOn(LoopbackInterface().addr, 4);
  EXPECT_TRUE(l.ok()) << l.status().message();
  if (!l.ok()) return p;
  auto c = ConnectWithDeadline(*LocalAddress(l->get()), Deadline::After(5000));
  EXPECT_TRUE(c.ok()) << c.status().message();
  if (!c.ok()) return p;
  p.a = std::move(*c);
  p.b = braid_test_common::AcceptOne(l->get());
  EXPECT_TRUE(p.b.valid());
  return p;
}

// Waits (bounded) until `fd` has seen `events` (POLLIN: data; POLLRDHUP: the peer's FIN).
bool WaitForEvent(int fd, short events) {
  Deadline d = Deadline::After(5000);
  while (!d.expired()) {
    pollfd w{fd, events, 0};
    if (::poll(&w, 1, 100) == 1 && (w.revents & events)) return true;
  }
  return false;
}

// Waits (bounded) until the kernel counted `bytes` sequence numbers on `fd`.
std::optional<TcpReceiveCounters> CountersAt(int fd, uint64_t bytes) {
  Deadline d = Deadline::After(5000);
  std::optional<TcpReceiveCounters> c;
  while (!d.expired()) {
    c = ReadTcpReceiveCounters(fd);
    if (!c || c->bytes_received >= bytes) return c;
    pollfd w{fd, POLLIN | POLLRDHUP, 0};
    ::poll(&w, 1, 10);
  }
  return c;
}

// A pair whose b end read a 9-byte "handshake" and has 6 more bytes ("early-") waiting unread:
// the socket as an endpoint takes it over.
void ConnectAfterAHandshake(RawPair* p) {
  *p = Connect();
  ASSERT_TRUE(p->a.valid() && p->b.valid());
  ASSERT_TRUE(SendAll(p->a.get(), "handshake", 9, Deadline::After(5000)).ok());
  char hs[9];
  ASSERT_TRUE(RecvAll(p->b.get(), hs, 9, Deadline::After(5000)).ok());
  ASSERT_TRUE(SendAll(p->a.get(), "early-", 6, Deadline::After(5000)).ok());
  ASSERT_TRUE(CountersAt(p->b.get(), 15).has_value());  // waiting unread in b's socket
}

// Reads everything the endpoint delivers until it fails; the failure.
Status DrainUntilError(Endpoint* e, std::string* got) {
  Deadline d = Deadline::After(5000);
  char buf[64];
  for (;;) {
    auto n = e->recv(buf, sizeof(buf));
    if (!n.ok()) return n.status();
    got->append(buf, *n);
    if (d.expired()) return TimeoutError("the stream never ended");
    std::vector<pollfd> fds;
    if (*n == 0 && !e->arm(false, true, fds)) ::poll(fds.data(), fds.size(), 100);
    e->disarm(fds);
  }
}

TcpPeer Peer() {
  TcpPeer p;
  p.rank = 1;
  p.host = "h1";
  return p;
}

constexpr char kShutDown[] = "rank 1 on host h1 shut the stream down after a failure";
constexpr char kDied[] = "rank 1 on host h1 closed the connection: it probably exited or crashed";

// What the endpoint's accounting stands on: data, and the FIN as one more, in bytes_received;
// SIOCINQ's unread data without the FIN. A kernel that counted otherwise fails here by name
// instead of misreporting failures.
TEST(TcpReceiveCounters, CountDataUnreadBytesAndTheFinAsOne) {
  RawPair p = Connect();
  ASSERT_TRUE(p.a.valid() && p.b.valid());
  ASSERT_EQ(::send(p.a.get(), "0123456789", 10, MSG_NOSIGNAL), 10);
  auto c = CountersAt(p.b.get(), 10);
  ASSERT_TRUE(c.has_value()) << "TCP_INFO has no tcpi_bytes_received here";
  EXPECT_EQ(c->bytes_received, 10u);
  EXPECT_EQ(c->unread, 10u);
  EXPECT_FALSE(c->fin_received);
  char buf[4];
  ASSERT_EQ(::recv(p.b.get(), buf, 4, 0), 4);
  ::shutdown(p.a.get(), SHUT_WR);
  ASSERT_TRUE(WaitForEvent(p.b.get(), POLLRDHUP));
  c = CountersAt(p.b.get(), 11);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->bytes_received, 11u);  // the FIN counts one
  EXPECT_EQ(c->unread, 6u);
  EXPECT_TRUE(c->fin_received);
  // An urgent byte counts one more, received, and is not unread data behind the mark.
  RawPair q = Connect();
  ASSERT_TRUE(q.a.valid() && q.b.valid());
  ASSERT_EQ(::send(q.a.get(), "abc", 3, MSG_NOSIGNAL), 3);
  ASSERT_EQ(::send(q.a.get(), "S", 1, MSG_OOB | MSG_NOSIGNAL), 1);
  ::shutdown(q.a.get(), SHUT_WR);
  ASSERT_TRUE(WaitForEvent(q.b.get(), POLLRDHUP));
  c = CountersAt(q.b.get(), 5);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->bytes_received, 5u);
  EXPECT_EQ(c->unread, 3u);
}

// The handshake read some bytes and left others unread when the endpoint took the socket; the
// peer then sends more and shuts down. The endpoint's reads run into the marker (a read of 64
// stops before it, the next starts at it and drops it): still "shut the stream down".
TEST(TcpShutdownMarker, FoundAfterAReadDroppedItWithBytesFromBeforeTheEndpoint) {
  RawPair p;
  ASSERT_NO_FATAL_FAILURE(ConnectAfterAHandshake(&p));
  TcpEndpoint rx(std::move(p.b), Peer());
  TcpEndpoint tx(std::move(p.a), Peer());
  ASSERT_EQ(*tx.send("late", 4), 4u);
  tx.shutdown();
  std::string got;
  Status err = DrainUntilError(&rx, &got);
  EXPECT_EQ(got, "early-late");
  EXPECT_EQ(err.cls(), ErrorClass::kRemote) << err.message();
  EXPECT_NE(err.message().find(kShutDown), std::string::npos) << err.message();
}

// The same bytes, but the peer closes without a marker: a crash, not a shutdown.
TEST(TcpShutdownMarker, APeerThatClosesWithoutOneDied) {
  RawPair p;
  ASSERT_NO_FATAL_FAILURE(ConnectAfterAHandshake(&p));
  TcpEndpoint rx(std::move(p.b), Peer());
  ASSERT_TRUE(SendAll(p.a.get(), "late", 4, Deadline::After(5000)).ok());
  p.a = Fd();  // close(): FIN, no marker
  std::string got;
  Status err = DrainUntilError(&rx, &got);
  EXPECT_EQ(got, "early-late");
  EXPECT_EQ(err.cls(), ErrorClass::kRemote) << err.message();
  EXPECT_NE(err.message().find(kDied), std::string::npos) << err.message();
}

// A read that starts at the marker before the FIN arrives drops it and finds nothing (EAGAIN);
// then the FIN comes, this rank sends to the closed peer and a reset answers. The send fails
// first, in a state no FIN names (closed): still "shut the stream down", not a crash.
TEST(TcpShutdownMarker, FoundBySendAfterAReadDroppedItAndAResetFollowedTheFin) {
  RawPair p = Connect();
  ASSERT_TRUE(p.a.valid() && p.b.valid());
  TcpEndpoint rx(std::move(p.b), Peer());
  ASSERT_TRUE(SendAll(p.a.get(), "abc", 3, Deadline::After(5000)).ok());
  ASSERT_EQ(::send(p.a.get(), "S", 1, MSG_OOB | MSG_NOSIGNAL), 1);
  ASSERT_TRUE(CountersAt(rx.fd(), 4).has_value());
  char buf[64];
  auto n = rx.recv(buf, sizeof(buf));  // stops before the marker
  ASSERT_TRUE(n.ok() && *n == 3u);
  n = rx.recv(buf, sizeof(buf));  // starts at it: drops it, nothing to read yet
  ASSERT_TRUE(n.ok() && *n == 0u);
  char m;
  ASSERT_EQ(::recv(rx.fd(), &m, 1, MSG_OOB | MSG_DONTWAIT), -1) << "the marker was not dropped";
  ::shutdown(p.a.get(), SHUT_WR);
  ASSERT_TRUE(WaitForEvent(rx.fd(), POLLRDHUP));
  ASSERT_TRUE(SendAll(rx.fd(), "unread", 6, Deadline::After(5000)).ok());
  ASSERT_TRUE(CountersAt(p.a.get(), 6).has_value());
  p.a = Fd();  // closed with data unread: a reset
  ASSERT_TRUE(WaitForEvent(rx.fd(), POLLERR | POLLHUP));
  Status err;
  Deadline d = Deadline::After(5000);
  while (err.ok() && !d.expired()) err = rx.send("x", 1).status();
  EXPECT_EQ(err.cls(), ErrorClass::kRemote) << err.message();
  EXPECT_NE(err.message().find(kShutDown), std::string::npos) << err.message();
}

// The peer shut down (marker and FIN) before the endpoint took the socket: its bytes first,
// then "shut the stream down"; and died before it: its bytes, then "closed the connection".
TEST(TcpShutdownMarker, APeerThatEndedBeforeTheEndpointTookTheSocket) {
  for (bool marked : {true, false}) {
    SCOPED_TRACE(marked ? "shut down" : "died");
    RawPair p = Connect();
    ASSERT_TRUE(p.a.valid() && p.b.valid());
    ASSERT_TRUE(SendAll(p.a.get(), "bye", 3, Deadline::After(5000)).ok());
    if (marked) {
      ASSERT_EQ(::send(p.a.get(), "S", 1, MSG_OOB | MSG_NOSIGNAL), 1);
    }
    ::shutdown(p.a.get(), SHUT_WR);
    ASSERT_TRUE(WaitForEvent(p.b.get(), POLLRDHUP));
    TcpEndpoint rx(std::move(p.b), Peer());
    std::string got;
    Status err = DrainUntilError(&rx, &got);
    EXPECT_EQ(got, "bye");
    EXPECT_NE(err.message().find(marked ? kShutDown : kDied), std::string::npos) << err.message();
  }
}

}  // namespace
}  // namespace braid
