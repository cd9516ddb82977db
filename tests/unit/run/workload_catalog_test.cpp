// The workload catalog: every workload with the tool of each role, the world a config's keys
// make (the same as the tool's: every RL config under configs/ read as distrl-agent reads it;
// the training tools' side is WorkloadRegistryTest), a name nobody knows refused by name, and
// the --check-config line's words.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/settings.h"
#include "rl/rl_config.h"
#include "run/workload_catalog.h"

namespace {

namespace run = distrl::run;
using distrl::ConfigError;

const std::string kConfigs = std::string(DISTRL_SOURCE_DIR) + "/configs/";

std::string roles_text(const std::string& file, const std::vector<std::string>& overrides = {}) {
  const run::World w = run::world_of(kConfigs + file, overrides);
  return std::to_string(w.roles.ranks()) + ": " + w.roles.text();
}

TEST(WorkloadCatalogTest, HoldsEveryWorkloadWithTheToolOfEachRole) {
  std::map<std::string, std::vector<std::string>> tools;  // each role's, unset keys at their defaults
  for (const run::WorkloadEntry& w : run::workload_catalog()) {
    std::vector<std::string>& t = tools[w.name];
    EXPECT_TRUE(t.empty()) << w.name << " twice";
    for (const run::RoleGroup& g : w.roles([](const std::string&) { return std::nullopt; }).groups)
      t.push_back(g.role + ": " + g.tool);
    EXPECT_EQ(t.front(), t.front().substr(0, t.front().find(':')) + ": " + w.tool) << w.name << ": rank 0's tool";
  }
  const std::map<std::string, std::vector<std::string>> expected = {
      {"rl", {"agent: distrl-agent", "observer: distrl-observer", "learner: distrl-learner"}},
      {"rnn_dist_autograd", {"parameter server: distrl-rnn", "trainer: distrl-rnn"}},
      {"ps_batch_update", {"server: distrl-ps", "trainer: distrl-ps"}},
      {"ps_model_on_server", {"server: distrl-ps", "trainer: distrl-ps"}},
      {"ps_hybrid", {"master: distrl-ps", "server: distrl-ps", "trainer: distrl-ps"}},
      {"ps_skipgram", {"server: distrl-ps", "trainer: distrl-ps"}},
      {"pipeline_fashion_mnist", {"stage: distrl-pipeline"}},
      {"pipeline_resnet50", {"master: distrl-pipeline", "worker: distrl-pipeline"}},
      {"pipeline_resnet50_model_parallel", {"process: distrl-pipeline"}},
      {"ddp", {"data-parallel trainer: distrl-train"}},
  };
  EXPECT_EQ(tools, expected);
  EXPECT_EQ(run::workload_catalog().front().name, run::kRlWorkload);
}

TEST(WorkloadCatalogTest, EveryShippedConfigsRolesMakeItsWorld) {
  EXPECT_EQ(roles_text("ps_batch_update.yaml", {"roles.servers=2", "roles.trainers=3"}), "5: 2 servers + 3 trainers");
  EXPECT_EQ(roles_text("ps_hybrid.yaml", {"--roles.trainers", "3"}), "5: 1 master + 1 server + 3 trainers");
  EXPECT_EQ(roles_text("ps_skipgram.yaml"), "6: 2 servers + 4 trainers");  // the file's
  EXPECT_EQ(roles_text("rnn_dist_autograd.yaml", {"roles.trainers=3"}), "4: 1 parameter server + 3 trainers");
  EXPECT_EQ(roles_text("pipeline_fashion_mnist.yaml", {"roles.stages=3"}), "3: 3 stages");
  EXPECT_EQ(roles_text("pipeline_resnet50.yaml"), "3: 1 master + 2 workers");
  EXPECT_EQ(roles_text("pipeline_resnet50_model_parallel.yaml"), "1: 1 process");
  EXPECT_EQ(roles_text("ddp_toy.yaml", {"dist.world_size=4"}), "4: 4 data-parallel trainers");
  // An override naming another workload of the file's tool makes that one's world.
  EXPECT_EQ(roles_text("pipeline_fashion_mnist.yaml", {"workload=pipeline_resnet50"}), "3: 1 master + 2 workers");
  EXPECT_EQ(roles_text("cartpole.yaml", {"observers=2"}), "3: 1 agent + 2 observers");
  EXPECT_EQ(roles_text("cartpole_appo.yaml", {"roles.learners=1", "roles.agents=2", "observers=4"}),
            "7: 2 agents + 4 observers + 1 learner");
}

// The RL world as distrl-agent reads the file (its config struct, bound and loaded): agents +
// observers + learners and run.out_dir, for every RL config shipped.
TEST(WorkloadCatalogTest, EveryRlConfigsWorldIsTheAgents) {
  int seen = 0;
  for (const auto& f : std::filesystem::directory_iterator(kConfigs)) {
    const std::string file = f.path().string();
    if (f.path().extension() != ".yaml" || run::workload_named_by(file, {}) != run::kRlWorkload) continue;
    SCOPED_TRACE(file);
    distrl::rl::RlConfig c;
    distrl::Settings s("distrl-agent");
    bind(s, c);
    std::string security, key;  // the command line's keys (common/command_line.h)
    s.bind("security", &security, "");
    s.bind("security_key", &key, "");
    s.load_file(file);
    const run::World w = run::world_of(file, {});
    EXPECT_EQ(w.roles.ranks(), c.agents + c.observers + c.learners);
    EXPECT_EQ(w.roles.count("learner"), c.learners);
    EXPECT_EQ(w.out_dir, c.out_dir);
    // And the catalog over the agent's own values (its defaults included) says the same.
    const run::Roles mine = w.workload->roles([&](const std::string& key) { return s.value(key); });
    EXPECT_EQ(mine.text(), w.roles.text());
    ++seen;
  }
  EXPECT_GE(seen, 5);
}

TEST(WorkloadCatalogTest, AnUnknownWorkloadIsRefusedByName) {
  try {
    run::find_workload_entry("ps_sparse", "my.yaml");
    FAIL() << "ps_sparse was found";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("my.yaml: workload: 'ps_sparse' is not known (known: rl, rnn_dist_autograd, "),
              std::string::npos)
        << e.what();
  }
  try {
    run::world_of(kConfigs + "ps_batch_update.yaml", {"roles.trainers=many"});
    FAIL() << "roles.trainers=many was read";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("roles.trainers: 'many' is not a count"), std::string::npos) << e.what();
  }
}

TEST(WorkloadCatalogTest, TheCheckLineSaysTheWorldAndWhereItWrites) {
  const run::World w = run::world_of(kConfigs + "ps_batch_update.yaml", {"run.out_dir=/tmp/x"});
  EXPECT_EQ(w.out_dir, "/tmp/x");
  EXPECT_EQ(run::check_line("distrl-ps", "ps_batch_update", w.roles, "", w.out_dir),
            "distrl-ps: ok: ps_batch_update, 6 ranks (1 server + 5 trainers); outputs in /tmp/x");
  EXPECT_EQ(run::world_of(kConfigs + "ps_batch_update.yaml", {}).out_dir, "runs/ps_batch_update");  // the file's
  const run::World one = run::world_of(kConfigs + "pipeline_resnet50_model_parallel.yaml", {});
  EXPECT_EQ(run::check_line("distrl-pipeline", "pipeline_resnet50_model_parallel", one.roles, "a detail", "d"),
            "distrl-pipeline: ok: pipeline_resnet50_model_parallel, 1 rank (1 process; a detail); outputs in d");
}

}  // namespace
