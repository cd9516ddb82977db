// distrl-pipeline under distrl-launch --config, as a user runs it: the Fashion-MNIST pipeline
// learns like the same model trained by plain LibTorch in one process, writes its timeline
// (checked as JSON) and resumes; the RPC
// tutorial's ResNet-50 pipeline trains like one process; bad settings are refused by name
// before anything starts.
#include <gtest/gtest.h>

#include <csignal>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <torch/torch.h>

#include "tests/support/chrome_trace.h"
#include "tests/support/command.h"
#include "tests/support/multiproc.h"
#include "tests/support/tolerance.h"
#include "training/data.h"
#include "training/pipeline/workloads.h"

namespace {

using distrl::testing::launch;
using distrl::testing::TempDir;

const std::string kFashion = std::string(DISTRL_SOURCE_DIR) + "/configs/pipeline_fashion_mnist.yaml";
const std::string kResnet = std::string(DISTRL_SOURCE_DIR) + "/configs/pipeline_resnet50.yaml";
const std::string kFashionData = "/usr/share/datasets/fashion-mnist";  // the config's data.path

// The last row of metrics.csv: epoch,train_loss,test_loss,test_accuracy,seconds,images_per_s.
std::vector<double> last_metrics(const std::string& csv) {
  std::ifstream f(csv);
  std::string line, last;
  while (std::getline(f, line)) last = line;
  std::vector<double> cols;
  std::stringstream ss(last);
  for (std::string c; std::getline(ss, c, ',');) cols.push_back(std::stod(c));
  return cols;
}

// timeline.json of zb-h1 on 3 stages with 4 micro-batches, read as JSON: a row per stage and,
// on stage s, a box for each of F, I, W of every micro-batch, RF / SB where there is a stage
// before, SF / RB where there is one after (20, 28 and 20 boxes); an arrow from every SF to the
// next stage's row and from every SB to the previous one's (16).
void expect_zb_h1_timeline(const std::string& path) {
  const auto events = distrl::testing::read_chrome_trace(path);
  std::map<int, std::string> rows;
  std::map<int, std::multiset<std::string>> boxes;
  std::map<long, std::map<std::string, distrl::testing::TraceEvent>> arrows;  // id -> ph -> its end
  for (const auto& e : events) {
    if (e.ph == "M") rows[e.tid] = e.row_name;
    if (e.ph == "X") boxes[e.tid].insert(e.name);
    if (e.ph == "s" || e.ph == "f") arrows[e.id][e.ph] = e;
  }
  EXPECT_EQ(rows, (std::map<int, std::string>{{0, "stage 0"}, {1, "stage 1"}, {2, "stage 2"}}));
  for (int s = 0; s < 3; ++s) {
    std::multiset<std::string> want;
    for (int j = 0; j < 4; ++j) {
      for (const char* op : {"F", "I", "W"}) want.insert(op + std::to_string(j));
      if (s > 0) want.insert({"RF" + std::to_string(j), "SB" + std::to_string(j)});
      if (s < 2) want.insert({"SF" + std::to_string(j), "RB" + std::to_string(j)});
    }
    EXPECT_EQ(boxes[s], want) << "stage " << s;
  }
  std::multiset<std::string> sends, want_sends;
  for (const auto& [id, ends] : arrows) {
    ASSERT_TRUE(ends.count("s") && ends.count("f")) << "arrow " << id << " lacks an end";
    const auto& from = ends.at("s");
    EXPECT_EQ(ends.at("f").tid, from.tid + (from.name.rfind("SF", 0) == 0 ? 1 : -1))
        << from.name << " from stage " << from.tid;
    sends.insert(std::to_string(from.tid) + ":" + from.name);
  }
  for (int j = 0; j < 4; ++j)
    for (const std::string s : {"0:SF", "1:SF", "1:SB", "2:SB"}) want_sends.insert(s + std::to_string(j));
  EXPECT_EQ(sends, want_sends);
}

struct OneProcess {
  double train_loss = 0, test_loss = 0;
  std::int64_t correct = 0;
  at::Tensor logits;  // the test set's, after training
};

// One summation order of the same training (tests/support/tolerance.h): each batch of 64 whole
// (order 0) or as `parts` micro-batches accumulated first to last (1) or last to first (2), then
// the test set in batches of `test_rows`. All are the same mathematics; their spread is what
// float32 reordering changes here.
struct Order {
  int order = 1;
  std::int64_t parts = 4;
  std::int64_t test_rows = 1000;
};

// The pipeline's run redone by plain LibTorch in this process: the same CNN (run.seed 1), the
// same images in the same order (distrl-pipeline's permutation of epoch 1), one SGD step per
// batch of 64 on the gradient of its mean loss, then the test set. No pipeline code.
OneProcess train_in_one_process(std::int64_t limit, std::int64_t test_limit, double lr, double momentum, Order o) {
  namespace tr = distrl::training;
  torch::set_num_threads(1);
  const tr::Dataset train = tr::first_items(tr::load_idx_dir(kFashionData, true), limit);
  const tr::Dataset test = tr::first_items(tr::load_idx_dir(kFashionData, false), test_limit);
  torch::manual_seed(1);
  torch::nn::Sequential model = tr::pipeline::make_fashion_cnn(10);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(lr).momentum(momentum));
  at::Generator gen = at::detail::createCPUGenerator(1 * 1000 + 1);  // seed * 1000 + epoch
  const at::Tensor order = at::randperm(train.size(), gen, at::kLong);
  OneProcess r;
  int steps = 0;
  for (std::int64_t off = 0; off + 64 <= train.size(); off += 64, ++steps) {
    opt.zero_grad();
    const at::Tensor idx = order.narrow(0, off, 64);
    r.train_loss += distrl::testing::backward_in_order(
        o.order, train.inputs.index_select(0, idx), train.targets.index_select(0, idx),
        distrl::testing::equal_parts(64, o.parts), [&](const at::Tensor& x) { return model->forward(x); },
        [](const at::Tensor& out, const at::Tensor& y) { return torch::nn::functional::cross_entropy(out, y); });
    opt.step();
  }
  r.train_loss /= steps;
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> outs;
  for (std::int64_t off = 0; off < test.size(); off += o.test_rows) {
    const std::int64_t b = std::min<std::int64_t>(o.test_rows, test.size() - off);
    const at::Tensor out = model->forward(test.inputs.narrow(0, off, b)), y = test.targets.narrow(0, off, b);
    r.test_loss += torch::nn::functional::cross_entropy(out, y).item<double>() * b;
    r.correct += out.argmax(1).eq(y).sum().item<std::int64_t>();
    outs.push_back(out);
  }
  r.test_loss /= test.size();
  r.logits = torch::cat(outs);
  return r;
}

