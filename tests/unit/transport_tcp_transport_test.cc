// The TCP transport inside one process: several TransportInstances (one per rank, each in its
// own thread) with hand-built contexts, over loopback. Every wait is bounded.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../common/connected_sockets.h"
#include "../common/proc_state.h"
#include "core/net/handshake.h"
#include "core/net/socket.h"
#include "transport/lazy_endpoint.h"
#include "transport/tcp/tcp_endpoint.h"
#include "transport/tcp/tcp_transport.h"
#include "transport/transport.h"

namespace braid {
namespace {

using Endpoints = std::vector<std::vector<std::unique_ptr<Endpoint>>>;

// Both ends of a connection between two ranks of a job count here (each rank is a thread).
using braid_test_common::ConnectedTcpSockets;

int64_t ElapsedMs(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

TransportContext Context(int rank, int nranks, int nchannels) {
  TransportContext ctx;
  ctx.rank = rank;
  ctx.nranks = nranks;
  ctx.nchannels = nchannels;
  for (int r = 0; r < nranks; ++r) {
    RankInfo info;
    info.rank = r;
    info.hostname = "host" + std::to_string(r);
    info.host_id = "same";
    ctx.ranks.push_back(info);
  }
  ctx.comm_tag = "0123456789abcdef0123456789abcdef";
  ctx.secret.assign(32, 0);
  for (int i = 0; i < 32; ++i) ctx.secret[i] = static_cast<uint8_t>(i * 5 + 1);
  ctx.all_on_one_host = true;
  return ctx;
}

struct Job {
  int nranks, nchannels;
  std::vector<std::unique_ptr<CauseBoard>> causes;  // per rank (lazy jobs)
  std::vector<std::unique_ptr<TransportInstance>> inst;
  std::vector<std::string> blobs;
  std::vector<Endpoints> eps;  // [rank][peer index][channel]
  std::vector<std::vector<int>> peers;

  // lazy: BRAID_LAZY_CONNECT (connect() returns endpoints that connect when first used).
  Job(int n, int c, bool lazy = false) : nranks(n), nchannels(c), eps(n), peers(n) {
    for (int r = 0; r < n; ++r) {
      TransportContext ctx = Context(r, n, c);
      if (lazy) {
        causes.push_back(std::make_unique<CauseBoard>());
        ctx.causes = causes.back().get();
        ctx.lazy_connect = true;
      }
      auto i = TcpTransportFactory()->create(ctx);
      EXPECT_TRUE(i.ok()) << i.status().message();
      inst.push_back(std::move(*i));
      blobs.push_back(inst.back()->localBlob());
      for (int p = 0; p < n; ++p)
        if (p != r) peers[r].push_back(p);
    }
  }
  // Connects every rank in its own thread; returns each rank's status.
  std::vector<Status> connectAll(int deadline_ms) {
    std::vector<Status> st(nranks);
    std::vector<std::thread> t;
    for (int r = 0; r < nranks; ++r)
      t.emplace_back([&, r] {
        st[r] = inst[r]->connect(peers[r], blobs, Deadline::After(deadline_ms), &eps[r]);
      });
    for (auto& x : t) x.join();
    return st;
  }
  Endpoint* ep(int rank, int peer, int channel) {
    int idx = peer < rank ? peer : peer - 1;
    return eps[rank][idx][channel].get();
  }
};

uint8_t Pattern(int from, int to, int channel, size_t off) {
  return static_cast<uint8_t>((off * 2654435761u >> 7) ^ (from * 37 + to * 11 + channel * 3));
}

size_t StreamBytes(int from, int to, int channel) {
  static const size_t sizes[] = {1, 7, 4099, (3 << 20) + 13, 65536, 999331};
  return sizes[(from * 5 + to * 3 + channel) % 6];
}

// One rank streams to and from every peer on every channel at once, sleeping in poll() via
// arm() when nothing can progress. Reads alternate between recv() and peek()/consume().
std::string Stream(Job& job, int rank) {
  struct Flow {
    Endpoint* ep;
    int peer, channel;
    std::vector<uint8_t> out;
    size_t sent = 0, got = 0, expect = 0;
  };
  std::vector<Flow> flows;
  for (int p : job.peers[rank])
    for (int c = 0; c < job.nchannels; ++c) {
      Flow f;
      f.ep = job.ep(rank, p, c);
      f.peer = p;
      f.channel = c;
      f.out.resize(StreamBytes(rank, p, c));
      for (size_t i = 0; i < f.out.size(); ++i) f.out[i] = Pattern(rank, p, c, i);
      f.expect = StreamBytes(p, rank, c);
      flows.push_back(std::move(f));
    }
  Deadline deadline = Deadline::After(20000);
  std::vector<uint8_t> tmp(1 << 20);
  size_t step = 0;
  for (;;) {
    bool progress = false, done = true;
    for (auto& f : flows) {
      if (f.sent < f.out.size()) {
        // Odd chunk sizes exercise partial writes.
        size_t want = std::min(f.out.size() - f.sent, size_t{1 + (step * 7919) % (512 * 1024)});
        auto n = f.ep->send(f.out.data() + f.sent, want);
        if (!n.ok()) return n.status().message();
        f.sent += *n;
        progress = progress || *n > 0;
      }
      if (f.got < f.expect) {
        ++step;
        size_t max = std::min(f.expect - f.got, size_t{1 + (step * 104729) % (300 * 1024)});
        if (step % 2) {
          auto n = f.ep->recv(tmp.data(), max);
          if (!n.ok()) return n.status().message();
          for (size_t i = 0; i < *n; ++i)
            if (tmp[i] != Pattern(f.peer, rank, f.channel, f.got + i))
              return "corrupt byte at " + std::to_string(f.got + i);
          f.got += *n;
          progress = progress || *n > 0;
        } else {
          auto v = f.ep->peek(max);
          if (!v.ok()) return v.status().message();
          if (v->size() > max) return "peek returned more than asked";
          for (size_t i = 0; i < v->size(); ++i)
            if (static_cast<uint8_t>((*v)[i]) != Pattern(f.peer, rank, f.channel, f.got + i))
              return "corrupt peeked byte at " + std::to_string(f.got + i);
          f.ep->consume(v->size());
          f.got += v->size();
          progress = progress || !v->empty();
        }
      }
      done = done && f.sent == f.out.size() && f.got == f.expect;
    }
    if (done) return "";
    if (deadline.expired()) return "stream timed out";
    if (progress) continue;
    std::vector<pollfd> fds;
    bool ready = false;
    for (auto& f : flows) ready = f.ep->arm(f.sent < f.out.size(), f.got < f.expect, fds) || ready;
    if (!ready) poll(fds.data(), fds.size(), std::min(deadline.remainingMs(), 1000));
    for (auto& f : flows) f.ep->disarm(fds);
  }
}

class TcpStream : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(TcpStream, BothDirectionsAllChannels) {
  auto [n, c] = GetParam();
  Job job(n, c);
  for (int r = 0; r < n; ++r)
    for (int p = 0; p < n; ++p)
      EXPECT_TRUE(job.inst[r]->canConnect(p == r ? (r + 1) % n : p, job.blobs));
  auto st = job.connectAll(10000);
  for (int r = 0; r < n; ++r) ASSERT_TRUE(st[r].ok()) << st[r].message();
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(job.eps[r].size(), static_cast<size_t>(n - 1));
    for (auto& per : job.eps[r]) {
      ASSERT_EQ(per.size(), static_cast<size_t>(c));
      for (auto& e : per) ASSERT_TRUE(e);
    }
  }
  for (int r = 0; r < n; ++r) EXPECT_TRUE(job.inst[r]->finishConnect().ok());
  EXPECT_NE(job.ep(0, 1, 0)->describe().find("tcp to rank 1 on host host1 (127.0.0.1:"),
            std::string::npos)
      << job.ep(0, 1, 0)->describe();
  std::vector<std::string> err(n);
  std::vector<std::thread> t;
  for (int r = 0; r < n; ++r) t.emplace_back([&, r] { err[r] = Stream(job, r); });
  for (auto& x : t) x.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(err[r], "") << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Shapes, TcpStream,
                         ::testing::Values(std::make_pair(2, 1), std::make_pair(2, 3),
                                           std::make_pair(3, 2)));

// Two connected ranks, one channel.
struct PairJob : Job {
  PairJob() : Job(2, 1) {
    auto st = connectAll(10000);
    EXPECT_TRUE(st[0].ok() && st[1].ok()) << st[0].message() << " / " << st[1].message();
  }
};

// Waits (bounded) until `pred` holds, polling the endpoint via arm().
template <typename Pred>
bool WaitFor(Endpoint* e, Pred pred, int ms = 5000) {
  Deadline d = Deadline::After(ms);
  while (!pred()) {
    if (d.expired()) return false;
    std::vector<pollfd> fds;
    if (!e->arm(false, true, fds)) poll(fds.data(), fds.size(), std::min(d.remainingMs(), 100));
    e->disarm(fds);
  }
  return true;
}

// The blob a rank publishes: its listener's address behind a versioned prefix; anything else
// (another transport's blob, garbage, a bad port) is refused, never half-parsed.
TEST(TcpBlob, RoundTripAndGarbage) {
  const std::string blob = tcp::EncodeBlob("127.0.0.1:4242");
  EXPECT_EQ(blob, "tcp1 127.0.0.1:4242");
  auto addr = tcp::DecodeBlob(blob);
  ASSERT_TRUE(addr.ok()) << addr.status().message();
  EXPECT_EQ(addr->ss_family, AF_INET);
  EXPECT_EQ(tcp::BlobAddress(blob), "127.0.0.1:4242");
  for (const char* bad : {"", "tcp1", "tcp1 ", "shm1 127.0.0.1:4242", "tcp1 127.0.0.1:99999",
                          "tcp1 127.0.0.1", "TCP1 127.0.0.1:1", "tcp1 \xff\xfe:1"}) {
    EXPECT_FALSE(tcp::DecodeBlob(bad).ok()) << bad;
  }
  EXPECT_EQ(tcp::BlobAddress("shm1 x"), "");
}

TEST(TcpEndpoint, PeekKeepsEightByteElementsWhole) {
  PairJob job;
  Endpoint* tx = job.ep(0, 1, 0);
  Endpoint* rx = job.ep(1, 0, 0);
  const size_t cap = TcpEndpoint::kBufferBytes;
  std::vector<uint8_t> data(cap + 8);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 13 + 5);
  auto send_all = [&](size_t from, size_t to) {
    Deadline d = Deadline::After(5000);
    while (from < to && !d.expired()) {
      auto n = tx->send(data.data() + from, to - from);
      ASSERT_TRUE(n.ok());
      from += *n;
      if (*n == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // paces the retry
    }
  };
  // Fill the receive buffer to 2 bytes short of its end, then consume all but 4 bytes.
  std::thread t1([&] { send_all(0, cap - 2); });
  std::span<const std::byte> v;
  ASSERT_TRUE(WaitFor(rx, [&] {
    auto r = rx->peek(cap);
    EXPECT_TRUE(r.ok());
    v = *r;
    return v.size() == cap - 2;
  }));
  t1.join();
  rx->consume(cap - 6);
  // 10 more bytes: a peek of 8 must return 8 (the remainder is moved to the front).
  send_all(cap - 2, cap + 8);
  ASSERT_TRUE(WaitFor(rx, [&] {
    auto r = rx->peek(8);
    EXPECT_TRUE(r.ok());
    v = *r;
    return v.size() >= 8;
  }));
  ASSERT_EQ(v.size(), 8u);
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(static_cast<uint8_t>(v[i]), data[cap - 6 + i]);
  rx->consume(8);
  uint8_t rest[6];
  ASSERT_TRUE(WaitFor(rx, [&] {
    auto r = rx->peek(6);
    return r.ok() && r->size() == 6;
  }));
  auto r = rx->recv(rest, 6);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(*r, 6u);
  EXPECT_EQ(std::memcmp(rest, data.data() + cap + 2, 6), 0);
}

// Receives exactly `len` bytes (bounded wait); false when they did not all arrive.
bool RecvExactly(Endpoint* rx, void* out, size_t len, int ms = 5000) {
  size_t have = 0;
  return WaitFor(
      rx,
      [&] {
        auto r = rx->recv(static_cast<char*>(out) + have, len - have);
        EXPECT_TRUE(r.ok());
        if (r.ok()) have += *r;
        return have == len;
      },
      ms);
}

// Sends megabytes of `byte` until the stream accepts nothing more (the peer does not read);
// `*sent` (if given) gets the bytes it took.
void FillStream(Endpoint* tx, char byte, uint64_t* sent = nullptr) {
  std::vector<char> chunk(1 << 20, byte);
  Deadline fill = Deadline::After(10000);
  for (;;) {
    ASSERT_FALSE(fill.expired()) << "the stream never filled";
    auto r = tx->send(chunk.data(), chunk.size());
    ASSERT_TRUE(r.ok());
    if (*r == 0) return;
    if (sent) *sent += *r;
  }
}

// sendv gathers parts into one stream in order; a part the stream takes only in part ends the
// call, and the rest follows on later calls. A frame's header and payload read apart arrive as
// sent.
TEST(TcpEndpoint, GatheredSendAndSmallReadsKeepTheStreamInOrder) {
  PairJob job;
  Endpoint* tx = job.ep(0, 1, 0);
  Endpoint* rx = job.ep(1, 0, 0);
  const char header[] = "HEADER-48-BYTES";
  const char payload[] = "payload";
  const char pad[3] = {0, 0, 0};
  const iovec parts[] = {{const_cast<char*>(header), sizeof(header)},
                         {nullptr, 0},  // an empty part is skipped
                         {const_cast<char*>(payload), sizeof(payload)},
                         {const_cast<char*>(pad), sizeof(pad)}};
  const size_t total = sizeof(header) + sizeof(payload) + sizeof(pad);
  auto n = tx->sendv(parts);
  ASSERT_TRUE(n.ok()) << n.status().message();
  ASSERT_EQ(*n, total);
  char got_header[sizeof(header)] = {}, got_payload[sizeof(payload) + sizeof(pad)] = {};
  ASSERT_TRUE(RecvExactly(rx, got_header, sizeof(got_header)));
  EXPECT_STREQ(got_header, header);
  ASSERT_TRUE(RecvExactly(rx, got_payload, sizeof(got_payload)));
  EXPECT_STREQ(got_payload, payload);

  // Fill the stream with gathered sends until one is taken only in part; the bytes that arrive
  // are the concatenation of exactly what each call reported as sent.
  std::vector<uint8_t> a(300000), b(300000);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<uint8_t>(i * 7 + 1);
    b[i] = static_cast<uint8_t>(i * 11 + 3);
  }
  std::vector<uint8_t> expected;
  Deadline fill = Deadline::After(10000);
  for (bool partial = false; !partial;) {
    ASSERT_FALSE(fill.expired()) << "the stream never filled";
    const iovec two[] = {{a.data(), a.size()}, {b.data(), b.size()}};
    auto sent = tx->sendv(two);
    ASSERT_TRUE(sent.ok());
    const size_t from_a = std::min(*sent, a.size());
    expected.insert(expected.end(), a.begin(), a.begin() + static_cast<ptrdiff_t>(from_a));
    expected.insert(expected.end(), b.begin(), b.begin() + static_cast<ptrdiff_t>(*sent - from_a));
    partial = *sent < a.size() + b.size();
  }
  std::vector<uint8_t> received(expected.size());
  ASSERT_TRUE(RecvExactly(rx, received.data(), received.size(), 20000));
  EXPECT_TRUE(received == expected);
}

// Corked messages leave in order with later direct sends (which flush first), a message over
// the size limit or beyond the buffer is refused (the caller sends it itself), flushedThrough()
// reaches a message's end once it went out, and a flush into a full stream keeps the rest for
// later, with arm() then asking for room even when the caller did not.
TEST(TcpEndpoint, CorkedMessagesKeepTheStreamInOrder) {
  PairJob job;
  Endpoint* tx = job.ep(0, 1, 0);
  Endpoint* rx = job.ep(1, 0, 0);
  auto one = [](const std::string& s) { return iovec{const_cast<char*>(s.data()), s.size()}; };
  const std::string a = "first-", b = "second-", c = "direct-", d = "last";
  uint64_t end_a = 0, end_b = 0, end_d = 0;
  iovec part = one(a);
  ASSERT_TRUE(tx->cork(std::span<const iovec>(&part, 1), &end_a));
  part = one(b);
  ASSERT_TRUE(tx->cork(std::span<const iovec>(&part, 1), &end_b));
  EXPECT_EQ(end_a, a.size());
  EXPECT_EQ(end_b, a.size() + b.size());
  EXPECT_EQ(tx->flushedThrough(), 0u);    // nothing went out yet
  auto n = tx->send(c.data(), c.size());  // flushes a and b first
  ASSERT_TRUE(n.ok() && *n == c.size());
  EXPECT_EQ(tx->flushedThrough(), end_b);
  part = one(d);
  ASSERT_TRUE(tx->cork(std::span<const iovec>(&part, 1), &end_d));
  ASSERT_TRUE(tx->flush().ok());
  EXPECT_EQ(tx->flushedThrough(), end_d);
  const std::string want = a + b + c + d;
  std::string got(want.size(), '?');
  ASSERT_TRUE(RecvExactly(rx, got.data(), got.size()));
  EXPECT_EQ(got, want);

  // Too large for a corked message; and a buffer that is full refuses more.
  std::vector<char> big(TcpEndpoint::kCorkMessageBytes + 1, 'b');
  part = {big.data(), big.size()};
  uint64_t end = 0;
  EXPECT_FALSE(tx->cork(std::span<const iovec>(&part, 1), &end));
  std::vector<char> msg(TcpEndpoint::kCorkMessageBytes, 'm');
  part = {msg.data(), msg.size()};
  size_t corked = 0;
  while (tx->cork(std::span<const iovec>(&part, 1), &end)) corked += msg.size();
  EXPECT_GT(corked, 0u);
  EXPECT_LE(corked, TcpEndpoint::kCorkBytes);

  // Fill the stream (the receiver does not read), then flush: what does not fit stays corked,
  // and arm() wants room for it.
  ASSERT_TRUE(tx->flush().ok());
  ASSERT_NO_FATAL_FAILURE(FillStream(tx, 'z'));
  const uint64_t before = tx->flushedThrough();
  part = {msg.data(), msg.size()};
  ASSERT_TRUE(tx->cork(std::span<const iovec>(&part, 1), &end));
  ASSERT_TRUE(tx->flush().ok());
  EXPECT_LT(tx->flushedThrough(), end);
  EXPECT_GE(tx->flushedThrough(), before);
  std::vector<pollfd> fds;
  EXPECT_FALSE(tx->arm(false, false, fds));
  ASSERT_EQ(fds.size(), 1u);
  EXPECT_TRUE(fds[0].events & POLLOUT);
  tx->disarm(fds);
  // The receiver drains; the corked message follows everything sent before it.
  std::vector<char> sink(1 << 20);
  Deadline drain = Deadline::After(20000);
  while (tx->flushedThrough() < end) {
    ASSERT_FALSE(drain.expired()) << "the corked message never went out";
    auto r = rx->recv(sink.data(), sink.size());
    ASSERT_TRUE(r.ok());
    ASSERT_TRUE(tx->flush().ok());
  }
}

// A stream that stays full while its reader keeps pace: each flush sends only part of what is
// corked, so the buffer never empties and its sent part is dropped from the front instead (it
// used to grow without bound); every byte still arrives once, in order.
TEST(TcpEndpoint, CorkedStreamThatNeverDrainsStaysInOrder) {
  PairJob job;
  Endpoint* tx = job.ep(0, 1, 0);
  Endpoint* rx = job.ep(1, 0, 0);
  uint64_t filler = 0;
  ASSERT_NO_FATAL_FAILURE(FillStream(tx, static_cast<char>(0xEE), &filler));
  constexpr int kMessages = 4000;
  constexpr size_t kLen = 1000;
  uint64_t received = 0, next_value = 0;  // message bytes: (index within the messages) * 7 % 251
  std::vector<uint8_t> msg(kLen), in(1 << 16);
  auto check = [&](size_t n) {
    for (size_t i = 0; i < n; ++i, ++received) {
      if (received < filler) {
        ASSERT_EQ(in[i], 0xEE) << "filler byte " << received;
      } else {
        ASSERT_EQ(in[i], static_cast<uint8_t>(next_value * 7 % 251)) << "byte " << received;
        ++next_value;
      }
    }
  };
  uint64_t end = 0, value = 0;
  Deadline give_up = Deadline::After(30000);
  for (int m = 0; m < kMessages; ++m) {
    for (auto& b : msg) b = static_cast<uint8_t>(value++ * 7 % 251);
    const iovec part{msg.data(), msg.size()};
    while (!tx->cork(std::span<const iovec>(&part, 1), &end)) {  // full: let the reader catch up
      ASSERT_FALSE(give_up.expired());
      ASSERT_TRUE(tx->flush().ok());
      auto r = rx->recv(in.data(), kLen);
      ASSERT_TRUE(r.ok());
      check(*r);
    }
    ASSERT_TRUE(tx->flush().ok());
    auto r = rx->recv(in.data(), kLen);  // about what was corked: the stream stays full
    ASSERT_TRUE(r.ok());
    check(*r);
  }
  while (received < filler + uint64_t{kMessages} * kLen) {
    ASSERT_FALSE(give_up.expired()) << "the corked messages never all arrived";
    ASSERT_TRUE(tx->flush().ok());
    auto r = rx->recv(in.data(), in.size());
    ASSERT_TRUE(r.ok());
    check(*r);
  }
  EXPECT_EQ(tx->flushedThrough(), end);
}

TEST(TcpEndpoint, ArmAndPollWakeOnData) {
  PairJob job;
  Endpoint* tx = job.ep(0, 1, 0);
  Endpoint* rx = job.ep(1, 0, 0);
  std::vector<pollfd> fds;
  EXPECT_FALSE(rx->arm(false, true, fds));
  ASSERT_EQ(fds.size(), 1u);
  EXPECT_TRUE(fds[0].events & POLLIN);
  // Causality, not durations: the sender sends once the receiver sleeps in poll(), and poll() must
  // return after the send began (it slept until then).
  const pid_t sleeper = braid_test_common::ThisThreadId();
  bool was_asleep = false;
  std::atomic<int64_t> sent_at{0};
  std::thread t([&] {
    was_asleep = braid_test_common::WaitUntilBlockedIn(sleeper, braid_test_common::kPollSyscalls);
    sent_at = Clock::now().time_since_epoch().count();
    EXPECT_EQ(*tx->send("ping", 4), 4u);
  });
  int n = poll(fds.data(), fds.size(), 30000);
  int64_t woke_at = Clock::now().time_since_epoch().count();
  rx->disarm(fds);
  t.join();
  EXPECT_TRUE(was_asleep) << "the receiver never slept in poll()";
  EXPECT_EQ(n, 1);
  EXPECT_TRUE(fds[0].revents & POLLIN);
  EXPECT_GE(woke_at, sent_at.load()) << "poll() returned before any data was sent";
  // Peeked but not consumed: progress is possible without sleeping.
  ASSERT_TRUE(WaitFor(rx, [&] { return rx->peek(4)->size() == 4; }));
  fds.clear();
  EXPECT_TRUE(rx->arm(false, true, fds));
  rx->disarm(fds);
  // A writable socket wakes a sender at once.
  fds.clear();
  EXPECT_FALSE(tx->arm(true, false, fds));
  ASSERT_EQ(fds.size(), 1u);
  EXPECT_EQ(poll(fds.data(), fds.size(), 1000), 1);
  EXPECT_TRUE(fds[0].revents & POLLOUT);
  tx->disarm(fds);
}

TEST(TcpEndpoint, PeerCloseIsARemoteErrorNamingThePeer) {
  PairJob job;
  Endpoint* rx = job.ep(0, 1, 0);
  std::string blob1 = job.blobs[1].substr(5);
  ASSERT_TRUE(job.ep(1, 0, 0)->send("bye", 3).ok());
  job.eps[1].clear();  // rank 1 "exits"
  job.inst[1].reset();
  // Bytes sent before the close are still delivered, then the error.
  char buf[8];
  size_t got = 0;
  Status err;
  ASSERT_TRUE(WaitFor(rx, [&] {
    auto n = rx->recv(buf + got, sizeof(buf) - got);
    if (!n.ok()) {
      err = n.status();
      return true;
    }
    got += *n;
    return false;
  }));
  EXPECT_EQ(got, 3u);
  EXPECT_EQ(std::string(buf, 3), "bye");
  EXPECT_EQ(err.cls(), ErrorClass::kRemote);
  EXPECT_EQ(err.message(), "rank 1 on host host1 (" + blob1 +
                               ") closed the connection: it probably exited or crashed");
  // Sticky, and arm() reports it at once so the engine does not sleep.
  EXPECT_EQ(rx->peek(8).status().cls(), ErrorClass::kRemote);
  std::vector<pollfd> fds;
  EXPECT_TRUE(rx->arm(true, true, fds));
  // Sending fails too (at once or after the reset arrives).
  Deadline d = Deadline::After(5000);
  Status send_err;
  std::vector<char> chunk(1 << 16, 'x');
  while (send_err.ok() && !d.expired()) send_err = rx->send(chunk.data(), chunk.size()).status();
  EXPECT_EQ(send_err.cls(), ErrorClass::kRemote);
}

TEST(TcpEndpoint, ShutdownIsReportedAsSuchAfterTheDataArrives) {
  PairJob job;
  Endpoint* a = job.ep(1, 0, 0);  // rank 1 fails and shuts its stream down
  Endpoint* b = job.ep(0, 1, 0);
  ASSERT_EQ(*a->send("abc", 3), 3u);
  a->shutdown();
  a->shutdown();  // idempotent
  EXPECT_EQ(a->send("x", 1).status().cls(), ErrorClass::kAborted);
  EXPECT_EQ(a->peek(1).status().cls(), ErrorClass::kAborted);
  char buf[8];
  size_t got = 0;
  Status err;
  ASSERT_TRUE(WaitFor(b, [&] {
    auto n = b->recv(buf + got, sizeof(buf) - got);
    if (!n.ok())
      err = n.status();
    else
      got += *n;
    return !n.ok();
  }));
  ASSERT_EQ(got, 3u);  // the marker byte never shows up in the stream
  EXPECT_EQ(std::string(buf, 3), "abc");
  EXPECT_EQ(err.cls(), ErrorClass::kRemote);
  EXPECT_NE(err.message().find("rank 1 on host host1 (" + job.blobs[1].substr(5) +
                               ") shut the stream down after a failure of its own operation"),
            std::string::npos)
      << err.message();
  EXPECT_EQ(b->send("y", 1).status().cls(), ErrorClass::kRemote);
}

TEST(TcpEndpoint, ShutdownRightAfterAnExactlySizedReadIsStillRecognised) {
  PairJob job;
  Endpoint* a = job.ep(1, 0, 0);
  Endpoint* b = job.ep(0, 1, 0);
  const char header[16] = "0123456789abcde";
  ASSERT_EQ(*a->send(header, 16), 16u);
  a->shutdown();
  char got[16];
  size_t n = 0;
  ASSERT_TRUE(WaitFor(b, [&] {
    auto r = b->recv(got + n, 16 - n);  // exactly the header, never more
    EXPECT_TRUE(r.ok());
    n += r.ok() ? *r : 0;
    return n == 16;
  }));
  EXPECT_EQ(std::memcmp(got, header, 16), 0);
  Status err;
  ASSERT_TRUE(WaitFor(b, [&] {
    auto r = b->recv(got, 16);
    if (!r.ok()) err = r.status();
    return !r.ok();
  }));
  EXPECT_NE(err.message().find("shut the stream down"), std::string::npos) << err.message();
}

TEST(TcpEndpoint, BlockedSenderWakesAndFailsWhenThePeerShutsDown) {
  PairJob job;
  Endpoint* tx = job.ep(0, 1, 0);
  Endpoint* rx = job.ep(1, 0, 0);  // never reads
  std::vector<char> chunk(1 << 20, 'z');
  ASSERT_NO_FATAL_FAILURE(FillStream(tx, 'z'));  // until a send accepts nothing
  std::thread t([&] { rx->shutdown(); });
  // Sleep like the engine until a send fails. The receiver's window may still open a little
  // (autotuning) and wake the sender with room; then it sends and sleeps again. What must hold:
  // the sender wakes, and once poll() has seen the FIN, the next send fails (before the fix, a
  // send into a reopened window succeeded and the failure waited for the buffer to fill again).
  Result<size_t> r = size_t{0};
  Deadline give_up = Deadline::After(20000);
  while (r.ok()) {
    ASSERT_FALSE(give_up.expired()) << "the sender never failed after the peer shut down";
    std::vector<pollfd> fds;
    bool saw_hangup = false;
    if (!tx->arm(true, false, fds)) {
      ASSERT_EQ(poll(fds.data(), fds.size(), 10000), 1) << "the blocked sender did not wake";
      saw_hangup = fds[0].revents & (POLLRDHUP | POLLHUP | POLLERR);
    }
    tx->disarm(fds);
    r = tx->send(chunk.data(), chunk.size());
    if (saw_hangup) {
      ASSERT_FALSE(r.ok()) << "poll() saw the FIN (revents " << fds[0].revents
                           << ") but the next send accepted " << *r << " bytes";
    }
  }
  t.join();
  EXPECT_EQ(r.status().cls(), ErrorClass::kRemote);
  EXPECT_NE(r.status().message().find("shut the stream down"), std::string::npos)
      << r.status().message();
}

TEST(TcpTransport, StrangersDuringConnectAreRejected) {
  Job job(2, 2);
  auto target = ParseHostPort(job.blobs[1].substr(5));
  ASSERT_TRUE(target.ok());
  // Strangers reach rank 1's listener before and while the ranks connect.
  std::vector<Fd> idle;
  for (int i = 0; i < 20; ++i) {
    auto fd = ConnectWithDeadline(*target, Deadline::After(2000));
    ASSERT_TRUE(fd.ok());
    idle.push_back(std::move(*fd));
  }
  std::atomic<int> rejected{0};
  std::atomic<bool> connected{false};
  std::thread stranger([&] {
    // Garbage.
    auto g = ConnectWithDeadline(*target, Deadline::After(2000));
    auto w = ConnectWithDeadline(*target, Deadline::After(2000));
    connected = true;
    ASSERT_TRUE(g.ok());
    ASSERT_TRUE(w.ok());
    std::vector<uint8_t> junk(kHandshakeClientBytes, 0xee);
    (void)!send(g->get(), junk.data(), junk.size(), MSG_NOSIGNAL);
    // Wrong secret, well-formed, claiming to be rank 0 channel 0. (If the ranks finish first,
    // connect() closes the pending stranger: rejected all the same.)
    HandshakeHello h;
    h.purpose = 2;
    h.rank = 0;
    h.nranks = 2;
    h.channel = 0;
    if (!HandshakeClient(w->get(), std::vector<uint8_t>(32, 7), h, Deadline::After(5000)).ok())
      ++rejected;
    // Garbage socket: the server closes it.
    char c;
    Deadline d = Deadline::After(4000);
    while (!d.expired()) {
      pollfd p{g->get(), POLLIN, 0};
      if (poll(&p, 1, 100) > 0) {
        ssize_t n = recv(g->get(), &c, 1, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN)) {
          ++rejected;
          break;
        }
      }
    }
  });
  // The strangers are queued at the listener before the ranks start.
  Deadline queued = Deadline::After(5000);
  while (!connected && !queued.expired()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto start = Clock::now();
  auto st = job.connectAll(10000);
  int64_t ms = ElapsedMs(start);
  stranger.join();
  ASSERT_TRUE(st[0].ok()) << st[0].message();
  ASSERT_TRUE(st[1].ok()) << st[1].message();
  EXPECT_EQ(rejected.load(), 2);
  // The real connections did not wait for the strangers' handshake limit.
  EXPECT_LT(ms, 3000);
  // And work.
  ASSERT_EQ(*job.ep(0, 1, 1)->send("ok", 2), 2u);
  char buf[2];
  ASSERT_TRUE(WaitFor(job.ep(1, 0, 1), [&] { return job.ep(1, 0, 1)->peek(2)->size() == 2; }));
  ASSERT_EQ(*job.ep(1, 0, 1)->recv(buf, 2), 2u);
  EXPECT_EQ(std::string(buf, 2), "ok");
  // finishConnect closes the listener: nobody can connect any more.
  EXPECT_TRUE(job.inst[1]->finishConnect().ok());
  auto late = ConnectWithDeadline(*target, Deadline::After(1000));
  EXPECT_FALSE(late.ok());
}

// A peer whose listener is up serves connections before it calls connect() itself (its
// listener's thread authenticates them; they wait for its connect): rank 0 connects to rank 1,
// which has not called connect() yet, and the endpoints then work both ways.
TEST(TcpTransport, AConnectionArrivingBeforeThePeersConnectWaitsForIt) {
  Job job(2, 1);
  Endpoints out0;
  Status st0 = job.inst[0]->connect({1}, job.blobs, Deadline::After(5000), &out0);
  ASSERT_TRUE(st0.ok()) << st0.message();
  Endpoints out1;
  Status st1 = job.inst[1]->connect({0}, job.blobs, Deadline::After(5000), &out1);
  ASSERT_TRUE(st1.ok()) << st1.message();
  ASSERT_EQ(*out0[0][0]->send("hi", 2), 2u);
  char buf[2];
  ASSERT_TRUE(WaitFor(out1[0][0].get(), [&] { return out1[0][0]->peek(2)->size() == 2; }));
  ASSERT_EQ(*out1[0][0]->recv(buf, 2), 2u);
  EXPECT_EQ(std::string(buf, 2), "hi");
}

// The rank that accepts waits for a peer that never connects, and times out naming it.
TEST(TcpTransport, PeerThatNeverConnectsTimesOutNamingIt) {
  Job job(2, 1);
  // Rank 0 never calls connect(): rank 1 waits for its connection.
  Endpoints out;
  auto start = Clock::now();
  Status st = job.inst[1]->connect({0}, job.blobs, Deadline::After(1000), &out);
  EXPECT_EQ(st.cls(), ErrorClass::kTimeout);
  EXPECT_NE(st.message().find("from rank 0 on host host0"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("it never connected"), std::string::npos) << st.message();
  EXPECT_LT(ElapsedMs(start), 2500);
}

TEST(TcpTransport, RefusedPeerTimesOutWithTheLastError) {
  Job job(2, 1);
  job.inst[1].reset();  // its listener is gone
  Endpoints out;
  Status st = job.inst[0]->connect({1}, job.blobs, Deadline::After(700), &out);
  EXPECT_EQ(st.cls(), ErrorClass::kTimeout);
  EXPECT_NE(st.message().find("Connection refused"), std::string::npos) << st.message();
}

TEST(TcpTransport, CreateNeedsASecretAndAValidInterface) {
  TransportContext ctx = Context(0, 2, 1);
  ctx.secret.clear();
  EXPECT_FALSE(TcpTransportFactory()->create(ctx).ok());
  ctx = Context(0, 2, 1);
  ctx.socket_ifname = "no_such_if0";
  auto r = TcpTransportFactory()->create(ctx);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().cls(), ErrorClass::kInvalidArgument);
  ctx.socket_ifname = "=lo";
  ctx.all_on_one_host = false;
  auto lo = TcpTransportFactory()->create(ctx);
  ASSERT_TRUE(lo.ok()) << lo.status().message();
  EXPECT_EQ((*lo)->localBlob().rfind("tcp1 127.0.0.1:", 0), 0u);
  EXPECT_STREQ(TcpTransportFactory()->name(), "tcp");
  EXPECT_EQ(TcpTransportFactory()->priority(), 100);
  EXPECT_FALSE((*lo)->canConnect(1, {(*lo)->localBlob(), "garbage"}));
}

// Lazy connections (BRAID_LAZY_CONNECT, lazy_endpoint.h).

// connect() opens nothing; every stream connects when both of its ranks first use it, carries
// the same bytes as an eagerly made one, and the listener keeps serving after finishConnect().
class TcpLazyStream : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(TcpLazyStream, ConnectOnFirstUseBothDirectionsAllChannels) {
  auto [n, c] = GetParam();
  const int sockets = ConnectedTcpSockets();
  Job job(n, c, /*lazy=*/true);
  auto start = Clock::now();
  auto st = job.connectAll(10000);
  for (int r = 0; r < n; ++r) ASSERT_TRUE(st[r].ok()) << st[r].message();
  EXPECT_LT(ElapsedMs(start), 1000);  // nobody waited for anybody
  for (int r = 0; r < n; ++r) EXPECT_TRUE(job.inst[r]->finishConnect().ok());
  EXPECT_EQ(ConnectedTcpSockets(), sockets);
  EXPECT_NE(job.ep(0, 1, 0)->describe().find("not connected yet (connecting"), std::string::npos)
      << job.ep(0, 1, 0)->describe();
  EXPECT_NE(job.ep(1, 0, 0)->describe().find("not connected yet (waiting for it to connect)"),
            std::string::npos)
      << job.ep(1, 0, 0)->describe();
  std::vector<std::string> err(n);
  std::vector<std::thread> t;
  for (int r = 0; r < n; ++r) t.emplace_back([&, r] { err[r] = Stream(job, r); });
  for (auto& x : t) x.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(err[r], "") << "rank " << r;
  // One connection per pair and channel, both of its ends in this process.
  EXPECT_EQ(ConnectedTcpSockets() - sockets, n * (n - 1) * c);
  EXPECT_NE(job.ep(0, 1, 0)->describe().find("tcp to rank 1 on host host1 (127.0.0.1:"),
            std::string::npos)
      << job.ep(0, 1, 0)->describe();
  EXPECT_EQ(job.ep(0, 1, 0)->bytesSent(), StreamBytes(0, 1, 0));
  EXPECT_EQ(job.ep(1, 0, 0)->bytesReceived(), StreamBytes(0, 1, 0));
}

INSTANTIATE_TEST_SUITE_P(Shapes, TcpLazyStream,
                         ::testing::Values(std::make_pair(2, 1), std::make_pair(3, 2)));

// Sends `text` on `tx` and reads it on `rx`, driving both (each side connects its end).
std::string Exchange(Endpoint* tx, Endpoint* rx, const std::string& text) {
  size_t sent = 0;
  std::string got;
  Deadline d = Deadline::After(5000);
  while (got.size() < text.size()) {
    if (d.expired()) return "timed out";
    if (sent < text.size()) {
      auto n = tx->send(text.data() + sent, text.size() - sent);
      if (!n.ok()) return n.status().message();
      sent += *n;
    }
    char buf[64];
    auto n = rx->recv(buf, sizeof(buf));
    if (!n.ok()) return n.status().message();
    got.append(buf, *n);
    if (got.size() >= text.size()) break;
    std::vector<pollfd> fds;
    const bool ready = tx->arm(sent < text.size(), false, fds) | rx->arm(false, true, fds);
    if (!ready) poll(fds.data(), fds.size(), 100);
    tx->disarm(fds);
    rx->disarm(fds);
  }
  return got == text ? "" : "got '" + got + "'";
}

// Of three ranks, only the pair that talks connects, on the channel it uses; which end sends
// first does not matter (rank 2 accepts from rank 0, and connects to nobody).
TEST(TcpLazy, OnlyThePairThatTalksConnects) {
  const int sockets = ConnectedTcpSockets();
  Job job(3, 2, /*lazy=*/true);
  auto st = job.connectAll(5000);
  for (auto& s : st) ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(Exchange(job.ep(2, 0, 1), job.ep(0, 2, 1), "from the acceptor"), "");
  EXPECT_EQ(Exchange(job.ep(0, 2, 1), job.ep(2, 0, 1), "and back"), "");
  EXPECT_EQ(ConnectedTcpSockets() - sockets, 2);
  EXPECT_NE(job.ep(0, 2, 0)->describe().find("not connected yet"), std::string::npos);
  EXPECT_NE(job.ep(0, 1, 1)->describe().find("not connected yet"), std::string::npos);
}

// A peer whose listener is gone (its process exited) refuses the connection: a RemoteError
// naming it, reported as a death to the cause board, well before any timeout.
TEST(TcpLazy, RefusedConnectionIsARemoteErrorNamingThePeer) {
  Job job(2, 1, /*lazy=*/true);
  Endpoints out;
  ASSERT_TRUE(job.inst[0]->connect({1}, job.blobs, Deadline::After(1000), &out).ok());
  job.inst[1].reset();  // its listener is gone
  Endpoint* ep = out[0][0].get();
  auto start = Clock::now();
  Status err;
  Deadline d = Deadline::After(5000);
  while (err.ok() && !d.expired()) {
    auto n = ep->send("x", 1);
    if (!n.ok()) {
      err = n.status();
      break;
    }
    std::vector<pollfd> fds;
    if (!ep->arm(true, false, fds)) poll(fds.data(), fds.size(), 100);
    ep->disarm(fds);
  }
  EXPECT_LT(ElapsedMs(start), 4000);
  EXPECT_EQ(err.cls(), ErrorClass::kRemote) << err.message();
  EXPECT_NE(err.message().find("rank 1 on host host1"), std::string::npos) << err.message();
  EXPECT_NE(err.message().find("refused the connection"), std::string::npos) << err.message();
  auto cause = job.causes[0]->first();
  ASSERT_TRUE(cause.has_value());
  EXPECT_EQ(cause->rank, 1);
  EXPECT_EQ(cause->reason, FailureCause::Reason::kDied);
  // Sticky: the next call fails the same way, and so does an arm (as progress).
  EXPECT_FALSE(ep->send("x", 1).ok());
  std::vector<pollfd> fds;
  EXPECT_TRUE(ep->arm(true, true, fds));
  ep->disarm(fds);
}

// The first receive after the connection came up reads nothing unless this rank sent first, so
// that its own first message leaves before it acts on the peer's (the call agreement relies on
// that, as with connections made at init); the bytes are all there on the next call.
TEST(TcpLazy, TheFirstReceiveAfterConnectingWaitsForThisRanksSend) {
  Job job(2, 1, /*lazy=*/true);
  auto st = job.connectAll(5000);
  for (auto& s : st) ASSERT_TRUE(s.ok()) << s.message();
  Endpoint* a = job.ep(0, 1, 0);  // connects
  Endpoint* b = job.ep(1, 0, 0);  // accepts
  // Rank 0 connects and sends; rank 1 only polls with arm() until its end is up (arm() makes
  // the connection: no send or receive of rank 1 has run). Over loopback a send that returned
  // has put its bytes in the peer's socket.
  auto* lazy_b = dynamic_cast<LazyEndpoint*>(b);
  ASSERT_NE(lazy_b, nullptr);
  size_t sent = 0;
  Deadline d = Deadline::After(5000);
  while (!d.expired() && !(sent == 5 && lazy_b->connected())) {
    if (sent < 5) {
      auto n = a->send("hello" + sent, 5 - sent);
      ASSERT_TRUE(n.ok()) << n.status().message();
      sent += *n;
    }
    std::vector<pollfd> fds;
    if (!b->arm(false, true, fds)) poll(fds.data(), fds.size(), 10);
    b->disarm(fds);
  }
  ASSERT_EQ(sent, 5u);
  ASSERT_TRUE(lazy_b->connected()) << b->describe();
  char buf[8];
  auto held = b->recv(buf, sizeof(buf));
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(*held, 0u);  // held: rank 1 has not sent yet
  EXPECT_TRUE(WaitFor(b, [&] { return b->peek(8)->size() == 5; }));
  auto n = b->recv(buf, sizeof(buf));
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(std::string(buf, *n), "hello");
  // A send first lifts the hold: the peer's next bytes are read at once.
  ASSERT_EQ(*job.ep(0, 1, 0)->send("again", 5), 5u);
  EXPECT_EQ(Exchange(job.ep(1, 0, 0), job.ep(0, 1, 0), "back"), "");
}

// A rank waiting for a peer's connection stops waiting once the communicator has a cause (a
// notice that some rank failed): that peer may never come.
TEST(TcpLazy, ACauseOnTheBoardEndsAWaitForAPeer) {
  Job job(2, 1, /*lazy=*/true);
  Endpoints out;
  ASSERT_TRUE(job.inst[1]->connect({0}, job.blobs, Deadline::After(1000), &out).ok());
  Endpoint* ep = out[0][0].get();
  char buf[4];
  auto n = ep->recv(buf, sizeof(buf));
  ASSERT_TRUE(n.ok()) << n.status().message();
  EXPECT_EQ(*n, 0u);
  FailureCause c;
  c.reason = FailureCause::Reason::kDied;
  c.rank = 0;
  c.pid = 4242;
  c.host = "host0";
  job.causes[1]->offer(c);
  n = ep->recv(buf, sizeof(buf));
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().cls(), ErrorClass::kRemote);
  EXPECT_NE(n.status().message().find("gave up connecting with rank 0"), std::string::npos)
      << n.status().message();
  EXPECT_NE(n.status().message().find(c.describe()), std::string::npos) << n.status().message();
}

