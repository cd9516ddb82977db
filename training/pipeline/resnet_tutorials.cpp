// The two ResNet-50 tutorials of distrl-pipeline (workloads.h): PyTorch's RPC pipeline tutorial
// (pipeline_resnet50: two RRef shards, micro-batches chained remote -> rpc_async, distributed
// autograd, DistributedOptimizer, the micro-batch sweep) and its single-machine model-parallel
// tutorial (pipeline_resnet50_model_parallel, one process). The Fashion-MNIST stage runtime,
// the keys and the registry entries are workloads.cpp's.
#include "training/pipeline/workloads.h"

#include <malloc.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <mutex>
#include <optional>
#include <sstream>

#include "autograd/context.h"
#include "autograd/optimizer.h"
#include "autograd/remote_module.h"
#include "common/error.h"
#include "common/malloc_tuning.h"
#include "common/stop_signal.h"
#include "models/resnet.h"
#include "models/torch_threads.h"
#include "training/rpc_world.h"
#include "training/run_loop.h"
#include "transport/rpc/rpc_agent.h"

namespace distrl::training::pipeline {

namespace nn = torch::nn;
using Clock = std::chrono::steady_clock;

// ---- the RPC tutorial -------------------------------------------------------------------

namespace {

struct ShardSpec {
  int part = 1, classes = 1000, seed = 0;
  MSGPACK_DEFINE(part, classes, seed);
};

// The tutorial's ResNetShard1/2: a part of ResNet-50 whose forward fetches its input from an
// RRef and runs under the shard's lock (concurrent micro-batches queue here).
class TutorialShardImpl : public nn::Module {
 public:
  explicit TutorialShardImpl(const ShardSpec& s) {
    torch::manual_seed(s.seed);
    net_ = register_module(
        "net", std::make_shared<models::ResNet50>(
                   s.classes, s.part == 1 ? models::ResNet50::Part::Shard1 : models::ResNet50::Part::Shard2));
  }
  at::Tensor forward(transport::RRef<at::Tensor> x) {
    const at::Tensor in = x.to_here();
    std::lock_guard<std::mutex> lock(mu_);
    return net_->forward(in);
  }
  at::Tensor forward_local(const at::Tensor& x) { return net_->forward(x); }

 private:
  std::shared_ptr<models::ResNet50> net_;
  std::mutex mu_;
};

using Shard = autograd::RemoteModule<TutorialShardImpl>;

}  // namespace

namespace {
// The largest gap between the pipeline's parameters (fetched from their owners) and the
// reference's, in the same order, with the parameter's name and magnitude.
std::pair<double, std::string> parameter_gap(const std::vector<transport::RRef<at::Tensor>>& params,
                                             const std::vector<std::pair<std::string, at::Tensor>>& refs) {
  double gap = 0;
  std::string worst;
  for (std::size_t i = 0; i < params.size(); ++i) {
    double g = (params[i].to_here() - refs[i].second).abs().max().item<double>();
    if (std::isnan(g)) g = INFINITY;  // a NaN parameter is as far off as it gets
    if (g > gap) {
      gap = g;
      worst = refs[i].first + " (max |value| " + std::to_string(refs[i].second.abs().max().item<double>()) + ")";
    }
  }
  return {gap, worst};
}

// " (10 of 100 batches)" for a setting a signal cut short, "" for a whole one.
std::string partial_note(int done, int planned) {
  return done < planned ? " (" + std::to_string(done) + " of " + std::to_string(planned) + " batches)" : "";
}

// The sweeps' end: the stop line when a signal ended them early (sweep.csv holds the settings
// done, the last one with the batches it finished) and where the table is.
void finish_sweep(RunLoop& loop) {
  if (loop.stop_requested()) loop.report_stop("", "sweep.csv holds the settings measured so far");
  loop.finish();
  std::cout << "wrote " << loop.out_dir() << "/sweep.csv" << std::endl;
}
}  // namespace

namespace {

// pipeline.check_one_process: the same shards (same seeds), micro-batches and optimizer in this
// process, stepped beside the pipeline in two summation orders that are the same mathematics:
// one loss over the joined micro-batch outputs, and each micro-batch's loss (weighted by its
// rows) back-propagated last to first. Their gap is what float32 reordering changes on this
// machine's kernels; the pipeline, which sums micro-batch gradients as they arrive, is one more
// order and must stay within kReorderFactor times it (never less than as many units in the last
// place of the largest value): the first batch's loss and the parameters after its step. Later
// batches are said, not compared: they start from weights already a rounding apart, and a
// rounding-level change can move a max-pool's choice, after which the runs rightly part
// (docs/pipeline.md gives the gaps measured after two steps).
class OneProcessCheck {
 public:
  static constexpr double kReorderFactor = 3, kFloat32Unit = 0x1p-24;

