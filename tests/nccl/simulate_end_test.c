/* ncclGroupSimulateEnd against braid's nccl.h and libnccl.so.2: it fills
 * ncclSimInfo_t.estimatedTime (microseconds, as NCCL) with braid's cost-model estimate of the
 * group's collectives and runs nothing. One process initialises NRANKS ranks with
 * ncclCommInitAll and drives them from one thread, as the ABI test does; an alarm fails the test
 * instead of hanging.
 *
 * Checked: an all-reduce recorded in a group is estimated > 0 (in microseconds, not seconds),
 * the estimate grows with the count, the receive buffer is untouched and the communicators
 * still agree on their next collective; the error paths (no open group: invalid usage; NULL
 * simInfo: invalid argument) leave the thread's group state as it was.
 */
#define _GNU_SOURCE
#include <nccl.h>

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NRANKS 4
#define GUARD_SECONDS 120
#define COUNT (1 << 18) /* floats: 1 MiB, above the express lane's limit */
#define SENTINEL -7.0f

static int g_fail = 0;

static void report(int line, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "simulate_end_test.c:%d: ", line);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  g_fail++;
}

#define EXPECT(cond, ...)                                            \
  do {                                                               \
    if (!(cond)) report(__LINE__, "EXPECT(" #cond ") " __VA_ARGS__); \
  } while (0)

#define NCCL_OK(call)                                                                 \
  do {                                                                                \
    ncclResult_t r_ = (call);                                                         \
    if (r_ != ncclSuccess) {                                                          \
      report(__LINE__, "%s returned %d: %s", #call, (int)r_, ncclGetLastError(NULL)); \
      exit(1);                                                                        \
    }                                                                                 \
  } while (0)

#define EXPECT_ERR(code, word, call)                                                            \
  do {                                                                                          \
    ncclResult_t r_ = (call);                                                                   \
    const char* m_ = ncclGetLastError(NULL);                                                    \
    if (r_ != (code))                                                                           \
      report(__LINE__, "%s returned %d, expected %d (%s)", #call, (int)r_, (int)(code), #code); \
    else if (!m_ || !strstr(m_, (word)))                                                        \
      report(__LINE__, "%s: last error '%s' should mention '%s'", #call, m_ ? m_ : "", (word)); \
  } while (0)

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "simulate_end_test: wall-clock guard expired (hang)\n";
  ssize_t w = write(2, msg, sizeof msg - 1);
  (void)w;
  _exit(124);
}

static int untouched(const float* buf, size_t count) {
  for (size_t j = 0; j < count; ++j)
    if (buf[j] != SENTINEL) return 0;
  return 1;
}

/* Records an all-reduce of `count` floats on comms[0] and simulates the group. */
static float simulate_allreduce(ncclComm_t comm, float* send, float* recv, size_t count) {
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, comm, NULL));
  NCCL_OK(ncclGroupSimulateEnd(&sim));
  EXPECT(untouched(recv, count), "the receive buffer of a simulated all-reduce was written");
  return sim.estimatedTime;
}

int main(void) {
  setenv("BRAID_TIMEOUT", "60", 0);
  signal(SIGALRM, on_alarm);
  alarm(GUARD_SECONDS);

  ncclComm_t comms[NRANKS];
  NCCL_OK(ncclCommInitAll(comms, NRANKS, NULL));
  float* send[NRANKS];
  float* recv[NRANKS];
  for (int i = 0; i < NRANKS; ++i) {
    send[i] = malloc(4 * COUNT * sizeof(float));
    recv[i] = malloc(4 * COUNT * sizeof(float));
    if (!send[i] || !recv[i]) return 1;
    for (size_t j = 0; j < 4 * COUNT; ++j) {
      send[i][j] = (float)(i + j % 3);
      recv[i][j] = SENTINEL;
    }
  }

  /* The estimate: > 0, in microseconds (1 MiB over 4 ranks takes far more than 1 us and far
   * less than a second on any model), and growing with the count. */
  const float t1 = simulate_allreduce(comms[0], send[0], recv[0], COUNT);
  const float t4 = simulate_allreduce(comms[0], send[0], recv[0], 4 * COUNT);
  EXPECT(t1 > 1.0f && t1 < 1e6f, "estimatedTime %g us for %d floats", (double)t1, COUNT);
  EXPECT(t4 > t1, "estimatedTime %g us for 4x the count, %g us for 1x", (double)t4, (double)t1);
  /* Every rank's collective in one group: the estimates are summed. */
  ncclSimInfo_t all = NCCL_SIM_INFO_INITIALIZER;
  NCCL_OK(ncclGroupStart());
  for (int i = 0; i < NRANKS; ++i)
    NCCL_OK(ncclAllReduce(send[i], recv[i], COUNT, ncclFloat32, ncclSum, comms[i], NULL));
  NCCL_OK(ncclGroupSimulateEnd(&all));
  EXPECT(all.estimatedTime > 3.9f * t1 && all.estimatedTime < 4.1f * t1,
         "%d ranks' all-reduces estimated at %g us, one at %g us", NRANKS,
         (double)all.estimatedTime, (double)t1);
  for (int i = 0; i < NRANKS; ++i)
    EXPECT(untouched(recv[i], 4 * COUNT), "rank %d's receive buffer was written", i);

  /* Error paths. NULL simInfo keeps the group open; ncclGroupEnd then closes it. */
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  EXPECT_ERR(ncclInvalidUsage, "ncclGroupStart", ncclGroupSimulateEnd(&sim));
  NCCL_OK(ncclGroupStart());
  EXPECT_ERR(ncclInvalidArgument, "simInfo", ncclGroupSimulateEnd(NULL));
  NCCL_OK(ncclGroupEnd());
  EXPECT_ERR(ncclInvalidUsage, "ncclGroupStart", ncclGroupEnd());

  /* Nothing ran, so every rank is still at its first collective: a real one agrees. */
  NCCL_OK(ncclGroupStart());
  for (int i = 0; i < NRANKS; ++i)
    NCCL_OK(ncclAllReduce(send[i], recv[i], COUNT, ncclFloat32, ncclSum, comms[i], NULL));
  NCCL_OK(ncclGroupEnd());
  for (int i = 0; i < NRANKS; ++i)
    for (size_t j = 0; j < COUNT; ++j) {
      float want = 0;
      for (int q = 0; q < NRANKS; ++q) want += (float)(q + j % 3);
      if (recv[i][j] != want) {
        report(__LINE__, "all-reduce after simulation: rank %d [%zu] = %g, want %g", i, j,
               (double)recv[i][j], (double)want);
        break;
      }
    }

  for (int i = 0; i < NRANKS; ++i) {
    NCCL_OK(ncclCommDestroy(comms[i]));
    free(send[i]);
    free(recv[i]);
  }
  if (g_fail) return 1;
  printf("simulate_end_test: passed (all-reduce of %d floats on %d ranks: %g us; 4x: %g us)\n",
         COUNT, NRANKS, (double)t1, (double)t4);
  return 0;
}
