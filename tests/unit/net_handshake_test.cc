// The HMAC challenge-response of handshake.h over socketpairs: success, wrong secret, garbage,
// short reads against a deadline, replays, and the non-blocking state machines by hand.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "core/net/handshake.h"
#include "core/net/socket.h"

namespace braid {
namespace {

std::vector<uint8_t> Secret(uint8_t seed) {
  std::vector<uint8_t> s(32);
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<uint8_t>(seed * 31 + i);
  return s;
}

HandshakeHello Hello(int rank) {
  HandshakeHello h;
  h.purpose = 2;
  h.rank = rank;
  h.nranks = 8;
  h.channel = 3;
  for (int i = 0; i < 16; ++i) h.comm_nonce[i] = static_cast<uint8_t>(i + 1);
  return h;
}

struct Pair {
  Fd a, b;
  Pair() {
    int fds[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    a = Fd(fds[0]);
    b = Fd(fds[1]);
  }
};

int64_t ElapsedMs(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

TEST(Handshake, Success) {
  Pair p;
  Result<HandshakeHello> server = InternalError("not run");
  std::thread t([&] { server = HandshakeServer(p.b.get(), Secret(1), Deadline::After(5000)); });
  Status client = HandshakeClient(p.a.get(), Secret(1), Hello(5), Deadline::After(5000));
  t.join();
  ASSERT_TRUE(client.ok()) << client.message();
  ASSERT_TRUE(server.ok()) << server.status().message();
  EXPECT_EQ(server->purpose, 2u);
  EXPECT_EQ(server->rank, 5);
  EXPECT_EQ(server->nranks, 8);
  EXPECT_EQ(server->channel, 3);
  EXPECT_EQ(server->comm_nonce[15], 16);
  // Nothing beyond the handshake was consumed: application bytes follow intact.
  ASSERT_EQ(write(p.a.get(), "after", 5), 5);
  char buf[5];
  ASSERT_TRUE(RecvAll(p.b.get(), buf, 5, Deadline::After(1000)).ok());
  EXPECT_EQ(std::memcmp(buf, "after", 5), 0);
}

TEST(Handshake, WrongSecretFailsBothSides) {
  Pair p;
  Result<HandshakeHello> server = InternalError("not run");
  std::thread t([&] {
    server = HandshakeServer(p.b.get(), Secret(1), Deadline::After(5000));
    p.b = Fd();  // a server closes after a failed handshake
  });
  Status client = HandshakeClient(p.a.get(), Secret(2), Hello(1), Deadline::After(5000));
  t.join();
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().cls(), ErrorClass::kRemote);
  EXPECT_NE(server.status().message().find("authentication failed"), std::string::npos);
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.cls(), ErrorClass::kRemote);
}

TEST(Handshake, ClientRejectsServerWithoutSecret) {
  // A server that does not know the secret cannot forge its proof.
  Pair p;
  std::thread t([&] {
    ServerHandshake m(Secret(9));
    while (m.state() == HandshakeState::kWantWrite || m.state() == HandshakeState::kWantRead) {
      m.drive(p.b.get());
      pollfd f{p.b.get(), m.pollEvents(), 0};
      poll(&f, 1, 100);
    }
    // Forge: pretend the MAC was right and answer with garbage "proof".
    uint8_t junk[kHandshakeMacBytes] = {1, 2, 3};
    (void)!write(p.b.get(), junk, sizeof(junk));
  });
  Status client = HandshakeClient(p.a.get(), Secret(1), Hello(1), Deadline::After(5000));
  t.join();
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.cls(), ErrorClass::kRemote);
  EXPECT_NE(client.message().find("prove"), std::string::npos) << client.message();
}

TEST(Handshake, GarbageIsRejectedWithoutParsing) {
  ServerHandshake m(Secret(1));
  ASSERT_EQ(m.state(), HandshakeState::kWantWrite);
  EXPECT_EQ(m.output().size(), kHandshakeGreetingBytes);
  m.wrote(m.output().size());
  ASSERT_EQ(m.state(), HandshakeState::kWantRead);
  std::vector<uint8_t> garbage(kHandshakeClientBytes, 0xff);  // "huge length prefixes"
  m.feed(garbage.data(), garbage.size());
  EXPECT_EQ(m.state(), HandshakeState::kFailed);
  EXPECT_EQ(m.hello().rank, -1);  // nothing of it was interpreted

  // Over a socket: the client sends garbage, the server fails at once.
  Pair p;
  std::thread t([&] { (void)!write(p.a.get(), garbage.data(), garbage.size()); });
  auto r = HandshakeServer(p.b.get(), Secret(1), Deadline::After(5000));
  t.join();
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().cls(), ErrorClass::kRemote);
}

TEST(Handshake, ClientRejectsNonBraidGreeting) {
  Pair p;
  ASSERT_EQ(write(p.b.get(), "HTTP/1.1 200 OK\r\n\r\nxxxxxxxxxxxxxxxxxxxxxxx", 42), 42);
  Status st = HandshakeClient(p.a.get(), Secret(1), Hello(0), Deadline::After(2000));
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("not a braid endpoint"), std::string::npos);
}

