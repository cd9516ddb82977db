#include "envs/env.h"

#include <dlfcn.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <set>

#include "common/config.h"
#include "common/error.h"
#include "envs/bipedal_walker.h"
#include "envs/cartpole.h"
#include "envs/classic_control.h"
#include "envs/gymnasium_env.h"
#include "envs/lunar_lander.h"
#include "envs/plugin.h"

namespace distrl::envs {

namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, EnvFactory> factories;
  Registry() {
    factories["CartPole-v1"] = [] { return std::make_unique<CartPole>(); };
    factories["Acrobot-v1"] = [] { return std::make_unique<Acrobot>(); };
    factories["MountainCar-v0"] = [] { return std::make_unique<MountainCar>(false); };
    factories["MountainCarContinuous-v0"] = [] { return std::make_unique<MountainCar>(true); };
    factories["Pendulum-v1"] = [] { return std::make_unique<Pendulum>(); };
    factories["BipedalWalker-v3"] = [] { return std::make_unique<BipedalWalker>(false); };
    factories["BipedalWalkerHardcore-v3"] = [] { return std::make_unique<BipedalWalker>(true); };
    for (int version : {2, 3})
      for (bool continuous : {false, true}) {
        LunarLanderOptions o;
        o.continuous = continuous;
        o.version = version;
        factories[LunarLander(o).name()] = [o] { return std::make_unique<LunarLander>(o); };
      }
  }
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

void register_env(const std::string& name, EnvFactory factory) {
  std::lock_guard<std::mutex> lock(registry().mu);
  registry().factories[name] = std::move(factory);
}

std::vector<std::string> env_names() {
  std::lock_guard<std::mutex> lock(registry().mu);
  std::vector<std::string> names;
  for (const auto& kv : registry().factories) names.push_back(kv.first);
  return names;
}

std::unique_ptr<Env> make_env(const std::string& name) {
  if (const auto id = gymnasium_id(name)) return std::make_unique<GymnasiumEnv>(*id);
  EnvFactory f;
  {
    std::lock_guard<std::mutex> lock(registry().mu);
    auto it = registry().factories.find(name);
    if (it != registry().factories.end()) f = it->second;
  }
  if (!f) {
    std::string names;
    for (const auto& n : env_names()) names += (names.empty() ? "" : ", ") + n;
    throw EnvError("unknown environment '" + name + "' (available: " + names + ")");
  }
  return f();
}

std::vector<std::string> load_env_plugin(const std::string& path) {
  static std::mutex mu;
  static std::map<std::string, std::vector<std::string>> loaded;  // path -> the names it added
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = loaded.find(path); it != loaded.end()) return it->second;
  const std::string what = "env.plugin '" + path + "'";
  // RTLD_NOW: a symbol the library lacks is an error here, not a crash at the first step.
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = ::dlerror();
    throw ConfigError(what + ": cannot load it: " + (why ? why : "unknown reason") +
                      " (give the path of a shared library built as examples/env_plugin/ shows)");
  }
  using Entry = const PluginInfo* (*)();
  const auto entry = reinterpret_cast<Entry>(::dlsym(handle, "distrl_env_plugin"));
  if (!entry) {
    ::dlclose(handle);
    throw ConfigError(what +
                      " is not a distrl environment plugin: it exports no distrl_env_plugin() (define one "
                      "with DISTRL_ENV_PLUGIN, envs/plugin.h)");
  }
  const PluginInfo* info = entry();
  const auto refuse = [&](const std::string& mismatch) {
    ::dlclose(handle);
    throw ConfigError(what + " was built against " + mismatch +
                      ": rebuild it against this installation's "
                      "headers (find_package(distrl), the same compiler; examples/env_plugin/)");
  };
  if (info == nullptr) refuse("nothing (distrl_env_plugin() returned null)");
  if (info->env_abi != kEnvAbi)
    refuse("environment headers of ABI " + std::to_string(info->env_abi) +
           (info->built_against && *info->built_against ? std::string(" (distrl ") + info->built_against + ")" : "") +
           ", this process has ABI " + std::to_string(kEnvAbi) + " (distrl " + DISTRL_VERSION + ")");
  if (info->gxx_abi != __GXX_ABI_VERSION || info->cxx11_string_abi != _GLIBCXX_USE_CXX11_ABI)
    refuse("another C++ ABI (GCC ABI " + std::to_string(info->gxx_abi) + ", _GLIBCXX_USE_CXX11_ABI=" +
           std::to_string(info->cxx11_string_abi) + "; this process: " + std::to_string(__GXX_ABI_VERSION) + ", " +
           std::to_string(_GLIBCXX_USE_CXX11_ABI) + ")");
  if (info->count < 1 || info->count > 1024 || info->envs == nullptr) refuse("no environments (an empty list)");
  std::vector<std::string> names;
  for (int i = 0; i < info->count; ++i) {
    const PluginEnv e = info->envs[i];
    if (e.name == nullptr || *e.name == '\0' || e.make == nullptr) refuse("an entry without a name or a factory");
    const std::string name = e.name;
    // One name twice would leave the later entry silently in place of the earlier, and a
    // gymnasium: name is always Gymnasium's (make_env): refused, naming the entry.
    std::string wrong;
    if (std::find(names.begin(), names.end(), name) != names.end())
      wrong = "twice (entries of one name replace each other)";
    else if (gymnasium_id(name))
      wrong = "as a name, but names starting with 'gymnasium:' are Gymnasium's own environments";
    if (!wrong.empty()) {
      ::dlclose(handle);
      throw ConfigError(what + " lists '" + name + "' " + wrong + ": give each of its environments a name of its own");
    }
    names.push_back(name);
  }
  // A name taken already (built in, or from another plugin) is refused: a plugin must not
  // replace an environment behind the user's back.
  const auto taken = env_names();
  for (const auto& name : names) {
    if (std::find(taken.begin(), taken.end(), name) == taken.end()) continue;
    std::string by = "a built-in environment";
    for (const auto& [other, its] : loaded)
      if (std::find(its.begin(), its.end(), name) != its.end()) by = "defined by env.plugin '" + other + "'";
    ::dlclose(handle);
    throw ConfigError(what + " defines '" + name + "', which is " + by +
                      " already: give the plugin's environment "
                      "another name");
  }
  // Kept loaded for the process's life: the envs' code and vtables live in it.
  for (int i = 0; i < info->count; ++i) {
    Env* (*make)() = info->envs[i].make;
    const std::string name = info->envs[i].name;
    register_env(name, [make, name, what]() -> std::unique_ptr<Env> {
      std::unique_ptr<Env> env(make());
      if (!env) throw EnvError(what + ": its factory for '" + name + "' returned null");
      return env;
    });
  }
  return loaded[path] = names;
}

}  // namespace distrl::envs
