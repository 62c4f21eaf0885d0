// No /dev/shm leftovers after any rank is killed (spec/reliability.md check 11): one rank of a
// job SIGKILLs itself at a point of its shm init (or after init); every survivor fails with an
// error, none hangs, and once every process of the job has exited /dev/shm holds nothing named
// after the job's communicator.
//
// The victim stops exactly at the point through the shm transport's test hook (no sleeps for
// ordering): it kills itself from inside the hook. Every rank reports the communicator's tag, which
// names whatever the transport could have put in /dev/shm, through a pipe.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "multirank/harness.h"
#include "transport/shm/shm_transport.h"

namespace braid_test {
namespace {

using braid::shm::InitPoint;

// Set in each rank's process before its init (the hook is a plain function).
int g_tag_pipe = -1;
bool g_victim = false;
bool g_kill_in_init = false;
InitPoint g_kill_at = InitPoint::kSegmentCreated;

void Hook(InitPoint point, const std::string& tag) {
  if (point == InitPoint::kSegmentCreated) {
    const std::string line = tag + "\n";  // one write of < PIPE_BUF bytes: never interleaved
    if (write(g_tag_pipe, line.data(), line.size()) != static_cast<ssize_t>(line.size())) _exit(3);
  }
  if (g_victim && g_kill_in_init && point == g_kill_at) raise(SIGKILL);
}

// Entries of /dev/shm whose name holds `tag`.
std::vector<std::string> DevShmEntriesNaming(const std::string& tag) {
  std::vector<std::string> out;
  DIR* d = opendir("/dev/shm");
  if (!d) return out;
  while (dirent* e = readdir(d))
    if (std::string(e->d_name).find(tag) != std::string::npos) out.push_back(e->d_name);
  closedir(d);
  return out;
}

enum class KillAt { kSegmentCreated, kConnecting, kConnected, kFinished, kAfterInit };

const char* Name(KillAt k) {
  switch (k) {
    case KillAt::kSegmentCreated:
      return "SegmentCreated";
    case KillAt::kConnecting:
      return "Connecting";
    case KillAt::kConnected:
      return "Connected";
    case KillAt::kFinished:
      return "Finished";
    case KillAt::kAfterInit:
      return "AfterInit";
  }
  return "?";
}

void PrintTo(KillAt k, std::ostream* os) {
  *os << Name(k);
}

class ShmLeftovers : public ::testing::TestWithParam<KillAt> {};

TEST_P(ShmLeftovers, NothingOfTheJobStaysInDevShm) {
  const KillAt at = GetParam();
  constexpr int kRanks = 4;
  constexpr int kVictim = 2;
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  JobOptions opt;
  opt.nranks = kRanks;
  opt.timeout_s = 60;
  opt.init = false;
  opt.env = {{"BRAID_TRANSPORTS", "shm"}, {"BRAID_TIMEOUT", "15"}};
  g_tag_pipe = fds[1];
  auto out = RunJob(opt, [at](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
    g_victim = rank == kVictim;
    g_kill_in_init = at != KillAt::kAfterInit;
    if (g_kill_in_init) g_kill_at = static_cast<InitPoint>(static_cast<int>(at));
    braid::shm::SetInitHookForTesting(&Hook);
    braidComm_t comm = nullptr;
    if (braidCommInitRank(&comm, nranks, id, rank) != braidSuccess) {
      std::fprintf(stderr, "[rank %d] init failed as expected: %s\n", rank,
                   braidGetLastError(nullptr));
      return 10;
    }
    if (g_victim && at == KillAt::kAfterInit) raise(SIGKILL);
    std::vector<float> buf(1 << 16, 1.0f);
    int code = 0;
    // The victim's death fails a collective at the latest (it takes part in all of them).
    for (int i = 0; i < 100 && code == 0; ++i)
      if (braidAllReduce(buf.data(), buf.data(), buf.size(), braidFloat32, braidSum, comm) !=
          braidSuccess)
        code = 11;
    braidCommDestroy(comm);
    return code;
  });
  close(fds[1]);
  std::set<std::string> tags;
  std::string text;
  char chunk[256];
  for (ssize_t n; (n = read(fds[0], chunk, sizeof(chunk))) > 0;) text.append(chunk, n);
  close(fds[0]);
  for (size_t pos = 0, nl; (nl = text.find('\n', pos)) != std::string::npos; pos = nl + 1)
    tags.insert(text.substr(pos, nl - pos));

  EXPECT_EQ(out[kVictim].exit_code, 128 + SIGKILL) << DescribeOutcomes(out);
  for (int r = 0; r < kRanks; ++r) {
    if (r == kVictim) continue;
    EXPECT_FALSE(out[r].timed_out) << "rank " << r << " hung: " << DescribeOutcomes(out);
    EXPECT_NE(out[r].exit_code, 0) << "rank " << r << ": " << DescribeOutcomes(out);
  }
  ASSERT_EQ(tags.size(), 1u) << "every rank reports the one communicator's tag: " << text;
  const std::string tag = *tags.begin();
  ASSERT_FALSE(tag.empty());
  // Every process of the job has exited (RunJob reaped the ranks and the rendezvous process).
  auto left = DevShmEntriesNaming(tag);
  std::string names;
  for (const auto& n : left) names += " /dev/shm/" + n;
  EXPECT_TRUE(left.empty()) << "left behind:" << names;
  for (const auto& n : left) unlink(("/dev/shm/" + n).c_str());  // leave the machine clean
}

INSTANTIATE_TEST_SUITE_P(Fault, ShmLeftovers,
                         ::testing::Values(KillAt::kSegmentCreated, KillAt::kConnecting,
                                           KillAt::kConnected, KillAt::kFinished,
                                           KillAt::kAfterInit),
                         [](const auto& info) { return std::string(Name(info.param)); });

}  // namespace
}  // namespace braid_test
