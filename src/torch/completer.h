// The thread that completes a communicator's Works (one per braid root communicator, shared by
// its split views, whose operations run on the root's engine). It keeps the Works in issue
// order, tests them all without blocking, and otherwise waits in braidWait on the oldest, which
// returns the moment that operation completes (and, with BRAID_INLINE, drives the progress loop
// on this thread meanwhile). The wait is cut into slices so that a later Work that completes
// first (a receive overtaking an older one) is seen within a slice rather than only after the
// older one. Submissions come from torch's threads while this thread waits: braid allows
// braidWait on one thread while another issues (the engine serialises them); the issuing side
// holds the Completer's issue lock so that calls on a root and its views keep one order.
#pragma once

#include <c10/util/intrusive_ptr.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "braid_work.h"

namespace braid_torch {

class Completer {
 public:
  Completer();
  ~Completer();  // completes what is queued (each Work ends within braid's deadline), then stops

  // Held while a collective issues its braid calls.
  std::mutex& issueLock() { return issue_mu_; }
  // Hands over an issued Work.
  void add(c10::intrusive_ptr<BraidWork> work);
  // Blocks until every Work handed over so far has completed.
  void drain();

 private:
  void run();

  std::mutex issue_mu_;
  std::mutex mu_;
  std::condition_variable cv_;                       // new work, stop
  std::condition_variable idle_cv_;                  // the queue emptied
  std::deque<c10::intrusive_ptr<BraidWork>> queue_;  // guarded by mu_
  bool stop_ = false;                                // guarded by mu_
  std::thread thread_;
};

}  // namespace braid_torch
