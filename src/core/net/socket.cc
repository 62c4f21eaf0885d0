#include "core/net/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <sstream>

#include "core/net/unique_id.h"

namespace braid {

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.release();
  }
  return *this;
}

Fd::~Fd() {
  if (fd_ >= 0) ::close(fd_);
}

namespace {

// The address without port, for messages: "10.0.0.1", "fd00::2".
std::string IpOf(const sockaddr_storage& a) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (a.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(a).sin_addr, buf, sizeof(buf));
  } else if (a.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(a).sin6_addr, buf, sizeof(buf));
  } else {
    return "";
  }
  return buf;
}

bool IsIpv4LinkLocal(const sockaddr_storage& a) {
  if (a.ss_family != AF_INET) return false;
  uint32_t ip = ntohl(reinterpret_cast<const sockaddr_in&>(a).sin_addr.s_addr);
  return (ip >> 16) == 0xa9fe;  // 169.254.0.0/16
}

// IPv6 link-local addresses need a scope id, which the unique id does not carry: never used.
bool IsIpv6LinkLocal(const sockaddr_storage& a) {
  if (a.ss_family != AF_INET6) return false;
  return IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<const sockaddr_in6&>(a).sin6_addr);
}

bool IsWildcard(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET)
    return reinterpret_cast<const sockaddr_in&>(a).sin_addr.s_addr == htonl(INADDR_ANY);
  if (a.ss_family == AF_INET6)
    return IN6_IS_ADDR_UNSPECIFIED(&reinterpret_cast<const sockaddr_in6&>(a).sin6_addr);
  return false;
}

// Names of virtual interfaces that rarely route between hosts (container bridges, veth halves,
// libvirt): the automatic choice skips them, as NCCL skips docker*.
bool IsVirtualName(const std::string& n) {
  static const char* kPrefixes[] = {"docker", "virbr", "veth",    "br-",    "lxcbr",
                                    "lxdbr",  "cni",   "flannel", "podman", "vnet"};
  for (const char* p : kPrefixes)
    if (n.rfind(p, 0) == 0) return true;
  return false;
}

std::vector<std::string> SplitList(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    // Tolerate spaces around names ("eth0, eth1").
    size_t b = item.find_first_not_of(" \t");
    size_t e = item.find_last_not_of(" \t");
    if (b != std::string::npos) out.push_back(item.substr(b, e - b + 1));
  }
  return out;
}

std::string DescribeInterfaces(const std::vector<InterfaceCandidate>& cands) {
  // Group addresses by interface, keeping first-seen order.
  std::vector<std::string> order;
  std::map<std::string, std::pair<bool, std::vector<std::string>>> info;
  for (const auto& c : cands) {
    if (!info.count(c.ifname)) order.push_back(c.ifname);
    auto& e = info[c.ifname];
    e.first = e.first || c.up;
    std::string ip = IpOf(c.addr);
    if (!ip.empty()) e.second.push_back(ip);
  }
  std::string out;
  for (const auto& n : order) {
    const auto& e = info[n];
    std::string parts;
    if (!e.first) parts = "down";
    for (const auto& ip : e.second) parts += (parts.empty() ? "" : ", ") + ip;
    if (e.second.empty()) parts += (parts.empty() ? "" : ", ") + std::string("no IP address");
    out += (out.empty() ? "" : "; ") + n + " (" + parts + ")";
  }
  return out.empty() ? "none" : out;
}

InterfaceAddress MakeChoice(const InterfaceCandidate& c) {
  InterfaceAddress r;
  r.ifname = c.ifname;
  r.addr = c.addr;
  SetAddressPort(&r.addr, 0);
  return r;
}

// Addresses a listener may use: up, IPv4 or IPv6 but not IPv6 link-local.
bool Usable(const InterfaceCandidate& c) {
  if (!c.up) return false;
  if (c.addr.ss_family == AF_INET) return true;
  return c.addr.ss_family == AF_INET6 && !IsIpv6LinkLocal(c.addr);
}

Status WaitFor(int fd, short events, Deadline deadline, const char* what) {
  for (;;) {
    pollfd p{fd, events, 0};
    int ms = deadline.remainingMs();
    int r = ::poll(&p, 1, ms);
    if (r > 0) return Status::Ok();
    if (r == 0) {
      if (deadline.expired()) return TimeoutError(std::string("timed out while ") + what);
      continue;
    }
    if (errno == EINTR) continue;
    return SystemError(ErrnoMessage("poll", errno));
  }
}

}  // namespace

