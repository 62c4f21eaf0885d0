// A pipe that carries one pid to each reader, for tests in which a victim rank stops or dies and
// the others must name it: the writer writes its pid `copies` times (4-byte writes to a pipe are
// atomic), so every reader blocks until the victim has written. Made before RunJob forks.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

namespace braid_test {

struct PidPipe {
  int fd[2] = {-1, -1};
  PidPipe() { EXPECT_EQ(pipe(fd), 0); }
  ~PidPipe() {
    close(fd[0]);
    close(fd[1]);
  }
  bool publish(int copies) const {
    const pid_t me = getpid();
    for (int i = 0; i < copies; ++i)
      if (write(fd[1], &me, sizeof(me)) != static_cast<ssize_t>(sizeof(me))) return false;
    return true;
  }
  pid_t take() const {
    pid_t p = -1;
    return read(fd[0], &p, sizeof(p)) == static_cast<ssize_t>(sizeof(p)) ? p : -1;
  }
};

}  // namespace braid_test
