// One message as RPC builds and reads it: the header fields (frame 0's msgpack map), a message
// ready to send (OutMessage, built by build_message), a received and validated one (InMessage),
// and the pack scopes through which the ext adaptors (tensors, RRefs) reach the message being
// packed or read on this thread. The layout is documented in transport/README.md. Private to
// transport/ (rpc/ and tensor.cpp build on it; serialize.h keeps the public wire constants).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <msgpack.hpp>

#include "common/error.h"
#include "transport/wire/message_hooks.h"
#include "transport/wire/serialize.h"

namespace distrl::transport::detail {

using Packer = msgpack::packer<msgpack::sbuffer>;
using BodyWriter = std::function<void(Packer&)>;

class RpcCore;
struct InFrames;  // the received tensor frames (ZeroMQ messages), defined in detail/wire_codec.cpp

// Header fields, as the decoder reads them (frame 0 is a msgpack map with these keys).
struct Header {
  std::uint32_t version = kProtocolVersion;  // "v"
  Kind kind = Kind::Request;                 // "k"
  std::uint64_t call_id = 0;                 // "id"  (0: one-way, no reply)
  std::int32_t src = -1;                     // "src" sender's rank (-1: not a member of the world)
  std::string fn;                            // "fn"  function, method or control name
  std::uint64_t obj = 0;                     // "obj" target object of a method call (RRef id)
  std::uint64_t new_obj = 0;                 // "new" object id to create (remote())
  std::int64_t ctx = -1;                     // "ctx" distributed-autograd context id
  std::int64_t am = -1;                      // "am"  autograd message id (with "ctx")
  std::vector<std::uint32_t> rg;             // "rg"  tensor frames that require grad (with "ctx")
};

// A message ready to send: the packed header (with the body inside) plus frames 1..k.
struct OutMessage {
  msgpack::sbuffer header;
  std::vector<OutFrame> frames;
};

// Collects frames (and RRef forks) while a body is packed; one per thread at a time.
class PackScope {
 public:
  PackScope(std::vector<OutFrame>* frames, RpcCore* agent, int dest_rank);
  ~PackScope();
  PackScope(const PackScope&) = delete;
  PackScope& operator=(const PackScope&) = delete;

  std::vector<OutFrame>* const frames;
  RpcCore* const agent;
  const int dest_rank;

 private:
  PackScope* previous_;
};

// Makes a received message's frames (and agent, for RRefs) visible to convert<>.
class UnpackScope {
 public:
  UnpackScope(const InFrames* frames, std::shared_ptr<RpcCore> agent);
  ~UnpackScope();
  UnpackScope(const UnpackScope&) = delete;
  UnpackScope& operator=(const UnpackScope&) = delete;

  const InFrames* const frames;
  const std::shared_ptr<RpcCore> agent;

 private:
  UnpackScope* previous_;
};

// The scopes of this thread (null outside one): for the ext adaptors (tensors, RRefs).
PackScope* current_pack_scope();
const UnpackScope* current_unpack_scope();
RpcCore* current_pack_agent(int* dest_rank);
std::shared_ptr<RpcCore> current_unpack_agent();

// Packs a header map with the body written by write_body(packer).
// With h.ctx >= 0 the header also gets "am" and "rg", filled by hooks->on_send (when given).
template <typename Body>
OutMessage build_message(const Header& h, RpcCore* agent, int dest_rank, Body&& write_body,
                         MessageHooks* hooks = nullptr) {
  OutMessage m;
  Packer pk(m.header);
  const bool has_fn = !h.fn.empty();
  pk.pack_map(6 + has_fn + (h.obj != 0) + (h.new_obj != 0) + (h.ctx >= 0 ? 3 : 0));
  pk.pack("v");
  pk.pack(h.version);
  pk.pack("k");
  pk.pack(static_cast<std::uint8_t>(h.kind));
  pk.pack("id");
  pk.pack(h.call_id);
  pk.pack("src");
  pk.pack(h.src);
  if (has_fn) {
    pk.pack("fn");
    pk.pack(h.fn);
  }
  if (h.obj) {
    pk.pack("obj");
    pk.pack(h.obj);
  }
  if (h.new_obj) {
    pk.pack("new");
    pk.pack(h.new_obj);
  }
  if (h.ctx >= 0) {
    pk.pack("ctx");
    pk.pack(h.ctx);
  }
  pk.pack("a");
  {
    PackScope scope(&m.frames, agent, dest_rank);
    write_body(pk);
  }
  pk.pack("nt");
  pk.pack(static_cast<std::uint32_t>(m.frames.size()));
  if (h.ctx >= 0) {  // what the hooks record about this message's tensors
    MessageTag tag;
    tag.ctx = h.ctx;
    if (hooks) hooks->on_send(h.ctx, dest_rank, m.frames, &tag);
    pk.pack("am");
    pk.pack(tag.msg);
    pk.pack("rg");
    pk.pack(tag.grad_frames);
  }
  return m;
}

}  // namespace distrl::transport::detail

namespace distrl::transport {

// A received, validated message. Its body converts to typed values; tensors in it share the
// received buffers (no copy) and keep them alive.
class InMessage {
 public:
  detail::Header header;
  msgpack::object_handle handle;  // the whole decoded header; owns the zone body points into
  msgpack::object body_object;    // the "a" value (nil when absent)
  std::shared_ptr<detail::InFrames> frames;
  std::size_t wire_bytes = 0;

  const msgpack::object& body() const { return body_object; }
  // Converts the body; a type mismatch raises ProtocolError naming what was expected.
  template <typename T>
  T body_as(std::shared_ptr<detail::RpcCore> agent, const std::string& what) const {
    return convert_object<T>(body(), agent, what);
  }
  template <typename T>
  T convert_object(const msgpack::object& o, std::shared_ptr<detail::RpcCore> agent, const std::string& what) const {
    detail::UnpackScope scope(frames.get(), std::move(agent));
    try {
      if constexpr (std::is_void_v<T>) {
        return;
      } else {
        T v{};
        o.convert(v);
        return v;
      }
    } catch (const msgpack::type_error&) {
      throw ProtocolError(what + ": expected " + detail::type_name<T>() + ", got msgpack " +
                          detail::msgpack_type_name(o));
    }
  }
};

}  // namespace distrl::transport
