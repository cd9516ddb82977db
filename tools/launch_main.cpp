// distrl-launch: start N local ranks of a command, like torchrun on one node.
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "common/error.h"
#include "common/main_guard.h"
#include "common/run_dir.h"
#include "common/run_lock.h"
#include "run/workload_catalog.h"
#include "transport/bootstrap/cluster_env.h"
#include "tools/launcher.h"
#include "tools/config_launch.h"
#include "transport/bootstrap/store.h"

namespace {

bool is_yaml_file(const std::string& a) {
  const auto dot = a.rfind('.');
  const std::string ext = dot == std::string::npos ? "" : a.substr(dot);
  return (ext == ".yaml" || ext == ".yml") && std::filesystem::is_regular_file(a);
}

// `distrl-launch --config FILE --help`: the workload's tool lists its keys (with the file's
// values). Returns its exit code, or -1 when this is not that.
int show_workload_help(int argc, char** argv) {
  std::string config;
  bool help = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") help = true;
    else if (a == "--config" && i + 1 < argc) config = argv[++i];
    else if (a.rfind("--config=", 0) == 0) config = a.substr(9);
  }
  if (!help || config.empty() || !std::filesystem::is_regular_file(config)) return -1;
  try {
    const std::string workload = distrl::run::workload_named_by(config, {});
    const std::string tool = distrl::tools::self_dir() + "/" + distrl::run::find_workload_entry(workload, config).tool;
    std::cout << "distrl-launch --config " << config << ": the keys of its workload (" + workload + "), as " << tool
              << " --help lists them;\n"
              << "give any of them after the file as KEY=VALUE. distrl-launch's own flags: distrl-launch --help\n\n"
              << std::flush;
    ::execl(tool.c_str(), tool.c_str(), "--config", config.c_str(), "--help", static_cast<char*>(nullptr));
    std::cerr << "distrl-launch: cannot run " << tool << ": " << std::strerror(errno) << "\n";
    return 1;
  } catch (const distrl::Error& e) {
    std::cerr << "distrl-launch: " << e.what() << "\n";
    return 2;
  }
}

// What the command line says besides LaunchOptions.
struct Flags {
  std::string config, store_limits, resume;
  bool check_only = false, force = false;
  double grace_s = 0;
};

const std::string kUsage =
    "Two forms: distrl-launch --config FILE [--check-config] [KEY=VALUE ...]\n"
    "           distrl-launch --nproc N [options] -- CMD ARGS...";

