// One message as RPC reads it: the header fields (frame 0's msgpack map), a received and
// validated message (InMessage), whose body converts to typed values, and the unpack scope
// through which the ext adaptors (tensors, RRefs) reach the message being read on this thread.
// Installed: the typed templates of rpc_agent.h and rref.h decode arguments and results through
// it. The sending side (OutMessage, build_message) is message.h, private.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include <msgpack.hpp>

#include "common/error.h"
#include "transport/wire/serialize.h"

namespace distrl::transport::detail {

using Packer = msgpack::packer<msgpack::sbuffer>;
using BodyWriter = std::function<void(Packer&)>;

class CallEngine;  // what the ext adaptors reach the agent through (rpc/detail/call_engine.h)
struct InFrames;   // the received tensor frames (the seam's Frames), defined in wire/detail/wire_codec.h

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

// Makes a received message's frames (and agent, for RRefs) visible to convert<>.
class UnpackScope {
 public:
  UnpackScope(const InFrames* frames, std::shared_ptr<CallEngine> agent);
  ~UnpackScope();
  UnpackScope(const UnpackScope&) = delete;
  UnpackScope& operator=(const UnpackScope&) = delete;

  const InFrames* const frames;
  const std::shared_ptr<CallEngine> agent;

 private:
  UnpackScope* previous_;
};

// The unpack scope of this thread (null outside one): for the ext adaptors (tensors, RRefs).
const UnpackScope* current_unpack_scope();
std::shared_ptr<CallEngine> current_unpack_agent();

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
  T body_as(std::shared_ptr<detail::CallEngine> agent, const std::string& what) const {
    return convert_object<T>(body(), agent, what);
  }
  template <typename T>
  T convert_object(const msgpack::object& o, std::shared_ptr<detail::CallEngine> agent, const std::string& what) const {
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
