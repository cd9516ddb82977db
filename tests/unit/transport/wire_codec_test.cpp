// Wire format: round trips of every type that crosses the wire, and one test per refusal.
#include "transport/wire/detail/wire_codec.h"

#include <gtest/gtest.h>

#include <functional>
#include <torch/torch.h>

#include "tests/support/wire_craft.h"
#include "transport/rpc/detail/callable.h"
#include "transport/wire/tensor.h"

using namespace distrl::transport;
using namespace distrl::transport::detail;
using distrl::testing::descriptor;

namespace {

using distrl::testing::Frames;

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

Frames raw_message(std::uint32_t version, std::uint32_t nt, const std::string& desc,
                   std::vector<std::size_t> frame_sizes) {
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
  for (auto dtype :
       {torch::kFloat32, torch::kFloat64, torch::kFloat16, torch::kBFloat16, torch::kInt8, torch::kInt16, torch::kInt32,
        torch::kInt64, torch::kUInt8, torch::kBool, torch::kComplexFloat, torch::kComplexDouble}) {
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
    EXPECT_NE(std::string(e.what()).find("argument 1 of 'f': expected std::string, got msgpack int"), std::string::npos)
        << e.what();
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
  auto why = refuse(raw_message(distrl::transport::kProtocolVersion, 2, descriptor(0, {1}, 0), {4}));
  EXPECT_NE(why.what.find("announces 2 tensor frames, message has 1"), std::string::npos) << why.what;
}

TEST(WireCodecTest, RejectsTensorFrameShorterThanDescriptor) {
  auto why = refuse(raw_message(distrl::transport::kProtocolVersion, 1, descriptor(0, {1024}, 0), {100}));
  EXPECT_NE(why.what.find("tensor frame 1 has 100 bytes, descriptor says 4096"), std::string::npos) << why.what;
}

TEST(WireCodecTest, RejectsTensorFrameLongerThanDescriptor) {
  auto why = refuse(raw_message(distrl::transport::kProtocolVersion, 1, descriptor(0, {2}, 0), {9}));
  EXPECT_NE(why.what.find("has 9 bytes, descriptor says 8"), std::string::npos) << why.what;
}

TEST(WireCodecTest, RejectsUnknownDtype) {
  auto why = refuse(raw_message(distrl::transport::kProtocolVersion, 1, descriptor(200, {1}, 0), {4}));
  EXPECT_NE(why.what.find("unknown dtype code 200"), std::string::npos) << why.what;
}

TEST(WireCodecTest, RejectsAbsurdShapes) {
  auto huge =
      refuse(raw_message(distrl::transport::kProtocolVersion, 1, descriptor(0, {1ll << 40, 1ll << 40}, 0), {4}));
  EXPECT_NE(huge.what.find("absurd"), std::string::npos) << huge.what;
  auto negative = refuse(raw_message(distrl::transport::kProtocolVersion, 1, descriptor(0, {-3}, 0), {4}));
  EXPECT_NE(negative.what.find("negative dim"), std::string::npos) << negative.what;
  auto too_many = refuse(
      raw_message(distrl::transport::kProtocolVersion, 1, descriptor(0, std::vector<std::int64_t>(17, 1), 0), {4}));
  EXPECT_NE(too_many.what.find("17 dims"), std::string::npos) << too_many.what;
  auto frame = refuse(raw_message(distrl::transport::kProtocolVersion, 1, descriptor(0, {1}, 5), {4}));
  EXPECT_NE(frame.what.find("names frame 6"), std::string::npos) << frame.what;
}

TEST(WireCodecTest, RejectsOversizeMessage) {
  WireLimits small;
  small.max_message_bytes = 1000;
  auto why = refuse(raw_message(distrl::transport::kProtocolVersion, 1, descriptor(0, {1000}, 0), {4000}), small);
  EXPECT_NE(why.what.find("exceeds the limit of 1000 bytes"), std::string::npos) << why.what;
  EXPECT_TRUE(why.call_id);
}

TEST(WireCodecTest, RejectsTooManyFrames) {
  WireLimits small;
  small.max_frames = 2;
  auto why = refuse(raw_message(distrl::transport::kProtocolVersion, 3, descriptor(0, {1}, 0), {4, 4, 4}), small);
  EXPECT_NE(why.what.find("limit is 2"), std::string::npos) << why.what;
}

// msgpack-c's defaults would try to allocate for these; the limits refuse them first. Each
// case is a complete, valid msgpack document, refused by the limit with msgpack's own
// "size overflow" (not "insufficient bytes"), and accepted one step below the limit.
std::string array_of_nils(std::uint32_t n) {
  std::string s("\xdd", 1);  // array32
  for (int shift = 24; shift >= 0; shift -= 8) s.push_back(static_cast<char>((n >> shift) & 0xff));
  return s + std::string(n, '\xc0');
}

std::string str_of(std::uint32_t n) {
  std::string s("\xdb", 1);  // str32
  for (int shift = 24; shift >= 0; shift -= 8) s.push_back(static_cast<char>((n >> shift) & 0xff));
  return s + std::string(n, 'x');
}

TEST(WireCodecTest, MsgpackLimitsRefuseHugeClaimsFromTinyInputs) {
  WireLimits lim;
  lim.max_array = 100;
  lim.max_str = 100;
  lim.max_depth = 3;
  const auto over = [&](const std::string& doc) { return refuse(bytes_frame(doc), lim).what; };
  // One over the limit: refused by the limit.
  EXPECT_NE(over(array_of_nils(101)).find("array size overflow"), std::string::npos) << over(array_of_nils(101));
  EXPECT_NE(over(str_of(101)).find("str size overflow"), std::string::npos) << over(str_of(101));
  EXPECT_NE(over(std::string(5, '\x91') + "\x01").find("depth size overflow"), std::string::npos);
  // At the limit: msgpack accepts it, and the decoder goes on to say the header is no map.
  EXPECT_NE(over(array_of_nils(100)).find("msgpack array of 100, not a map"), std::string::npos)
      << over(array_of_nils(100));
  EXPECT_NE(over(str_of(100)).find("not a map"), std::string::npos) << over(str_of(100));
  EXPECT_NE(over(std::string(3, '\x91') + "\x01").find("not a map"), std::string::npos);
  // A 5-byte claim of 2^32 - 1 array elements, for which msgpack-c's defaults would reserve
  // gigabytes, is stopped by the default limit before anything is allocated. (A str claim
  // waits for its bytes: it is refused as truncated, with nothing allocated either.)
  const std::string huge_array("\xdd\xff\xff\xff\xff", 5);
  EXPECT_NE(refuse(bytes_frame(huge_array)).what.find("array size overflow"), std::string::npos);
  const std::string huge_str("\xdb\xff\xff\xff\xff", 5);
  EXPECT_NE(refuse(bytes_frame(huge_str)).what.find("insufficient bytes"), std::string::npos);
}

// The documented bytes (transport/README.md), written out by hand: what the encoder sends
// and what the decoder reads, independent of the codec's own helpers.
std::string bytes_of(std::initializer_list<int> v) {
  std::string s;
  for (int b : v) s.push_back(static_cast<char>(b));
  return s;
}

TEST(WireFormatTest, TensorDescriptorHasTheDocumentedBytes) {
  auto f = encode_value(torch::arange(6, torch::kFloat32).reshape({2, 3}));
  ASSERT_EQ(f.size(), 2u);
  const std::string header(static_cast<const char*>(f[0].data()), f[0].size());
  // ext8 (0xc7), 22 bytes, type 1 | float32 (0), ndim 2, frame 0 (u32 LE), dims 2 and 3 (i64 LE)
  const std::string ext = bytes_of({0xc7, 22, 0x01, 0, 2, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0});
  EXPECT_NE(header.find(ext), std::string::npos);
  EXPECT_NE(header.find(bytes_of({0xa2, 'n', 't', 0x01})), std::string::npos);  // "nt": 1
  const float want[6] = {0, 1, 2, 3, 4, 5};
  ASSERT_EQ(f[1].size(), sizeof(want));
  EXPECT_EQ(std::memcmp(f[1].data(), want, sizeof(want)), 0);
}

TEST(WireFormatTest, DtypeCodesAreTheDocumentedOnes) {
  const std::vector<std::pair<at::ScalarType, int>> codes = {
      {torch::kFloat32, 0}, {torch::kFloat64, 1}, {torch::kFloat16, 2},       {torch::kBFloat16, 3},
      {torch::kInt8, 4},    {torch::kInt16, 5},   {torch::kInt32, 6},         {torch::kInt64, 7},
      {torch::kUInt8, 8},   {torch::kBool, 9},    {torch::kComplexFloat, 10}, {torch::kComplexDouble, 11}};
  for (auto [dtype, code] : codes) {
    auto f = encode_value(torch::zeros({1}, dtype));
    const std::string header(static_cast<const char*>(f[0].data()), f[0].size());
    // ext8, 14 bytes, type 1, then the dtype code and ndim 1
    EXPECT_NE(header.find(bytes_of({0xc7, 14, 0x01, code, 1})), std::string::npos) << c10::toString(dtype);
  }
}

TEST(WireFormatTest, DecodesAHandWrittenRequest) {
  // {"v":2, "k":0, "id":5, "src":-1, "fn":"f", "nt":1, "a":[int32 tensor [2] in frame 0]}
  const std::string header =
      bytes_of({0x87, 0xa1, 'v', 2,   0xa1, 'k', 0,    0xa2, 'i', 'd', 5,    0xa3, 's',  'r',  'c',
                0xff, 0xa2, 'f', 'n', 0xa1, 'f', 0xa2, 'n',  't', 1,   0xa1, 'a',  0x91, 0xc7, 14,
                0x01, 6,    1,   0,   0,    0,   0,    2,    0,   0,   0,    0,    0,    0,    0});
  const std::string data = bytes_of({7, 0, 0, 0, 0xff, 0xff, 0xff, 0xff});  // 7, -1 (LE)
  Frames f;
  f.emplace_back(header.data(), header.size());
  f.emplace_back(data.data(), data.size());
  DecodeFailure why;
  auto m = decode_message(std::move(f), WireLimits{}, &why);
  ASSERT_TRUE(m.has_value()) << why.what;
  EXPECT_EQ(m->header.call_id, 5u);
  EXPECT_EQ(m->header.src, -1);
  EXPECT_EQ(m->header.fn, "f");
  auto args = m->body_as<std::vector<at::Tensor>>(nullptr, "args");
  ASSERT_EQ(args.size(), 1u);
  EXPECT_EQ(args[0].scalar_type(), torch::kInt32);
  EXPECT_TRUE(torch::equal(args[0], torch::tensor({7, -1}, torch::kInt32)));
}

TEST(WireCodecTest, RefusesToSendUndefinedTensors) { EXPECT_THROW(encode_value(at::Tensor()), distrl::ProtocolError); }

TEST(WireCodecTest, RefusesToSendCudaTensors) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device here";
  EXPECT_THROW(encode_value(torch::ones({2}, torch::kCUDA)), distrl::ProtocolError);
}

namespace {

// A request with a context, message id and "rg" as given, one int32[1] tensor frame.
Frames autograd_request(std::int64_t ctx, std::int64_t am,
                        const std::function<void(msgpack::packer<msgpack::sbuffer>&)>& rg) {
  msgpack::sbuffer b;
  msgpack::packer<msgpack::sbuffer> pk(b);
  pk.pack_map(10);
  pk.pack("v");
  pk.pack(distrl::transport::kProtocolVersion);
  pk.pack("k");
  pk.pack(0);
  pk.pack("id");
  pk.pack(9);
  pk.pack("src");
  pk.pack(1);
  pk.pack("fn");
  pk.pack("f");
  pk.pack("ctx");
  pk.pack(ctx);
  pk.pack("am");
  pk.pack(am);
  pk.pack("rg");
  rg(pk);
  pk.pack("nt");
  pk.pack(1);
  pk.pack("a");
  pk.pack_array(1);
  const std::string d = distrl::testing::descriptor(6, {1}, 0);
  pk.pack_ext(d.size(), distrl::transport::kTensorExt);
  pk.pack_ext_body(d.data(), static_cast<std::uint32_t>(d.size()));
  Frames f = distrl::testing::one_frame(std::string(b.data(), b.size()));
  f.emplace_back(4);
  return f;
}

}  // namespace

// Version 1 peers (no "am"/"rg") are refused by name, answered since the call id is known.
TEST(WireCodecTest, RefusesProtocolVersionOneClearly) {
  auto why = refuse(raw_message(1, 1, descriptor(0, {1}, 0), {4}));
  EXPECT_NE(why.what.find("unsupported protocol version 1 (this build speaks 2)"), std::string::npos) << why.what;
  ASSERT_TRUE(why.call_id);
}

TEST(WireCodecTest, ReadsTheAutogradFieldsAndRefusesBadOnes) {
  DecodeFailure why;
  auto ok = decode_message(autograd_request(5, 77, [](auto& pk) { pk.pack(std::vector<int>{1}); }), {}, &why);
  ASSERT_TRUE(ok.has_value()) << why.what;
  EXPECT_EQ(ok->header.ctx, 5);
  EXPECT_EQ(ok->header.am, 77);
  EXPECT_EQ(ok->header.rg, std::vector<std::uint32_t>{1});
  auto frame0 = refuse(autograd_request(5, 77, [](auto& pk) { pk.pack(std::vector<int>{0}); }));
  EXPECT_NE(frame0.what.find("\"rg\" must list tensor frames 1..1"), std::string::npos) << frame0.what;
  auto past = refuse(autograd_request(5, 77, [](auto& pk) { pk.pack(std::vector<int>{2}); }));
  EXPECT_NE(past.what.find("\"rg\" must list tensor frames 1..1"), std::string::npos) << past.what;
  auto too_long = refuse(autograd_request(5, 77, [](auto& pk) { pk.pack(std::vector<int>{1, 1}); }));
  EXPECT_NE(too_long.what.find("at most 1 frame numbers"), std::string::npos) << too_long.what;
  auto not_array = refuse(autograd_request(5, 77, [](auto& pk) { pk.pack("x"); }));
  EXPECT_NE(not_array.what.find("\"rg\" is not an array"), std::string::npos) << not_array.what;
  auto no_ctx = refuse(autograd_request(-1, 77, [](auto& pk) { pk.pack(std::vector<int>{1}); }));
  EXPECT_NE(no_ctx.what.find("without a context and message id"), std::string::npos) << no_ctx.what;
}
