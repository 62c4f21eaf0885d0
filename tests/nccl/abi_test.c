/* ABI test of braid's libnccl.so.2.
 *
 * Built twice from this one file: against NVIDIA's nccl.h (-I/usr/local/cuda/include) and
 * against braid's include/nccl.h (no CUDA headers on the path); both link braid's library. The
 * parent process checks that the library loaded is braid's, then forks NRANKS ranks that get
 * their unique ids from rank 0 through pipes and run every collective, data type and reduction
 * (including ncclAvg and pre-multiplied sums) in and out of place on host buffers, gather,
 * scatter, all-to-all, grouped send/receive rings, splits, shrink, non-blocking init, the
 * ncclConfig_t contract, single-thread multi-rank init, abort, and every error path NCCL
 * documents. Results are compared bit-exactly: inputs are built so that every result is exact
 * in every type (small integers, powers of two). An alarm fails the test instead of hanging.
 */
#define _GNU_SOURCE
#include <nccl.h>

#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef EXPECT_BRAID_HEADER
#error "build with -DEXPECT_BRAID_HEADER=0 (NVIDIA's nccl.h) or 1 (braid's)"
#endif
#if EXPECT_BRAID_HEADER && !defined(NCCL_BRAID)
#error "expected braid's nccl.h on the include path"
#endif
#if !EXPECT_BRAID_HEADER && defined(NCCL_BRAID)
#error "expected NVIDIA's nccl.h on the include path"
#endif
#if EXPECT_BRAID_HEADER && defined(BRAID_NCCL_HAVE_CUDA_HEADERS)
#error "the braid-header build must not see CUDA headers"
#endif

/* ------------------------------------------------------------------ ABI facts both headers share
 */
_Static_assert(sizeof(ncclUniqueId) == 128, "unique id size");
_Static_assert(ncclSuccess == 0 && ncclUnhandledCudaError == 1 && ncclSystemError == 2 &&
                   ncclInternalError == 3 && ncclInvalidArgument == 4 && ncclInvalidUsage == 5 &&
                   ncclRemoteError == 6 && ncclInProgress == 7 && ncclNumResults == 8,
               "ncclResult_t values");
_Static_assert(ncclInt8 == 0 && ncclUint8 == 1 && ncclInt32 == 2 && ncclUint32 == 3 &&
                   ncclInt64 == 4 && ncclUint64 == 5 && ncclFloat16 == 6 && ncclFloat32 == 7 &&
                   ncclFloat64 == 8 && ncclBfloat16 == 9 && ncclFloat8e4m3 == 10 &&
                   ncclFloat8e5m2 == 11 && ncclNumTypes == 12,
               "ncclDataType_t values");
_Static_assert(ncclSum == 0 && ncclProd == 1 && ncclMax == 2 && ncclMin == 3 && ncclAvg == 4 &&
                   ncclNumOps == 5 && ncclMaxRedOp == 0x7fffffff && sizeof(ncclRedOp_t) == 4,
               "ncclRedOp_t values");
_Static_assert(offsetof(ncclConfig_t, magic) == 8 && offsetof(ncclConfig_t, version) == 12 &&
                   offsetof(ncclConfig_t, blocking) == 16 &&
                   offsetof(ncclConfig_t, netName) == 32 &&
                   offsetof(ncclConfig_t, splitShare) == 40 &&
                   offsetof(ncclConfig_t, commName) == 48 &&
                   offsetof(ncclConfig_t, nvlinkCentricSched) == 76 && sizeof(ncclConfig_t) == 80,
               "ncclConfig_t layout");
_Static_assert(offsetof(ncclSimInfo_t, estimatedTime) == 16, "ncclSimInfo_t layout");
_Static_assert(NCCL_VERSION_CODE == 22809 && NCCL_SPLIT_NOCOLOR == -1 && NCCL_SHRINK_ABORT == 1,
               "constants");

/* The device API is declared in nccl_device.h (C++/CUDA only); these C prototypes have the same
 * calling convention for the arguments passed here. */
ncclResult_t ncclDevCommCreate(ncclComm_t comm, const void* reqs, void* outDevComm);
struct abi_team { /* nccl_device/core.h's struct ncclTeam */
  int nRanks, rank, stride;
};
ncclResult_t ncclLsaBarrierCreateRequirement(struct abi_team team, int n, void* h, void* req);

#define NRANKS 4
#define GUARD_SECONDS 280

static int g_rank = -1; /* rank in the main communicator; -1 in the parent */
static int g_fail = 0;
static int g_pipes[NRANKS][2]; /* rank 0 -> rank k: unique ids */
static int g_nccl_env = 0;     /* --nccl-env: run under NCCL_* variables in NCCL's grammar */

static void report(const char* file, int line, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "[rank %d] %s:%d: ", g_rank, file, line);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  g_fail++;
}

