#include "training/rnn/rnn.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <set>
#include <sstream>

#include "autograd/context.h"
#include "common/run_dir.h"
#include "common/error.h"
#include "common/log.h"
#include "common/malloc_tuning.h"
#include "common/stop_signal.h"
#include "models/checkpoint.h"
#include "models/torch_threads.h"
#include "transport/rpc/rpc_agent.h"
#include "transport/wire/tensor.h"
#include "training/data.h"
#include "training/rpc_world.h"
#include "training/run_loop.h"
#include "training/workload.h"

namespace distrl::training {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

constexpr const char* kEmbedding = "rnn.Embedding";
constexpr const char* kDecoder = "rnn.Decoder";
constexpr const char* kAssign = "rnn.assign";

// Characters -> ids over the text's own alphabet (sorted bytes), same on every trainer.
struct Corpus {
  std::vector<unsigned char> alphabet;
  at::Tensor train, val;  // int64 streams
};

Corpus load_corpus(const RnnConfig& cfg) {
  const std::string text = read_text(cfg.data_path, cfg.max_chars);
  std::set<unsigned char> seen(text.begin(), text.end());
  Corpus c;
  c.alphabet.assign(seen.begin(), seen.end());
  std::vector<std::int64_t> index(256, 0);
  for (std::size_t i = 0; i < c.alphabet.size(); ++i) index[c.alphabet[i]] = static_cast<std::int64_t>(i);
  std::vector<std::int64_t> ids(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) ids[i] = index[static_cast<unsigned char>(text[i])];
  at::Tensor all = torch::tensor(ids, torch::kInt64);
  const auto n_val = static_cast<std::int64_t>(static_cast<double>(ids.size()) * cfg.val_fraction);
  c.train = all.slice(0, 0, all.size(0) - n_val);
  c.val = all.slice(0, all.size(0) - n_val);
  return c;
}

// A stream cut into `batch` parallel columns: (rows, batch).
at::Tensor columns(const at::Tensor& stream, int batch) {
  const std::int64_t rows = stream.size(0) / batch;
  return stream.slice(0, 0, rows * batch).view({batch, rows}).t().contiguous();
}

}  // namespace

EmbeddingTableImpl::EmbeddingTableImpl(const EmbeddingConfig& c) {
  torch::manual_seed(c.seed);
  emb_ = register_module("emb", torch::nn::Embedding(c.tokens, c.dim));
  drop_ = register_module("drop", torch::nn::Dropout(c.dropout));
  torch::nn::init::uniform_(emb_->weight, -0.1, 0.1);
}

at::Tensor EmbeddingTableImpl::forward(at::Tensor tokens) { return drop_(emb_(tokens)); }

DecoderImpl::DecoderImpl(const DecoderConfig& c) {
  torch::manual_seed(c.seed + 1);
  drop_ = register_module("drop", torch::nn::Dropout(c.dropout));
  fc_ = register_module("fc", torch::nn::Linear(c.hidden, c.tokens));
  torch::nn::init::uniform_(fc_->weight, -0.1, 0.1);
  torch::nn::init::zeros_(fc_->bias);
}

at::Tensor DecoderImpl::forward(at::Tensor x) { return fc_(drop_(x)); }

void register_rnn(transport::RpcAgent& agent) {
  autograd::enable(agent);
  autograd::register_remote_module<EmbeddingTableImpl, EmbeddingConfig>(
      agent, kEmbedding, [](const EmbeddingConfig& c) { return std::make_shared<EmbeddingTableImpl>(c); });
  autograd::register_remote_module<DecoderImpl, DecoderConfig>(
      agent, kDecoder, [](const DecoderConfig& c) { return std::make_shared<DecoderImpl>(c); });
  agent.register_function(kAssign, [](transport::RRef<at::Tensor> param, at::Tensor value) {
    at::Tensor p = *param.local_value();
    if (!p.sizes().equals(value.sizes()))
      throw ConfigError("checkpoint: a ps parameter is " + std::to_string(p.numel()) + " values, the checkpoint has " +
                        std::to_string(value.numel()) + ": was it saved with other model sizes?");
    torch::NoGradGuard no_grad;
    p.copy_(value);
  });
}

