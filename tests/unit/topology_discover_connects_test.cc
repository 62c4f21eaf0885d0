// Discovery opens no connection. hwloc's plugins did: its "gl" component probed X displays at
// every init (127.0.0.1:6000-6009 and /tmp/.X11-unix/X0-X9), and its GPU components initialise
// vendor runtimes. This binary defines connect() itself (exported: ENABLE_EXPORTS), so every
// connect in the process, hwloc's plugins' included, is recorded before it goes to libc's.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <unistd.h>

#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "topology/discover.h"

namespace {

std::mutex g_mu;
std::vector<std::string> g_connects;

std::string Describe(const sockaddr* a) {
  if (!a) return "(null)";
  if (a->sa_family == AF_UNIX) {
    const auto* u = reinterpret_cast<const sockaddr_un*>(a);
    return std::string("unix:") + (u->sun_path[0] ? u->sun_path : u->sun_path + 1);
  }
  if (a->sa_family == AF_INET)
    return "inet port " + std::to_string(ntohs(reinterpret_cast<const sockaddr_in*>(a)->sin_port));
  if (a->sa_family == AF_INET6)
    return "inet6 port " +
           std::to_string(ntohs(reinterpret_cast<const sockaddr_in6*>(a)->sin6_port));
  return "family " + std::to_string(a->sa_family);
}

}  // namespace

extern "C" int connect(int fd, const sockaddr* addr, socklen_t len) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_connects.push_back(Describe(addr));
  }
  using Fn = int (*)(int, const sockaddr*, socklen_t);
  static Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "connect"));
  return real(fd, addr, len);
}

namespace braid::topo {
namespace {

std::vector<std::string> Taken() {
  std::lock_guard<std::mutex> lock(g_mu);
  return std::exchange(g_connects, {});
}

// The interposer sees connects at all (else the test below could not fail).
TEST(DiscoverConnects, TheInterposerSeesConnects) {
  Taken();
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(6000);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  (void)::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  close(fd);
  EXPECT_EQ(Taken(), std::vector<std::string>{"inet port 6000"});
}

TEST(DiscoverConnects, DiscoveryConnectsToNothing) {
  Taken();
  for (int i = 0; i < 2; ++i) {
    auto d = Discover();
    ASSERT_TRUE(d.ok()) << d.status().message();
  }
  const std::vector<std::string> seen = Taken();
  std::string all;
  for (const auto& s : seen) all += "\n  " + s;
  EXPECT_TRUE(seen.empty()) << "discovery connected to:" << all;
}

}  // namespace
}  // namespace braid::topo
