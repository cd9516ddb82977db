#include "training/ps/hybrid.h"

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include <torch/torch.h>

#include "autograd/context.h"
#include "autograd/optimizer.h"
#include "autograd/remote_module.h"
#include "common/error.h"
#include "common/wait_notice.h"
#include "models/checkpoint.h"
#include "models/nets.h"
#include "models/torch_threads.h"
#include "training/ddp/ddp.h"
#include "training/run_loop.h"
#include "transport/collectives/process_group.h"

namespace distrl::training::ps {

using BagHost = autograd::ModuleHost<torch::nn::EmbeddingBagImpl>;

namespace {

constexpr const char* kBagClass = "ps.hybrid.EmbeddingBag";

struct BagConfig {
  std::int64_t rows = 100, dim = 16;
  int seed = 1;
  MSGPACK_DEFINE(rows, dim, seed);
};

int master_rank(const HybridConfig& cfg) { return cfg.servers + cfg.trainers; }

}  // namespace

HybridBatch hybrid_batch(const HybridConfig& cfg, int trainer, int batch) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<std::uint64_t>(cfg.seed) * 1000003ull +
                                                      static_cast<std::uint64_t>(trainer) * 7919ull + batch);
  const std::int64_t n = torch::randint(20, 51, {1}, gen, torch::kLong).item<std::int64_t>();
  HybridBatch b;
  b.indices = torch::randint(0, cfg.embeddings, {n}, gen, torch::kLong);
  std::vector<std::int64_t> offsets;
  for (std::int64_t start = 0; start < n; start += torch::randint(1, 11, {1}, gen, torch::kLong).item<std::int64_t>())
    offsets.push_back(start);
  b.offsets = torch::tensor(offsets, torch::kLong);
  b.targets = torch::randint(0, cfg.classes, {static_cast<std::int64_t>(offsets.size())}, gen, torch::kLong);
  return b;
}

// Every rank waits for one event from another: the trainers for the master's start, the
// master for the trainers' done, the ps for the master's finish.
struct HybridRank {
  std::mutex mu;
  std::condition_variable cv;
  std::optional<transport::RRef<BagHost>> bag;  // trainers: sent by the master
  std::set<int> done;                           // master: trainers that finished
  bool finished = false;                        // ps: the master says the run is over

  // Waits until ready() or a worker in watch dies (TransportError naming it); `say`: what the
  // wait is says so on stderr when it lasts (a start-up wait; common/wait_notice.h).
  template <typename Ready>
  void wait(transport::RpcAgent& agent, const std::vector<int>& watch, const std::string& what, Ready ready,
            bool say = false) {
    for (int r : watch) agent.watch(r);  // a death is seen even if this rank never called r
    WaitNotice notice(agent.name() + ": waiting for " + what);
    std::unique_lock<std::mutex> lock(mu);
    while (!cv.wait_for(lock, std::chrono::milliseconds(100), ready)) {
      for (int r : watch)
        if (agent.connection_lost(r))
          throw TransportError(agent.name() + ": rank " + std::to_string(r) + " died while waiting for " + what);
      if (say) notice.tick();
    }
  }
};

std::shared_ptr<HybridRank> setup_hybrid(transport::RpcAgent& agent, const HybridConfig& cfg) {
  autograd::enable(agent);
  auto me = std::make_shared<HybridRank>();
  HybridRank* m = me.get();
  if (agent.rank() == 0)
    autograd::register_remote_module<torch::nn::EmbeddingBagImpl, BagConfig, at::Tensor(at::Tensor, at::Tensor)>(
        agent, kBagClass, [](const BagConfig& c) {
          torch::manual_seed(c.seed);
          return std::make_shared<torch::nn::EmbeddingBagImpl>(
              torch::nn::EmbeddingBagOptions(c.rows, c.dim).mode(torch::kSum));
        });
  agent.register_function("ps.hybrid.start", [m](transport::RRef<BagHost> bag) {
    std::lock_guard<std::mutex> lock(m->mu);
    m->bag = std::move(bag);
    m->cv.notify_all();
  });
  agent.register_function("ps.hybrid.done", [m, trainers = cfg.trainers](int trainer) {
    if (trainer < 0 || trainer >= trainers)  // a bogus id must not count towards "every trainer done"
      throw ArgumentError("ps.hybrid.done: trainer " + std::to_string(trainer) + " is not one of 0.." +
                          std::to_string(trainers - 1));
    std::lock_guard<std::mutex> lock(m->mu);
    m->done.insert(trainer);
    m->cv.notify_all();
  });
  agent.register_function("ps.hybrid.finish", [m]() {
    std::lock_guard<std::mutex> lock(m->mu);
    m->finished = true;
    m->cv.notify_all();
  });
  return me;
}

