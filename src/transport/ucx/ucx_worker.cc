#include "transport/ucx/ucx_worker.h"

#include <signal.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/base/clock.h"
#include "core/base/log.h"
#include "core/net/doorbell.h"

namespace braid::ucx {
namespace {

// How long a communicator's destroy lets what it sent leave before closing its endpoints, and
// how long the closes may take: bounded, since a peer may be gone or stopped.
constexpr int kRetireWaitMs = 1000;
constexpr int kCloseWaitMs = 1000;

void OnPeerError(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* slot = static_cast<PeerLink::ErrorSlot*>(arg);
  int expected = UCS_OK;
  slot->status.compare_exchange_strong(expected, static_cast<int>(status));
}

}  // namespace

// ------------------------------------------------------------------------------------ PeerLink

PeerLink::PeerLink(Worker* worker, PeerInfo info, int nchannels)
    : worker_(worker), info_(std::move(info)), eps_(static_cast<size_t>(nchannels), nullptr) {
  for (int c = 0; c < nchannels; ++c) slots_.push_back(std::make_shared<ErrorSlot>());
#ifdef SYS_pidfd_open
  if (info_.same_host && info_.pid > 0) {
    long fd = syscall(SYS_pidfd_open, static_cast<pid_t>(info_.pid), 0);
    if (fd >= 0) pidfd_ = static_cast<int>(fd);
  }
#endif
}

PeerLink::~PeerLink() {
  for (size_t c = 0; c < eps_.size(); ++c)
    if (eps_[c]) worker_->retire(eps_[c], slots_[c]);
  if (pidfd_ >= 0) close(pidfd_);
}

std::string PeerLink::name() const {
  std::string s = "rank " + std::to_string(info_.rank);
  if (!info_.host.empty()) s += " on host " + info_.host;
  return s;
}

void PeerLink::report(FailureCause::Reason reason) const {
  if (!info_.causes) return;
  FailureCause c;
  c.reason = reason;
  c.rank = info_.rank;
  c.pid = info_.pid;
  c.host = info_.host;
  info_.causes->offer(c);  // the engine fills in the observer and the operation
}

Result<ucp_ep_h> PeerLink::ep(int channel) {
  ucp_ep_h& ep = eps_.at(static_cast<size_t>(channel));
  if (ep) return ep;
  if (!failed_.ok()) return failed_;
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  params.address = reinterpret_cast<const ucp_address_t*>(info_.address.data());
  // UCX's shared-memory transports (posix, sysv, cma) do not support peer error handling, and
  // asking for it would move a node's pairs to tcp over loopback: a peer on this node is watched
  // with its pidfd instead. Across nodes, UCX reports a failed peer.
  if (info_.same_host) {
    params.err_mode = UCP_ERR_HANDLING_MODE_NONE;
  } else {
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.err_handler.cb = OnPeerError;
    params.err_handler.arg = slots_[static_cast<size_t>(channel)].get();
  }
  worker_->touched();
  ucs_status_t st = worker_->lib().ucp_ep_create(worker_->get(), &params, &ep);
  if (st != UCS_OK) {
    ep = nullptr;
    // An address no transport of this worker reaches, or local resources: not the peer's death.
    failed_ = SystemError(worker_->where() + ": cannot reach " + name() + " over UCX (" +
                          RouteName(worker_->route()) + " route): " + StatusText(st));
    return failed_;
  }
  return ep;
}

Status PeerLink::failure() {
  if (!failed_.ok()) return failed_;
  int st = UCS_OK;
  for (const auto& slot : slots_)
    if (st == UCS_OK) st = slot->status.load(std::memory_order_relaxed);
  bool exited = false;
  if (info_.same_host && info_.pid > 0) {
    // At most every kExitCheckUs: hot paths ask. A pidfd turns readable when the process exits;
    // without one (kernels before 5.3), kill(pid, 0).
    const int64_t now = NowMicros();
    if (now >= next_exit_check_us_) {
      next_exit_check_us_ = now + kExitCheckUs;
      if (pidfd_ >= 0) {
        pollfd p{pidfd_, POLLIN, 0};
        exited = poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0;
      } else {
        exited = kill(static_cast<pid_t>(info_.pid), 0) != 0 && errno == ESRCH;
      }
    }
  }
  if (st == UCS_OK && !exited) return Status::Ok();
  if (exited)
    failed_ = RemoteError(name() + " (pid " + std::to_string(info_.pid) +
                          ") exited: it probably crashed or was killed");
  else
    failed_ =
        RemoteError(name() + " failed or closed its UCX endpoint (" +
                    StatusText(static_cast<ucs_status_t>(st)) + "): it probably exited or crashed");
  return failed_;
}

Status PeerLink::fail() {
  Status f = failure();
  if (!f.ok() && !reported_) {
    reported_ = true;
    report(FailureCause::Reason::kDied);
  }
  return f;
}

void PeerLink::addFds(std::vector<pollfd>& fds) const {
  if (pidfd_ >= 0) fds.push_back({pidfd_, POLLIN, 0});
}

// -------------------------------------------------------------------------------------- Worker

Result<std::unique_ptr<Worker>> Worker::Create(std::shared_ptr<Context> context, Route route,
                                               std::string where, std::string doorbell) {
  std::unique_ptr<Worker> w(new Worker());
  w->context_ = std::move(context);
  w->route_ = route;
  w->where_ = std::move(where);
  w->doorbell_ = std::move(doorbell);
  const Library& lib = w->lib();
  ucp_worker_params_t params{};
  params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE | UCP_WORKER_PARAM_FIELD_EVENTS;
  params.thread_mode = UCS_THREAD_MODE_SERIALIZED;  // one thread at a time: mu()
  params.events = UCP_WAKEUP_TAG_SEND | UCP_WAKEUP_TAG_RECV | UCP_WAKEUP_TX | UCP_WAKEUP_RX;
  ucs_status_t st = lib.ucp_worker_create(w->context_->get(), &params, &w->worker_);
  if (st != UCS_OK) {
    w->worker_ = nullptr;
    return SystemError(w->where_ + ": ucp_worker_create (" + RouteName(route) +
                       " route): " + StatusText(st));
  }
  st = lib.ucp_worker_get_efd(w->worker_, &w->efd_);
  if (st != UCS_OK)
    return SystemError(w->where_ + ": ucp_worker_get_efd: " + StatusText(st) +
                       " (a UCX transport without wake-up events?)");
  ucp_address_t* addr = nullptr;
  size_t len = 0;
  st = lib.ucp_worker_get_address(w->worker_, &addr, &len);
  if (st != UCS_OK) return SystemError(w->where_ + ": ucp_worker_get_address: " + StatusText(st));
  w->address_.assign(reinterpret_cast<const char*>(addr), len);
  lib.ucp_worker_release_address(w->worker_, addr);
  w->stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (w->stop_fd_ < 0) return SystemError(w->where_ + ": eventfd: " + std::strerror(errno));
  w->last_use_us_.store(NowMicros(), std::memory_order_relaxed);
  w->helper_ = std::thread([p = w.get()] { p->helperLoop(); });
  return w;
}

void Worker::helperLoop() {
  while (!stop_.load(std::memory_order_acquire)) {
    const int64_t idle = NowMicros() - last_use_us_.load(std::memory_order_relaxed);
    if (idle < kIdleUs) {
      // The engine uses the worker: look again once it has left it alone for kIdleUs.
      pollfd stop{stop_fd_, POLLIN, 0};
      poll(&stop, 1, static_cast<int>((kIdleUs - idle) / 1000 + 1));
      continue;
    }
    std::vector<pollfd> fds;
    bool moved = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_.load(std::memory_order_acquire)) break;
      // (Not a use: the engine's next call finds the worker progressed, and arms it again.)
      for (int i = 0; i < 64 && arm(fds); ++i) {
        fds.clear();
        moved = true;
      }
    }
    // Something arrived or completed while the engine slept, maybe on this very event fd, which
    // this progress has just emptied: its doorbell wakes it to look.
    if (moved && !doorbell_.empty()) Doorbell::Ring(doorbell_);
    fds.push_back({stop_fd_, POLLIN, 0});
    // A long timeout only as a safety net: the event fd wakes this thread.
    poll(fds.data(), fds.size(), 1000);
    std::lock_guard<std::mutex> lock(mu_);
    armed_ = false;
  }
}

