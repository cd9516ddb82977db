#include "transport/serialize.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstring>

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>

#include "transport/detail/le_bytes.h"
#include "transport/detail/wire_codec.h"

namespace distrl::transport::detail {
namespace {

thread_local PackScope* t_pack = nullptr;
thread_local UnpackScope* t_unpack = nullptr;

// Wire dtype codes are ours, stable across LibTorch versions.
struct DtypeInfo {
  c10::ScalarType type;
  std::size_t size;
};
constexpr DtypeInfo kDtypes[] = {
    {c10::ScalarType::Float, 4},  {c10::ScalarType::Double, 8},        {c10::ScalarType::Half, 2},
    {c10::ScalarType::BFloat16, 2}, {c10::ScalarType::Char, 1},        {c10::ScalarType::Short, 2},
    {c10::ScalarType::Int, 4},    {c10::ScalarType::Long, 8},          {c10::ScalarType::Byte, 1},
    {c10::ScalarType::Bool, 1},   {c10::ScalarType::ComplexFloat, 8}, {c10::ScalarType::ComplexDouble, 16},
};
constexpr std::size_t kDtypeCount = sizeof(kDtypes) / sizeof(kDtypes[0]);

}  // namespace

std::uint8_t dtype_code(c10::ScalarType t) {
  for (std::size_t i = 0; i < kDtypeCount; ++i)
    if (kDtypes[i].type == t) return static_cast<std::uint8_t>(i);
  throw ProtocolError(std::string("transport: cannot send a tensor of dtype ") + c10::toString(t));
}

std::size_t dtype_size(std::uint8_t code) { return code < kDtypeCount ? kDtypes[code].size : 0; }
const char* dtype_name(std::uint8_t code) { return code < kDtypeCount ? c10::toString(kDtypes[code].type) : "unknown"; }

PackScope::PackScope(std::vector<at::Tensor>* t, RpcCore* a, int dest)
    : tensors(t), agent(a), dest_rank(dest), previous_(t_pack) {
  t_pack = this;
}
PackScope::~PackScope() { t_pack = previous_; }

UnpackScope::UnpackScope(const InFrames* f, std::shared_ptr<RpcCore> a)
    : frames(f), agent(std::move(a)), previous_(t_unpack) {
  t_unpack = this;
}
UnpackScope::~UnpackScope() { t_unpack = previous_; }

RpcCore* current_pack_agent(int* dest_rank) {
  if (!t_pack) return nullptr;
  *dest_rank = t_pack->dest_rank;
  return t_pack->agent;
}
std::shared_ptr<RpcCore> current_unpack_agent() { return t_unpack ? t_unpack->agent : nullptr; }

std::string pack_tensor_descriptor(const at::Tensor& t) {
  if (!t_pack) throw ProtocolError("transport: a tensor can only be packed inside an RPC message");
  if (!t.defined()) throw ProtocolError("transport: cannot send an undefined tensor");
  if (!t.device().is_cpu())
    throw ProtocolError("transport: RPC carries CPU tensors; move the tensor to CPU first (got device " +
                        t.device().str() + ")");
  at::Tensor c = t.is_contiguous() ? t : t.contiguous();
  if (c.dim() > kMaxTensorDims)
    throw ProtocolError("transport: tensor has " + std::to_string(c.dim()) + " dims, the wire allows " +
                        std::to_string(kMaxTensorDims));
  std::string d;
  d.reserve(6 + 8 * c.dim());
  d.push_back(static_cast<char>(dtype_code(c.scalar_type())));
  d.push_back(static_cast<char>(c.dim()));
  put_le(d, t_pack->tensors->size(), 4);
  for (auto s : c.sizes()) put_le(d, static_cast<std::uint64_t>(s), 8);
  t_pack->tensors->push_back(std::move(c));
  return d;
}

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

at::Tensor tensor_of_frame(const InFrames& in, const TensorDesc& d);

at::Tensor unpack_tensor_descriptor(const msgpack::object& o) {
  if (o.type != msgpack::type::EXT || o.via.ext.type() != kTensorExt) throw msgpack::type_error();
  if (!t_unpack || !t_unpack->frames) throw ProtocolError("transport: tensor decoded outside a message");
  TensorDesc d = parse_tensor_descriptor(o.via.ext.data(), o.via.ext.size);
  const InFrames& in = *t_unpack->frames;
  at::Tensor t = tensor_of_frame(in, d);
  if (!in.hooks || !std::binary_search(in.tag.grad_frames.begin(), in.tag.grad_frames.end(), d.frame + 1)) return t;
  // A tensor that required grad on the sender: the hooks decide what the user gets, once per frame.
  auto& mut = const_cast<InFrames&>(in);
  std::lock_guard<std::mutex> lock(mut.hooked_mu);
  if (mut.hooked.empty()) mut.hooked.resize(in.frames.size());
  at::Tensor& slot = mut.hooked.at(d.frame);
  if (!slot.defined()) slot = in.hooks->on_receive(in.tag, in.src, d.frame + 1, std::move(t));
  return slot;
}

at::Tensor tensor_of_frame(const InFrames& in, const TensorDesc& d) {
  const zmq::message_t& f = tensor_frame(in, d);
  const auto opts = at::TensorOptions().dtype(kDtypes[d.dtype].type);
  const std::size_t elem = kDtypes[d.dtype].size;
  auto* data = const_cast<void*>(f.data());
  // Share the received buffer when it is large and aligned; copy small or misaligned ones.
  if (d.nbytes >= 4096 && reinterpret_cast<std::uintptr_t>(data) % elem == 0) {
    auto keep = const_cast<InFrames&>(in).shared_from_this();
    return at::from_blob(data, d.dims, [keep](void*) {}, opts);
  }
  at::Tensor t = at::empty(d.dims, opts);
  if (d.nbytes) std::memcpy(t.data_ptr(), data, d.nbytes);
  return t;
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