// A connection the peer made that this rank never used (it waits in this rank's stash) is still
// marked on shutdown(): the peer reads "shut the stream down", not a crash of this rank.
TEST(TcpLazy, ShutdownMarksAConnectionThePeerMadeButThisRankNeverUsed) {
  Job job(2, 2, /*lazy=*/true);
  auto st = job.connectAll(5000);
  for (auto& s : st) ASSERT_TRUE(s.ok()) << s.message();
  auto* a = dynamic_cast<LazyEndpoint*>(job.ep(0, 1, 0));
  ASSERT_NE(a, nullptr);
  // Rank 0 connects channel 0 by sending on it; rank 1 drives its listener only through its
  // channel 1 endpoint, so channel 0's connection lands in its stash, unused.
  Deadline d = Deadline::After(5000);
  char buf[4];
  while (!a->connected() && !d.expired()) {
    ASSERT_TRUE(a->send("ab", 2).ok());
    ASSERT_TRUE(job.ep(1, 0, 1)->recv(buf, sizeof(buf)).ok());
    std::vector<pollfd> fds;
    const bool ready = a->arm(true, false, fds) | job.ep(1, 0, 1)->arm(false, true, fds);
    if (!ready) poll(fds.data(), fds.size(), 10);
    a->disarm(fds);
    job.ep(1, 0, 1)->disarm(fds);
  }
  ASSERT_TRUE(a->connected());
  job.ep(1, 0, 0)->shutdown();
  Status err;
  Deadline until = Deadline::After(5000);
  while (err.ok() && !until.expired()) {
    auto n = a->recv(buf, sizeof(buf));
    if (!n.ok()) err = n.status();
    std::vector<pollfd> fds;
    if (err.ok() && !a->arm(false, true, fds)) poll(fds.data(), fds.size(), 10);
    a->disarm(fds);
  }
  EXPECT_EQ(err.cls(), ErrorClass::kRemote) << err.message();
  EXPECT_NE(err.message().find("shut the stream down"), std::string::npos) << err.message();
}

