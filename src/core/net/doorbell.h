// A per-rank doorbell: lets a process on the same host wake this rank's engine out of poll().
//
// Shared-memory endpoints have no fd of their own to poll. A reader (or writer) about to sleep
// sets a flag in the shared ring; the other side, after producing (consuming) bytes, sees the
// flag and rings the sleeper's doorbell: one datagram to a Unix socket in the abstract namespace
// (scoped to the network namespace, which is also what scopes shm use). The engine polls the
// doorbell's fd next to its TCP sockets, so one poll() covers every transport.
#pragma once

#include <string>

#include "core/base/status.h"

namespace braid {

class Doorbell {
 public:
  // Binds "\0<name>" (name chosen by the caller, unique per comm and rank).
  static Result<Doorbell> Bind(const std::string& name);
  Doorbell() = default;
  Doorbell(Doorbell&& o) noexcept;
  Doorbell& operator=(Doorbell&& o) noexcept;
  Doorbell(const Doorbell&) = delete;
  Doorbell& operator=(const Doorbell&) = delete;
  ~Doorbell();

  int fd() const { return fd_; }
  const std::string& name() const { return name_; }
  // Empties the socket after a wake-up.
  void drain();
  // Rings the doorbell called `name` (best effort, never blocks).
  static void Ring(const std::string& name);

 private:
  int fd_ = -1;
  std::string name_;
};

}  // namespace braid
