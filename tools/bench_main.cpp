// distrl-bench: benchmarks as tools (speed is measured here, never asserted in tests).
#include <CLI/CLI.hpp>

#include <iostream>

#include "common/main_guard.h"
#include "tools/bench.h"

int main(int argc, char** argv) {
  CLI::App app{"distrl-bench: measure distrl on this machine. Each suite prints a table and writes a CSV."};
  app.require_subcommand(1);
  distrl::tools::RpcBenchOptions rpc;
  auto* r = app.add_subcommand("rpc", "RPC round trip (rpc_sync), throughput (rpc_async in flight), 4 MiB bandwidth");
  r->add_option("--calls", rpc.calls, "timed rpc_sync calls")->check(CLI::Range(10, 10000000));
  r->add_option("--throughput-calls", rpc.throughput_calls, "rpc_async calls in the throughput run")->check(CLI::Range(10, 100000000));
  r->add_option("--inflight", rpc.inflight, "rpc_async calls kept in flight")->check(CLI::Range(1, 100000));
  r->add_option("--big-mib", rpc.big_mib, "size of the bandwidth tensor in MiB")->check(CLI::Range(1, 1024));
  r->add_option("--transports", rpc.transports, "transports to measure")->check(CLI::IsMember({"ipc", "tcp"}))->delimiter(',');
  r->add_option("--cpus", rpc.cpus, "any: let the OS place both processes; same: pin both to CPU 0; split: one per CPU")
      ->check(CLI::IsMember({"any", "same", "split"}));
  r->add_option("--spin-us", rpc.spin_us, "busy-poll time before sleeping, for the I/O loop and waiting futures (-1: defaults)");
  r->add_option("--security", rpc.security, "off, curve or both (off,curve): ZeroMQ CURVE on the RPC sockets")
      ->check(CLI::IsMember({"off", "curve"}))
      ->delimiter(',');
  r->add_option("--csv", rpc.csv, "CSV output path");
  distrl::tools::RlBenchOptions rl;
  auto* l = app.add_subcommand("rl", "agent + observers as processes: batched vs unbatched action serving (the PyTorch "
                                     "batched-RPC tutorial's experiment)");
  l->add_option("--observers", rl.observers, "observer counts to run")->delimiter(',')->check(CLI::Range(1, 1024));
  l->add_option("--episodes", rl.episodes, "rounds per run (each observer runs one episode per round)")
      ->check(CLI::Range(1, 1000000));
  l->add_option("--steps", rl.steps, "steps per episode")->check(CLI::Range(1, 1000000));
  l->add_option("--envs-per-observer", rl.envs_per_observer, "envs each observer steps together")
      ->check(CLI::Range(1, 4096));
  l->add_option("--config", rl.config, "base RL configuration");
  l->add_option("--models", rl.models,
                "policy sizes to sweep: tutorial (the tutorial's net) or mlp:WxW.. (hidden widths), e.g. "
                "--models tutorial mlp:256x256 mlp:1024x1024")
      ->delimiter(',');
  l->add_option("--set", rl.overrides, "extra KEY=VALUE for every run (repeatable), e.g. --set learner.learn=false");
  l->add_option("--csv", rl.csv, "CSV output path");
  l->add_option("--png", rl.png, "plot output path (needs gnuplot; empty: no plot)");
  distrl::tools::SoakBenchOptions so;
  auto* sk = app.add_subcommand("soak", "the RL run left going in each serving mode side by side (agent + observers "
                                        "as processes): RSS, open fds and threads sampled; growth after the warm-up "
                                        "reported");
  sk->add_option("--minutes", so.minutes, "how long")->check(CLI::Range(0.1, 100000.0));
  sk->add_option("--warmup-minutes", so.warmup_minutes, "samples before this are not compared")
      ->check(CLI::Range(0.0, 100000.0));
  sk->add_option("--interval-s", so.interval_s, "seconds between samples")->check(CLI::Range(0.5, 3600.0));
  sk->add_option("--observers", so.observers, "observers per run")->check(CLI::Range(1, 1024));
  sk->add_option("--modes", so.modes, "serving modes, run side by side")
      ->check(CLI::IsMember({"batched", "unbatched"}))
      ->delimiter(',');
  sk->add_option("--config", so.config, "base RL configuration");
  sk->add_option("--set", so.overrides, "extra KEY=VALUE for every run (repeatable)");
  sk->add_option("--out-dir", so.out_dir, "where soak.csv, soak.png and the runs' outputs go");
  distrl::tools::AllreduceBenchOptions ar;
  auto* a = app.add_subcommand("allreduce", "all_reduce time, algorithm and bus bandwidth by size and rank count");
  a->add_option("--ranks", ar.ranks, "rank counts")->delimiter(',')->check(CLI::Range(2, 1024));
  a->add_option("--sizes", ar.sizes, "sizes in bytes (multiples of 4)")->delimiter(',')->check(CLI::Range(4, 1 << 30));
  a->add_option("--security", ar.security, "off, curve or both (off,curve): ZeroMQ CURVE on the group's sockets")
      ->check(CLI::IsMember({"off", "curve"}))
      ->delimiter(',');
  a->add_option("--csv", ar.csv, "CSV output path");
  distrl::tools::DdpBenchOptions dd;
  auto* d = app.add_subcommand("ddp", "DDP steps/s with 1 and N ranks, and the share of communication hidden behind "
                                      "backward");
  d->add_option("--models", dd.models, "models (mnist_cnn, mlp = 3x1024 MLP)")->delimiter(',');
  d->add_option("--ranks", dd.ranks, "rank counts")->delimiter(',')->check(CLI::Range(1, 1024));
  d->add_option("--steps", dd.steps, "timed steps")->check(CLI::Range(1, 1000000));
  d->add_option("--batch", dd.batch, "samples per rank per step")->check(CLI::Range(1, 100000));
  d->add_option("--bucket-mb", dd.bucket_mb, "DDP bucket cap in MiB")->check(CLI::Range(0.01, 10000.0));
  d->add_option("--csv", dd.csv, "CSV output path");
  distrl::tools::EnvBenchOptions ev;
  auto* e = app.add_subcommand("env", "environment steps/s, one thread, random actions");
  e->add_option("--envs", ev.envs, "environments")->delimiter(',');
  e->add_option("--steps", ev.steps, "timed steps per environment")->check(CLI::Range(1000LL, 1000000000000LL));
  e->add_option("--csv", ev.csv, "CSV output path");
  distrl::tools::AutogradBenchOptions ag;
  auto* g = app.add_subcommand("autograd", "the distributed-autograd RNN tutorial (ps + trainer processes): forward, "
                                           "backward and step per iteration, the whole run, and a loop of contexts");
  g->add_option("--iterations", ag.iterations, "training iterations")->check(CLI::Range(1, 10000000));
  g->add_option("--contexts", ag.contexts, "then this many contexts in a loop, checking live counts and RSS (0: skip)")
      ->check(CLI::Range(0, 100000000));
  g->add_option("--csv", ag.csv, "CSV output path");
  int ag_iterations = 0, ag_contexts = 0;
  distrl::tools::PsBenchOptions pso;
  auto* p = app.add_subcommand("ps", "the parameter server: sparse pull/push on 2 shards, idle server CPU, "
                                     "model-on-server samples/s per step policy, a straggler against quorum, "
                                     "the ResNet-50 batch-update round");
  p->add_option("--rows", pso.rows, "sparse: rows per pull and per push")->check(CLI::Range(1, 10000000));
  p->add_option("--iterations", pso.iterations, "sparse: timed pull + push pairs")->check(CLI::Range(1, 10000000));
  p->add_option("--images", pso.images, "model on server: Fashion-MNIST images per run (0: skip)")
      ->check(CLI::Range(0, 60000));
  p->add_option("--rounds", pso.rounds, "straggler: rounds per trainer")->check(CLI::Range(5, 1000000));
  p->add_option("--resnet-rounds", pso.resnet_rounds, "ResNet-50 batch-update rounds (0: skip)")
      ->check(CLI::Range(0, 100000));
  p->add_option("--configs", pso.configs, "the directory of the ps_*.yaml configs");
  p->add_option("--out-dir", pso.out_dir, "where ps.csv and every run's outputs go");
  distrl::tools::PipelineBenchOptions plo;
  auto* pl = app.add_subcommand("pipeline", "pipeline schedules' bubbles on sleeping stages against theory, peak "
                                            "activations, waiting CPU; the RPC tutorial's ResNet-50 pipeline by "
                                            "micro-batch size against one process");
  pl->add_option("--stages", plo.stages, "stage counts")->check(CLI::Range(2, 16));
  pl->add_option("--microbatches", plo.microbatches, "micro-batches per step")->check(CLI::Range(1, 1000));
  pl->add_option("--f-ms", plo.f_ms, "forward milliseconds per stage and micro-batch")->check(CLI::Range(0.1, 10000.0));
  pl->add_option("--b-ms", plo.b_ms, "backward milliseconds (I and W half each)")->check(CLI::Range(0.1, 10000.0));
  pl->add_option("--resnet-sizes", plo.resnet_sizes, "ResNet-50 micro-batch sizes (0: skip the tutorial)");
  pl->add_option("--resnet-batches", plo.resnet_batches, "ResNet-50 batches per setting")->check(CLI::Range(1, 1000));
  pl->add_option("--configs", plo.configs, "the directory of pipeline_resnet50.yaml");
  pl->add_option("--out-dir", plo.out_dir, "where bubble.csv, resnet/ and one_process.csv go");
  std::string pl_schedule;
  int pl_mb = 0, pl_chunks = 1, pl_steps = 3;
  double pl_f = 0, pl_b = 0;
  auto* plw = app.add_subcommand("pipeline-worker")->group("");
  plw->add_option("--schedule", pl_schedule)->required();
  plw->add_option("--microbatches", pl_mb)->required();
  plw->add_option("--chunks", pl_chunks)->required();
  plw->add_option("--f-ms", pl_f)->required();
  plw->add_option("--b-ms", pl_b)->required();
  plw->add_option("--steps", pl_steps)->required();
  int ps_rows = 0, ps_iterations = 0;
  auto* pw = app.add_subcommand("ps-worker")->group("");
  pw->add_option("--rows", ps_rows)->required();
  pw->add_option("--iterations", ps_iterations)->required();
  // Hidden: what each rank of the two suites above runs.
  std::string out, model;
  std::vector<std::int64_t> sizes;
  int steps = 0, batch = 0;
  pw->add_option("--out", out)->required();
  plw->add_option("--out", out)->required();
  auto* aw = app.add_subcommand("allreduce-worker")->group("");
  aw->add_option("--out", out)->required();
  aw->add_option("sizes", sizes)->required();
  auto* gw = app.add_subcommand("autograd-worker")->group("");
  gw->add_option("--out", out)->required();
  gw->add_option("--iterations", ag_iterations)->required();
  gw->add_option("--contexts", ag_contexts)->required();
  auto* dw = app.add_subcommand("ddp-worker")->group("");
  dw->add_option("--out", out)->required();
  dw->add_option("model", model)->required();
  dw->add_option("steps", steps)->required();
  dw->add_option("batch", batch)->required();
  double bucket_mb = 25;
  dw->add_option("bucket_mb", bucket_mb)->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return distrl::guarded_main("distrl-bench", [&] {
    if (r->parsed()) return distrl::tools::run_rpc_bench(rpc);
    if (a->parsed()) return distrl::tools::run_allreduce_bench(ar);
    if (e->parsed()) return distrl::tools::run_env_bench(ev);
    if (d->parsed()) return distrl::tools::run_ddp_bench(dd);
    if (aw->parsed()) return distrl::tools::run_allreduce_worker(out, sizes);
    if (g->parsed()) return distrl::tools::run_autograd_bench(ag);
    if (gw->parsed()) return distrl::tools::run_autograd_worker(out, ag_iterations, ag_contexts);
    if (p->parsed()) return distrl::tools::run_ps_bench(pso);
    if (sk->parsed()) return distrl::tools::run_soak_bench(so);
    if (pl->parsed()) return distrl::tools::run_pipeline_bench(plo);
    if (plw->parsed()) return distrl::tools::run_pipeline_worker(out, pl_schedule, pl_mb, pl_chunks, pl_f, pl_b, pl_steps);
    if (pw->parsed()) return distrl::tools::run_ps_worker(out, ps_rows, ps_iterations);
    if (dw->parsed()) return distrl::tools::run_ddp_worker(out, model, steps, batch, bucket_mb);
    return distrl::tools::run_rl_bench(rl);
  });
}
