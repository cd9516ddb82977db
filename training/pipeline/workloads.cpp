#include "training/pipeline/workloads.h"

#include <malloc.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "common/output_file.h"
#include "common/run_dir.h"
#include "common/error.h"
#include "common/malloc_tuning.h"
#include "models/checkpoint.h"
#include "models/torch_threads.h"
#include "training/data.h"
#include "training/pipeline/stage.h"
#include "training/run_loop.h"
#include "training/workload.h"
#include "transport/collectives/process_group.h"

namespace distrl::training::pipeline {

namespace nn = torch::nn;

void bind(Settings& s, PipelineConfig& c) {
  s.bind("preset", &c.preset,
         "resnet: full (the tutorial's batch 120 of 128x128 images) or small (24 of 64x64, for tests)")
      .choices({"full", "small"});
  s.bind("roles.stages", &c.stages, "fashion-mnist: pipeline stages, one process each (resnet: 2 workers + the master)")
      .range(1, 8);
  bind_run(s, c, "metrics.csv, timeline.json/png, sweep.csv, checkpoints/ and config.yaml");
  s.bind("model.classes", &c.classes, "output classes (the tutorial's ResNet-50: 1000)").range(1, 100000);
  s.bind("model.image_size", &c.image_size, "resnet: side of the random square images").range(32, 4096);
  bind_data(s, c, "fashion-mnist: an MNIST-layout directory");
  s.bind("train.epochs", &c.epochs, "fashion-mnist: passes over the training images").range(1, 1000000);
  s.bind("train.batch_size", &c.batch_size, "rows per step, split into micro-batches").range(1, 1000000);
  s.bind("train.test_batch_size", &c.test_batch_size, "rows per evaluation forward").range(1, 1000000);
  s.bind("train.batches", &c.batches, "resnet: batches timed per micro-batch size (the tutorial's num_batches)")
      .range(1, 1000000);
  s.bind("train.warmup", &c.warmup,
         "resnet: untimed batches before the sweep (the first batches of a process pay for its memory: page "
         "faults, allocator growth)")
      .range(0, 1000);
  s.bind("pipeline.schedule", &c.schedule, "gpipe | 1f1b | interleaved | zb-h1, or a schedule file (docs/pipeline.md)");
  s.bind("pipeline.microbatches", &c.microbatches, "fashion-mnist: micro-batches per batch").range(1, 100000);
  s.bind("pipeline.chunks", &c.chunks, "model pieces per stage (interleaved: 2 or more)").range(1, 64);
  s.bind("pipeline.recompute", &c.recompute,
         "keep only each micro-batch's input and run the forward again at backward");
  s.bind("pipeline.cuts", &c.cuts,
         "comma-separated child names where pieces start (conv2,fc1); empty: balanced by measured per-layer time");
  s.bind("pipeline.max_activations", &c.max_activations,
         "refuse a schedule that makes a stage hold more micro-batches' activations (0: no bound)")
      .range(0, 1000000);
  s.bind("pipeline.timeline_step", &c.timeline_step, "which step of the first epoch writes timeline.json/png")
      .range(1, 1000000000);
  s.bind("pipeline.microbatch_size", &c.microbatch_sizes,
         "resnet: rows per micro-batch (the tutorial's split_size); a list runs the sweep")
      .range(1, 100000);
  s.bind("pipeline.devices", &c.devices,
         "model_parallel: the two shards' devices, 'cuda:0,cuda:1' or 'cpu,cpu'; auto: two GPUs when there are, "
         "else the CPU twice");
  s.bind("pipeline.check_one_process", &c.check_one_process,
         "resnet: the master also runs the same micro-batches through a local copy of the model and fails unless "
         "losses and the parameters after the first step agree (1e-4)");
  s.bind("optimizer.lr", &c.lr, "SGD learning rate").range(1e-12, 100);
  s.bind("optimizer.momentum", &c.momentum, "SGD momentum (fashion-mnist)").range(0, 1);
  bind_dist(s, c);
}

std::pair<torch::Device, torch::Device> model_parallel_devices(const std::string& spec) {
  if (spec == "auto") {
    const auto gpus = torch::cuda::device_count();
    if (gpus >= 2) return {torch::Device(torch::kCUDA, 0), torch::Device(torch::kCUDA, 1)};
    if (gpus == 1) return {torch::Device(torch::kCUDA, 0), torch::Device(torch::kCUDA, 0)};
    return {torch::Device(torch::kCPU), torch::Device(torch::kCPU)};
  }
  const auto comma = spec.find(',');
  if (comma == std::string::npos)
    throw ConfigError("pipeline.devices: '" + spec + "' is not two devices (write cuda:0,cuda:1 or cpu,cpu or auto)");
  try {
    return {torch::Device(spec.substr(0, comma)), torch::Device(spec.substr(comma + 1))};
  } catch (const std::exception& e) {
    throw ConfigError("pipeline.devices: '" + spec +
                      "' is not two devices (write cuda:0,cuda:1 or cpu,cpu or auto): " + e.what());
  }
}

PipelineConfig with_preset(PipelineConfig c) {
  if (c.preset == "small") {
    c.batch_size = 24;
    c.image_size = 64;
  }
  return c;
}

namespace {

void check_microbatch_sizes(const PipelineConfig& c) {
  const int batch = with_preset(c).batch_size;
  for (int s : c.microbatch_sizes)
    if (s > batch)
      throw ConfigError("pipeline.microbatch_size: " + std::to_string(s) + " is larger than the batch (" +
                        std::to_string(batch) + ")");
}

std::vector<std::string> split_names(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string w; std::getline(ss, w, ',');)
    if (!w.empty()) out.push_back(w);
  return out;
}

// The pieces `cuts` make of model; ConfigError unless there are `pieces` of them.
std::vector<nn::Sequential> cut_model(nn::Sequential model, const std::vector<std::string>& cuts, int pieces) {
  auto out = split_sequential(model, cuts);
  if (static_cast<int>(out.size()) != pieces)
    throw ConfigError("pipeline.cuts: " + std::to_string(cuts.size()) + " cuts make " + std::to_string(out.size()) +
                      " pieces; roles.stages x pipeline.chunks needs " + std::to_string(pieces));
  return out;
}

void check_fashion_mnist(const PipelineConfig& c) {
  if (this_run().check_only) check_idx_dir(c.data_path);
  if (c.chunks > 1 && c.schedule != "interleaved" && c.schedule.find('/') == std::string::npos)
    throw ConfigError("pipeline.chunks: " + std::to_string(c.chunks) +
                      " pieces per stage need pipeline.schedule: interleaved");
  if (c.microbatches > c.batch_size)
    throw ConfigError("pipeline.microbatches: " + std::to_string(c.microbatches) + " is more than train.batch_size (" +
                      std::to_string(c.batch_size) + ")");
  if (c.stages * c.chunks > 9)
    throw ConfigError("roles.stages x pipeline.chunks: the CNN has 9 layers, so at most 9 pieces, not " +
                      std::to_string(c.stages * c.chunks));
  try {
    microbatch_sizes(c.batch_size, c.microbatches);  // throws ArgumentError with the fix
    schedule_for(c);                                 // built and verified here too, so --check-config refuses a bad one
    if (!c.cuts.empty()) cut_model(make_fashion_cnn(c.classes), split_names(c.cuts), c.stages * c.chunks);
  } catch (const ArgumentError& e) {
    throw ConfigError(e.what());
  } catch (const ScheduleError& e) {
    throw ConfigError(std::string("pipeline.schedule: ") + e.what());
  }
}

void check_resnet(const PipelineConfig& c) { check_microbatch_sizes(c); }

void check_model_parallel(const PipelineConfig& c) {
  const auto [d0, d1] = model_parallel_devices(c.devices);  // refuses a bad spelling
  for (const auto& d : {d0, d1})
    if (d.is_cuda() && d.index() >= static_cast<int>(torch::cuda::device_count()))
      throw ConfigError("pipeline.devices: " + d.str() + " is not here (" +
                        std::to_string(torch::cuda::device_count()) + " GPUs)");
  check_microbatch_sizes(c);
}

}  // namespace

