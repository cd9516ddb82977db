// Every workload's name and the tool that runs its ranks: the one list of names. The registry
// (workload.h) takes each entry's tool from here; distrl-launch reads it without linking the
// training library, so the launcher does not load LibTorch (0.5 s and 160 MB at start when it
// did). Header-only, no LibTorch. Pure functions: any thread.
#pragma once

#include <iterator>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/settings.h"

namespace distrl::training {

struct WorkloadName {
  const char* name;  // a config's `workload` value
  const char* tool;  // the executable every rank runs (distrl-launch finds it beside itself)
};

// RL: the agent (rank 0, this tool), observers and learner processes (tools/config_launch.cpp
// starts them). Not in the training registry: agent/ sits beside training/, not below it.
inline constexpr WorkloadName kRlWorkload = {"rl", "distrl-agent"};

// The training registry's workloads, in its order.
inline constexpr WorkloadName kWorkloadNames[] = {
    {"rnn_dist_autograd", "distrl-rnn"},
    {"ps_batch_update", "distrl-ps"},
    {"ps_model_on_server", "distrl-ps"},
    {"ps_hybrid", "distrl-ps"},
    {"ps_skipgram", "distrl-ps"},
    {"pipeline_fashion_mnist", "distrl-pipeline"},
    {"pipeline_resnet50", "distrl-pipeline"},
    {"pipeline_resnet50_model_parallel", "distrl-pipeline"},
    {"ddp", "distrl-train"},
};

// The tool of workload `name` (rl: rank 0's); else ConfigError "<source>: workload: 'x' is not
// known (known: rl, ...)".
inline std::string tool_of_workload(const std::string& name, const std::string& source) {
  if (name == kRlWorkload.name) return kRlWorkload.tool;
  std::string known = kRlWorkload.name;
  for (const WorkloadName& w : kWorkloadNames) {
    if (name == w.name) return w.tool;
    known += (known.empty() ? "" : ", ") + std::string(w.name);
  }
  throw ConfigError(source + ": workload: '" + name + "' is not known (known: " + known + ")");
}

// The workload a config file names, with its overrides: its `workload` key, else "ddp" for a
// file with a `dist` section (the supervised trainer's configs name none), else "rl" (a file of
// before `workload: rl`; the agent says so). ConfigError when the file cannot be read as YAML.
inline std::string workload_named_by(const std::string& file, const std::vector<std::string>& overrides) {
  if (auto named = Settings::peek(file, overrides, "workload")) return *named;
  return Settings::peek(file, {}, "dist") ? "ddp" : kRlWorkload.name;
}

}  // namespace distrl::training
