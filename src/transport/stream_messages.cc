#include "transport/stream_messages.h"

#include <cstdio>
#include <cstring>

#include "transport/transport.h"

namespace braid {

namespace {

constexpr size_t kFrameBytes = sizeof(StreamMessages::Frame);

size_t Padded(size_t n) {
  return (n + 7) & ~size_t{7};
}

// Source of the padding bytes (fewer than 8 per message).
constexpr std::byte kZeros[8] = {};

}  // namespace

Result<uint64_t> StreamMessages::postSend(const std::byte* data, size_t len) {
  if (failed_) return *failed_;
  Pending p{next_id_++, const_cast<std::byte*>(data), len, 0, Frame{}};
  p.frame.bytes = len;
  sends_.push_back(p);
  return p.id;
}

Result<uint64_t> StreamMessages::postRecv(std::byte* data, size_t capacity) {
  if (failed_) return *failed_;
  Pending p{next_id_++, data, capacity, 0, Frame{}};
  recvs_.push_back(p);
  return p.id;
}

Result<std::optional<size_t>> StreamMessages::test(uint64_t id) {
  if (id == 0 || id >= next_id_)
    return InvalidArgument("message " + std::to_string(id) + " was never posted on " +
                           stream_.describe());
  auto report = [&]() -> std::optional<size_t> {
    auto it = completed_.find(id);
    if (it == completed_.end()) return std::nullopt;
    size_t n = it->second;
    completed_.erase(it);
    return n;
  };
  if (auto n = report()) return n;
  if (failed_) return *failed_;
  if (Status st = progress(); !st.ok()) return fail(st);
  if (auto n = report()) return n;
  for (const auto& q : {&sends_, &recvs_})
    for (const Pending& p : *q)
      if (p.id == id) return std::optional<size_t>();
  return InvalidArgument("message " + std::to_string(id) + " on " + stream_.describe() +
                         " was already reported complete");
}

Status StreamMessages::progress() {
  while (!sends_.empty()) {
    bool finished = false;
    BRAID_RETURN_IF_ERROR(progressSend(sends_.front(), &finished));
    if (!finished) break;
    completed_[sends_.front().id] = sends_.front().len;
    sends_.pop_front();
  }
  while (!recvs_.empty()) {
    bool finished = false;
    BRAID_RETURN_IF_ERROR(progressRecv(recvs_.front(), &finished));
    if (!finished) break;
    completed_[recvs_.front().id] = recvs_.front().len;
    recvs_.pop_front();
  }
  return Status::Ok();
}

Status StreamMessages::progressSend(Pending& s, bool* finished) {
  const size_t total = kFrameBytes + Padded(s.len);
  while (s.done < total) {
    const std::byte* src;
    size_t avail;
    if (s.done < kFrameBytes) {
      src = reinterpret_cast<const std::byte*>(&s.frame) + s.done;
      avail = kFrameBytes - s.done;
    } else if (s.done < kFrameBytes + s.len) {
      src = s.data + (s.done - kFrameBytes);
      avail = kFrameBytes + s.len - s.done;
    } else {
      src = kZeros;
      avail = total - s.done;
    }
    BRAID_ASSIGN_OR_RETURN(size_t n, stream_.send(src, avail));
    if (n == 0) break;
    s.done += n;
  }
  *finished = s.done == total;
  return Status::Ok();
}

Status StreamMessages::progressRecv(Pending& r, bool* finished) {
  *finished = false;
  for (;;) {
    if (r.done < kFrameBytes) {
      BRAID_ASSIGN_OR_RETURN(size_t n, stream_.recv(reinterpret_cast<std::byte*>(&r.frame) + r.done,
                                                    kFrameBytes - r.done));
      if (n == 0) return Status::Ok();
      r.done += n;
      if (r.done < kFrameBytes) continue;
      if (r.frame.magic != kFrameMagic || r.frame.reserved != 0) {
        char magic[16];
        std::snprintf(magic, sizeof(magic), "0x%08x", r.frame.magic);
        return RemoteError("garbage on the message stream from " + stream_.describe() +
                           ": a frame header with magic " + magic +
                           " (want 0x534d5242); the stream is out of step");
      }
      if (r.frame.bytes > r.len)
        return InvalidUsage("a message of " + std::to_string(r.frame.bytes) + " bytes from " +
                            stream_.describe() + " does not fit the receive of " +
                            std::to_string(r.len) + " bytes posted for it");
      r.len = r.frame.bytes;  // from now on: the bytes that arrive
    }
    const size_t total = kFrameBytes + Padded(r.len);
    if (r.done == total) {
      *finished = true;
      return Status::Ok();
    }
    std::byte pad[8];
    std::byte* dst;
    size_t avail;
    if (r.done < kFrameBytes + r.len) {
      dst = r.data + (r.done - kFrameBytes);
      avail = kFrameBytes + r.len - r.done;
    } else {
      dst = pad;
      avail = total - r.done;
    }
    BRAID_ASSIGN_OR_RETURN(size_t n, stream_.recv(dst, avail));
    if (n == 0) return Status::Ok();
    r.done += n;
  }
}

Status StreamMessages::fail(Status st) {
  failed_ = st;
  sends_.clear();
  recvs_.clear();
  return st;
}

}  // namespace braid