// Three stages (zb-h1) learn Fashion-MNIST as the same model trained by plain LibTorch in one
// process; timeline.json, read as JSON, holds a row per stage, a box for every action of the
// schedule and an arrow from every send to its receive; a second epoch resumes from the
// checkpoints.
TEST(PipelineWorkloadTest, ThreeStagesLearnFashionMnistLikeOneProcessWriteATimelineAndResume) {
  TempDir three;
  const std::string common =
      " data.limit=2560 data.test_limit=1000 run.log_interval=20 pipeline.timeline_step=5"
      " run.seed=1 run.torch_threads=1 train.batch_size=64 train.test_batch_size=1000"
      " optimizer.lr=0.05 optimizer.momentum=0.9 pipeline.microbatches=4";
  auto b =
      launch("--config " + kFashion + common + " roles.stages=3 pipeline.schedule=zb-h1 run.out_dir=" + three.path());
  ASSERT_EQ(b.code, 0) << b.output;
  const auto got = last_metrics(three.file("metrics.csv"));
  ASSERT_EQ(got.size(), 6u) << b.output;
  // The pipeline's own order first (4 micro-batches of 16, test batches of 1000), then others:
  // its zb-h1 schedule computes weight gradients apart from input gradients and evaluates in
  // micro-batches of 250, so it is one more order, not the same one.
  using distrl::testing::Reorderings;
  Reorderings train_loss("train loss"), test_loss("test loss");
  distrl::testing::CorrectCounts correct;
  for (const Order o : {Order{1, 4, 1000}, Order{0, 1, 250}, Order{2, 2, 1000}, Order{2, 8, 250}}) {
    const OneProcess r = train_in_one_process(2560, 1000, 0.05, 0.9, o);
    train_loss.add(r.train_loss);
    test_loss.add(r.test_loss);
    correct.add(r.logits, r.correct);
  }
  const auto got_correct = static_cast<std::int64_t>(std::llround(got[3] * 10));  // the CSV's % of 1000 images
  std::cout << "train loss " << got[1] << " vs " << train_loss.reference()[0] << " (orders span " << train_loss.width()
            << "), test loss " << got[2] << " vs " << test_loss.reference()[0] << " (span " << test_loss.width()
            << "), correct " << got_correct << " vs " << correct.reference() << " of 1000 (orders disagree on up to "
            << correct.flips() << " images)" << std::endl;
  using distrl::testing::print_rounding;
  EXPECT_EQ(train_loss.check(got[1], print_rounding(got[1])), "") << b.output;
  EXPECT_EQ(test_loss.check(got[2], print_rounding(got[2])), "") << b.output;
  EXPECT_LE(std::abs(got_correct - correct.reference()), correct.tolerance()) << "correct test images; " << b.output;
  EXPECT_GT(correct.reference(), 600);
  EXPECT_NE(b.output.find("bubble of step 5 (zb-h1, 3 stages"), std::string::npos) << b.output;
  expect_zb_h1_timeline(three.file("timeline.json"));
  EXPECT_TRUE(std::filesystem::exists(three.file("timeline.png")));
  EXPECT_TRUE(std::filesystem::exists(three.file("learning_curve.png")));
  // Continue for a second epoch from the checkpoints.
  auto c = launch("--config " + kFashion + common +
                  " roles.stages=3 pipeline.schedule=zb-h1 train.epochs=2 run.out_dir=" + three.path() + " --resume " +
                  three.file("checkpoints"));
  ASSERT_EQ(c.code, 0) << c.output;
  EXPECT_NE(c.output.find("resumed from"), std::string::npos) << c.output;
  EXPECT_EQ(c.output.find("epoch 1/2 done"), std::string::npos) << c.output;
  EXPECT_NE(c.output.find("epoch 2/2 done"), std::string::npos) << c.output;
}

