// The emulated cluster (issue 9, spec/algorithms.md section 5): `braidrun --emulate GxM` runs a
// job across network-namespace "nodes" on this machine. Checked here: results are bit-exact;
// the transports' counters show intra-node traffic on shm and inter-node traffic on TCP through
// each node's emulated link (emulated_rank.cc); the launcher removes every namespace it made,
// on success, on failure and on Ctrl-C. Needs root (CI is root); skipped, saying so, elsewhere.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

bool CanEmulate(std::string* why) {
  if (geteuid() != 0) {
    *why = "needs root (network namespaces)";
    return false;
  }
  if (std::system("ip netns add braidprobe0 2>/dev/null && ip netns del braidprobe0") != 0) {
    *why = "ip netns does not work here";
    return false;
  }
  return true;
}

// Namespaces of clusters whose name starts with "bemu<pid>".
std::vector<std::string> NamespacesOf(pid_t launcher) {
  std::vector<std::string> out;
  FILE* p = popen("ip netns list 2>/dev/null", "r");
  if (!p) return out;
  char line[256];
  const std::string prefix = "bemu" + std::to_string(launcher) + "-";
  while (fgets(line, sizeof line, p)) {
    std::string s(line);
    s = s.substr(0, s.find_first_of(" \n"));
    if (s.rfind(prefix, 0) == 0) out.push_back(s);
  }
  pclose(p);
  return out;
}

struct Job {
  pid_t pid = -1;
  int status = -1;
  std::string output;
};

// Starts braidrun with `args`, its output in a file.
Job Start(const std::vector<std::string>& args, const std::string& log) {
  Job r;
  r.pid = fork();
  if (r.pid == 0) {
    FILE* f = std::fopen(log.c_str(), "w");
    if (f) {
      dup2(fileno(f), 1);
      dup2(fileno(f), 2);
    }
    std::vector<char*> argv;
    std::string self = BRAIDRUN_PATH;
    argv.push_back(self.data());
    std::vector<std::string> copy = args;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return r;
}

// Waits for `r` with a wall-clock guard (kills it after `limit`).
void Finish(Job& r, const std::string& log, std::chrono::seconds limit) {
  const auto deadline = Clock::now() + limit;
  int status = 0;
  while (waitpid(r.pid, &status, WNOHANG) == 0) {
    if (Clock::now() > deadline) {
      kill(r.pid, SIGKILL);
      waitpid(r.pid, &status, 0);
      ADD_FAILURE() << "braidrun did not finish within " << limit.count() << " s";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling a child, not ordering
  }
  r.status = status;
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  r.output = ss.str();
  std::remove(log.c_str());
}

class EmulatedCluster : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!CanEmulate(&why)) GTEST_SKIP() << why;
  }
  std::string Log() const {
    return "/tmp/braid-emu-" + std::to_string(getpid()) + "-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".log";
  }
};

void ExpectJobPasses(const std::vector<std::string>& args, const std::string& log) {
  Job r = Start(args, log);
  Finish(r, log, std::chrono::seconds(240));
  EXPECT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) << r.output;
  EXPECT_EQ(NamespacesOf(r.pid), std::vector<std::string>{}) << "namespaces left behind";
}

TEST_F(EmulatedCluster, TwoNodesOfTwoRanks) {
  ExpectJobPasses({"--emulate", "2x2", "--timeout", "200", "--", EMULATED_RANK_PATH}, Log());
}

TEST_F(EmulatedCluster, TwoNodesOfFourRanksOverShapedLinks) {
  ExpectJobPasses(
      {"--emulate", "2x4", "--link", "1gbit", "--timeout", "200", "--", EMULATED_RANK_PATH}, Log());
}

TEST_F(EmulatedCluster, ThreeNodesOfOneRank) {
  ExpectJobPasses({"--emulate", "3x1", "--timeout", "200", "--", EMULATED_RANK_PATH}, Log());
}

// A failing job (a rank that cannot be executed) still removes the cluster.
TEST_F(EmulatedCluster, FailureRemovesTheCluster) {
  Job r = Start({"--emulate", "2x1", "--", "/nonexistent/braid-rank"}, Log());
  Finish(r, Log(), std::chrono::seconds(120));
  EXPECT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 127) << r.output;
  EXPECT_EQ(NamespacesOf(r.pid), std::vector<std::string>{});
}

