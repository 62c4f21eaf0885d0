// What completes a communicator's Works (one Completer per braid root communicator, shared by its
// split views, whose operations run on the root's engine). A *pass* tests every Work in flight
// without blocking, otherwise waits in braidWait on the oldest (which returns the moment that
// operation completes and, with BRAID_INLINE, drives braid's progress loop on the waiting thread
// meanwhile) and completes what is done, in issue order. The wait is cut into slices so that a
// younger Work that completes first (a receive overtaking an older one) is seen within a slice.
//
// Passes run on the Completer's thread, except while a torch thread waits for a Work
// (Work.wait(): every synchronous torch call): then that thread runs the passes itself, so its
// call completes on its own thread, without handing the completion over from another thread
// (two thread wake-ups per call, which cost most of a small call's time when ranks outnumber
// cores). One pass runs at a time. The Completer's thread serves what nobody waits for: futures
// (DDP chains on them) and asynchronous calls.
//
// Issuing comes from torch's threads while a pass waits: braid allows braidWait on one thread
// while another issues (the engine serialises them); the issuing side holds the issue lock so
// that calls on a root and its views keep one order.
#pragma once

#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "braid_work.h"

namespace braid_torch {

class Completer : public std::enable_shared_from_this<Completer> {
 public:
  // Made with std::make_shared (Works keep a weak reference).
  Completer();
  ~Completer();  // completes what is queued (each Work ends within braid's deadline), then stops

  // Held while a collective issues its braid calls.
  std::mutex& issueLock() { return issue_mu_; }
  // Hands over an issued Work.
  void add(c10::intrusive_ptr<BraidWork> work);
  // Runs passes on the calling thread (or waits for the pass another runs) until `work`, handed
  // over before, has completed or `deadline` (if any) has passed. True when it completed.
  bool waitFor(BraidWork& work, std::optional<std::chrono::steady_clock::time_point> deadline);
  // Blocks until every Work handed over so far has completed.
  void drain();

 private:
  void run();
  // One pass (see above), with waits of at most `slice_ms`. The caller holds the driver role.
  void pass(int64_t slice_ms);

  std::mutex issue_mu_;
  std::mutex mu_;
  std::condition_variable cv_;       // new work, a pass ended, a waiter left, stop
  std::condition_variable idle_cv_;  // the queue emptied
  // Guarded by mu_.
  std::deque<c10::intrusive_ptr<BraidWork>> queue_;
  bool driving_ = false;    // a pass is running
  std::thread::id driver_;  // the thread that runs it
  int waiters_ = 0;         // threads in waitFor: the Completer's thread leaves the passes to them
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace braid_torch
