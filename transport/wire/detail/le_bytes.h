// Little-endian integer packing for the fixed-layout ext payloads (tensor and RRef descriptors).
#pragma once

#include <cstdint>
#include <string>

namespace distrl::transport::detail {

inline void put_le(std::string& s, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

inline std::uint64_t get_le(const char* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<std::uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

}  // namespace distrl::transport::detail