#define EXPECT(cond, ...)                                                      \
  do {                                                                         \
    if (!(cond)) report(__FILE__, __LINE__, "EXPECT(" #cond ") " __VA_ARGS__); \
  } while (0)

/* Any failing NCCL call ends this rank at once (the parent then stops the others). */
#define NCCL_OK(call)                                                       \
  do {                                                                      \
    ncclResult_t r_ = (call);                                               \
    if (r_ != ncclSuccess) {                                                \
      report(__FILE__, __LINE__, "%s returned %d (%s): %s", #call, (int)r_, \
             ncclGetErrorString(r_), ncclGetLastError(NULL));               \
      fflush(NULL);                                                         \
      exit(1);                                                              \
    }                                                                       \
  } while (0)

static int mentions(const char* message, const char* word) {
  return !word || strstr(message, word) != NULL;
}

/* A call that must fail with `code` and leave a message mentioning `word` (NULL: any message). */
#define EXPECT_ERR(code, word, call)                                                             \
  do {                                                                                           \
    ncclResult_t r_ = (call);                                                                    \
    const char* m_ = ncclGetLastError(NULL);                                                     \
    if (r_ != (code))                                                                            \
      report(__FILE__, __LINE__, "%s returned %d, expected %d (%s); last error: %s", #call,      \
             (int)r_, (int)(code), #code, m_);                                                   \
    else if (!m_ || !*m_ || !mentions(m_, (word)))                                               \
      report(__FILE__, __LINE__, "%s: last error '%s' should mention '%s'", #call, m_ ? m_ : "", \
             (word) ? (const char*)(word) : "anything");                                         \
  } while (0)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------------ types and exact values */

typedef struct {
  ncclDataType_t t;
  const char* name;
  size_t size;
  int is_signed;
} type_t;

static const type_t kTypes[] = {
    {ncclInt8, "int8", 1, 1},         {ncclUint8, "uint8", 1, 0},
    {ncclInt32, "int32", 4, 1},       {ncclUint32, "uint32", 4, 0},
    {ncclInt64, "int64", 8, 1},       {ncclUint64, "uint64", 8, 0},
    {ncclFloat16, "half", 2, 1},      {ncclFloat32, "float", 4, 1},
    {ncclFloat64, "double", 8, 1},    {ncclBfloat16, "bfloat16", 2, 1},
    {ncclFloat8e4m3, "f8e4m3", 1, 1}, {ncclFloat8e5m2, "f8e5m2", 1, 1},
};
#define NTYPES ((int)(sizeof(kTypes) / sizeof(kTypes[0])))

/* Bits of `v` in a binary floating-point format with `ebits` exponent and `mbits` mantissa bits.
 * Only values exactly representable are ever passed (checked). */
static uint32_t minifloat(double v, int ebits, int mbits, int bias) {
  uint32_t sign = 0, bits;
  if (v < 0) {
    sign = 1;
    v = -v;
  }
  if (v == 0) {
    bits = 0;
  } else {
    int e;
    double m = frexp(v, &e); /* v = m * 2^e, m in [0.5, 1) */
    int biased = e - 1 + bias;
    double frac;
    if (biased >= 1) {
      frac = (2 * m - 1) * (double)(1u << mbits);
      bits = ((uint32_t)biased << mbits) | (uint32_t)frac;
    } else {
      frac = ldexp(v, bias - 1 + mbits);
      bits = (uint32_t)frac;
    }
    if (frac != floor(frac) || biased >= (1 << ebits) - 1)
      report(__FILE__, __LINE__, "test bug: %g is not exact with %d/%d bits", v, ebits, mbits);
  }
  return (sign << (ebits + mbits)) | bits;
}

static void encode(const type_t* T, double v, void* dst) {
  switch (T->t) {
    case ncclInt8: {
      int8_t x = (int8_t)v;
      memcpy(dst, &x, 1);
      break;
    }
    case ncclUint8: {
      uint8_t x = (uint8_t)v;
      memcpy(dst, &x, 1);
      break;
    }
    case ncclInt32: {
      int32_t x = (int32_t)v;
      memcpy(dst, &x, 4);
      break;
    }
    case ncclUint32: {
      uint32_t x = (uint32_t)v;
      memcpy(dst, &x, 4);
      break;
    }
    case ncclInt64: {
      int64_t x = (int64_t)v;
      memcpy(dst, &x, 8);
      break;
    }
    case ncclUint64: {
      uint64_t x = (uint64_t)v;
      memcpy(dst, &x, 8);
      break;
    }
    case ncclFloat16: {
      uint16_t x = (uint16_t)minifloat(v, 5, 10, 15);
      memcpy(dst, &x, 2);
      break;
    }
    case ncclFloat32: {
      float x = (float)v;
      memcpy(dst, &x, 4);
      break;
    }
    case ncclFloat64: {
      memcpy(dst, &v, 8);
      break;
    }
    case ncclBfloat16: {
      uint16_t x = (uint16_t)minifloat(v, 8, 7, 127);
      memcpy(dst, &x, 2);
      break;
    }
    case ncclFloat8e4m3: {
      uint8_t x = (uint8_t)minifloat(v, 4, 3, 7);
      memcpy(dst, &x, 1);
      break;
    }
    case ncclFloat8e5m2: {
      uint8_t x = (uint8_t)minifloat(v, 5, 2, 15);
      memcpy(dst, &x, 1);
      break;
    }
    default:
      report(__FILE__, __LINE__, "test bug: type %d", (int)T->t);
  }
}

/* Reductions under test: the five built-ins and a pre-multiplied sum (scalar 2). */
enum { OP_SUM, OP_PROD, OP_MAX, OP_MIN, OP_AVG, OP_PREMUL, NOPS };
static const char* kOpNames[NOPS] = {"sum", "prod", "max", "min", "avg", "premulsum"};

/* Inputs whose every partial result is exact even in f8e5m2 (integers <= 8 or even ones <= 16):
 * sums of {0,1,2} over at most 4 ranks, products of {1,2}, max/min of small (signed) integers,
 * averages of v+1 and v-1 pairs (exact for 1, 2 or 4 ranks). */
static double in_value(int op, const type_t* T, int r, size_t j) {
  switch (op) {
    case OP_SUM:
    case OP_PREMUL:
      return (double)((r + j) % 3);
    case OP_PROD:
      return ((r + j) % 2) ? 2.0 : 1.0;
    case OP_MAX:
    case OP_MIN: {
      double v = (double)((r * 7 + j * 3) % 5);
      return T->is_signed ? v - 2 : v;
    }
    case OP_AVG:
      return 1.0 + (double)(j % 3) + ((r % 2) ? -1.0 : 1.0);
  }
  return 0;
}

static double expected(int op, const type_t* T, size_t j, int n) {
  double acc = in_value(op, T, 0, j);
  for (int r = 1; r < n; ++r) {
    double x = in_value(op, T, r, j);
    switch (op) {
      case OP_PROD:
        acc *= x;
        break;
      case OP_MAX:
        acc = x > acc ? x : acc;
        break;
      case OP_MIN:
        acc = x < acc ? x : acc;
        break;
      default:
        acc += x;
        break;
    }
  }
  if (op == OP_AVG) acc /= n;
  if (op == OP_PREMUL) acc *= 2;
  return acc;
}

/* Values for the data-movement collectives (0..6: exact everywhere). */
static double g_value(int q, size_t i) {
  return (double)((q * 5 + i) % 7);
}
static double h_value(int src, int dst, size_t i) {
  return (double)((src * 3 + dst * 2 + i) % 7);
}

static unsigned char* alloc_bytes(size_t n) {
  unsigned char* p = (unsigned char*)malloc(n ? n : 1);
  if (!p) {
    report(__FILE__, __LINE__, "out of memory");
    exit(1);
  }
  memset(p, 0xA5, n); /* garbage the library must overwrite */
  return p;
}

static int g_reported; /* mismatches printed in the current check */

static void check_elem(const char* what, const type_t* T, const unsigned char* got, double want,
                       size_t index) {
  unsigned char exp[8];
  encode(T, want, exp);
  if (memcmp(got, exp, T->size) != 0) {
    if (g_reported++ < 3) {
      char hg[20] = "", he[20] = "";
      for (size_t b = 0; b < T->size; ++b) {
        sprintf(hg + 2 * b, "%02x", got[T->size - 1 - b]);
        sprintf(he + 2 * b, "%02x", exp[T->size - 1 - b]);
      }
      report(__FILE__, __LINE__, "%s %s: element %zu is 0x%s, expected 0x%s (%g)", what, T->name,
             index, hg, he, want);
    } else {
      g_fail++;
    }
  }
}

/* ------------------------------------------------------------------ reductions */

/* The operator for `op`; for OP_PREMUL a new pre-multiplied sum whose scalar variable is
 * overwritten right after creation (the value must have been captured). */
static ncclRedOp_t make_op(int op, const type_t* T, ncclComm_t comm) {
  static const ncclRedOp_t builtin[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
  if (op != OP_PREMUL) return builtin[op];
  unsigned char scalar[8];
  encode(T, 2.0, scalar);
  ncclRedOp_t r;
  NCCL_OK(ncclRedOpCreatePreMulSum(&r, scalar, T->t, ncclScalarHostImmediate, comm));
  EXPECT((int)r >= ncclNumOps, "pre-multiplied sum got a built-in value %d", (int)r);
  memset(scalar, 0, sizeof(scalar));
  return r;
}

static void test_allreduce(ncclComm_t comm, int rank, int n, const type_t* T, int op, int inplace,
                           size_t count) {
  size_t es = T->size;
  unsigned char* send = alloc_bytes(count * es);
  unsigned char* recv = inplace ? send : alloc_bytes(count * es);
  for (size_t j = 0; j < count; ++j) encode(T, in_value(op, T, rank, j), send + j * es);
  ncclRedOp_t rop = make_op(op, T, comm);
  if (op == OP_PREMUL) {
    /* NCCL's contract: the op may be destroyed once the call using it has been issued, here
     * before the group (and so the operation) has even run. */
    NCCL_OK(ncclGroupStart());
    NCCL_OK(ncclAllReduce(send, recv, count, T->t, rop, comm, NULL));
    NCCL_OK(ncclRedOpDestroy(rop, comm));
    NCCL_OK(ncclGroupEnd());
  } else {
    NCCL_OK(ncclAllReduce(send, recv, count, T->t, rop, comm, NULL));
  }
  char what[128];
  snprintf(what, sizeof what, "allreduce %s %s n=%d count=%zu", kOpNames[op],
           inplace ? "in-place" : "out-of-place", n, count);
  g_reported = 0;
  for (size_t j = 0; j < count; ++j) check_elem(what, T, recv + j * es, expected(op, T, j, n), j);
  free(send);
  if (!inplace) free(recv);
}

static void test_reduce(ncclComm_t comm, int rank, int n, const type_t* T, int op, int inplace,
                        size_t count, int root) {
  size_t es = T->size;
  unsigned char* send = alloc_bytes(count * es);
  unsigned char* recv = inplace ? send : alloc_bytes(count * es);
  for (size_t j = 0; j < count; ++j) encode(T, in_value(op, T, rank, j), send + j * es);
  /* NCCL: recvbuff may be NULL on non-root ranks. */
  void* rb = (!inplace && rank != root && count > 1) ? NULL : recv;
  ncclRedOp_t rop = make_op(op, T, comm);
  NCCL_OK(ncclReduce(send, rb, count, T->t, rop, root, comm, NULL));
  if (op == OP_PREMUL) NCCL_OK(ncclRedOpDestroy(rop, comm));
  if (rank == root) {
    char what[128];
    snprintf(what, sizeof what, "reduce %s %s root=%d n=%d count=%zu", kOpNames[op],
             inplace ? "in-place" : "out-of-place", root, n, count);
    g_reported = 0;
    for (size_t j = 0; j < count; ++j) check_elem(what, T, recv + j * es, expected(op, T, j, n), j);
  }
  free(send);
  if (!inplace) free(recv);
}

static void test_reduce_scatter(ncclComm_t comm, int rank, int n, const type_t* T, int op,
                                int inplace, size_t count) {
  size_t es = T->size;
  unsigned char* send = alloc_bytes(n * count * es);
  unsigned char* recv = inplace ? send + rank * count * es : alloc_bytes(count * es);
  for (size_t j = 0; j < n * count; ++j) encode(T, in_value(op, T, rank, j), send + j * es);
  ncclRedOp_t rop = make_op(op, T, comm);
  NCCL_OK(ncclReduceScatter(send, recv, count, T->t, rop, comm, NULL));
  if (op == OP_PREMUL) NCCL_OK(ncclRedOpDestroy(rop, comm));
  char what[128];
  snprintf(what, sizeof what, "reducescatter %s %s n=%d count=%zu", kOpNames[op],
           inplace ? "in-place" : "out-of-place", n, count);
  g_reported = 0;
  for (size_t i = 0; i < count; ++i)
    check_elem(what, T, recv + i * es, expected(op, T, rank * count + i, n), i);
  free(send);
  if (!inplace) free(recv);
}

/* ------------------------------------------------------------------ data movement */

static void test_allgather(ncclComm_t comm, int rank, int n, const type_t* T, int inplace,
                           size_t count) {
  size_t es = T->size;
  unsigned char* recv = alloc_bytes(n * count * es);
  unsigned char* send = inplace ? recv + rank * count * es : alloc_bytes(count * es);
  for (size_t i = 0; i < count; ++i) encode(T, g_value(rank, i), send + i * es);
  NCCL_OK(ncclAllGather(send, recv, count, T->t, comm, NULL));
  char what[128];
  snprintf(what, sizeof what, "allgather %s n=%d count=%zu", inplace ? "in-place" : "out-of-place",
           n, count);
  g_reported = 0;
  for (int q = 0; q < n; ++q)
    for (size_t i = 0; i < count; ++i)
      check_elem(what, T, recv + (q * count + i) * es, g_value(q, i), q * count + i);
  free(recv);
  if (!inplace) free(send);
}

static void test_broadcast(ncclComm_t comm, int rank, int n, const type_t* T, int inplace,
                           size_t count, int root) {
  size_t es = T->size;
  unsigned char* recv = alloc_bytes(count * es);
  unsigned char* send = inplace ? recv : alloc_bytes(count * es);
  if (rank == root)
    for (size_t i = 0; i < count; ++i) encode(T, g_value(root, i), send + i * es);
  if (inplace && count == 1) {
    NCCL_OK(ncclBcast(recv, count, T->t, root, comm, NULL)); /* the deprecated in-place form */
  } else {
    /* sendbuff is only read on the root: others may pass NULL. */
    const void* sb = (!inplace && rank != root && count > 1) ? NULL : send;
    NCCL_OK(ncclBroadcast(sb, recv, count, T->t, root, comm, NULL));
  }
  char what[128];
  snprintf(what, sizeof what, "broadcast %s root=%d n=%d count=%zu",
           inplace ? "in-place" : "out-of-place", root, n, count);
  g_reported = 0;
  for (size_t i = 0; i < count; ++i) check_elem(what, T, recv + i * es, g_value(root, i), i);
  free(recv);
  if (!inplace) free(send);
}

static void test_alltoall(ncclComm_t comm, int rank, int n, const type_t* T, int inplace,
                          size_t count) {
  size_t es = T->size;
  unsigned char* send = alloc_bytes(n * count * es);
  unsigned char* recv = inplace ? send : alloc_bytes(n * count * es);
  for (int p = 0; p < n; ++p)
    for (size_t i = 0; i < count; ++i) encode(T, h_value(rank, p, i), send + (p * count + i) * es);
  NCCL_OK(ncclAlltoAll(send, recv, count, T->t, comm, NULL));
  char what[128];
  snprintf(what, sizeof what, "alltoall %s n=%d count=%zu", inplace ? "in-place" : "out-of-place",
           n, count);
  g_reported = 0;
  for (int q = 0; q < n; ++q)
    for (size_t i = 0; i < count; ++i)
      check_elem(what, T, recv + (q * count + i) * es, h_value(q, rank, i), q * count + i);
  free(send);
  if (!inplace) free(recv);
}

static void test_gather(ncclComm_t comm, int rank, int n, const type_t* T, int inplace,
                        size_t count, int root) {
  size_t es = T->size;
  unsigned char* recv = rank == root ? alloc_bytes(n * count * es) : NULL;
  unsigned char* send =
      (inplace && rank == root) ? recv + root * count * es : alloc_bytes(count * es);
  for (size_t i = 0; i < count; ++i) encode(T, g_value(rank, i), send + i * es);
  NCCL_OK(ncclGather(send, recv, count, T->t, root, comm, NULL));
  if (rank == root) {
    char what[128];
    snprintf(what, sizeof what, "gather %s root=%d n=%d count=%zu",
             inplace ? "in-place" : "out-of-place", root, n, count);
    g_reported = 0;
    for (int q = 0; q < n; ++q)
      for (size_t i = 0; i < count; ++i)
        check_elem(what, T, recv + (q * count + i) * es, g_value(q, i), q * count + i);
  }
  if (!(inplace && rank == root)) free(send);
  free(recv);
}

static void test_scatter(ncclComm_t comm, int rank, int n, const type_t* T, int inplace,
                         size_t count, int root) {
  size_t es = T->size;
  unsigned char* send = rank == root ? alloc_bytes(n * count * es) : NULL;
  unsigned char* recv =
      (inplace && rank == root) ? send + root * count * es : alloc_bytes(count * es);
  if (rank == root)
    for (int p = 0; p < n; ++p)
      for (size_t i = 0; i < count; ++i)
        encode(T, h_value(root, p, i), send + (p * count + i) * es);
  NCCL_OK(ncclScatter(send, recv, count, T->t, root, comm, NULL));
  char what[128];
  snprintf(what, sizeof what, "scatter %s root=%d n=%d count=%zu",
           inplace ? "in-place" : "out-of-place", root, n, count);
  g_reported = 0;
  for (size_t i = 0; i < count; ++i) check_elem(what, T, recv + i * es, h_value(root, rank, i), i);
  if (!(inplace && rank == root)) free(recv);
  free(send);
}

/* A group of sends and receives that only completes fused: a ring (send to the next rank,
 * receive from the previous), a message to self, and one to the rank two ahead. */
static void test_sendrecv(ncclComm_t comm, int rank, int n, const type_t* T, size_t count) {
  size_t es = T->size;
  int next = (rank + 1) % n, prev = (rank - 1 + n) % n;
  int far = (rank + 2) % n, farsrc = (rank - 2 + n) % n;
  int use_far = n > 3; /* distinct from next/prev and self */
  unsigned char *s1 = alloc_bytes(count * es), *s2 = alloc_bytes(count * es),
                *s3 = alloc_bytes(count * es);
  unsigned char *r1 = alloc_bytes(count * es), *r2 = alloc_bytes(count * es),
                *r3 = alloc_bytes(count * es);
  for (size_t i = 0; i < count; ++i) {
    encode(T, g_value(rank, i), s1 + i * es);
    encode(T, g_value(rank + 1, i), s2 + i * es);
    encode(T, g_value(rank + 2, i), s3 + i * es);
  }
  NCCL_OK(ncclGroupStart());
  if (n > 1) NCCL_OK(ncclSend(s1, count, T->t, next, comm, NULL));
  NCCL_OK(ncclSend(s2, count, T->t, rank, comm, NULL));
  if (use_far) NCCL_OK(ncclSend(s3, count, T->t, far, comm, NULL));
  if (n > 1) NCCL_OK(ncclRecv(r1, count, T->t, prev, comm, NULL));
  NCCL_OK(ncclRecv(r2, count, T->t, rank, comm, NULL));
  if (use_far) NCCL_OK(ncclRecv(r3, count, T->t, farsrc, comm, NULL));
  NCCL_OK(ncclGroupEnd());
  char what[128];
  snprintf(what, sizeof what, "sendrecv n=%d count=%zu", n, count);
  g_reported = 0;
  for (size_t i = 0; i < count; ++i) {
    if (n > 1) check_elem(what, T, r1 + i * es, g_value(prev, i), i);
    check_elem(what, T, r2 + i * es, g_value(rank + 1, i), i);
    if (use_far) check_elem(what, T, r3 + i * es, g_value(farsrc + 2, i), i);
  }
  free(s1), free(s2), free(s3), free(r1), free(r2), free(r3);
}

/* Every collective; `full`: every type x op x in/out-of-place x counts, else a sample. Averages
 * only where they are exact (1, 2 or 4 ranks). */
static void run_suite(ncclComm_t comm, int full) {
  int rank, n;
  NCCL_OK(ncclCommUserRank(comm, &rank));
  NCCL_OK(ncclCommCount(comm, &n));
  static const size_t kCounts[] = {1, 1031};
  for (int ti = 0; ti < NTYPES; ++ti) {
    const type_t* T = &kTypes[ti];
    if (!full && T->t != ncclFloat32 && T->t != ncclInt8 && T->t != ncclBfloat16) continue;
    for (int ci = 0; ci < 2; ++ci) {
      size_t count = kCounts[ci];
      if (!full && count == 1) continue;
      for (int op = 0; op < NOPS; ++op) {
        if (op == OP_AVG && n != 1 && n != 2 && n != 4) continue;
        if (!full && op != OP_SUM && op != OP_MAX && op != OP_AVG && op != OP_PREMUL) continue;
        for (int ip = 0; ip < 2; ++ip) {
          int root = (ti + op + ip) % n;
          test_allreduce(comm, rank, n, T, op, ip, count);
          test_reduce(comm, rank, n, T, op, ip, count, root);
          test_reduce_scatter(comm, rank, n, T, op, ip, count);
        }
      }
      for (int ip = 0; ip < 2; ++ip) {
        int root = (ti + ip + 1) % n;
        test_allgather(comm, rank, n, T, ip, count);
        test_broadcast(comm, rank, n, T, ip, count, root);
        test_alltoall(comm, rank, n, T, ip, count);
        test_gather(comm, rank, n, T, ip, count, root);
        test_scatter(comm, rank, n, T, ip, count, (root + 1) % n);
      }
      test_sendrecv(comm, rank, n, T, count);
    }
  }
  /* A size that spans several pipeline chunks. */
  test_allreduce(comm, rank, n, &kTypes[7], OP_SUM, 0, 300007);
  test_reduce_scatter(comm, rank, n, &kTypes[7], OP_MAX, 1, 100003);
  test_allgather(comm, rank, n, &kTypes[7], 0, 100003);
}

/* count == 0 is a no-op everywhere (NULL buffers allowed). */
static void test_zero_counts(ncclComm_t comm) {
  float buf[4] = {1, 2, 3, 4};
  NCCL_OK(ncclAllReduce(buf, buf, 0, ncclFloat32, ncclSum, comm, NULL));
  NCCL_OK(ncclAllReduce(NULL, NULL, 0, ncclFloat32, ncclSum, comm, NULL));
  NCCL_OK(ncclReduce(buf, buf, 0, ncclFloat32, ncclMax, 0, comm, NULL));
  NCCL_OK(ncclBroadcast(buf, buf, 0, ncclFloat32, 0, comm, NULL));
  NCCL_OK(ncclAllGather(buf, buf, 0, ncclFloat32, comm, NULL));
  NCCL_OK(ncclReduceScatter(buf, buf, 0, ncclFloat32, ncclSum, comm, NULL));
  NCCL_OK(ncclAlltoAll(NULL, NULL, 0, ncclFloat32, comm, NULL));
  NCCL_OK(ncclGather(NULL, NULL, 0, ncclFloat32, 0, comm, NULL));
  NCCL_OK(ncclScatter(NULL, NULL, 0, ncclFloat32, 0, comm, NULL));
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclSend(NULL, 0, ncclFloat32, 0, comm, NULL));
  NCCL_OK(ncclRecv(NULL, 0, ncclFloat32, 0, comm, NULL));
  NCCL_OK(ncclGroupEnd());
  EXPECT(buf[0] == 1 && buf[3] == 4, "a zero-count call wrote the buffer");
}

/* ------------------------------------------------------------------ unique ids and inits */

/* Rank 0 creates a unique id and passes it to the others through their pipes. */
static void exchange_id(ncclUniqueId* id) {
  if (g_rank == 0) {
    NCCL_OK(ncclGetUniqueId(id));
    for (int k = 1; k < NRANKS; ++k)
      if (write(g_pipes[k][1], id, sizeof(*id)) != (ssize_t)sizeof(*id)) {
        report(__FILE__, __LINE__, "write to pipe: %s", strerror(errno));
        exit(1);
      }
  } else {
    size_t got = 0;
    while (got < sizeof(*id)) {
      ssize_t r = read(g_pipes[g_rank][0], (char*)id + got, sizeof(*id) - got);
      if (r <= 0) {
        report(__FILE__, __LINE__, "read from pipe: %s", r == 0 ? "EOF" : strerror(errno));
        exit(1);
      }
      got += (size_t)r;
    }
  }
}

/* Polls a non-blocking communicator until it is ready. */
static void wait_ready(ncclComm_t comm, const char* what) {
  ncclResult_t st = ncclInProgress;
  double t0 = now_s();
  while (now_s() - t0 < 120) {
    NCCL_OK(ncclCommGetAsyncError(comm, &st));
    if (st != ncclInProgress) break;
    usleep(1000);
  }
  EXPECT(st == ncclSuccess, "%s: async state %d: %s", what, (int)st, ncclGetLastError(comm));
}

static void quick_allreduce(ncclComm_t comm, const char* what) {
  int rank, n;
  NCCL_OK(ncclCommUserRank(comm, &rank));
  NCCL_OK(ncclCommCount(comm, &n));
  int32_t v[3] = {rank, 1, rank * rank};
  NCCL_OK(ncclAllReduce(v, v, 3, ncclInt32, ncclSum, comm, NULL));
  int32_t want0 = n * (n - 1) / 2, want2 = (n - 1) * n * (2 * n - 1) / 6;
  EXPECT(v[0] == want0 && v[1] == n && v[2] == want2, "%s: allreduce gave %d %d %d", what, v[0],
         v[1], v[2]);
}

/* The ncclConfig_t contract: blocking honoured, fields past the caller's size or newer than its
 * version ignored, a struct from a newer header accepted. */
static void test_configs(int rank) {
  ncclUniqueId id;
  ncclComm_t c;

  /* Non-blocking: init returns ncclInProgress, then becomes ready. */
  ncclConfig_t nb = NCCL_CONFIG_INITIALIZER;
  nb.blocking = 0;
  exchange_id(&id);
  ncclResult_t r = ncclCommInitRankConfig(&c, NRANKS, id, rank, &nb);
  EXPECT(r == ncclInProgress, "non-blocking init returned %d, expected ncclInProgress", (int)r);
  EXPECT(c != NULL, "non-blocking init must return the handle at once");
  wait_ready(c, "non-blocking init");
  quick_allreduce(c, "non-blocking comm");
  NCCL_OK(ncclCommDestroy(c));

  /* A 2.13 caller knows no `blocking` field: its value must be ignored (blocking init). */
  ncclConfig_t old = NCCL_CONFIG_INITIALIZER;
  old.version = NCCL_VERSION(2, 13, 0);
  old.blocking = 0;
  exchange_id(&id);
  r = ncclCommInitRankConfig(&c, NRANKS, id, rank, &old);
  EXPECT(r == ncclSuccess, "init with a 2.13 config returned %d (blocking must be ignored)",
         (int)r);
  if (r == ncclInProgress) wait_ready(c, "2.13 config");
  quick_allreduce(c, "2.13 config");
  NCCL_OK(ncclCommDestroy(c));

  /* A smaller struct (an older header, up to netName): the bytes after it are garbage that
   * would be rejected if read. */
  union {
    ncclConfig_t cfg;
    unsigned char bytes[sizeof(ncclConfig_t) + 64];
  } small;
  ncclConfig_t init = NCCL_CONFIG_INITIALIZER;
  memset(small.bytes, 0x7f, sizeof(small.bytes));
  memcpy(small.bytes, &init, offsetof(ncclConfig_t, splitShare));
  small.cfg.size = offsetof(ncclConfig_t, splitShare);
  small.cfg.version = NCCL_VERSION(2, 17, 0);
  small.cfg.blocking = 1;
  exchange_id(&id);
  NCCL_OK(ncclCommInitRankConfig(&c, NRANKS, id, rank, &small.cfg));
  quick_allreduce(c, "small config");
  NCCL_OK(ncclCommDestroy(c));

  /* A larger struct (a newer header): only our part is read. */
  struct {
    ncclConfig_t cfg;
    int future[16];
  } big;
  memset(&big, 0x7f, sizeof(big));
  big.cfg = init;
  big.cfg.size = sizeof(big);
  big.cfg.version = NCCL_VERSION(2, 30, 0);
  big.cfg.blocking = 1;
  exchange_id(&id);
  NCCL_OK(ncclCommInitRankConfig(&c, NRANKS, id, rank, &big.cfg));
  quick_allreduce(c, "big config");
  NCCL_OK(ncclCommFinalize(c));
  NCCL_OK(ncclCommDestroy(c));

  /* ncclCommInitRankScalable with two ids (the same list on every rank). */
  ncclUniqueId ids[2];
  exchange_id(&ids[0]);
  ids[1] = ids[0];
  NCCL_OK(ncclCommInitRankScalable(&c, NRANKS, rank, 2, ids, NULL));
  quick_allreduce(c, "scalable init");
  NCCL_OK(ncclCommDestroy(c));
}

/* One thread initialises every rank of a communicator: ncclCommInitAll, and explicit
 * ncclCommInitRank calls inside a group; then collectives and a send/recv ring over all of
 * them from the same thread, in groups. */
static void test_single_thread_ranks(int nlocal, int use_init_all) {
  ncclComm_t comms[4];
  if (use_init_all) {
    NCCL_OK(ncclCommInitAll(comms, nlocal, NULL));
  } else {
    ncclUniqueId id;
    NCCL_OK(ncclGetUniqueId(&id));
    NCCL_OK(ncclGroupStart());
    for (int i = 0; i < nlocal; ++i) NCCL_OK(ncclCommInitRank(&comms[i], nlocal, id, i));
    NCCL_OK(ncclGroupEnd());
  }
  float in[4][257], out[4][257];
  for (int i = 0; i < nlocal; ++i) {
    int r, n;
    NCCL_OK(ncclCommUserRank(comms[i], &r));
    NCCL_OK(ncclCommCount(comms[i], &n));
    EXPECT(r == i && n == nlocal, "local comm %d is rank %d of %d", i, r, n);
    for (int j = 0; j < 257; ++j) in[i][j] = (float)(i + j % 5);
  }
  NCCL_OK(ncclGroupStart());
  for (int i = 0; i < nlocal; ++i)
    NCCL_OK(ncclAllReduce(in[i], out[i], 257, ncclFloat32, ncclSum, comms[i], NULL));
  NCCL_OK(ncclGroupEnd());
  for (int i = 0; i < nlocal; ++i)
    for (int j = 0; j < 257; ++j) {
      float want = 0;
      for (int q = 0; q < nlocal; ++q) want += (float)(q + j % 5);
      if (out[i][j] != want) {
        report(__FILE__, __LINE__, "single-thread allreduce comm %d [%d] = %g, want %g", i, j,
               out[i][j], want);
        break;
      }
    }
  NCCL_OK(ncclGroupStart());
  for (int i = 0; i < nlocal; ++i) {
    NCCL_OK(ncclSend(in[i], 257, ncclFloat32, (i + 1) % nlocal, comms[i], NULL));
    NCCL_OK(ncclRecv(out[i], 257, ncclFloat32, (i - 1 + nlocal) % nlocal, comms[i], NULL));
  }
  NCCL_OK(ncclGroupEnd());
  for (int i = 0; i < nlocal; ++i)
    EXPECT(memcmp(out[i], in[(i - 1 + nlocal) % nlocal], sizeof(out[i])) == 0,
           "single-thread ring: comm %d got the wrong data", i);
  for (int i = 0; i < nlocal; ++i) NCCL_OK(ncclCommDestroy(comms[i]));
}

/* ------------------------------------------------------------------ errors */

static void test_errors(ncclComm_t comm, int rank) {
  float buf[8] = {0};
  ncclComm_t c = NULL;
  ncclUniqueId id;
  memset(&id, 0, sizeof(id));
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;

  for (int code = 0; code <= ncclNumResults; ++code) {
    const char* s = ncclGetErrorString((ncclResult_t)code);
    EXPECT(s && *s, "ncclGetErrorString(%d) is empty", code);
  }

  EXPECT_ERR(ncclInvalidArgument, "uniqueId", ncclGetUniqueId(NULL));
  EXPECT_ERR(ncclInvalidArgument, "comm", ncclCommInitRank(NULL, NRANKS, id, 0));
  EXPECT_ERR(ncclInvalidArgument, "rank", ncclCommInitRank(&c, NRANKS, id, NRANKS));
  EXPECT_ERR(ncclInvalidArgument, "rank", ncclCommInitRank(&c, NRANKS, id, -1));
  EXPECT_ERR(ncclInvalidArgument, "nranks", ncclCommInitRank(&c, 0, id, 0));
  cfg.magic = 0x12345678;
  EXPECT_ERR(ncclInvalidArgument, "NCCL_CONFIG_INITIALIZER",
             ncclCommInitRankConfig(&c, NRANKS, id, 0, &cfg));
  cfg.magic = 0xcafebeef;
  cfg.blocking = 7;
  EXPECT_ERR(ncclInvalidArgument, "blocking", ncclCommInitRankConfig(&c, NRANKS, id, 0, &cfg));
  cfg.blocking = NCCL_CONFIG_UNDEF_INT;
  cfg.minCTAs = 8;
  cfg.maxCTAs = 4;
  EXPECT_ERR(ncclInvalidArgument, "CTAs", ncclCommInitRankConfig(&c, NRANKS, id, 0, &cfg));
  EXPECT_ERR(ncclInvalidArgument, "comms", ncclCommInitAll(NULL, 2, NULL));
  EXPECT_ERR(ncclInvalidArgument, "ndev", ncclCommInitAll(&c, -1, NULL));
  EXPECT_ERR(ncclInvalidArgument, "nId", ncclCommInitRankScalable(&c, NRANKS, 0, 0, &id, NULL));

  EXPECT_ERR(ncclInvalidArgument, "datatype",
             ncclAllReduce(buf, buf, 8, (ncclDataType_t)12, ncclSum, comm, NULL));
  EXPECT_ERR(ncclInvalidArgument, "op",
             ncclAllReduce(buf, buf, 8, ncclFloat32, (ncclRedOp_t)-1, comm, NULL));
  EXPECT_ERR(ncclInvalidArgument, NULL,
             ncclAllReduce(buf, buf, 8, ncclFloat32, (ncclRedOp_t)77, comm, NULL));
  EXPECT_ERR(ncclInvalidArgument, "comm",
             ncclAllReduce(buf, buf, 8, ncclFloat32, ncclSum, NULL, NULL));
  EXPECT_ERR(ncclInvalidArgument, "sendbuff",
             ncclAllReduce(NULL, buf, 8, ncclFloat32, ncclSum, comm, NULL));
  EXPECT_ERR(ncclInvalidArgument, "recvbuff", ncclAllGather(buf, NULL, 2, ncclFloat32, comm, NULL));
  EXPECT_ERR(ncclInvalidArgument, "root",
             ncclBroadcast(buf, buf, 8, ncclFloat32, NRANKS, comm, NULL));
  EXPECT_ERR(ncclInvalidArgument, "root",
             ncclReduce(buf, buf, 8, ncclFloat32, ncclSum, -1, comm, NULL));
  EXPECT_ERR(ncclInvalidArgument, "root", ncclGather(buf, buf, 1, ncclFloat32, 9, comm, NULL));
  EXPECT_ERR(ncclInvalidArgument, "root", ncclScatter(buf, buf, 1, ncclFloat32, -2, comm, NULL));
  EXPECT_ERR(ncclInvalidArgument, "peer", ncclSend(buf, 8, ncclFloat32, NRANKS, comm, NULL));
  EXPECT_ERR(ncclInvalidArgument, "peer", ncclRecv(buf, 8, ncclFloat32, -1, comm, NULL));
  EXPECT_ERR(ncclInvalidArgument, "datatype", ncclSend(buf, 8, (ncclDataType_t)-3, 0, comm, NULL));
  EXPECT_ERR(ncclInvalidUsage, "group", ncclSend(buf, 8, ncclFloat32, rank, comm, NULL));
  EXPECT_ERR(ncclInvalidArgument, "count", ncclCommCount(comm, NULL));
  EXPECT_ERR(ncclInvalidArgument, "comm", ncclCommUserRank(NULL, (int*)buf));
  EXPECT_ERR(ncclInvalidArgument, "device", ncclCommCuDevice(comm, NULL));
  EXPECT_ERR(ncclInvalidArgument, "asyncError", ncclCommGetAsyncError(comm, NULL));
  EXPECT_ERR(ncclInvalidArgument, "built-in", ncclRedOpDestroy(ncclSum, comm));
  EXPECT_ERR(ncclInvalidArgument, NULL, ncclRedOpDestroy((ncclRedOp_t)1234, comm));
  ncclRedOp_t op;
  EXPECT_ERR(ncclInvalidArgument, "scalar",
             ncclRedOpCreatePreMulSum(&op, NULL, ncclFloat32, ncclScalarHostImmediate, comm));
  EXPECT_ERR(ncclInvalidArgument, "residence",
             ncclRedOpCreatePreMulSum(&op, buf, ncclFloat32, (ncclScalarResidence_t)5, comm));
  EXPECT_ERR(ncclInvalidArgument, "datatype",
             ncclRedOpCreatePreMulSum(&op, buf, (ncclDataType_t)40, ncclScalarHostImmediate, comm));
  /* An operator of one type used with another. */
  NCCL_OK(ncclRedOpCreatePreMulSum(&op, buf, ncclFloat64, ncclScalarHostImmediate, comm));
  EXPECT_ERR(ncclInvalidArgument, NULL, ncclAllReduce(buf, buf, 2, ncclFloat32, op, comm, NULL));
  NCCL_OK(ncclRedOpDestroy(op, comm));
  EXPECT_ERR(ncclInvalidArgument, NULL, ncclRedOpDestroy(op, comm)); /* twice */

  EXPECT_ERR(ncclInvalidUsage, "ncclGroupStart", ncclGroupEnd());
  EXPECT_ERR(ncclInvalidArgument, "simInfo", ncclGroupSimulateEnd(NULL));
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  EXPECT_ERR(ncclInvalidUsage, "ncclGroupStart", ncclGroupSimulateEnd(&sim));
  sim.magic = 1;
  EXPECT_ERR(ncclInvalidArgument, "NCCL_SIM_INFO_INITIALIZER", ncclGroupSimulateEnd(&sim));
  ncclSimInfo_t sim2 = NCCL_SIM_INFO_INITIALIZER;
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclGroupSimulateEnd(&sim2)); /* an empty group */
  EXPECT(sim2.estimatedTime >= 0, "estimatedTime %g", (double)sim2.estimatedTime);

  EXPECT_ERR(ncclInvalidArgument, "color", ncclCommSplit(comm, -5, 0, &c, NULL));
  EXPECT_ERR(ncclInvalidArgument, "newcomm", ncclCommSplit(comm, 0, 0, NULL, NULL));
  int excl = 0;
  EXPECT_ERR(ncclInvalidArgument, "shrinkFlags", ncclCommShrink(comm, &excl, 1, &c, NULL, 5));
  EXPECT_ERR(ncclInvalidArgument, "excludeRanksCount",
             ncclCommShrink(comm, &excl, -1, &c, NULL, 0));
  excl = NRANKS;
  EXPECT_ERR(ncclInvalidArgument, "rank", ncclCommShrink(comm, &excl, 1, &c, NULL, 0));
  EXPECT_ERR(ncclInvalidArgument, "revokeFlags", ncclCommRevoke(comm, 3));

  void* p = NULL;
  EXPECT_ERR(ncclInvalidArgument, "ptr", ncclMemAlloc(NULL, 16));
  EXPECT_ERR(ncclInvalidArgument, "size", ncclMemAlloc(&p, 0));
  EXPECT_ERR(ncclInvalidArgument, "handle", ncclCommRegister(comm, buf, sizeof(buf), NULL));
  EXPECT_ERR(ncclInvalidArgument, "buff", ncclCommRegister(comm, NULL, 16, &p));
  EXPECT_ERR(ncclInvalidArgument, "handle", ncclCommDeregister(comm, buf)); /* never registered */
  ncclWindow_t win;
  EXPECT_ERR(ncclInvalidArgument, "winFlags",
             ncclCommWindowRegister(comm, buf, sizeof(buf), &win, 0x40));

  EXPECT_ERR(ncclInvalidUsage, "device API", ncclDevCommCreate(comm, NULL, NULL));
  struct abi_team team = {1, 0, 1};
  EXPECT_ERR(ncclInvalidUsage, "device API", ncclLsaBarrierCreateRequirement(team, 1, NULL, NULL));

  /* A NULL communicator is fine to destroy or abort, as with NCCL. */
  NCCL_OK(ncclCommDestroy(NULL));
  NCCL_OK(ncclCommAbort(NULL));
  ncclResult_t st;
  NCCL_OK(ncclCommGetAsyncError(comm, &st));
  EXPECT(st == ncclSuccess, "healthy communicator reports async error %d", (int)st);
}

/* Two ranks disagreeing on a collective (count): detected on both sides as invalid usage,
 * never a hang. (Pairs: with more ranks braid reports the mismatch on the ranks that see it and
 * the others fail at their deadline.) */
static void test_mismatch(ncclComm_t comm, int rank) {
  ncclComm_t pair;
  NCCL_OK(ncclCommSplit(comm, rank / 2, rank, &pair, NULL));
  int prank;
  NCCL_OK(ncclCommUserRank(pair, &prank));
  float buf[16] = {0};
  size_t count = prank == 0 ? 7 : 8;
  double t0 = now_s();
  ncclResult_t r = ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, pair, NULL);
  EXPECT(r == ncclInvalidUsage, "mismatched allreduce returned %d (%s), expected ncclInvalidUsage",
         (int)r, ncclGetLastError(NULL));
  EXPECT(*ncclGetLastError(NULL), "mismatch without a message");
  EXPECT(now_s() - t0 < 30, "mismatch took %.1f s to detect", now_s() - t0);
  NCCL_OK(ncclCommAbort(pair));
}

