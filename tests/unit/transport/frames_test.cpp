// The seam's frame (transport/wire/detail/frames.h): small bytes inline, larger ones in one
// reference-counted block, another owner's bytes shared until the last reference goes; and the
// ZeroMQ link's conversions (transport/zmq/zmq_context.h), which share a block with ZeroMQ
// instead of copying it and keep a received message whole.
#include "transport/wire/detail/frames.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "transport/zmq/zmq_context.h"

using namespace distrl::transport::detail;

namespace {

TEST(FrameTest, SmallBytesAreInlineAndLargeOnesShareOneBlock) {
  const std::string small(Frame::kInline, 's'), large(Frame::kInline + 1, 'L');
  Frame a(small.data(), small.size());
  EXPECT_EQ(a.retain(), nullptr);  // inline: nothing to share
  Frame a2 = a;
  static_cast<char*>(a2.data())[0] = 'x';  // a copy of inline bytes is a copy
  EXPECT_EQ(a.to_string(), small);

  Frame b(large.data(), large.size());
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.data()) % 16, 0u);  // tensors are read in place
  Frame b2 = b;                                                    // shares
  EXPECT_EQ(b2.data(), b.data());
  Frame b3 = std::move(b);
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(b3.to_string(), large);
  EXPECT_EQ(b2.view(), large);

  Frame none;
  EXPECT_EQ(none.size(), 0u);
  EXPECT_EQ(none.to_string(), "");
}

TEST(FrameTest, AnotherOwnersBytesLiveUntilTheLastFrameGoes) {
  auto owner = std::make_shared<std::string>(1000, 'o');
  std::weak_ptr<std::string> watch = owner;
  const char* bytes = owner->data();
  {
    Frame f = Frame::sharing(bytes, owner->size(), std::move(owner));
    EXPECT_EQ(f.data(), bytes);  // not copied
    Frame copy = f;
    { Frame gone = std::move(f); }
    EXPECT_FALSE(watch.expired());  // `copy` still holds it
    EXPECT_EQ(copy.view(), std::string(1000, 'o'));
  }
  EXPECT_TRUE(watch.expired());
  auto tiny = std::make_shared<std::string>("ab");
  std::weak_ptr<std::string> tiny_watch = tiny;
  Frame t = Frame::sharing(tiny->data(), tiny->size(), std::move(tiny));  // small: copied, owner let go
  EXPECT_TRUE(tiny_watch.expired());
  EXPECT_EQ(t.to_string(), "ab");
}

TEST(FrameTest, ZeroMQSharesABlockAndKeepsAReceivedMessageWhole) {
  const std::string large(4096, 'z');
  Frame f(large.data(), large.size());
  {
    zmq::message_t m = to_message(f);  // ZeroMQ holds a reference, not a copy
    EXPECT_EQ(m.data(), f.data());
    EXPECT_EQ(m.size(), large.size());
  }
  EXPECT_EQ(f.view(), large);  // ZeroMQ's release left the frame's own reference
  zmq::message_t received(large.data(), large.size());
  const void* at = received.data();
  Frame kept = to_frame(std::move(received));
  EXPECT_EQ(kept.data(), at);  // kept whole
  EXPECT_EQ(kept.view(), large);
  Frame small = to_frame(zmq::message_t("hi", 2));
  EXPECT_EQ(small.to_string(), "hi");
}

TEST(FrameTest, FramesCrossAZeroMQSocketPairWhole) {
  zmq::context_t ctx(1);
  zmq::socket_t a(ctx, zmq::socket_type::pair), b(ctx, zmq::socket_type::pair);
  a.bind("inproc://frames-test");
  b.connect("inproc://frames-test");
  Frames out;
  out.emplace_back("head", 4);
  out.emplace_back();
  out.emplace_back(std::string(100000, 'b').data(), 100000);
  ASSERT_TRUE(send_frames_nointr(a, out, zmq::send_flags::none));
  EXPECT_EQ(out.size(), 3u);  // still the caller's
  Frames in;
  auto next = [&](std::size_t max_parts) {
    Received got = Received::Nothing;
    for (int i = 0; i < 5000 && got == Received::Nothing; ++i) {
      got = recv_bounded(b, in, max_parts);
      if (got == Received::Nothing) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return got;
  };
  ASSERT_EQ(next(8), Received::Message);
  ASSERT_EQ(in.size(), 3u);
  EXPECT_EQ(in[0].to_string(), "head");
  EXPECT_EQ(in[1].size(), 0u);
  EXPECT_EQ(in[2].view(), std::string(100000, 'b'));
  ASSERT_TRUE(send_frames_nointr(a, out, zmq::send_flags::none));
  EXPECT_EQ(next(2), Received::TooManyParts);  // read to its end and dropped
}

}  // namespace
