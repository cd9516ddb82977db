// The I/O loop's boundary: a callback that throws is reported through on_dropped and the loop
// goes on serving; a message of more frames than max_parts never reaches on_request.
#include "transport/link/io_loop.h"

#include <gtest/gtest.h>

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>

#include <zmq_addon.hpp>

#include "transport/zmq/zmq_context.h"

using namespace distrl::transport::detail;
using namespace std::chrono_literals;

namespace {

struct Loop {
  std::mutex mu;
  std::vector<std::string> served, dropped;
  std::unique_ptr<IoLoop> io;
  std::string endpoint;

  explicit Loop(std::size_t max_parts) {
    IoLoop::Callbacks cb;
    cb.on_request = [this](Caller&&, Frames&& frames) {
      const std::string body = frames.at(0).to_string();
      if (body == "throw") throw std::runtime_error("a handler bug");
      std::lock_guard<std::mutex> lock(mu);
      served.push_back(body);
    };
    cb.on_reply = [](int, Frames&&) {};
    cb.on_peer_down = [](int, const std::string&) {};
    cb.on_tick = [](IoLoop::Clock::time_point) {};
    cb.next_deadline = [] { return IoLoop::Clock::time_point::max(); };
    cb.on_dropped = [this](const std::string& what) {
      std::lock_guard<std::mutex> lock(mu);
      dropped.push_back(what);
    };
    IoLoop::Options o;
    o.max_parts = max_parts;
    io = std::make_unique<IoLoop>(shared_zmq_context(), o, std::move(cb));
    endpoint = io->bind({"tcp://127.0.0.1:*"}).at(0);
    io->start();
  }
  ~Loop() { io->stop(); }

  bool wait_served(std::size_t n) {
    for (auto until = std::chrono::steady_clock::now() + 5s; std::chrono::steady_clock::now() < until;) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (served.size() >= n) return true;
      }
      std::this_thread::sleep_for(1ms);
    }
    return false;
  }
};

void send(zmq::socket_t& s, const std::vector<std::string>& parts) {
  std::vector<zmq::message_t> frames;
  for (auto& p : parts) frames.emplace_back(p.data(), p.size());
  zmq::send_multipart(s, frames);
}

}  // namespace

TEST(IoLoopTest, AThrowingCallbackIsReportedAndTheLoopGoesOn) {
  Loop loop(8);
  zmq::context_t ctx;
  zmq::socket_t peer(ctx, zmq::socket_type::dealer);
  peer.set(zmq::sockopt::linger, 0);
  peer.connect(loop.endpoint);
  send(peer, {"throw"});
  send(peer, {"after"});
  ASSERT_TRUE(loop.wait_served(1));
  std::lock_guard<std::mutex> lock(loop.mu);
  EXPECT_EQ(loop.served, std::vector<std::string>{"after"});
  ASSERT_EQ(loop.dropped.size(), 1u);
  EXPECT_NE(loop.dropped[0].find("serving a request failed: a handler bug"), std::string::npos) << loop.dropped[0];
}

TEST(IoLoopTest, AMessageOfTooManyFramesNeverReachesTheHandler) {
  Loop loop(4);  // routing id + 3 frames
  zmq::context_t ctx;
  zmq::socket_t peer(ctx, zmq::socket_type::dealer);
  peer.set(zmq::sockopt::linger, 0);
  peer.connect(loop.endpoint);
  send(peer, {"four", "a", "b", "c"});
  send(peer, {"three", "a", "b"});
  ASSERT_TRUE(loop.wait_served(1));
  std::lock_guard<std::mutex> lock(loop.mu);
  EXPECT_EQ(loop.served, std::vector<std::string>{"three"});
  ASSERT_EQ(loop.dropped.size(), 1u);
  EXPECT_NE(loop.dropped[0].find("more than 3 frames"), std::string::npos) << loop.dropped[0];
}

// A signal that lands while libzmq reads its command mailbox inside a send or receive (even a
// dontwait one) is EINTR, which cppzmq throws: a SIGTERM made processes fail with "Interrupted
// system call". Here this thread takes a signal every 20 us; the wrappers must neither throw nor
// lose or repeat a message. (Raw cppzmq threw ~900 times per million receives like these.)
TEST(ZmqSignalTest, SendsAndReceivesRideOutSignals) {
  struct sigaction sa {
  }, old{};
  sa.sa_handler = [](int) {};
  sa.sa_flags = SA_RESTART;
  ASSERT_EQ(::sigaction(SIGUSR2, &sa, &old), 0);
  zmq::context_t ctx;
  zmq::socket_t a(ctx, zmq::socket_type::pair), b(ctx, zmq::socket_type::pair);
  a.bind("inproc://signal-test");
  b.connect("inproc://signal-test");
  const pthread_t me = ::pthread_self();
  std::atomic<bool> stop{false};
  std::thread killer([&] {
    while (!stop) {
      ::pthread_kill(me, SIGUSR2);
      std::this_thread::sleep_for(20us);
    }
  });
  long sent = 0, received = 0, next = 0;
  bool in_order = true;
  try {
    for (long i = 0; i < 300000; ++i) {
      std::vector<zmq::message_t> parts;
      parts.emplace_back(&i, sizeof i);
      parts.emplace_back(std::string("payload"));
      if (send_multipart_nointr(a, parts, zmq::send_flags::dontwait)) ++sent;
      std::vector<zmq::message_t> got;
      while (recv_bounded(b, got, 4) == Received::Message) {
        long v = -1;
        std::memcpy(&v, got.at(0).data(), sizeof v);
        in_order = in_order && v >= next;
        next = v + 1;
        ++received;
      }
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw: " << e.what();
  }
  stop = true;
  killer.join();
  ::sigaction(SIGUSR2, &old, nullptr);
  std::vector<zmq::message_t> got;
  while (recv_bounded(b, got, 4) == Received::Message) ++received;
  EXPECT_EQ(received, sent);
  EXPECT_TRUE(in_order);
  EXPECT_GT(sent, 0);
}
