// State in memory that the forked ranks of a job share (made before RunJob forks): counters for
// barriers outside braid, pids. Order from counters, never from sleeps.
#pragma once

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <new>

namespace braid_test {

template <typename T>
class Shared {
 public:
  Shared() {
    void* mem = mmap(nullptr, sizeof(T), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(mem, MAP_FAILED);
    value_ = mem == MAP_FAILED ? nullptr : new (mem) T{};
  }
  ~Shared() {
    if (value_) munmap(value_, sizeof(T));
  }
  Shared(const Shared&) = delete;
  Shared& operator=(const Shared&) = delete;
  T* operator->() const { return value_; }
  T& operator*() const { return *value_; }
  bool ok() const { return value_ != nullptr; }

 private:
  T* value_ = nullptr;
};

}  // namespace braid_test