void add_options(CLI::App& app, distrl::tools::LaunchOptions& o, Flags& f) {
  std::string workloads;  // "rl (distrl-agent, distrl-observer, distrl-learner), rnn_dist_autograd (distrl-rnn), ..."
  for (const auto& w : distrl::run::workload_catalog()) {
    std::string tools;
    for (const auto& g : w.roles([](const std::string&) { return std::nullopt; }).groups)
      if (tools.find(g.tool) == std::string::npos) tools += (tools.empty() ? "" : ", ") + g.tool;
    workloads += (workloads.empty() ? "" : ", ") + w.name + " (" + tools + ")";
  }
  app.add_option("--nproc,--nproc-per-node", o.nproc, "ranks to start on this node")->check(CLI::Range(1, 4096));
  app.add_option("--nnodes", o.nnodes,
                 "nodes in the job (with --config: the config's ranks split in blocks over the nodes, rank 0\n"
                 "on node 0; start one distrl-launch per node with the same file and overrides)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--node-rank", o.node_rank, "index of this node (0-based)");
  app.add_option("--master-addr", o.master_addr, "address of the node running rank 0");
  app.add_option("--master-port", o.master_port, "rendezvous port (default: a free port; required with --nnodes > 1)")
      ->check(CLI::Range(0, 65535));
  app.add_flag("!--no-prefix", o.prefix, "do not prefix output lines with the rank");
  app.add_option("--max-restarts", o.max_restarts,
                 "restart a rank that fails or is killed up to N times; it rejoins the running world under\n"
                 "its rank (a config's launch.max_restarts sets it too)")
      ->check(CLI::Range(0, 1000));
  f.grace_s = std::chrono::duration<double>(o.grace).count();
  app.add_option("--grace", f.grace_s,
                 "seconds between SIGTERM and SIGKILL when stopping ranks (they finish their step, save and write "
                 "their outputs in between)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 3600.0));
  app.add_option("--store-limits", f.store_limits,
                 "what the rendezvous store may hold: keys=N,mb=N,value_mb=N,waiters=N (any of them; default\n"
                 "keys=1048576,mb=64,value_mb=1,waiters=65536); sets DISTRL_STORE_LIMITS for every rank");
  app.add_option("--security", o.security,
                 "off or curve: authenticate and encrypt every socket of the world with ZeroMQ CURVE (default:\n"
                 "the config's security key, else off; needed across hosts; docs/security.md)")
      ->check(CLI::IsMember({"off", "curve"}));
  app.add_option("--security-key", o.security_key,
                 "the world's key file for --security curve (distrl-keygen FILE; default: a key made for this\n"
                 "run, one node only)");
  app.add_option("--config", f.config,
                 "a run configuration (configs/*.yaml), validated before anything starts; extra KEY=VALUE or\n"
                 "--key value arguments override the file. The file's `workload` starts the ranks its roles\n"
                 "make with its tools: " +
                     workloads +
                     " (rl: distrl-agent as rank 0, one distrl-observer per `observers`, with roles.learners 1\n"
                     "distrl-learner last); a file with no `workload` is ddp when it has a `dist` section, else rl")
      ->check(CLI::ExistingFile);
  app.add_flag("--check-config", f.check_only,
               "with --config: validate the file and overrides, print what would run (\"ok: ...\"), start nothing");
  app.add_flag("--force", f.force,
               "with --config: start a new run in a run.out_dir that holds a finished run's outputs, moving\n"
               "them aside into OUT_DIR/previous/<when it started>/ first (without it that is refused,\n"
               "naming the run; a directory a live run writes to is refused either way)");
  app.add_option("--resume", f.resume,
                 "with --config: continue the run whose checkpoint this is, appending to its outputs (RL:\n"
                 "OUT_DIR/policy.pt; distrl-train, distrl-rnn: OUT_DIR/checkpoint.pt; pipeline:\n"
                 "OUT_DIR/checkpoints); the stop line of a run says the whole command");
  app.footer(
      "A workload's keys, with what each does and its value in the file:\n"
      "  distrl-launch --config FILE --help\n"
      "Examples:\n"
      "  distrl-launch --config configs/cartpole.yaml observers=8 agent.mode=unbatched\n"
      "  distrl-launch --config configs/cartpole.yaml --resume runs/cartpole/policy.pt learner.rounds=400\n"
      "  distrl-launch --nproc 2 -- build/bin/api_tour");
  app.allow_extras();
}

// One distrl-launch per node under srun (--ntasks-per-node=1) or a Kubeflow TrainJob: the node
// count, this node's index, the master and (TrainJob) ranks per node come from the job, unless
// given on the command line. ConfigError for a partial job environment.
void take_node_env(const CLI::App& app, distrl::tools::LaunchOptions& o) {
  const auto node = distrl::transport::read_node_env();
  if (!node.found()) return;
  if (!app.count("--nnodes")) o.nnodes = node.nnodes;
  if (!app.count("--node-rank")) o.node_rank = node.node_rank;
  if (!app.count("--master-addr") && !node.master_addr.empty()) o.master_addr = node.master_addr;
  if (!app.count("--master-port") && node.master_port != 0) o.master_port = node.master_port;
  if (!app.count("--nproc") && node.nproc_per_node > 0) o.nproc = node.nproc_per_node;
  std::cerr << "distrl-launch: " << node.source << ": node " << o.node_rank << " of " << o.nnodes << ", master "
            << o.master_addr << ":" << o.master_port << "\n";
}

// The launch itself, once the command line is read (inside guarded_main: errors exit 2).
int run(const CLI::App& app, distrl::tools::LaunchOptions& o, const Flags& f, const std::vector<std::string>& argv) {
  if (!f.store_limits.empty()) {
    (void)distrl::transport::StoreLimits::parse(f.store_limits);  // refused here, before anything starts
    ::setenv("DISTRL_STORE_LIMITS", f.store_limits.c_str(), 1);
  }
  (void)distrl::transport::StoreLimits::from_env();  // a bad inherited value too
  if (f.config.empty() && o.command.empty()) {
    for (const auto& a : app.remaining())  // `distrl-launch configs/x.yaml`
      if (is_yaml_file(a))
        throw distrl::ConfigError("'" + a + "' is a config file: give it with --config (distrl-launch --config " + a +
                                  (app.remaining().size() > 1 ? " ..." : "") + ")");
    throw distrl::ConfigError("nothing to run:\n" + kUsage + "\n(see --help)");
  }
  distrl::RunLock claim;
  if (!f.config.empty()) {
    if (!o.command.empty()) throw distrl::ConfigError("give either --config FILE or -- CMD, not both");
    if (app.count("--nproc"))  // it was ignored silently: the config's roles make the world
      throw distrl::ConfigError(
          "--nproc does not go with --config: the config's roles say how many ranks run "
          "(observers, roles.*, dist.world_size); set those instead");
    if (f.force) ::setenv("DISTRL_RUN_LOCK_FORCE", "1", 1);  // the ranks' own claims (common/run_lock.h)
    // What a stop line or a refusal tells the user to type to go on (common/run_dir.h).
    ::setenv("DISTRL_LAUNCH_COMMAND", distrl::command_without_resume(argv).c_str(), 1);
    std::vector<std::string> tail = app.remaining();
    if (!f.resume.empty()) tail.insert(tail.end(), {"--resume", f.resume});
    distrl::tools::configure_config_launch(f.config, tail, &o);
    if (f.check_only) {
      std::cout << o.checked << std::endl;
      return 0;
    }
    // The run's output directory, claimed for the run's life before anything starts and
    // handed to the ranks (node 0, whose rank 0 writes the outputs).
    if (o.node_rank == 0 && !o.out_dir.empty()) {
      distrl::this_run().started = std::filesystem::file_time_type::clock::now();
      claim = distrl::RunLock(o.out_dir);
      claim.hand_to_children();
      // Every rank's checkpoints carry the run's id (a pipeline's stages, not only the lead).
      if (!distrl::this_run().run.empty()) ::setenv("DISTRL_RUN_ID", distrl::this_run().run.c_str(), 1);
    }
  } else if (f.check_only || f.force || !f.resume.empty()) {
    throw distrl::ConfigError(std::string(f.check_only ? "--check-config"
                                          : f.force    ? "--force"
                                                       : "--resume") +
                              " goes with --config FILE");
  } else if (!app.remaining().empty()) {
    throw distrl::ConfigError("unexpected argument '" + app.remaining().front() + "' (see --help)");
  } else {
    distrl::tools::prepare_security(&o);
  }
  return distrl::tools::launch(o);
}

}  // namespace

