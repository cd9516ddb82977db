#include "training/ps/ps_config.h"

namespace distrl::training::ps {
namespace {

// `outputs`: what run.out_dir holds; `progress`: what run.log_interval counts.
void bind_common(Settings& s, PsCommon& c, const std::string& outputs, const std::string& progress) {
  s.bind("roles.servers", &c.servers, "server shards (ranks 0..servers-1)").range(1, 64);
  s.bind("roles.trainers", &c.trainers, "trainer processes (the ranks after the servers)").range(1, 256);
  bind_run(s, c, outputs, progress);
  bind_optimizer(s, c, "the servers' optimizer", {"sgd", "adagrad", "adam"});
  s.bind("optimizer.weight_decay", &c.weight_decay, "L2 penalty").range(0, 10);
  s.bind("launch.max_restarts", &c.max_restarts,
         "distrl-launch restarts a rank that dies up to N times (it rejoins under its rank; a shard "
         "reloads its snapshot)")
      .range(0, 1000);
  bind_dist(s, c);
}

void bind_engine(Settings& s, PsEngineConfig& c) {
  s.bind("ps.consistency", &c.consistency, "sync: rounds; async: apply on arrival; ssp: bounded staleness")
      .choices({"sync", "async", "ssp"});
  s.bind("ps.quorum", &c.quorum, "sync: distinct trainers that close a round (0: every trainer present)").range(0, 256);
  s.bind("ps.max_wait_ms", &c.max_wait_ms, "sync: a round closes this long after its first push (0: no deadline)")
      .range(0, 3600000);
  s.bind("ps.late", &c.late, "sync: a push for a round that closed without it is dropped or folded into the next")
      .choices({"drop", "fold"});
  s.bind("ps.staleness", &c.staleness, "ssp: pushes a trainer may run ahead of the slowest").range(0, 1000000);
}

void bind_sharded(Settings& s, ShardedConfig& c) {
  bind_engine(s, c);
  s.bind("ps.snapshot_rounds", &c.snapshot_rounds,
         "each shard snapshots every N rounds (sync) or pushes (async, ssp) to run.out_dir/snapshots/ (0: not by "
         "rounds); a restarted shard resumes from its snapshot")
      .range(0, 1000000000);
  s.bind("ps.snapshot_s", &c.snapshot_s, "each shard snapshots every N seconds (0: not by time)").range(0, 86400);
  s.bind("ps.retry_s", &c.retry_s, "how long a trainer waits for a shard that is down (restarting) before it fails")
      .range(0, 86400);
}

}  // namespace

void bind(Settings& s, BatchUpdateConfig& c) {
  bind_common(s, c, "metrics.csv, ps_stats.csv, params.pt and config.yaml", "rounds");
  s.bind("model.name", &c.model, "resnet50 (the tutorial's) or mlp").choices({"resnet50", "mlp"});
  s.bind("model.classes", &c.classes, "output classes").range(1, 100000);
  s.bind("model.image_size", &c.image_size, "square image side of the random images").range(1, 4096);
  s.bind("model.channels", &c.channels, "image channels").range(1, 64);
  s.bind("model.hidden", &c.hidden, "mlp: hidden widths").range(1, 65536);
  s.bind("train.rounds", &c.rounds, "pushes per trainer").range(1, 1000000000);
  s.bind("train.batch_size", &c.batch_size, "images per trainer and round").range(1, 100000);
  s.bind("train.slow_trainer", &c.slow_trainer, "a straggler's trainer id (-1: none)").range(-1, 255);
  s.bind("train.slow_ms", &c.slow_ms, "extra milliseconds the straggler spends per round").range(0, 3600000);
  bind_sharded(s, c);
}

void bind(Settings& s, SkipgramConfig& c) {
  bind_common(s, c, "metrics.csv, ps_stats.csv, embeddings.pt, neighbours.txt and config.yaml", "steps");
  s.bind("data.path", &c.data_path, "a text file or a directory of them");
  s.bind("data.vocab", &c.vocab, "the most frequent words kept").range(10, 10000000);
  s.bind("data.min_count", &c.min_count, "words seen fewer times are dropped").range(1, 1000000);
  s.bind("model.embedding_dim", &c.embedding_dim, "the word vectors' width").range(1, 65536);
  s.bind("model.window", &c.window, "context words on each side of a centre word").range(1, 100);
  s.bind("train.steps", &c.steps, "batches (pull, push) per trainer").range(1, 1000000000);
  s.bind("train.batch_size", &c.batch_size, "centre words per trainer and step").range(1, 100000);
  s.bind("train.negatives", &c.negatives, "noise words per (centre, context) pair").range(1, 100);
  s.bind("report.words", &c.words, "comma-separated words whose nearest neighbours are printed at the end");
  bind_sharded(s, c);
}

void bind(Settings& s, ModelOnServerConfig& c) {
  bind_common(s, c, "metrics.csv, epochs.csv, server.csv, params.pt and config.yaml", "steps");
  s.bind("model.name", &c.model, "mnist_cnn (the tutorial's) or mlp").choices({"mnist_cnn", "mlp"});
  s.bind("model.classes", &c.classes, "output classes").range(1, 100000);
  s.bind("model.hidden", &c.hidden, "mlp: hidden widths").range(1, 65536);
  bind_data(s, c, "an MNIST-layout directory (Fashion-MNIST by default)");
  s.bind("train.epochs", &c.epochs, "passes over each trainer's share").range(1, 1000000);
  s.bind("train.batch_size", &c.batch_size, "images per trainer and step").range(1, 100000);
  s.bind("train.test_batch_size", &c.test_batch_size, "images per evaluation forward").range(1, 1000000);
  s.bind("train.retries", &c.retries, "versioned: stale refusals of one batch before the trainer gives up")
      .range(0, 1000000);
  s.bind("ps.step_policy", &c.step_policy,
         "how trainers' steps interleave (serialize: one forward-to-step at a time; hogwild: no lock; versioned: a "
         "step against stale parameters is refused and retried)")
      .choices({"serialize", "hogwild", "versioned"});
  bind_engine(s, c);
}

void bind(Settings& s, HybridConfig& c) {
  bind_common(s, c, "metrics.csv, params.pt, learning_curve.png and config.yaml", "epochs");
  s.bind("model.embeddings", &c.embeddings, "rows of the EmbeddingBag on the ps").range(1, 100000000);
  s.bind("model.embedding_dim", &c.embedding_dim, "its width (the DDP'd Linear's input)").range(1, 65536);
  s.bind("model.classes", &c.classes, "the Linear's outputs").range(1, 100000);
  s.bind("train.epochs", &c.epochs, "passes over each trainer's batches").range(1, 1000000);
  s.bind("train.batches", &c.batches, "batches per trainer, repeated every epoch").range(1, 1000000);
}

autograd::OptimizerSpec PsCommon::optimizer_spec() const {
  autograd::OptimizerSpec o;
  o.kind = optimizer;
  o.lr = lr;
  o.momentum = optimizer == "sgd" ? momentum : 0.0;
  o.weight_decay = weight_decay;
  return o;
}

ServerOptions PsEngineConfig::server_options() const {
  ServerOptions o;
  o.mode = parse_mode(consistency);
  o.quorum = quorum;
  o.max_wait = std::chrono::milliseconds(max_wait_ms);
  o.fold_late = late == "fold";
  o.staleness = staleness;
  o.optimizer = optimizer_spec();
  return o;
}

std::string ShardedConfig::snapshot_path(int shard) const {
  return out_dir + "/snapshots/shard" + std::to_string(shard) + ".pt";
}

ServerOptions ShardedConfig::shard_options(int shard) const {
  ServerOptions o = server_options();
  if (snapshot_rounds > 0 || snapshot_s > 0) o.snapshot_path = snapshot_path(shard);
  o.snapshot_rounds = snapshot_rounds;
  o.snapshot_every = std::chrono::milliseconds(static_cast<long long>(snapshot_s * 1000));
  return o;
}

}  // namespace distrl::training::ps
