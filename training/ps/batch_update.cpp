#include "training/ps/batch_update.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <thread>

#include "common/error.h"
#include "common/wait_notice.h"
#include "common/log.h"
#include "models/checkpoint.h"
#include "models/nets.h"
#include "models/resnet.h"
#include "models/torch_threads.h"
#include "training/ps/client.h"
#include "training/run_loop.h"
#include "transport/bootstrap/store.h"

namespace distrl::training::ps {

using Clock = std::chrono::steady_clock;

std::shared_ptr<models::PolicyNet> build_model(const BatchUpdateConfig& cfg) {
  torch::manual_seed(cfg.seed);
  if (cfg.model == "resnet50") return models::make_resnet50(cfg.classes);  // 3 channels: the workload's check
  models::NetSpec spec;
  spec.name = "mlp";
  spec.inputs = cfg.channels * cfg.image_size * cfg.image_size;
  spec.outputs = cfg.classes;
  spec.hidden = cfg.hidden;
  return models::make_net(spec);
}

Batch synthetic_batch(const BatchUpdateConfig& cfg, int trainer, int round) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<std::uint64_t>(cfg.seed) * 1000003ull +
                                                      static_cast<std::uint64_t>(trainer) * 7919ull + round);
  Batch b;
  b.images = torch::randn({cfg.batch_size, cfg.channels, cfg.image_size, cfg.image_size}, gen);
  b.labels = torch::randint(0, cfg.classes, {cfg.batch_size}, gen, torch::kLong);
  return b;
}

std::shared_ptr<ShardServer> setup_rank(transport::RpcAgent& agent, const ShardedConfig& cfg) {
  if (agent.rank() >= cfg.servers) return nullptr;
  auto server = std::make_shared<ShardServer>(agent.rank(), cfg.servers, cfg.trainers, cfg.servers,
                                              cfg.shard_options(agent.rank()));
  if (agent.incarnation() > 1) {  // this shard's earlier process died: resume from its snapshot
    const std::string path = cfg.snapshot_path(agent.rank());
    if (std::filesystem::exists(path)) {
      const std::int64_t round = server->restore(path);
      std::cout << "ps shard " << agent.rank() << ": restarted (incarnation " << agent.incarnation()
                << "), resuming from the snapshot of round " << round << std::endl;
    } else {
      DISTRL_LOG(Warn, "ps shard " << agent.rank() << ": restarted (incarnation " << agent.incarnation()
                                   << ") with no snapshot at " << path
                                   << ": it starts empty and each trainer re-declares its keys with its own current "
                                      "values (set ps.snapshot_rounds or ps.snapshot_s to resume exactly)");
    }
    for (int t = 0; t < cfg.trainers; ++t)  // trainers that finished meanwhile are not waited for
      if (agent.store().check({done_key(t)})) server->bye(t);
  }
  ShardServer::register_on(agent, server);
  return server;
}

void write_stats_csv(const std::string& path, const std::vector<ShardStats>& shards) {
  std::ofstream out(path);
  out << "shard,key,table,pushes,pulls,bytes_in,bytes_out,updates,hot_rows\n";
  for (const auto& s : shards)
    for (const auto& k : s.keys) {
      out << s.shard << "," << k.name << "," << k.table << "," << k.pushes << "," << k.pulls << "," << k.bytes_in << ","
          << k.bytes_out << "," << k.updates << ",";
      for (std::size_t i = 0; i < k.hot_rows.size(); ++i)
        out << (i ? " " : "") << k.hot_rows[i] << ":" << k.hot_row_pushes[i];
      out << "\n";
    }
  out << "\nshard,trainer,pushes,late,clock,max_staleness,gone,duplicates\n";
  for (const auto& s : shards)
    for (const auto& t : s.trainers)
      out << s.shard << "," << t.trainer << "," << t.pushes << "," << t.late << "," << t.clock << "," << t.max_staleness
          << "," << t.gone << "," << t.duplicates << "\n";
  if (!out) throw Error("cannot write " + path + " (is the disk full?)");
}

