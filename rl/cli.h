// The command line of distrl-agent and distrl-observer (common/command_line.h over RlConfig).
#pragma once

#include "common/command_line.h"
#include "common/log.h"
#include "rl/rl_config.h"

namespace distrl::rl {

class RlCommandLine : public CommandLine<RlConfig> {
 public:
  RlCommandLine(const std::string& tool, const std::string& description)
      : CommandLine<RlConfig>(tool, description, "configs/cartpole.yaml",
                              "agent: continue from a checkpoint of an earlier run (OUT_DIR/policy.pt); observers "
                              "ignore it"),
        tool_(tool) {}

  // The flags, the file, the overrides, then env.plugin and env.name (prepare_env). False after --help.
  bool parse(int argc, char** argv) {
    if (!CommandLine<RlConfig>::parse(argc, argv)) return false;
    this_run().workload = "rl";  // what the agent's checkpoints record (common/run_dir.h)
    // A file of before `workload: rl` runs as ever; the agent (once per run) says how to say it.
    if (tool_ == "distrl-agent" && !flags.config.empty() && !flags.check_only &&
        !Settings::peek(flags.config, app.remaining(), "workload"))
      DISTRL_LOG(Warn, flags.config << " names no workload: read as `workload: rl` (add that line to the file)");
    prepare_env(config);
    return true;
  }

 private:
  std::string tool_;
};

}  // namespace distrl::rl
