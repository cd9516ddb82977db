#include "training/ddp/trainer.h"

#include <unistd.h>

#include <torch/torch.h>

#include <chrono>
#include <cstdio>

#include "common/run_dir.h"
#include "common/error.h"
#include "models/nets.h"
#include "models/torch_threads.h"
#include "training/checkpoint.h"
#include "training/data.h"
#include "training/ddp/ddp.h"
#include "training/run_loop.h"
#include "training/workload.h"

namespace distrl::training {
namespace {

struct Data {
  Dataset train, test;
  bool classify = true;
  int inputs = 0, outputs = 0;
};

Data load_data(const TrainConfig& cfg) {
  Data d;
  if (cfg.dataset == "toy") {
    const std::int64_t n_test = std::max(8, cfg.toy_samples / 4);
    Dataset all = make_toy(cfg.toy_samples + n_test, 10, 5, static_cast<std::uint64_t>(cfg.seed));
    d.train = {"toy", all.inputs.narrow(0, 0, cfg.toy_samples), all.targets.narrow(0, 0, cfg.toy_samples)};
    d.test = {"toy", all.inputs.narrow(0, cfg.toy_samples, n_test), all.targets.narrow(0, cfg.toy_samples, n_test)};
    d.classify = false;
    d.inputs = 10;
    d.outputs = 5;
  } else {
    d.train = load_idx_dir(cfg.data_path, true);
    d.test = load_idx_dir(cfg.data_path, false);
    d.inputs = static_cast<int>(d.train.inputs[0].numel());
    d.outputs = static_cast<int>(d.train.targets.max().item<std::int64_t>()) + 1;
  }
  d.train = first_items(std::move(d.train), cfg.limit);
  return d;
}

torch::Tensor loss_of(const Data& d, const torch::Tensor& out, const torch::Tensor& y) {
  return d.classify ? torch::nn::functional::cross_entropy(out, y) : torch::mse_loss(out, y);
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const TrainConfig& cfg, models::Net& net) {
  if (cfg.optimizer == "adam")
    return std::make_unique<torch::optim::Adam>(net.parameters(),
                                                torch::optim::AdamOptions(cfg.lr).weight_decay(cfg.weight_decay));
  return std::make_unique<torch::optim::SGD>(
      net.parameters(), torch::optim::SGDOptions(cfg.lr).momentum(cfg.momentum).weight_decay(cfg.weight_decay));
}

// "epoch 1/2 [########............] 40%  loss 0.5123  12,345 samples/s"
void progress(int epoch, int epochs, long long done, long long total, double loss, double rate, bool final) {
  const int width = 24;
  const int fill = total > 0 ? static_cast<int>(width * done / total) : width;
  std::string bar(fill, '#');
  bar += std::string(width - fill, '.');
  const bool tty = ::isatty(STDOUT_FILENO);
  std::printf("%sepoch %d/%d [%s] %3lld%%  loss %.4f  %.0f samples/s%s", tty ? "\r" : "", epoch, epochs, bar.c_str(),
              total > 0 ? 100 * done / total : 100, loss, rate, tty && !final ? "" : "\n");
  std::fflush(stdout);
}

// Sums over ranks of (loss sum, correct, count) on this rank's stride of the test set.
std::array<double, 3> evaluate(const Data& d, models::Net& net, int rank, int world, int batch) {
  torch::NoGradGuard no_grad;
  net.eval();
  double loss = 0, correct = 0, count = 0;
  const std::int64_t n = d.test.size();
  auto idx = torch::arange(rank, n, world, torch::kLong);
  for (std::int64_t off = 0; off < idx.numel(); off += batch) {
    auto b = idx.narrow(0, off, std::min<std::int64_t>(batch, idx.numel() - off));
    auto x = d.test.inputs.index_select(0, b), y = d.test.targets.index_select(0, b);
    auto out = net.forward(x);
    loss += loss_of(d, out, y).item<double>() * b.numel();
    if (d.classify) correct += out.argmax(1).eq(y).sum().item<double>();
    count += b.numel();
  }
  net.train();
  return {loss, correct, count};
}

}  // namespace

namespace {

// The run's first line on rank 0.
void print_header(const TrainConfig& cfg, const Data& data, int world, std::size_t buckets) {
  std::printf(
      "distrl-train: %s on %s (%lld train / %lld test samples), %d rank(s) x batch %d, %s lr %g, "
      "%zu gradient bucket(s)\n",
      cfg.model.c_str(), data.train.name.c_str(), static_cast<long long>(data.train.size()),
      static_cast<long long>(data.test.size()), world, cfg.batch_size, cfg.optimizer.c_str(), cfg.lr, buckets);
  std::fflush(stdout);
}

// The epoch's result: this rank's window (loss, steps, samples) and test pass summed over every rank.
EpochResult sum_epoch(const Data& data, models::Net& net, transport::ProcessGroup& pg, const TrainConfig& cfg,
                      const Window& w, int epoch, long long steps) {
  EpochResult r;
  r.epoch = epoch;
  r.steps = steps;
  r.seconds = w.seconds();
  r.samples_per_s = w.items * pg.size() / std::max(r.seconds, 1e-9);
  auto ev = evaluate(data, net, pg.rank(), pg.size(), cfg.test_batch_size);
  auto sums = torch::tensor({w.loss_sum, static_cast<double>(w.steps), ev[0], ev[1], ev[2]}, torch::kDouble);
  pg.all_reduce(sums);
  auto s = sums.accessor<double, 1>();
  r.train_loss = s[1] > 0 ? s[0] / s[1] : 0;
  r.test_loss = s[4] > 0 ? s[2] / s[4] : 0;
  r.test_accuracy = data.classify && s[4] > 0 ? s[3] / s[4] : -1;
  return r;
}

// Rank 0's epoch line and metrics.csv row.
void report_epoch(const TrainConfig& cfg, const EpochResult& r, long long done, long long per_epoch, RunLoop& loop) {
  progress(r.epoch, cfg.epochs, done, per_epoch, r.train_loss, r.samples_per_s, true);
  std::printf("epoch %d/%d: train loss %.4f, test loss %.4f", r.epoch, cfg.epochs, r.train_loss, r.test_loss);
  if (r.test_accuracy >= 0) std::printf(", test accuracy %.2f%%", 100 * r.test_accuracy);
  std::printf(", %.0f samples/s, %.1f s\n", r.samples_per_s, r.seconds);
  std::fflush(stdout);
  if (r.test_accuracy >= 0)
    loop.row(r.epoch, r.steps, r.train_loss, r.test_loss, r.test_accuracy, r.samples_per_s, r.seconds);
  else  // a regression has no accuracy: no column for it (it read -1)
    loop.row(r.epoch, r.steps, r.train_loss, r.test_loss, r.samples_per_s, r.seconds);
}

// Rank 0's learning curve from metrics.csv (loss; accuracy when classifying).
void plot_learning_curve(const TrainConfig& cfg, bool classify, RunLoop& loop) {
  std::vector<Chart> charts{{"loss", "epoch", {{"epoch", "train_loss", "train"}, {"epoch", "test_loss", "test"}}}};
  if (classify) charts.push_back({"test accuracy", "epoch", {{"epoch", "test_accuracy", "test accuracy"}}});
  if (loop.finish(charts)) std::printf("distrl-train: learning curve %s/learning_curve.png\n", cfg.out_dir.c_str());
}

}  // namespace

std::vector<EpochResult> train(const TrainConfig& cfg, const std::string& config_yaml,
                               std::shared_ptr<transport::ProcessGroup> pg, const std::string& resume) {
  const int rank = pg->rank(), world = pg->size();
  const bool lead = rank == 0;
  models::set_torch_threads(cfg.torch_threads);
  torch::manual_seed(cfg.seed);
  const Data data = load_data(cfg);

  models::NetSpec spec;
  spec.name = cfg.model;
  spec.inputs = data.inputs;
  spec.outputs = data.outputs;
  spec.hidden = cfg.hidden;
  auto net = models::make_net(spec);
  DdpOptions dopt;
  dopt.bucket_cap_mb = cfg.bucket_cap_mb;
  dopt.find_unused_parameters = cfg.find_unused_parameters;
  dopt.broadcast_buffers = cfg.broadcast_buffers;
  DistributedDataParallel ddp(net, pg, dopt);
  auto opt = make_optimizer(cfg, *net);

  const std::string ckpt = cfg.checkpoint_path(cfg.out_dir);
  int first_epoch = 1;
  long long steps = 0;
  if (!resume.empty()) {
    auto numbers = load_checkpoint(resume, *net, opt.get(), torch::kCPU, *pg);
    first_epoch = static_cast<int>(numbers["epoch"]) + 1;
    steps = static_cast<long long>(numbers["steps"]);
    if (lead)
      std::printf("distrl-train: resumed from %s after epoch %d (%lld steps)\n", resume.c_str(), first_epoch - 1,
                  steps);
  }
  RunLoop loop(cfg, "distrl-train", lead);
  loop.stop_in_lock_step(*pg, "rank");  // each step all-reduces the gradients
  loop.open(config_yaml, "metrics.csv",
            data.classify ? "epoch,steps,train_loss,test_loss,test_accuracy,samples_per_s,seconds"
                          : "epoch,steps,train_loss,test_loss,samples_per_s,seconds",
            resume.empty() ? -1 : first_epoch - 1);
  if (lead) print_header(cfg, data, world, ddp.buckets().size());

  DistributedSampler sampler(data.train.size(), rank, world, true, static_cast<std::uint64_t>(cfg.seed));
  const long long per_epoch = (sampler.per_rank() + cfg.batch_size - 1) / cfg.batch_size;
  std::vector<EpochResult> results;
  for (int epoch = first_epoch; epoch <= cfg.epochs; ++epoch) {
    if (cfg.max_steps > 0 && steps >= cfg.max_steps) break;
    sampler.set_epoch(epoch);
    auto idx = torch::tensor(sampler.indices(), torch::kLong);
    Window w;  // this epoch's steps and samples on this rank
    for (std::int64_t off = 0; off < idx.numel(); off += cfg.batch_size) {
      if (cfg.max_steps > 0 && steps >= cfg.max_steps) break;
      auto b = idx.narrow(0, off, std::min<std::int64_t>(cfg.batch_size, idx.numel() - off));
      auto x = data.train.inputs.index_select(0, b), y = data.train.targets.index_select(0, b);
      auto loss = loss_of(data, ddp.forward(x), y);
      opt->zero_grad();
      loss.backward();
      opt->step();
      w.add(loss.item<double>(), b.numel());
      ++steps;
      if (loop.log_due(w.steps))
        progress(epoch, cfg.epochs, w.steps, per_epoch, w.mean_loss(), w.items * world / w.seconds(), false);
      if (loop.stop_requested(steps)) break;
    }
    if (loop.stopped()) {  // the model is saved as it is; the epoch counts as not done, so a resume repeats it
      save_checkpoint(ckpt, *net, opt.get(), {{"epoch", double(epoch - 1)}, {"steps", double(steps)}}, *pg);
      if (lead) {
        std::printf("\n");  // ends a progress bar left open on a terminal
        loop.report_stop("in epoch " + std::to_string(epoch) + " after step " + std::to_string(steps),
                         "checkpoint " + ckpt + "; epoch " + std::to_string(epoch) +
                             " starts again with: " + resume_command(cfg.out_dir, ckpt));
      }
      break;
    }
    results.push_back(sum_epoch(data, *net, *pg, cfg, w, epoch, steps));
    if (lead) report_epoch(cfg, results.back(), w.steps, per_epoch, loop);
    if (cfg.checkpoint_due(epoch, epoch == cfg.epochs || (cfg.max_steps > 0 && steps >= cfg.max_steps))) {
      save_checkpoint(ckpt, *net, opt.get(), {{"epoch", double(epoch)}, {"steps", double(steps)}}, *pg);
      if (lead) std::printf("distrl-train: checkpoint %s (epoch %d)\n", ckpt.c_str(), epoch);
    }
  }
  if (lead && !results.empty()) plot_learning_curve(cfg, data.classify, loop);
  return results;
}

namespace {

void ddp_rank(const TrainConfig& cfg, const RunContext& ctx) {
  transport::ProcessGroupOptions o;
  o.backend = cfg.backend;
  o.init_method = ctx.world.resolved_init_method();
  o.rank = ctx.world.rank;
  o.world_size = ctx.world.world_size;
  o.timeout = std::chrono::milliseconds(static_cast<long long>(cfg.timeout_s * 1000));
  o.transport = cfg.transport;
  o.max_message_bytes = static_cast<std::size_t>(cfg.max_message_mb * (1 << 20));
  o.max_queued_bytes = static_cast<std::size_t>(cfg.max_queued_mb * (1 << 20));
  train(cfg, ctx.config_yaml, transport::init_process_group(o), ctx.resume);
}

// Before anything starts: the dataset is there.
void check_train(const TrainConfig& cfg) {
  if (this_run().check_only && cfg.dataset == "idx") check_idx_dir(cfg.data_path);
}

}  // namespace

std::vector<Workload> ddp_workloads() { return {resuming(make_workload<TrainConfig>("ddp", check_train, ddp_rank))}; }

}  // namespace distrl::training