bool InterfaceMatchesSpec(const std::string& spec, const std::string& ifname) {
  std::string s = spec;
  bool exclude = false, exact = false;
  if (!s.empty() && s[0] == '^') {
    exclude = true;
    s.erase(0, 1);
  }
  if (!s.empty() && s[0] == '=') {
    exact = true;
    s.erase(0, 1);
  }
  bool matched = false;
  for (const auto& item : SplitList(s)) {
    if (exact ? ifname == item : ifname.rfind(item, 0) == 0) {
      matched = true;
      break;
    }
  }
  return exclude ? !matched : matched;
}

Result<std::vector<InterfaceCandidate>> ListInterfaces() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return SystemError(SocketErrnoMessage("getifaddrs", errno));
  std::vector<InterfaceCandidate> out;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_name) continue;
    InterfaceCandidate c;
    c.ifname = i->ifa_name;
    c.up = (i->ifa_flags & IFF_UP) != 0;
    c.loopback = (i->ifa_flags & IFF_LOOPBACK) != 0;
    int fam = i->ifa_addr ? i->ifa_addr->sa_family : AF_UNSPEC;
    if (fam == AF_INET) {
      std::memcpy(&c.addr, i->ifa_addr, sizeof(sockaddr_in));
    } else if (fam == AF_INET6) {
      std::memcpy(&c.addr, i->ifa_addr, sizeof(sockaddr_in6));
    } else {
      // Kept (without address) only so error messages can list every interface.
      c.addr.ss_family = AF_UNSPEC;
    }
    out.push_back(c);
  }
  freeifaddrs(list);
  return out;
}

Result<InterfaceAddress> ChooseInterface(const std::vector<InterfaceCandidate>& cands,
                                         const std::string& spec) {
  if (spec.empty()) {
    auto good = [](const InterfaceCandidate& c) {
      return Usable(c) && !c.loopback && !IsVirtualName(c.ifname) && !IsIpv4LinkLocal(c.addr);
    };
    for (const auto& c : cands)
      if (good(c) && c.addr.ss_family == AF_INET) return MakeChoice(c);
    for (const auto& c : cands)
      if (good(c) && c.addr.ss_family == AF_INET6) return MakeChoice(c);
    for (const auto& c : cands)
      if (Usable(c) && c.loopback && c.addr.ss_family == AF_INET) return MakeChoice(c);
    return LoopbackInterface();
  }
  std::string body = spec;
  bool exclude = !body.empty() && body[0] == '^';
  if (exclude) body.erase(0, 1);
  if (!body.empty() && body[0] == '=') body.erase(0, 1);
  if (SplitList(body).empty())
    return InvalidArgument("BRAID_SOCKET_IFNAME/NCCL_SOCKET_IFNAME='" + spec +
                           "' names no interface (syntax: eth0 | eth (prefix) | =eth0 (exact) | "
                           "^docker,lo (exclude), comma-separated)");
  // Among matches: IPv4 before IPv6; for an exclude list also non-loopback and routable first,
  // since "^docker" rarely means "use lo".
  for (int pass = 0; pass < 4; ++pass) {
    for (const auto& c : cands) {
      if (!Usable(c) || !InterfaceMatchesSpec(spec, c.ifname)) continue;
      bool v4 = c.addr.ss_family == AF_INET;
      bool preferred = !exclude || (!c.loopback && !IsIpv4LinkLocal(c.addr));
      bool take = (pass == 0 && v4 && preferred) || (pass == 1 && !v4 && preferred) ||
                  (pass == 2 && v4) || pass == 3;
      if (take) return MakeChoice(c);
    }
  }
  return InvalidArgument("BRAID_SOCKET_IFNAME/NCCL_SOCKET_IFNAME='" + spec +
                         "' matches no interface that is up with a usable IP address; "
                         "interfaces on this host: " +
                         DescribeInterfaces(cands));
}

Result<InterfaceAddress> SelectInterface(const std::string& spec) {
  BRAID_ASSIGN_OR_RETURN(auto cands, ListInterfaces());
  return ChooseInterface(cands, spec);
}

InterfaceAddress LoopbackInterface() {
  InterfaceAddress r;
  r.ifname = "lo";
  auto& in = reinterpret_cast<sockaddr_in&>(r.addr);
  in.sin_family = AF_INET;
  in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  in.sin_port = 0;
  return r;
}