int main(int argc, char** argv) {
  distrl::tools::LaunchOptions o;
  // Everything after "--" is the command; CLI11 sees only what comes before.
  int split = argc;
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--") {
      split = i;
      break;
    }
  for (int i = split + 1; i < argc; ++i) o.command.emplace_back(argv[i]);
  CLI::App app{
      "distrl-launch: run the ranks of a run with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and\n"
      "MASTER_PORT set, prefix their output with the rank, and stop all when one fails.\n" +
      kUsage};
  Flags flags;
  add_options(app, o, flags);
  if (const int shown = show_workload_help(split, argv); shown >= 0) return shown;
  try {
    app.parse(split, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {  // exit 2, as every tool for a bad configuration
    std::cerr << "distrl-launch: command line: " << e.what() << " (see --help)\n";
    return 2;
  }
  o.grace = std::chrono::milliseconds(static_cast<long long>(flags.grace_s * 1000));
  try {
    take_node_env(app, o);
  } catch (const distrl::ConfigError& e) {
    std::cerr << "distrl-launch: " << e.what() << "\n";
    return 2;
  }
  struct RemoveMadeKey {  // on every way out of main, not only a finished launch
    const std::string& path;
    ~RemoveMadeKey() {
      if (!path.empty()) ::unlink(path.c_str());
    }
  } remove_made_key{o.made_key};
  const std::vector<std::string> command_line(argv, argv + split);
  return distrl::guarded_main("distrl-launch", [&] { return run(app, o, flags, command_line); });
}
