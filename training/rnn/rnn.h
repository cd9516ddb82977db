// The distributed-autograd RNN (PyTorch's "Distributed Autograd: RNN" tutorial, C++): an
// embedding table and a decoder on the "ps" worker, used through RemoteModule; an LSTM on each
// trainer; every step is forward (two RPCs), dist_autograd::backward and a
// DistributedOptimizer step over all three parts' parameters.
#pragma once

#include <string>
#include <vector>

#include <torch/torch.h>

#include "autograd/optimizer.h"
#include "autograd/remote_module.h"
#include "training/rnn/rnn_config.h"

namespace distrl::training {

struct EmbeddingConfig {
  int tokens = 10, dim = 2;
  double dropout = 0.0;
  int seed = 1;
  MSGPACK_DEFINE(tokens, dim, dropout, seed);
};

class EmbeddingTableImpl : public torch::nn::Module {
 public:
  explicit EmbeddingTableImpl(const EmbeddingConfig& c);
  at::Tensor forward(at::Tensor tokens);  // (seq, batch) int64 -> (seq, batch, dim)

 private:
  torch::nn::Embedding emb_{nullptr};
  torch::nn::Dropout drop_{nullptr};
};

struct DecoderConfig {
  int hidden = 3, tokens = 10;
  double dropout = 0.0;
  int seed = 1;
  MSGPACK_DEFINE(hidden, tokens, dropout, seed);
};

class DecoderImpl : public torch::nn::Module {
 public:
  explicit DecoderImpl(const DecoderConfig& c);
  at::Tensor forward(at::Tensor x);  // (..., hidden) -> (..., tokens) logits

 private:
  torch::nn::Dropout drop_{nullptr};
  torch::nn::Linear fc_{nullptr};
};

// On every worker, in the RpcAgent setup callback: dist autograd, the two remote module
// classes, and "rnn.assign" (copies a value into a parameter this worker owns; for --resume).
void register_rnn(transport::RpcAgent& agent);

// Where one step's time went (seconds).
struct StepTimes {
  double forward = 0, backward = 0, step = 0;
};

// A trainer's model: the remote parts on `ps`, the local LSTM, one DistributedOptimizer.
class RnnTrainerModel {
 public:
  RnnTrainerModel(transport::RpcAgent& agent, const std::string& ps, int tokens, int embedding_dim, int hidden,
                  int layers, double dropout, int seed, const autograd::OptimizerSpec& spec);
  // One training step on (seq, batch) inputs and targets: returns the mean cross-entropy.
  double train_step(const at::Tensor& input, const at::Tensor& target, StepTimes* times = nullptr);
  // Mean cross-entropy without recording anything (no context; dropout off).
  double evaluate(const at::Tensor& input, const at::Tensor& target);
  void reset_state(int batch);  // zero hidden state
  void set_training(bool on);   // all three parts (dropout)

  torch::nn::LSTM& lstm() { return lstm_; }
  // The ps's parameters by checkpoint name ("emb.0", ..., "dec.1"), fetched once.
  const std::vector<std::pair<std::string, transport::RRef<at::Tensor>>>& ps_parameters() const { return ps_params_; }

 private:
  at::Tensor logits(const at::Tensor& input, bool keep_state);

  transport::RpcAgent& agent_;
  autograd::RemoteModule<EmbeddingTableImpl> emb_;
  autograd::RemoteModule<DecoderImpl> dec_;
  torch::nn::LSTM lstm_{nullptr};
  int hidden_, layers_;
  std::tuple<at::Tensor, at::Tensor> state_;
  std::vector<std::pair<std::string, transport::RRef<at::Tensor>>> ps_params_;
  std::unique_ptr<autograd::DistributedOptimizer> opt_;
};

// The whole workload on this rank (rank 0: the ps; the others: trainers). config_yaml is
// written to OUT_DIR/config.yaml by trainer 1. resume: a checkpoint to continue from.
void run_rnn(const RnnConfig& cfg, const std::string& config_yaml, transport::RpcAgent& agent,
             const std::string& resume);

}  // namespace distrl::training
