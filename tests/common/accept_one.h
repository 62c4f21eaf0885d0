// Accepting the connection a test just made to its own loopback listener, bounded: the
// listener is non-blocking, so the accept waits for poll() to report the connection. Shared by
// the socket and TCP endpoint unit tests.
#pragma once

#include <gtest/gtest.h>
#include <poll.h>

#include <utility>

#include "core/net/socket.h"

namespace braid_test_common {

// The connection pending on `listen_fd` (connected by the caller), waiting up to 2 s for the
// listener to report it; an invalid Fd if none comes (a failed accept is a test failure).
inline braid::Fd AcceptOne(int listen_fd, braid::SocketBuffers buffers = {}) {
  for (int i = 0; i < 200; ++i) {
    auto a = braid::AcceptConnection(listen_fd, nullptr, buffers);
    EXPECT_TRUE(a.ok()) << a.status().message();
    if (!a.ok()) return braid::Fd();
    if (a->valid()) return std::move(*a);
    pollfd p{listen_fd, POLLIN, 0};
    ::poll(&p, 1, 10);
  }
  return braid::Fd();
}

}  // namespace braid_test_common
