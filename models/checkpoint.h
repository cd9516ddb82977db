// Checkpoint files: one torch archive with a module's parameters and buffers, an optimizer's
// state and named numbers (epoch, step, running reward...). Written to a temporary file and
// renamed, so a crash never leaves a half-written checkpoint behind.
#pragma once

#include <map>
#include <string>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize.h>

#include "common/output_file.h"

namespace distrl::models {

// Every torch file distrl writes goes through here: serialised in memory first (LibTorch's
// file writer throws from a destructor when the disk fills: std::terminate), then
// write_file_atomically: OutputError naming the file and the reason, and the previous file
// stays whole. The bytes are held in memory once while written.
void save_archive(torch::serialize::OutputArchive& archive, const std::string& path);
template <typename Value>  // what torch::save takes: a tensor, a vector of tensors
void save_file(const Value& value, const std::string& path) {
  std::string bytes;
  torch::save(value, [&bytes](const void* data, std::size_t n) {
    bytes.append(static_cast<const char*>(data), n);
    return n;
  });
  write_file_atomically(path, bytes);
}

// tensors: extra named state (e.g. normalisation statistics).
void save_checkpoint(const std::string& path, const torch::nn::Module& module, const torch::optim::Optimizer* optimizer,
                     const std::map<std::string, double>& numbers = {},
                     const std::map<std::string, torch::Tensor>& tensors = {});

// Loads onto `device` (device mapping: a checkpoint saved on cuda:0 loads on cpu or cuda:1).
// Returns the numbers found (and the extra tensors into *tensors when given). Throws
// ConfigError when the file is missing or does not fit the module (the message names the file).
std::map<std::string, double> load_checkpoint(const std::string& path, torch::nn::Module& module,
                                              torch::optim::Optimizer* optimizer, const torch::Device& device,
                                              std::map<std::string, torch::Tensor>* tensors = nullptr);
// Whose a checkpoint is: the run (common/run_dir.h) and workload that wrote it (save_checkpoint
// records this_run()'s); empty in files from before they were recorded, or not checkpoints.
struct CheckpointOwner {
  std::string run, workload;
};
CheckpointOwner checkpoint_owner(const std::string& path);
// --resume `checkpoint` (a file, or a directory of stageK.pt) into out_dir: ConfigError when it
// does not exist, was written by another workload, or belongs to another run than out_dir's
// outputs (common/run_dir.h: check_resume). Before anything is claimed or written.
void check_resume_from(const std::string& out_dir, const std::string& checkpoint);
// Only the numbers of a checkpoint (no module needed: what a refusal reads to say whose it is);
// empty when the file cannot be read.
std::map<std::string, double> checkpoint_numbers(const std::string& path);

}  // namespace distrl::models