// shutdown() before the connection was made: later calls fail (nothing to mark on a stream
// that never existed), and nothing connects.
TEST(TcpLazy, ShutdownBeforeConnectingFailsLaterCalls) {
  const int sockets = ConnectedTcpSockets();
  Job job(2, 1, /*lazy=*/true);
  auto st = job.connectAll(5000);
  for (auto& s : st) ASSERT_TRUE(s.ok()) << s.message();
  Endpoint* ep = job.ep(0, 1, 0);
  ep->shutdown();
  ep->shutdown();  // idempotent
  auto n = ep->send("x", 1);
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().cls(), ErrorClass::kAborted);
  EXPECT_NE(n.status().message().find("tcp to rank 1"), std::string::npos) << n.status().message();
  EXPECT_FALSE(ep->peek(1).ok());
  EXPECT_EQ(ConnectedTcpSockets(), sockets);
}

// Strangers on the listener that stays open for lazy connections (idle ones, garbage) do not
// keep the real pair from connecting and talking; the garbage is dropped. (A stranger's
// handshake moves only while its rank has a connection pending: the stranger then times out.)
TEST(TcpLazy, StrangersOnTheListenerDoNotStopTheRealPair) {
  Job job(2, 1, /*lazy=*/true);
  auto st = job.connectAll(5000);
  for (auto& s : st) ASSERT_TRUE(s.ok()) << s.message();
  for (auto& i : job.inst) EXPECT_TRUE(i->finishConnect().ok());
  auto target = ParseHostPort(job.blobs[1].substr(5));
  ASSERT_TRUE(target.ok());
  std::vector<Fd> strangers;
  for (int i = 0; i < 10; ++i) {
    auto fd = ConnectWithDeadline(*target, Deadline::After(2000));
    ASSERT_TRUE(fd.ok()) << fd.status().message();
    strangers.push_back(std::move(*fd));
  }
  std::vector<uint8_t> junk(kHandshakeClientBytes, 0xee);
  ASSERT_GT(send(strangers[0].get(), junk.data(), junk.size(), MSG_NOSIGNAL), 0);
  // Rank 1 drives its listener (and so the strangers' handshakes) while it waits for rank 0;
  // the strangers are queued ahead of rank 0's connection.
  auto start = Clock::now();
  EXPECT_EQ(Exchange(job.ep(0, 1, 0), job.ep(1, 0, 0), "through the crowd"), "");
  EXPECT_LT(ElapsedMs(start), 3000);
  // The garbage was answered by closing its connection.
  Deadline d = Deadline::After(3000);
  bool closed = false;
  while (!closed && !d.expired()) {
    char c;
    pollfd p{strangers[0].get(), POLLIN, 0};
    if (poll(&p, 1, 100) > 0) {
      ssize_t n = recv(strangers[0].get(), &c, 1, MSG_DONTWAIT);
      closed = n == 0 || (n < 0 && errno != EAGAIN);
    }
  }
  EXPECT_TRUE(closed);
}

}  // namespace
}  // namespace braid
