// The command line of distrl-agent and distrl-observer (common/command_line.h over RlConfig).
#pragma once

#include "rl/rl_config.h"
#include "common/command_line.h"

namespace distrl::rl {

class RlCommandLine : public CommandLine<RlConfig> {
 public:
  RlCommandLine(const std::string& tool, const std::string& description)
      : CommandLine<RlConfig>(tool, description, "configs/cartpole.yaml",
                              "agent: continue from a checkpoint of an earlier run (OUT_DIR/policy.pt); observers "
                              "ignore it") {}

  // The flags, the file, the overrides, then env.plugin and env.name (prepare_env). False after --help.
  bool parse(int argc, char** argv) {
    if (!CommandLine<RlConfig>::parse(argc, argv)) return false;
    this_run().workload = "rl";  // what the agent's checkpoints record (common/run_dir.h)
    prepare_env(config);
    return true;
  }
};

}  // namespace distrl::rl
