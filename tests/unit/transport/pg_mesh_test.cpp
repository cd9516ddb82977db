// The process group's messages in one process: two Mesh endpoints over a real store and real
// links, one raw ZeroMQ client throwing malformed frames at rank 0's socket (as a stranger, or
// with rank 1's member identity). Bad frames are dropped; the next good message still arrives;
// mailboxes keep tags and groups apart.
#include "transport/collectives/detail/pg_mesh.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <future>
#include <thread>

#include <zmq_addon.hpp>

#include <torch/torch.h>

#include "common/host.h"
#include "transport/link/endpoints.h"
#include "transport/link/io_loop.h"
#include "transport/collectives/process_group.h"
#include "transport/bootstrap/store.h"

using namespace distrl::transport;
using namespace distrl::transport::detail;
using namespace std::chrono_literals;

namespace {

struct TwoMeshes {
  StoreServer server{"tcp://127.0.0.1:*"};
  Store s0{server.endpoint(), 5s}, s1{server.endpoint(), 5s};
  std::unique_ptr<Mesh> m0, m1;
  explicit TwoMeshes(std::size_t max_message_bytes = 1ull << 30, std::size_t max_queued_bytes = 2ull << 30) {
    ProcessGroupOptions o;
    o.max_message_bytes = max_message_bytes;
    o.max_queued_bytes = max_queued_bytes;
    o.transport = "tcp";
    o.timeout = 5s;
    auto f = std::async(std::launch::async, [&] { return std::make_unique<Mesh>(s1, "t", 1, 2, o); });
    m0 = std::make_unique<Mesh>(s0, "t", 0, 2, o);
    m1 = f.get();
  }
};

PgHeader header(int src, std::uint32_t group, std::int32_t tag) {
  PgHeader h;
  h.magic = kPgMagic;
  h.src = src;
  h.group = group;
  h.tag = tag;
  h.coll = kP2P;
  return h;
}

}  // namespace

namespace {

// A stranger's DEALER connected to rank 0's endpoint, read from the store like a peer would.
struct Stranger {
  zmq::context_t ctx;
  zmq::socket_t bad{ctx, zmq::socket_type::dealer};
  explicit Stranger(Store& store, const std::string& routing_id = "") {
    const std::string raw = store.get("t/addr/0");
    Address a;
    msgpack::unpack(raw.data(), raw.size()).get().convert(a);
    bad.set(zmq::sockopt::linger, 1000);
    if (!routing_id.empty()) bad.set(zmq::sockopt::routing_id, routing_id);
    bad.connect(a.tcp);
  }
  void send(const std::vector<std::string>& parts) {
    std::vector<zmq::message_t> frames;
    for (auto& p : parts) frames.emplace_back(p.data(), p.size());
    zmq::send_multipart(bad, frames);
  }
};

std::string bytes_of(const PgHeader& h) { return std::string(reinterpret_cast<const char*>(&h), sizeof(h)); }

// A routing id that the group's link takes for member `rank`'s: made with the member key (as
// only a member, which can read the store, could).
std::string member_id(Store& store, int rank) {
  return IoLoop::member_identity(rank, store.get("t/member_key"), 42) + "forged";
}

}  // namespace

