// Address parsing, the NCCL_SOCKET_IFNAME grammar and the automatic interface choice
// (spec/reliability.md item 10), and the bounded socket helpers.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <thread>

#include "../common/accept_one.h"
#include "core/net/socket.h"
#include "core/net/unique_id.h"

namespace braid {
namespace {

InterfaceCandidate V4(const char* name, const char* ip, bool up = true, bool loopback = false) {
  InterfaceCandidate c;
  c.ifname = name;
  c.up = up;
  c.loopback = loopback;
  auto& in = reinterpret_cast<sockaddr_in&>(c.addr);
  in.sin_family = AF_INET;
  inet_pton(AF_INET, ip, &in.sin_addr);
  return c;
}

InterfaceCandidate V6(const char* name, const char* ip, bool up = true, bool loopback = false) {
  InterfaceCandidate c;
  c.ifname = name;
  c.up = up;
  c.loopback = loopback;
  auto& in6 = reinterpret_cast<sockaddr_in6&>(c.addr);
  in6.sin6_family = AF_INET6;
  inet_pton(AF_INET6, ip, &in6.sin6_addr);
  return c;
}

std::string Ip(const InterfaceAddress& a) {
  std::string s = FormatAddress(a.addr);
  s = s.substr(0, s.rfind(':'));
  if (!s.empty() && s[0] == '[') s = s.substr(1, s.size() - 2);
  return s;
}

TEST(ParseHostPort, Forms) {
  auto a = ParseHostPort("127.0.0.1:4242");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(FormatAddress(*a), "127.0.0.1:4242");
  auto b = ParseHostPort("[::1]:80");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(FormatAddress(*b), "[::1]:80");
  auto c = ParseHostPort("localhost:9");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(AddressPort(*c), 9);
  EXPECT_TRUE(ParseHostPort("127.0.0.1:0").ok());
}

TEST(ParseHostPort, Rejects) {
  for (const char* bad :
       {"", "127.0.0.1", "127.0.0.1:", ":80", "127.0.0.1:65536", "127.0.0.1:-1", "127.0.0.1:8x",
        "::1:80", "[::1]80", "[::1:80", "127.0.0.1:123456", "no-such-host.invalid:80"}) {
    auto r = ParseHostPort(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.status().cls(), ErrorClass::kInvalidArgument) << bad;
      EXPECT_FALSE(r.status().message().empty());
    }
  }
}

TEST(InterfaceSpec, Grammar) {
  EXPECT_TRUE(InterfaceMatchesSpec("eth", "eth0"));
  EXPECT_TRUE(InterfaceMatchesSpec("eth", "eth10"));
  EXPECT_FALSE(InterfaceMatchesSpec("eth", "ib0"));
  EXPECT_TRUE(InterfaceMatchesSpec("ib,eth", "eth1"));
  EXPECT_TRUE(InterfaceMatchesSpec("=eth0", "eth0"));
  EXPECT_FALSE(InterfaceMatchesSpec("=eth0", "eth01"));
  EXPECT_FALSE(InterfaceMatchesSpec("^docker", "docker0"));
  EXPECT_TRUE(InterfaceMatchesSpec("^docker", "eth0"));
  EXPECT_FALSE(InterfaceMatchesSpec("^docker,lo", "lo"));
  EXPECT_TRUE(InterfaceMatchesSpec("^=eth0", "eth01"));
  EXPECT_FALSE(InterfaceMatchesSpec("^=eth0", "eth0"));
  EXPECT_TRUE(InterfaceMatchesSpec("eth0, ib0", "ib0"));
}

TEST(ChooseInterface, AutomaticSkipsLoopbackBridgesVethAndLinkLocal) {
  std::vector<InterfaceCandidate> c = {
      V4("lo", "127.0.0.1", true, true), V4("docker0", "172.17.0.1"), V4("veth12ab", "172.18.0.5"),
      V4("virbr0", "192.168.122.1"),     V4("eth9", "169.254.3.4"),   V6("eth1", "fe80::1"),
      V4("eth2", "10.1.1.1", false),     V4("ens5", "10.0.0.7"),
  };
  auto r = ChooseInterface(c, "");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->ifname, "ens5");
  EXPECT_EQ(Ip(*r), "10.0.0.7");
  EXPECT_EQ(AddressPort(r->addr), 0);
}

TEST(ChooseInterface, AutomaticFallsBackToIpv6ThenLoopback) {
  std::vector<InterfaceCandidate> c = {V4("lo", "127.0.0.1", true, true),
                                       V4("docker0", "172.17.0.1"), V6("eth0", "fe80::2"),
                                       V6("eth0", "fd00::2")};
  auto r = ChooseInterface(c, "");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(Ip(*r), "fd00::2");
  c.pop_back();
  r = ChooseInterface(c, "");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->ifname, "lo");
  r = ChooseInterface({}, "");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(Ip(*r), "127.0.0.1");
}

