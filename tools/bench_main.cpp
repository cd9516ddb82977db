// distrl-bench: benchmarks as tools (speed is measured here, never asserted in tests).
#include <CLI/CLI.hpp>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <utility>
#include <vector>

#include "common/main_guard.h"
#include "tools/bench.h"

namespace {

using namespace distrl::tools;

// One subcommand per suite, its flags bound to the suite's options.
CLI::App* add_rpc(CLI::App& app, RpcBenchOptions& o) {
  CLI::App* s =
      app.add_subcommand("rpc", "RPC round trip (rpc_sync), throughput (rpc_async in flight), 4 MiB bandwidth");
  s->add_option("--calls", o.calls, "timed rpc_sync calls")->check(CLI::Range(10, 10000000));
  s->add_option("--throughput-calls", o.throughput_calls, "rpc_async calls in the throughput run")
      ->check(CLI::Range(10, 100000000));
  s->add_option("--inflight", o.inflight, "rpc_async calls kept in flight")->check(CLI::Range(1, 100000));
  s->add_option("--big-mib", o.big_mib, "size of the bandwidth tensor in MiB")->check(CLI::Range(1, 1024));
  s->add_option("--transports", o.transports,
                "transports to measure (auto: what a run gets by default, on one host both links as one PairLink "
                "with shared memory at home)")
      ->check(CLI::IsMember({"ipc", "tcp", "shm", "auto"}))
      ->delimiter(',');
  s->add_option("--cpus", o.cpus, "any: let the OS place both processes; same: pin both to CPU 0; split: one per CPU")
      ->check(CLI::IsMember({"any", "same", "split"}));
  s->add_option("--spin-us", o.spin_us,
                "busy-poll time before sleeping, for the I/O loop and waiting futures (-1: defaults)");
  s->add_option("--idle-peers", o.idle_peers,
                "then an idle world: one process and this many peers, every pair connected")
      ->check(CLI::Range(1, 256));
  s->add_option("--idle-s", o.idle_s, "how long the idle world is measured (0: skip it)")
      ->check(CLI::Range(0.0, 3600.0));
  s->add_option("--security", o.security, "off, curve or both (off,curve): ZeroMQ CURVE on the RPC sockets")
      ->check(CLI::IsMember({"off", "curve"}))
      ->delimiter(',');
  s->add_option("--csv", o.csv, "CSV output path (default: OUT_DIR/<suite>.csv)");
  return s;
}

CLI::App* add_rl(CLI::App& app, RlBenchOptions& o) {
  CLI::App* s = app.add_subcommand("rl",
                                   "agent + observers as processes: batched vs unbatched action serving (the PyTorch "
                                   "batched-RPC tutorial's experiment), learning off, the same work in both modes, "
                                   "the round trip split into queue wait / forward / transport and reply");
  s->add_option("--observers", o.observers, "observer counts to run")->delimiter(',')->check(CLI::Range(1, 1024));
  s->add_option("--episodes", o.episodes, "rounds per run (each observer runs one episode per round)")
      ->check(CLI::Range(1, 1000000));
  s->add_option("--steps", o.steps, "steps per episode")->check(CLI::Range(1, 1000000));
  s->add_option("--repeats", o.repeats,
                "runs per cell, batched and unbatched alternating; the table shows each mode's median run")
      ->check(CLI::Range(1, 1000));
  s->add_option("--envs-per-observer", o.envs_per_observer, "envs each observer steps together")
      ->check(CLI::Range(1, 4096));
  s->add_option("--config", o.config, "base RL configuration");
  s->add_option("--models", o.models,
                "policy sizes to sweep: tutorial (the tutorial's net) or mlp:WxW.. (hidden widths), e.g. "
                "--models tutorial mlp:256x256 mlp:1024x1024")
      ->delimiter(',');
  s->add_option("--set", o.overrides, "extra KEY=VALUE for every run (repeatable), e.g. --set agent.max_wait_us=1000");
  s->add_option("--csv", o.csv, "CSV output path (default: OUT_DIR/<suite>.csv)");
  s->add_option("--png", o.png,
                "plot output path (needs gnuplot; default: beside --csv, rl.csv -> rl.png, one per model with "
                "several: rl-MODEL.png; none: no plot)");
  return s;
}

CLI::App* add_soak(CLI::App& app, SoakBenchOptions& o) {
  CLI::App* s = app.add_subcommand("soak",
                                   "the RL run left going in each serving mode side by side (agent + observers "
                                   "as processes): RSS, open fds and threads sampled; growth after the warm-up "
                                   "reported");
  s->add_option("--minutes", o.minutes, "how long")->check(CLI::Range(0.1, 100000.0));
  s->add_option("--warmup-minutes", o.warmup_minutes, "samples before this are not compared")
      ->check(CLI::Range(0.0, 100000.0));
  s->add_option("--interval-s", o.interval_s, "seconds between samples")->check(CLI::Range(0.5, 3600.0));
  s->add_option("--observers", o.observers, "observers per run")->check(CLI::Range(1, 1024));
  s->add_option("--modes", o.modes, "serving modes, run side by side")
      ->check(CLI::IsMember({"batched", "unbatched"}))
      ->delimiter(',');
  s->add_option("--config", o.config, "base RL configuration");
  s->add_option("--set", o.overrides, "extra KEY=VALUE for every run (repeatable)");
  return s;
}

// --transports for the process-group suites (every rank on this host).
void add_group_transports(CLI::App* s, std::vector<std::string>& transports) {
  s->add_option("--transports", transports,
                "what the collectives run over, each measured: shm (shared memory), zmq (ZeroMQ sockets)")
      ->check(CLI::IsMember({"shm", "zmq"}))
      ->delimiter(',');
}

CLI::App* add_allreduce(CLI::App& app, AllreduceBenchOptions& o) {
  CLI::App* s = app.add_subcommand("allreduce", "all_reduce time, algorithm and bus bandwidth by size and rank count");
  s->add_option("--ranks", o.ranks, "rank counts")->delimiter(',')->check(CLI::Range(2, 1024));
  s->add_option("--sizes", o.sizes, "sizes in bytes (multiples of 4)")->delimiter(',')->check(CLI::Range(4, 1 << 30));
  s->add_option("--security", o.security, "off, curve or both (off,curve): ZeroMQ CURVE on the group's sockets")
      ->check(CLI::IsMember({"off", "curve"}))
      ->delimiter(',');
  add_group_transports(s, o.transports);
  s->add_option("--csv", o.csv, "CSV output path (default: OUT_DIR/<suite>.csv)");
  return s;
}

CLI::App* add_ddp(CLI::App& app, DdpBenchOptions& o) {
  CLI::App* s = app.add_subcommand("ddp",
                                   "DDP steps/s with 1 and N ranks, and the share of communication hidden behind "
                                   "backward");
  s->add_option("--models", o.models, "models (mnist_cnn, mlp = 3x1024 MLP)")->delimiter(',');
  s->add_option("--ranks", o.ranks, "rank counts")->delimiter(',')->check(CLI::Range(1, 1024));
  s->add_option("--steps", o.steps, "timed steps")->check(CLI::Range(1, 1000000));
  s->add_option("--batch", o.batch, "samples per rank per step")->check(CLI::Range(1, 100000));
  s->add_option("--bucket-mb", o.bucket_mb, "DDP bucket cap in MiB")->check(CLI::Range(0.01, 10000.0));
  add_group_transports(s, o.transports);
  s->add_option("--csv", o.csv, "CSV output path (default: OUT_DIR/<suite>.csv)");
  return s;
}

CLI::App* add_env(CLI::App& app, EnvBenchOptions& o) {
  CLI::App* s = app.add_subcommand("env", "environment steps/s, one thread, random actions");
  s->add_option("--envs", o.envs, "environments (gymnasium:ID too)")->delimiter(',');
  s->add_option("--batch", o.batches,
                "envs stepped together per call, as an observer's env.per_observer (a VecEnv; "
                "gymnasium:ID envs share one Python child): each measured")
      ->delimiter(',')
      ->check(CLI::Range(1, 4096));
  s->add_option("--steps", o.steps, "timed env steps per row")->check(CLI::Range(1000LL, 1000000000000LL));
  s->add_option("--seconds", o.seconds, "or this many seconds per row, whichever comes first")
      ->check(CLI::Range(0.01, 1e6));
  s->add_option("--csv", o.csv, "CSV output path (default: OUT_DIR/<suite>.csv)");
  return s;
}

CLI::App* add_learner(CLI::App& app, LearnerBenchOptions& o) {
  CLI::App* s = app.add_subcommand("learner",
                                   "the actor-critic learners' own cost in this process (no acting timed): "
                                   "ms per update and per gradient step, split into forward, backward, "
                                   "optimizer and the rest, and us per env step learned");
  s->add_option("--configs", o.configs, "RL configs whose learner to measure (learner.algo ppo, appo or impala)")
      ->delimiter(',')
      ->capture_default_str();
  s->add_option("--updates", o.updates, "timed updates per config")->check(CLI::Range(1, 1000000));
  s->add_option("--warmup", o.warmup, "untimed updates first")->check(CLI::Range(0, 1000000));
  s->add_option("--set", o.overrides, "KEY=VALUE for every config (e.g. --set ppo.epochs=2)");
  s->add_option("--csv", o.csv, "CSV output path (default: OUT_DIR/<suite>.csv)");
  return s;
}

CLI::App* add_autograd(CLI::App& app, AutogradBenchOptions& o) {
  CLI::App* s = app.add_subcommand("autograd",
                                   "the distributed-autograd RNN tutorial (ps + trainer processes): forward, "
                                   "backward and step per iteration, the whole run, and a loop of contexts");
  s->add_option("--iterations", o.iterations, "training iterations")->check(CLI::Range(1, 10000000));
  s->add_option("--contexts", o.contexts, "then this many contexts in a loop, checking live counts and RSS (0: skip)")
      ->check(CLI::Range(0, 100000000));
  s->add_option("--csv", o.csv, "CSV output path (default: OUT_DIR/<suite>.csv)");
  return s;
}

CLI::App* add_ps(CLI::App& app, PsBenchOptions& o) {
  CLI::App* s = app.add_subcommand("ps",
                                   "the parameter server: sparse pull/push on 2 shards, idle server CPU, "
                                   "model-on-server samples/s per step policy, a straggler against quorum, "
                                   "the ResNet-50 batch-update round");
  s->add_option("--parts", o.parts, "which parts to run: sparse, model, straggler, resnet, restart")
      ->delimiter(',')
      ->check(CLI::IsMember({"sparse", "model", "straggler", "resnet", "restart"}));
  s->add_option("--rows", o.rows, "sparse: rows per pull and per push")->check(CLI::Range(1, 10000000));
  s->add_option("--iterations", o.iterations, "sparse: timed pull + push pairs")->check(CLI::Range(1, 10000000));
  s->add_option("--images", o.images, "model on server: Fashion-MNIST images per run (0: skip)")
      ->check(CLI::Range(0, 60000));
  s->add_option("--rounds", o.rounds, "straggler: rounds per trainer")->check(CLI::Range(5, 1000000));
  s->add_option("--resnet-rounds", o.resnet_rounds, "ResNet-50 batch-update rounds (0: skip)")
      ->check(CLI::Range(0, 100000));
  s->add_option("--configs", o.configs, "the directory of the ps_*.yaml configs");
  return s;
}

CLI::App* add_pipeline(CLI::App& app, PipelineBenchOptions& o) {
  CLI::App* s = app.add_subcommand("pipeline",
                                   "pipeline schedules' bubbles on sleeping stages against theory, peak "
                                   "activations, waiting CPU; the RPC tutorial's ResNet-50 pipeline by "
                                   "micro-batch size against one process");
  s->add_option("--stages", o.stages, "stage counts")->check(CLI::Range(2, 16));
  s->add_option("--microbatches", o.microbatches, "micro-batches per step")->check(CLI::Range(1, 1000));
  s->add_option("--f-ms", o.f_ms, "forward milliseconds per stage and micro-batch")->check(CLI::Range(0.1, 10000.0));
  s->add_option("--b-ms", o.b_ms, "backward milliseconds (I and W half each)")->check(CLI::Range(0.1, 10000.0));
  s->add_option("--resnet-sizes", o.resnet_sizes, "ResNet-50 micro-batch sizes (0: skip the tutorial)");
  s->add_option("--resnet-batches", o.resnet_batches, "ResNet-50 batches per setting")->check(CLI::Range(1, 1000));
  s->add_option("--configs", o.configs, "the directory of pipeline_resnet50.yaml");
  return s;
}

// Hidden subcommands: what each rank of the multi-process suites runs under distrl-launch.
struct WorkerArgs {
  std::string out, schedule, model;
  std::vector<std::int64_t> sizes;
  int microbatches = 0, chunks = 1, steps = 3, iterations = 0, contexts = 0, rows = 0, batch = 0;
  bool flat = false;
  double f_ms = 0, b_ms = 0, bucket_mb = 25;
};

void add_workers(CLI::App& app, WorkerArgs& w, std::vector<std::pair<CLI::App*, std::function<int()>>>& runs) {
  auto hidden = [&](const char* name, std::function<int()> run) {
    CLI::App* s = app.add_subcommand(name)->group("");
    s->add_option("--out", w.out)->required();
    runs.emplace_back(s, std::move(run));
    return s;
  };
  CLI::App* pl = hidden("pipeline-worker", [&w] {
    return run_pipeline_worker(w.out, w.schedule, w.microbatches, w.chunks, w.f_ms, w.b_ms, w.steps);
  });
  pl->add_option("--schedule", w.schedule)->required();
  pl->add_option("--microbatches", w.microbatches)->required();
  pl->add_option("--chunks", w.chunks)->required();
  pl->add_option("--f-ms", w.f_ms)->required();
  pl->add_option("--b-ms", w.b_ms)->required();
  pl->add_option("--steps", w.steps)->required();
  CLI::App* ps = hidden("ps-worker", [&w] { return run_ps_worker(w.out, w.rows, w.iterations); });
  ps->add_option("--rows", w.rows)->required();
  ps->add_option("--iterations", w.iterations)->required();
  CLI::App* ar = hidden("allreduce-worker", [&w] { return run_allreduce_worker(w.out, w.sizes, w.flat); });
  ar->add_option("sizes", w.sizes)->required();
  ar->add_flag("--flat", w.flat, "one flat ring over every rank, never hierarchical across hosts");
  CLI::App* ag = hidden("autograd-worker", [&w] { return run_autograd_worker(w.out, w.iterations, w.contexts); });
  ag->add_option("--iterations", w.iterations)->required();
  ag->add_option("--contexts", w.contexts)->required();
  CLI::App* dd = hidden("ddp-worker", [&w] { return run_ddp_worker(w.out, w.model, w.steps, w.batch, w.bucket_mb); });
  dd->add_option("model", w.model)->required();
  dd->add_option("steps", w.steps)->required();
  dd->add_option("batch", w.batch)->required();
  dd->add_option("bucket_mb", w.bucket_mb)->required();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"distrl-bench: measure distrl on this machine. Each suite prints a table and writes a CSV."};
  app.require_subcommand(1);
  RpcBenchOptions rpc;
  RlBenchOptions rl;
  SoakBenchOptions soak;
  AllreduceBenchOptions allreduce;
  DdpBenchOptions ddp;
  EnvBenchOptions env;
  AutogradBenchOptions autograd;
  LearnerBenchOptions learner;
  PsBenchOptions ps;
  PipelineBenchOptions pipeline;
  WorkerArgs workers;
  std::vector<std::pair<CLI::App*, std::function<int()>>> runs{
      {add_rpc(app, rpc), [&] { return run_rpc_bench(rpc); }},
      {add_rl(app, rl), [&] { return run_rl_bench(rl); }},
      {add_soak(app, soak), [&] { return run_soak_bench(soak); }},
      {add_allreduce(app, allreduce), [&] { return run_allreduce_bench(allreduce); }},
      {add_ddp(app, ddp), [&] { return run_ddp_bench(ddp); }},
      {add_env(app, env), [&] { return run_env_bench(env); }},
      {add_autograd(app, autograd), [&] { return run_autograd_bench(autograd); }},
      {add_learner(app, learner), [&] { return run_learner_bench(learner); }},
      {add_ps(app, ps), [&] { return run_ps_bench(ps); }},
      {add_pipeline(app, pipeline), [&] { return run_pipeline_bench(pipeline); }},
  };
  add_workers(app, workers, runs);
  std::string out_dir = "runs/bench";
  app.add_option("--out-dir", out_dir,
                 "where every suite writes (OUT_DIR/<suite>.csv and .png; ps, pipeline and soak: OUT_DIR/<suite>/), "
                 "before or after the suite's name")
      ->capture_default_str();
  for (CLI::App* suite : app.get_subcommands([](CLI::App*) { return true; }))
    suite->fallthrough();  // --out-dir and --transport after the suite's name too
  std::string transport;
  app.add_option("--transport", transport,
                 "what every process a suite starts uses (its DISTRL_TRANSPORT): auto (shared memory on one host), "
                 "shm, zmq, tcp, ipc. Before the suite's name: distrl-bench --transport zmq rl. rpc, allreduce and "
                 "ddp measure several side by side instead (their --transports)")
      ->check(CLI::IsMember({"auto", "shm", "zmq", "tcp", "ipc"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  const auto in_out = [&](std::string& path, const std::string& name) {
    if (path.empty()) path = out_dir + "/" + name;
  };
  in_out(rpc.csv, "rpc.csv");
  in_out(rl.csv, "rl.csv");
  if (rl.png.empty()) rl.png = std::filesystem::path(rl.csv).replace_extension(".png").string();
  if (rl.png == "none") rl.png.clear();
  in_out(soak.out_dir, "soak");
  in_out(allreduce.csv, "allreduce.csv");
  in_out(ddp.csv, "ddp.csv");
  in_out(env.csv, "env.csv");
  in_out(autograd.csv, "autograd.csv");
  in_out(learner.csv, "learner.csv");
  in_out(ps.out_dir, "ps");
  in_out(pipeline.out_dir, "pipeline");
  if (!transport.empty()) {
    ::setenv("DISTRL_TRANSPORT", transport.c_str(), 1);
    std::cout << "transport: " << transport << " (DISTRL_TRANSPORT for every process started)\n";
  }
  return distrl::guarded_main("distrl-bench", [&] {
    for (auto& [command, run] : runs)
      if (command->parsed()) return run();
    return 0;  // unreachable: require_subcommand(1)
  });
}
