// Socket helpers shared by the bootstrap and the TCP transport: interface selection, address
// parsing, RAII fds, bounded non-blocking I/O with deadlines.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <string>
#include <vector>

#include "core/clock.h"
#include "core/status.h"

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

}  // namespace braid