TEST(ChooseInterface, ExplicitSpecs) {
  std::vector<InterfaceCandidate> c = {V4("lo", "127.0.0.1", true, true), V6("eth0", "fd00::2"),
                                       V4("eth0", "192.0.2.2"), V4("docker0", "172.17.0.1"),
                                       V4("ib0", "10.9.0.1")};
  auto r = ChooseInterface(c, "eth");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(Ip(*r), "192.0.2.2");  // IPv4 first
  r = ChooseInterface(c, "=docker0");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->ifname, "docker0");
  r = ChooseInterface(c, "^eth,docker");  // exclude list: not lo while ib0 exists
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->ifname, "ib0");
  r = ChooseInterface(c, "^eth,docker,ib");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->ifname, "lo");
}

TEST(ChooseInterface, NoMatchIsAUsageErrorListingInterfaces) {
  std::vector<InterfaceCandidate> c = {V4("lo", "127.0.0.1", true, true), V4("eth0", "192.0.2.2"),
                                       V4("eth1", "10.0.0.1", false)};
  for (const char* spec : {"wlan0", "=eth", "eth1", "^", ","}) {
    auto r = ChooseInterface(c, spec);
    ASSERT_FALSE(r.ok()) << spec;
    EXPECT_EQ(r.status().cls(), ErrorClass::kInvalidArgument);
    EXPECT_NE(r.status().message().find(spec), std::string::npos) << r.status().message();
  }
  auto r = ChooseInterface(c, "wlan0");
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("lo (127.0.0.1)"), std::string::npos) << m;
  EXPECT_NE(m.find("eth0 (192.0.2.2)"), std::string::npos) << m;
  EXPECT_NE(m.find("eth1 (down"), std::string::npos) << m;
}

TEST(SelectInterface, RealHost) {
  auto lo = SelectInterface("=lo");
  ASSERT_TRUE(lo.ok()) << lo.status().message();
  EXPECT_EQ(Ip(*lo), "127.0.0.1");
  auto automatic = SelectInterface("");
  EXPECT_TRUE(automatic.ok());
  auto bad = SelectInterface("no_such_if0");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().cls(), ErrorClass::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("lo ("), std::string::npos) << bad.status().message();
}

TEST(Listen, RefusesWildcardAndBindsLoopback) {
  sockaddr_storage any{};
  auto& in = reinterpret_cast<sockaddr_in&>(any);
  in.sin_family = AF_INET;
  in.sin_addr.s_addr = htonl(INADDR_ANY);
  auto r = ListenOn(any, 16);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("wildcard"), std::string::npos);

  auto l = ListenOn(LoopbackInterface().addr, 16);
  ASSERT_TRUE(l.ok()) << l.status().message();
  auto bound = LocalAddress(l->get());
  ASSERT_TRUE(bound.ok());
  EXPECT_NE(AddressPort(*bound), 0);
  EXPECT_EQ(FormatAddress(*bound).rfind("127.0.0.1:", 0), 0u);
}

using braid_test_common::AcceptOne;

TEST(Sockets, ConnectSendRecvWithDeadlines) {
  auto l = ListenOn(LoopbackInterface().addr, 16);
  ASSERT_TRUE(l.ok());
  auto addr = *LocalAddress(l->get());
  auto c = ConnectWithDeadline(addr, Deadline::After(2000));
  ASSERT_TRUE(c.ok()) << c.status().message();
  Fd s = AcceptOne(l->get());
  ASSERT_TRUE(s.valid());
  std::string big(3 << 20, 'x');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
  std::thread t(
      [&] { EXPECT_TRUE(SendAll(c->get(), big.data(), big.size(), Deadline::After(5000)).ok()); });
  std::string got(big.size(), '\0');
  EXPECT_TRUE(RecvAll(s.get(), got.data(), got.size(), Deadline::After(5000)).ok());
  t.join();
  EXPECT_EQ(got, big);

  // Nothing more arrives: a bounded wait times out.
  char b;
  auto st = RecvAll(s.get(), &b, 1, Deadline::After(100));
  EXPECT_EQ(st.cls(), ErrorClass::kTimeout);
  // The peer closes: a remote error.
  *c = Fd();
  st = RecvAll(s.get(), &b, 1, Deadline::After(2000));
  EXPECT_EQ(st.cls(), ErrorClass::kRemote);
}