/* Whether thread `tid` of this process sleeps in a system call: /proc/<tid>/syscall gives the
 * call's number then, "running" otherwise. */
static int blocked_in_syscall(pid_t tid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/syscall", (int)tid);
  FILE* f = fopen(path, "r");
  if (!f) return 0;
  long nr = -1;
  int got = fscanf(f, "%ld", &nr);
  fclose(f);
  return got == 1 && nr >= 0;
}

/* ncclCommAbort from another thread ends a receive that would never complete. */
typedef struct {
  ncclComm_t comm;
  pid_t receiver;       /* the thread whose receive the abort must end */
  atomic_int receiving; /* set by it just before it calls ncclRecv */
  atomic_int returned;  /* set by it once ncclRecv returned */
  int aborted_while_waiting;
} abort_arg_t;

/* Aborts once the receive waits: the receiver has entered ncclRecv and sleeps in a system call
 * (looked at every millisecond, which paces the look and orders nothing; bounded). */
static void* abort_when_waiting(void* p) {
  abort_arg_t* a = (abort_arg_t*)p;
  double t0 = now_s();
  int waiting = 0;
  while (!(waiting = atomic_load(&a->receiving) && blocked_in_syscall(a->receiver)) &&
         now_s() - t0 < 60)
    usleep(1000);
  a->aborted_while_waiting = waiting && !atomic_load(&a->returned);
  ncclResult_t r = ncclCommAbort(a->comm);
  if (r != ncclSuccess)
    report(__FILE__, __LINE__, "ncclCommAbort from a thread returned %d", (int)r);
  return NULL;
}

