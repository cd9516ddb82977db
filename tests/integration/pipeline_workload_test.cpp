// distrl-pipeline under distrl-launch --config, as a user runs it: the Fashion-MNIST pipeline
// learns like the same model in one process, writes its timeline and resumes; the RPC
// tutorial's ResNet-50 pipeline trains like one process; bad settings are refused by name
// before anything starts.
#include <gtest/gtest.h>

#include <csignal>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/support/command.h"
#include "tests/support/multiproc.h"

namespace {

using distrl::testing::launch;
using distrl::testing::TempDir;

const std::string kFashion = std::string(DISTRL_SOURCE_DIR) + "/configs/pipeline_fashion_mnist.yaml";
const std::string kResnet = std::string(DISTRL_SOURCE_DIR) + "/configs/pipeline_resnet50.yaml";

// The last epoch's test accuracy from metrics.csv (epoch,train_loss,test_loss,test_accuracy,...).
double last_accuracy(const std::string& csv) {
  std::ifstream f(csv);
  std::string line, last;
  while (std::getline(f, line)) last = line;
  std::vector<std::string> cols;
  std::stringstream ss(last);
  for (std::string c; std::getline(ss, c, ',');) cols.push_back(c);
  return cols.size() > 3 ? std::stod(cols[3]) : -1;
}

TEST(PipelineWorkloadTest, ThreeStagesLearnFashionMnistLikeOneProcessWriteATimelineAndResume) {
  TempDir one, three;
  const std::string common = " data.limit=2560 data.test_limit=1000 run.log_interval=20 pipeline.timeline_step=5";
  auto a = launch("--config " + kFashion + common + " roles.stages=1 run.out_dir=" + one.path());
  ASSERT_EQ(a.code, 0) << a.output;
  auto b = launch("--config " + kFashion + common + " roles.stages=3 pipeline.schedule=zb-h1 run.out_dir=" + three.path());
  ASSERT_EQ(b.code, 0) << b.output;
  const double acc1 = last_accuracy(one.file("metrics.csv")), acc3 = last_accuracy(three.file("metrics.csv"));
  EXPECT_GT(acc1, 60.0) << a.output;
  EXPECT_NEAR(acc3, acc1, 0.5) << b.output;
  EXPECT_NE(b.output.find("bubble of step 5 (zb-h1, 3 stages"), std::string::npos) << b.output;
  const std::string trace = distrl::testing::read_file(three.file("timeline.json"));
  EXPECT_NE(trace.find("\"traceEvents\""), std::string::npos);
  EXPECT_NE(trace.find("\"name\":\"stage 2\""), std::string::npos);
  EXPECT_NE(trace.find("\"ph\":\"s\""), std::string::npos) << "arrows from sends to receives";
  EXPECT_NE(trace.find("\"name\":\"W3\""), std::string::npos) << "zb-h1's weight-gradient actions";
  EXPECT_TRUE(std::filesystem::exists(three.file("timeline.png")));
  EXPECT_TRUE(std::filesystem::exists(three.file("learning_curve.png")));
  // Continue for a second epoch from the checkpoints.
  auto c = launch("--config " + kFashion + common + " roles.stages=3 pipeline.schedule=zb-h1 train.epochs=2 run.out_dir=" +
                  three.path() + " --resume " + three.file("checkpoints"));
  ASSERT_EQ(c.code, 0) << c.output;
  EXPECT_NE(c.output.find("resumed from"), std::string::npos) << c.output;
  EXPECT_EQ(c.output.find("epoch 1/2 done"), std::string::npos) << c.output;
  EXPECT_NE(c.output.find("epoch 2/2 done"), std::string::npos) << c.output;
}

// Ctrl-C to distrl-launch mid-epoch: every stage stops after the same step (they agree every
// 10 steps), saves its shard, the launcher exits 130, and --resume repeats the unfinished epoch.
TEST(PipelineWorkloadTest, CtrlCStopsEveryStageAtTheSameStepAndSaves) {
  TempDir out;
  const std::string common = " roles.stages=2 data.limit=6400 data.test_limit=500 run.log_interval=10 run.out_dir=" +
                             out.path();
  auto r = distrl::testing::launch_interrupted("--config " + kFashion + common + " train.epochs=50",
                                               "epoch 1/50  step     20/", SIGINT);
  EXPECT_EQ(r.code, 130) << r.output;
  // "by SIGTERM", or "by a signal on another stage" when the launcher's SIGTERM reached another
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
  auto r = launch("--config " + kResnet + " preset=small train.batches=2 pipeline.microbatch_size=[6,24]"
                  " pipeline.check_one_process=true run.torch_threads=1 run.out_dir=" + out.path());
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
  auto r = distrl::testing::launch_interrupted("--config " + kResnet + " preset=small train.batches=100000"
                                               " pipeline.microbatch_size=[6,24] run.out_dir=" + out.path(),
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
// losses agree; the pipelined rows run each split size.
TEST(PipelineWorkloadTest, TheModelParallelTutorialRunsItsTable) {
  TempDir out;
  auto r = launch("--config " + std::string(DISTRL_SOURCE_DIR) + "/configs/pipeline_resnet50_model_parallel.yaml"
                  " preset=small train.batches=2 run.torch_threads=1 pipeline.microbatch_size=[8] run.out_dir=" + out.path());
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
  EXPECT_NEAR(std::stod(rows[0][5]), std::stod(rows[1][5]), 1e-4) << "first losses differ";
  EXPECT_NEAR(std::stod(rows[0][6]), std::stod(rows[1][6]), 1e-4) << "last losses differ";
}

TEST(PipelineWorkloadTest, BadSettingsAreRefusedByNameBeforeAnythingStarts) {
  TempDir out;
  auto r = launch("--config " + kFashion + " pipeline.schedule=interleaved roles.stages=2 pipeline.chunks=2 "
                  "pipeline.microbatches=3 run.out_dir=" + out.path());
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("multiple of the stages (2), given 3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("nothing started"), std::string::npos) << r.output;
  r = launch("--config " + kFashion + " pipeline.schedule=gpipe pipeline.microbatches=16 pipeline.max_activations=8 "
             "run.out_dir=" + out.path());
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("the bound (max_activations) is 8"), std::string::npos) << r.output;
  r = launch("--config " + kFashion + " train.batch_size=9 pipeline.microbatches=4 run.out_dir=" + out.path());
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("use 3 micro-batches"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(out.file("metrics.csv")));
}

}  // namespace
