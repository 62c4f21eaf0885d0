// Socket helpers shared by the bootstrap and the TCP transport: interface selection, address
// parsing, RAII fds, bounded non-blocking I/O with deadlines.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <string>
#include <vector>

#include "core/base/clock.h"
#include "core/base/status.h"

namespace braid {

// An owned file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd();
  int get() const { return fd_; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  bool valid() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

struct InterfaceAddress {
  std::string ifname;
  sockaddr_storage addr{};
};

// The interface to bind to (spec/reliability.md item 10):
// - `spec` non-empty: NCCL_SOCKET_IFNAME syntax ("eth0", "eth" prefix, "^docker" exclude,
//   "=eth0" exact); no match is an InvalidArgument naming the interfaces that exist;
// - `spec` empty: the first UP, non-loopback interface with an IPv4 address, skipping docker /
//   virbr / link-local ones; loopback if nothing else exists.
Result<InterfaceAddress> SelectInterface(const std::string& spec);
InterfaceAddress LoopbackInterface();

// Parses "host:port" / "[v6]:port" (host may be a name). InvalidArgument on bad syntax.
Result<sockaddr_storage> ParseHostPort(const std::string& s);

// ---- Additions used by the bootstrap and the TCP transport ----

// One address of one interface, as getifaddrs reports it (input of ChooseInterface).
struct InterfaceCandidate {
  std::string ifname;
  sockaddr_storage addr{};
  bool up = false;
  bool loopback = false;
};

// Every interface address of this host (AF_INET and AF_INET6), in getifaddrs order.
Result<std::vector<InterfaceCandidate>> ListInterfaces();
// The selection rule of SelectInterface over an explicit list (so tests can model docker
// bridges, veth pairs and link-local addresses on any machine).
Result<InterfaceAddress> ChooseInterface(const std::vector<InterfaceCandidate>& candidates,
                                         const std::string& spec);
// Whether `ifname` is selected by the NCCL_SOCKET_IFNAME-style `spec` (ignores addresses).
bool InterfaceMatchesSpec(const std::string& spec, const std::string& ifname);

socklen_t AddressLength(const sockaddr_storage& addr);
uint16_t AddressPort(const sockaddr_storage& addr);
void SetAddressPort(sockaddr_storage* addr, uint16_t port);

// Running out of file descriptors: EMFILE (this process's limit, RLIMIT_NOFILE) or ENFILE (the
// system's). Every socket() and accept() failure is worded with SocketErrnoMessage, which adds the
// limit and how to raise it ('ulimit -n'), so that the error says what to do.
bool IsFdExhaustion(int err);
std::string SocketErrnoMessage(const std::string& what, int err);

Status SetNonBlocking(int fd);
// shutdown(SHUT_RDWR): ends a connection (the peer sees EOF) or stops a listener even where a
// forked child still holds a copy of the fd, which a plain close() would not. Best effort.
void HangUp(int fd);
// Socket buffer sizes to ask for (SO_SNDBUF, SO_RCVBUF); 0 leaves that one to the kernel's
// autotuning. The kernel doubles what it grants and caps it at net.core.{w,r}mem_max.
struct SocketBuffers {
  int send_bytes = 0;
  int recv_bytes = 0;
};

// Best effort: TCP_NODELAY, and the buffers of `buffers`.
void TuneTcpSocket(int fd, SocketBuffers buffers);

// A non-blocking listening socket bound to `addr` (port 0 = ephemeral). Refuses the wildcard
// address (spec/reliability.md item 5).
Result<Fd> ListenOn(const sockaddr_storage& addr, int backlog, SocketBuffers buffers = {});
Result<sockaddr_storage> LocalAddress(int fd);
Result<sockaddr_storage> PeerAddress(int fd);
// Accepts one pending connection (non-blocking, close-on-exec). An invalid Fd when none is
// pending; an error Status for a real failure (EMFILE ...), whose errno goes to `*error`.
Result<Fd> AcceptConnection(int listen_fd, sockaddr_storage* peer, SocketBuffers buffers = {},
                            int* error = nullptr);

// Starts a non-blocking connect; completion is signalled by POLLOUT, then FinishConnect().
// `source` (optional, its port ignored): bind the connection's own end to this address first, so
// that it leaves through the interface that owns it where the host routes by source address
// (several NICs on one subnet, policy routing: the emulated cluster's --nics). Skipped when its
// family differs from `addr`'s.
Result<Fd> StartConnect(const sockaddr_storage& addr, SocketBuffers buffers = {},
                        const sockaddr_storage* source = nullptr);
// 0 when the connect succeeded, else its errno.
int ConnectError(int fd);
// Connects with a deadline (a single attempt, no retry).
Result<Fd> ConnectWithDeadline(const sockaddr_storage& addr, Deadline deadline,
                               SocketBuffers buffers = {});

// Blocking-style transfers on a (possibly non-blocking) socket, bounded by `deadline`.
// Errors: TimeoutError at the deadline, RemoteError("connection closed") at EOF/ECONNRESET,
// SystemError otherwise. Messages are short; callers prepend who and what.
Status SendAll(int fd, const void* data, size_t len, Deadline deadline);
Status RecvAll(int fd, void* data, size_t len, Deadline deadline);

}  // namespace braid