unsigned Worker::progress() {
  armed_ = false;
  return lib().ucp_worker_progress(worker_);
}

bool Worker::arm(std::vector<pollfd>& fds) {
  if (!armed_) {
    // Bounded: a worker that keeps having events is progress, not sleep.
    for (int i = 0;; ++i) {
      if (i == 8 || progress() > 0) return true;
      const ucs_status_t st = lib().ucp_worker_arm(worker_);
      if (st == UCS_OK) break;
      if (st != UCS_ERR_BUSY) {
        BRAID_WARN("%s: ucp_worker_arm: %s", where_.c_str(), StatusText(st).c_str());
        return true;  // polled again by the caller, which sleeps on its deadline otherwise
      }
    }
    armed_ = true;
  }
  fds.push_back({efd_, POLLIN, 0});
  return false;
}

void Worker::retire(ucp_ep_h ep, std::shared_ptr<PeerLink::ErrorSlot> slot) {
  retired_eps_.push_back({ep, std::move(slot)});
}

void Worker::retire(void* request, std::shared_ptr<void> keep_alive, bool wait) {
  if (request) retired_requests_.push_back({request, std::move(keep_alive), wait});
}

void Worker::closeAll() {
  const Library& l = lib();
  // Sends the peer may still need (shutdown markers) leave first, bounded; receives and sends
  // nobody waits for any more are cancelled.
  Deadline until = Deadline::After(kRetireWaitMs);
  auto wait_for = [&](const std::vector<void*>& requests) {
    for (;;) {
      bool pending = false;
      for (void* r : requests)
        if (l.ucp_request_check_status(r) == UCS_INPROGRESS) pending = true;
      if (!pending || until.expired()) return;
      if (progress() == 0) {
        std::vector<pollfd> fds;
        if (!arm(fds)) poll(fds.data(), fds.size(), until.remainingMs(10));
      }
    }
  };
  std::vector<void*> waited;
  for (auto& r : retired_requests_)
    if (r.wait) waited.push_back(r.request);
  wait_for(waited);
  // What UCX completed may still sit in its transport's buffer (tcp): flushed, it has left (an
  // endpoint with nothing outstanding flushes at once). Then the endpoints close without asking
  // the peer, which may have gone already (a flushing close would try to reconnect to it).
  std::vector<void*> flushes;
  for (auto& e : retired_eps_) {
    if (e.slot->status.load() != UCS_OK) continue;
    ucp_request_param_t param{};
    void* f = l.ucp_ep_flush_nbx(e.ep, &param);
    if (UCS_PTR_IS_PTR(f)) flushes.push_back(f);
  }
  wait_for(flushes);
  for (void* f : flushes) l.ucp_request_free(f);
  std::vector<void*> closing;
  for (auto& e : retired_eps_) {
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    void* r = l.ucp_ep_close_nbx(e.ep, &param);
    if (UCS_PTR_IS_PTR(r)) closing.push_back(r);
  }
  until = Deadline::After(kCloseWaitMs);
  wait_for(closing);
  for (void* r : closing) l.ucp_request_free(r);
  for (auto& r : retired_requests_)
    if (l.ucp_request_check_status(r.request) == UCS_INPROGRESS)
      l.ucp_request_cancel(worker_, r.request);
  for (int i = 0; i < 100 && progress() > 0; ++i) {
  }
  for (auto& r : retired_requests_) {
    l.ucp_request_free(r.request);
    r.request = nullptr;
  }
  retired_eps_.clear();
  // Messages that arrived and nobody took (credit for a stream that ended, a peer's marker):
  // received into nothing, so that UCX has every descriptor back when the worker goes.
  for (int i = 0; i < 4096; ++i) {
    ucp_tag_recv_info_t info{};
    ucp_tag_message_h m = l.ucp_tag_probe_nb(worker_, 0, 0, 1, &info);
    if (!m) break;
    ucp_request_param_t param{};
    void* r = l.ucp_tag_msg_recv_nbx(worker_, nullptr, 0, m, &param);
    if (UCS_PTR_IS_PTR(r)) {
      l.ucp_request_cancel(worker_, r);
      l.ucp_request_free(r);
    }
  }
}

Worker::~Worker() {
  if (helper_.joinable()) {
    stop_.store(true, std::memory_order_release);
    uint64_t one = 1;
    (void)!write(stop_fd_, &one, sizeof(one));
    helper_.join();
  }
  if (stop_fd_ >= 0) close(stop_fd_);
  if (!worker_) return;
  std::lock_guard<std::mutex> lock(mu_);
  closeAll();
  lib().ucp_worker_destroy(worker_);
  retired_requests_.clear();  // the memory they used, now that nothing can touch it
}

}  // namespace braid::ucx