  explicit OneProcessCheck(const PipelineConfig& c) : refs_{Ref(c), Ref(c)} {}

  // Batch b (0 = the first timed one) after the pipeline's step, whose loss was `loss`.
  void step(const at::Tensor& inputs, const at::Tensor& labels, int size, double loss, int b,
            const std::vector<transport::RRef<at::Tensor>>& params) {
    const double a = refs_[0].step(inputs, labels, size, false), r = refs_[1].step(inputs, labels, size, true);
    if (b != 0) {
      later_loss_gap_ = std::max(later_loss_gap_, std::abs(loss - a));
      return;
    }
    const double loss_gap = std::isnan(loss - a) ? INFINITY : std::abs(loss - a);
    loss_ = Gap{loss_gap, bound(std::abs(a - r), std::abs(a)), "the first batch's loss"};
    double spread = 0, scale = 0;
    const auto mine = refs_[0].parameters(), other = refs_[1].parameters();
    for (std::size_t i = 0; i < mine.size(); ++i) {
      spread = std::max(spread, (mine[i].second - other[i].second).abs().max().item<double>());
      scale = std::max(scale, mine[i].second.abs().max().item<double>());
    }
    const auto [gap, worst] = parameter_gap(params, mine);
    params_ = Gap{gap, bound(spread, scale), "the parameters after the first step, at " + worst};
  }

  // The gaps of micro-batch size `size` and their bounds, said; Error past a bound.
  void verdict(int size) const {
    std::cout << "one-process check (micro-batch size " << size << "): the first loss differs by " << loss_.gap
              << " (reordering allows " << loss_.bound << "), parameters after the first step by " << params_.gap
              << " (reordering allows " << params_.bound << "); later losses by up to " << later_loss_gap_
              << " (not compared)" << std::endl;
    for (const Gap* g : {&loss_, &params_})
      if (!(g->gap <= g->bound)) {  // a NaN bound fails too
        std::ostringstream m;
        m << "the pipeline does not train like one process (micro-batch size " << size << "): " << g->where
          << " differs by " << g->gap << ", more than the " << g->bound
          << " that summing the same gradients in another order gives here";
        throw Error(m.str());
      }
  }

 private:
  // The shards, their optimizer, and one summation order of each step.
  struct Ref {
    explicit Ref(const PipelineConfig& c)
        : s1(std::make_shared<TutorialShardImpl>(ShardSpec{1, c.classes, c.seed})),
          s2(std::make_shared<TutorialShardImpl>(ShardSpec{2, c.classes, c.seed + 1})) {
      auto p = s1->parameters();
      for (auto& q : s2->parameters()) p.push_back(q);
      opt = std::make_unique<torch::optim::SGD>(p, c.lr);
    }
    double step(const at::Tensor& inputs, const at::Tensor& labels, int size, bool backwards) {
      opt->zero_grad();
      const auto xs = inputs.split(size), ys = labels.split(size);
      std::vector<at::Tensor> outs;
      for (const at::Tensor& x : xs) outs.push_back(s2->forward_local(s1->forward_local(x)));
      double total = 0;
      if (!backwards) {
        const at::Tensor l = torch::mse_loss(torch::cat(outs), labels);
        l.backward();
        total = l.item<double>();
      } else {
        for (std::size_t i = outs.size(); i-- > 0;) {
          const at::Tensor l = torch::mse_loss(outs[i], ys[i]) * (static_cast<double>(ys[i].numel()) / labels.numel());
          l.backward();  // each micro-batch's graph is its own
          total += l.item<double>();
        }
      }
      opt->step();
      return total;
    }
    std::vector<std::pair<std::string, at::Tensor>> parameters() const {
      std::vector<std::pair<std::string, at::Tensor>> out;
      for (const auto& [shard, m] : {std::pair{"shard 1", s1}, std::pair{"shard 2", s2}})
        for (const auto& q : m->named_parameters()) out.emplace_back(std::string(shard) + " " + q.key(), q.value());
      return out;
    }
    std::shared_ptr<TutorialShardImpl> s1, s2;
    std::unique_ptr<torch::optim::SGD> opt;
  };
  struct Gap {
    double gap = 0, bound = 0;
    std::string where;
  };
  static double bound(double spread, double scale) {
    return kReorderFactor * std::max(spread, 2 * kFloat32Unit * scale);
  }