nn::Sequential make_fashion_cnn(int classes) {
  nn::Sequential s;
  s->push_back("conv1", nn::Conv2d(nn::Conv2dOptions(1, 32, 3)));
  s->push_back("relu1", nn::ReLU());
  s->push_back("conv2", nn::Conv2d(nn::Conv2dOptions(32, 64, 3)));
  s->push_back("relu2", nn::ReLU());
  s->push_back("pool", nn::MaxPool2d(nn::MaxPool2dOptions(2)));
  s->push_back("flatten", nn::Flatten());
  s->push_back("fc1", nn::Linear(9216, 128));
  s->push_back("relu3", nn::ReLU());
  s->push_back("fc2", nn::Linear(128, classes));
  return s;
}

Schedule schedule_for(const PipelineConfig& c) {
  const bool file = c.schedule.find('/') != std::string::npos || std::filesystem::exists(c.schedule);
  Schedule s = file ? load_schedule_file(c.schedule) : make_schedule(c.schedule, c.stages, c.microbatches, c.chunks);
  if (s.stages != c.stages || s.chunks != c.chunks)
    throw ConfigError("pipeline.schedule " + c.schedule + ": written for " + std::to_string(s.stages) + " stages x " +
                      std::to_string(s.chunks) + " chunks, the run has roles.stages " + std::to_string(c.stages) +
                      " x pipeline.chunks " + std::to_string(c.chunks));
  if (s.microbatches != c.microbatches)
    throw ConfigError("pipeline.schedule " + c.schedule + ": written for " + std::to_string(s.microbatches) +
                      " micro-batches, pipeline.microbatches is " + std::to_string(c.microbatches));
  VerifyOptions vo;
  vo.max_activations = c.max_activations;
  verify(s, vo);
  return s;
}

