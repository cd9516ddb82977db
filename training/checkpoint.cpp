#include "training/checkpoint.h"

#include "models/checkpoint.h"

namespace distrl::training {

void save_checkpoint(const std::string& path, const torch::nn::Module& module, const torch::optim::Optimizer* optimizer,
                     const std::map<std::string, double>& numbers, transport::ProcessGroup& pg) {
  if (pg.rank() == 0) models::save_checkpoint(path, module, optimizer, numbers);
  pg.barrier();
}

std::map<std::string, double> load_checkpoint(const std::string& path, torch::nn::Module& module,
                                              torch::optim::Optimizer* optimizer, const torch::Device& device,
                                              transport::ProcessGroup& pg) {
  pg.barrier();  // a save in progress on rank 0 has finished
  return models::load_checkpoint(path, module, optimizer, device);
}

}  // namespace distrl::training
