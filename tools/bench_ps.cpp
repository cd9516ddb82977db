// distrl-bench ps: the parameter server.
//   1. sparse engine: pull + push of R rows x 16 floats of a table split over 2 server
//      processes, from a third (median, p99, rows/s per server CPU second), then the servers'
//      CPU while idle (% of a core);
//   2. model on the server (configs/ps_model_on_server.yaml on a slice of Fashion-MNIST):
//      samples/s with 1, 2 and 4 trainers under every step policy;
//   3. straggler: the batch-update form with a small MLP, one of 5 trainers 3x slower: the
//      round rate waiting for everyone against quorum 4 of 5, both against no straggler;
//   4. the tutorial's ResNet-50 batch update (5 trainers): round time and the share of it a
//      trainer does not spend computing (communication and waiting for the round to close);
//   5. restart: a shard SIGKILLed mid-run and restarted by distrl-launch: how soon it serves
//      again and how long the trainers were blocked.
#include <algorithm>
#include <array>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

#include <torch/torch.h>

#include "common/cpu_time.h"
#include "common/error.h"
#include "tools/bench.h"
#include "tools/config_launch.h"
#include "tools/launcher.h"
#include "training/ps/client.h"
#include "training/ps/server.h"
#include "transport/rpc/rpc_agent.h"

