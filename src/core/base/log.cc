#include "core/base/log.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <string>

namespace braid {
namespace {

std::atomic<int> g_rank{-1};

// Held while a line is written. Processes fork (launchers, tests) while other threads may log:
// the atfork handlers keep a child from inheriting it locked.
std::mutex g_log_mu;
const bool g_fork_guard = [] {
  pthread_atfork([] { g_log_mu.lock(); }, [] { g_log_mu.unlock(); }, [] { g_log_mu.unlock(); });
  return true;
}();

LogLevel ParseLevel() {
  const char* v = std::getenv("BRAID_DEBUG");
  if (!v || !*v) v = std::getenv("NCCL_DEBUG");
  if (!v) return LogLevel::kNone;
  std::string s(v);
  for (auto& ch : s) ch = static_cast<char>(toupper(ch));
  if (s == "WARN") return LogLevel::kWarn;
  if (s == "INFO") return LogLevel::kInfo;
  if (s == "TRACE") return LogLevel::kTrace;
  return LogLevel::kNone;
}

FILE* Sink() {
  static FILE* sink = [] {
    const char* path = std::getenv("BRAID_DEBUG_FILE");
    if (!path || !*path) path = std::getenv("NCCL_DEBUG_FILE");
    if (!path || !*path) return stderr;
    std::string p;
    for (const char* c = path; *c; ++c) {
      if (c[0] == '%' && c[1] == 'p') {
        p += std::to_string(getpid());
        ++c;
      } else if (c[0] == '%' && c[1] == 'r') {
        p += std::to_string(g_rank.load());
        ++c;
      } else {
        p += *c;
      }
    }
    FILE* f = std::fopen(p.c_str(), "a");
    return f ? f : stderr;
  }();
  return sink;
}

}  // namespace

LogLevel CurrentLogLevel() {
  static const LogLevel level = ParseLevel();
  return level;
}

void SetLogRank(int rank) {
  g_rank.store(rank);
}

void LogMessage(LogLevel level, const char* file, int line, const char* fmt, ...) {
  static const char* names[] = {"", "WARN", "INFO", "TRACE"};
  char host[64] = {0};
  gethostname(host, sizeof(host) - 1);
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  const char* base = std::strrchr(file, '/');
  std::lock_guard<std::mutex> lock(g_log_mu);
  std::fprintf(Sink(), "%s:%d:%d [braid %s] %s (%s:%d)\n", host, getpid(), g_rank.load(),
               names[static_cast<int>(level)], msg, base ? base + 1 : file, line);
  std::fflush(Sink());
}

}  // namespace braid
