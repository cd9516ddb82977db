#include "tools/config_launch.h"

#include <unistd.h>

#include <yaml-cpp/yaml.h>

#include <filesystem>

#include "common/error.h"

namespace distrl::tools {
namespace {

YAML::Node load(const std::string& config) {
  try {
    return YAML::LoadFile(config);
  } catch (const YAML::Exception& e) {
    throw ConfigError(config + ": not valid YAML: " + e.what());
  }
}

// A scalar setting (dotted key) from the file, or its last override; empty when neither has it.
std::string string_setting(const YAML::Node& root, const std::vector<std::string>& overrides, const std::string& key) {
  std::string value;
  YAML::Node n = root;
  std::size_t start = 0;
  for (;;) {
    const auto dot = key.find('.', start);
    const std::string part = key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!n.IsMap() || !n[part]) {
      n.reset();
      break;
    }
    n.reset(n[part]);  // rebinds; `n = n[part]` would overwrite the node n shares with root
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  if (n.IsDefined() && n.IsScalar()) value = n.as<std::string>();
  for (std::size_t i = 0; i < overrides.size(); ++i) {
    const std::string& a = overrides[i];
    if (a.rfind("--" + key + "=", 0) == 0) value = a.substr(key.size() + 3);
    else if (a.rfind(key + "=", 0) == 0) value = a.substr(key.size() + 1);
    else if (a == "--" + key && i + 1 < overrides.size()) value = overrides[i + 1];
  }
  return value;
}

// A positive integer setting from the file, or its last override.
int int_setting(const std::string& config, const YAML::Node& root, const std::vector<std::string>& overrides,
                const std::string& key, int fallback, int min = 1) {
  const std::string value = string_setting(root, overrides, key);
  if (value.empty()) return fallback;  // the tool's default; it validates the rest
  try {
    std::size_t used = 0;
    int v = std::stoi(value, &used);
    if (used == value.size() && v >= min) return v;
  } catch (const std::exception&) {
  }
  throw ConfigError(config + ": " + key + ": '" + value + "' is not an integer of at least " + std::to_string(min));
}

std::string tool(const std::string& name) {
  const std::string exe = self_dir() + "/" + name;
  if (::access(exe.c_str(), X_OK) != 0) throw Error("cannot find " + exe + " (build it: make build)");
  return exe;
}

// Runs `exe --config F overrides --check-config`; a refusal stops the launch.
void check(const std::string& exe, const std::vector<std::string>& tail) {
  std::vector<std::string> cmd{exe};
  cmd.insert(cmd.end(), tail.begin(), tail.end());
  cmd.push_back("--check-config");
  if (run_process(cmd) != 0) throw ConfigError("the configuration was refused (above); nothing started");
}

// One tool with the config on every rank, after it accepted the configuration.
void on_every_rank(const std::string& exe, const std::vector<std::string>& tail, LaunchOptions* o) {
  check(exe, tail);
  o->command = {exe};
  o->command.insert(o->command.end(), tail.begin(), tail.end());
}

}  // namespace

std::string self_dir() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw Error("cannot find this executable's directory: " + ec.message());
  return exe.parent_path().string();
}

namespace {

// The commands of a config's ranks and the world's size (o->nproc, before the split over nodes).
void configure_world(const std::string& config, const std::vector<std::string>& overrides, LaunchOptions* o) {
  const YAML::Node root = load(config);
  // The world's security first: the configuration checks below already run under it.
  if (o->security.empty()) o->security = string_setting(root, overrides, "security");
  if (o->security_key.empty()) o->security_key = string_setting(root, overrides, "security_key");
  prepare_security(o);
  std::vector<std::string> tail{"--config", config};
  tail.insert(tail.end(), overrides.begin(), overrides.end());
  // The file may ask for restarts (the tool documents and checks the key); --max-restarts wins.
  if (o->max_restarts == 0) o->max_restarts = int_setting(config, root, overrides, "launch.max_restarts", 0, 0);
  if (root.IsMap() && root["workload"]) {  // a workload with roles: its own tool on every rank
    const std::string workload = root["workload"].IsScalar() ? root["workload"].as<std::string>() : "";
    if (workload == "rnn_dist_autograd") {
      on_every_rank(tool("distrl-rnn"), tail, o);
      o->nproc = int_setting(config, root, overrides, "roles.trainers", 1) + 1;  // rank 0 is the ps
      return;
    }
    if (workload == "ps_batch_update" || workload == "ps_model_on_server" || workload == "ps_hybrid" ||
        workload == "ps_skipgram") {
      on_every_rank(tool("distrl-ps"), tail, o);
      o->nproc = int_setting(config, root, overrides, "roles.servers", 1) +
                 int_setting(config, root, overrides, "roles.trainers", 2) + (workload == "ps_hybrid" ? 1 : 0);
      return;
    }
    if (workload == "pipeline_fashion_mnist" || workload == "pipeline_resnet50" ||
        workload == "pipeline_resnet50_model_parallel") {
      on_every_rank(tool("distrl-pipeline"), tail, o);
      o->nproc = workload == "pipeline_resnet50" ? 3
                 : workload == "pipeline_resnet50_model_parallel" ? 1
                                                                   : int_setting(config, root, overrides, "roles.stages", 2);
      return;
    }
    throw ConfigError(config + ": workload: '" + workload + "' is not known (known: rnn_dist_autograd, ps_batch_update, ps_model_on_server, ps_hybrid, ps_skipgram, pipeline_fashion_mnist, pipeline_resnet50, pipeline_resnet50_model_parallel)");
  }
  if (root.IsMap() && root["dist"]) {  // supervised training: distrl-train on every rank
    on_every_rank(tool("distrl-train"), tail, o);
    o->nproc = int_setting(config, root, overrides, "dist.world_size", 2);
    return;
  }
  const std::string agent = tool("distrl-agent"), observer = tool("distrl-observer");
  check(agent, tail);
  o->nproc = int_setting(config, root, overrides, "observers", 4) + 1;
  o->rank0_command = {agent};
  o->rank0_command.insert(o->rank0_command.end(), tail.begin(), tail.end());
  o->command = {observer};
  o->command.insert(o->command.end(), tail.begin(), tail.end());
}

}  // namespace

void configure_config_launch(const std::string& config, const std::vector<std::string>& overrides,
                             LaunchOptions* o) {
  configure_world(config, overrides, o);
  if (o->nnodes <= 1) return;
  // Across nodes: the world in blocks, node k its k-th share (rank 0, the agent or the first
  // server or stage, on node 0). Every node computes the same split from the same file.
  const int world = o->nproc;
  if (o->node_rank < 0 || o->node_rank >= o->nnodes)
    throw ConfigError("--node-rank " + std::to_string(o->node_rank) + " is not in [0, " + std::to_string(o->nnodes) + ")");
  if (world < o->nnodes)
    throw ConfigError(config + ": its " + std::to_string(world) + " ranks cannot fill --nnodes " +
                      std::to_string(o->nnodes) + " (every node runs at least one: use fewer nodes, or more ranks)");
  const int first = static_cast<int>(static_cast<long long>(world) * o->node_rank / o->nnodes);
  const int end = static_cast<int>(static_cast<long long>(world) * (o->node_rank + 1) / o->nnodes);
  o->world_size = world;
  o->first_rank = first;
  o->nproc = end - first;
}

}  // namespace distrl::tools
