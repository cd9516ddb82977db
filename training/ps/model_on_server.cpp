#include "training/ps/model_on_server.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <mutex>

#include <torch/torch.h>

#include "autograd/context.h"
#include "autograd/optimizer.h"
#include "autograd/step_guard.h"
#include "common/error.h"
#include "common/output_file.h"
#include "models/checkpoint.h"
#include "models/nets.h"
#include "models/torch_threads.h"
#include "training/data.h"
#include "training/ps/client.h"
#include "training/ps/server.h"
#include "training/run_loop.h"

namespace distrl::training::ps {

using Clock = std::chrono::steady_clock;

namespace {

constexpr int kServerRank = 0;

std::shared_ptr<models::Net> build_cnn(const ModelOnServerConfig& cfg) {
  torch::manual_seed(cfg.seed);
  models::NetSpec spec;
  spec.name = cfg.model;
  spec.inputs = 784;
  spec.outputs = cfg.classes;
  spec.hidden = cfg.hidden;
  return models::make_net(spec);
}

// What a trainer tells the server when it is done.
struct Report {
  std::int64_t samples = 0, steps = 0, retries = 0;
  double seconds = 0;
  MSGPACK_DEFINE(samples, steps, retries, seconds);
};

// Test loss and accuracy of net on the (first test_limit of the) test split.
std::pair<double, double> evaluate(models::Net& net, const Dataset& test, int batch) {
  torch::NoGradGuard no_grad;
  net.eval();
  double loss = 0, correct = 0;
  for (std::int64_t off = 0; off < test.size(); off += batch) {
    const std::int64_t n = std::min<std::int64_t>(batch, test.size() - off);
    auto x = test.inputs.narrow(0, off, n), y = test.targets.narrow(0, off, n);
    auto out = net.forward(x);
    loss += torch::nn::functional::cross_entropy(out, y).item<double>() * n;
    correct += out.argmax(1).eq(y).sum().item<double>();
  }
  net.train();
  return {loss / std::max<std::int64_t>(1, test.size()), correct / std::max<std::int64_t>(1, test.size())};
}

}  // namespace

struct ModelServer {
  std::shared_ptr<models::Net> net;
  std::shared_ptr<autograd::ParameterGuard> guard;
  std::vector<transport::RRef<at::Tensor>> params;
  std::shared_ptr<ShardServer> tracker;  // the trainers' goodbyes and departures
  std::mutex mu;
  std::map<int, Report> reports;
  // serialize: the trainer of each step, in the order the guard granted the parameters
  // (step_order.csv: one process applying those batches in that order computes this run)
  std::ofstream step_order;
  std::int64_t steps = 0;
};

std::shared_ptr<ModelServer> setup_model_on_server(transport::RpcAgent& agent, const ModelOnServerConfig& cfg) {
  autograd::enable(agent);
  if (agent.rank() != kServerRank) return nullptr;
  auto s = std::make_shared<ModelServer>();
  s->net = build_cnn(cfg);
  s->net->train();
  s->guard = autograd::ParameterGuard::create(agent, s->net->parameters(), autograd::parse_step_policy(cfg.step_policy),
                                              std::chrono::milliseconds(static_cast<long long>(cfg.timeout_s * 1000)));
  for (auto& p : s->net->parameters()) s->params.push_back(agent.make_rref(std::make_shared<at::Tensor>(p)));
  // the trainers' books only, no snapshots: the model lives in this process
  s->tracker = std::make_shared<ShardServer>(0, 1, cfg.trainers, cfg.servers, cfg.server_options());
  ShardServer::register_on(agent, s->tracker);
  if (cfg.step_policy == "serialize") {
    std::filesystem::create_directories(cfg.out_dir);
    s->step_order.open(cfg.out_dir + "/step_order.csv");
    if (!s->step_order) throw Error("cannot write " + cfg.out_dir + "/step_order.csv (check run.out_dir)");
    s->step_order << "step,trainer\n";
  }
  ModelServer* m = s.get();
  agent.register_function("ps.model.forward", [m, trainers = cfg.trainers](int trainer, at::Tensor x) {
    if (trainer < 0 || trainer >= trainers)
      throw ArgumentError("ps.model.forward: trainer " + std::to_string(trainer) + " is not one of 0.." +
                          std::to_string(trainers - 1));
    if (x.dim() != 4 || x.size(1) != 1 || x.size(2) != 28 || x.size(3) != 28 || x.scalar_type() != at::kFloat)
      throw ArgumentError("ps.model.forward: expects float32 images [batch, 1, 28, 28], got " +
                          std::string(x.toString()) + " " + c10::str(x.sizes()));
    m->guard->enter();  // serialize: this context holds the parameters until it steps
    if (m->step_order.is_open()) {
      std::lock_guard<std::mutex> lock(m->mu);
      m->step_order << ++m->steps << "," << trainer << "\n";
    }
    return m->net->forward(x);
  });
  agent.register_function("ps.model.parameters", [m]() { return m->params; });
  agent.register_function("ps.model.state", [m]() {
    std::vector<at::Tensor> out;
    torch::NoGradGuard no_grad;
    for (auto& p : m->net->parameters()) out.push_back(p.detach().clone());
    return out;
  });
  agent.register_function("ps.model.report", [m, trainers = cfg.trainers](int trainer, Report r) {
    if (trainer < 0 || trainer >= trainers)
      throw ArgumentError("ps.model.report: trainer " + std::to_string(trainer) + " is not one of 0.." +
                          std::to_string(trainers - 1));
    std::lock_guard<std::mutex> lock(m->mu);
    m->reports[trainer] = r;
  });
  return s;
}

namespace {

void serve(const ModelOnServerConfig& cfg, transport::RpcAgent& agent, ModelServer& s) {
  s.tracker->watch_trainers(agent);
  std::cout << "ps0: the model (" << cfg.model << ") lives here; " << cfg.trainers << " trainer(s), step policy "
            << cfg.step_policy << ", " << cfg.optimizer << " lr " << cfg.lr << std::endl;
  const auto t0 = Clock::now();
  s.tracker->wait_for_trainers();
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  s.tracker->stop();
  const auto g = s.guard->stats();
  std::int64_t samples = 0, retries = 0;
  double slowest = 0;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    for (auto& [t, r] : s.reports) {
      samples += r.samples;
      retries += r.retries;
      slowest = std::max(slowest, r.seconds);
    }
  }
  const double rate = slowest > 0 ? samples / slowest : 0;
  if (s.step_order.is_open()) {
    std::lock_guard<std::mutex> lock(s.mu);
    check_written(s.step_order, cfg.out_dir + "/step_order.csv");
  }
  std::cout << "ps0: every trainer done after " << std::setprecision(3) << seconds << " s; " << samples << " samples, "
            << std::setprecision(4) << rate << " samples/s; " << g.version << " steps applied, " << g.stale_refused
            << " stale refused (" << retries << " retries), " << g.waits << " forwards waited " << std::setprecision(3)
            << g.wait_ms / 1000 << " s in all" << std::endl;
  std::filesystem::create_directories(cfg.out_dir);
  std::ofstream out(cfg.out_dir + "/server.csv");
  out << "trainers,step_policy,samples,seconds,samples_per_s,steps,stale_refused,retries,waits,wait_s\n"
      << cfg.trainers << "," << cfg.step_policy << "," << samples << "," << slowest << "," << rate << "," << g.version
      << "," << g.stale_refused << "," << retries << "," << g.waits << "," << g.wait_ms / 1000 << "\n";
  check_written(out, cfg.out_dir + "/server.csv");
  // The final model, once every trainer has stepped its last batch (trainer 0 may finish first).
  std::vector<at::Tensor> params;
  {
    torch::NoGradGuard no_grad;
    for (auto& p : s.net->parameters()) params.push_back(p.detach().clone());
  }
  models::save_file(params, cfg.out_dir + "/params.pt");
  std::cout << "ps0: wrote " << cfg.out_dir << "/{server.csv,params.pt"
            << (s.step_order.is_open() ? ",step_order.csv" : "") << "}" << std::endl;
}

// The lead trainer's end of an epoch: the server's parameters as they are now, copied into its
// local model and evaluated on the test set; a row of epochs.csv and a line.
void evaluate_epoch(const ModelOnServerConfig& cfg, transport::RpcAgent& agent, models::Net& local, const Dataset& test,
                    int epoch, const RunLoop& loop, CsvFile& epochs_csv) {
  auto state = agent.rpc_sync<std::vector<at::Tensor>>(kServerRank, "ps.model.state");
  {
    torch::NoGradGuard no_grad;
    auto ps = local.parameters();
    for (std::size_t i = 0; i < ps.size(); ++i) ps[i].copy_(state[i]);
  }
  auto [test_loss, acc] = evaluate(local, test, cfg.test_batch_size);
  epochs_csv.row(epoch, test_loss, acc, loop.seconds());
  std::cout << "epoch " << epoch << "/" << cfg.epochs << ": test loss " << std::setprecision(4) << test_loss
            << ", test accuracy " << std::setprecision(2) << std::fixed << 100 * acc << "% (" << test.size()
            << " images)" << std::defaultfloat << std::endl;
}

// This trainer's time in each phase, summed over its steps.
struct StepTimes {
  double forward = 0, backward = 0, step = 0;
};

// One batch: the forward on the server inside a distributed autograd context, the backward, the
// DistributedOptimizer's step; a step refused as stale (versioned) is tried again, up to
// train.retries times. The loss.
double train_step(const ModelOnServerConfig& cfg, transport::RpcAgent& agent, autograd::DistributedOptimizer& opt,
                  int trainer, const at::Tensor& x, const at::Tensor& y, Report& me, StepTimes& spent) {
  for (int attempt = 0;; ++attempt) {
    autograd::Context ctx(agent);
    const auto t0 = Clock::now();
    auto out = agent.rpc_sync<at::Tensor>(kServerRank, "ps.model.forward", trainer, x);
    auto l = torch::nn::functional::cross_entropy(out, y);
    const auto t1 = Clock::now();
    autograd::backward(ctx, {l});
    const auto t2 = Clock::now();
    spent.forward += std::chrono::duration<double>(t1 - t0).count();
    spent.backward += std::chrono::duration<double>(t2 - t1).count();
    try {
      opt.step(ctx);
      spent.step += std::chrono::duration<double>(Clock::now() - t2).count();
      return l.item<double>();
    } catch (const autograd::StaleStepError& e) {
      ++me.retries;
      if (attempt >= cfg.retries)
        throw Error("trainer " + std::to_string(trainer) + ": a batch was refused as stale " +
                    std::to_string(attempt + 1) + " times (train.retries " + std::to_string(cfg.retries) +
                    "): " + e.what());
    }
  }
}

}  // namespace

