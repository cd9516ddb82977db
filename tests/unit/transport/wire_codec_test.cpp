// Wire format: round trips of every type that crosses the wire, and one test per refusal.
#include "transport/detail/wire_codec.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "tests/support/wire_craft.h"
#include "transport/detail/callable.h"

using namespace distrl::transport;
using namespace distrl::transport::detail;
using distrl::testing::descriptor;

namespace {

using Frames = std::vector<zmq::message_t>;

template <typename T>
Frames encode_value(const T& v, std::uint64_t id = 9) {
  Header h;
  h.call_id = id;
  h.src = 0;
  h.fn = "f";
  return encode_message(build_message(h, nullptr, 0, [&](Packer& pk) { pk.pack(v); }));
}

template <typename T>
T round_trip(const T& v) {
  DecodeFailure why;
  auto m = decode_message(encode_value(v), WireLimits{}, &why);
  EXPECT_TRUE(m.has_value()) << why.what;
  return m->template body_as<T>(nullptr, "test value");
}

Frames raw_message(std::uint32_t version, std::uint32_t nt, const std::string& desc, std::vector<std::size_t> frame_sizes) {
  return distrl::testing::tensor_request(version, 77, "f", nt, desc, frame_sizes);
}

DecodeFailure refuse(Frames frames, WireLimits limits = {}) {
  DecodeFailure why;
  auto m = decode_message(std::move(frames), limits, &why);
  EXPECT_FALSE(m.has_value());
  return why;
}

Frames bytes_frame(const std::string& s) { return distrl::testing::one_frame(s); }

struct Sample {
  std::string name;
  at::Tensor obs;
  std::vector<int> ids;
  std::optional<double> weight;
  MSGPACK_DEFINE(name, obs, ids, weight);
};

}  // namespace

TEST(WireCodecTest, RoundTripsEveryDtype) {
  for (auto dtype : {torch::kFloat32, torch::kFloat64, torch::kFloat16, torch::kBFloat16, torch::kInt8, torch::kInt16,
                     torch::kInt32, torch::kInt64, torch::kUInt8, torch::kBool, torch::kComplexFloat, torch::kComplexDouble}) {
    at::Tensor t = (torch::randn({3, 5}, torch::kFloat64) * 10).to(dtype);
    at::Tensor back = round_trip(t);
    EXPECT_EQ(back.scalar_type(), dtype);
    EXPECT_TRUE(torch::equal(back, t)) << c10::toString(dtype);
  }
}

TEST(WireCodecTest, RoundTripsShapesOfAnyRank) {
  at::Tensor scalar = torch::tensor(3.5);
  EXPECT_EQ(round_trip(scalar).dim(), 0);
  EXPECT_EQ(round_trip(scalar).item<double>(), 3.5);
  at::Tensor empty = torch::zeros({4, 0, 2});
  EXPECT_EQ(round_trip(empty).sizes(), empty.sizes());
  at::Tensor rank6 = torch::rand({2, 1, 3, 1, 2, 2});
  EXPECT_TRUE(torch::equal(round_trip(rank6), rank6));
}

TEST(WireCodecTest, NonContiguousTensorsAreMadeContiguous) {
  at::Tensor t = torch::arange(12, torch::kInt64).reshape({3, 4}).t();
  ASSERT_FALSE(t.is_contiguous());
  at::Tensor back = round_trip(t);
  EXPECT_TRUE(back.is_contiguous());
  EXPECT_TRUE(torch::equal(back, t));
}

TEST(WireCodecTest, LargeTensorsKeepTheirBufferAlive) {
  at::Tensor big = torch::rand({1 << 20});
  at::Tensor back;
  {
    DecodeFailure why;
    auto m = decode_message(encode_value(big), WireLimits{}, &why);
    ASSERT_TRUE(m);
    back = m->body_as<at::Tensor>(nullptr, "big");
  }  // the message is gone; the tensor still owns the received frame
  EXPECT_TRUE(torch::equal(back, big));
}

TEST(WireCodecTest, RoundTripsContainersAndUserStructs) {
  Sample s{"obs", torch::rand({2, 4}), {1, 2, 3}, 0.5};
  Sample back = round_trip(s);
  EXPECT_EQ(back.name, "obs");
  EXPECT_TRUE(torch::equal(back.obs, s.obs));
  EXPECT_EQ(back.ids, s.ids);
  EXPECT_EQ(back.weight, 0.5);

  std::map<std::string, std::vector<at::Tensor>> m{{"a", {torch::ones({2}), torch::zeros({1})}}, {"b", {}}};
  auto mb = round_trip(m);
  EXPECT_EQ(mb.at("a").size(), 2u);
  EXPECT_TRUE(torch::equal(mb.at("a")[0], torch::ones({2})));

  std::tuple<int, std::string, Bytes, std::optional<int>> t{-4, "x", Bytes{0, 255, 7}, std::nullopt};
  EXPECT_EQ(round_trip(t), t);
  EXPECT_EQ(round_trip(std::uint64_t{1} << 63), std::uint64_t{1} << 63);
  EXPECT_EQ(round_trip(true), true);
}

TEST(WireCodecTest, TypeMismatchNamesWhatWasExpected) {
  DecodeFailure why;
  auto m = decode_message(encode_value(42), WireLimits{}, &why);
  ASSERT_TRUE(m);
  try {
    m->body_as<std::string>(nullptr, "argument 1 of 'f'");
    FAIL();
  } catch (const distrl::ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("argument 1 of 'f': expected std::string, got msgpack int"), std::string::npos) << e.what();
  }
}

