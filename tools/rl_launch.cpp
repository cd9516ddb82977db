#include "tools/rl_launch.h"

#include <unistd.h>

#include <yaml-cpp/yaml.h>

#include <filesystem>

#include "common/error.h"

namespace distrl::tools {
namespace {

// `observers` from the file, or its last override.
int observer_count(const std::string& config, const std::vector<std::string>& overrides) {
  std::string value;
  try {
    YAML::Node root = YAML::LoadFile(config);
    if (root["observers"]) value = root["observers"].as<std::string>();
  } catch (const YAML::Exception& e) {
    throw ConfigError(config + ": not valid YAML: " + e.what());
  }
  for (std::size_t i = 0; i < overrides.size(); ++i) {
    const std::string& a = overrides[i];
    if (a.rfind("--observers=", 0) == 0) value = a.substr(12);
    else if (a.rfind("observers=", 0) == 0) value = a.substr(10);
    else if (a == "--observers" && i + 1 < overrides.size()) value = overrides[i + 1];
  }
  if (value.empty()) return 4;  // distrl-agent's default; it validates the rest
  try {
    std::size_t used = 0;
    int n = std::stoi(value, &used);
    if (used == value.size() && n >= 1) return n;
  } catch (const std::exception&) {
  }
  throw ConfigError(config + ": observers: '" + value + "' is not a positive integer");
}

}  // namespace

std::string self_dir() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw Error("cannot find this executable's directory: " + ec.message());
  return exe.parent_path().string();
}

void configure_rl_launch(const std::string& config, const std::vector<std::string>& overrides, LaunchOptions* o) {
  const std::string dir = self_dir();
  const std::string agent = dir + "/distrl-agent", observer = dir + "/distrl-observer";
  for (const auto& exe : {agent, observer})
    if (::access(exe.c_str(), X_OK) != 0) throw Error("cannot find " + exe + " (build it: make build)");
  std::vector<std::string> tail{"--config", config};
  tail.insert(tail.end(), overrides.begin(), overrides.end());

  std::vector<std::string> check{agent};
  check.insert(check.end(), tail.begin(), tail.end());
  check.push_back("--check-config");
  const int rc = run_process(check);
  if (rc != 0) throw ConfigError("the configuration was refused (above); nothing started");

  o->nproc = observer_count(config, overrides) + 1;
  o->rank0_command = {agent};
  o->rank0_command.insert(o->rank0_command.end(), tail.begin(), tail.end());
  o->command = {observer};
  o->command.insert(o->command.end(), tail.begin(), tail.end());
}

}  // namespace distrl::tools
