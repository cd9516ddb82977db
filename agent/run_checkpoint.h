// A run's checkpoint (OUT_DIR/policy.pt): the learner's weights, optimizer and statistics
// (Learner::save) with the run's Progress as named numbers, so --resume continues the
// counts, the running reward and metrics.csv where the run stopped.
#pragma once

#include <string>

#include "agent/learner.h"

namespace distrl::agent {

// Atomic (temp file + rename): a kill during the save leaves the previous checkpoint whole.
void save_run(Learner& learner, const Progress& progress, const std::string& path);
// Throws ConfigError (naming the algorithm and env of `config`) for a checkpoint of another
// network shape. Progress values the checkpoint lacks stay zero.
Progress load_run(Learner& learner, const std::string& path, const rl::RlConfig& config);

}  // namespace distrl::agent
