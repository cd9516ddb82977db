// The decoder's limits, in a header of their own so that option structs (RpcOptions) can hold
// them without pulling LibTorch in (rl/ is torch-free).
#pragma once

#include <cstddef>

namespace distrl::transport {

// Decode limits: msgpack's defaults let a five-byte input ask for gigabytes.
struct WireLimits {
  std::size_t max_message_bytes = 1ull << 30;  // all frames of one message together
  std::size_t max_frames = 4096;               // tensor frames per message
  std::size_t max_array = 1u << 20;            // elements of one msgpack array
  std::size_t max_map = 1u << 16;              // entries of one msgpack map
  std::size_t max_str = 16u << 20;             // bytes of one string
  std::size_t max_bin = 256u << 20;            // bytes of one bin
  std::size_t max_depth = 64;                  // nesting
};

}  // namespace distrl::transport