namespace {

void run_master(const HybridConfig& cfg, transport::RpcAgent& agent, HybridRank& me) {
  std::cout << "master: creating EmbeddingBag(" << cfg.embeddings << ", " << cfg.embedding_dim
            << ", sum) on ps0 and starting " << cfg.trainers << " trainer(s)" << std::endl;
  auto bag = agent.remote<BagHost>(0, kBagClass, BagConfig{cfg.embeddings, cfg.embedding_dim, cfg.seed});
  bag.created().value();
  std::vector<int> trainers;
  for (int t = 0; t < cfg.trainers; ++t) trainers.push_back(cfg.servers + t);
  for (int r : trainers) agent.rpc_sync<void>(r, "ps.hybrid.start", bag);
  me.wait(agent, trainers, "the trainers to finish", [&] { return static_cast<int>(me.done.size()) == cfg.trainers; });
  agent.rpc_sync<void>(0, "ps.hybrid.finish");
  std::cout << "master: every trainer done" << std::endl;
}

void run_trainer(const HybridConfig& cfg, const std::string& config_yaml, transport::RpcAgent& agent, HybridRank& me) {
  const int trainer = agent.rank() - cfg.servers;
  const bool lead = trainer == 0;
  me.wait(
      agent, {master_rank(cfg)}, "the master's start", [&] { return me.bag.has_value(); }, /*say=*/true);
  autograd::RemoteModule<torch::nn::EmbeddingBagImpl> emb(*me.bag);

  // The trainers' own process group, on the RPC world's store.
  transport::ProcessGroupOptions po;
  po.timeout = std::chrono::milliseconds(static_cast<long long>(cfg.timeout_s * 1000));
  po.transport = agent.options().transport;  // dist.transport, as the RPC world's
  auto pg = transport::make_zmq_process_group(agent.store(), trainer, cfg.trainers, po, "hybrid-trainers");
  torch::manual_seed(cfg.seed);
  models::NetSpec spec;
  spec.name = "mlp";
  spec.inputs = static_cast<int>(cfg.embedding_dim);
  spec.outputs = cfg.classes;
  spec.hidden = {};
  auto fc = models::make_net(spec);  // Linear(embedding_dim, classes)
  DistributedDataParallel ddp(fc, pg);

  auto params = emb.remote_parameters();
  for (auto& p : fc->parameters()) params.push_back(agent.make_rref(std::make_shared<at::Tensor>(p)));
  autograd::DistributedOptimizer opt(agent, cfg.optimizer_spec(), params);

  std::vector<HybridBatch> batches;
  for (int b = 0; b < cfg.batches; ++b) batches.push_back(hybrid_batch(cfg, trainer, b));
  RunLoop loop(cfg, "distrl-ps", lead);
  loop.stop_in_lock_step(*pg, "trainer");  // the trainers all-reduce every step (DDP)
  loop.open(config_yaml, "metrics.csv", "epoch,loss,seconds", -1, CsvScalars::with_clock("seconds"));
  if (lead)
    std::cout << "trainer 0: EmbeddingBag on ps0 by RPC, Linear(" << cfg.embedding_dim << ", " << cfg.classes
              << ") DDP'd over " << cfg.trainers << " trainer(s); " << cfg.epochs << " epoch(s) of " << cfg.batches
              << " batches" << std::endl;
  long long steps = 0;
  int epochs_done = 0;
  for (int epoch = 1; epoch <= cfg.epochs; ++epoch) {
    Window w;  // this epoch's steps
    for (const auto& b : batches) {
      if (loop.stop_requested(++steps)) break;
      autograd::Context ctx(agent);
      at::Tensor out = ddp.forward(emb.forward(b.indices, b.offsets));
      at::Tensor loss = torch::nn::functional::cross_entropy(out, b.targets);
      autograd::backward(ctx, {loss});
      opt.step(ctx);
      pg->barrier();  // every trainer's embedding update is in before the next forward
      w.add(loss.item<double>());
    }
    if (loop.stopped()) break;  // a part of an epoch: no row for it
    epochs_done = epoch;
    const double secs = loop.seconds();
    loop.row(epoch, w.mean_loss(), secs);
    if (loop.log_due(epoch) || (lead && epoch == cfg.epochs))
      std::cout << "epoch " << std::setw(4) << epoch << "/" << cfg.epochs << "  loss " << std::fixed
                << std::setprecision(4) << w.mean_loss() << "  " << std::setprecision(1) << epoch * cfg.batches / secs
                << " steps/s" << std::defaultfloat << std::endl;
  }
  if (lead) {
    if (loop.stopped()) loop.report_stop("epoch", epochs_done, cfg.epochs);
    std::vector<at::Tensor> state;
    for (auto& p : emb.remote_parameters()) state.push_back(p.to_here());
    for (auto& p : fc->parameters()) state.push_back(p.detach().clone());
    models::save_file(state, cfg.out_dir + "/params.pt");
    loop.finish({{"training loss", "epoch", {{"epoch", "loss", "loss"}}}});
    std::cout << "trainer 0: wrote " << cfg.out_dir << "/{metrics.csv,learning_curve.png,params.pt,config.yaml}"
              << std::endl;
  }
  pg.reset();
  agent.rpc_sync<void>(master_rank(cfg), "ps.hybrid.done", trainer);
}

}  // namespace

void run_hybrid(const HybridConfig& cfg, const std::string& config_yaml, transport::RpcAgent& agent,
                const std::shared_ptr<HybridRank>& rank) {
  models::set_torch_threads(cfg.torch_threads);
  if (agent.world_size() != cfg.servers + cfg.trainers + 1)
    throw ConfigError("roles: the hybrid form needs 1 ps + " + std::to_string(cfg.trainers) +
                      " trainer(s) + 1 master = " + std::to_string(cfg.trainers + 2) + " ranks, not " +
                      std::to_string(agent.world_size()));
  if (agent.rank() == master_rank(cfg)) return run_master(cfg, agent, *rank);
  if (agent.rank() > 0) return run_trainer(cfg, config_yaml, agent, *rank);
  std::cout << "ps0: holds the EmbeddingBag; serving until the master says the run is over" << std::endl;
  rank->wait(agent, {master_rank(cfg)}, "the master's finish", [&] { return rank->finished; });
}

}  // namespace distrl::training::ps