static void test_abort(ncclComm_t comm, int rank) {
  ncclComm_t sub;
  NCCL_OK(ncclCommSplit(comm, 0, rank, &sub, NULL));
  if (rank == 0) {
    pthread_t th;
    abort_arg_t arg = {sub, (pid_t)syscall(SYS_gettid), 0, 0, 0};
    pthread_create(&th, NULL, abort_when_waiting, &arg);
    float buf[64];
    double t0 = now_s();
    atomic_store(&arg.receiving, 1);
    ncclResult_t r = ncclRecv(buf, 64, ncclFloat32, 1, sub, NULL); /* rank 1 never sends */
    double dt = now_s() - t0;
    atomic_store(&arg.returned, 1);
    pthread_join(th, NULL);
    EXPECT(arg.aborted_while_waiting, "the receive did not wait for the abort");
    EXPECT(r != ncclSuccess, "a receive on an aborted communicator succeeded");
    EXPECT(*ncclGetLastError(NULL), "aborted receive without a message");
    EXPECT(dt < 10, "abort took %.1f s to end the receive", dt);
  } else {
    NCCL_OK(ncclCommAbort(sub));
  }
}

/* ------------------------------------------------------------------ one rank */

static int rank_main(int rank) {
  g_rank = rank;
  alarm(GUARD_SECONDS);
  ncclUniqueId id;
  ncclComm_t comm;
  exchange_id(&id);
  NCCL_OK(ncclCommInitRank(&comm, NRANKS, id, rank));
  int r = -1, n = -1;
  NCCL_OK(ncclCommUserRank(comm, &r));
  NCCL_OK(ncclCommCount(comm, &n));
  EXPECT(r == rank && n == NRANKS, "main comm is rank %d of %d", r, n);
  int dev = -1;
  NCCL_OK(ncclCommCuDevice(comm, &dev));
  EXPECT(dev >= 0, "cuda device %d", dev);

  /* Environment: NCCL names braid knows under its own names (set in main). */
  const char* hca = getenv("BRAID_IB_HCA");
  EXPECT(hca && strcmp(hca, "mlx5_test") == 0, "NCCL_IB_HCA was not mapped (BRAID_IB_HCA=%s)",
         hca ? hca : "(unset)");
  if (g_nccl_env) {
    const char* algo = getenv("BRAID_ALGO");
    const char* nch = getenv("BRAID_NCHANNELS");
    EXPECT(algo && strcmp(algo, "allreduce:tree") == 0, "NCCL_ALGO became BRAID_ALGO=%s",
           algo ? algo : "(unset)");
    EXPECT(nch && strcmp(nch, "8") == 0,
           "NCCL_NSOCKS_PERTHREAD x NCCL_SOCKET_NTHREADS became "
           "BRAID_NCHANNELS=%s",
           nch ? nch : "(unset)");
  }

  test_errors(comm, rank);

  /* One process hosting several ranks, from one thread. */
  if (rank == 0) test_single_thread_ranks(3, 1);
  if (rank == 1) test_single_thread_ranks(2, 0);

  test_zero_counts(comm);
  run_suite(comm, 1);
  if (g_fail) return 1;

  /* Memory and registration: buffers from ncclMemAlloc work in calls; registration is a handle. */
  void* mem = NULL;
  NCCL_OK(ncclMemAlloc(&mem, 4096 * 3 + 5));
  EXPECT(mem && ((uintptr_t)mem % 4096) == 0, "ncclMemAlloc returned %p", mem);
  void* handle = NULL;
  NCCL_OK(ncclCommRegister(comm, mem, 4096, &handle));
  EXPECT(handle != NULL, "ncclCommRegister gave no handle");
  ncclWindow_t win = NULL;
  NCCL_OK(ncclCommWindowRegister(comm, mem, 4096, &win, NCCL_WIN_COLL_SYMMETRIC));
  ((double*)mem)[0] = rank;
  NCCL_OK(ncclAllReduce(mem, mem, 1, ncclFloat64, ncclMax, comm, NULL));
  EXPECT(((double*)mem)[0] == NRANKS - 1, "allreduce on ncclMemAlloc memory gave %g",
         ((double*)mem)[0]);
  NCCL_OK(ncclCommWindowDeregister(comm, win));
  NCCL_OK(ncclCommDeregister(comm, handle));
  EXPECT_ERR(ncclInvalidArgument, "handle", ncclCommDeregister(comm, handle)); /* twice */
  NCCL_OK(ncclMemFree(mem));

  test_configs(rank);

  /* Splits: two halves ordered by key (reversed), one without rank 3, singletons, and a
   * non-blocking one. */
  ncclComm_t half, three, single, nbsplit;
  NCCL_OK(ncclCommSplit(comm, rank % 2, -rank, &half, NULL));
  NCCL_OK(ncclCommUserRank(half, &r));
  NCCL_OK(ncclCommCount(half, &n));
  EXPECT(n == 2 && r == (rank < 2 ? 1 : 0), "split by parity: rank %d of %d", r, n);
  run_suite(half, 0);
  NCCL_OK(ncclCommSplit(comm, rank == 3 ? NCCL_SPLIT_NOCOLOR : 7, rank, &three, NULL));
  if (rank == 3) {
    EXPECT(three == NULL, "NCCL_SPLIT_NOCOLOR must give a NULL communicator");
  } else {
    NCCL_OK(ncclCommCount(three, &n));
    EXPECT(n == 3, "split without rank 3 has %d ranks", n);
    run_suite(three, 0);
  }
  NCCL_OK(ncclCommSplit(comm, rank, 0, &single, NULL));
  run_suite(single, 0);
  ncclConfig_t nbcfg = NCCL_CONFIG_INITIALIZER;
  nbcfg.blocking = 0;
  ncclResult_t sr = ncclCommSplit(comm, 0, rank, &nbsplit, &nbcfg);
  EXPECT(sr == ncclSuccess || sr == ncclInProgress, "non-blocking split returned %d", (int)sr);
  wait_ready(nbsplit, "non-blocking split");
  quick_allreduce(nbsplit, "non-blocking split");
  NCCL_OK(ncclCommDestroy(nbsplit));
  NCCL_OK(ncclCommDestroy(half));
  NCCL_OK(ncclCommDestroy(three));
  NCCL_OK(ncclCommDestroy(single));
  if (g_fail) return 1;

  test_mismatch(comm, rank);
  test_abort(comm, rank);

  /* Shrink: ranks 0..2 leave rank 3 out; rank 3 waits for them in the final allreduce. */
  if (rank != 3) {
    int excl = 3;
    ncclComm_t shrunk;
    NCCL_OK(ncclCommShrink(comm, &excl, 1, &shrunk, NULL, NCCL_SHRINK_DEFAULT));
    NCCL_OK(ncclCommUserRank(shrunk, &r));
    NCCL_OK(ncclCommCount(shrunk, &n));
    EXPECT(n == 3 && r == rank, "shrunk comm: rank %d of %d", r, n);
    run_suite(shrunk, 0);
    NCCL_OK(ncclCommDestroy(shrunk));
  }
  quick_allreduce(comm, "main comm after shrink");
  /* Revoke: later operations fail at once (with the revoke named), destroy still works. */
  NCCL_OK(ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT));
  int32_t after = 1;
  EXPECT(ncclAllReduce(&after, &after, 1, ncclInt32, ncclSum, comm, NULL) != ncclSuccess,
         "an all-reduce on a revoked communicator succeeded");
  EXPECT(strstr(ncclGetLastError(comm), "revoked") != NULL, "last error: %s",
         ncclGetLastError(comm));
  NCCL_OK(ncclCommDestroy(comm));
  return g_fail ? 1 : 0;
}

