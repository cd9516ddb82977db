// distrl-bench pipeline: the schedules' bubbles on stages whose forward and backward take fixed
// times (sleeps, so 2-8 stages fit on 2 cores) against theory, peak activations and the CPU a
// waiting stage burns; then the RPC tutorial's ResNet-50 pipeline at full size by micro-batch
// size next to the same model in one process at 1 and 2 threads.
#include <sys/resource.h>

#include <torch/torch.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <thread>

#include "common/error.h"
#include "models/resnet.h"
#include "common/malloc_tuning.h"
#include "tools/bench.h"
#include "tools/config_launch.h"
#include "training/pipeline/stage.h"
#include "transport/collectives/process_group.h"

namespace distrl::tools {
namespace {

namespace pl = training::pipeline;
using Clock = std::chrono::steady_clock;

void sleep_ms(double ms) { std::this_thread::sleep_for(std::chrono::microseconds(static_cast<long long>(ms * 1000))); }

// y = x * w, taking f ms forward, i ms for the input gradient and w ms for the weight gradient,
// each only when the engine asks for it (so I and W of a split backward cost what they should).
struct SleepFn : torch::autograd::Function<SleepFn> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w, double f,
                            double i, double wt) {
    ctx->save_for_backward({x, w});
    ctx->saved_data["i"] = i;
    ctx->saved_data["w"] = wt;
    sleep_ms(f);
    return x * w;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list g) {
    const auto saved = ctx->get_saved_variables();
    at::Tensor gx, gw;
    if (ctx->needs_input_grad(0)) {
      sleep_ms(ctx->saved_data["i"].toDouble());
      gx = g[0] * saved[1];
    }
    if (ctx->needs_input_grad(1)) {
      sleep_ms(ctx->saved_data["w"].toDouble());
      gw = (g[0] * saved[0]).sum().reshape_as(saved[1]);
    }
    return {gx, gw, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

class SleepLayerImpl : public torch::nn::Module {
 public:
  SleepLayerImpl(double f, double i, double w) : f_(f), i_(i), w_(w) {
    weight_ = register_parameter("weight", torch::ones({1}));
  }
  at::Tensor forward(const at::Tensor& x) { return SleepFn::apply(x, weight_, f_, i_, w_); }

 private:
  double f_, i_, w_;
  at::Tensor weight_;
};
TORCH_MODULE(SleepLayer);

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

}  // namespace

int run_pipeline_worker(const std::string& out, const std::string& schedule, int microbatches, int chunks, double f_ms,
                        double b_ms, int steps) {
  transport::ProcessGroupOptions o;
  o.timeout = std::chrono::seconds(120);
  auto pg = transport::init_process_group(o);
  const int p = pg->size();
  const pl::Schedule s = pl::make_schedule(schedule, p, microbatches, chunks);
  std::vector<torch::nn::Sequential> mine;
  for (int c = 0; c < chunks; ++c) {  // the model's cost is fixed: more pieces, each cheaper
    torch::nn::Sequential piece;
    piece->push_back(SleepLayer(f_ms / chunks, b_ms / 2 / chunks, b_ms / 2 / chunks));
    mine.push_back(piece);
  }
  pl::PipelineStage stage(pg, mine, s);
  const at::Tensor x = torch::randn({microbatches * 2, 16}).requires_grad_(true),
                   y = torch::zeros({microbatches * 2, 16});
  auto mse = [](const at::Tensor& a, const at::Tensor& b) { return torch::mse_loss(a, b); };
  pl::StepStats st;
  double cpu = 0, wall = 0;
  for (int i = 0; i < steps; ++i) {
    pg->barrier();
    const double c0 = cpu_seconds();
    const auto t0 = Clock::now();
    st = stage.step(stage.holds_first() ? x : at::Tensor(), stage.holds_last() ? y : at::Tensor(), mse);
    if (i > 0) {  // the first step warms up
      cpu += cpu_seconds() - c0;
      wall += std::chrono::duration<double>(Clock::now() - t0).count();
    }
  }
  const auto all = pl::gather_timelines(*pg, stage.timeline()).stages;
  at::Tensor mine_stats =
      torch::tensor({static_cast<double>(st.peak_activations), wall > 0 ? cpu / wall : 0.0}, torch::kDouble);
  std::vector<at::Tensor> gathered;
  for (int r = 0; r < p; ++r) gathered.push_back(torch::zeros({2}, torch::kDouble));
  pg->all_gather(gathered, mine_stats);
  if (pg->rank() != 0) return 0;
  const auto bubbles = pl::measured_bubbles(all);
  double measured = 0, plan = 0, peak = 0, cpu_share = 0, idle_ms = 0;
  const auto [lo, hi] = pl::timeline_span(all);
  const double span_ms = (hi - lo) / 1000;
  for (int r = 0; r < p; ++r) {
    measured += bubbles[r] / p;
    plan += stage.plan().bubble[r] / p;
    idle_ms += bubbles[r] * span_ms / p;
    peak = std::max(peak, gathered[r][0].item<double>());
    cpu_share = std::max(cpu_share, gathered[r][1].item<double>());
  }
  std::ofstream f(out);
  f << schedule << "," << p << "," << chunks << "," << microbatches << "," << measured << "," << plan << ","
    << pl::theory_bubble(p, microbatches) << "," << idle_ms << "," << span_ms << "," << peak << ","
    << *std::max_element(stage.plan().peak_activations.begin(), stage.plan().peak_activations.end()) << "," << cpu_share
    << "\n";
  return 0;
}

int run_pipeline_bench(const PipelineBenchOptions& options) {
  PipelineBenchOptions o = options;
  o.configs = find_config(o.configs, "--configs");
  std::filesystem::create_directories(o.out_dir);
  std::cout << "distrl-bench pipeline on " << machine_description() << "\n\n";
  std::ofstream csv(o.out_dir + "/bubble.csv");
  csv << "schedule,stages,chunks,microbatches,measured_bubble,plan_bubble,theory_bubble,idle_ms,step_ms,peak_"
         "activations,"
         "plan_peak,max_waiting_cpu_share\n";
  std::cout << "Bubble: forward " << o.f_ms << " ms, backward " << o.b_ms
            << " ms (I = W = half) per stage and micro-batch, " << o.microbatches
            << " micro-batches; mean over stages of one step\n"
            << "schedule      stages  measured  plan   (p-1)/(m+p-1)  idle ms/stage  step ms  peak act.  waiting CPU\n";
  for (int p : o.stages)
    for (const std::string& sched :
         {std::string("gpipe"), std::string("1f1b"), std::string("interleaved"), std::string("zb-h1")}) {
      const int chunks = sched == "interleaved" ? 2 : 1;
      if (sched == "interleaved" && o.microbatches % p != 0) continue;
      std::ostringstream f, b;
      f << o.f_ms;
      b << o.b_ms;
      const auto lines = run_workers(p, "pipeline-worker",
                                     {"--schedule", sched, "--microbatches", std::to_string(o.microbatches), "--chunks",
                                      std::to_string(chunks), "--f-ms", f.str(), "--b-ms", b.str(), "--steps", "3"});
      const auto v = fields(lines[0], 12, "pipeline-worker");
      csv << lines[0] << "\n";
      std::cout << std::left << std::setw(13) << (chunks > 1 ? sched + "x2" : sched) << std::right << std::setw(7) << p
                << std::fixed << std::setprecision(3) << std::setw(10) << std::stod(v[4]) << std::setw(7)
                << std::stod(v[5]) << std::setw(15) << std::stod(v[6]) << std::setprecision(1) << std::setw(15)
                << std::stod(v[7]) << std::setw(9) << std::stod(v[8]) << std::setprecision(0) << std::setw(11)
                << std::stod(v[9]) << std::setprecision(2) << std::setw(11) << 100 * std::stod(v[11]) << "%"
                << std::defaultfloat << std::endl;
    }
  if (o.resnet_sizes.empty() || o.resnet_sizes == std::vector<int>{0}) return 0;
  // The tutorial at full size through distrl-launch, then one process.
  std::string sizes = "[";
  for (std::size_t i = 0; i < o.resnet_sizes.size(); ++i) {  // piecewise: GCC 12 -Wstringop-overflow, C++20
    if (i) sizes += ',';
    sizes += std::to_string(o.resnet_sizes[i]);
  }
  sizes += "]";
  const std::string rdir = o.out_dir + "/resnet";
  std::cout << "\nThe RPC tutorial's ResNet-50 pipeline (batch 120 @ 128x128, 1000 classes, " << o.resnet_batches
            << " batches per setting; master + 2 workers):" << std::endl;
  run_or_show_log(
      {self_dir() + "/distrl-launch", "--force", "--config", o.configs + "/pipeline_resnet50.yaml",
       "pipeline.microbatch_size=" + sizes, "train.batches=" + std::to_string(o.resnet_batches), "run.out_dir=" + rdir},
      o.out_dir + "/resnet.log", "the ResNet-50 pipeline");
  double best = 1e300;
  for (const auto& row : read_csv(rdir + "/sweep.csv")) {
    const double s = std::stod(row.at("seconds_per_batch"));
    best = std::min(best, s);
    std::cout << "  micro-batch size " << std::setw(4) << row.at("microbatch_size") << " (" << std::setw(3)
              << row.at("microbatches") << " micro-batches): " << std::fixed << std::setprecision(3) << s
              << " s per batch" << std::defaultfloat << std::endl;
  }
  keep_large_blocks_on_heap();  // as distrl-pipeline's processes
  std::ofstream one(o.out_dir + "/one_process.csv");
  one << "threads,seconds_per_batch\n";
  for (int threads : {1, 2}) {
    torch::set_num_threads(threads);
    torch::manual_seed(1);
    models::ResNet50 net(1000);
    torch::optim::SGD opt(net.parameters(), 0.05);
    double total = 0;
    for (int b = -1; b < o.resnet_batches; ++b) {  // b = -1: an untimed warm-up batch, as the sweep's
      const at::Tensor x = torch::randn({120, 3, 128, 128});
      const at::Tensor y = torch::zeros({120, 1000}).scatter_(1, torch::randint(1000, {120, 1}, torch::kLong), 1);
      const auto t0 = Clock::now();
      opt.zero_grad();
      torch::mse_loss(net.forward(x), y).backward();
      opt.step();
      if (b >= 0) total += std::chrono::duration<double>(Clock::now() - t0).count();
    }
    one << threads << "," << total / o.resnet_batches << "\n";
    std::cout << "  one process, " << threads << " thread(s): " << std::fixed << std::setprecision(3)
              << total / o.resnet_batches << " s per batch (best pipeline setting: " << std::setprecision(2)
              << (total / o.resnet_batches) / best << "x)" << std::defaultfloat << std::endl;
  }
  std::cout << "\nwrote " << o.out_dir << "/bubble.csv, resnet/sweep.csv, one_process.csv" << std::endl;
  return 0;
}

}  // namespace distrl::tools
