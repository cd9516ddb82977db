#include "transport/wire/serialize.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstring>

#include "transport/wire/detail/le_bytes.h"
#include "transport/wire/detail/wire_codec.h"

namespace distrl::transport::detail {
namespace {

// Wire dtype codes are ours, stable across LibTorch versions (tensor.cpp maps them to
// c10::ScalarType in the same order).
struct DtypeInfo {
  const char* name;
  std::size_t size;
};
constexpr DtypeInfo kDtypes[] = {
    // names as c10::toString gives them
    {"Float", 4}, {"Double", 8}, {"Half", 2}, {"BFloat16", 2}, {"Char", 1},         {"Short", 2},
    {"Int", 4},   {"Long", 8},   {"Byte", 1}, {"Bool", 1},     {"ComplexFloat", 8}, {"ComplexDouble", 16},
};
constexpr std::size_t kDtypeCount = sizeof(kDtypes) / sizeof(kDtypes[0]);

}  // namespace

std::size_t dtype_size(std::uint8_t code) { return code < kDtypeCount ? kDtypes[code].size : 0; }
const char* dtype_name(std::uint8_t code) { return code < kDtypeCount ? kDtypes[code].name : "unknown"; }

TensorDesc parse_tensor_descriptor(const char* data, std::size_t size) {
  if (size < 6) throw ProtocolError("tensor descriptor of " + std::to_string(size) + " bytes is truncated");
  TensorDesc d;
  d.dtype = static_cast<std::uint8_t>(data[0]);
  const std::size_t elem = dtype_size(d.dtype);
  if (!elem) throw ProtocolError("tensor descriptor has unknown dtype code " + std::to_string(d.dtype));
  const std::size_t ndim = static_cast<unsigned char>(data[1]);
  if (ndim > kMaxTensorDims)
    throw ProtocolError("tensor descriptor has " + std::to_string(ndim) + " dims (max " +
                        std::to_string(kMaxTensorDims) + ")");
  if (size != 6 + 8 * ndim)
    throw ProtocolError("tensor descriptor is " + std::to_string(size) + " bytes, " + std::to_string(ndim) +
                        " dims need " + std::to_string(6 + 8 * ndim));
  d.frame = static_cast<std::uint32_t>(get_le(data + 2, 4));
  unsigned __int128 bytes = elem;
  for (std::size_t i = 0; i < ndim; ++i) {
    auto dim = static_cast<std::int64_t>(get_le(data + 6 + 8 * i, 8));
    if (dim < 0) throw ProtocolError("tensor descriptor has negative dim " + std::to_string(dim));
    d.dims.push_back(dim);
    bytes *= static_cast<std::uint64_t>(dim);
    if (bytes > (static_cast<unsigned __int128>(1) << 62))
      throw ProtocolError("tensor descriptor shape is absurd (over 2^62 bytes)");
  }
  d.nbytes = static_cast<std::size_t>(bytes);
  return d;
}

std::string demangle(const char* mangled) {
  int status = 0;
  char* s = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string out = (status == 0 && s) ? s : mangled;
  std::free(s);
  const std::pair<const char*, const char*> shorten[] = {
      {"std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >", "std::string"},
      {"std::__cxx11::", "std::"}};
  for (auto& [from, to] : shorten)
    for (auto pos = out.find(from); pos != std::string::npos; pos = out.find(from, pos))
      out.replace(pos, std::strlen(from), to);
  return out;
}

std::string msgpack_type_name(const msgpack::object& o) {
  switch (o.type) {
    case msgpack::type::NIL: return "nil";
    case msgpack::type::BOOLEAN: return "bool";
    case msgpack::type::POSITIVE_INTEGER:
    case msgpack::type::NEGATIVE_INTEGER: return "int";
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64: return "float";
    case msgpack::type::STR: return "str";
    case msgpack::type::BIN: return "bin";
    case msgpack::type::ARRAY: return "array of " + std::to_string(o.via.array.size);
    case msgpack::type::MAP: return "map of " + std::to_string(o.via.map.size);
    case msgpack::type::EXT:
      if (o.via.ext.type() == kTensorExt) return "tensor";
      if (o.via.ext.type() == kRRefExt) return "rref";
      return "ext " + std::to_string(o.via.ext.type());
  }
  return "unknown";
}

}  // namespace distrl::transport::detail
