#include "tools/config_launch.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "common/error.h"
#include "common/wait_notice.h"
#include "common/run_dir.h"
#include "common/settings.h"
#include "run/workload_catalog.h"

namespace distrl::tools {
namespace {

// A setting (dotted key) from the file, or its last override; empty when neither has it.
std::string string_setting(const std::string& config, const std::vector<std::string>& overrides,
                           const std::string& key) {
  return Settings::peek(config, overrides, key).value_or("");
}

// A positive integer setting from the file, or its last override.
int int_setting(const std::string& config, const std::vector<std::string>& overrides, const std::string& key,
                int fallback, int min = 1) {
  const std::string value = string_setting(config, overrides, key);
  if (value.empty()) return fallback;  // the tool's default; it validates the rest
  try {
    std::size_t used = 0;
    int v = std::stoi(value, &used);
    if (used == value.size() && v >= min) return v;
  } catch (const std::exception&) {}
  throw ConfigError(config + ": " + key + ": '" + value + "' is not an integer of at least " + std::to_string(min));
}

constexpr auto kCheckTimeout = std::chrono::seconds(300);

std::string tool(const std::string& name) {
  const std::string exe = self_dir() + "/" + name;
  if (::access(exe.c_str(), X_OK) != 0) throw Error("cannot find " + exe + " (build it: make build)");
  return exe;
}

// Runs `exe --config F overrides --check-config` and returns what it printed; a refusal's output
// is shown and stops the launch.
std::string check(const std::string& exe, const std::vector<std::string>& tail) {
  std::vector<std::string> cmd{exe};
  cmd.insert(cmd.end(), tail.begin(), tail.end());
  cmd.push_back("--check-config");
  const std::string out =
      (std::filesystem::temp_directory_path() / ("distrl-launch-check-" + std::to_string(::getpid()))).string();
  // The tool loads LibTorch and may make a Gymnasium env or read a checkpoint: said when it lasts,
  // and bounded (kCheckTimeout: past the longest a healthy check takes, an env make's 120 s).
  const pid_t pid = start_process(cmd, out);
  WaitNotice notice(
      "distrl-launch: waiting for " + exe.substr(exe.rfind('/') + 1) +
      " --check-config to check the configuration (it loads LibTorch, makes the env, reads a checkpoint)");
  const auto deadline = std::chrono::steady_clock::now() + kCheckTimeout;
  int code = -1;
  while ((code = wait_process(pid, false)) < 0) {
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      wait_process(pid);
      std::remove(out.c_str());
      throw Error(exe + " --check-config answered nothing for " +
                  std::to_string(std::chrono::duration_cast<std::chrono::seconds>(kCheckTimeout).count()) +
                  " s; killed it (run it by hand to see where it hangs)");
    }
    notice.tick();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::stringstream text;
  text << std::ifstream(out).rdbuf();
  std::remove(out.c_str());
  if (code != 0) {
    std::cerr << text.str();
    throw ConfigError("the configuration was refused (above); nothing started");
  }
  return text.str();
}

// The tool's "TOOL: ok: ..." line (run::check_line), for the launcher to show; the whole output
// when a tool says none.
std::string ok_line(const std::string& exe, const std::string& said) {
  const std::string head = exe.substr(exe.rfind('/') + 1) + ": ok: ";
  std::istringstream lines(said);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind(head, 0) == 0) return line;
  return said;
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
  // The file's workload picks the tool (which refuses an override naming another tool's);
  // reading it refuses a file that is not YAML.
  const std::string workload = run::workload_named_by(config, {});
  // Which node this is, for the tool's checks and the ranks (node 0 writes the outputs).
  ::setenv("DISTRL_NODE_RANK", std::to_string(o->node_rank).c_str(), 1);
  // What the claim of run.out_dir makes of the directory (common/run_dir.h).
  this_run().workload = workload;
  for (const auto& a : overrides)
    if (a == "--resume" || a.rfind("--resume=", 0) == 0) this_run().resume = true;
  // The world's security first: the configuration checks below already run under it.
  if (o->security.empty()) o->security = string_setting(config, overrides, "security");
  if (o->security_key.empty()) o->security_key = string_setting(config, overrides, "security_key");
  prepare_security(o);
  std::vector<std::string> tail{"--config", config};
  tail.insert(tail.end(), overrides.begin(), overrides.end());
  // The file may ask for restarts (the tool documents and checks the key); --max-restarts wins.
  if (o->max_restarts == 0) o->max_restarts = int_setting(config, overrides, "launch.max_restarts", 0, 0);
  // The tool validates the whole file (it loads the env, reads a checkpoint) before anything
  // starts; the world its roles make comes from the catalog, over the same keys.
  const std::string lead = tool(run::find_workload_entry(workload, config).tool);
  o->checked = ok_line(lead, check(lead, tail));
  const run::World world = run::world_of(config, overrides);
  o->nproc = world.roles.ranks();
  o->out_dir = world.out_dir;
  o->command = {lead};
  o->command.insert(o->command.end(), tail.begin(), tail.end());
  int rank = 0;  // a rank whose role runs another tool than rank 0's gets its own command
  for (const run::RoleGroup& g : world.roles.groups) {
    if (g.tool == world.workload->tool) {
      rank += g.count;
      continue;
    }
    std::vector<std::string> command{tool(g.tool)};  // found once per role, not once per rank
    command.insert(command.end(), tail.begin(), tail.end());
    for (int k = 0; k < g.count; ++k) o->rank_commands[rank++] = command;
  }
  if (world.workload->name != run::kRlWorkload) return;
  // RL: a dead observer is named and left behind by its agent; with several agents and a
  // learner process, a dead agent is named by the learner, which goes on with the others' batches.
  const int agents = world.roles.count("agent"), learners = world.roles.count("learner");
  for (int r = agents; r < o->nproc - learners; ++r) o->expendable.insert(r);
  if (agents > 1 && learners > 0)
    for (int k = 0; k < agents; ++k) o->expendable.insert(k);
}

}  // namespace

void configure_config_launch(const std::string& config, const std::vector<std::string>& overrides, LaunchOptions* o) {
  configure_world(config, overrides, o);
  if (o->nnodes <= 1) return;
  // Across nodes: the world in blocks, node k its k-th share (rank 0, the agent or the first
  // server or stage, on node 0). Every node computes the same split from the same file.
  const int world = o->nproc;
  if (o->node_rank < 0 || o->node_rank >= o->nnodes)
    throw ConfigError("--node-rank " + std::to_string(o->node_rank) + " is not in [0, " + std::to_string(o->nnodes) +
                      ")");
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
