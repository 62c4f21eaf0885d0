// The TCP transport (DESIGN.md 2.3): one listener per communicator on the selected interface,
// `nchannels` authenticated sockets per peer. The lower rank of a pair connects, the higher
// accepts; one poll loop drives every connect, accept and handshake at once, so a stranger at the
// listener (garbage, slow, idle) is dropped within a second without delaying the real
// connections. TcpTransportFactory() (transport.h) is the entry point; this header exposes the
// blob format, as shm_transport.h does for shm.
#pragma once

#include <sys/socket.h>

#include <string>

#include "core/base/status.h"

namespace braid::tcp {

// What a rank tells the others about its TCP side: "tcp1 <host>:<port>" of its listener.
std::string EncodeBlob(const std::string& host_port);
// The listener's address in a peer's blob; an InvalidArgument for anything else (a blob of
// another transport, garbage).
Result<sockaddr_storage> DecodeBlob(const std::string& text);
// The "<host>:<port>" part of a blob, for messages ("" when the blob is not a TCP one).
std::string BlobAddress(const std::string& text);

}  // namespace braid::tcp
