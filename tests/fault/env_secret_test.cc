// braidInitFromEnv's rendezvous by address (spec/reliability.md item 5): with BRAID_COMM_ID, or
// torchrun's MASTER_ADDR:MASTER_PORT, every rank knows where rank 0 serves the rendezvous, and so
// does anyone else who can reach it. BRAID_SECRET (which braidrun exports to its ranks) is what
// keeps such a stranger out, for every launcher; a job that runs without it says so, once per
// process, on stderr at the default log level, with the fix.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "braid/braid.h"
#include "core/net/bootstrap.h"
#include "core/net/socket.h"
#include "core/net/unique_id.h"

namespace braid_test {
namespace {

using Clock = std::chrono::steady_clock;
using Env = std::vector<std::pair<std::string, std::string>>;

// What the warning must say: what is wrong and which variable fixes it.
constexpr const char* kWarningMark = "not protected by a secret";

// A loopback port that is free now (the rendezvous binds it a moment later).
int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

// The environment each launcher gives rank `rank` of `size` whose rendezvous is 127.0.0.1:port.
Env LauncherEnv(const std::string& launcher, int rank, int size, int port) {
  std::string r = std::to_string(rank), n = std::to_string(size);
  std::string comm_id = "127.0.0.1:" + std::to_string(port);
  if (launcher == "braidrun")
    return {{"BRAID_RANK", r}, {"BRAID_WORLD_SIZE", n}, {"BRAID_COMM_ID", comm_id}};
  if (launcher == "mpirun")
    return {{"OMPI_COMM_WORLD_RANK", r}, {"OMPI_COMM_WORLD_SIZE", n}, {"BRAID_COMM_ID", comm_id}};
  if (launcher == "srun")
    return {{"SLURM_PROCID", r}, {"SLURM_NTASKS", n}, {"BRAID_COMM_ID", comm_id}};
  // torchrun's store owns MASTER_PORT; braid serves its rendezvous on the next port.
  return {{"RANK", r},
          {"WORLD_SIZE", n},
          {"MASTER_ADDR", "127.0.0.1"},
          {"MASTER_PORT", std::to_string(port - 1)}};
}

// The rendezvous address braid derives from that environment.
std::string CommIdOf(int port) {
  return "127.0.0.1:" + std::to_string(port);
}

// Forks a rank: a clean launcher environment, stderr into `log`, then `body`'s exit status.
pid_t SpawnRank(const Env& env, const std::string& log, const std::function<int()>& body) {
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid != 0) return pid;
  for (const char* v :
       {"BRAID_UNIQUE_ID", "BRAID_RANK", "BRAID_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_PROCID", "SLURM_NTASKS",
        "SLURM_NNODES", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "BRAID_COMM_ID",
        "NCCL_COMM_ID", "BRAID_SECRET", "BRAID_DEBUG", "NCCL_DEBUG", "BRAID_DEBUG_FILE"})
    unsetenv(v);
  for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
  setenv("BRAID_TIMEOUT", "20", 1);
  int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd >= 0) dup2(fd, 2);
  int code = body();
  std::fflush(nullptr);
  _exit(code);
}

// Waits for every pid under a wall-clock guard; their exit codes (124 = killed by the guard).
std::vector<int> WaitAll(std::vector<pid_t> pids, int limit_s) {
  std::vector<int> codes(pids.size(), -1);
  auto start = Clock::now();
  for (size_t left = pids.size(); left > 0;) {
    for (size_t i = 0; i < pids.size(); ++i) {
      int st = 0;
      if (pids[i] < 0 || waitpid(pids[i], &st, WNOHANG) != pids[i]) continue;
      codes[i] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      pids[i] = -1;
      --left;
    }
    if (left > 0 && Clock::now() - start > std::chrono::seconds(limit_s)) {
      for (size_t i = 0; i < pids.size(); ++i)
        if (pids[i] > 0) {
          kill(pids[i], SIGKILL);
          waitpid(pids[i], nullptr, 0);
          codes[i] = 124;
        }
      break;
    }
    usleep(5000);
  }
  return codes;
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

int CountOf(const std::string& hay, const std::string& needle) {
  int n = 0;
  for (size_t at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1)) ++n;
  return n;
}

// Init from the environment, a checked all-reduce of 2 ranks, destroy.
int InitAllReduceDestroy(int rank) {
  braidComm_t comm = nullptr;
  if (braidInitFromEnv(&comm) != braidSuccess) {
    std::fprintf(stderr, "[rank %d] braidInitFromEnv: %s\n", rank, braidGetLastError(nullptr));
    return 1;
  }
  std::vector<int32_t> v(100, rank + 1);
  if (braidAllReduce(v.data(), v.data(), v.size(), braidInt32, braidSum, comm) != braidSuccess ||
      v != std::vector<int32_t>(100, 3)) {
    std::fprintf(stderr, "[rank %d] all-reduce: %s\n", rank, braidGetLastError(comm));
    return 2;
  }
  return braidCommDestroy(comm) == braidSuccess ? 0 : 3;
}

