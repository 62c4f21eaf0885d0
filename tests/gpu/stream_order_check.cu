// Issue 39's stream-order check on a real GPU, against braid's libnccl.so.2: ranks of one job on
// one GPU (forked processes), each with its own stream; a kernel writes the send buffer (late by a
// per-repetition random spin, so that a collective that did not wait for the stream would read
// stale data), ncclAllReduce on the same stream, a kernel checks the result (so that a stream
// that did not wait for the collective would see a stale one); no host synchronisation in between.
// Bit-exact: the values are small integers, every fp32 sum of them is exact.
//
// The emulated device runs the same protocol in CI (tests/multirank/device_stream_test.cc); this is
// what only a GPU can check: cuStreamWriteValue32/WaitValue32 on host-mapped flags, the staging
// copies, the CUDA context on the agent's thread.
//
// Build (nvcc alone, against a braid build's libnccl.so.2; no CUDA header is needed by nccl.h):
//   nvcc -O2 -arch=native -Iinclude tests/gpu/stream_order_check.cu -o stream_order_check \
//        -L<build>/src/nccl -lnccl -Xlinker -rpath,<build>/src/nccl
// Run: stream_order_check [reps] (default 1000), at 2 and 4 ranks. Exit 0 all correct, 1 a wrong
// result or an error, 77 no GPU.
#include <cuda_runtime.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "nccl.h"

namespace {

__host__ __device__ unsigned Value(int rank, int rep, size_t i) {
  return (static_cast<unsigned>(rank + 1) * 7919u + static_cast<unsigned>(rep) * 31u +
          static_cast<unsigned>(i)) %
         65536u;
}

// Each block's first thread spins `delay` clocks before the block writes.
__global__ void WriteSend(float* send, size_t n, int rank, int rep, long long delay) {
  if (threadIdx.x == 0 && delay > 0) {
    const long long start = clock64();
    while (clock64() - start < delay) {
    }
  }
  __syncthreads();
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    send[i] = static_cast<float>(Value(rank, rep, i));
}

__global__ void CheckRecv(const float* recv, size_t n, int nranks, int rep, unsigned* wrong) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    float want = 0;
    for (int r = 0; r < nranks; ++r) want += static_cast<float>(Value(r, rep, i));
    if (__float_as_uint(recv[i]) != __float_as_uint(want)) {
      atomicAdd(wrong, 1u);
      return;
    }
  }
}

#define CUDA_OR_FAIL(expr)                                                             \
  do {                                                                                 \
    cudaError_t e_ = (expr);                                                           \
    if (e_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "[rank %d] %s: %s\n", rank, #expr, cudaGetErrorString(e_)); \
      return 1;                                                                        \
    }                                                                                  \
  } while (0)
#define NCCL_OR_FAIL(expr)                                                                 \
  do {                                                                                     \
    ncclResult_t r_ = (expr);                                                              \
    if (r_ != ncclSuccess) {                                                               \
      std::fprintf(stderr, "[rank %d] %s: %s (%s)\n", rank, #expr, ncclGetErrorString(r_), \
                   ncclGetLastError(nullptr));                                             \
      return 1;                                                                            \
    }                                                                                      \
  } while (0)

