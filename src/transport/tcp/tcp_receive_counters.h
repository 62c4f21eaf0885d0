// What the kernel counts of a TCP connection's incoming stream (TCP_INFO, SIOCINQ), so that a
// receiver can account for every sequence number the peer sent.
//
// Why: the endpoint's shutdown marker is an urgent byte (tcp_endpoint.h), and Linux drops it
// (clears urg_data) once an ordinary read starts at it, without a trace in what the read
// returns. Peeking a byte before every read avoided that, at a syscall (and a socket-lock round
// trip against the sender's delivery) per receive. Instead the endpoint reads freely and, only
// when the connection fails (end of stream, a reset, a failed send), compares what the kernel
// received with what the endpoint read: the one sequence number beside the FIN that was received
// but never read is the marker.
#pragma once

#include <cstdint>
#include <optional>

namespace braid {

struct TcpReceiveCounters {
  // Sequence numbers received in order since the handshake (tcpi_bytes_received): data, the
  // urgent byte, and the FIN, which counts one (tcp_rcv_nxt_update adds the segment's end_seq,
  // FIN included; so since the field came in Linux 4.1).
  uint64_t bytes_received = 0;
  // Data received but not read yet (SIOCINQ: bytes before the urgent mark while one is pending).
  uint64_t unread = 0;
  // The peer's FIN arrived (the connection's state is one only a FIN leads to).
  bool fin_received = false;
};

// One consistent snapshot of `fd`'s counters (taken again while bytes arrive between its two
// reads). nullopt when the kernel does not report bytes_received (before 4.1) or `fd` is not a
// TCP socket.
std::optional<TcpReceiveCounters> ReadTcpReceiveCounters(int fd);

}  // namespace braid