// What SO_SNDBUF / SO_RCVBUF read back after asking for `bytes`: the kernel doubles the request,
// capped at net.core.{w,r}mem_max.
int GrantedBufferBytes(const char* max_file, int bytes) {
  long max = 0;
  std::FILE* f = std::fopen(max_file, "r");
  if (f) {
    if (std::fscanf(f, "%ld", &max) != 1) max = 0;
    std::fclose(f);
  }
  return 2 * static_cast<int>(max > 0 ? std::min<long>(bytes, max) : bytes);
}

int SocketOption(int fd, int name) {
  int v = 0;
  socklen_t len = sizeof(v);
  EXPECT_EQ(getsockopt(fd, SOL_SOCKET, name, &v, &len), 0);
  return v;
}

TEST(Sockets, BuffersAreSetEachOnItsOwnOnBothEnds) {
  // Send and receive buffers differ (tcp_transport.cc): each end gets what was asked for, the
  // accepted end through the listener; an unset one is left to the kernel.
  const SocketBuffers asked{.send_bytes = 96 << 10, .recv_bytes = 160 << 10};
  auto l = ListenOn(LoopbackInterface().addr, 16, asked);
  ASSERT_TRUE(l.ok());
  auto addr = *LocalAddress(l->get());
  auto c = ConnectWithDeadline(addr, Deadline::After(2000), asked);
  ASSERT_TRUE(c.ok()) << c.status().message();
  auto plain = ConnectWithDeadline(addr, Deadline::After(2000));
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  Fd s = AcceptOne(l->get(), asked);
  ASSERT_TRUE(s.valid());
  const int send = GrantedBufferBytes("/proc/sys/net/core/wmem_max", asked.send_bytes);
  const int recv = GrantedBufferBytes("/proc/sys/net/core/rmem_max", asked.recv_bytes);
  for (int fd : {c->get(), s.get()}) {
    EXPECT_EQ(SocketOption(fd, SO_SNDBUF), send);
    EXPECT_EQ(SocketOption(fd, SO_RCVBUF), recv);
  }
  // Connected without sizes: neither is what was asked of the others.
  EXPECT_NE(SocketOption(plain->get(), SO_SNDBUF), send);
  EXPECT_NE(SocketOption(plain->get(), SO_RCVBUF), recv);
}

TEST(Sockets, ConnectRefusedIsRemote) {
  auto l = ListenOn(LoopbackInterface().addr, 16);
  ASSERT_TRUE(l.ok());
  auto addr = *LocalAddress(l->get());
  *l = Fd();  // nobody listens there now
  auto c = ConnectWithDeadline(addr, Deadline::After(2000));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().cls(), ErrorClass::kRemote) << c.status().message();
}

sockaddr_storage V4Address(const char* ip) {
  sockaddr_storage a{};
  auto& in = reinterpret_cast<sockaddr_in&>(a);
  in.sin_family = AF_INET;
  inet_pton(AF_INET, ip, &in.sin_addr);
  return a;
}

TEST(Sockets, ConnectionLeavesFromTheSourceAddress) {
  // The tcp transport binds its connections to BRAID_SOCKET_IFNAME's address (its port is
  // ignored): the peer sees that address. 127.0.0.2 is this host's too (all of 127/8 is lo's).
  auto l = ListenOn(LoopbackInterface().addr, 16);
  ASSERT_TRUE(l.ok());
  const auto addr = *LocalAddress(l->get());
  sockaddr_storage source = V4Address("127.0.0.2");
  SetAddressPort(&source, 4242);
  auto c = StartConnect(addr, {}, &source);
  ASSERT_TRUE(c.ok()) << c.status().message();
  pollfd p{c->get(), POLLOUT, 0};
  ASSERT_EQ(poll(&p, 1, 5000), 1);
  EXPECT_EQ(ConnectError(c->get()), 0);
  Fd s = AcceptOne(l->get());
  ASSERT_TRUE(s.valid());
  const sockaddr_storage peer = *PeerAddress(s.get());
  EXPECT_EQ(FormatAddress(peer).rfind("127.0.0.2:", 0), 0u) << FormatAddress(peer);
  EXPECT_NE(AddressPort(peer), 4242);
  // An address this host does not have (TEST-NET-1): a system error that says where to look.
  const sockaddr_storage foreign = V4Address("192.0.2.1");
  auto bad = StartConnect(addr, {}, &foreign);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().cls(), ErrorClass::kSystem);
  EXPECT_NE(bad.status().message().find("check BRAID_SOCKET_IFNAME"), std::string::npos)
      << bad.status().message();
  // The wildcard, or another family, binds nothing: the kernel's choice, as without a source.
  for (const sockaddr_storage& ignored : {V4Address("0.0.0.0"), sockaddr_storage{}}) {
    auto plain = StartConnect(addr, {}, &ignored);
    EXPECT_TRUE(plain.ok()) << plain.status().message();
  }
}

}  // namespace
}  // namespace braid
