// Its own translation unit: <linux/tcp.h> has tcpi_bytes_received, glibc's <netinet/tcp.h>
// does not, and the two cannot be included together.
#include "transport/tcp/tcp_receive_counters.h"

#include <linux/in.h>
#include <linux/sockios.h>
#include <linux/tcp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstring>

namespace braid {
namespace {

// The kernel's TCP states (include/net/tcp_states.h) that only the peer's FIN leads to.
bool FinReceivedIn(uint8_t state) {
  constexpr uint8_t kTimeWait = 6, kCloseWait = 8, kLastAck = 9, kClosing = 11;
  return state == kCloseWait || state == kLastAck || state == kClosing || state == kTimeWait;
}

bool ReadInfo(int fd, tcp_info* ti) {
  std::memset(ti, 0, sizeof(*ti));
  socklen_t len = sizeof(*ti);
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, ti, &len) != 0) return false;
  return len >= offsetof(tcp_info, tcpi_bytes_received) + sizeof(ti->tcpi_bytes_received);
}

}  // namespace

std::optional<TcpReceiveCounters> ReadTcpReceiveCounters(int fd) {
  // bytes_received and the unread count come from two syscalls; a snapshot holds when nothing
  // arrived between them (the count read twice, the same). Bytes arrive in bursts, so this ends
  // within a few tries; a stream that never pauses gives up rather than spin.
  for (int attempt = 0; attempt < 64; ++attempt) {
    tcp_info before, after;
    int unread = 0;
    if (!ReadInfo(fd, &before)) return std::nullopt;
    if (::ioctl(fd, SIOCINQ, &unread) != 0 || unread < 0) return std::nullopt;
    if (!ReadInfo(fd, &after)) return std::nullopt;
    if (before.tcpi_bytes_received != after.tcpi_bytes_received ||
        before.tcpi_state != after.tcpi_state)
      continue;
    TcpReceiveCounters c;
    c.bytes_received = after.tcpi_bytes_received;
    c.unread = static_cast<uint64_t>(unread);
    c.fin_received = FinReceivedIn(after.tcpi_state);
    return c;
  }
  return std::nullopt;
}

}  // namespace braid
