// Running out of file descriptors (spec/reliability.md item 9) is a system error that names
// errno and the remedy (ulimit -n), on the side that ran out and on the side it refuses; never a
// timeout or a complaint about credentials. Each case lowers RLIMIT_NOFILE in a forked child and
// fills its descriptor table.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "braid/braid.h"
#include "core/net/bootstrap.h"
#include "core/net/socket.h"
#include "core/net/unique_id.h"

namespace braid_test {
namespace {

using Clock = std::chrono::steady_clock;

// Lowers this process's open-file limit and takes every descriptor left under it.
void ExhaustDescriptors() {
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = 64;
  setrlimit(RLIMIT_NOFILE, &rl);
  while (open("/dev/null", O_RDONLY | O_CLOEXEC) >= 0) {
  }
}

bool Contains(const std::string& hay, const char* needle) {
  return hay.find(needle) != std::string::npos;
}

// Exit status of `pid`, or 124 after the wall-clock guard killed it.
int WaitGuarded(pid_t pid, int limit_s) {
  auto start = Clock::now();
  int st = 0;
  while (waitpid(pid, &st, WNOHANG) != pid) {
    if (Clock::now() - start > std::chrono::seconds(limit_s)) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      return 124;
    }
    usleep(5000);
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

// The process that serves the rendezvous runs out of descriptors: a rank that connects is told
// so at once (a SystemError naming EMFILE and ulimit -n) instead of waiting out its deadline or
// hearing that the root "rejected its credentials".
TEST(FdExhaustion, RootOutOfDescriptorsTellsTheRankWhy) {
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  std::fflush(nullptr);
  pid_t root = fork();
  ASSERT_GE(root, 0);
  if (root == 0) {
    braid::RendezvousOptions o;
    o.listen_address = "127.0.0.1:0";
    o.timeout_ms = 60000;
    auto id = braid::StartRendezvous(o);
    if (!id.ok()) _exit(1);
    ExhaustDescriptors();
    if (write(ready[1], &*id, sizeof(*id)) != static_cast<ssize_t>(sizeof(*id))) _exit(2);
    for (;;) pause();
  }
  close(ready[1]);
  braid::UniqueIdData id;
  ASSERT_EQ(read(ready[0], &id, sizeof(id)), static_cast<ssize_t>(sizeof(id)));
  close(ready[0]);

  auto bs = braid::Bootstrap::Connect(id, 0, 2, braid::Deadline::After(10000));
  kill(root, SIGKILL);
  waitpid(root, nullptr, 0);
  ASSERT_FALSE(bs.ok());
  const std::string& msg = bs.status().message();
  EXPECT_EQ(bs.status().cls(), braid::ErrorClass::kSystem) << msg;
  EXPECT_TRUE(Contains(msg, "EMFILE")) << msg;
  EXPECT_TRUE(Contains(msg, "ulimit -n")) << msg;
  EXPECT_TRUE(Contains(msg, "root")) << msg;
  EXPECT_FALSE(Contains(msg, "credentials")) << msg;
}

// The rank itself has no descriptor left for its socket: braidGetUniqueId and
// braidCommInitRank fail with braidErrSystem and say what to raise.
TEST(FdExhaustion, RankOutOfDescriptorsSaysWhatToRaise) {
  braid::UniqueIdData data;
  ASSERT_TRUE(braid::RandomizeUniqueId(&data).ok());
  auto root = braid::ParseHostPort("127.0.0.1:9");
  ASSERT_TRUE(root.ok());
  data.root = *root;
  braidUniqueId id;
  braid::EncodeUniqueId(data, &id);
  std::fflush(nullptr);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    setenv("BRAID_TIMEOUT", "5", 1);
    ExhaustDescriptors();
    auto check = [](const char* what, braidResult_t rc) {
      std::string msg = braidGetLastError(nullptr);
      if (rc == braidErrSystem && Contains(msg, "EMFILE") && Contains(msg, "ulimit -n") &&
          !Contains(msg, "credentials"))
        return true;
      std::fprintf(stderr, "%s: rc=%d: %s\n", what, rc, msg.c_str());
      return false;
    };
    braidUniqueId fresh;
    bool ok = check("braidGetUniqueId", braidGetUniqueId(&fresh));
    braidComm_t comm = nullptr;
    ok = check("braidCommInitRank", braidCommInitRank(&comm, 2, id, 1)) && ok;
    std::fflush(nullptr);
    _exit(ok ? 0 : 1);
  }
  EXPECT_EQ(WaitGuarded(pid, 60), 0);
}

}  // namespace
}  // namespace braid_test
