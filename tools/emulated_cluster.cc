#include "emulated_cluster.h"

#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

extern char** environ;

namespace braidrun {
namespace {

struct State {
  EmulationSpec spec;
  std::string name;
  std::string script;
  std::vector<int> ns_fds;
  int home_fd = -1;
  bool up = false;
};

State& S() {
  static State s;
  return s;
}

// The emucluster script: next to this executable (the build and install trees put it there),
// else BRAID_EMUCLUSTER.
std::string FindScript() {
  if (const char* e = std::getenv("BRAID_EMUCLUSTER"); e && *e) return e;
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return "emucluster";
  self[n] = '\0';
  std::string dir(self);
  dir.erase(dir.rfind('/') + 1);
  return dir + "emucluster";
}

// Runs the script with `args`; its exit status (or -1 when it could not start).
int RunScript(const std::vector<std::string>& args) {
  std::vector<std::string> all = {"bash", S().script};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid;
  if (posix_spawnp(&pid, "bash", nullptr, nullptr, argv.data(), environ) != 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void Teardown() {
  EmulatedCluster::Stop();
}

}  // namespace

bool ParseEmulation(const std::string& text, EmulationSpec* spec) {
  int g = 0, m = 0;
  char extra = 0;
  if (std::sscanf(text.c_str(), "%dx%d%c", &g, &m, &extra) != 2) return false;
  if (g < 1 || g > 200 || m < 1 || m > 256) return false;
  spec->nodes = g;
  spec->ranks_per_node = m;
  return true;
}

void EmulatedCluster::Start(const EmulationSpec& spec) {
  State& s = S();
  s.spec = spec;
  s.name = "bemu" + std::to_string(getpid());
  s.script = FindScript();
  if (access(s.script.c_str(), R_OK) != 0) {
    std::fprintf(stderr, "braidrun: --emulate needs the emucluster script: %s: %s\n",
                 s.script.c_str(), std::strerror(errno));
    std::exit(1);
  }
  std::vector<std::string> args = {"up", s.name, std::to_string(spec.nodes)};
  if (!spec.link.empty()) {
    args.push_back("--link");
    args.push_back(spec.link);
  }
  if (spec.nics > 1) {
    args.push_back("--nics");
    args.push_back(std::to_string(spec.nics));
  }
  std::atexit(Teardown);
  s.up = true;  // from here on, teardown runs whatever happens next
  if (RunScript(args) != 0) {
    std::fprintf(stderr, "braidrun: could not create the emulated cluster (see above)\n");
    std::exit(1);
  }
  s.home_fd = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  for (int i = 0; i < spec.nodes; ++i) {
    const std::string path = "/var/run/netns/" + s.name + "-n" + std::to_string(i);
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || s.home_fd < 0) {
      std::fprintf(stderr, "braidrun: cannot open %s: %s\n", path.c_str(), std::strerror(errno));
      std::exit(1);
    }
    s.ns_fds.push_back(fd);
  }
}

bool EmulatedCluster::active() {
  return S().spec.nodes > 0;
}
const EmulationSpec& EmulatedCluster::spec() {
  return S().spec;
}
int EmulatedCluster::NodeOf(int rank) {
  return rank / S().spec.ranks_per_node;
}
int EmulatedCluster::NamespaceFd(int node) {
  return S().ns_fds[static_cast<size_t>(node)];
}
std::string EmulatedCluster::HostId(int node) {
  return S().name + "-node" + std::to_string(node);
}
std::string EmulatedCluster::Interface(int rank) {
  const EmulationSpec& e = S().spec;
  if (e.nics <= 1) return "eth0";
  return "=eth" + std::to_string(rank % e.ranks_per_node % e.nics);
}

void EmulatedCluster::Enter(int node) {
  if (setns(NamespaceFd(node), CLONE_NEWNET) != 0) {
    std::perror("braidrun: setns into the emulated node");
    std::exit(1);
  }
}

void EmulatedCluster::Leave() {
  if (setns(S().home_fd, CLONE_NEWNET) != 0) {
    std::perror("braidrun: setns back");
    std::exit(1);
  }
}

void EmulatedCluster::Stop() {
  State& s = S();
  if (!s.up) return;
  s.up = false;
  for (int fd : s.ns_fds) close(fd);
  s.ns_fds.clear();
  if (RunScript({"down", s.name}) != 0)
    std::fprintf(stderr, "braidrun: removing the emulated cluster %s failed; run: %s down %s\n",
                 s.name.c_str(), s.script.c_str(), s.name.c_str());
}

}  // namespace braidrun
