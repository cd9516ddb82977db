// The wire format's frames: OutMessage -> frames (zero-copy), frames -> validated InMessage.
// Private to transport/.
#pragma once

#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "transport/wire/detail/frames.h"
#include "transport/wire/detail/message.h"

namespace distrl::transport::detail {

// Received tensor frames (frame i of the message is frames[i - 1]). Tensors built on them hold
// a shared_ptr so the buffers outlive the message.
struct InFrames : std::enable_shared_from_this<InFrames> {
  Frames frames;
  // Set by the receiver before the body is converted when the message carries a context with
  // tensors that require grad: each such tensor passes hooks->on_receive once, then is cached.
  std::shared_ptr<MessageHooks> hooks;
  MessageTag tag;
  int src = -1;
  std::mutex hooked_mu;
  std::vector<std::shared_ptr<void>> hooked;  // by frame index - 1: the at::Tensor the hooks gave
};

// A tensor descriptor as carried in a kTensorExt payload:
// u8 dtype | u8 ndim | u32 frame (LE) | i64 dims[ndim] (LE).
struct TensorDesc {
  std::uint8_t dtype = 0;
  std::uint32_t frame = 0;
  std::vector<std::int64_t> dims;
  std::size_t nbytes = 0;  // numel * element size
};

// Parses and range-checks a descriptor (throws ProtocolError).
TensorDesc parse_tensor_descriptor(const char* data, std::size_t size);
// The frame a descriptor names, checked for existence and size (throws ProtocolError).
const Frame& tensor_frame(const InFrames& in, const TensorDesc& d);
std::size_t dtype_size(std::uint8_t code);  // 0 for an unknown code
const char* dtype_name(std::uint8_t code);  // LibTorch's name ("Float"), "unknown" for a bad code

// Why a message was refused, with the call id and kind when the header got that far: a bad
// request is answered with an error, a bad response fails the pending call it names.
struct DecodeFailure {
  std::string what;
  std::optional<std::uint64_t> call_id;
  std::int32_t src = -1;
  Kind kind = Kind::Request;
};

// Frames -> message (frames[0] is the header). On failure returns nullopt and fills *failure.
std::optional<InMessage> decode_message(Frames&& frames, const WireLimits& limits, DecodeFailure* failure);

// Message -> frames for a link. Frame bytes are not copied (each frame holds a reference to the
// bytes' owner until the link is done with it), except small ones.
Frames encode_message(OutMessage&& m);

}  // namespace distrl::transport::detail
