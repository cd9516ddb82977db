// distrl-train under distrl-launch --config, as a user runs it: a generated IDX dataset with a
// learnable pattern, 2 ranks, metrics, checkpoint, resume; bad configs refused by name.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/support/command.h"
#include "tests/support/tfevents.h"
#include "tests/support/multiproc.h"
#include "training/data.h"

namespace {

using distrl::testing::launch;
using distrl::testing::TempDir;

const std::string kConfig = std::string(DISTRL_SOURCE_DIR) + "/configs/ddp_fashion_mnist.yaml";

// Class k: a bright 4x4 block at row k, plus noise.
void write_dataset(const TempDir& dir) {
  torch::manual_seed(0);
  for (const std::string split : {"train", "t10k"}) {
    const int n = split == "train" ? 512 : 128;
    auto labels = torch::randint(0, 5, {n}, torch::kLong);
    auto images = torch::randint(0, 60, {n, 28, 28}, torch::kLong);
    for (int i = 0; i < n; ++i) {
      const int k = static_cast<int>(labels[i].item<long>());
      images[i].narrow(0, 4 * k + 2, 4).narrow(1, 12, 4).fill_(250);
    }
    distrl::training::write_idx(dir.file(split + "-images-idx3-ubyte.gz"), dir.file(split + "-labels-idx1-ubyte.gz"),
                                images, labels);
  }
}

int count_lines(const std::string& path) {
  std::ifstream f(path);
  int n = 0;
  for (std::string line; std::getline(f, line);) ++n;
  return n;
}

TEST(TrainTest, TwoRanksLearnFromIdxFilesAndResume) {
  TempDir data, out;
  write_dataset(data);
  const std::string common = " data.path=" + data.path() + " run.out_dir=" + out.path() +
                             " model.name=mlp model.hidden=[64] train.batch_size=32 optimizer.lr=0.05";
  auto r = launch("--config " + kConfig + common + " train.epochs=2");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("epoch 2/2: train loss"), std::string::npos) << r.output;
  EXPECT_EQ(count_lines(out.file("metrics.csv")), 3);  // header + 2 epochs
  std::ifstream f(out.file("metrics.csv"));
  std::string header, e1, e2;
  std::getline(f, header);
  std::getline(f, e1);
  std::getline(f, e2);
  std::vector<std::string> cols;  // epoch,steps,train_loss,test_loss,test_accuracy,samples_per_s,seconds
  std::stringstream ss(e2);
  for (std::string c; std::getline(ss, c, ',');) cols.push_back(c);
  ASSERT_EQ(cols.size(), 7u) << e2;
  EXPECT_GT(std::stod(cols[4]), 0.9) << e2;  // the pattern is easy
  EXPECT_TRUE(std::filesystem::exists(out.file("checkpoint.pt")));
  EXPECT_TRUE(std::filesystem::exists(out.file("config.yaml")));
  EXPECT_TRUE(std::filesystem::exists(out.file("learning_curve.png")));  // gnuplot comes with make deps
  EXPECT_EQ(distrl::testing::count_event_files(out.path()), 1);          // the CSV's columns as TensorBoard scalars
  const auto events = distrl::testing::read_tfevents(out.path());
  if (events.ran) {
    EXPECT_EQ(events.code, 0) << events.out;
    EXPECT_EQ(events.points("train_loss"), 2) << events.out;
    EXPECT_EQ(events.points("test_accuracy"), 2) << events.out;
    EXPECT_EQ(events.points("seconds"), 2) << events.out;            // each epoch's own time
    EXPECT_EQ(events.points("seconds_per_epoch"), 0) << events.out;  // so no difference of two of them
  }

  auto resumed = launch("--config " + kConfig + common + " train.epochs=3 --resume " + out.file("checkpoint.pt"));
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
  EXPECT_EQ(resumed.output.find("epoch 1/3"), std::string::npos) << "resume starts after the saved epoch";
  EXPECT_NE(resumed.output.find("epoch 3/3: train loss"), std::string::npos) << resumed.output;
  EXPECT_EQ(count_lines(out.file("metrics.csv")), 4);
}

// A regression (the toy data) has no accuracy: its metrics.csv has no test_accuracy column
// (issue 35: it read -1 in every row).
TEST(TrainTest, ARegressionsMetricsHaveNoAccuracyColumn) {
  TempDir out;
  auto r = launch("--config " + std::string(DISTRL_SOURCE_DIR) +
                  "/configs/ddp_toy.yaml train.epochs=1 "
                  "data.toy_samples=256 run.out_dir=" +
                  out.path());
  ASSERT_EQ(r.code, 0) << r.output;
  std::ifstream f(out.file("metrics.csv"));
  std::string header, row;
  std::getline(f, header);
  std::getline(f, row);
  EXPECT_EQ(header, "epoch,steps,train_loss,test_loss,samples_per_s,seconds");
  EXPECT_EQ(std::count(row.begin(), row.end(), ','), 5) << row;
  EXPECT_EQ(row.find("-1"), std::string::npos) << row;
}

TEST(TrainTest, BadConfigsAreRefusedByNameBeforeAnythingStarts) {
  auto r = launch("--config " + kConfig + " optimizer.lrr=0.1");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("unknown key 'optimizer.lrr'"), std::string::npos) << r.output;
  r = launch("--config " + kConfig + " model.name=resnet");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("model.name"), std::string::npos) << r.output;
  TempDir empty;
  r = launch("--config " + kConfig + " data.path=" + empty.path() + " dist.world_size=1");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("train-images-idx3-ubyte"), std::string::npos) << r.output;
}

// SIGINT to distrl-launch mid-epoch (issue 14, case 6): both ranks stop after the same step,
// the checkpoint is saved, the launcher exits 130, and --resume goes on from it. Before, the
// ranks died at once and the run was lost.
TEST(TrainTest, CtrlCStopsEveryRankAtTheSameStepAndSaves) {
  TempDir data, out;
  write_dataset(data);
  const std::string common =
      " data.path=" + data.path() + " run.out_dir=" + out.path() + " model.name=mlp model.hidden=[64]";
  int lines = 0;  // Ctrl-C at the third progress line
  auto r = distrl::testing::launch_interrupted(
      "--config " + kConfig + common + " train.batch_size=2 train.epochs=200 run.log_interval=5",
      [&](const std::string& line) { return line.find("] epoch 1/200 [") != std::string::npos && ++lines == 3; },
      SIGINT);
  EXPECT_EQ(r.code, 130) << r.output;
  const std::string said = "distrl-train: stopped by SIGINT in epoch ";  // Ctrl-C, passed on by the launcher
  const auto at = r.output.find(said);
  ASSERT_NE(at, std::string::npos) << r.output;
  const int epoch = std::stoi(r.output.substr(at + said.size()));
  ASSERT_TRUE(std::filesystem::exists(out.file("checkpoint.pt"))) << r.output;
  EXPECT_EQ(count_lines(out.file("metrics.csv")), epoch);  // the header and every finished epoch

  // The stopped epoch counts as not done: a resume runs it again.
  auto resumed = launch("--config " + kConfig + common + " train.batch_size=32 train.epochs=" + std::to_string(epoch) +
                        " --resume " + out.file("checkpoint.pt"));
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
  const std::string last = "epoch " + std::to_string(epoch) + "/" + std::to_string(epoch) + ": train loss";
  EXPECT_NE(resumed.output.find(last), std::string::npos) << resumed.output;
}

}  // namespace