Result<sockaddr_storage> ParseHostPort(const std::string& s) {
  std::string host, port;
  if (!s.empty() && s[0] == '[') {
    size_t close = s.find(']');
    if (close == std::string::npos || close + 1 >= s.size() || s[close + 1] != ':')
      return InvalidArgument("bad address '" + s + "': expected [ipv6]:port");
    host = s.substr(1, close - 1);
    port = s.substr(close + 2);
  } else {
    size_t colon = s.rfind(':');
    if (colon == std::string::npos)
      return InvalidArgument("bad address '" + s + "': expected host:port");
    host = s.substr(0, colon);
    port = s.substr(colon + 1);
    if (host.find(':') != std::string::npos)
      return InvalidArgument("bad address '" + s + "': IPv6 addresses need brackets: [addr]:port");
  }
  if (host.empty()) return InvalidArgument("bad address '" + s + "': empty host");
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos)
    return InvalidArgument("bad address '" + s + "': port must be a number 0..65535");
  unsigned long pn = std::stoul(port);
  if (pn > 65535) return InvalidArgument("bad address '" + s + "': port must be 0..65535");

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || !res) {
    if (res) freeaddrinfo(res);
    return InvalidArgument("cannot resolve host '" + host + "' of address '" + s +
                           "': " + gai_strerror(rc));
  }
  // Prefer IPv4, as interface selection does.
  const addrinfo* pick = nullptr;
  for (const addrinfo* a = res; a; a = a->ai_next)
    if (a->ai_family == AF_INET) {
      pick = a;
      break;
    }
  if (!pick)
    for (const addrinfo* a = res; a; a = a->ai_next)
      if (a->ai_family == AF_INET6) {
        pick = a;
        break;
      }
  if (!pick) {
    freeaddrinfo(res);
    return InvalidArgument("host '" + host + "' has no IPv4 or IPv6 address");
  }
  sockaddr_storage out{};
  std::memcpy(&out, pick->ai_addr, pick->ai_addrlen);
  freeaddrinfo(res);
  SetAddressPort(&out, static_cast<uint16_t>(pn));
  return out;
}

socklen_t AddressLength(const sockaddr_storage& addr) {
  return addr.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

uint16_t AddressPort(const sockaddr_storage& addr) {
  if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(addr).sin_port);
  if (addr.ss_family == AF_INET6)
    return ntohs(reinterpret_cast<const sockaddr_in6&>(addr).sin6_port);
  return 0;
}

void SetAddressPort(sockaddr_storage* addr, uint16_t port) {
  if (addr->ss_family == AF_INET) reinterpret_cast<sockaddr_in*>(addr)->sin_port = htons(port);
  if (addr->ss_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(addr)->sin6_port = htons(port);
}

bool IsFdExhaustion(int err) {
  return err == EMFILE || err == ENFILE;
}

std::string SocketErrnoMessage(const std::string& what, int err) {
  std::string m = ErrnoMessage(what, err);
  if (err == EMFILE) {
    rlimit rl{};
    std::string limit = "its limit";
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
      limit = "its limit of " + std::to_string(rl.rlim_cur);
    m += ": this process has reached " + limit +
         " open files (EMFILE): raise it with 'ulimit -n' (RLIMIT_NOFILE) before starting the "
         "job, e.g. ulimit -n 65536 (each rank needs a few descriptors per peer, the process "
         "that serves the rendezvous one per rank)";
  } else if (err == ENFILE) {
    m += ": the system-wide table of open files is full (ENFILE): raise fs.file-max (sysctl) or "
         "stop what holds so many files on this host";
  }
  return m;
}

Status SetNonBlocking(int fd) {
  int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
    return SystemError(ErrnoMessage("fcntl(O_NONBLOCK)", errno));
  return Status::Ok();
}

void HangUp(int fd) {
  if (fd >= 0) ::shutdown(fd, SHUT_RDWR);
}

void TuneTcpSocket(int fd, SocketBuffers buffers) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  // Each one set turns off the kernel's autotuning of that buffer, so only what was asked for.
  if (buffers.send_bytes > 0)
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffers.send_bytes, sizeof(buffers.send_bytes));
  if (buffers.recv_bytes > 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffers.recv_bytes, sizeof(buffers.recv_bytes));
}

Result<Fd> ListenOn(const sockaddr_storage& addr, int backlog, SocketBuffers buffers) {
  if (addr.ss_family != AF_INET && addr.ss_family != AF_INET6)
    return InvalidArgument("listen: address family must be IPv4 or IPv6");
  if (IsWildcard(addr))
    return InvalidArgument("listen: refusing the wildcard address " + FormatAddress(addr) +
                           " (listeners bind to one interface; set BRAID_SOCKET_IFNAME)");
  Fd fd(::socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return SystemError(SocketErrnoMessage("socket", errno));
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  // Buffer sizes set on the listener are inherited by accepted sockets and take part in the
  // window scale negotiated in the SYN exchange.
  if (buffers.send_bytes > 0 || buffers.recv_bytes > 0) TuneTcpSocket(fd.get(), buffers);
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), AddressLength(addr)) != 0) {
    int err = errno;
    std::string m = ErrnoMessage("bind to " + FormatAddress(addr), err);
    if (err == EADDRINUSE) m += ": another process uses this port; choose another one";
    if (err == EADDRNOTAVAIL) m += ": this host has no such address; check BRAID_SOCKET_IFNAME";
    return SystemError(m);
  }
  if (::listen(fd.get(), backlog) != 0)
    return SystemError(ErrnoMessage("listen on " + FormatAddress(addr), errno));
  return fd;
}

