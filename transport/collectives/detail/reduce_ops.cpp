#include "transport/collectives/detail/reduce_ops.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <type_traits>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

namespace distrl::transport::detail {
namespace {

template <typename T>
using Acc = std::conditional_t<std::is_same_v<T, c10::Half> || std::is_same_v<T, c10::BFloat16>, float, T>;

template <typename A>
bool is_nan(A v) {
  if constexpr (std::is_floating_point_v<A>) return std::isnan(v);
  return false;
}

template <typename T, typename F>
void apply(T* dst, const T* src, std::size_t n, F f) {
  for (std::size_t i = 0; i < n; ++i)
    dst[i] = static_cast<T>(f(static_cast<Acc<T>>(dst[i]), static_cast<Acc<T>>(src[i])));
}

template <typename T>
void reduce_typed(ReduceOp op, T* dst, const T* src, std::size_t n) {
  using A = Acc<T>;
  if constexpr (std::is_same_v<T, bool>) {
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg:
      case ReduceOp::Max:
        for (std::size_t i = 0; i < n; ++i) dst[i] = dst[i] || src[i];
        return;
      case ReduceOp::Product:
      case ReduceOp::Min:
        for (std::size_t i = 0; i < n; ++i) dst[i] = dst[i] && src[i];
        return;
    }
  } else {
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg: return apply(dst, src, n, [](A a, A b) { return a + b; });
      case ReduceOp::Product: return apply(dst, src, n, [](A a, A b) { return a * b; });
      case ReduceOp::Min:
        return apply(dst, src, n, [](A a, A b) { return is_nan(a) ? a : is_nan(b) ? b : (b < a ? b : a); });
      case ReduceOp::Max:
        return apply(dst, src, n, [](A a, A b) { return is_nan(a) ? a : is_nan(b) ? b : (b > a ? b : a); });
    }
  }
}

template <typename T>
void divide_typed(T* dst, std::size_t n, std::int64_t by) {
  using A = Acc<T>;
  for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<T>(static_cast<A>(dst[i]) / static_cast<A>(by));
}

template <typename F>
void dispatch(c10::ScalarType t, F&& f) {
  switch (t) {
    case c10::ScalarType::Byte: return f(std::uint8_t{});
    case c10::ScalarType::Char: return f(std::int8_t{});
    case c10::ScalarType::Short: return f(std::int16_t{});
    case c10::ScalarType::Int: return f(std::int32_t{});
    case c10::ScalarType::Long: return f(std::int64_t{});
    case c10::ScalarType::Half: return f(c10::Half{});
    case c10::ScalarType::BFloat16: return f(c10::BFloat16{});
    case c10::ScalarType::Float: return f(float{});
    case c10::ScalarType::Double: return f(double{});
    case c10::ScalarType::Bool: return f(bool{});
    default: throw Error(std::string("collectives cannot reduce dtype ") + c10::toString(t));
  }
}

}  // namespace

bool reducible(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Byte:
    case c10::ScalarType::Char:
    case c10::ScalarType::Short:
    case c10::ScalarType::Int:
    case c10::ScalarType::Long:
    case c10::ScalarType::Half:
    case c10::ScalarType::BFloat16:
    case c10::ScalarType::Float:
    case c10::ScalarType::Double:
    case c10::ScalarType::Bool: return true;
    default: return false;
  }
}

void reduce_into(ReduceOp op, c10::ScalarType t, void* dst, const void* src, std::size_t n) {
  dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    if (reinterpret_cast<std::uintptr_t>(src) % alignof(T) != 0) {  // tiny ZeroMQ messages live inline
      std::unique_ptr<T[]> aligned(new T[n]);
      std::memcpy(aligned.get(), src, n * sizeof(T));
      reduce_typed<T>(op, static_cast<T*>(dst), aligned.get(), n);
    } else {
      reduce_typed<T>(op, static_cast<T*>(dst), static_cast<const T*>(src), n);
    }
  });
}

void divide(c10::ScalarType t, void* dst, std::size_t n, std::int64_t by) {
  dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      throw Error("collectives cannot average bool tensors");
    } else {
      divide_typed<T>(static_cast<T*>(dst), n, by);
    }
  });
}

}  // namespace distrl::transport::detail
