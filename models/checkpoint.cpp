#include "models/checkpoint.h"

#include <filesystem>
#include <sstream>

#include <torch/serialize.h>

#include "common/error.h"
#include "common/run_dir.h"

namespace distrl::models {

void save_checkpoint(const std::string& path, const torch::nn::Module& module, const torch::optim::Optimizer* optimizer,
                     const std::map<std::string, double>& numbers,
                     const std::map<std::string, torch::Tensor>& tensors) {
  torch::serialize::OutputArchive ar;
  module.save(ar);
  if (optimizer) {
    torch::serialize::OutputArchive opt;
    optimizer->save(opt);
    ar.write("optimizer", opt);
  }
  for (const auto& [k, v] : numbers) ar.write("number." + k, torch::tensor(v, torch::kFloat64));
  for (const auto& [k, t] : tensors) ar.write("tensor." + k, t);
  // Whose it is (common/run_dir.h): a --resume checks them against its directory and workload.
  if (!this_run().run.empty()) ar.write("owner.run", c10::IValue(this_run().run));
  if (!this_run().workload.empty()) ar.write("owner.workload", c10::IValue(this_run().workload));
  save_archive(ar, path);
}

void save_archive(torch::serialize::OutputArchive& archive, const std::string& path) {
  std::string bytes;
  archive.save_to([&bytes](const void* data, std::size_t n) {
    bytes.append(static_cast<const char*>(data), n);
    return n;
  });
  write_file_atomically(path, bytes);
}

namespace {

// LibTorch's Module::load replaces a tensor of another shape without a word (Tensor::set_), so
// a checkpoint of another architecture would load "successfully" and change the model. Every
// parameter and buffer is checked against the archive first; the message names the first misfit.
void check_shapes(const torch::nn::Module& module, torch::serialize::InputArchive& ar, const std::string& path,
                  const std::string& prefix) {
  auto check = [&](const std::string& name, const torch::Tensor& mine, bool is_buffer) {
    torch::Tensor saved;
    if (!ar.try_read(name, saved, is_buffer)) return;  // missing keys: Module::load names them
    if (saved.sizes() != mine.sizes() || saved.scalar_type() != mine.scalar_type()) {
      std::ostringstream m;
      m << "checkpoint '" << path << "' does not fit this model: " << prefix << name << " is "
        << c10::toString(saved.scalar_type()) << saved.sizes() << " in the file, " << c10::toString(mine.scalar_type())
        << mine.sizes() << " in the model";
      throw ConfigError(m.str());
    }
  };
  for (const auto& p : module.named_parameters(/*recurse=*/false)) check(p.key(), p.value(), false);
  for (const auto& b : module.named_buffers(/*recurse=*/false)) check(b.key(), b.value(), true);
  for (const auto& c : module.named_children()) {
    torch::serialize::InputArchive child;
    if (ar.try_read(c.key(), child)) check_shapes(*c.value(), child, path, prefix + c.key() + ".");
  }
}

}  // namespace

std::map<std::string, double> load_checkpoint(const std::string& path, torch::nn::Module& module,
                                              torch::optim::Optimizer* optimizer, const torch::Device& device,
                                              std::map<std::string, torch::Tensor>* tensors) {
  if (!std::filesystem::exists(path)) throw ConfigError("checkpoint: no file at '" + path + "'");
  torch::serialize::InputArchive ar;
  try {
    ar.load_from(path, device);
    check_shapes(module, ar, path, "");
    module.load(ar);
    if (optimizer) {
      torch::serialize::InputArchive opt;
      ar.read("optimizer", opt);
      optimizer->load(opt);
    }
  } catch (const c10::Error& e) {
    throw ConfigError("checkpoint '" + path + "' does not fit this model and optimizer: " + e.what_without_backtrace());
  }
  std::map<std::string, double> numbers;
  for (const auto& key : ar.keys()) {
    torch::Tensor t;
    if (key.rfind("number.", 0) == 0 && ar.try_read(key, t)) numbers[key.substr(7)] = t.item<double>();
    if (tensors && key.rfind("tensor.", 0) == 0 && ar.try_read(key, t)) (*tensors)[key.substr(7)] = t;
  }
  return numbers;
}

CheckpointOwner checkpoint_owner(const std::string& path) {
  CheckpointOwner owner;
  try {
    torch::serialize::InputArchive ar;
    ar.load_from(path, torch::kCPU);
    c10::IValue v;
    if (ar.try_read("owner.run", v) && v.isString()) owner.run = v.toStringRef();
    if (ar.try_read("owner.workload", v) && v.isString()) owner.workload = v.toStringRef();
  } catch (const c10::Error&) {  // not a checkpoint: loading it says so
  }
  return owner;
}

void check_resume_from(const std::string& out_dir, const std::string& checkpoint) {
  std::error_code ec;
  if (!std::filesystem::exists(checkpoint, ec))
    throw ConfigError("--resume " + checkpoint +
                      ": no such file or directory (a run's checkpoint is in its "
                      "run.out_dir: policy.pt, checkpoint.pt or checkpoints/)");
  // A directory of per-stage checkpoints (the pipeline's): its first stage's says whose they are.
  const std::string file = std::filesystem::is_directory(checkpoint, ec) ? checkpoint + "/stage0.pt" : checkpoint;
  CheckpointOwner owner = checkpoint_owner(file);
  if (owner.workload.empty() && checkpoint_numbers(file).count("ppo"))  // an agent's, from before owners were kept
    owner.workload = "rl";
  check_resume(out_dir, checkpoint, owner.run, owner.workload);
}

std::map<std::string, double> checkpoint_numbers(const std::string& path) {
  std::map<std::string, double> numbers;
  try {
    torch::serialize::InputArchive ar;
    ar.load_from(path, torch::kCPU);
    for (const auto& key : ar.keys()) {
      torch::Tensor t;
      if (key.rfind("number.", 0) == 0 && ar.try_read(key, t)) numbers[key.substr(7)] = t.item<double>();
    }
  } catch (const c10::Error&) {}
  return numbers;
}

}  // namespace distrl::models