// Ctrl-C to distrl-launch mid-epoch: every stage stops after the same step (they agree every
// 10 steps), saves its shard, the launcher exits 130, and --resume repeats the unfinished epoch.
TEST(PipelineWorkloadTest, CtrlCStopsEveryStageAtTheSameStepAndSaves) {
  TempDir out;
  const std::string common =
      " roles.stages=2 data.limit=6400 data.test_limit=500 run.log_interval=10 run.out_dir=" + out.path();
  auto r = distrl::testing::launch_interrupted("--config " + kFashion + common + " train.epochs=50",
                                               "epoch 1/50  step     20/", SIGINT);
  EXPECT_EQ(r.code, 130) << r.output;
  // "by SIGINT", or "by a signal on another stage" when the launcher's SIGINT reached another
  // stage first and the agreement came before this one's arrived
  const auto stopped = r.output.find("distrl-pipeline: stopped by ");
  ASSERT_NE(stopped, std::string::npos) << r.output;
  const std::string said = " in epoch 1 after step ";
  const auto at = r.output.find(said, stopped);
  ASSERT_NE(at, std::string::npos) << r.output;
  EXPECT_EQ(std::stoi(r.output.substr(at + said.size())) % 10, 0) << "the stages agree every 10 steps";
  ASSERT_TRUE(std::filesystem::exists(out.file("checkpoints"))) << r.output;

  auto resumed = launch("--config " + kFashion + common + " train.epochs=1 --resume " + out.file("checkpoints"));
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find("epoch 1/1 done"), std::string::npos) << resumed.output;
}

