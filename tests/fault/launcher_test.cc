// braidrun as the spec wants it on failure and on security (spec/reliability.md items 5 and 9):
// it names the rank that failed first in time, not the first one it happened to reap, and it
// hands its ranks a fresh secret for any rendezvous by address. Ranks are shell scripts.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "../common/proc_state.h"

#ifndef BRAIDRUN_PATH
#error "BRAIDRUN_PATH (the braidrun binary) is set by tests/CMakeLists.txt"
#endif

namespace braid_test {
namespace {

using Clock = std::chrono::steady_clock;

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Polls `cond` every millisecond until it holds or `limit_ms` pass.
bool WaitUntil(const std::function<bool()>& cond, int limit_ms) {
  auto end = Clock::now() + std::chrono::milliseconds(limit_ms);
  while (!cond()) {
    if (Clock::now() > end) return false;
    usleep(1000);
  }
  return true;
}

using braid_test_common::ProcState;

struct Launch {
  pid_t pid = -1;
  std::string out, err;  // files
};

// Starts braidrun with `args`, stdout and stderr into files of `dir`, extra environment `env`.
Launch StartBraidrun(const std::string& dir, const std::vector<std::string>& args,
                     const std::vector<std::string>& env = {}) {
  Launch r;
  r.out = dir + "/stdout";
  r.err = dir + "/stderr";
  std::fflush(nullptr);
  r.pid = fork();
  if (r.pid == 0) {
    int out = open(r.out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int err = open(r.err.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (out < 0 || err < 0) _exit(126);
    dup2(out, 1);
    dup2(err, 2);
    unsetenv("BRAID_SECRET");
    for (const auto& e : env) putenv(const_cast<char*>(e.c_str()));
    std::vector<char*> argv{const_cast<char*>(BRAIDRUN_PATH)};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(BRAIDRUN_PATH, argv.data());
    _exit(127);
  }
  return r;
}

// braidrun's exit status, under a wall-clock guard (124 when it had to be killed).
int Finish(const Launch& r, int limit_s) {
  int st = 0;
  if (!WaitUntil([&] { return waitpid(r.pid, &st, WNOHANG) == r.pid; }, limit_s * 1000)) {
    kill(r.pid, SIGKILL);
    waitpid(r.pid, nullptr, 0);
    return 124;
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

class Launcher : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/braid-launcher-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    for (const char* f : {"stdout", "stderr", "go.0", "go.2", "pid.0", "pid.1", "pid.2"})
      unlink((dir_ + "/" + f).c_str());
    rmdir(dir_.c_str());
  }
  std::string dir_;
};

// Rank 2 fails (exit 5), then rank 0 fails because of it (exit 1), both while braidrun is
// stopped, so that both are waiting to be reaped when it resumes, the later one first in the
// kernel's list of children. braidrun must report rank 2 and exit 5.
TEST_F(Launcher, NamesTheRankThatFailedFirstInTime) {
  for (int r : {0, 2}) ASSERT_EQ(mkfifo((dir_ + "/go." + std::to_string(r)).c_str(), 0600), 0);
  // Each rank notes its pid, then ranks 0 and 2 wait for their cue; rank 1 would run for a minute.
  const std::string script =
      "echo $$ > \"$DIR/pid.$BRAID_RANK\"; case $BRAID_RANK in "
      "0) read x < \"$DIR/go.0\"; exit 1;; 2) read x < \"$DIR/go.2\"; exit 5;; "
      "*) exec sleep 60;; esac";
  Launch run = StartBraidrun(dir_, {"-n", "3", "sh", "-c", script}, {"DIR=" + dir_});
  ASSERT_GT(run.pid, 0);

  // Both cues open for writing once their rank waits on them (so every rank has started).
  int cue[3] = {-1, -1, -1};
  for (int r : {0, 2}) {
    std::string path = dir_ + "/go." + std::to_string(r);
    bool open_ok = WaitUntil(
        [&] { return (cue[r] = open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC)) >= 0; },
        20000);
    EXPECT_TRUE(open_ok) << "rank " << r << " never waited for its cue";
  }
  pid_t rank_pid[3] = {0, 0, 0};
  for (int r : {0, 2})
    rank_pid[r] = std::atoi(ReadFile(dir_ + "/pid." + std::to_string(r)).c_str());
  bool ready = cue[0] >= 0 && cue[2] >= 0 && rank_pid[0] > 0 && rank_pid[2] > 0;

  if (ready) {
    kill(run.pid, SIGSTOP);
    EXPECT_TRUE(WaitUntil([&] { return ProcState(run.pid) == 'T'; }, 10000));
    for (int r : {2, 0}) {  // rank 2 first, then rank 0: each has exited before the next goes
      EXPECT_EQ(write(cue[r], "go\n", 3), 3);
      close(cue[r]);
      cue[r] = -1;
      EXPECT_TRUE(WaitUntil([&] { return ProcState(rank_pid[r]) == 'Z'; }, 10000))
          << "rank " << r << " did not exit";
    }
    kill(run.pid, SIGCONT);
  }
  for (int fd : cue)
    if (fd >= 0) close(fd);
  int status = Finish(run, 60);
  std::string err = ReadFile(run.err);
  ASSERT_TRUE(ready);
  EXPECT_EQ(status, 5) << err;
  EXPECT_NE(err.find("rank 2 (pid"), std::string::npos) << err;
  EXPECT_EQ(err.find("rank 0 (pid"), std::string::npos) << err;
}

// Every rank of a job gets the same fresh BRAID_SECRET (64 hex digits, 256 bits), a new one per
// job; a secret the user exported is passed through unchanged.
TEST_F(Launcher, GivesItsRanksAFreshSecret) {
  auto secrets_of = [&](const std::vector<std::string>& env) {
    Launch run = StartBraidrun(dir_, {"-n", "3", "sh", "-c", "echo \"secret=$BRAID_SECRET\""}, env);
    EXPECT_EQ(Finish(run, 60), 0) << ReadFile(run.err);
    std::multiset<std::string> lines;
    std::stringstream s(ReadFile(run.out));
    for (std::string line; std::getline(s, line);) lines.insert(line);
    return lines;
  };
  auto a = secrets_of({}), b = secrets_of({});
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(a.count(*a.begin()), 3u) << "the ranks of one job got different secrets";
  std::string secret = a.begin()->substr(7);
  EXPECT_EQ(secret.size(), 64u) << secret;
  EXPECT_EQ(secret.find_first_not_of("0123456789abcdef"), std::string::npos) << secret;
  EXPECT_NE(*a.begin(), *b.begin()) << "two jobs got the same secret";

  auto mine = secrets_of({"BRAID_SECRET=chosen-by-the-user"});
  EXPECT_EQ(mine.count("secret=chosen-by-the-user"), 3u);
}

}  // namespace
}  // namespace braid_test
