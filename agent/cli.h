// Command-line plumbing shared by distrl-agent and distrl-observer: where to find the world
// (--rank, --world-size, --master-addr, --master-port, --init-method), --config FILE, and
// KEY=VALUE / --key value overrides of any config key.
#pragma once

#include <CLI/CLI.hpp>

#include <iostream>
#include <string>
#include <vector>

#include "agent/rl_config.h"
#include "common/error.h"
#include "common/settings.h"

namespace distrl::agent {

struct RlCli {
  std::string config;
  WorldFlags world;
  std::string resume;         // agent: continue from this checkpoint (observers ignore it)
  bool check_only = false;    // validate the configuration and exit
};

// A tool's whole command line: flags, then the config file, then KEY=VALUE overrides.
class RlCommandLine {
 public:
  RlCommandLine(const std::string& tool, const std::string& description) : settings(tool), app(description) {
    bind(settings, config);
    app.add_option("--config", cli.config, "YAML run configuration (configs/cartpole.yaml)")->check(CLI::ExistingFile);
    app.add_option("--rank", cli.world.rank, "this process's rank (default: $RANK; the agent is rank 0)");
    app.add_option("--world-size", cli.world.world_size,
                   "processes in the run: 1 agent + observers (default: $WORLD_SIZE)");
    app.add_option("--master-addr", cli.world.master_addr, "host of rank 0 (with --master-port: tcp:// rendezvous)");
    app.add_option("--master-port", cli.world.master_port, "rendezvous port on rank 0's host")
        ->check(CLI::Range(1, 65535));
    app.add_option("--init-method", cli.world.init_method, "env://, tcp://HOST:PORT or file:///PATH");
    app.add_option("--resume", cli.resume,
                   "agent: continue from a checkpoint of an earlier run (OUT_DIR/policy.pt); observers ignore it");
    app.add_flag("--check-config", cli.check_only, "validate the configuration and exit");
    app.allow_extras();
  }

  // Returns false after printing --help. Throws ConfigError for bad flags, keys or values.
  bool parse(int argc, char** argv) {
    app.footer("Config keys (in the YAML file as nested maps, or here as --key value / key=value):\n" +
               settings.describe());
    try {
      app.parse(argc, argv);
    } catch (const CLI::CallForHelp&) {
      std::cout << app.help();
      return false;
    } catch (const CLI::ParseError& e) {
      throw ConfigError(std::string("command line: ") + e.what() + " (see --help)");
    }
    if (!cli.config.empty()) settings.load_file(cli.config);
    settings.apply_overrides(app.remaining());
    return true;
  }

  RlConfig config;
  Settings settings;
  RlCli cli;
  CLI::App app;
};

}  // namespace distrl::agent