void run_model_on_server(const ModelOnServerConfig& cfg, const std::string& config_yaml, transport::RpcAgent& agent,
                         const std::shared_ptr<ModelServer>& server) {
  models::set_torch_threads(cfg.torch_threads);
  if (server) return serve(cfg, agent, *server);

  const int trainer = agent.rank() - cfg.servers;
  const bool lead = trainer == 0;
  const Dataset train = first_items(load_idx_dir(cfg.data_path, true), cfg.data_limit);
  const Dataset test = lead ? first_items(load_idx_dir(cfg.data_path, false), cfg.test_limit) : Dataset{};
  DistributedSampler sampler(train.size(), trainer, cfg.trainers, true, cfg.seed);

  auto params = agent.rpc_sync<std::vector<transport::RRef<at::Tensor>>>(kServerRank, "ps.model.parameters");
  autograd::DistributedOptimizer opt(agent, cfg.optimizer_spec(), params);  // the tutorial's TrainerNet
  auto local = lead ? build_cnn(cfg) : nullptr;                             // for evaluation only

  RunLoop loop(cfg, "distrl-ps", lead);
  loop.stop_through(agent.store());  // SIGINT/SIGTERM: every trainer stops after its current step
  loop.open(config_yaml, "metrics.csv", "epoch,step,loss,samples_per_s,retries");
  CsvFile epochs_csv;
  if (lead) {
    epochs_csv = CsvFile(cfg.out_dir + "/epochs.csv", "epoch,test_loss,test_accuracy,seconds");
    std::cout << "trainer 0: " << cfg.trainers << " trainer(s), the model on ps0, step policy " << cfg.step_policy
              << "; " << train.size() << " training images (" << sampler.per_rank() << " per trainer), " << cfg.epochs
              << " epoch(s) of batch " << cfg.batch_size << std::endl;
  }
  Report me;
  StepTimes spent;
  int epochs_done = 0;
  for (int epoch = 1; epoch <= cfg.epochs && !loop.stop_requested(); ++epoch) {
    sampler.set_epoch(epoch);
    const auto idx = torch::tensor(sampler.indices(), torch::kLong);
    Window w;  // the steps since the last progress line
    for (std::int64_t off = 0; off < idx.numel() && !loop.stop_requested(); off += cfg.batch_size) {
      const auto b = idx.narrow(0, off, std::min<std::int64_t>(cfg.batch_size, idx.numel() - off));
      w.add(train_step(cfg, agent, opt, trainer, train.inputs.index_select(0, b), train.targets.index_select(0, b), me,
                       spent));
      me.samples += b.numel();
      ++me.steps;
      if (loop.log_due(me.steps)) {
        const double rate = me.samples / loop.seconds();
        loop.row(epoch, me.steps, w.mean_loss(), rate, me.retries);
        std::cout << "epoch " << epoch << "/" << cfg.epochs << "  step " << std::setw(6) << me.steps << "  loss "
                  << std::fixed << std::setprecision(4) << w.mean_loss() << "  " << std::setprecision(0) << rate
                  << " samples/s (this trainer)  " << me.retries << " stale retries" << std::defaultfloat << std::endl;
        w.reset();
      }
    }
    if (loop.stop_requested()) break;  // the epoch is not done: not evaluated as one
    epochs_done = epoch;
    if (lead) evaluate_epoch(cfg, agent, *local, test, epoch, loop, epochs_csv);
  }
  me.seconds = loop.seconds();
  agent.rpc_sync<void>(kServerRank, "ps.model.report", trainer, me);
  if (lead) {
    epochs_csv.close();
    loop.finish({{"test accuracy", "epoch", {{"epoch", "test_accuracy", "test accuracy"}}},
                 {"test loss", "epoch", {{"epoch", "test_loss", "test loss"}}}},
                "epochs.csv");
    if (loop.stop_requested()) loop.report_stop("epoch", epochs_done, cfg.epochs);
    const double per = 1000.0 / std::max<std::int64_t>(1, me.steps);
    std::cout << "trainer 0: " << me.steps << " steps in " << std::setprecision(3) << me.seconds << " s ("
              << "forward " << spent.forward * per << " ms, backward " << spent.backward * per << " ms, step "
              << spent.step * per << " ms per step), " << me.retries << " stale retries; wrote " << cfg.out_dir
              << "/{metrics.csv,epochs.csv,learning_curve.png,config.yaml} (ps0 writes params.pt once every "
                 "trainer is done)"
              << std::endl;
  }
  PsClient(agent, ClientOptions{trainer, cfg.servers, 0}).bye();
}

}  // namespace distrl::training::ps