TEST(WireCodecTest, RejectsTruncatedHeader) {
  auto f = encode_value(std::string(100, 'x'));
  std::string head(static_cast<const char*>(f[0].data()), f[0].size() - 10);
  auto why = refuse(bytes_frame(head));
  EXPECT_NE(why.what.find("not valid msgpack"), std::string::npos) << why.what;
  EXPECT_FALSE(why.call_id);  // nothing to answer
}

TEST(WireCodecTest, RejectsBadMsgpack) {
  auto why = refuse(bytes_frame("\xc1\xc1\xc1"));  // 0xc1 is never used in msgpack
  EXPECT_NE(why.what.find("not valid msgpack"), std::string::npos) << why.what;
}

TEST(WireCodecTest, RejectsHeaderThatIsNotAMap) {
  msgpack::sbuffer b;
  msgpack::pack(b, std::vector<int>{1, 2});
  auto why = refuse(bytes_frame(std::string(b.data(), b.size())));
  EXPECT_NE(why.what.find("not a map"), std::string::npos) << why.what;
}

TEST(WireCodecTest, RejectsUnknownProtocolVersionButKeepsTheCallId) {
  auto why = refuse(raw_message(7, 1, descriptor(0, {1}, 0), {4}));
  EXPECT_NE(why.what.find("unsupported protocol version 7"), std::string::npos) << why.what;
  ASSERT_TRUE(why.call_id);
  EXPECT_EQ(*why.call_id, 77u);
}

TEST(WireCodecTest, RejectsFrameCountMismatch) {
  auto why = refuse(raw_message(1, 2, descriptor(0, {1}, 0), {4}));
  EXPECT_NE(why.what.find("announces 2 tensor frames, message has 1"), std::string::npos) << why.what;
}

TEST(WireCodecTest, RejectsTensorFrameShorterThanDescriptor) {
  auto why = refuse(raw_message(1, 1, descriptor(0, {1024}, 0), {100}));
  EXPECT_NE(why.what.find("tensor frame 1 has 100 bytes, descriptor says 4096"), std::string::npos) << why.what;
}

TEST(WireCodecTest, RejectsTensorFrameLongerThanDescriptor) {
  auto why = refuse(raw_message(1, 1, descriptor(0, {2}, 0), {9}));
  EXPECT_NE(why.what.find("has 9 bytes, descriptor says 8"), std::string::npos) << why.what;
}

TEST(WireCodecTest, RejectsUnknownDtype) {
  auto why = refuse(raw_message(1, 1, descriptor(200, {1}, 0), {4}));
  EXPECT_NE(why.what.find("unknown dtype code 200"), std::string::npos) << why.what;
}

TEST(WireCodecTest, RejectsAbsurdShapes) {
  auto huge = refuse(raw_message(1, 1, descriptor(0, {1ll << 40, 1ll << 40}, 0), {4}));
  EXPECT_NE(huge.what.find("absurd"), std::string::npos) << huge.what;
  auto negative = refuse(raw_message(1, 1, descriptor(0, {-3}, 0), {4}));
  EXPECT_NE(negative.what.find("negative dim"), std::string::npos) << negative.what;
  auto too_many = refuse(raw_message(1, 1, descriptor(0, std::vector<std::int64_t>(17, 1), 0), {4}));
  EXPECT_NE(too_many.what.find("17 dims"), std::string::npos) << too_many.what;
  auto frame = refuse(raw_message(1, 1, descriptor(0, {1}, 5), {4}));
  EXPECT_NE(frame.what.find("names frame 6"), std::string::npos) << frame.what;
}

TEST(WireCodecTest, RejectsOversizeMessage) {
  WireLimits small;
  small.max_message_bytes = 1000;
  auto why = refuse(raw_message(1, 1, descriptor(0, {1000}, 0), {4000}), small);
  EXPECT_NE(why.what.find("exceeds the limit of 1000 bytes"), std::string::npos) << why.what;
  EXPECT_TRUE(why.call_id);
}

TEST(WireCodecTest, RejectsTooManyFrames) {
  WireLimits small;
  small.max_frames = 2;
  auto why = refuse(raw_message(1, 3, descriptor(0, {1}, 0), {4, 4, 4}), small);
  EXPECT_NE(why.what.find("limit is 2"), std::string::npos) << why.what;
}

// msgpack-c's defaults would try to allocate for these; the limits refuse them first.
TEST(WireCodecTest, MsgpackLimitsRefuseHugeClaimsFromTinyInputs) {
  const std::string huge_array("\xdd\xff\xff\xff\xff", 5);  // array32 of 2^32-1 elements
  EXPECT_NE(refuse(bytes_frame(huge_array)).what.find("not valid msgpack"), std::string::npos);
  const std::string huge_str("\xdb\xff\xff\xff\xff", 5);  // str32 of 4 GiB
  EXPECT_NE(refuse(bytes_frame(huge_str)).what.find("not valid msgpack"), std::string::npos);
  WireLimits shallow;
  shallow.max_depth = 3;
  const std::string deep(10, '\x91');  // [[[[...
  EXPECT_NE(refuse(bytes_frame(deep + "\x01"), shallow).what.find("not valid msgpack"), std::string::npos);
}

TEST(WireCodecTest, RefusesToSendCudaOrUndefinedTensors) {
  EXPECT_THROW(encode_value(at::Tensor()), distrl::ProtocolError);
}
