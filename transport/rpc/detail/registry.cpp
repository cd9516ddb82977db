#include "transport/rpc/detail/registry.h"

#include <mutex>

namespace distrl::transport::detail {

void Registry::add_function(const std::string& name, Callable c) {
  std::unique_lock<std::shared_mutex> lock(mu_);
  functions_[name] = std::make_shared<const Callable>(std::move(c));
}

void Registry::add_class(ClassInfo info) {
  std::unique_lock<std::shared_mutex> lock(mu_);
  auto type = info.type;
  classes_[type] = std::make_shared<const ClassInfo>(std::move(info));
}

std::shared_ptr<const Callable> Registry::function(const std::string& name, const std::string& worker) const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  auto it = functions_.find(name);
  if (it != functions_.end()) return it->second;
  std::string names;
  for (auto& kv : functions_) names += (names.empty() ? "" : ", ") + kv.first;
  throw BadCallError("unknown function '" + name + "' on " + worker +
                     " (registered: " + (names.empty() ? "none" : names) + ")");
}

bool Registry::runs_inline(const std::string& name) const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  auto it = functions_.find(name);
  return it != functions_.end() && it->second->run_inline;
}

const Callable* Registry::method(std::type_index type, const std::string& name, const std::string& worker,
                                 std::shared_ptr<const ClassInfo>* keep) const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  auto it = classes_.find(type);
  if (it == classes_.end())
    throw BadCallError("object of type " + demangle(type.name()) + " on " + worker +
                       " has no registered methods (no '" + name + "')");
  *keep = it->second;
  for (auto& [method_name, c] : it->second->methods)
    if (method_name == name) return &c;
  std::string names;
  for (auto& kv : it->second->methods) names += (names.empty() ? "" : ", ") + kv.first;
  throw BadCallError("class " + it->second->type_name + " has no method '" + name + "' (methods: " + names + ")");
}

std::function<void(const void*, Packer&)> Registry::object_packer(std::type_index type) const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  auto it = classes_.find(type);
  return it == classes_.end() ? nullptr : it->second->pack_object;
}

}  // namespace distrl::transport::detail
