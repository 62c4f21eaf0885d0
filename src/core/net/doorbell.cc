#include "core/net/doorbell.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace braid {
namespace {

socklen_t MakeAddress(const std::string& name, sockaddr_un* addr) {
  std::memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  // Abstract namespace: leading NUL; nothing appears in the file system, nothing to clean up.
  size_t n = std::min(name.size(), sizeof(addr->sun_path) - 1);
  std::memcpy(addr->sun_path + 1, name.data(), n);
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
}

// One unbound socket per process for ringing others (datagram sockets are thread-safe).
int SenderSocket() {
  static int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  return fd;
}

}  // namespace

Result<Doorbell> Doorbell::Bind(const std::string& name) {
  // A process that can be rung rings others too: make the sender now, not at the first ring
  // somewhere inside an operation (a descriptor opened mid-run looks like a leak to a caller
  // that counts them, and its failure would surface far from here).
  if (SenderSocket() < 0) return SystemError(ErrnoMessage("doorbell sender socket()", errno));
  Doorbell d;
  d.fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (d.fd_ < 0) return SystemError(ErrnoMessage("doorbell socket()", errno));
  sockaddr_un addr;
  socklen_t len = MakeAddress(name, &addr);
  if (bind(d.fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0)
    return SystemError(ErrnoMessage("doorbell bind(@" + name + ")", errno));
  d.name_ = name;
  return d;
}

Doorbell::Doorbell(Doorbell&& o) noexcept : fd_(o.fd_), name_(std::move(o.name_)) {
  o.fd_ = -1;
}

Doorbell& Doorbell::operator=(Doorbell&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) close(fd_);
    fd_ = o.fd_;
    name_ = std::move(o.name_);
    o.fd_ = -1;
  }
  return *this;
}

Doorbell::~Doorbell() {
  if (fd_ >= 0) close(fd_);
}

void Doorbell::drain() {
  char buf[64];
  while (recv(fd_, buf, sizeof(buf), MSG_DONTWAIT) > 0) {
  }
}

void Doorbell::Ring(const std::string& name) {
  sockaddr_un addr;
  socklen_t len = MakeAddress(name, &addr);
  char b = 1;
  // A full socket buffer means the sleeper has pending rings already: dropping this one is fine.
  (void)sendto(SenderSocket(), &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL,
               reinterpret_cast<sockaddr*>(&addr), len);
}

}  // namespace braid