  Ref refs_[2];
  Gap loss_, params_;
  double later_loss_gap_ = 0;
};

}  // namespace

void run_resnet_tutorial(const PipelineConfig& c, const std::string& config_yaml, const WorldFlags& world) {
  transport::RpcOptions o = rpc_options_for(world, c.timeout_s, c.transport, c.torch_threads);
  // Default names: worker0 (the master), worker1 and worker2 (the shards' owners), as in the tutorial.
  o.num_worker_threads = std::max(o.num_worker_threads, 8);  // queued micro-batches wait on the shard lock
  transport::RpcAgent agent(o, [](transport::RpcAgent& a) {
    autograd::enable(a);
    autograd::register_remote_module<TutorialShardImpl, ShardSpec, at::Tensor(transport::RRef<at::Tensor>)>(
        a, "ResNetShard", [](const ShardSpec& s) { return std::make_shared<TutorialShardImpl>(s); });
  });
  if (agent.world_size() != 3) throw ConfigError("pipeline_resnet50 runs on 3 processes (master, worker1, worker2)");
  // SIGINT/SIGTERM: the master stops after its current batch, writes the row of the setting it
  // was in (the batches done) and shuts down; the workers serve on until it has.
  install_stop_handlers();
  if (agent.rank() != 0) {
    agent.serve_until_shutdown(0);  // the master's sweep may take many minutes
    agent.shutdown();
    return;
  }
  RunLoop loop(c, "distrl-pipeline", true);  // this process's own signal: the workers serve on
  loop.open(config_yaml, "sweep.csv", "microbatch_size,microbatches,batch,seconds_per_batch,first_loss,last_loss");
  std::cout << "pipeline_resnet50: ResNet-50 (" << c.classes << " classes) in two shards on worker1 and worker2, batch "
            << c.batch_size << " of " << c.image_size << "x" << c.image_size << ", " << c.batches
            << " batches per setting" << std::endl;
  for (int size : c.microbatch_sizes) {
    if (loop.stop_requested()) break;
    Shard s1(agent, "worker1", "ResNetShard", ShardSpec{1, c.classes, c.seed});
    Shard s2(agent, "worker2", "ResNetShard", ShardSpec{2, c.classes, c.seed + 1});
    auto params = s1.remote_parameters();
    for (auto& p : s2.remote_parameters()) params.push_back(p);
    autograd::OptimizerSpec spec;
    spec.lr = c.lr;
    autograd::DistributedOptimizer opt(agent, spec, params);
    std::optional<OneProcessCheck> check;
    if (c.check_one_process) check.emplace(c);
    torch::manual_seed(c.seed);
    double first_loss = 0, last_loss = 0, total = 0;
    const int warmup = size == c.microbatch_sizes.front() ? c.warmup : 0;
    int done = 0;  // timed batches
    for (int b = -warmup; b < c.batches && !loop.stop_requested(); ++b) {
      const at::Tensor inputs = torch::randn({c.batch_size, 3, c.image_size, c.image_size});
      const at::Tensor labels = torch::zeros({c.batch_size, c.classes})
                                    .scatter_(1, torch::randint(c.classes, {c.batch_size, 1}, torch::kLong), 1);
      const auto t0 = Clock::now();
      autograd::Context ctx(agent);
      std::vector<transport::Future<at::Tensor>> outs;
      for (const at::Tensor& x : inputs.split(size)) {
        auto x_rref = agent.make_rref(std::make_shared<at::Tensor>(x));
        auto y_rref = s1.module_rref().remote<at::Tensor>("forward", x_rref);
        outs.push_back(s2.module_rref().rpc_async<at::Tensor>("forward", y_rref));
      }
      std::vector<at::Tensor> ys;
      for (auto& f : outs) ys.push_back(f.value());
      const at::Tensor loss = torch::mse_loss(torch::cat(ys), labels);
      autograd::backward(ctx, {loss});
      if (b >= 0) opt.step(ctx);  // a warm-up batch leaves the parameters as they were
      const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
      if (b < 0) {
        std::cout << "warm-up batch: " << std::fixed << std::setprecision(3) << secs << " s (untimed)"
                  << std::defaultfloat << std::endl;
        continue;
      }
      total += secs;
      ++done;
      const double l = loss.item<double>();
      if (b == 0) first_loss = l;
      last_loss = l;
      std::cout << "  batch " << done << "/" << c.batches << ": " << std::fixed << std::setprecision(3) << secs
                << " s, loss " << std::setprecision(5) << l << std::defaultfloat << std::endl;
      if (check) check->step(inputs, labels, size, l, b, params);
    }
    if (done == 0) break;  // stopped before a timed batch of this setting: no row
    if (check) check->verdict(size);
    const int mbs = (c.batch_size + size - 1) / size;
    loop.row(size, mbs, c.batch_size, total / done, first_loss, last_loss);
    std::cout << "micro-batch size " << std::setw(4) << size << " (" << std::setw(3) << mbs
              << " micro-batches): " << std::fixed << std::setprecision(3) << total / done << " s per batch, loss "
              << std::setprecision(5) << first_loss << " -> " << last_loss << std::defaultfloat
              << partial_note(done, c.batches) << std::endl;
  }
  finish_sweep(loop);
  agent.shutdown();
}

void run_model_parallel(const PipelineConfig& c, const std::string& config_yaml) {
  models::set_torch_threads(c.torch_threads);
  const auto [d0, d1] = model_parallel_devices(c.devices);  // checked by check_model_parallel
  RunLoop loop(c, "distrl-pipeline", true);  // SIGINT/SIGTERM: the setting in progress ends after its current batch
  loop.open(config_yaml, "sweep.csv", "form,split_size,microbatches,batch,seconds_per_batch,first_loss,last_loss");
  std::cout << "pipeline_resnet50_model_parallel: ResNet-50 (" << c.classes << " classes), shard 1 on " << d0.str()
            << ", shard 2 on " << d1.str() << ", batch " << c.batch_size << " of " << c.image_size << "x"
            << c.image_size << ", " << c.batches << " batches per setting" << std::endl;
  // The tutorial's table: the whole model on one device, the two shards without and with
  // micro-batches (split_size rows each).
  struct Setting {
    std::string form;
    int split;
  };
  std::vector<Setting> settings{{"single_device", 0}, {"model_parallel", 0}};
  for (int s : c.microbatch_sizes)
    if (s < c.batch_size) settings.push_back({"pipelined", s});
  for (const Setting& st : settings) {
    if (loop.stop_requested()) break;
    // Every form starts from the same weights (the whole model's, seeded) and sees the same
    // batches, after one untimed warm-up batch (allocator, kernels) of its own.
    torch::manual_seed(c.seed);
    auto whole = models::make_resnet50(c.classes);
    std::shared_ptr<models::PolicyNet> net = whole;
    torch::Device out_device = d0;
    if (st.form == "single_device") {
      whole->to(d0);
    } else {
      auto mp = std::make_shared<models::ModelParallelResNet50>(c.classes, d0, d1, st.split);
      mp->load_from(*whole);
      net = mp;
      out_device = d1;
    }
    torch::optim::SGD opt(net->parameters(), c.lr);
    auto train_batch = [&](const at::Tensor& inputs, const at::Tensor& labels) {
      opt.zero_grad();
      const at::Tensor loss = torch::mse_loss(net->forward(inputs.to(d0)), labels.to(out_device));
      loss.backward();
      opt.step();
      return loss.item<double>();  // waits for the devices
    };
    torch::manual_seed(c.seed + 1);
    auto batch = [&] {
      at::Tensor inputs = torch::randn({c.batch_size, 3, c.image_size, c.image_size});
      at::Tensor labels = torch::zeros({c.batch_size, c.classes})
                              .scatter_(1, torch::randint(c.classes, {c.batch_size, 1}, torch::kLong), 1);
      return std::make_pair(inputs, labels);
    };
    {
      auto [wx, wy] = batch();
      std::vector<at::Tensor> saved;  // the warm-up must not move the weights
      for (auto& p : net->parameters()) saved.push_back(p.detach().clone());
      train_batch(wx, wy);
      torch::NoGradGuard none;
      auto ps = net->parameters();
      for (std::size_t i = 0; i < ps.size(); ++i) ps[i].copy_(saved[i]);
    }
    torch::manual_seed(c.seed + 2);
    double first_loss = 0, last_loss = 0, total = 0;
    int done = 0;
    for (int b = 0; b < c.batches && !loop.stop_requested(); ++b, ++done) {
      auto [inputs, labels] = batch();
      const auto t0 = Clock::now();
      const double l = train_batch(inputs, labels);
      total += std::chrono::duration<double>(Clock::now() - t0).count();
      if (b == 0) first_loss = l;
      last_loss = l;
    }
    if (done == 0) break;  // stopped in the warm-up: no row
    const int mbs = st.split > 0 ? (c.batch_size + st.split - 1) / st.split : 1;
    loop.row(st.form, st.split, mbs, c.batch_size, total / done, first_loss, last_loss);
    std::cout << std::left << std::setw(15) << st.form << std::right;
    if (st.split > 0)
      std::cout << " split " << std::setw(4) << st.split << " (" << std::setw(3) << mbs << " micro-batches)";
    else std::cout << std::string(30, ' ');
    std::cout << ": " << std::fixed << std::setprecision(3) << total / done << " s per batch, loss "
              << std::setprecision(5) << first_loss << " -> " << last_loss << std::defaultfloat
              << partial_note(done, c.batches) << std::endl;
  }
  finish_sweep(loop);
}

}  // namespace distrl::training::pipeline