namespace {

at::Tensor cross_entropy(const at::Tensor& out, const at::Tensor& y) {
  return torch::nn::functional::cross_entropy(out, y);
}

void write_timeline(const PipelineConfig& c, transport::ProcessGroup& pg, const PipelineStage& stage) {
  const auto gathered = gather_timelines(pg, stage.timeline());
  if (pg.rank() != 0) return;
  const auto& all = gathered.stages;
  write_chrome_trace(stage.schedule(), all, c.out_dir + "/timeline.json");
  plot_timeline(all, c.out_dir + "/timeline.csv", c.out_dir + "/timeline.png");
  const auto measured = measured_bubbles(all);
  std::cout << "bubble of step " << c.timeline_step << " (" << stage.schedule().name << ", " << c.stages << " stages, "
            << c.microbatches << " micro-batches; (p-1)/(m+p-1) = " << std::fixed << std::setprecision(3)
            << theory_bubble(c.stages, c.microbatches) << "):";
  for (std::size_t s = 0; s < measured.size(); ++s)
    std::cout << "  stage " << s << " " << measured[s] << " (plan " << stage.plan().bubble[s] << ")";
  const double clock_error = *std::max_element(gathered.clock_error_us.begin(), gathered.clock_error_us.end());
  std::cout << std::defaultfloat << "\n  stages' clocks aligned to stage 0's within " << clock_error
            << " us; timeline: " << c.out_dir << "/timeline.json (chrome://tracing, Perfetto), " << c.out_dir
            << "/timeline.png" << std::endl;
}

// The fashion-mnist stages' process group: roles.stages processes, dist.* as configured.
std::shared_ptr<transport::ProcessGroup> stage_group(const PipelineConfig& c, const WorldFlags& world) {
  transport::ProcessGroupOptions po;
  po.init_method = world.resolved_init_method();
  po.rank = world.rank;
  po.world_size = world.world_size;
  po.timeout = std::chrono::milliseconds(static_cast<long long>(c.timeout_s * 1000));
  po.transport = c.transport;
  auto pg = transport::init_process_group(po);
  if (pg->size() != c.stages)
    throw ConfigError("roles.stages is " + std::to_string(c.stages) + " but the world has " +
                      std::to_string(pg->size()) + " processes (distrl-launch starts roles.stages)");
  return pg;
}

// Where the CNN is cut: pipeline.cuts; else where the resumed run cut; else balanced by stage
// 0's measurement of each layer, broadcast so that every stage cuts alike.
std::vector<std::string> choose_cuts(const PipelineConfig& c, nn::Sequential& model, const Dataset& train,
                                     transport::ProcessGroup& pg, int pieces_total, const std::string& resume) {
  std::vector<std::string> cuts = split_names(c.cuts);
  // A resumed run cuts where the checkpointed one did (a new measurement could cut elsewhere).
  if (cuts.empty() && !resume.empty()) {
    std::ifstream saved(resume + "/cuts.txt");
    std::string line;
    if (saved && std::getline(saved, line)) cuts = split_names(line);
  }
  if (cuts.empty() && pieces_total > 1) {  // balanced by stage 0's measurement, the same everywhere
    at::Tensor cost = at::zeros({static_cast<std::int64_t>(model->size())}, at::kDouble);
    if (pg.rank() == 0) {
      const auto t =
          measure_child_costs(model, train.inputs.narrow(0, 0, std::min<std::int64_t>(c.batch_size, train.size())));
      for (std::size_t i = 0; i < t.size(); ++i) cost[i] = t[i];
    }
    pg.broadcast(cost, 0);
    std::vector<double> v(cost.data_ptr<double>(), cost.data_ptr<double>() + cost.numel());
    cuts = balanced_cuts(model, v, pieces_total);
  }
  return cuts;
}

// run.out_dir/checkpoints/ made; stage 0 writes the cuts there (a resume cuts alike).
void prepare_checkpoints(const std::string& ckpt_dir, int rank, const std::vector<std::string>& cuts) {
  std::error_code ec;
  std::filesystem::create_directories(ckpt_dir, ec);
  if (ec) throw Error("cannot create " + ckpt_dir + ": " + ec.message() + " (check run.out_dir)");
  if (rank == 0) {
    std::string line;
    for (const auto& n : cuts) line += (line.empty() ? "" : ",") + n;
    // Atomically: on a resume from this very directory the other stages may be reading it (a
    // truncated file read as "no cuts" sent one stage to measure alone and hung the others).
    write_file_atomically(ckpt_dir + "/cuts.txt", line + "\n");
  }
}

// The last stage's first lines: stages, schedule, pieces, the verifier's bubble and memory.
void print_plan(const PipelineConfig& c, const Schedule& sched, const std::vector<nn::Sequential>& pieces,
                const PipelineStage& stage) {
  std::string where;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    where += (i ? " | " : "");
    for (auto& kv : pieces[i]->named_children()) where += kv.key() + " ";
  }
  std::cout << "pipeline: " << c.stages << " stage(s), schedule " << sched.name << ", " << c.microbatches
            << " micro-batches of a batch of " << c.batch_size << (c.recompute ? ", recompute" : "")
            << "; pieces: " << where << "\n  ideal bubble " << std::setprecision(3) << stage.plan().mean_bubble()
            << ", peak activations per stage";
  for (int a : stage.plan().peak_activations) std::cout << " " << a;
  std::cout << std::endl;
}

