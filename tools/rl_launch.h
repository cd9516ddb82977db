// distrl-launch --config: an RL run from one YAML file. Rank 0 runs distrl-agent, the other
// ranks distrl-observer, all with the same file and overrides; the world size is the file's
// `observers` (after overrides) + 1. The agent validates the whole configuration first
// (distrl-agent --check-config), so a bad key is reported once, before anything starts.
#pragma once

#include <string>
#include <vector>

#include "tools/launcher.h"

namespace distrl::tools {

// The directory holding this executable (distrl-agent and distrl-observer live beside it).
std::string self_dir();

// Fills o.nproc, o.command and o.rank0_command. Throws ConfigError.
void configure_rl_launch(const std::string& config, const std::vector<std::string>& overrides, LaunchOptions* o);

}  // namespace distrl::tools
