// The emulated cluster (issue 9, spec/algorithms.md section 5): `braidrun --emulate GxM` runs a
// job across network-namespace "nodes" on this machine. Checked here: results are bit-exact;
// the transports' counters show intra-node traffic on shm and inter-node traffic on TCP through
// each node's emulated link (emulated_rank.cc); the launcher removes every namespace it made,
// on success, on failure and on Ctrl-C. With --nics 2, each port carries exactly the traffic
// bound to its address, and the rail-aligned ring spreads its crossings over a node's NICs
// where the ring uses one. Needs root (CI is root); skipped, saying so, elsewhere.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
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

// Runs `cmd` (a shell line); its standard output.
std::string Output(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[512];
  while (fgets(buf, sizeof buf, p)) out += buf;
  pclose(p);
  return out;
}

// A byte counter of interface `dev` in namespace `ns`: "tx_bytes" or "rx_bytes".
long long Counter(const std::string& ns, const std::string& dev, const std::string& which) {
  const std::string v =
      Output("ip netns exec " + ns + " cat /sys/class/net/" + dev + "/statistics/" + which);
  return v.empty() ? -1 : std::atoll(v.c_str());
}

// The bytes the root qdisc of `dev` in `ns` has sent ("Sent N bytes" of tc -s qdisc).
long long QdiscSent(const std::string& ns, const std::string& dev) {
  const std::string v = Output("ip netns exec " + ns + " tc -s qdisc show dev " + dev +
                               " | awk '/Sent/ {print $2; exit}'");
  return v.empty() ? -1 : std::atoll(v.c_str());
}