RnnTrainerModel::RnnTrainerModel(transport::RpcAgent& agent, const std::string& ps, int tokens, int embedding_dim,
                                 int hidden, int layers, double dropout, int seed, const autograd::OptimizerSpec& spec)
    : agent_(agent), emb_(agent, ps, kEmbedding, EmbeddingConfig{tokens, embedding_dim, dropout, seed}),
      dec_(agent, ps, kDecoder, DecoderConfig{hidden, tokens, dropout, seed}), hidden_(hidden), layers_(layers) {
  torch::manual_seed(seed + 2);
  lstm_ = torch::nn::LSTM(
      torch::nn::LSTMOptions(embedding_dim, hidden).num_layers(layers).dropout(layers > 1 ? dropout : 0.0));
  auto name_all = [this](const std::string& prefix, const std::vector<transport::RRef<at::Tensor>>& remote) {
    for (std::size_t i = 0; i < remote.size(); ++i) ps_params_.emplace_back(prefix + std::to_string(i), remote[i]);
  };
  name_all("emb.", emb_.remote_parameters());
  name_all("dec.", dec_.remote_parameters());
  std::vector<transport::RRef<at::Tensor>> params;
  for (auto& [name, p] : ps_params_) params.push_back(p);
  for (auto& p : lstm_->parameters()) params.push_back(agent.make_rref(std::make_shared<at::Tensor>(p)));
  opt_ = std::make_unique<autograd::DistributedOptimizer>(agent, spec, params);
}

void RnnTrainerModel::set_training(bool on) {
  emb_.train(on);
  dec_.train(on);
  lstm_->train(on);
}

void RnnTrainerModel::reset_state(int batch) {
  state_ = {torch::zeros({layers_, batch, hidden_}), torch::zeros({layers_, batch, hidden_})};
}

at::Tensor RnnTrainerModel::logits(const at::Tensor& input, bool keep_state) {
  at::Tensor e = emb_.forward(input);
  if (!std::get<0>(state_).defined() || std::get<0>(state_).size(1) != input.size(1))
    reset_state(static_cast<int>(input.size(1)));
  auto [out, st] = lstm_->forward(e, state_);
  if (keep_state) state_ = {std::get<0>(st).detach(), std::get<1>(st).detach()};  // truncated backprop
  return dec_.forward(out);
}

double RnnTrainerModel::train_step(const at::Tensor& input, const at::Tensor& target, StepTimes* times) {
  autograd::Context ctx(agent_);
  const auto t0 = Clock::now();
  at::Tensor out = logits(input, true);
  at::Tensor loss = torch::nn::functional::cross_entropy(out.reshape({-1, out.size(-1)}), target.reshape({-1}));
  const auto t1 = Clock::now();
  autograd::backward(ctx, {loss});
  const auto t2 = Clock::now();
  opt_->step(ctx);
  if (times) {
    times->forward = std::chrono::duration<double>(t1 - t0).count();
    times->backward = std::chrono::duration<double>(t2 - t1).count();
    times->step = since(t2);
  }
  return loss.item<double>();
}

double RnnTrainerModel::evaluate(const at::Tensor& input, const at::Tensor& target) {
  torch::NoGradGuard no_grad;
  at::Tensor out = logits(input, true);
  return torch::nn::functional::cross_entropy(out.reshape({-1, out.size(-1)}), target.reshape({-1})).item<double>();
}

