// Tensors on the wire: the msgpack adaptors that let at::Tensor (alone, in vectors, in user
// structs) cross RPC. Part of the distrl::transport library, which links LibTorch; the RPC core
// (distrl::transport_core) does not, so include this header wherever a tensor is an RPC
// argument or result. A tensor travels as {dtype, shape, frame} in the body and its bytes in
// a frame of their own (no copy above 1 KiB); received tensors of 4 KiB and more share the
// received buffer. CPU tensors only: a CUDA tensor is refused with ProtocolError.
#pragma once

#include <ATen/core/Tensor.h>

#include "transport/wire/serialize.h"

namespace distrl::transport::detail {

// Called by the adaptors below (tensor.cpp).
std::string pack_tensor_descriptor(const at::Tensor& t);  // registers t as the next frame
at::Tensor unpack_tensor_descriptor(const msgpack::object& o);

}  // namespace distrl::transport::detail

namespace msgpack {
MSGPACK_API_VERSION_NAMESPACE(MSGPACK_DEFAULT_API_NS) {
  namespace adaptor {

  template <>
  struct pack<at::Tensor> {
    template <typename Stream>
    packer<Stream>& operator()(packer<Stream>& o, const at::Tensor& t) const {
      std::string desc = distrl::transport::detail::pack_tensor_descriptor(t);
      o.pack_ext(desc.size(), distrl::transport::kTensorExt);
      o.pack_ext_body(desc.data(), static_cast<uint32_t>(desc.size()));
      return o;
    }
  };

  template <>
  struct convert<at::Tensor> {
    const msgpack::object& operator()(const msgpack::object& o, at::Tensor& t) const {
      t = distrl::transport::detail::unpack_tensor_descriptor(o);
      return o;
    }
  };

  }  // namespace adaptor
}  // MSGPACK_API_VERSION_NAMESPACE
}  // namespace msgpack