namespace distrl::tools {
namespace {

using Clock = std::chrono::steady_clock;
namespace ps = training::ps;

// distrl-launch --config CONFIG ARGS, its output in DIR/log.txt (shown when it fails).
void run_config(const std::string& config, std::vector<std::string> args, const std::string& dir) {
  std::filesystem::create_directories(dir);
  // --force: a suite run twice into one --out-dir moves the last run's outputs aside.
  std::vector<std::string> cmd{self_dir() + "/distrl-launch", "--force", "--config", config, "run.out_dir=" + dir};
  cmd.insert(cmd.end(), args.begin(), args.end());
  run_or_show_log(cmd, dir + "/log.txt", "ps: the run of " + config);
}

std::vector<double> column(const std::vector<std::map<std::string, std::string>>& rows, const std::string& c,
                           std::size_t skip = 0) {
  std::vector<double> out;
  for (std::size_t i = skip; i < rows.size(); ++i) out.push_back(std::stod(rows[i].at(c)));
  return out;
}

}  // namespace

int run_ps_worker(const std::string& out, int rows, int iterations) {
  transport::RpcOptions o;  // env:// from distrl-launch
  o.shutdown_timeout = std::chrono::hours(1);
  ps::ServerOptions so;
  so.mode = ps::ServerOptions::Mode::Async;
  so.optimizer.kind = "adagrad";
  so.optimizer.lr = 0.01;
  std::shared_ptr<ps::ShardServer> server;
  transport::RpcAgent agent(o, [&](transport::RpcAgent& a) {
    if (a.rank() < 2) {
      server = std::make_shared<ps::ShardServer>(a.rank(), 2, 1, 2, so);
      ps::ShardServer::register_on(a, server);
    }
    a.register_function("bench.cpu_us", [] { return process_cpu_us(); });
  });
  torch::set_num_threads(1);
  if (agent.rank() == 2) {
    const std::int64_t table_rows = 1000000, dim = 16;
    ps::PsClient c(agent, ps::ClientOptions{0, 2, 0});
    c.declare_table("emb", torch::zeros({table_rows, dim}));
    auto gen = at::make_generator<at::CPUGeneratorImpl>(1);
    std::vector<double> ms, pull_ms, push_ms;
    auto server_cpu = [&] {
      return agent.rpc_sync<double>(0, "bench.cpu_us") + agent.rpc_sync<double>(1, "bench.cpu_us");
    };
    const double cpu0 = server_cpu();
    for (int i = 0; i < iterations + 5; ++i) {
      auto ids = torch::randint(0, table_rows, {rows}, gen, torch::kLong);
      auto grads = torch::randn({rows, dim}, gen);
      const auto t0 = Clock::now();
      at::Tensor got = c.pull_rows("emb", ids);
      const auto t1 = Clock::now();
      c.push_rows("emb", ids, grads);
      const auto t2 = Clock::now();
      if (i < 5) continue;
      ms.push_back(std::chrono::duration<double, std::milli>(t2 - t0).count());
      pull_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      push_ms.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
    }
    const double busy_cpu_s = (server_cpu() - cpu0) / 1e6;
    const double idle0 = server_cpu();
    const auto i0 = Clock::now();
    std::this_thread::sleep_for(std::chrono::seconds(2));
    const double idle_pct =
        (server_cpu() - idle0) / 1e6 / std::chrono::duration<double>(Clock::now() - i0).count() / 2 * 100;
    const double rows_moved = 2.0 * rows * (iterations + 5);  // pulled and pushed
    std::ofstream(out) << "sparse," << percentile(ms, 0.5) << "," << percentile(ms, 0.99) << ","
                       << rows_moved / busy_cpu_s << "," << idle_pct << "," << percentile(pull_ms, 0.5) << ","
                       << percentile(push_ms, 0.5) << "\n";
    c.bye();
  } else {
    server->watch_trainers(agent);
    server->wait_for_trainers();
    server->stop();
  }
  agent.shutdown();
  return 0;
}

namespace {

// The batch-update form's small model (the straggler and restart parts): an MLP on 32x32 images.
std::vector<std::string> small_model(int rounds) {
  return {"model.name=mlp",      "model.hidden=[256,256]",
          "model.image_size=32", "train.rounds=" + std::to_string(rounds),
          "train.batch_size=64", "run.log_interval=1000000"};
}

// Each part prints its lines and adds its rows (part,setting,value,unit) to csv; root holds
// the runs' own outputs.
// 1. the sparse engine
void bench_sparse(const PsBenchOptions& opt, const std::string& root, std::ostream& csv) {
  auto c = fields(
      run_workers(3, "ps-worker", {"--rows", std::to_string(opt.rows), "--iterations", std::to_string(opt.iterations)})
          .at(0),
      7, "ps-worker");
  std::printf(
      "\nsparse: pull + push of %d rows x 16 floats on 2 shards: median %.3f ms (pull %.3f, push %.3f), p99 %.3f "
      "ms; %.3g rows/s per server CPU second; idle servers %.2f%% of a core each\n",
      opt.rows, std::stod(c[1]), std::stod(c[5]), std::stod(c[6]), std::stod(c[2]), std::stod(c[3]), std::stod(c[4]));
  csv << "sparse,median," << c[1] << ",ms\nsparse,pull_median," << c[5] << ",ms\nsparse,push_median," << c[6]
      << ",ms\nsparse,p99," << c[2] << ",ms\nsparse,rows_per_cpu_s," << c[3] << ",rows/s\nsparse,idle_cpu," << c[4]
      << ",% of a core\n";
}

// 2. model on the server
void bench_model_on_server(const PsBenchOptions& opt, const std::string& root, std::ostream& csv) {
  std::printf("\nmodel on server (mnist_cnn, %d Fashion-MNIST images, batch 64): samples/s\n", opt.images);
  std::printf("%-10s %10s %10s %10s   (stale refusals / waits with 4)\n", "policy", "1", "2", "4");
  for (const std::string policy : {"serialize", "hogwild", "versioned"}) {
    std::printf("%-10s", policy.c_str());
    std::string extra;
    for (int t : {1, 2, 4}) {
      const std::string dir = root + "/mos_" + policy + "_" + std::to_string(t);
      run_config(opt.configs + "/ps_model_on_server.yaml",
                 {"roles.trainers=" + std::to_string(t), "ps.step_policy=" + policy,
                  "data.limit=" + std::to_string(opt.images), "data.test_limit=500", "run.log_interval=1000000"},
                 dir);
      auto s = read_csv(dir + "/server.csv").at(0);
      std::printf(" %10.0f", std::stod(s["samples_per_s"]));
      csv << "model_on_server," << policy << "_" << t << "," << s["samples_per_s"] << ",samples/s\n";
      if (t == 4) extra = s["stale_refused"] + " / " + s["waits"];
    }
    std::printf("   (%s)\n", extra.c_str());
    std::fflush(stdout);
  }
}

// 3. straggler
void bench_straggler(const PsBenchOptions& opt, const std::string& root, std::ostream& csv) {
  const std::string bu = opt.configs + "/ps_batch_update.yaml";
  const std::vector<std::string> small = small_model(opt.rounds);
  auto rate = [&](const std::string& tag, std::vector<std::string> extra) {
    extra.insert(extra.end(), small.begin(), small.end());
    run_config(bu, extra, root + "/" + tag);
    auto rows = read_csv(root + "/" + tag + "/metrics.csv");
    return std::make_pair(1000.0 / percentile(column(rows, "round_ms", 2), 0.5),
                          percentile(column(rows, "compute_ms", 2), 0.5));
  };
  auto [base, compute_ms] = rate("straggler_none", {});
  const std::string slow = "train.slow_ms=" + std::to_string(2 * compute_ms);
  auto [all, unused1] = rate("straggler_all", {"train.slow_trainer=4", slow});
  auto [quorum, unused2] = rate("straggler_quorum4", {"train.slow_trainer=4", slow, "ps.quorum=4"});
  (void)unused1;
  (void)unused2;
  std::printf(
      "\nstraggler (mlp 256x256, 5 trainers, trainer 4 sleeps 2x its %.1f ms compute): rounds/s at trainer 0\n"
      "  no straggler %.1f | waiting for all %.1f (%.2fx) | quorum 4 of 5 %.1f (%.2fx)\n",
      compute_ms, base, all, all / base, quorum, quorum / base);
  csv << "straggler,none," << base << ",rounds/s\nstraggler,all," << all << ",rounds/s\nstraggler,quorum4," << quorum
      << ",rounds/s\n";
}

// 4. ResNet-50
void bench_resnet(const PsBenchOptions& opt, const std::string& root, std::ostream& csv) {
  run_config(opt.configs + "/ps_batch_update.yaml",
             {"train.rounds=" + std::to_string(opt.resnet_rounds), "run.log_interval=1000000"}, root + "/resnet50");
  auto rows = read_csv(root + "/resnet50/metrics.csv");
  const auto round = column(rows, "round_ms", 1), comp = column(rows, "compute_ms", 1);
  const double r = percentile(round, 0.5), k = percentile(comp, 0.5);
  // trainer 0's "X MB on the wire per round for Y MB of gradients and values (Zx)"
  std::ostringstream text;
  text << std::ifstream(root + "/resnet50/log.txt").rdbuf();
  const std::string log = text.str();
  const auto at = log.find("MB of gradients and values (");
  const double ratio = at == std::string::npos ? -1 : std::stod(log.substr(at + 28));
  std::printf(
      "\nResNet-50 batch update (5 trainers, batch 20 @ 64x64, 30 classes): round %.0f ms, compute %.0f ms "
      "at trainer 0; not computing %.0f%% of the round (communication + waiting for the slowest); "
      "wire bytes %.4fx the gradients and values\n",
      r, k, 100 * (r - k) / r, ratio);
  csv << "resnet50,round," << r << ",ms\nresnet50,compute," << k << ",ms\nresnet50,wire_over_tensor_bytes," << ratio
      << ",x\n";
}

// 5. a shard killed and restarted by distrl-launch
void bench_restart(const PsBenchOptions& opt, const std::string& root, std::ostream& csv) {
  const std::string dir = root + "/restart";
  std::filesystem::create_directories(dir);
  std::string cmd = self_dir() + "/distrl-launch --config " + opt.configs + "/ps_batch_update.yaml" +
                    " roles.servers=2 roles.trainers=3 train.rounds=400 ps.snapshot_rounds=20 launch.max_restarts=1 "
                    "run.log_interval=10 run.out_dir=" +
                    dir;
  for (const auto& a : small_model(0))
    if (a.rfind("train.rounds=", 0) != 0 && a.rfind("run.log_interval=", 0) != 0) cmd += " " + a;
  FILE* p = ::popen(("DISTRL_LOG_LEVEL=info " + cmd + " 2>&1").c_str(), "r");
  std::ofstream log(dir + "/log.txt");
  std::string pid;
  Clock::time_point killed{};
  double first_push_s = -1, back_s = -1;
  std::array<char, 4096> buf;
  while (std::fgets(buf.data(), static_cast<int>(buf.size()), p)) {
    const std::string line = buf.data();
    log << line;
    if (pid.empty() && line.rfind("[0] ps shard 0/2 (pid ", 0) == 0) pid = line.substr(22, line.find(')') - 22);
    if (killed == Clock::time_point{} && !pid.empty() && line.find("round    50/") != std::string::npos) {
      killed = Clock::now();
      ::kill(std::stoi(pid), SIGKILL);
    }
    if (const auto at = line.find(" arrived ");
        at != std::string::npos && line.find("first push since") != std::string::npos)
      first_push_s = std::stod(line.substr(at + 9));
    if (back_s < 0 && killed != Clock::time_point{} && line.find("answers again") != std::string::npos)
      back_s = std::chrono::duration<double>(Clock::now() - killed).count();
  }
  const int status = ::pclose(p);
  if (status != 0 || first_push_s < 0) throw Error("ps: the restart run failed; see " + dir + "/log.txt");
  std::printf(
      "\nrestart (mlp 256x256, 2 shards, 3 trainers, shard 0 SIGKILLed at round 50, restarted by distrl-launch):\n"
      "  first push served %.2f s after the new process started; trainers blocked %.2f s from the kill\n",
      first_push_s, back_s);
  csv << "restart,first_push_after_start," << first_push_s << ",s\nrestart,trainers_blocked," << back_s << ",s\n";
}

}  // namespace

int run_ps_bench(const PsBenchOptions& options) {
  PsBenchOptions opt = options;
  opt.configs = find_config(opt.configs, "--configs");
  const std::string root = opt.out_dir;
  std::filesystem::create_directories(root);
  std::ofstream csv(root + "/ps.csv");
  csv << "part,setting,value,unit\n";
  std::cout << "distrl-bench ps on " << machine_description() << "\n";
  const auto part = [&](const char* name) {
    return std::find(opt.parts.begin(), opt.parts.end(), name) != opt.parts.end();
  };
  if (part("sparse")) bench_sparse(opt, root, csv);
  if (part("model") && opt.images > 0) bench_model_on_server(opt, root, csv);
  if (part("straggler")) bench_straggler(opt, root, csv);
  if (part("resnet") && opt.resnet_rounds > 0) bench_resnet(opt, root, csv);
  if (part("restart")) bench_restart(opt, root, csv);
  std::cout << "\nwrote " << root << "/ps.csv (runs' own outputs beside it)" << std::endl;
  return 0;
}

}  // namespace distrl::tools
