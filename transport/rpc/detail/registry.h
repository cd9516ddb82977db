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

#include "transport/rpc/detail/call_types.h"
#include "transport/wire/detail/message.h"
#include "transport/runtime/future.h"

namespace distrl::transport::detail {

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
