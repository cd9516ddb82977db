#include "transport/wire/tensor.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>

#include <algorithm>
#include <cstring>

#include "transport/wire/detail/le_bytes.h"
#include "transport/wire/detail/tensor_wire.h"
#include "transport/wire/detail/wire_codec.h"

namespace distrl::transport::detail {
namespace {

// In the order of serialize.cpp's code table.
constexpr c10::ScalarType kTypes[] = {
    c10::ScalarType::Float, c10::ScalarType::Double, c10::ScalarType::Half,         c10::ScalarType::BFloat16,
    c10::ScalarType::Char,  c10::ScalarType::Short,  c10::ScalarType::Int,          c10::ScalarType::Long,
    c10::ScalarType::Byte,  c10::ScalarType::Bool,   c10::ScalarType::ComplexFloat, c10::ScalarType::ComplexDouble,
};
constexpr std::size_t kTypeCount = sizeof(kTypes) / sizeof(kTypes[0]);

at::Tensor tensor_of_frame(const InFrames& in, const TensorDesc& d) {
  const Frame& f = tensor_frame(in, d);
  const auto opts = at::TensorOptions().dtype(scalar_type_of(d.dtype));
  const std::size_t elem = dtype_size(d.dtype);
  auto* data = const_cast<void*>(f.data());
  // Share the received buffer when it is large and aligned; copy small or misaligned ones.
  if (d.nbytes >= 4096 && reinterpret_cast<std::uintptr_t>(data) % elem == 0) {
    auto keep = const_cast<InFrames&>(in).shared_from_this();
    return at::from_blob(
        data, d.dims, [keep](void*) {}, opts);
  }
  at::Tensor t = at::empty(d.dims, opts);
  if (d.nbytes) std::memcpy(t.data_ptr(), data, d.nbytes);
  return t;
}

}  // namespace

std::uint8_t dtype_code(c10::ScalarType t) {
  for (std::size_t i = 0; i < kTypeCount; ++i)
    if (kTypes[i] == t) return static_cast<std::uint8_t>(i);
  throw ProtocolError(std::string("transport: cannot send a tensor of dtype ") + c10::toString(t));
}

c10::ScalarType scalar_type_of(std::uint8_t code) { return kTypes[std::min<std::size_t>(code, kTypeCount - 1)]; }

std::string pack_tensor_descriptor(const at::Tensor& t) {
  PackScope* scope = current_pack_scope();
  if (!scope) throw ProtocolError("transport: a tensor can only be packed inside an RPC message");
  if (!t.defined()) throw ProtocolError("transport: cannot send an undefined tensor");
  if (!t.device().is_cpu())
    throw ProtocolError("transport: RPC carries CPU tensors; move the tensor to CPU first (got device " +
                        t.device().str() + ")");
  auto c = std::make_shared<at::Tensor>(t.is_contiguous() ? t : t.contiguous());
  if (c->dim() > kMaxTensorDims)
    throw ProtocolError("transport: tensor has " + std::to_string(c->dim()) + " dims, the wire allows " +
                        std::to_string(kMaxTensorDims));
  std::string d;
  d.reserve(6 + 8 * c->dim());
  d.push_back(static_cast<char>(dtype_code(c->scalar_type())));
  d.push_back(static_cast<char>(c->dim()));
  put_le(d, scope->frames->size(), 4);
  for (auto s : c->sizes()) put_le(d, static_cast<std::uint64_t>(s), 8);
  OutFrame f;
  f.data = c->data_ptr();
  f.size = c->nbytes();
  f.tensor = c.get();
  f.owner = std::move(c);
  scope->frames->push_back(std::move(f));
  return d;
}

at::Tensor unpack_tensor_descriptor(const msgpack::object& o) {
  if (o.type != msgpack::type::EXT || o.via.ext.type() != kTensorExt) throw msgpack::type_error();
  const UnpackScope* scope = current_unpack_scope();
  if (!scope || !scope->frames) throw ProtocolError("transport: tensor decoded outside a message");
  TensorDesc d = parse_tensor_descriptor(o.via.ext.data(), o.via.ext.size);
  const InFrames& in = *scope->frames;
  at::Tensor t = tensor_of_frame(in, d);
  if (!in.hooks || !std::binary_search(in.tag.grad_frames.begin(), in.tag.grad_frames.end(), d.frame + 1)) return t;
  // A tensor that required grad on the sender: the hooks decide what the user gets, once per frame.
  auto& mut = const_cast<InFrames&>(in);
  std::lock_guard<std::mutex> lock(mut.hooked_mu);
  if (mut.hooked.empty()) mut.hooked.resize(in.frames.size());
  auto& slot = mut.hooked.at(d.frame);
  if (!slot) slot = std::make_shared<at::Tensor>(in.hooks->on_receive(in.tag, in.src, d.frame + 1, std::move(t)));
  return *std::static_pointer_cast<at::Tensor>(slot);
}

}  // namespace distrl::transport::detail
