// The workload registry: the workloads it holds and their tools, the world each one's roles
// make, a name nobody registered refused by name, every config under configs/ naming a
// workload of the tool that runs it, and --check-config refusing what a rank would.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/settings.h"
#include "tests/support/docs_text.h"
#include "training/workload.h"

namespace {

namespace tr = distrl::training;
using distrl::ConfigError;

const std::string kConfigs = std::string(DISTRL_SOURCE_DIR) + "/configs/";

// The world `tool` starts for these arguments, as distrl-launch reads them.
int world_of(const std::string& tool, const std::vector<std::string>& args) {
  tr::WorkloadCommandLine cmd(tool);
  EXPECT_TRUE(cmd.parse(args));
  return cmd.world_size();
}

// The ConfigError message of tool --check-config ARGS ("" when it passes).
std::string refusal(const std::string& tool, const std::vector<std::string>& args) {
  try {
    tr::WorkloadCommandLine cmd(tool);
    cmd.parse(args);
    cmd.validate();
    return "";
  } catch (const ConfigError& e) {
    return e.what();
  }
}

TEST(WorkloadRegistryTest, HoldsEveryWorkloadWithItsTool) {
  const std::map<std::string, std::string> expected = {
      {"rnn_dist_autograd", "distrl-rnn"},
      {"ps_batch_update", "distrl-ps"},
      {"ps_model_on_server", "distrl-ps"},
      {"ps_hybrid", "distrl-ps"},
      {"ps_skipgram", "distrl-ps"},
      {"pipeline_fashion_mnist", "distrl-pipeline"},
      {"pipeline_resnet50", "distrl-pipeline"},
      {"pipeline_resnet50_model_parallel", "distrl-pipeline"},
      {"ddp", "distrl-train"},
  };
  std::map<std::string, std::string> held;
  for (const tr::Workload& w : tr::workloads()) EXPECT_TRUE(held.emplace(w.name, w.tool).second) << w.name << " twice";
  EXPECT_EQ(held, expected);
  for (const auto& [name, tool] : expected) EXPECT_EQ(tr::find_workload(name, "test").tool, tool);
  // The catalog distrl-launch reads (run/workload_catalog.h) holds the registry's workloads,
  // after rl, in its order (make_workload takes each entry's tool from it).
  const auto& catalog = distrl::run::workload_catalog();
  ASSERT_EQ(catalog.size(), tr::workloads().size() + 1);
  EXPECT_EQ(catalog[0].name, distrl::run::kRlWorkload);
  for (std::size_t i = 0; i < tr::workloads().size(); ++i) {
    EXPECT_EQ(tr::workloads()[i].entry, &catalog[i + 1]);
    EXPECT_EQ(tr::workloads()[i].tool, catalog[i + 1].tool);
  }
}

// The world distrl-launch reads from a file (the catalog over the file's and overrides' keys)
// is the tool's (the catalog over the tool's values, its defaults included), and so is run.out_dir:
// for every training config shipped, and for each workload with every key at its default.
TEST(WorkloadRegistryTest, TheLaunchersWorldIsTheTools) {
  const auto tool_world = [](const std::string& tool, const std::vector<std::string>& args) {
    tr::WorkloadCommandLine cmd(tool);
    EXPECT_TRUE(cmd.parse(args));
    return std::to_string(cmd.roles().ranks()) + " (" + cmd.roles().text() + "); " + cmd.settings.output_dir();
  };
  int seen = 0;
  for (const auto& f : std::filesystem::directory_iterator(kConfigs)) {
    const std::string file = f.path().string();
    if (f.path().extension() != ".yaml" || tr::workload_named_by(file, {}) == distrl::run::kRlWorkload) continue;
    SCOPED_TRACE(file);
    const distrl::run::World w = distrl::run::world_of(file, {});
    EXPECT_EQ(tool_world(w.workload->tool, {"--config", file}),
              std::to_string(w.roles.ranks()) + " (" + w.roles.text() + "); " + w.out_dir);
    ++seen;
  }
  EXPECT_GE(seen, 10);
  for (const tr::Workload& w : tr::workloads()) {
    SCOPED_TRACE(w.name);
    distrl::Settings settings(w.tool);
    const auto config = w.make();  // the values settings reads
    config->bind(settings);
    const distrl::run::Roles mine = w.entry->roles([&](const std::string& key) { return settings.value(key); });
    const distrl::run::Roles defaults = w.entry->roles([](const std::string&) { return std::nullopt; });
    EXPECT_EQ(mine.ranks(), defaults.ranks());
    EXPECT_EQ(mine.text(), defaults.text());
    EXPECT_EQ(settings.output_dir(), w.entry->out_dir);
  }
}

TEST(WorkloadRegistryTest, EveryWorkloadsRolesMakeItsWorld) {
  // ps: servers + trainers; hybrid: one more, the master.
  EXPECT_EQ(
      world_of("distrl-ps", {"--config", kConfigs + "ps_batch_update.yaml", "roles.servers=2", "roles.trainers=3"}), 5);
  EXPECT_EQ(world_of("distrl-ps", {"--config", kConfigs + "ps_model_on_server.yaml", "roles.trainers=4"}), 5);
  EXPECT_EQ(world_of("distrl-ps", {"--config", kConfigs + "ps_hybrid.yaml", "roles.trainers=3"}), 5);
  EXPECT_EQ(world_of("distrl-ps", {"--config", kConfigs + "ps_skipgram.yaml"}), 6);  // the file's 2 + 4
  // rnn: the ps + trainers.
  EXPECT_EQ(world_of("distrl-rnn", {"--config", kConfigs + "rnn_dist_autograd.yaml", "roles.trainers=3"}), 4);
  // pipeline: a process per stage; the RPC tutorial master + 2 workers; model parallel one.
  EXPECT_EQ(world_of("distrl-pipeline", {"--config", kConfigs + "pipeline_fashion_mnist.yaml", "roles.stages=3"}), 3);
  EXPECT_EQ(world_of("distrl-pipeline", {"--config", kConfigs + "pipeline_resnet50.yaml"}), 3);
  EXPECT_EQ(world_of("distrl-pipeline", {"--config", kConfigs + "pipeline_resnet50_model_parallel.yaml"}), 1);
  // ddp: dist.world_size.
  EXPECT_EQ(world_of("distrl-train", {"--config", kConfigs + "ddp_toy.yaml", "dist.world_size=4"}), 4);
  // No file: the tool's first workload with its defaults.
  EXPECT_EQ(world_of("distrl-ps", {}), 3);  // 1 server + 2 trainers
  EXPECT_EQ(world_of("distrl-rnn", {}), 2);
  EXPECT_EQ(world_of("distrl-pipeline", {}), 2);
  EXPECT_EQ(world_of("distrl-train", {}), 2);
}

TEST(WorkloadRegistryTest, AnUnknownWorkloadIsRefusedByName) {
  try {
    tr::find_workload("ps_sparse", "my.yaml");
    FAIL() << "ps_sparse was found";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("my.yaml: workload: 'ps_sparse' is not known (known: rl, rnn_dist_autograd, "),
              std::string::npos)
        << what;
  }
  // rl is a workload, but the agent's, not the registry's.
  try {
    tr::find_workload("rl", "my.yaml");
    FAIL() << "rl was found in the training registry";
  } catch (const ConfigError& e) {
    EXPECT_NE(
        std::string(e.what()).find("my.yaml: workload: 'rl' is run by distrl-agent, not by the training registry"),
        std::string::npos)
        << e.what();
  }
  // A tool refuses another tool's workload with the names it runs.
  EXPECT_NE(refusal("distrl-ps", {"workload=rnn_dist_autograd"})
                .find("workload: 'rnn_dist_autograd' is not one of: ps_batch_update, ps_model_on_server, ps_hybrid, "
                      "ps_skipgram"),
            std::string::npos);
}

