// What crosses the wire, and how: msgpack for every value, with raw byte frames beside it. A
// tensor inside any value (an argument, a vector, a user struct) is packed as a msgpack ext of
// type kTensorExt holding {dtype, shape, frame}; its bytes travel in frame `frame` without
// copies. The wire layout is documented in transport/README.md.
//
// This header (and the whole RPC core) is LibTorch-free, so a process that never builds a
// tensor (an RL observer) does not load LibTorch. Tensor support is transport/wire/tensor.h, in the
// distrl::transport library: include it wherever at::Tensor crosses the wire (without it, a
// tensor argument does not compile).
//
// User structs cross the wire through msgpack's own adaptors (MSGPACK_DEFINE or
// msgpack::adaptor specialisations); tensors and RRefs nested in them work too. How one message
// is built (OutMessage, the pack scope) is transport/wire/detail/message.h, how it is read (header,
// InMessage, the unpack scope) transport/wire/detail/in_message.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <typeinfo>
#include <vector>

#include <msgpack.hpp>

#include "common/error.h"

namespace at {
class Tensor;  // transport/wire/tensor.h brings the definition and the wire adaptors
}  // namespace at
#include "transport/wire/wire_limits.h"

namespace distrl::transport {

using Bytes = std::vector<std::uint8_t>;  // packed as msgpack bin

// One frame after the header: `size` bytes at `data`, valid while `owner` lives (ZeroMQ keeps
// a reference until it has sent them; small frames are copied). `tensor` points to the tensor
// those bytes belong to (owner keeps it), for the hooks; null for other frames.
struct OutFrame {
  const void* data = nullptr;
  std::size_t size = 0;
  std::shared_ptr<const void> owner;
  const at::Tensor* tensor = nullptr;
};

constexpr std::uint32_t kProtocolVersion = 2;  // 2: "am" and "rg" (distributed autograd)
constexpr std::int8_t kTensorExt = 1;
constexpr std::int8_t kRRefExt = 2;
constexpr int kMaxTensorDims = 16;

// Message kinds of the header's "k" field.
enum class Kind : std::uint8_t { Request = 0, Response = 1, Error = 2, Collective = 3, Control = 4 };
constexpr int kKindCount = 5;

namespace detail {

// Human names for error messages: "int", "std::string", "at::Tensor", msgpack "str".
std::string demangle(const char* mangled);
template <typename T>
std::string type_name() {
  return demangle(typeid(T).name());
}
std::string msgpack_type_name(const msgpack::object& o);

}  // namespace detail

}  // namespace distrl::transport
