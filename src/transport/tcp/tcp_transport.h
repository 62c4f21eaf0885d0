// The TCP transport (DESIGN.md 2.3): one listener per communicator on the selected interface,
// `nchannels` authenticated sockets per peer. The lower rank of a pair connects, the higher
// accepts. The listener is a HandshakeListener: its own thread accepts and runs every handshake
// at once, whether or not this rank is connecting, so a stranger (garbage, slow, idle) is dropped
// within a second at any time without delaying the real connections, and a flood of them leaves
// a few log lines. It closes once no more data connection can come: after init, or with lazy
// connections once every lower rank's channels arrived (at once where no lower rank uses tcp).
// TcpTransportFactory() (transport.h) is the entry point; this header exposes the blob format, as
// shm_transport.h does for shm.
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