/* ------------------------------------------------------------------ the parent */

static pid_t g_children[NRANKS];

static void kill_children(void) {
  for (int k = 0; k < NRANKS; ++k)
    if (g_children[k] > 0) kill(g_children[k], SIGKILL);
}

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "abi_test: wall-clock guard expired: a rank hung\n";
  if (write(2, msg, sizeof(msg) - 1) < 0) { /* nothing else to do */
  }
  kill_children();
  _exit(2);
}

/* The library that answers the NCCL symbols must be braid's, from the build tree. */
static int check_library(void) {
  void* sym = dlsym(RTLD_DEFAULT, "ncclGetVersion");
  Dl_info info;
  if (!sym || !dladdr(sym, &info) || !info.dli_fname) {
    report(__FILE__, __LINE__, "cannot locate ncclGetVersion");
    return 1;
  }
  char real_got[4096], real_want[4096];
  if (!realpath(info.dli_fname, real_got))
    snprintf(real_got, sizeof real_got, "%s", info.dli_fname);
  if (!realpath(BRAID_NCCL_LIBRARY, real_want))
    snprintf(real_want, sizeof real_want, "%s", BRAID_NCCL_LIBRARY);
  if (strcmp(real_got, real_want) != 0) {
    report(__FILE__, __LINE__, "NCCL symbols come from %s, expected braid's %s", real_got,
           real_want);
    return 1;
  }
  int v = 0;
  NCCL_OK(ncclGetVersion(&v));
  EXPECT(v == NCCL_VERSION_CODE, "ncclGetVersion gave %d, header says %d", v, NCCL_VERSION_CODE);
  /* braid's internals stay hidden: only the NCCL API is exported. */
  EXPECT(dlsym(RTLD_DEFAULT, "braidAllReduce") == NULL, "braid's own API leaks from libnccl");
  /* The p-twins exist and the plain names resolve to them. */
  EXPECT(dlsym(RTLD_DEFAULT, "pncclAllReduce") == dlsym(RTLD_DEFAULT, "ncclAllReduce"),
         "ncclAllReduce is not an alias of pncclAllReduce");
  return g_fail;
}

