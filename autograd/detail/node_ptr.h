// How LibTorch owns autograd graph nodes, so the engine has one code path for both versions it
// builds against: 1.x holds them in std::shared_ptr (Node derives from enable_shared_from_this),
// 2.x in c10::intrusive_ptr. Edge::function's type says which. Private to autograd/.
#pragma once

#include <memory>
#include <type_traits>
#include <utility>

#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/autograd/edge.h>

namespace distrl::autograd::detail {

using NodePtr = decltype(torch::autograd::Edge::function);

template <class P>
struct IsSharedPtr : std::false_type {};
template <class T>
struct IsSharedPtr<std::shared_ptr<T>> : std::true_type {};
constexpr bool kSharedNodes = IsSharedPtr<NodePtr>::value;

// The owning pointer to a node of type T, as this LibTorch spells it.
template <class T>
using NodePtrOf = std::conditional_t<kSharedNodes, std::shared_ptr<T>, c10::intrusive_ptr<T>>;

// A new node (make_shared / make_intrusive).
template <class T, class... A>
NodePtrOf<T> make_node(A&&... args) {
  if constexpr (kSharedNodes) return std::make_shared<T>(std::forward<A>(args)...);
  else return c10::make_intrusive<T>(std::forward<A>(args)...);
}

// Another owner of a node already held by a graph (reached through an edge's raw pointer).
template <class T>
NodePtrOf<T> share_node(T* node) {
  if constexpr (kSharedNodes) return std::static_pointer_cast<T>(node->shared_from_this());
  else return c10::intrusive_ptr<T>::unsafe_reclaim_from_nonowning(node);
}

}  // namespace distrl::autograd::detail
