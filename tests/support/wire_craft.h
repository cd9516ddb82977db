// Hand-made wire messages for malformed-input tests (unit and integration).
#pragma once

#include <iterator>
#include <string>
#include <vector>

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "transport/rpc/detail/callable.h"
#include "transport/wire/detail/le_bytes.h"
#include "transport/wire/detail/wire_codec.h"

namespace distrl::testing {

using Frames = transport::detail::Frames;  // the seam's frames (wire/detail/frames.h)

// A raw ZeroMQ peer's side of them: each frame one part of a multipart message (copied).
inline bool send_frames(zmq::socket_t& s, const Frames& frames) {
  std::vector<zmq::message_t> parts;
  for (const auto& f : frames) parts.emplace_back(f.data(), f.size());
  return zmq::send_multipart(s, parts).has_value();
}
// The next message's frames (blocking); empty when none could be read.
inline Frames recv_frames(zmq::socket_t& s) {
  std::vector<zmq::message_t> parts;
  (void)zmq::recv_multipart(s, std::back_inserter(parts));
  Frames out;
  for (const auto& p : parts) out.emplace_back(p.data(), p.size());
  return out;
}

// A tensor descriptor payload: u8 dtype | u8 ndim | u32 frame | i64 dims[].
inline std::string descriptor(std::uint8_t dtype, const std::vector<std::int64_t>& dims, std::uint32_t frame) {
  std::string d;
  d.push_back(static_cast<char>(dtype));
  d.push_back(static_cast<char>(dims.size()));
  transport::detail::put_le(d, frame, 4);
  for (auto v : dims) transport::detail::put_le(d, static_cast<std::uint64_t>(v), 8);
  return d;
}

// A request header {v, k, id, src, fn, nt, a: [tensor descriptor]} plus zero-filled frames.
inline Frames tensor_request(std::uint32_t version, std::uint64_t id, const std::string& fn, std::uint32_t nt,
                             const std::string& desc, const std::vector<std::size_t>& frame_sizes) {
  msgpack::sbuffer b;
  msgpack::packer<msgpack::sbuffer> pk(b);
  pk.pack_map(7);
  pk.pack("v");
  pk.pack(version);
  pk.pack("k");
  pk.pack(0);
  pk.pack("id");
  pk.pack(id);
  pk.pack("src");
  pk.pack(-1);
  pk.pack("fn");
  pk.pack(fn);
  pk.pack("nt");
  pk.pack(nt);
  pk.pack("a");
  pk.pack_array(1);
  pk.pack_ext(desc.size(), transport::kTensorExt);
  pk.pack_ext_body(desc.data(), static_cast<std::uint32_t>(desc.size()));
  Frames f;
  f.emplace_back(b.data(), b.size());
  for (auto n : frame_sizes) {
    f.emplace_back(n);
    if (n) std::memset(f.back().data(), 0, n);
  }
  return f;
}

// A well-formed request to fn with args..., its header claiming to come from rank src.
template <typename... Args>
Frames request_claiming(int src, std::uint64_t id, const std::string& fn, const Args&... args) {
  transport::detail::Header h;
  h.call_id = id;
  h.fn = fn;
  h.src = src;
  return transport::detail::encode_message(
      transport::detail::build_message(h, nullptr, 0, transport::detail::args_writer(args...)));
}

// The same as an outsider (src -1) would send it.
template <typename... Args>
Frames request(std::uint64_t id, const std::string& fn, const Args&... args) {
  return request_claiming(-1, id, fn, args...);
}

// A call of method fn on object obj (an RRef's id), as an outsider would send it.
template <typename... Args>
Frames method_request(std::uint64_t id, std::uint64_t obj, const std::string& fn, const Args&... args) {
  transport::detail::Header h;
  h.call_id = id;
  h.obj = obj;
  h.fn = fn;
  return transport::detail::encode_message(
      transport::detail::build_message(h, nullptr, 0, transport::detail::args_writer(args...)));
}

// A one-way RRef release notice (object id, fork id), as a holder sends it to the owner.
inline Frames release_notice(std::uint64_t obj, std::uint64_t fork) {
  transport::detail::Header h;
  h.kind = transport::Kind::Control;
  h.fn = "__rref_del";  // rpc_state.h kReleaseFn
  const std::tuple<std::uint64_t, std::uint64_t> ids{obj, fork};
  return transport::detail::encode_message(
      transport::detail::build_message(h, nullptr, 0, [&](transport::detail::Packer& pk) { pk.pack(ids); }));
}

inline Frames one_frame(const std::string& bytes) {
  Frames f;
  f.emplace_back(bytes.data(), bytes.size());
  return f;
}

}  // namespace distrl::testing