class EnvRendezvous : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/braid-env-secret-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    for (int r = 0; r < 2; ++r) unlink(Log(r).c_str());
    rmdir(dir_.c_str());
  }
  std::string Log(int rank) const { return dir_ + "/rank" + std::to_string(rank) + ".err"; }
  std::string dir_;
};

// Rank 0 serves the rendezvous; a stranger who knows the address, and so the key braid would
// derive from it, tries to take rank 1's place before rank 1 arrives. BRAID_SECRET keeps it out:
// its handshake fails, and the real job then completes exactly, with no warning.
TEST_P(EnvRendezvous, SecretKeepsOutAStrangerWhoKnowsTheAddress) {
  int port = FreePort();
  ASSERT_GT(port, 1);
  Env secret = {{"BRAID_SECRET", "test-secret-" + std::to_string(getpid()) + "-" +
                                     std::to_string(Clock::now().time_since_epoch().count())}};
  auto env_of = [&](int r) {
    Env e = LauncherEnv(GetParam(), r, 2, port);
    e.insert(e.end(), secret.begin(), secret.end());
    return e;
  };
  std::vector<pid_t> pids;
  pids.push_back(SpawnRank(env_of(0), Log(0), [] { return InitAllReduceDestroy(0); }));

  // The key a job without a secret would use (init_from_env derives it from the address).
  std::string weak = "braid-address-derived:" + CommIdOf(port);
  braid::UniqueIdData stranger;
  ASSERT_TRUE(braid::ParseHostPort(CommIdOf(port)).ok());
  stranger.root = *braid::ParseHostPort(CommIdOf(port));
  stranger.secret = braid::DeriveSecret(std::vector<uint8_t>(weak.begin(), weak.end()));
  {
    auto joined = braid::Bootstrap::Connect(stranger, 1, 2, braid::Deadline::After(15000));
    EXPECT_FALSE(joined.ok()) << "a stranger who knows only the address joined as rank 1";
    if (!joined.ok()) {
      EXPECT_NE(joined.status().message().find("authentication"), std::string::npos)
          << joined.status().message();
    }
  }  // (a stranger that got in would hold rank 1: the real one would then be refused)

  pids.push_back(SpawnRank(env_of(1), Log(1), [] { return InitAllReduceDestroy(1); }));
  auto codes = WaitAll(pids, 60);
  for (int r = 0; r < 2; ++r) {
    std::string err = ReadFile(Log(r));
    EXPECT_EQ(codes[r], 0) << "rank " << r << ":\n" << err;
    EXPECT_EQ(CountOf(err, kWarningMark), 0)
        << "rank " << r << " warned although a secret is set:\n"
        << err;
  }
}

// Without BRAID_SECRET the job still runs, and each process says once, visibly, what the risk
// is and how to fix it, although it initialises two communicators.
TEST_P(EnvRendezvous, WithoutASecretEveryProcessWarnsOnce) {
  int port1 = FreePort(), port2 = FreePort();
  while (port2 == port1 || port2 == port1 + 1 || port2 + 1 == port1) port2 = FreePort();
  ASSERT_GT(port1, 1);
  ASSERT_GT(port2, 1);
  const std::string launcher = GetParam();
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r) {
    pids.push_back(SpawnRank(LauncherEnv(launcher, r, 2, port1), Log(r), [&, r] {
      int code = InitAllReduceDestroy(r);
      if (code != 0) return code;
      // A second communicator from the environment, at another address.
      for (const auto& [k, v] : LauncherEnv(launcher, r, 2, port2)) setenv(k.c_str(), v.c_str(), 1);
      return InitAllReduceDestroy(r);
    }));
  }
  auto codes = WaitAll(pids, 60);
  for (int r = 0; r < 2; ++r) {
    std::string err = ReadFile(Log(r));
    EXPECT_EQ(codes[r], 0) << "rank " << r << ":\n" << err;
    EXPECT_EQ(CountOf(err, kWarningMark), 1) << "rank " << r << "'s stderr:\n" << err;
    EXPECT_NE(err.find("BRAID_SECRET"), std::string::npos) << err;
  }
}

INSTANTIATE_TEST_SUITE_P(Launchers, EnvRendezvous,
                         ::testing::Values("braidrun", "mpirun", "srun", "torchrun"));

}  // namespace
}  // namespace braid_test
