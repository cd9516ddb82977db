// distrl-launch --config: a run from one YAML file, with the same file and overrides on every
// rank. A training workload (the file's `workload`, or a DDP config: one with a `dist`
// section) runs its tool on the ranks its roles make, as the workload registry
// (training/workload.h) says; an RL config runs distrl-agent as rank 0, `observers`
// distrl-observer ranks and, with roles.learners 1, distrl-learner as the last rank. The tool validates the whole configuration first (--check-config),
// so a bad key is reported once, before anything starts.
#pragma once

#include <string>
#include <vector>

#include "tools/launcher.h"

namespace distrl::tools {

// The directory holding this executable (distrl-agent and distrl-observer live beside it).
std::string self_dir();

// Fills o.nproc, o.command and o.rank_commands. With o.nnodes > 1 the config's world is split
// in blocks over the nodes (node k runs global ranks [k*W/N, (k+1)*W/N): rank 0 on node 0) and
// o.world_size and o.first_rank are set too. Throws ConfigError.
void configure_config_launch(const std::string& config, const std::vector<std::string>& overrides, LaunchOptions* o);

}  // namespace distrl::tools
