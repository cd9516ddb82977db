// The RPC decoder as a server meets it: frames -> decode_message -> the body converted to the
// argument types handlers take, tensors built on the received frames and read to their last
// byte. A malformed message must come back as a DecodeFailure or a distrl::Error (which the
// server answers as an error); anything else escaping, or a read past a frame, is a finding.
#include <map>
#include <tuple>

#include <ATen/ATen.h>

#include "common/error.h"
#include "tests/fuzz/fuzz_input.h"
#include "transport/wire/detail/wire_codec.h"
#include "transport/rpc/detail/callable.h"
#include "transport/wire/tensor.h"

namespace distrl::fuzz {
namespace {

using transport::InMessage;

// Touches every byte of t (ASan reports a tensor that overruns its frame).
std::uint64_t touch(const at::Tensor& t) {
  if (!t.defined()) return 0;
  FUZZ_CHECK(t.is_contiguous());
  const auto* p = static_cast<const unsigned char*>(t.data_ptr());
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < t.nbytes(); ++i) sum += p[i];
  return sum;
}

template <typename T>
void convert_as(const InMessage& m) {
  try {
    T v = m.body_as<T>(nullptr, "fuzz");
    if constexpr (std::is_same_v<T, at::Tensor>) {
      touch(v);
    } else if constexpr (std::is_same_v<T, std::vector<at::Tensor>>) {
      for (auto& t : v) touch(t);
    } else if constexpr (std::is_same_v<T, std::map<std::string, at::Tensor>>) {
      for (auto& [k, t] : v) touch(t);
    } else if constexpr (std::tuple_size_v<T> == 4) {
      touch(std::get<3>(v));
    }
  } catch (const Error&) {
    // a typed refusal: what the server answers the caller with
  }
}

const transport::WireLimits kLimits = [] {
  transport::WireLimits l;
  l.max_message_bytes = 1 << 20;
  l.max_frames = 32;
  l.max_array = 4096;
  l.max_map = 256;
  l.max_str = 64 << 10;
  l.max_bin = 1 << 20;
  l.max_depth = 16;
  return l;
}();

template <typename Body>
std::string seed(transport::detail::Header h, Body&& body) {
  auto frames = transport::detail::encode_message(transport::detail::build_message(h, nullptr, 1, body));
  std::vector<std::string> parts;
  for (auto& f : frames) parts.push_back(f.to_string());
  return join_frames(parts);
}

}  // namespace

int fuzz_rpc(const std::uint8_t* data, std::size_t size) {
  quiet_logs();
  transport::detail::Frames frames;
  for (auto& part : split_frames(data, size, 40)) frames.emplace_back(part.data(), part.size());
  transport::detail::DecodeFailure why;
  auto m = transport::detail::decode_message(std::move(frames), kLimits, &why);
  if (!m) {
    FUZZ_CHECK(!why.what.empty());
    return 0;
  }
  FUZZ_CHECK(m->header.version == transport::kProtocolVersion);
  FUZZ_CHECK(m->wire_bytes <= kLimits.max_message_bytes);
  convert_as<at::Tensor>(*m);
  convert_as<std::vector<at::Tensor>>(*m);
  convert_as<std::map<std::string, at::Tensor>>(*m);
  convert_as<std::tuple<std::int64_t, std::string, std::vector<double>, at::Tensor>>(*m);
  convert_as<std::tuple<std::vector<std::vector<float>>, bool>>(*m);
  return 0;
}

std::vector<std::string> seeds_rpc() {
  using transport::detail::args_writer;
  using transport::detail::Header;
  std::vector<std::string> out;
  Header call;
  call.call_id = 7;
  call.src = 0;
  call.fn = "observe";
  out.push_back(seed(call, args_writer(at::arange(12, at::kFloat).reshape({3, 4}))));
  out.push_back(seed(call, args_writer(std::vector<at::Tensor>{at::ones({2}, at::kLong), at::zeros({0}, at::kByte)})));
  out.push_back(seed(call, args_writer(std::int64_t{3}, std::string("step"), std::vector<double>{0.5, 1.5},
                                       at::full({2, 2}, 0.25, at::kDouble))));
  out.push_back(seed(call, args_writer(std::map<std::string, at::Tensor>{{"w", at::ones({4}, at::kHalf)},
                                                                         {"b", at::zeros({1}, at::kBool)}})));
  out.push_back(seed(call, args_writer(std::vector<std::vector<float>>{{1, 2}, {3}}, true)));
  Header method = call;
  method.obj = (std::uint64_t{1} << 48) | 5;
  method.fn = "select_action";
  out.push_back(seed(method, args_writer(at::rand({1, 4}))));
  Header create = call;
  create.new_obj = (std::uint64_t{2} << 48) | 9;
  create.fn = "Observer";
  out.push_back(seed(create, args_writer(std::int64_t{1})));
  Header grad = call;
  grad.ctx = 3;
  out.push_back(seed(grad, args_writer(at::ones({3}).requires_grad_())));
  Header reply;
  reply.kind = transport::Kind::Response;
  reply.call_id = 7;
  reply.src = 1;
  out.push_back(seed(reply, [](auto& pk) { pk.pack(at::eye(3)); }));
  Header error = reply;
  error.kind = transport::Kind::Error;
  out.push_back(seed(error, [](auto& pk) {
    pk.pack(std::make_tuple(std::string("handler"), std::string("ValueError"), std::string("bad")));
  }));
  return out;
}

}  // namespace distrl::fuzz

DISTRL_FUZZ_ENTRY(distrl::fuzz::fuzz_rpc)