TEST(PgMeshTest, MalformedFramesAreDroppedAndGoodOnesStillArrive) {
  TwoMeshes w;
  Stranger stranger(w.s0, member_id(w.s0, 1));  // what a member that goes wrong could send
  auto send = [&](const std::vector<std::string>& parts) { stranger.send(parts); };
  PgHeader wrong_magic = header(1, 0, 0);
  wrong_magic.magic = 0xdeadbeef;
  PgHeader wrong_src = header(7, 0, 0);
  PgHeader self_src = header(0, 0, 0);
  auto bytes = bytes_of;
  send({"only one frame"});
  send({"short header", "payload"});
  send({bytes(wrong_magic), "x"});
  send({bytes(wrong_src), "x"});
  send({bytes(self_src), "x"});
  send({bytes(header(1, 0, 0)), "y", "an extra frame"});

  // Pump the socket until all six were read and counted (each is dropped, none queued).
  for (auto until = Clock::now() + 5s; w.m0->bad_messages() < 6 && Clock::now() < until;) {
    EXPECT_FALSE(w.m0->try_recv(77, 1, 77).has_value());
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(w.m0->bad_messages(), 6u);
  // Then real messages from rank 1 on the stranger's own key (group 0, tag 0), on tag 3, and
  // one for another group.
  const float v[2] = {1.5f, 2.5f};
  const float u[1] = {7.0f};
  w.m1->send(0, header(1, 0, 0), u, sizeof(u), nullptr, nullptr);
  w.m1->send(0, header(1, 9, 3), v, sizeof(v), nullptr, nullptr);
  w.m1->send(0, header(1, 0, 3), v, sizeof(v), nullptr, nullptr);
  auto m = w.m0->recv(0, 1, 3, Clock::now() + 5s, "test recv");
  ASSERT_EQ(m.payload.size(), sizeof(v));
  EXPECT_EQ(std::memcmp(m.payload.data(), v, sizeof(v)), 0);
  EXPECT_EQ(m.h.group, 0u);
  EXPECT_TRUE(w.m0->try_recv(9, 1, 3).has_value());  // the other group's was kept for it
  // On the key the stranger forged, only rank 1's real message is there: the first thing
  // queued is its payload, not "x" or "y", and nothing follows it.
  auto first = w.m0->recv(0, 1, 0, Clock::now() + 5s, "test recv");
  ASSERT_EQ(first.payload.size(), sizeof(u));
  EXPECT_EQ(std::memcmp(first.payload.data(), u, sizeof(u)), 0);
  EXPECT_FALSE(w.m0->try_recv(0, 1, 0).has_value());
  EXPECT_EQ(w.m0->bad_messages(), 6u);
}

// Hostile-peer case 3: one well-formed 48-byte header claiming src=1 (data, or an abort)
// used to be taken for rank 1's and end the job, blaming rank 1. A message's src must now be
// the sending connection's: each member connects under a routing id "rpc-r<rank>-<tag>-...", the
// tag being the rank's under the group's member key, which no stranger knows (before, "pg-r1"
// alone was rank 1's id, and a stranger that connected first under it took rank 1's place). A
// member cannot speak for another either.
TEST(PgMeshTest, AStrangerCannotSpeakForAMember) {
  TwoMeshes w;
  const float u[1] = {5.0f};
  w.m1->send(0, header(1, 0, 1), u, sizeof(u), nullptr, nullptr);  // rank 1's connection is up
  ASSERT_TRUE(w.m0->recv(0, 1, 1, Clock::now() + 5s, "test recv").payload.size() == sizeof(u));
  Stranger stranger(w.s0), impostor(w.s0, "rpc-r1-x"), guesser(w.s0, "rpc-r1-0123456789abcdef-0000000000000000-c1"),
      member0(w.s0, member_id(w.s0, 0));
  PgHeader abort = header(1, 0, -1);
  abort.kind = static_cast<std::uint8_t>(PgKind::Abort);
  stranger.send({bytes_of(header(1, 0, 0)), "forged data"});
  stranger.send({bytes_of(abort), "TransportError\nforged abort"});
  impostor.send({bytes_of(header(1, 0, 0)), "forged under rank 1's old id"});
  guesser.send({bytes_of(abort), "TransportError\nforged under a guessed tag"});
  member0.send({bytes_of(abort), "TransportError\nrank 0 speaking for rank 1"});
  for (auto until = Clock::now() + 5s; w.m0->bad_messages() < 5 && Clock::now() < until;) {
    EXPECT_FALSE(w.m0->try_recv(0, 1, 0).has_value());
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(w.m0->bad_messages(), 5u);  // each read and dropped
  w.m1->send(0, header(1, 0, 0), u, sizeof(u), nullptr, nullptr);
  auto m = w.m0->recv(0, 1, 0, Clock::now() + 5s, "test recv");  // no abort: the real message
  ASSERT_EQ(m.payload.size(), sizeof(u));
  EXPECT_EQ(std::memcmp(m.payload.data(), u, sizeof(u)), 0);
  EXPECT_FALSE(w.m0->try_recv(0, 1, 0).has_value());
}

// Unread mailboxes are bounded (hostile-peer case 3: 1 MiB messages to mailboxes nobody reads
// took a rank from 198 to 794 MB): past max_queued_bytes a message is dropped and counted.
TEST(PgMeshTest, UnreadMailboxesStayWithinMaxQueuedBytes) {
  TwoMeshes w(1ull << 30, 2500);
  const std::vector<char> kb(1024, 'k');
  for (int tag = 100; tag < 105; ++tag) w.m1->send(0, header(1, 0, tag), kb.data(), kb.size(), nullptr, nullptr);
  for (auto until = Clock::now() + 5s; w.m0->bad_messages() < 3 && Clock::now() < until;) {
    (void)w.m0->try_recv(0, 1, 0);
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(w.m0->bad_messages(), 3u);  // two fit, three did not
  EXPECT_TRUE(w.m0->try_recv(0, 1, 100).has_value());
  EXPECT_TRUE(w.m0->try_recv(0, 1, 101).has_value());
  EXPECT_FALSE(w.m0->try_recv(0, 1, 102).has_value());
  // Read, they make room again.
  w.m1->send(0, header(1, 0, 7), kb.data(), kb.size(), nullptr, nullptr);
  EXPECT_EQ(w.m0->recv(0, 1, 7, Clock::now() + 5s, "test recv").payload.size(), kb.size());
}

// A message of thousands of frames is read away unkept (no mailbox grows) and counted.
TEST(PgMeshTest, AMessageOfTooManyFramesIsDropped) {
  TwoMeshes w;
  Stranger stranger(w.s0);
  std::vector<std::string> parts{bytes_of(header(1, 0, 0))};
  for (int i = 0; i < 10000; ++i) parts.emplace_back("z");
  stranger.send(parts);
  for (auto until = Clock::now() + 5s; w.m0->bad_messages() < 1 && Clock::now() < until;) {
    EXPECT_FALSE(w.m0->try_recv(0, 1, 0).has_value());
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(w.m0->bad_messages(), 1u);
  EXPECT_FALSE(w.m0->try_recv(0, 1, 0).has_value());
}

// Over max_message_bytes: a sender refuses with an error naming the option; a stranger's
// oversized frame closes only its own connection, unread; real traffic goes on.
TEST(PgMeshTest, MessagesOverTheSizeLimitAreRefusedOnBothEnds) {
  TwoMeshes w(64 << 10);
  const std::vector<char> big((64 << 10) + 1, 'b');
  try {
    w.m1->send(0, header(1, 0, 0), big.data(), big.size(), nullptr, nullptr);
    ADD_FAILURE() << "an oversized send was not refused";
  } catch (const distrl::TransportError& e) {
    EXPECT_NE(std::string(e.what()).find("max_message_bytes"), std::string::npos) << e.what();
  }
  Stranger stranger(w.s0);
  stranger.send({bytes_of(header(1, 0, 0)), std::string(big.begin(), big.end())});
  const float u[1] = {3.0f};
  w.m1->send(0, header(1, 0, 0), u, sizeof(u), nullptr, nullptr);
  auto m = w.m0->recv(0, 1, 0, Clock::now() + 5s, "test recv");
  ASSERT_EQ(m.payload.size(), sizeof(u));  // rank 1's message, not the stranger's
  EXPECT_EQ(std::memcmp(m.payload.data(), u, sizeof(u)), 0);
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(w.m0->try_recv(0, 1, 0).has_value());
}

TEST(PgMeshTest, WaitsEndAtTheDeadlineNamingTheRank) {
  TwoMeshes w;
  const auto start = Clock::now();
  try {
    w.m0->recv(0, 1, 0, Clock::now() + 300ms, "op");
    FAIL() << "no timeout";
  } catch (const distrl::TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
  }
  EXPECT_GE(Clock::now() - start, 300ms);  // held to the deadline, then let go (a hang is the test timeout)
  EXPECT_THROW(w.m0->recv(0, 0, 0, Clock::now() + 1s, "op"), distrl::Error);  // itself
  EXPECT_THROW(w.m0->send(5, header(0, 0, 0), "x", 1, nullptr, nullptr), distrl::Error);
}

namespace {

// Rank 0 is a real ZeroMQ process group; rank 1 is a bare Mesh in the same process that
// answers rank 0's messages with headers of its own making.
struct RealAndForged {
  StoreServer server{"tcp://127.0.0.1:*"};
  Store s0{server.endpoint(), 5s}, s1{server.endpoint(), 5s};
  std::shared_ptr<ProcessGroup> pg;
  std::unique_ptr<Mesh> fake;
  RealAndForged() {
    ProcessGroupOptions o;
    o.transport = "tcp";
    o.timeout = 5s;
    auto f = std::async(std::launch::async, [&] { return make_zmq_process_group(s0, 0, 2, o); });
    fake = std::make_unique<Mesh>(s1, "pg", 1, 2, o);
    answer([](PgHeader&, std::string&) {});  // the group's opening barrier
    pg = f.get();
  }
  // Receives rank 0's next collective message and answers it, after `forge` has had its way
  // with the echoed header and payload.
  void answer(const std::function<void(PgHeader&, std::string&)>& forge) {
    auto m = fake->recv(0, 0, -1, Clock::now() + 5s, "fake rank 1");
    PgHeader h = m.h;
    h.src = 1;
    std::string payload(static_cast<const char*>(m.payload.data()), m.payload.size());
    forge(h, payload);
    fake->send(0, h, payload.data(), payload.size(), nullptr, nullptr);
  }
};

// The all_reduce rank 0 runs while the fake answers; returns what it threw.
template <typename E>
std::string all_reduce_fails_with(const std::function<void(PgHeader&, std::string&)>& forge) {
  RealAndForged w;
  auto x = torch::ones({4});
  auto r = std::async(std::launch::async, [&] { w.pg->all_reduce(x); });
  w.answer(forge);
  try {
    r.get();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong type: ") + e.what();
  }
  return "no error";
}

}  // namespace

TEST(PgMeshTest, PeersHeadersAreCheckedAgainstTheCollective) {
  // A message from another collective of the sequence: the ranks are out of step.
  auto m = all_reduce_fails_with<MismatchError>([](PgHeader& h, std::string&) { h.seq += 1; });
  EXPECT_NE(m.find("same order"), std::string::npos) << m;
  // The right collective, but a step, chunk or size the algorithm does not expect.
  m = all_reduce_fails_with<distrl::ProtocolError>([](PgHeader& h, std::string&) { h.step += 1; });
  EXPECT_NE(m.find("rank 1 sent step 2/0 of 16 bytes, expected 1/0 of 16"), std::string::npos) << m;
  m = all_reduce_fails_with<distrl::ProtocolError>([](PgHeader& h, std::string&) { h.chunk = 3; });
  EXPECT_NE(m.find("sent step 1/3 of 16 bytes"), std::string::npos) << m;
  m = all_reduce_fails_with<distrl::ProtocolError>([](PgHeader&, std::string& p) { p.resize(8); });
  EXPECT_NE(m.find("sent step 1/0 of 8 bytes, expected 1/0 of 16"), std::string::npos) << m;
}

// Address records come from the store, where anyone who reaches it can write: a forged record
// is refused by name, by the unpack limits (a complete 100-element array, not a truncation).
TEST(EndpointsTest, AForgedAddressRecordIsRefusedByTheLimits) {
  StoreServer server("tcp://127.0.0.1:*");
  Store store(server.endpoint(), 5s);
  std::string forged("\xdc\x00\x64", 3);  // array16 of 100 elements
  forged += std::string(100, '\xc0');     // nil x 100
  store.set("x/1", forged);
  Address me{"me", host_id(), distrl::host_name(), "tcp://127.0.0.1:1", "", ""};
  try {
    exchange_addresses(store, "x/", 0, 2, me, 5s);
    FAIL() << "accepted";
  } catch (const distrl::ProtocolError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("address record of rank 1 is malformed"), std::string::npos) << m;
    EXPECT_NE(m.find("array size overflow"), std::string::npos) << m;
  }
}

namespace {
PgHeader collective_header(int src, std::uint64_t seq) {
  PgHeader h = header(src, 0, -1);
  h.coll = static_cast<std::uint8_t>(ProcessGroup::Kind::Broadcast);
  h.seq = seq;
  return h;
}
}  // namespace

// The hierarchical all_reduce's watch (zmq_group.cpp): a collective message of the watched group
// and number calls it once, with that message's header -- also when the message itself is dropped
// (over max_queued_bytes: the call was once skipped and unwatch_collective waited forever), and
// for one that came before the watch; other numbers, tags and groups do not.
TEST(PgMeshTest, AWatchedCollectiveNumberCallsBackOnceWhateverBecomesOfItsMessage) {
  TwoMeshes w(1ull << 30, 2500);
  std::atomic<int> calls{0};
  std::atomic<std::uint64_t> seen{0};
  auto on_mismatch = [&](const PgHeader& h) {
    seen = h.seq;
    ++calls;
  };
  const std::vector<char> big(4096, 'b');  // over max_queued_bytes: dropped
  w.m0->watch_collective(0, 5, on_mismatch);
  w.m1->send(0, collective_header(1, 4), "x", 1, nullptr, nullptr);  // another number
  w.m1->send(0, header(1, 0, 3), "y", 1, nullptr, nullptr);          // point-to-point
  w.m1->send(0, collective_header(1, 5), big.data(), big.size(), nullptr, nullptr);
  w.m1->send(0, collective_header(1, 5), "z", 1, nullptr, nullptr);  // the watch is spent
  for (auto until = Clock::now() + 5s; (calls < 1 || w.m0->bad_messages() < 1) && Clock::now() < until;)
    std::this_thread::sleep_for(1ms);
  w.m0->unwatch_collective();  // returns: no call is left under way
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(seen.load(), 5u);
  EXPECT_EQ(w.m0->bad_messages(), 1u);

  // A message that came first: the watch calls back as it is set.
  w.m1->send(0, collective_header(1, 9), "w", 1, nullptr, nullptr);
  w.m1->send(0, header(1, 0, 8), "v", 1, nullptr, nullptr);  // behind it on the same connection
  ASSERT_EQ(w.m0->recv(0, 1, 8, Clock::now() + 5s, "test recv").payload.size(), 1u);  // so number 9's is queued
  w.m0->watch_collective(0, 9, on_mismatch);
  EXPECT_EQ(calls.load(), 2);  // called here, on this thread
  EXPECT_EQ(seen.load(), 9u);
  w.m0->unwatch_collective();
}

// fail_locally fails this process's waits in a group with the type and reason given, naming no
// rank that did not send anything.
TEST(PgMeshTest, FailingAGroupLocallyEndsItsWaitsWithTheTypeGiven) {
  TwoMeshes w;
  auto waiting = std::async(std::launch::async, [&] { return w.m0->recv(3, 1, -1, Clock::now() + 5s, "op #2", 2); });
  std::this_thread::sleep_for(50ms);
  w.m0->fail_locally(3, "MismatchError", "rank 1 runs something else");
  try {
    waiting.get();
    FAIL() << "the wait went on";
  } catch (const distrl::transport::MismatchError& e) {
    EXPECT_EQ(std::string(e.what()), "op #2: rank 1 runs something else");
  }
  EXPECT_THROW(w.m0->recv(3, 1, 0, Clock::now() + 5s, "p2p"),
               distrl::transport::MismatchError);     // the group's every wait
  EXPECT_FALSE(w.m0->try_recv(0, 1, 0).has_value());  // other groups untouched
}
