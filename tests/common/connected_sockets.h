// Connected TCP sockets of this process (data streams, a bootstrap connection): what tests of
// connections made when first needed (BRAID_LAZY_CONNECT) count. Shared by the unit and
// multi-rank tiers.
#pragma once

#include <dirent.h>
#include <sys/socket.h>

#include <cstdlib>

namespace braid_test_common {

inline int ConnectedTcpSockets() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const int fd = std::atoi(e->d_name);
    int domain = 0, type = 0;
    socklen_t len = sizeof(domain);
    if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0) continue;
    len = sizeof(type);
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0) continue;
    if ((domain != AF_INET && domain != AF_INET6) || type != SOCK_STREAM) continue;
    sockaddr_storage peer{};
    len = sizeof(peer);
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) == 0) ++n;
  }
  closedir(d);
  return n;
}

}  // namespace braid_test_common
