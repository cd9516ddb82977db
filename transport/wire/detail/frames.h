// A message as the links carry it: its frames, and what reading a ring or socket gave. Below
// the links and the ZeroMQ plumbing, which both read into Frames. Private to transport/.
#pragma once

#include <cstddef>
#include <vector>

#include <zmq.hpp>

namespace distrl::transport::detail {

// One message: its frames (zmq::message_t as the buffer type: refcounted, zero-copy capable).
using Frames = std::vector<zmq::message_t>;

// The bytes of a message's frames.
inline std::size_t frames_bytes(const Frames& frames) {
  std::size_t n = 0;
  for (const auto& f : frames) n += f.size();
  return n;
}

// What reading a channel or socket gave: nothing waiting, one message, or a message of more
// frames than allowed (read to its end and dropped).
enum class Received { Nothing, Message, TooManyParts };

}  // namespace distrl::transport::detail
