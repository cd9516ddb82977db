// Turns typed C++ callables into type-erased Callables, and typed calls into requests.
// Installed: the public templates in rpc_agent.h and rref.h are built on it; they reach the
// engine only through CallEngine (call_engine.h).
#pragma once

#include <optional>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

#include "transport/rpc/detail/call_engine.h"

namespace distrl::transport::detail {

// Signature of a lambda, functor, function pointer or std::function.
template <typename F>
struct FnTraits : FnTraits<decltype(&std::decay_t<F>::operator())> {};
template <typename R, typename... A>
struct FnTraits<R (*)(A...)> {
  using Result = R;
  using Args = std::tuple<std::decay_t<A>...>;
};
template <typename R, typename... A>
struct FnTraits<R(A...)> : FnTraits<R (*)(A...)> {};
template <typename C, typename R, typename... A>
struct FnTraits<R (C::*)(A...)> : FnTraits<R (*)(A...)> {};
template <typename C, typename R, typename... A>
struct FnTraits<R (C::*)(A...) const> : FnTraits<R (*)(A...)> {};

template <typename T>
struct FutureValue {
  using type = T;
  static constexpr bool is_future = false;
};
template <typename T>
struct FutureValue<Future<T>> {
  using type = T;
  static constexpr bool is_future = true;
};

template <typename T>
std::shared_ptr<void> box(T&& v) {
  return std::make_shared<std::decay_t<T>>(std::forward<T>(v));
}

template <typename R>
std::function<void(const void*, Packer&)> packer_for() {
  if constexpr (std::is_void_v<R>) {
    return [](const void*, Packer& pk) { pk.pack_nil(); };
  } else {
    return [](const void* v, Packer& pk) { pk.pack(*static_cast<const R*>(v)); };
  }
}

// Decodes argument I of a call as type A.
template <typename A>
A decode_arg(const InMessage& m, const msgpack::object& o, const std::shared_ptr<CallEngine>& core,
             const std::string& fn, std::size_t index) {
  try {
    return m.convert_object<A>(o, core, "argument " + std::to_string(index + 1) + " of '" + fn + "'");
  } catch (const ProtocolError& e) {
    throw BadCallError(e.what());
  }
}

template <typename Self, typename AllArgs, std::size_t kSkip, typename F, std::size_t... I>
decltype(auto) apply_decoded(const F& fn, void* self, const InMessage& m, const msgpack::object& body,
                             const std::shared_ptr<CallEngine>& core, const std::string& name,
                             std::index_sequence<I...>) {
  if constexpr (std::is_void_v<Self>) {
    return fn(decode_arg<std::tuple_element_t<I, AllArgs>>(m, body.via.array.ptr[I], core, name, I)...);
  } else {
    return fn(*static_cast<Self*>(self),
              decode_arg<std::tuple_element_t<I + kSkip, AllArgs>>(m, body.via.array.ptr[I], core, name, I)...);
  }
}

// Builds a Callable from fn(Self&, Args...) (when Self is not void) or fn(Args...).
// kPack=false leaves pack_result empty (for results that cannot be serialized).
template <typename Self, typename F, bool kPack = true>
Callable make_callable(const std::string& name, F fn) {
  using Traits = FnTraits<F>;
  using R = typename Traits::Result;
  using AllArgs = typename Traits::Args;
  constexpr std::size_t kSkip = std::is_void_v<Self> ? 0 : 1;
  constexpr std::size_t kArity = std::tuple_size_v<AllArgs> - kSkip;
  using V = typename FutureValue<R>::type;

  Callable c;
  c.result_type = typeid(V);
  c.result_type_name = type_name<V>();
  if constexpr (kPack) c.pack_result = packer_for<V>();
  c.invoke = [name, fn = std::move(fn)](void* self, const InMessage& m,
                                        const std::shared_ptr<CallEngine>& core) -> Future<std::shared_ptr<void>> {
    const msgpack::object& body = m.body();
    if (body.type != msgpack::type::ARRAY)
      throw BadCallError("arguments of '" + name + "' must be a msgpack array, got " + msgpack_type_name(body));
    if (body.via.array.size != kArity)
      throw BadCallError("'" + name + "' takes " + std::to_string(kArity) + " argument(s), got " +
                         std::to_string(body.via.array.size));
    auto call_with_indices = [&](auto seq) -> R {
      return apply_decoded<Self, AllArgs, kSkip>(fn, self, m, body, core, name, seq);
    };
    if constexpr (FutureValue<R>::is_future) {
      R fut = call_with_indices(std::make_index_sequence<kArity>{});
      return fut.then_inline([](const R& f) -> std::shared_ptr<void> {
        if constexpr (std::is_void_v<V>) {
          f.value();
          return nullptr;
        } else {
          return box(V(f.value()));
        }
      });
    } else if constexpr (std::is_void_v<R>) {
      call_with_indices(std::make_index_sequence<kArity>{});
      return Future<std::shared_ptr<void>>::ready(nullptr);
    } else {
      return Future<std::shared_ptr<void>>::ready(box(call_with_indices(std::make_index_sequence<kArity>{})));
    }
  };
  return c;
}

// Packs args... as the request body (a msgpack array).
template <typename... Args>
BodyWriter args_writer(const Args&... args) {
  return [&args...](Packer& pk) {
    pk.pack_array(sizeof...(Args));
    (pk.pack(args), ...);
  };
}

// Sends a request and returns a Future of the decoded result.
template <typename R>
Future<R> call_async(const std::shared_ptr<CallEngine>& core, int dest, Header h, const BodyWriter& body,
                     std::chrono::milliseconds timeout) {
  Promise<R> p;
  Future<R> out = p.get_future();
  std::weak_ptr<CallEngine> weak = core;
  Executor* ex = core->callback_executor();
  std::string what = "result of '" + h.fn + "'";
  core->call(
      dest, std::move(h), body,
      [p, weak, ex, what = std::move(what)](InMessage* m, std::exception_ptr err) {
        if (err) {
          p.set_error(err, ex);
          return;
        }
        try {
          if constexpr (std::is_void_v<R>) {
            p.set_value(ex);
          } else {
            p.set_value(m->convert_object<R>(m->body(), weak.lock(), what), ex);
          }
        } catch (...) {
          p.set_error(std::current_exception(), ex);
        }
      },
      timeout);
  return out;
}

// Sends a request on the synchronous fast path (CallEngine::call_sync) and returns the decoded
// result, or throws what the call failed with.
template <typename R>
R call_sync(const std::shared_ptr<CallEngine>& core, int dest, Header h, const BodyWriter& body,
            std::chrono::milliseconds timeout) {
  std::exception_ptr error;
  std::optional<std::conditional_t<std::is_void_v<R>, char, R>> out;
  const std::string what = "result of '" + h.fn + "'";
  core->call_sync(
      dest, std::move(h), body,
      [&](InMessage* m, std::exception_ptr err) {
        if (err) {
          error = err;
          return;
        }
        if constexpr (!std::is_void_v<R>) {
          try {
            out.emplace(m->convert_object<R>(m->body(), core, what));
          } catch (...) {
            error = std::current_exception();
          }
        }
      },
      timeout);
  if (error) std::rethrow_exception(error);
  if constexpr (!std::is_void_v<R>) return std::move(*out);
}

}  // namespace distrl::transport::detail