TEST(Handshake, ShortReadHitsTheDeadline) {
  Pair p;
  // The client sends only half of its message and then stalls.
  std::thread t([&] {
    uint8_t greeting[kHandshakeGreetingBytes];
    ASSERT_TRUE(RecvAll(p.a.get(), greeting, sizeof(greeting), Deadline::After(2000)).ok());
    uint8_t half[kHandshakeClientBytes / 2] = {};
    ASSERT_EQ(write(p.a.get(), half, sizeof(half)), static_cast<ssize_t>(sizeof(half)));
  });
  auto start = Clock::now();
  auto r = HandshakeServer(p.b.get(), Secret(1), Deadline::After(300));
  t.join();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().cls(), ErrorClass::kTimeout);
  EXPECT_GE(ElapsedMs(start), 250);
  EXPECT_LT(ElapsedMs(start), 2000);

  // The client side too: a server that never greets.
  Pair q;
  start = Clock::now();
  Status st = HandshakeClient(q.a.get(), Secret(1), Hello(0), Deadline::After(300));
  EXPECT_EQ(st.cls(), ErrorClass::kTimeout);
  EXPECT_LT(ElapsedMs(start), 2000);
}

TEST(Handshake, PeerClosingMidwayIsReported) {
  Pair p;
  std::thread t([&] {
    uint8_t greeting[kHandshakeGreetingBytes];
    ASSERT_TRUE(RecvAll(p.a.get(), greeting, sizeof(greeting), Deadline::After(2000)).ok());
    uint8_t part[10] = {};
    (void)!write(p.a.get(), part, sizeof(part));
    p.a = Fd();
  });
  auto r = HandshakeServer(p.b.get(), Secret(1), Deadline::After(2000));
  t.join();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().cls(), ErrorClass::kRemote);
  EXPECT_NE(r.status().message().find("closed"), std::string::npos);
}

TEST(Handshake, ReplayedClientMessageFailsOnAFreshChallenge) {
  // Record a genuine client message for one server challenge ...
  ServerHandshake first(Secret(1));
  ClientHandshake client(Secret(1), Hello(4));
  client.feed(first.output().data(), first.output().size());
  first.wrote(first.output().size());
  ASSERT_EQ(client.state(), HandshakeState::kWantWrite);
  std::vector<uint8_t> recorded = client.output();
  ASSERT_EQ(recorded.size(), kHandshakeClientBytes);
  first.feed(recorded.data(), recorded.size());
  ASSERT_EQ(first.state(), HandshakeState::kVerified);  // genuine the first time

  // ... and replay it to a new server: its fresh nonce makes the MAC wrong.
  ServerHandshake second(Secret(1));
  second.wrote(second.output().size());
  second.feed(recorded.data(), recorded.size());
  EXPECT_EQ(second.state(), HandshakeState::kFailed);

  // Reflection: the server's proof is not valid as a client message.
  first.accept();
  ASSERT_EQ(first.state(), HandshakeState::kWantWrite);
  EXPECT_EQ(first.output().size(), kHandshakeMacBytes);
}

TEST(Handshake, StateMachinesByHandByteAtATime) {
  ServerHandshake s(Secret(3));
  ClientHandshake c(Secret(3), Hello(7));
  // Pump one byte at a time in both directions until both are done.
  for (int steps = 0; steps < 10000; ++steps) {
    if (s.state() == HandshakeState::kVerified) {
      EXPECT_EQ(s.hello().rank, 7);
      s.accept();
    }
    if (s.state() == HandshakeState::kWantWrite && c.wantInput() > 0) {
      c.feed(s.output().data(), 1);
      s.wrote(1);
    }
    if (c.state() == HandshakeState::kWantWrite && s.wantInput() > 0) {
      s.feed(c.output().data(), 1);
      c.wrote(1);
    }
    if (s.state() == HandshakeState::kDone && c.state() == HandshakeState::kDone) break;
  }
  EXPECT_EQ(s.state(), HandshakeState::kDone);
  EXPECT_EQ(c.state(), HandshakeState::kDone);
}

TEST(Handshake, RejectAfterVerification) {
  ServerHandshake s(Secret(3));
  ClientHandshake c(Secret(3), Hello(7));
  c.feed(s.output().data(), s.output().size());
  s.wrote(s.output().size());
  s.feed(c.output().data(), c.output().size());
  c.wrote(c.output().size());
  ASSERT_EQ(s.state(), HandshakeState::kVerified);
  s.reject(RemoteError("duplicate"));
  EXPECT_EQ(s.state(), HandshakeState::kFailed);
  EXPECT_TRUE(s.output().empty());  // no proof is ever sent
}

TEST(Handshake, ShortSecretIsRefused) {
  ServerHandshake s(std::vector<uint8_t>(4, 1));
  EXPECT_EQ(s.state(), HandshakeState::kFailed);
  ClientHandshake c(std::vector<uint8_t>(), Hello(0));
  EXPECT_EQ(c.state(), HandshakeState::kFailed);
}

}  // namespace
}  // namespace braid