void serve_shard(const PsEngineConfig& cfg, transport::RpcAgent& agent, ShardServer& server) {
  server.watch_trainers(agent);
  std::cout << "ps shard " << agent.rank() << "/" << cfg.servers << " (pid " << ::getpid() << "): serving "
            << cfg.trainers << " trainer(s), " << cfg.consistency
            << (cfg.consistency == "sync" ? " quorum " + std::to_string(cfg.quorum) : "") << ", " << cfg.optimizer
            << " lr " << cfg.lr << std::endl;
  server.wait_for_trainers();
  const ShardStats s = server.stats();
  std::int64_t pushes = 0;
  for (const auto& t : s.trainers) pushes += t.pushes;
  std::cout << "ps shard " << agent.rank() << ": ";
  if (cfg.consistency == "sync")
    std::cout << s.rounds << " round(s) (" << s.closed_quorum << " at quorum, " << s.closed_timeout << " at max_wait, "
              << s.closed_departure << " when a trainer left)";
  else std::cout << pushes << " push(es) applied on arrival (" << cfg.consistency << ")";
  std::cout << (s.snapshots ? ", " + std::to_string(s.snapshots) + " snapshot(s)" : "") << "; every trainer done"
            << std::endl;
  server.stop();
}

bool serve_if_server(const PsEngineConfig& cfg, transport::RpcAgent& agent,
                     const std::shared_ptr<ShardServer>& server) {
  models::set_torch_threads(cfg.torch_threads);
  if (agent.world_size() != cfg.servers + cfg.trainers)
    throw ConfigError("roles: " + std::to_string(cfg.servers) + " server(s) + " + std::to_string(cfg.trainers) +
                      " trainer(s) need a world of " + std::to_string(cfg.servers + cfg.trainers) + ", not " +
                      std::to_string(agent.world_size()));
  if (!server) return false;
  serve_shard(cfg, agent, *server);
  return true;
}

ClientOptions client_options(const ShardedConfig& cfg, int trainer) {
  return ClientOptions{trainer, cfg.servers, 0, std::chrono::milliseconds(static_cast<long long>(cfg.retry_s * 1000))};
}