namespace {

// A trainer's LSTM from the checkpoint and the ps's tables from the extras saved with it; the
// step to go on from.
int resume_from(const std::string& resume, RnnTrainerModel& model, transport::RpcAgent& agent) {
  std::map<std::string, torch::Tensor> extra;
  auto numbers = models::load_checkpoint(resume, *model.lstm(), nullptr, torch::kCPU, &extra);
  for (const auto& [name, p] : model.ps_parameters()) {
    auto it = extra.find(name);
    if (it == extra.end())
      throw ConfigError("checkpoint " + resume + " has no '" + name + "': it was not written by distrl-rnn");
    agent.rpc_sync<void>(0, kAssign, p, it->second);
  }
  const int first_step = static_cast<int>(numbers["step"]) + 1;
  std::cout << "trainer " << agent.rank() << ": resumed from " << resume << " at step " << first_step << std::endl;
  return first_step;
}

// The lead trainer's progress line and metrics.csv row (the validation columns empty between
// validations).
void report_step(const RnnConfig& cfg, RunLoop& loop, int step, double train_loss, double rate, double last_val,
                 bool evaluated) {
  char val_text[64] = "val loss -";
  if (!std::isnan(last_val))
    std::snprintf(val_text, sizeof(val_text), "val loss %.3f (perplexity %.2f)", last_val, std::exp(last_val));
  const double seconds = loop.seconds();
  std::printf("step %d/%d  train loss %.3f  %s  %.0f chars/s  %.1f s\n", step, cfg.steps, train_loss, val_text, rate,
              seconds);
  std::fflush(stdout);
  const std::string none;
  loop.row(step, train_loss, evaluated ? std::to_string(last_val) : none,
           evaluated ? std::to_string(std::exp(last_val)) : none, rate, seconds);
}

}  // namespace

