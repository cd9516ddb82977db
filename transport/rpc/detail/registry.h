// What this worker serves, by name: functions (and whether each runs on the I/O thread) and
// classes (their methods, and how to pack an instance when the class is fetchable). Written at
// registration (the agent's setup callback, or later), read by every request. One shared lock;
// any thread. Private to transport/rpc/.
#pragma once

#include <functional>
#include <memory>
#include <shared_mutex>
#include <string>
#include <typeindex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "transport/detail/message.h"
#include "transport/future.h"

namespace distrl::transport::detail {

// Thrown while decoding a call's arguments: reported to the caller as its ProtocolError.
class BadCallError : public ProtocolError {
 public:
  using ProtocolError::ProtocolError;
};

// A registered function, constructor or method, type-erased. invoke decodes the arguments
// (throwing BadCallError), runs the callable and returns its result boxed (nullptr for void).
struct Callable {
  std::function<Future<std::shared_ptr<void>>(void* self, const InMessage&, const std::shared_ptr<RpcCore>&)> invoke;
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

class Registry {
 public:
  void add_function(const std::string& name, Callable c);
  void add_class(ClassInfo info);

  // The function registered as name; BadCallError naming the registered ones (worker: this
  // worker's name, for the message) when there is none.
  std::shared_ptr<const Callable> function(const std::string& name, const std::string& worker) const;
  // True when name is a function registered with RunOn::IoThread.
  bool runs_inline(const std::string& name) const;
  // Method `name` of the class of `type`; *keep holds the class (and so the method) while it is
  // used. BadCallError when the class or the method is not registered.
  const Callable* method(std::type_index type, const std::string& name, const std::string& worker,
                         std::shared_ptr<const ClassInfo>* keep) const;
  // How to pack an instance of `type` (a fetchable class); empty otherwise.
  std::function<void(const void*, Packer&)> object_packer(std::type_index type) const;

 private:
  mutable std::shared_mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<const Callable>> functions_;
  std::unordered_map<std::type_index, std::shared_ptr<const ClassInfo>> classes_;
};

}  // namespace distrl::transport::detail
