// The I/O loop's boundary: a callback that throws is reported through on_dropped and the loop
// goes on serving; a message of more frames than max_parts never reaches on_request.
#include "transport/detail/io_loop.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>

#include <zmq_addon.hpp>

#include "transport/detail/zmq_context.h"

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
