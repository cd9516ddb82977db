// Checkpoints in a process group, like the DDP tutorial: rank 0 writes the file (atomically:
// temporary file + rename), a barrier, and every rank can then load it onto its own device.
#pragma once

#include <map>
#include <string>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include "transport/collectives/process_group.h"

namespace distrl::training {

// Rank 0 writes; every rank returns after the file is complete.
void save_checkpoint(const std::string& path, const torch::nn::Module& module, const torch::optim::Optimizer* optimizer,
                     const std::map<std::string, double>& numbers, transport::ProcessGroup& pg);
// Every rank loads onto `device` (device mapping, e.g. saved from cuda:0, loaded on cpu).
std::map<std::string, double> load_checkpoint(const std::string& path, torch::nn::Module& module,
                                              torch::optim::Optimizer* optimizer, const torch::Device& device,
                                              transport::ProcessGroup& pg);

}  // namespace distrl::training