// The test set through the pipeline in evaluation mode: (loss sum, correct), on the last stage.
std::pair<double, double> evaluate_pipeline(const PipelineConfig& c, PipelineStage& stage, nn::Module& holder,
                                            const Dataset& test, bool first, bool last) {
  double test_loss = 0, correct = 0;
  holder.eval();
  for (std::int64_t off = 0; off < test.size(); off += c.test_batch_size) {
    const std::int64_t b = std::min<std::int64_t>(c.test_batch_size, test.size() - off);
    const at::Tensor out = stage.forward(first ? test.inputs.narrow(0, off, b) : at::Tensor());
    if (last) {
      const at::Tensor y = test.targets.narrow(0, off, b);
      test_loss += torch::nn::functional::cross_entropy(out, y).item<double>() * b;
      correct += out.argmax(1).eq(y).sum().item<double>();
    }
  }
  holder.train();
  return {test_loss, correct};
}

}  // namespace

void run_fashion_mnist(const PipelineConfig& c, const std::string& config_yaml, const WorldFlags& world,
                       const std::string& resume) {
  models::set_torch_threads(c.torch_threads);
  auto pg = stage_group(c, world);
  const int rank = pg->rank();
  const Schedule sched = schedule_for(c);
  const bool first = rank == 0, last = sched.stage_of(sched.virtual_stages() - 1) == rank;

  const Dataset train = first_items(load_idx_dir(c.data_path, true), c.data_limit);
  const Dataset test = first_items(load_idx_dir(c.data_path, false), c.test_limit);
  torch::manual_seed(c.seed);
  nn::Sequential model = make_fashion_cnn(c.classes);
  const int pieces_total = sched.virtual_stages();
  const std::vector<std::string> cuts = choose_cuts(c, model, train, *pg, pieces_total, resume);
  const auto pieces = cut_model(model, cuts, pieces_total);
  std::vector<nn::Sequential> mine;
  auto holder = std::make_shared<nn::Module>();
  for (int ch = 0; ch < c.chunks; ++ch) {
    mine.push_back(pieces[sched.virtual_stage(rank, ch)]);
    holder->register_module("chunk" + std::to_string(ch), mine.back());
  }
  StageOptions so;
  so.recompute = c.recompute;
  so.max_activations = c.max_activations;
  PipelineStage stage(pg, mine, sched, so);
  torch::optim::SGD opt(holder->parameters(), torch::optim::SGDOptions(c.lr).momentum(c.momentum));

  const std::string ckpt_dir = c.out_dir + "/checkpoints";
  const std::string my_ckpt = "/stage" + std::to_string(rank) + ".pt";
  int start_epoch = 1;
  if (!resume.empty()) {
    auto numbers = models::load_checkpoint(resume + my_ckpt, *holder, &opt, torch::kCPU);
    start_epoch = static_cast<int>(numbers["epoch"]) + 1;
    if (last) std::cout << "resumed from " << resume << " after epoch " << start_epoch - 1 << std::endl;
  }
  // SIGINT/SIGTERM: the stages exchange every micro-batch, so all stop after the same step,
  // save their shard as of the last finished epoch's label and write outputs.
  RunLoop loop(c, "distrl-pipeline", last);
  loop.stop_in_lock_step(*pg, "stage");
  prepare_checkpoints(ckpt_dir, rank, cuts);
  loop.open(config_yaml, "metrics.csv", "epoch,train_loss,test_loss,test_accuracy,seconds,images_per_s",
            resume.empty() ? -1 : start_epoch - 1);
  if (last) print_plan(c, sched, pieces, stage);
  const std::int64_t n = train.size();
  for (int epoch = start_epoch; epoch <= c.epochs; ++epoch) {
    at::Generator gen = at::detail::createCPUGenerator(static_cast<std::uint64_t>(c.seed) * 1000 + epoch);
    const at::Tensor order = at::randperm(n, gen, at::kLong);
    Window w;  // this epoch's steps (the loss on the last stage only)
    for (std::int64_t off = 0; off + c.batch_size <= n; off += c.batch_size) {  // full batches
      const at::Tensor idx = order.narrow(0, off, c.batch_size);
      opt.zero_grad();
      const StepStats st = stage.step(first ? train.inputs.index_select(0, idx) : at::Tensor(),
                                      last ? train.targets.index_select(0, idx) : at::Tensor(), cross_entropy);
      opt.step();
      w.add(st.loss, c.batch_size);
      if (epoch == start_epoch && w.steps == c.timeline_step) write_timeline(c, *pg, stage);
      if (loop.log_due(w.steps))
        std::cout << "epoch " << epoch << "/" << c.epochs << "  step " << std::setw(6) << w.steps << "/"
                  << n / c.batch_size << "  loss " << std::fixed << std::setprecision(4) << w.mean_loss() << "  "
                  << std::setprecision(0) << w.items_per_s() << " img/s" << std::defaultfloat << std::endl;
      if (loop.stop_requested(w.steps)) break;
    }
    if (loop.stopped()) {  // the weights as they are; the epoch counts as not done, so a resume repeats it
      models::save_checkpoint(ckpt_dir + my_ckpt, *holder, &opt, {{"epoch", epoch - 1}});
      pg->barrier();
      if (last)
        loop.report_stop("in epoch " + std::to_string(epoch) + " after step " + std::to_string(w.steps),
                         "checkpoints in " + ckpt_dir + "; epoch " + std::to_string(epoch) +
                             " starts again with: " + resume_command(c.out_dir, ckpt_dir));
      break;
    }
    const double secs = w.seconds();
    const auto [test_loss, correct] = evaluate_pipeline(c, stage, *holder, test, first, last);
    models::save_checkpoint(ckpt_dir + my_ckpt, *holder, &opt, {{"epoch", epoch}});
    pg->barrier();  // every stage's checkpoint of this epoch exists
    const double acc = 100.0 * correct / static_cast<double>(test.size());
    loop.row(epoch, w.mean_loss(), test_loss / test.size(), acc, secs, w.items / secs);
    if (last)
      std::cout << "epoch " << epoch << "/" << c.epochs << " done in " << std::setprecision(3) << secs
                << " s: train loss " << w.mean_loss() << ", test loss " << test_loss / test.size() << ", test accuracy "
                << std::setprecision(4) << acc << "%" << std::defaultfloat << std::endl;
  }
  if (!last) return;
  loop.finish({{"loss", "epoch", {{"epoch", "train_loss", "train"}, {"epoch", "test_loss", "test"}}},
               {"test accuracy (%)", "epoch", {{"epoch", "test_accuracy", "test"}}}});
  std::cout << "wrote " << c.out_dir
            << "/metrics.csv, learning_curve.png, checkpoints/ (more epochs: " << resume_command(c.out_dir, ckpt_dir)
            << " train.epochs=N)" << std::endl;
}