// Ctrl-C while every rank waits inside its node: the ranks go, and so does the cluster.
TEST_F(EmulatedCluster, InterruptRemovesTheCluster) {
  Job r = Start({"--emulate", "2x2", "--", EMULATED_RANK_PATH, "pause"}, Log());
  // Wait (bounded) until the four ranks run inside the two nodes.
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  auto ranks_in_nodes = [&] {
    int total = 0;
    for (int i = 0; i < 2; ++i) {
      const std::string cmd =
          "ip netns pids bemu" + std::to_string(r.pid) + "-n" + std::to_string(i) + " 2>/dev/null";
      FILE* p = popen(cmd.c_str(), "r");
      if (!p) return 0;
      char line[64];
      while (fgets(line, sizeof line, p)) ++total;
      pclose(p);
    }
    return total;
  };
  while (ranks_in_nodes() < 4 && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling, bounded
  ASSERT_GE(ranks_in_nodes(), 4) << "the ranks never ran inside the emulated nodes";
  kill(r.pid, SIGINT);
  Finish(r, Log(), std::chrono::seconds(60));
  EXPECT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) != 0) << r.output;
  EXPECT_EQ(NamespacesOf(r.pid), std::vector<std::string>{});
}

// Open MPI across emulated nodes (issue 9): mpirun runs inside node 0 with the nodes' addresses
// as hosts and `emucluster rsh` as its launch agent; braid bootstraps from Open MPI's
// environment with BRAID_COMM_ID on node 0. all_reduce_perf must report no wrong element, each
// rank with one shm peer and two TCP peers.
TEST_F(EmulatedCluster, MpirunAcrossTwoNodes) {
#ifndef ALL_REDUCE_PERF_PATH
  GTEST_SKIP() << "built without the perf binaries (BRAID_BUILD_PERF=OFF)";
#else
  if (std::system("command -v mpirun >/dev/null 2>&1") != 0) GTEST_SKIP() << "no mpirun";
  const std::string name = "emt" + std::to_string(getpid());
  const std::string e = EMUCLUSTER_PATH;
  const std::string log = Log();
  // The job as a script (one quoting level): the cluster goes away on every exit path.
  const std::string script_path = log + ".sh";
  {
    std::ofstream script(script_path);
    script << "set -e\nE=" << e << "\ntrap '\"$E\" down " << name << " >/dev/null 2>&1' EXIT\n"
           << "\"$E\" up " << name << " 2 >/dev/null\n"
           << "timeout 240 \"$E\" exec " << name << " 0 -- mpirun --allow-run-as-root -np 4"
           << " --host 198.18.0.1:2,198.18.0.2:2 --mca plm_rsh_agent \"$E rsh " << name << "\""
           << " --mca oob_tcp_if_include eth0 --mca btl self,tcp --mca btl_tcp_if_include eth0"
           << " -x BRAID_COMM_ID=198.18.0.1:29500 -x BRAID_SECRET=emulated-test-secret"
           << " -x BRAID_SOCKET_IFNAME=eth0 " << ALL_REDUCE_PERF_PATH
           << " -b 8 -e 1M -f 32 -n 3 -w 1 > " << log << " 2>&1\n";
  }
  const int rc = std::system(("bash " + script_path).c_str());
  std::remove(script_path.c_str());
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string out = ss.str();
  std::remove(log.c_str());
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("# Out of bounds values : 0 OK"), std::string::npos) << out;
  int ranks_seen = 0;
  for (size_t pos = 0; (pos = out.find("transports shm:1 tcp:2", pos)) != std::string::npos; ++pos)
    ++ranks_seen;
  EXPECT_EQ(ranks_seen, 4) << out;
  FILE* p = popen(("ip netns list 2>/dev/null | grep -c '^" + name + "-' || true").c_str(), "r");
  char buf[16] = {};
  if (p) {
    fgets(buf, sizeof buf, p);
    pclose(p);
  }
  EXPECT_EQ(std::atoi(buf), 0) << "namespaces left behind";
#endif
}

TEST_F(EmulatedCluster, BadArgumentsAreRefused) {
  for (const auto& args :
       std::vector<std::vector<std::string>>{{"--emulate", "2x", "--", "true"},
                                             {"--emulate", "0x2", "--", "true"},
                                             {"-n", "3", "--emulate", "2x2", "--", "true"},
                                             {"--link", "1gbit", "-n", "2", "--", "true"}}) {
    Job r = Start(args, Log());
    Finish(r, Log(), std::chrono::seconds(30));
    EXPECT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 2) << r.output;
  }
  Job r = Start({"--emulate", "2x1", "--link", "fast", "--", "true"}, Log());
  Finish(r, Log(), std::chrono::seconds(30));
  EXPECT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 1) << r.output;
  EXPECT_NE(r.output.find("link rate 'fast'"), std::string::npos) << r.output;
  EXPECT_EQ(NamespacesOf(r.pid), std::vector<std::string>{});
}

}  // namespace
