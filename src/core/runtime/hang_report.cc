// Hang localisation (spec/reliability.md check 8): braidCommDebugState, and a dump of every live
// communicator to the log when the process receives BRAID_DUMP_SIGNAL.
//
// The signal handler only writes one byte to a pipe (async-signal-safe); a thread started with
// the first communicator waits on that pipe and composes the reports, which may take locks and
// allocate. No handler is installed unless BRAID_DUMP_SIGNAL names a signal, and none over a
// handler (or an ignore) the application installed: the application's signals are its own.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#include "core/runtime/hang_report.h"

#include "braid/braid.h"
#include "core/runtime/api_errors.h"
#include "core/runtime/api_submit.h"
#include "core/runtime/comm_registry.h"
#include "core/base/config.h"
#include "core/base/log.h"

namespace braid {
namespace {

int g_dump_pipe[2] = {-1, -1};

void OnDumpSignal(int) {
  const int saved = errno;
  char b = 1;
  (void)!write(g_dump_pipe[1], &b, 1);
  errno = saved;
}

void DumpThread() {
  for (;;) {
    char b;
    ssize_t n = read(g_dump_pipe[0], &b, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    // Whatever the log level: whoever sent the signal asked for it.
    for (const CommRef& c : LiveComms())
      LogMessage(LogLevel::kWarn, __FILE__, __LINE__, "%s",
                 c->debugState(Deadline::After(2000)).c_str());
  }
}

}  // namespace

Status InstallDumpSignal(const std::string& name) {
  static std::once_flag once;
  static Status result;
  if (name.empty()) return Status::Ok();
  std::call_once(once, [&] {
    const int sig = DumpSignalNumber(name);
    if (sig == 0) {
      result = InvalidArgument("BRAID_DUMP_SIGNAL='" + name + "': use USR1, USR2 or QUIT");
      return;
    }
    // A signal the application handles (or ignores) is its own: braid leaves it alone and says
    // so, rather than take it over (braidCommDebugState gives the same report on demand).
    struct sigaction before {};
    if (sigaction(sig, nullptr, &before) == 0 && !(before.sa_flags & SA_SIGINFO) &&
        before.sa_handler == SIG_DFL) {
      // (the default action: braid may take it)
    } else {
      BRAID_WARN(
          "BRAID_DUMP_SIGNAL=%s: the application already handles or ignores that signal; "
          "braid leaves it alone (no dump on it: pick another signal, or call "
          "braidCommDebugState)",
          name.c_str());
      return;
    }
    if (pipe2(g_dump_pipe, O_CLOEXEC) != 0) {
      result = SystemError(ErrnoMessage("BRAID_DUMP_SIGNAL: pipe", errno));
      return;
    }
    std::thread(DumpThread).detach();  // lives as long as the process, blocked on the pipe
    struct sigaction sa {};
    sa.sa_handler = OnDumpSignal;
    // Restartable calls (read, write, wait, ...) resume after the handler. Calls that POSIX never
    // restarts (sleep, nanosleep, poll, select) return early with EINTR, as with any handled
    // signal: docs/reliability.md says so.
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, nullptr);
  });
  return result;
}

}  // namespace braid

using namespace braid;

extern "C" braidResult_t braidCommDebugState(braidComm_t comm, char* buf, size_t len) {
  if (!buf || len == 0)
    return Fail(InvalidArgument("braidCommDebugState: buf is NULL or len is 0"));
  CommRef ref = LookupComm(comm);
  if (!ref) return Fail(InvalidUsage("braidCommDebugState: the communicator handle is not live"));
  std::string s = ref->debugState(Deadline::After(2000));
  const size_t n = std::min(len - 1, s.size());
  std::memcpy(buf, s.data(), n);
  buf[n] = '\0';
  return braidSuccess;
}
