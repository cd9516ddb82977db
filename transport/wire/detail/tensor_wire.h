// The wire's dtype codes for LibTorch scalar types (the codes and their sizes are in
// serialize.cpp; this maps them to c10::ScalarType). Private to transport/ (tensor.cpp and the
// collectives).
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>

namespace distrl::transport::detail {

// Throws ProtocolError for a dtype the wire cannot carry.
std::uint8_t dtype_code(c10::ScalarType t);
// The scalar type of a valid code (parse_tensor_descriptor checked it).
c10::ScalarType scalar_type_of(std::uint8_t code);

}  // namespace distrl::transport::detail
