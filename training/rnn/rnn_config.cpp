#include "training/rnn/rnn_config.h"

namespace distrl::training {

void bind(Settings& s, RnnConfig& c) {
  s.bind("roles.trainers", &c.trainers, "trainer processes (ranks 1..N); rank 0 is the ps").range(1, 64);
  bind_run(s, c, "metrics.csv, learning_curve.png, config.yaml and the checkpoint");
  s.bind("data.path", &c.data_path, "a text file, or a directory whose files are read in name order");
  s.bind("data.val_fraction", &c.val_fraction, "share of the text held out for validation").range(0.01, 0.5);
  s.bind("data.max_chars", &c.max_chars, "read at most this many characters; 0: all").range(0, 1000000000000);
  s.bind("model.embedding_dim", &c.embedding_dim, "embedding width (the table lives on the ps)").range(1, 65536);
  s.bind("model.hidden", &c.hidden, "LSTM hidden size (the LSTM lives on the trainer)").range(1, 65536);
  s.bind("model.layers", &c.layers, "LSTM layers").range(1, 64);
  s.bind("model.dropout", &c.dropout, "dropout after the embedding and before the decoder").range(0, 0.95);
  s.bind("train.steps", &c.steps, "optimizer steps per trainer").range(1, 2000000000);
  s.bind("train.bptt", &c.bptt, "characters per sequence").range(2, 100000);
  s.bind("train.batch_size", &c.batch_size, "sequences per step").range(1, 100000);
  s.bind("train.eval_interval", &c.eval_interval, "steps between validation passes").range(1, 2000000000);
  s.bind("train.eval_batches", &c.eval_batches, "validation batches per pass").range(1, 1000000);
  bind_optimizer(s, c, "DistributedOptimizer kind", {"sgd", "adam", "adagrad"});
  bind_dist(s, c);
  bind_checkpoint(s, c, "steps", 2000000000);
}

}  // namespace distrl::training