void run_rnn(const RnnConfig& cfg, const std::string& config_yaml, transport::RpcAgent& agent,
             const std::string& resume) {
  models::set_torch_threads(cfg.torch_threads);
  const int rank = agent.rank();
  if (rank == 0) {
    std::cout << "ps: holding the embedding table and the decoder for " << agent.world_size() - 1 << " trainer(s)"
              << std::endl;
    return;  // serves until every trainer has shut down
  }
  const bool lead = rank == 1;  // writes metrics, plots and checkpoints
  Corpus corpus = load_corpus(cfg);
  const int tokens = static_cast<int>(corpus.alphabet.size());
  autograd::OptimizerSpec spec;
  spec.kind = cfg.optimizer;
  spec.lr = cfg.lr;
  spec.momentum = cfg.momentum;
  RnnTrainerModel model(agent, agent.workers().at(0).name, tokens, cfg.embedding_dim, cfg.hidden, cfg.layers,
                        cfg.dropout, cfg.seed, spec);
  // Each trainer reads its own stretch of the training text.
  const std::int64_t share = corpus.train.size(0) / cfg.trainers;
  at::Tensor mine = corpus.train.slice(0, (rank - 1) * share, rank * share);
  at::Tensor train = columns(mine, cfg.batch_size), val = columns(corpus.val, cfg.batch_size);
  if (train.size(0) <= cfg.bptt + 1 || val.size(0) <= cfg.bptt + 1)
    throw ConfigError("the text is too short for train.batch_size " + std::to_string(cfg.batch_size) +
                      " x train.bptt " + std::to_string(cfg.bptt) +
                      ": use a smaller batch or more data (data.path, data.max_chars)");

  const std::string ckpt = cfg.checkpoint_path(cfg.out_dir);
  const int first_step = resume.empty() ? 1 : resume_from(resume, model, agent);
  // SIGINT/SIGTERM: each trainer on its own signal (the launcher signals them all), after its step.
  RunLoop loop(cfg, "trainer " + std::to_string(rank), lead);
  loop.open(config_yaml, "metrics.csv", "step,train_loss,val_loss,val_perplexity,chars_per_s,seconds",
            resume.empty() ? -1 : first_step - 1, CsvScalars::with_clock("seconds"));
  if (lead)
    std::cout << "trainer: " << tokens << " characters in the alphabet, " << corpus.train.size(0) << " training and "
              << corpus.val.size(0) << " validation characters from " << cfg.data_path << std::endl;
  auto save = [&](int step) {
    if (!lead) return;
    std::map<std::string, torch::Tensor> extra;
    for (const auto& [name, p] : model.ps_parameters()) extra[name] = p.to_here();
    models::save_checkpoint(ckpt, *model.lstm(), nullptr, {{"step", step}}, extra);
  };
  auto validate = [&] {
    model.set_training(false);
    model.reset_state(cfg.batch_size);
    double sum = 0;
    int n = 0;
    for (std::int64_t p = 0; p + cfg.bptt + 1 < val.size(0) && n < cfg.eval_batches; p += cfg.bptt, ++n)
      sum += model.evaluate(val.slice(0, p, p + cfg.bptt), val.slice(0, p + 1, p + 1 + cfg.bptt));
    model.set_training(true);
    model.reset_state(cfg.batch_size);
    return sum / std::max(1, n);
  };

  Window w;  // the steps since the last progress line
  torch::manual_seed(cfg.seed + rank);
  std::int64_t pos = (torch::randint(train.size(0) - cfg.bptt - 1, {1}).item<std::int64_t>() / cfg.bptt) * cfg.bptt;
  model.reset_state(cfg.batch_size);
  double last_val = std::nan("");
  int done = first_step - 1;  // the last finished step
  for (int step = first_step; step <= cfg.steps; ++step) {
    if (loop.stop_requested()) break;  // the last step is finished; save and report below
    if (pos + cfg.bptt + 1 >= train.size(0)) {
      pos = 0;
      model.reset_state(cfg.batch_size);
    }
    w.add(model.train_step(train.slice(0, pos, pos + cfg.bptt), train.slice(0, pos + 1, pos + 1 + cfg.bptt)),
          static_cast<long long>(cfg.bptt) * cfg.batch_size);
    pos += cfg.bptt;
    const bool eval_now = step % cfg.eval_interval == 0 || step == cfg.steps;
    if (loop.log_due(step) || (lead && eval_now)) {
      const double rate = w.items_per_s();
      if (eval_now) last_val = validate();
      report_step(cfg, loop, step, w.mean_loss(), rate, last_val, eval_now);
      w.reset();
    }
    if (cfg.checkpoint_due(step, false)) save(step);
    done = step;
  }
  save(done);
  if (loop.stop_requested())
    loop.report_stop("after step " + std::to_string(done) + " of " + std::to_string(cfg.steps),
                     lead ? "checkpoint " + ckpt + "; go on with: " + resume_command(cfg.out_dir, ckpt) : "");
  if (!lead) return;
  const std::vector<Chart> charts{
      {"cross-entropy (nats/char)", "step", {{"step", "train_loss", "train"}, {"step", "val_loss", "validation"}}},
      {"validation perplexity", "step", {{"step", "val_perplexity", "validation"}}}};
  if (loop.finish(charts)) std::cout << "wrote " << cfg.out_dir << "/learning_curve.png" << std::endl;
  std::cout << "trainer: done; metrics in " << cfg.out_dir << "/metrics.csv, checkpoint " << ckpt << std::endl;
}

namespace {

void rnn_rank(const RnnConfig& cfg, const RunContext& ctx) {
  keep_large_blocks_on_heap();
  transport::RpcAgent agent(rpc_options_for(ctx.world, cfg.timeout_s, cfg.transport, cfg.torch_threads),
                            [](transport::RpcAgent& a) { register_rnn(a); });
  if (agent.world_size() != cfg.trainers + 1)
    throw ConfigError("roles.trainers is " + std::to_string(cfg.trainers) + " but the world has " +
                      std::to_string(agent.world_size()) + " processes (1 ps + trainers)");
  // From here a first SIGINT/SIGTERM ends the run at a step boundary: trainers save and
  // report, the ps serves until they have shut down.
  install_stop_handlers();
  run_rnn(cfg, ctx.config_yaml, agent, ctx.resume);
  agent.shutdown();
}

// Before anything starts: the corpus is there.
void check_rnn(const RnnConfig& cfg) {
  if (this_run().check_only) check_text_path(cfg.data_path);
}

}  // namespace

std::vector<Workload> rnn_workloads() {
  return {resuming(make_workload<RnnConfig>("rnn_dist_autograd", check_rnn, rnn_rank))};
}

}  // namespace distrl::training