Result<sockaddr_storage> LocalAddress(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    return SystemError(ErrnoMessage("getsockname", errno));
  return a;
}

Result<sockaddr_storage> PeerAddress(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    return SystemError(ErrnoMessage("getpeername", errno));
  return a;
}

Result<Fd> AcceptConnection(int listen_fd, sockaddr_storage* peer, SocketBuffers buffers,
                            int* error) {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  int fd =
      ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&a), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    // Transient conditions: nothing to accept now (a client that reset before accept included).
    if (err == EAGAIN || err == EWOULDBLOCK || err == EINTR || err == ECONNABORTED || err == EPROTO)
      return Fd();
    if (error) *error = err;
    return SystemError(SocketErrnoMessage("accept", err));
  }
  if (peer) *peer = a;
  TuneTcpSocket(fd, buffers);
  return Fd(fd);
}

Result<Fd> StartConnect(const sockaddr_storage& addr, SocketBuffers buffers,
                        const sockaddr_storage* source) {
  Fd fd(::socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return SystemError(SocketErrnoMessage("socket", errno));
  TuneTcpSocket(fd.get(), buffers);
  if (source && source->ss_family == addr.ss_family && !IsWildcard(*source)) {
    sockaddr_storage local = *source;
    SetAddressPort(&local, 0);
    // The port is picked at connect() for the whole 4-tuple: a bind() that picked it would
    // take one of the ephemeral ports for good for every peer.
    int one = 1;
    setsockopt(fd.get(), IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
    if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&local), AddressLength(local)) != 0)
      return SystemError(ErrnoMessage("bind the connection to " + FormatAddress(local) + " to " +
                                          FormatAddress(addr),
                                      errno) +
                         ": check BRAID_SOCKET_IFNAME");
  }
  int rc;
  do {
    rc = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), AddressLength(addr));
  } while (rc != 0 && errno == EINTR);
  if (rc != 0 && errno != EINPROGRESS) {
    int err = errno;
    Status st = SystemError(ErrnoMessage("connect to " + FormatAddress(addr), err));
    // Refusal / unreachability is about the peer, not about us.
    if (err == ECONNREFUSED || err == ENETUNREACH || err == EHOSTUNREACH || err == ETIMEDOUT)
      st = RemoteError(ErrnoMessage("connect to " + FormatAddress(addr), err));
    return st;
  }
  return fd;
}

int ConnectError(int fd) {
  int err = 0;
  socklen_t len = sizeof(err);
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno;
  return err;
}

Result<Fd> ConnectWithDeadline(const sockaddr_storage& addr, Deadline deadline,
                               SocketBuffers buffers) {
  BRAID_ASSIGN_OR_RETURN(Fd fd, StartConnect(addr, buffers));
  BRAID_RETURN_IF_ERROR(WaitFor(fd.get(), POLLOUT, deadline, "connecting"));
  int err = ConnectError(fd.get());
  if (err != 0) return RemoteError(ErrnoMessage("connect to " + FormatAddress(addr), err));
  return fd;
}

Status SendAll(int fd, const void* data, size_t len, Deadline deadline) {
  const char* p = static_cast<const char*>(data);
  while (len > 0) {
    ssize_t n = ::send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      BRAID_RETURN_IF_ERROR(WaitFor(fd, POLLOUT, deadline, "sending"));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    int err = errno;
    if (err == EPIPE || err == ECONNRESET) return RemoteError("connection closed by the peer");
    return SystemError(ErrnoMessage("send", err));
  }
  return Status::Ok();
}

Status RecvAll(int fd, void* data, size_t len, Deadline deadline) {
  char* p = static_cast<char*>(data);
  while (len > 0) {
    ssize_t n = ::recv(fd, p, len, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return RemoteError("connection closed by the peer");
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      BRAID_RETURN_IF_ERROR(WaitFor(fd, POLLIN, deadline, "receiving"));
      continue;
    }
    if (errno == EINTR) continue;
    int err = errno;
    if (err == ECONNRESET) return RemoteError("connection reset by the peer");
    return SystemError(ErrnoMessage("recv", err));
  }
  return Status::Ok();
}

}  // namespace braid