void run_batch_update(const BatchUpdateConfig& cfg, const std::string& config_yaml, transport::RpcAgent& agent,
                      const std::shared_ptr<ShardServer>& server) {
  if (serve_if_server(cfg, agent, server)) return;

  const int trainer = agent.rank() - cfg.servers;
  const bool lead = trainer == 0;
  auto model = build_model(cfg);
  model->train();
  std::vector<std::string> names;
  std::vector<torch::Tensor> params;
  for (auto& kv : model->named_parameters()) {
    names.push_back(kv.key());
    params.push_back(kv.value());
  }
  PsClient ps(agent, client_options(cfg, trainer));
  for (std::size_t i = 0; i < names.size(); ++i) ps.declare(names[i], params[i]);
  auto load = [&](const std::vector<torch::Tensor>& values) {
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < params.size(); ++i) params[i].copy_(values[i]);
  };
  load(ps.pull(names));  // the tutorial's get_model()
  // Every trainer starts from the same model: async and ssp apply a push on arrival, and a
  // trainer that pulled after another's first push would start elsewhere. (Once per run: a
  // restarted trainer finds the key set.)
  auto& store = agent.store();
  if (store.add("ps/started", 1) >= cfg.trainers) store.set("ps/started/all", "1");
  WaitNotice notice(agent.name() + ": waiting for every trainer to pull the model (" + std::to_string(cfg.trainers) +
                    " trainers)");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(cfg.timeout_s);
  while (!store.check({"ps/started/all"}, std::chrono::seconds(5))) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (std::chrono::steady_clock::now() >= deadline)
      throw TimeoutError(agent.name() + ": not every trainer pulled the model within dist.timeout_s (" +
                         std::to_string(cfg.timeout_s) + " s): started? (" +
                         store.get("ps/started", std::chrono::seconds(2)) + " of " + std::to_string(cfg.trainers) +
                         " did)");
    notice.tick();
  }

  RunLoop loop(cfg, "distrl-ps", lead);
  loop.stop_through(agent.store());  // SIGINT/SIGTERM: every trainer stops after its current round
  loop.open(config_yaml, "metrics.csv", "round,loss,round_ms,compute_ms,dropped");
  if (lead)
    std::cout << "trainer 0: " << cfg.trainers << " trainer(s), " << cfg.servers << " server(s), model " << cfg.model
              << " (" << names.size() << " tensors), " << cfg.rounds << " rounds of batch " << cfg.batch_size
              << std::endl;
  const transport::RpcStats wire0 = agent.stats();
  int dropped = 0, rounds = 0;
  for (int r = 0; r < cfg.rounds && !loop.stop_requested(); ++r, ++rounds) {
    const auto t0 = Clock::now();
    const Batch b = synthetic_batch(cfg, trainer, r);
    model->zero_grad();
    torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(b.images), b.labels);
    loss.backward();
    if (trainer == cfg.slow_trainer && cfg.slow_ms > 0)
      std::this_thread::sleep_for(std::chrono::microseconds(static_cast<long long>(cfg.slow_ms * 1000)));
    std::vector<torch::Tensor> grads;
    for (auto& p : params) grads.push_back(p.grad().defined() ? p.grad() : torch::zeros_like(p));
    const auto t1 = Clock::now();
    PushResult res = ps.push(names, grads, /*fetch=*/true);  // the tutorial's update_and_fetch_model
    load(res.values);
    dropped += res.dropped;
    const auto t2 = Clock::now();
    const double round_ms = std::chrono::duration<double, std::milli>(t2 - t0).count();
    const double compute_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
    loop.row(r + 1, loss.item<double>(), round_ms, compute_ms, res.dropped);
    if (loop.log_due(r + 1) || (lead && r + 1 == cfg.rounds))
      std::cout << "round " << std::setw(5) << r + 1 << "/" << cfg.rounds << "  loss " << std::fixed
                << std::setprecision(4) << loss.item<double>() << "  round " << std::setprecision(1) << round_ms
                << " ms (compute " << compute_ms << " ms)" << std::defaultfloat << std::endl;
  }
  const double seconds = loop.seconds();
  const transport::RpcStats wire1 = agent.stats();
  if (lead) {
    if (loop.stop_requested()) loop.report_stop("round", rounds, cfg.rounds);
    // Each round a trainer sends its gradients and receives the new values: twice the tensors.
    double tensor_bytes = 0;
    for (auto& p : params) tensor_bytes += 2.0 * static_cast<double>(p.nbytes());
    const double wire =
        static_cast<double>(wire1.bytes_sent - wire0.bytes_sent + wire1.bytes_received - wire0.bytes_received) /
        std::max(1, rounds);
    std::cout << "trainer 0: " << std::setprecision(4) << wire / 1e6 << " MB on the wire per round for "
              << tensor_bytes / 1e6 << " MB of gradients and values (" << std::fixed << std::setprecision(4)
              << wire / tensor_bytes << "x)" << std::defaultfloat << std::endl;
    loop.finish();  // no learning curve: the losses are of random images
    models::save_file(ps.pull(names), cfg.out_dir + "/params.pt");
    write_stats_csv(cfg.out_dir + "/ps_stats.csv", ps.stats());
    std::cout << "trainer 0: " << rounds << " rounds in " << std::setprecision(3) << seconds << " s ("
              << rounds / seconds << " rounds/s); " << dropped << " late push(es) dropped; wrote " << cfg.out_dir
              << "/{metrics.csv,ps_stats.csv,params.pt,config.yaml}" << std::endl;
  }
  ps.bye();
}

}  // namespace distrl::training::ps