namespace {

// What the schedule's plan promises, after the stages (check_fashion_mnist has verified it).
std::string schedule_and_bubble(const PipelineConfig& c) {
  std::ostringstream text;
  text << "schedule " << c.schedule << ", " << c.microbatches << " micro-batches";
  try {
    text << ": ideal bubble " << std::fixed << std::setprecision(1)
         << 100 * verify(schedule_for(c), VerifyOptions{}).mean_bubble() << " %";
  } catch (const std::exception&) {  // validate() says what is wrong with it
  }
  return text.str();
}

void prepare_process() {
  keep_large_blocks_on_heap();  // activations of many MB each micro-batch: no mmap + page faults each time
  // ... and one malloc arena: the shards run on RPC handler threads, whose own arenas (64 MiB
  // heaps, trimmed as soon as they free) faulted every activation in again (the measurement:
  // docs/benchmarks.md, "Measurements behind decisions in the code").
  ::mallopt(M_ARENA_MAX, 1);
}

void fashion_mnist_rank(const PipelineConfig& c, const RunContext& ctx) {
  prepare_process();
  run_fashion_mnist(c, ctx.config_yaml, ctx.world, ctx.resume);
}

void resnet_rank(const PipelineConfig& c, const RunContext& ctx) {
  prepare_process();
  run_resnet_tutorial(with_preset(c), ctx.config_yaml, ctx.world);
}

void model_parallel_rank(const PipelineConfig& c, const RunContext& ctx) {
  prepare_process();
  run_model_parallel(with_preset(c), ctx.config_yaml);
}

}  // namespace
}  // namespace distrl::training::pipeline

namespace distrl::training {

std::vector<Workload> pipeline_workloads() {
  using namespace pipeline;
  return {resuming(make_workload<PipelineConfig>("pipeline_fashion_mnist", check_fashion_mnist, fashion_mnist_rank,
                                                 schedule_and_bubble)),
          make_workload<PipelineConfig>("pipeline_resnet50", check_resnet, resnet_rank),
          make_workload<PipelineConfig>("pipeline_resnet50_model_parallel", check_model_parallel, model_parallel_rank)};
}

}  // namespace distrl::training