int main(int argc, char** argv) {
  g_nccl_env = argc > 1 && strcmp(argv[1], "--nccl-env") == 0;
  if (check_library()) return 1;
  /* Deadlines well below the guard so a hang shows as a failure with a message. */
  setenv("BRAID_TIMEOUT", "60", 0);
  setenv("NCCL_IB_HCA", "mlx5_test", 1);
  /* Common on clusters; NCCL-only algorithms must not make braid's init fail. */
  setenv("NCCL_ALGO", "^NVLS", 0);
  if (g_nccl_env) {
    unsetenv("BRAID_ALGO");
    unsetenv("BRAID_NCHANNELS");
    setenv("NCCL_ALGO", "allreduce:Tree,NVLS;allgather:^ring;PAT", 1);
    setenv("NCCL_NSOCKS_PERTHREAD", "2", 1);
    setenv("NCCL_SOCKET_NTHREADS", "4", 1);
    setenv("NCCL_PROTO", "LL128", 1);
  }
  for (int k = 0; k < NRANKS; ++k)
    if (pipe(g_pipes[k]) != 0) {
      perror("pipe");
      return 1;
    }
  signal(SIGALRM, on_alarm);
  alarm(GUARD_SECONDS + 10);
  fflush(NULL);
  for (int k = 0; k < NRANKS; ++k) {
    pid_t pid = fork();
    if (pid < 0) {
      perror("fork");
      kill_children();
      return 1;
    }
    if (pid == 0) {
      signal(SIGALRM, SIG_DFL);
      int rc = rank_main(k);
      fflush(NULL);
      _exit(rc);
    }
    g_children[k] = pid;
  }
  int failed = 0;
  for (int done = 0; done < NRANKS; ++done) {
    int status;
    pid_t pid = wait(&status);
    if (pid < 0) break;
    int k = 0;
    while (k < NRANKS && g_children[k] != pid) ++k;
    if (k < NRANKS) g_children[k] = 0;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      if (WIFSIGNALED(status))
        fprintf(stderr, "abi_test: rank %d killed by signal %d\n", k, WTERMSIG(status));
      else
        fprintf(stderr, "abi_test: rank %d failed (exit %d)\n", k, WEXITSTATUS(status));
      if (!failed) kill_children(); /* the others would wait for it until their deadline */
      failed = 1;
    }
  }
  if (!failed)
    printf("abi_test: all %d ranks passed (%s header)\n", NRANKS,
           EXPECT_BRAID_HEADER ? "braid's" : "NVIDIA's");
  return failed;
}
