#include "core/runtime/wire_protocol.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace braid {

uint8_t WireOp(const OpDesc& d) {
  return d.premul ? static_cast<uint8_t>(braidNumOps) : static_cast<uint8_t>(d.user_op);
}

std::string DescribeHeader(const WireHeader& h) {
  OpDesc d;
  d.kind = static_cast<CollKind>(h.coll < kNumCollKinds ? h.coll : 0);
  d.dtype = static_cast<DataType>(h.dtype < kNumDataTypes ? h.dtype : 0);
  d.count = h.count;
  d.root = h.root;
  d.avg = h.op == braidAvg;
  d.premul = h.op == braidNumOps;
  d.base_op = static_cast<ReduceOp>(h.op < kNumReduceOps ? h.op : 0);
  d.codec = UnpackCodec(h.codec);
  if (d.kind == CollKind::kSendRecv)
    return "a send of " + std::to_string(h.payload) + " bytes (" + std::to_string(h.count) + " x " +
           DataTypeName(d.dtype) + ")";
  return DescribeCall(d);
}

Status AdvanceCorked(Endpoint* ep, OpProgress& pr, bool* moved) {
  if (ep->flushedThrough() < pr.cork_end) BRAID_RETURN_IF_ERROR(ep->flush());
  if (ep->flushedThrough() >= pr.cork_end) {
    pr.phase = kDone;
    *moved = true;
  }
  return Status::Ok();
}

Status SendFramed(Endpoint* ep, OpProgress& pr, const std::byte* payload, int64_t* budget,
                  bool* moved, std::vector<Endpoint*>* corked) {
  static const std::byte kZeros[8] = {};
  const uint64_t payload_len = pr.hdr.payload;
  const uint64_t padding_len = PaddedSize(payload_len) - payload_len;
  auto* header = reinterpret_cast<const std::byte*>(&pr.hdr);
  if (corked && pr.phase == kHeader && pr.done == 0) {
    const iovec whole[3] = {{const_cast<std::byte*>(header), sizeof(WireHeader)},
                            {const_cast<std::byte*>(payload), payload_len},
                            {const_cast<std::byte*>(kZeros), padding_len}};
    if (ep->cork(std::span<const iovec>(whole, 3), &pr.cork_end)) {
      pr.phase = kCorked;
      *moved = true;
      *budget -= static_cast<int64_t>(sizeof(WireHeader) + payload_len + padding_len);
      if (std::find(corked->begin(), corked->end(), ep) == corked->end()) corked->push_back(ep);
      return Status::Ok();
    }
  }
  for (;;) {
    // What is left of the frame, from the current phase on, in one gathered send: a small
    // message leaves as one segment (one syscall) instead of three.
    const uint64_t phase_len[3] = {sizeof(WireHeader), payload_len, padding_len};
    const std::byte* phase_ptr[3] = {header, payload, kZeros};
    while (pr.phase != kDone && pr.done == phase_len[pr.phase]) {
      pr.phase = static_cast<Phase>(pr.phase + 1);
      pr.done = 0;
      *moved = true;
    }
    if (pr.phase == kDone) return Status::Ok();
    if (*budget <= 0) return Status::Ok();
    iovec parts[3];
    size_t k = 0;
    for (int ph = pr.phase; ph < kDone; ++ph) {
      const uint64_t skip = ph == pr.phase ? pr.done : 0;
      if (phase_len[ph] == skip) continue;
      parts[k++] = {const_cast<std::byte*>(phase_ptr[ph] + skip), phase_len[ph] - skip};
    }
    auto r = ep->sendv(std::span<const iovec>(parts, k));
    if (!r.ok()) return r.status();
    if (*r == 0) return Status::Ok();
    *budget -= static_cast<int64_t>(*r);
    *moved = true;
    for (uint64_t sent = *r; sent > 0;) {  // advance through the phases the bytes covered
      const uint64_t take = std::min(sent, phase_len[pr.phase] - pr.done);
      pr.done += take;
      sent -= take;
      if (pr.done == phase_len[pr.phase]) {
        pr.phase = static_cast<Phase>(pr.phase + 1);
        pr.done = 0;
      }
    }
  }
}

Result<bool> RecvHeader(Endpoint* ep, int peer, OpProgress& pr, bool* moved) {
  // Through peek(), not recv(): a stream transport then reads the header together with what
  // follows it (a small payload, the next frames) in one syscall.
  while (pr.done < sizeof(WireHeader)) {
    auto r = ep->peek(sizeof(WireHeader) - pr.done);
    if (!r.ok()) return r.status();
    if (r->empty()) return false;
    std::memcpy(reinterpret_cast<std::byte*>(&pr.hdr) + pr.done, r->data(), r->size());
    ep->consume(r->size());
    pr.done += r->size();
    *moved = true;
  }
  if (pr.hdr.magic != kWireMagic)
    return RemoteError("rank " + std::to_string(peer) +
                       " sent bytes that are not a braid message (bad magic): the stream is "
                       "corrupt or the peer runs another protocol");
  return true;
}

Status RecvPadding(Endpoint* ep, OpProgress& pr, bool* moved) {
  std::byte trash[8];
  const uint64_t pad = PaddedSize(pr.hdr.payload) - pr.hdr.payload;
  while (pr.done < pad) {
    auto r = ep->recv(trash, pad - pr.done);
    if (!r.ok()) return r.status();
    if (*r == 0) return Status::Ok();
    pr.done += *r;
    *moved = true;
  }
  pr.phase = kDone;
  *moved = true;
  return Status::Ok();
}

std::string DescribeSignature(const CallSignature& s) {
  WireHeader h;
  h.coll = s.coll;
  h.dtype = s.dtype;
  h.op = s.op;
  h.root = s.root;
  h.count = s.count;
  h.codec = s.codec;
  char comm[32] = "";
  if (s.comm) std::snprintf(comm, sizeof(comm), " of split communicator %08x", s.comm);
  return DescribeHeader(h) + " #" + std::to_string(s.seq) + comm;
}

}  // namespace braid