// Runs `fn` with this thread in namespace `ns` (a socket made there stays there); false when
// the namespace cannot be entered.
template <typename F>
bool InNamespace(const std::string& ns, F fn) {
  const int home = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  const int there = open(("/var/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
  bool ok = home >= 0 && there >= 0 && setns(there, CLONE_NEWNET) == 0;
  if (ok) {
    fn();
    ok = setns(home, CLONE_NEWNET) == 0;
  }
  if (home >= 0) close(home);
  if (there >= 0) close(there);
  return ok;
}

sockaddr_in Address(const std::string& ip, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
  return a;
}

// Sends `bytes` over TCP from `src_ip` (bound, in namespace `src_ns`) to a listener on `dst_ip`
// (in `dst_ns`); every socket call bounded by a 20 s timeout. Whether all of it arrived.
bool Transfer(const std::string& src_ns, const std::string& src_ip, const std::string& dst_ns,
              const std::string& dst_ip, size_t bytes) {
  int listener = -1, client = -1;
  const sockaddr_in to = Address(dst_ip, 29611), from = Address(src_ip, 0);
  timeval limit{20, 0};
  bool made = InNamespace(dst_ns, [&] {
    listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(listener, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    if (bind(listener, reinterpret_cast<const sockaddr*>(&to), sizeof to) != 0 ||
        listen(listener, 1) != 0) {
      close(listener);
      listener = -1;
    }
  });
  made = made && listener >= 0 && InNamespace(src_ns, [&] {
           client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
           setsockopt(client, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
           if (bind(client, reinterpret_cast<const sockaddr*>(&from), sizeof from) != 0) {
             close(client);
             client = -1;
           }
         });
  size_t received = 0;
  if (made && client >= 0) {
    std::thread reader([&] {
      const int c = accept(listener, nullptr, nullptr);
      if (c < 0) return;
      setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
      std::vector<char> buf(1 << 16);
      for (ssize_t r; (r = recv(c, buf.data(), buf.size(), 0)) > 0;) received += r;
      close(c);
    });
    if (connect(client, reinterpret_cast<const sockaddr*>(&to), sizeof to) == 0) {
      std::vector<char> data(bytes, 'x');
      for (size_t done = 0; done < bytes;) {
        const ssize_t w = send(client, data.data() + done, bytes - done, MSG_NOSIGNAL);
        if (w <= 0) break;
        done += w;
      }
    }
    shutdown(client, SHUT_WR);  // the reader sees EOF (or its timeout ends it)
    reader.join();
  }
  if (client >= 0) close(client);
  if (listener >= 0) close(listener);
  return received == bytes;
}

// `emucluster up NAME 2 --nics 2`: two ports a node, each carrying exactly the traffic bound to
// its own address, both directions shaped; then nothing left after `down`.
TEST_F(EmulatedCluster, TwoNicsANodeCarryTheirOwnTraffic) {
  const std::string e = EMUCLUSTER_PATH;
  const std::string name = "enic" + std::to_string(getpid());
  struct Down {  // on every exit path, a failed assertion's included
    std::string cmd;
    ~Down() { (void)std::system(cmd.c_str()); }
  } down{"bash " + e + " down " + name + " >/dev/null 2>&1"};
  ASSERT_EQ(
      std::system(("bash " + e + " up " + name + " 2 --nics 2 --link 1gbit >/dev/null").c_str()),
      0);
  const std::string status = Output("bash " + e + " status " + name);
  for (const char* line :
       {"-n0: eth0 198.18.0.1/16 qdisc tbf", "-n0: eth1 198.18.1.1/16 qdisc tbf",
        "-n1: eth0 198.18.0.2/16 qdisc tbf", "-n1: eth1 198.18.1.2/16 qdisc tbf"})
    EXPECT_NE(status.find(name + line), std::string::npos) << line << " not in:\n" << status;
  const std::string n0 = name + "-n0", n1 = name + "-n1", sw = name + "-sw";
  // Any NIC's address names its node for mpirun's launch agent (here node 1's eth1), where ARP
  // answers only for a port's own address; an address of no node is refused.
  EXPECT_EQ(Output("bash " + e + " rsh " + name + " 198.18.1.2 'cat /proc/sys/net/ipv4/conf/all/" +
                   "arp_ignore /proc/sys/net/ipv4/conf/eth1/arp_announce; ip -4 -o addr show " +
                   "dev eth1 | tr -s \" \" | cut -d\" \" -f4'"),
            "1\n2\n198.18.1.2/16\n");
  EXPECT_NE(Output("bash " + e + " rsh " + name + " 198.18.1.3 true 2>&1")
                .find("is not a node of " + name),
            std::string::npos);
  // Every pair of ports, 4 MiB from NIC a of node 0 to NIC b of node 1: only eth a of node 0
  // sends it and only eth b of node 1 receives it (the other ports see ARP and acks, a few KiB),
  // through the switch's port towards eth b (its tbf, the receiving direction).
  constexpr size_t kBytes = 4 << 20;
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 2; ++b) {
      const std::string ea = "eth" + std::to_string(a), eb = "eth" + std::to_string(b);
      const std::string to_b = b == 0 ? "p1" : "p1e1";
      long long tx[2], rx[2];
      for (int k = 0; k < 2; ++k) {
        tx[k] = Counter(n0, "eth" + std::to_string(k), "tx_bytes");
        rx[k] = Counter(n1, "eth" + std::to_string(k), "rx_bytes");
      }
      const long long sw_before = QdiscSent(sw, to_b), nic_before = QdiscSent(n0, ea);
      ASSERT_TRUE(Transfer(n0, "198.18." + std::to_string(a) + ".1", n1,
                           "198.18." + std::to_string(b) + ".2", kBytes))
          << "from " << ea << " to " << eb;
      for (int k = 0; k < 2; ++k) {
        const long long sent = Counter(n0, "eth" + std::to_string(k), "tx_bytes") - tx[k];
        const long long got = Counter(n1, "eth" + std::to_string(k), "rx_bytes") - rx[k];
        if (k == a)
          EXPECT_GE(sent, static_cast<long long>(kBytes)) << ea << " -> " << eb;
        else
          EXPECT_LT(sent, 64 << 10) << "node 0 eth" << k << " carried " << ea << " -> " << eb;
        if (k == b)
          EXPECT_GE(got, static_cast<long long>(kBytes)) << ea << " -> " << eb;
        else
          EXPECT_LT(got, 64 << 10) << "node 1 eth" << k << " carried " << ea << " -> " << eb;
      }
      EXPECT_GE(QdiscSent(n0, ea) - nic_before, static_cast<long long>(kBytes));
      EXPECT_GE(QdiscSent(sw, to_b) - sw_before, static_cast<long long>(kBytes));
    }
  EXPECT_EQ(std::system(("bash " + e + " down " + name).c_str()), 0);
  EXPECT_EQ(Output("ip netns list | grep -c '^" + name + "-' || true"), "0\n");
}

TEST_F(EmulatedCluster, BadNicCountsAreRefused) {
  const std::string e = EMUCLUSTER_PATH;
  const std::string name = "enib" + std::to_string(getpid());
  for (const char* k : {"0", "17", "two"}) {
    const std::string out =
        Output("bash " + e + " up " + name + " 2 --nics " + k + " 2>&1; echo rc=$?");
    EXPECT_NE(out.find("--nics must be 1..16 NICs per node, not '" + std::string(k) + "'"),
              std::string::npos)
        << out;
    EXPECT_NE(out.find("rc=1"), std::string::npos) << out;
  }
  EXPECT_EQ(Output("ip netns list | grep -c '^" + name + "-' || true"), "0\n");
}

// braidrun --emulate GxM --nics 2: each rank on its NIC, the communicator counting two a node,
// ring and rail_ring bit-exact, the rail ring's crossings spread over both NICs
// (emulated_rank.cc, mode "nics").
TEST_F(EmulatedCluster, RailRingOnTwoNicsANodeTwoByTwo) {
  ExpectJobPasses({"--emulate", "2x2", "--nics", "2", "--link", "1gbit", "--timeout", "200", "--",
                   EMULATED_RANK_PATH, "nics", "2"},
                  Log());
}

// Four ranks on two NICs: the rail ring's two channels leave from locals 3 and 0, NICs 1 and 0.
TEST_F(EmulatedCluster, RailRingOnTwoNicsANodeTwoByFour) {
  ExpectJobPasses({"--emulate", "2x4", "--nics", "2", "--timeout", "200", "--", EMULATED_RANK_PATH,
                   "nics", "2"},
                  Log());
}

TEST_F(EmulatedCluster, RailRingOnTwoNicsANodeFourByTwo) {
  ExpectJobPasses({"--emulate", "4x2", "--nics", "2", "--timeout", "200", "--", EMULATED_RANK_PATH,
                   "nics", "2"},
                  Log());
}

TEST_F(EmulatedCluster, BadArgumentsAreRefused) {
  for (const auto& args :
       std::vector<std::vector<std::string>>{{"--emulate", "2x", "--", "true"},
                                             {"--emulate", "0x2", "--", "true"},
                                             {"-n", "3", "--emulate", "2x2", "--", "true"},
                                             {"--link", "1gbit", "-n", "2", "--", "true"},
                                             {"--emulate", "2x2", "--nics", "0", "--", "true"},
                                             {"--emulate", "2x2", "--nics", "17", "--", "true"},
                                             {"--nics", "2", "-n", "2", "--", "true"}}) {
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
