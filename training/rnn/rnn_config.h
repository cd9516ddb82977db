// The distributed-autograd RNN workload's configuration (configs/rnn_dist_autograd.yaml): the
// PyTorch RNN tutorial's split (embedding table and decoder on a "ps" worker, an LSTM on each
// trainer) learning a character-level language model from text every Debian machine has.
#pragma once

#include <string>

#include "common/settings.h"
#include "training/run_keys.h"

namespace distrl::training {

struct RnnConfig : RunKeys, DistKeys, OptimizerKeys, CheckpointKeys {
  RnnConfig() {
    out_dir = "runs/rnn_dist_autograd";
    timeout_s = 60;
    checkpoint_every = 100;  // steps
    optimizer = "adam";
    lr = 0.003;
  }
  int trainers = 1;  // roles.trainers: ranks 1..trainers; rank 0 is the ps
  // data
  std::string data_path = "/usr/share/common-licenses";  // a text file, or a directory of them
  double val_fraction = 0.1;                             // the last part of the text, for validation
  long long max_chars = 0;                               // read at most this many characters (0: all)
  // model
  int embedding_dim = 32;
  int hidden = 128;
  int layers = 1;
  double dropout = 0.0;
  // train
  int steps = 400;
  int bptt = 64;            // characters per sequence (truncated backprop)
  int batch_size = 32;      // sequences per step
  int eval_interval = 100;  // steps between validation passes
  int eval_batches = 8;
};

void bind(Settings& s, RnnConfig& c);

}  // namespace distrl::training
