// Environments from a shared library, without rebuilding distrl: write an Env (envs/env.h),
// compile it against the installed headers into a shared library, and name it in the RL config:
//
//   env:
//     plugin: /path/to/libmy_env.so   # loaded by distrl-agent and every distrl-observer
//     name: Corridor-v0               # one of the names the plugin registers
//
// The library defines its environments and exports them with one macro (examples/env_plugin/):
//
//   #include "envs/plugin.h"
//   class Corridor final : public distrl::envs::Env { ... };
//   DISTRL_ENV_PLUGIN({"Corridor-v0", [] { return static_cast<distrl::envs::Env*>(new Corridor); }})
//
// It needs the headers only (Env's defaults are inline): find_package(distrl) and
// target_link_libraries(my_env PRIVATE distrl::env_headers). The loader (envs::load_env_plugin)
// refuses, naming the fix, a library built against other envs headers (kEnvAbi) or another C++
// ABI (GCC's __GXX_ABI_VERSION, libstdc++'s _GLIBCXX_USE_CXX11_ABI): the Env objects cross the
// boundary as C++ objects, so both sides must agree on their layout. It also refuses a name that is
// taken (built in, or another plugin's), listed twice, or starts with `gymnasium:` (those are
// always Gymnasium's own environments).
//
// Lifetime: a plugin stays loaded for the process's life. Its factories run on whatever thread
// makes an env (the agent's main thread, an observer's handler threads).
#pragma once

#include "envs/env.h"

namespace distrl::envs {

struct PluginEnv {
  const char* name;  // e.g. "Corridor-v0": what env.name says
  Env* (*make)();    // a new env, owned by the caller
};

// What a plugin's distrl_env_plugin() returns: how it was built, and its environments.
struct PluginInfo {
  int env_abi;                // kEnvAbi of the headers it was compiled against
  int gxx_abi;                // __GXX_ABI_VERSION
  int cxx11_string_abi;       // _GLIBCXX_USE_CXX11_ABI (std::string's layout)
  const char* built_against;  // distrl version of those headers ("" when unknown)
  const PluginEnv* envs;
  int count;
};

}  // namespace distrl::envs

#ifndef DISTRL_VERSION
#define DISTRL_PLUGIN_VERSION ""
#else
#define DISTRL_PLUGIN_VERSION DISTRL_VERSION
#endif

// Defines the one symbol the loader looks for, with the build facts of the headers included.
#define DISTRL_ENV_PLUGIN(...)                                                                              \
  extern "C" __attribute__((visibility("default"))) const ::distrl::envs::PluginInfo* distrl_env_plugin() { \
    static const ::distrl::envs::PluginEnv envs[] = {__VA_ARGS__};                                          \
    static const ::distrl::envs::PluginInfo info{::distrl::envs::kEnvAbi,                                   \
                                                 __GXX_ABI_VERSION,                                         \
                                                 _GLIBCXX_USE_CXX11_ABI,                                    \
                                                 DISTRL_PLUGIN_VERSION,                                     \
                                                 envs,                                                      \
                                                 static_cast<int>(sizeof(envs) / sizeof(envs[0]))};         \
    return &info;                                                                                           \
  }
