// A plugin that says it was built against other environment headers (ABI 999): the loader must
// refuse it by name (tests/integration/rl_test.cpp, RlPluginTest).
#include "envs/plugin.h"

extern "C" __attribute__((visibility("default"))) const distrl::envs::PluginInfo* distrl_env_plugin() {
  static const distrl::envs::PluginEnv none[] = {{"Never-v0", nullptr}};
  static const distrl::envs::PluginInfo info{999, __GXX_ABI_VERSION, _GLIBCXX_USE_CXX11_ABI, "9.9", none, 1};
  return &info;
}
