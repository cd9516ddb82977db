// The types the engine and the typed templates (callable.h, rpc_agent.h, rref.h) share: a call's
// completion, a registered callable and class, the error of a call's arguments. Installed with
// the public headers because those templates compile against it (with call_engine.h); the
// engine itself (rpc_core.h) and its owned parts (call_table.h, registry.h, ...) are not.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <typeindex>
#include <utility>
#include <vector>

#include "transport/runtime/future.h"
#include "transport/wire/detail/in_message.h"

namespace distrl::transport::detail {

// Exactly one of (message, error) is set. Runs where the call ends -- the I/O thread (replies,
// deadlines, lost peers), the calling thread (the sync fast path) or the thread shutting the
// agent down -- and never under a part's lock: decode only, no user code.
using Completion = std::function<void(InMessage*, std::exception_ptr)>;

// Thrown while decoding a call's arguments: reported to the caller as its ProtocolError.
class BadCallError : public ProtocolError {
 public:
  using ProtocolError::ProtocolError;
};

// A registered function, constructor or method, type-erased. invoke decodes the arguments
// (throwing BadCallError), runs the callable and returns its result boxed (nullptr for void).
struct Callable {
  std::function<Future<std::shared_ptr<void>>(void* self, const InMessage&, const std::shared_ptr<CallEngine>&)> invoke;
  std::function<void(const void* result, Packer&)> pack_result;  // empty when the result cannot be packed
  std::type_index result_type = typeid(void);
  std::string result_type_name;
  bool run_inline = false;  // served on the I/O thread (RunOn::IoThread)
};

// A remotely constructible class: its methods and, when fetchable, how to pack an instance.
struct ClassInfo {
  std::type_index type = typeid(void);
  std::string type_name;
  std::vector<std::pair<std::string, Callable>> methods;
  std::function<void(const void* object, Packer&)> pack_object;
};

}  // namespace distrl::transport::detail