TEST(WorkloadRegistryTest, EveryConfigNamesAWorkloadOfTheToolThatRunsIt) {
  const std::map<std::string, std::string> expected = {
      {"cartpole.yaml", "rl"},
      {"cartpole_ppo.yaml", "rl"},
      {"cartpole_unbatched.yaml", "rl"},
      {"lunarlander_ppo.yaml", "rl"},
      {"lunarlander_continuous_ppo.yaml", "rl"},
      {"ddp_fashion_mnist.yaml", "ddp"},
      {"ddp_toy.yaml", "ddp"},
      {"rnn_dist_autograd.yaml", "rnn_dist_autograd"},
      {"ps_batch_update.yaml", "ps_batch_update"},
      {"ps_model_on_server.yaml", "ps_model_on_server"},
      {"ps_hybrid.yaml", "ps_hybrid"},
      {"ps_skipgram.yaml", "ps_skipgram"},
      {"pipeline_fashion_mnist.yaml", "pipeline_fashion_mnist"},
      {"pipeline_resnet50.yaml", "pipeline_resnet50"},
      {"pipeline_resnet50_model_parallel.yaml", "pipeline_resnet50_model_parallel"},
  };
  for (const auto& [file, name] : expected) {
    SCOPED_TRACE(file);
    EXPECT_EQ(tr::workload_named_by(kConfigs + file, {}), name);
    if (name == distrl::run::kRlWorkload) continue;  // run by agent/'s tools, beside the registry
    const std::string tool = tr::find_workload(name, file).tool;
    EXPECT_EQ(refusal(tool, {"--config", kConfigs + file}), "");
  }
  // An override names the workload as the file would.
  EXPECT_EQ(tr::workload_named_by(kConfigs + "ps_batch_update.yaml", {"workload=ps_skipgram"}), "ps_skipgram");
}