TEST(PipelineWorkloadTest, TheTutorialsResNetPipelineTrainsLikeOneProcess) {
  TempDir out;
  // Every loss and the parameters after the first step must agree (1e-4): the micro-batches'
  // gradients are summed in arrival order, so later steps may part at a max-pool near-tie (gaps of
  // 8e-4 after two steps were measured, even with one intra-op thread on a loaded machine).
  auto r = launch("--config " + kResnet +
                  " preset=small train.batches=2 pipeline.microbatch_size=[6,24]"
                  " pipeline.check_one_process=true run.torch_threads=1 run.out_dir=" +
                  out.path());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("one-process check (micro-batch size 6)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("micro-batch size    6 (  4 micro-batches)"), std::string::npos) << r.output;
  EXPECT_EQ(distrl::testing::read_file(out.file("sweep.csv")).find("6,4,24,"),
            distrl::testing::read_file(out.file("sweep.csv")).find('\n') + 1);
}

// Ctrl-C during the tutorial's sweep: the master ends the setting it is in after the current
// batch, writes its row with the batches done, and every process exits; the launcher 130.
TEST(PipelineWorkloadTest, CtrlCEndsTheResNetSweepWithTheRowsMeasured) {
  TempDir out;
  auto r = distrl::testing::launch_interrupted("--config " + kResnet +
                                                   " preset=small train.batches=100000"
                                                   " pipeline.microbatch_size=[6,24] run.out_dir=" +
                                                   out.path(),
                                               "  batch 1/100000:", SIGINT);
  EXPECT_EQ(r.code, 130) << r.output;
  EXPECT_NE(r.output.find("distrl-pipeline: stopped by "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" of 100000 batches)"), std::string::npos) << r.output;
  const std::string sweep = distrl::testing::read_file(out.file("sweep.csv"));
  const auto row = sweep.find('\n') + 1;
  EXPECT_EQ(sweep.find("6,4,24,"), row) << sweep;
  EXPECT_EQ(sweep.find("\n24,"), std::string::npos) << "the second setting never started: " << sweep;
}

// The single-machine model-parallel tutorial (one process; both devices the CPU here): the
// whole model and the two shards start from the same weights, so without micro-batches their
// losses are equal; the pipelined rows run each split size.
TEST(PipelineWorkloadTest, TheModelParallelTutorialRunsItsTable) {
  TempDir out;
  auto r =
      launch("--config " + std::string(DISTRL_SOURCE_DIR) +
             "/configs/pipeline_resnet50_model_parallel.yaml"
             " preset=small train.batches=2 run.torch_threads=1 pipeline.microbatch_size=[8] pipeline.devices=cpu,cpu"
             " run.out_dir=" +
             out.path());
  ASSERT_EQ(r.code, 0) << r.output;
  std::istringstream csv(distrl::testing::read_file(out.file("sweep.csv")));
  std::string header, line;
  std::getline(csv, header);
  std::vector<std::vector<std::string>> rows;
  while (std::getline(csv, line)) {
    std::vector<std::string> f;
    std::stringstream ls(line);
    for (std::string x; std::getline(ls, x, ',');) f.push_back(x);
    rows.push_back(f);
  }
  ASSERT_EQ(rows.size(), 3u) << r.output;
  EXPECT_EQ(rows[0][0], "single_device");
  EXPECT_EQ(rows[1][0], "model_parallel");
  EXPECT_EQ(rows[2][0] + "," + rows[2][1] + "," + rows[2][2], "pipelined,8,3");
  // The same operations on the same batches in one process (the shards' layers are the whole
  // network's): equal but for a kernel that picks its path by the tensors' alignment (MKL) --
  // a few ulps -- and the CSV's 6 digits (the CPU on both: GPU kernels need not be deterministic).
  for (int col : {5, 6}) {
    const double a = std::stod(rows[0][col]), b = std::stod(rows[1][col]);
    distrl::testing::Reorderings same(col == 5 ? "first loss" : "last loss");
    same.add(a);
    EXPECT_EQ(same.check(b, 2 * distrl::testing::print_rounding(a)), "");
  }
}

TEST(PipelineWorkloadTest, BadSettingsAreRefusedByNameBeforeAnythingStarts) {
  TempDir out;
  auto r = launch("--config " + kFashion +
                  " pipeline.schedule=interleaved roles.stages=2 pipeline.chunks=2 "
                  "pipeline.microbatches=3 run.out_dir=" +
                  out.path());
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("multiple of the stages (2), given 3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("nothing started"), std::string::npos) << r.output;
  r = launch("--config " + kFashion +
             " pipeline.schedule=gpipe pipeline.microbatches=16 pipeline.max_activations=8 "
             "run.out_dir=" +
             out.path());
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("the bound (max_activations) is 8"), std::string::npos) << r.output;
  r = launch("--config " + kFashion + " train.batch_size=9 pipeline.microbatches=4 run.out_dir=" + out.path());
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("use 3 micro-batches"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(out.file("metrics.csv")));
}

}  // namespace
