/* LD_PRELOAD'ed into every process of a job by init_connects_test.py: records each connect()
 * (its destination), each listen() (the address it listens on, from getsockname) and each bind()
 * of a unix socket of the process
 * to $BRAID_CONNECT_LOG.<pid>, one line each, then calls libc's. The test checks that a job
 * connects only to what its own processes listen on (issue 42: hwloc's X11 probes at init). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static void record(const char* what, const struct sockaddr* a) {
  const char* base = getenv("BRAID_CONNECT_LOG");
  if (!base || !a) return;
  char line[256];
  char host[INET6_ADDRSTRLEN] = "";
  if (a->sa_family == AF_INET) {
    const struct sockaddr_in* in = (const struct sockaddr_in*)a;
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    snprintf(line, sizeof(line), "%s inet %s %u\n", what, host, ntohs(in->sin_port));
  } else if (a->sa_family == AF_INET6) {
    const struct sockaddr_in6* in6 = (const struct sockaddr_in6*)a;
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    snprintf(line, sizeof(line), "%s inet6 %s %u\n", what, host, ntohs(in6->sin6_port));
  } else if (a->sa_family == AF_UNIX) {
    const struct sockaddr_un* un = (const struct sockaddr_un*)a;
    snprintf(line, sizeof(line), "%s unix %s%s\n", what, un->sun_path[0] ? "" : "@",
             un->sun_path[0] ? un->sun_path : un->sun_path + 1);
  } else {
    snprintf(line, sizeof(line), "%s family %d\n", what, a->sa_family);
  }
  char path[4096];
  snprintf(path, sizeof(path), "%s.%d", base, (int)getpid());
  FILE* f = fopen(path, "a");
  if (!f) return;
  fputs(line, f);
  fclose(f);
}

int connect(int fd, const struct sockaddr* addr, socklen_t len) {
  static int (*real)(int, const struct sockaddr*, socklen_t);
  if (!real) real = (int (*)(int, const struct sockaddr*, socklen_t))dlsym(RTLD_NEXT, "connect");
  record("connect", addr);
  return real(fd, addr, len);
}

int bind(int fd, const struct sockaddr* addr, socklen_t len) {
  static int (*real)(int, const struct sockaddr*, socklen_t);
  if (!real) real = (int (*)(int, const struct sockaddr*, socklen_t))dlsym(RTLD_NEXT, "bind");
  const int r = real(fd, addr, len);
  if (r == 0 && addr && addr->sa_family == AF_UNIX) record("bind", addr);
  return r;
}

int listen(int fd, int backlog) {
  static int (*real)(int, int);
  if (!real) real = (int (*)(int, int))dlsym(RTLD_NEXT, "listen");
  const int r = real(fd, backlog);
  if (r == 0) {
    struct sockaddr_storage s;
    socklen_t n = sizeof(s);
    if (getsockname(fd, (struct sockaddr*)&s, &n) == 0) record("listen", (struct sockaddr*)&s);
  }
  return r;
}