int Rank(int rank, int nranks, int reps, const ncclUniqueId& id) {
  CUDA_OR_FAIL(cudaSetDevice(0));
  CUDA_OR_FAIL(cudaFree(nullptr));  // the context (and libcuda) before the communicator
  ncclComm_t comm;
  NCCL_OR_FAIL(ncclCommInitRank(&comm, nranks, id, rank));
  const size_t counts[] = {1, 7, 1000, 4099, 1 << 20};
  const size_t max_n = 1 << 20;
  float *send, *recv;
  unsigned* wrong;
  CUDA_OR_FAIL(cudaMalloc(&send, max_n * sizeof(float)));
  CUDA_OR_FAIL(cudaMalloc(&recv, max_n * sizeof(float)));
  CUDA_OR_FAIL(cudaMalloc(&wrong, sizeof(unsigned)));
  CUDA_OR_FAIL(cudaMemset(wrong, 0, sizeof(unsigned)));
  // STREAM_ORDER_WINDOWS=1: both buffers as symmetric windows, so braid's all-reduce runs on the
  // device (CUDA IPC between the ranks' processes, the peer-reduce kernel) instead of staging.
  const char* windows_env = std::getenv("STREAM_ORDER_WINDOWS");
  const bool windows = windows_env && std::atoi(windows_env) == 1;
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
  ncclWindow_t wsend = nullptr, wrecv = nullptr;
  if (windows) {
    NCCL_OR_FAIL(
        ncclCommWindowRegister(comm, send, max_n * sizeof(float), &wsend, NCCL_WIN_COLL_SYMMETRIC));
    NCCL_OR_FAIL(
        ncclCommWindowRegister(comm, recv, max_n * sizeof(float), &wrecv, NCCL_WIN_COLL_SYMMETRIC));
  }
#else
  if (windows) {
    std::printf("stream_order_check: STREAM_ORDER_WINDOWS=1 needs an nccl.h >= 2.27\n");
    return 1;
  }
#endif
  cudaStream_t stream;
  CUDA_OR_FAIL(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  srand(1234 + rank);
  const auto t0 = std::chrono::steady_clock::now();
  for (int rep = 0; rep < reps; ++rep) {
    const size_t n = counts[rep % 5];
    const long long delay = rand() % 200000;  // up to ~0.1 ms of clocks
    WriteSend<<<64, 256, 0, stream>>>(send, n, rank, rep, delay);
    NCCL_OR_FAIL(ncclAllReduce(send, recv, n, ncclFloat32, ncclSum, comm, stream));
    CheckRecv<<<64, 256, 0, stream>>>(recv, n, nranks, rep, wrong);
  }
  CUDA_OR_FAIL(cudaStreamSynchronize(stream));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  unsigned bad = 0;
  CUDA_OR_FAIL(cudaMemcpy(&bad, wrong, sizeof(bad), cudaMemcpyDeviceToHost));
  ncclResult_t async = ncclSuccess;
  NCCL_OR_FAIL(ncclCommGetAsyncError(comm, &async));
  NCCL_OR_FAIL(async);
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
  if (windows) {
    NCCL_OR_FAIL(ncclCommWindowDeregister(comm, wsend));
    NCCL_OR_FAIL(ncclCommWindowDeregister(comm, wrecv));
  }
#endif
  NCCL_OR_FAIL(ncclCommDestroy(comm));
  std::printf("[rank %d/%d] %d stream-ordered all-reduces%s in %.3f s: %u wrong\n", rank, nranks,
              reps, windows ? " on windows" : "", s, bad);
  return bad == 0 ? 0 : 1;
}

// Forks the ranks from a process that has not touched CUDA (a CUDA context does not survive a
// fork); rank 0 makes the unique id and hands it to the others through pipes.
int Job(int nranks, int reps) {
  std::vector<int> fds(2 * nranks);
  for (int r = 1; r < nranks; ++r)
    if (pipe(&fds[2 * r]) != 0) return 1;
  std::fflush(stdout);
  std::vector<pid_t> pids;
  for (int rank = 0; rank < nranks; ++rank) {
    pid_t pid = fork();
    if (pid == 0) {
      alarm(120);  // wall-clock guard
      ncclUniqueId id;
      if (rank == 0) {
        if (ncclGetUniqueId(&id) != ncclSuccess) _exit(1);
        for (int r = 1; r < nranks; ++r)
          if (write(fds[2 * r + 1], &id, sizeof(id)) != sizeof(id)) _exit(1);
      } else if (read(fds[2 * rank], &id, sizeof(id)) != sizeof(id)) {
        _exit(1);
      }
      const int code = Rank(rank, nranks, reps, id);
      std::fflush(stdout);
      _exit(code);
    }
    pids.push_back(pid);
  }
  int worst = 0;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code != 0) worst = code;
  }
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 1000;
  // Whether there is a GPU, asked in a child: the parent must not initialise CUDA before forking.
  pid_t probe = fork();
  if (probe == 0) {
    int n = 0;
    _exit(cudaGetDeviceCount(&n) == cudaSuccess && n > 0 ? 0 : 77);
  }
  int status = 0;
  waitpid(probe, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::printf("stream_order_check: skipped: no GPU\n");
    return 77;
  }
  int result = 0;
  for (int nranks : {2, 4}) {
    const int r = Job(nranks, reps);
    std::printf("stream_order_check: %d ranks on one GPU: %s\n", nranks,
                r == 0 ? "PASSED" : "FAILED");
    if (r != 0) result = 1;
  }
  return result;
}
