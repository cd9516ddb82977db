// distrl-launch --config: a run from one YAML file, with the same file and overrides on every
// rank. A training config (one with a `dist` section) runs distrl-train on dist.world_size
// ranks; an RL config runs distrl-agent as rank 0 and `observers` distrl-observer ranks. The
// tool validates the whole configuration first (--check-config), so a bad key is reported
// once, before anything starts.
#pragma once

#include <string>
#include <vector>

#include "tools/launcher.h"

namespace distrl::tools {

// The directory holding this executable (distrl-agent and distrl-observer live beside it).
std::string self_dir();

// Fills o.nproc, o.command and o.rank0_command. Throws ConfigError.
void configure_config_launch(const std::string& config, const std::vector<std::string>& overrides, LaunchOptions* o);

}  // namespace distrl::tools
