// The distributed-autograd RNN as a user runs it: distrl-launch --config
// configs/rnn_dist_autograd.yaml on the Debian licence texts (ps + trainer processes), with the
// validation loss falling, metrics, plot, checkpoint and resume; a bad key refused by name.
#include <gtest/gtest.h>

#include <csignal>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/support/command.h"
#include "tests/support/multiproc.h"

namespace {

using distrl::testing::launch;
using distrl::testing::TempDir;

const std::string kConfig = std::string(DISTRL_SOURCE_DIR) + "/configs/rnn_dist_autograd.yaml";

// The val_loss column (4th of step,train_loss,val_loss,...) of the rows that have one.
std::vector<double> val_losses(const std::string& csv) {
  std::ifstream f(csv);
  std::vector<double> out;
  std::string line;
  std::getline(f, line);
  while (std::getline(f, line)) {
    std::vector<std::string> cols;
    std::stringstream ss(line);
    for (std::string c; std::getline(ss, c, ',');) cols.push_back(c);
    if (cols.size() >= 3 && !cols[2].empty()) out.push_back(std::stod(cols[2]));
  }
  return out;
}

}  // namespace

TEST(RnnTest, PsAndTrainerLearnTheLicenceTextsAndResume) {
  TempDir out;
  const std::string common = " run.out_dir=" + out.path() +
                             " data.max_chars=120000 train.bptt=32 train.batch_size=16 train.eval_interval=40"
                             " run.log_interval=40 checkpoint.every=40";
  auto r = launch("--config " + kConfig + common + " train.steps=120");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("step 120/120  train loss"), std::string::npos) << r.output;
  auto val = val_losses(out.file("metrics.csv"));
  ASSERT_EQ(val.size(), 3u) << r.output;
  EXPECT_LT(val.back(), val.front()) << "the validation loss falls";
  EXPECT_LT(val.back(), std::log(80.0) - 1.0) << "well below a uniform guess over the alphabet";
  EXPECT_TRUE(std::filesystem::exists(out.file("checkpoint.pt")));
  EXPECT_TRUE(std::filesystem::exists(out.file("config.yaml")));
  EXPECT_TRUE(std::filesystem::exists(out.file("learning_curve.png")));

  auto resumed = launch("--config " + kConfig + common + " train.steps=160 --resume " + out.file("checkpoint.pt"));
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
  EXPECT_EQ(resumed.output.find("step 40/160"), std::string::npos) << "resume starts after the saved step";
  EXPECT_NE(resumed.output.find("step 160/160"), std::string::npos) << resumed.output;
  EXPECT_EQ(val_losses(out.file("metrics.csv")).size(), 4u);
}

// Ctrl-C to distrl-launch mid-run: the trainers finish their step, trainer 1 saves the
// checkpoint (ps parameters included) and writes its outputs, the ps serves until they are
// done, the launcher exits 130, and --resume goes on after the saved step. Before, every rank
// died at once and the run was lost.
TEST(RnnTest, CtrlCStopsTheTrainersWhoSaveAndResume) {
  TempDir out;
  const std::string common = " run.out_dir=" + out.path() +
                             " data.max_chars=60000 train.bptt=16 train.batch_size=8 train.eval_interval=1000"
                             " run.log_interval=10 checkpoint.every=0";
  auto r = distrl::testing::launch_interrupted("--config " + kConfig + common + " train.steps=1000000",
                                               "step 30/1000000  train", SIGINT);
  EXPECT_EQ(r.code, 130) << r.output;
  const std::string said = "trainer 1: stopped by SIGINT after step ";  // Ctrl-C, passed on by the launcher
  const auto at = r.output.find(said);
  ASSERT_NE(at, std::string::npos) << r.output;
  const int step = std::stoi(r.output.substr(at + said.size()));
  EXPECT_GE(step, 30);
  EXPECT_TRUE(std::filesystem::exists(out.file("checkpoint.pt"))) << r.output;
  EXPECT_TRUE(std::filesystem::exists(out.file("learning_curve.png"))) << r.output;

  const std::string steps = std::to_string(step + 10);
  auto resumed =
      launch("--config " + kConfig + common + " train.steps=" + steps + " --resume " + out.file("checkpoint.pt"));
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("at step " + std::to_string(step + 1)), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find("step " + steps + "/" + steps + "  train loss"), std::string::npos) << resumed.output;
}

TEST(RnnTest, BadKeysAreRefusedByNameBeforeAnythingStarts) {
  auto r = launch("--config " + kConfig + " model.hiden=12");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("model.hiden"), std::string::npos) << r.output;
  auto t = launch("--config " + kConfig + " roles.trainers=0");
  EXPECT_NE(t.code, 0);
  EXPECT_NE(t.output.find("roles.trainers"), std::string::npos) << t.output;
}