// Every key a workload binds is described in the docs (README.md or docs/*.md, in backticks):
// four parameter-server keys went undocumented once (issue 46).
TEST(WorkloadRegistryTest, EveryKeyOfEveryWorkloadIsDocumented) {
  const std::string docs = distrl::testing::documentation_text();
  for (const auto& w : tr::workloads()) {
    distrl::Settings settings(w.tool);
    w.make()->bind(settings);
    for (const auto& key : settings.keys())
      EXPECT_TRUE(distrl::testing::documents_key(docs, key)) << w.name << "'s key " << key << " is in no doc";
  }
}

// One config struct per workload: a key of another workload is unknown, named with the fix.
TEST(WorkloadCheckTest, EachWorkloadTakesOnlyItsOwnKeys) {
  EXPECT_NE(refusal("distrl-ps", {"--config", kConfigs + "ps_hybrid.yaml", "ps.consistency=async"})
                .find("unknown key 'ps.consistency'"),
            std::string::npos);
  EXPECT_NE(refusal("distrl-ps", {"--config", kConfigs + "ps_model_on_server.yaml", "ps.snapshot_s=5"})
                .find("unknown key 'ps.snapshot_s'"),
            std::string::npos);
  EXPECT_NE(refusal("distrl-ps", {"--config", kConfigs + "ps_skipgram.yaml", "train.rounds=5"})
                .find("unknown key 'train.rounds'"),
            std::string::npos);
  EXPECT_NE(refusal("distrl-ps", {"--config", kConfigs + "ps_batch_update.yaml", "report.words=a"})
                .find("unknown key 'report.words'"),
            std::string::npos);
  // The sections every workload shares are bound once, alike.
  for (const char* file :
       {"ps_batch_update.yaml", "ps_hybrid.yaml", "rnn_dist_autograd.yaml", "pipeline_resnet50.yaml", "ddp_toy.yaml"}) {
    const std::string name = tr::workload_named_by(kConfigs + file, {});
    EXPECT_EQ(
        refusal(tr::find_workload(name, file).tool, {"--config", kConfigs + file, "run.seed=3", "run.torch_threads=2",
                                                     "dist.timeout_s=9", "dist.transport=tcp"}),
        "")
        << file;
  }
}

TEST(WorkloadCheckTest, CheckConfigRefusesWhatARankWould) {
  const std::string ps = kConfigs + "ps_batch_update.yaml";
  EXPECT_NE(refusal("distrl-ps", {"--config", kConfigs + "ps_hybrid.yaml", "roles.servers=2"})
                .find("roles.servers: the hybrid form has one ps, not 2"),
            std::string::npos);
  EXPECT_NE(refusal("distrl-ps", {"--config", kConfigs + "ps_model_on_server.yaml", "model.name=resnet50"})
                .find("model.name: 'resnet50' is not one of: mnist_cnn, mlp"),
            std::string::npos);
  EXPECT_NE(
      refusal("distrl-ps", {"--config", ps, "roles.trainers=2", "ps.quorum=5"}).find("ps.quorum: 5 is not in [0, 2]"),
      std::string::npos);
  EXPECT_NE(refusal("distrl-ps", {"--config", ps, "model.channels=1"}).find("model.channels: resnet50 takes 3-channel"),
            std::string::npos);
  EXPECT_NE(refusal("distrl-pipeline", {"--config", kConfigs + "pipeline_fashion_mnist.yaml", "pipeline.cuts=fc1,fc2"})
                .find("pipeline.cuts: 2 cuts make 3 pieces; roles.stages x pipeline.chunks needs 2"),
            std::string::npos);
  EXPECT_NE(
      refusal("distrl-pipeline", {"--config", kConfigs + "pipeline_resnet50.yaml", "pipeline.microbatch_size=[200]"})
          .find("pipeline.microbatch_size: 200 is larger than the batch (120)"),
      std::string::npos);
}

}  // namespace
