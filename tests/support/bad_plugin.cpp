// Plugins the loader must refuse by name (envs::load_env_plugin), one per BAD_PLUGIN_KIND:
//   1: built against other environment headers (ABI 999): rl_test.cpp's RlPluginTest;
//   2: two entries of one name; 3: a name starting with "gymnasium:" (env_test.cpp).
#include "envs/plugin.h"

namespace {
distrl::envs::Env* make_none() { return nullptr; }
}  // namespace

extern "C" __attribute__((visibility("default"))) const distrl::envs::PluginInfo* distrl_env_plugin() {
#if BAD_PLUGIN_KIND == 1
  static const distrl::envs::PluginEnv envs[] = {{"Never-v0", nullptr}};
  static const distrl::envs::PluginInfo info{999, __GXX_ABI_VERSION, _GLIBCXX_USE_CXX11_ABI, "9.9", envs, 1};
#elif BAD_PLUGIN_KIND == 2
  static const distrl::envs::PluginEnv envs[] = {
      {"Twice-v0", make_none}, {"Once-v0", make_none}, {"Twice-v0", make_none}};
  static const distrl::envs::PluginInfo info{
      distrl::envs::kEnvAbi, __GXX_ABI_VERSION, _GLIBCXX_USE_CXX11_ABI, "", envs, 3};
#else
  static const distrl::envs::PluginEnv envs[] = {{"gymnasium:Mine-v0", make_none}};
  static const distrl::envs::PluginInfo info{
      distrl::envs::kEnvAbi, __GXX_ABI_VERSION, _GLIBCXX_USE_CXX11_ABI, "", envs, 1};
#endif
  return &info;
}
