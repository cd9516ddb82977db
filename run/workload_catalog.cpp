#include "run/workload_catalog.h"

#include "common/error.h"
#include "common/settings.h"

namespace distrl::run {
namespace {

// A count key's value, `fallback` when unset. The tools bind these keys with ranges and refuse
// a file outside them before anyone asks here; this refuses only text that is not a number.
int count_key(const KeyReader& key, const std::string& name, int fallback) {
  const std::optional<std::string> value = key(name);
  if (!value) return fallback;
  try {
    std::size_t used = 0;
    const int v = std::stoi(*value, &used);
    if (used == value->size() && v >= 0) return v;
  } catch (const std::exception&) {}
  throw ConfigError(name + ": '" + *value + "' is not a count (an integer of at least 0)");
}

// The defaults below are those of the tools' config structs (rl/rl_config.h, training/*):
// WorkloadCatalogTest holds each to its registry entry's.
Roles rl_roles(const KeyReader& key) {
  return {{{"agent", "distrl-agent", count_key(key, "roles.agents", 1)},
           {"observer", "distrl-observer", count_key(key, "observers", 4)},
           {"learner", "distrl-learner", count_key(key, "roles.learners", 0)}}};
}
Roles rnn_roles(const KeyReader& key) {
  return {{{"parameter server", "distrl-rnn", 1}, {"trainer", "distrl-rnn", count_key(key, "roles.trainers", 1)}}};
}
Roles ps_roles(const KeyReader& key) {
  return {{{"server", "distrl-ps", count_key(key, "roles.servers", 1)},
           {"trainer", "distrl-ps", count_key(key, "roles.trainers", 2)}}};
}
Roles ps_hybrid_roles(const KeyReader& key) {
  Roles r = ps_roles(key);
  r.groups.insert(r.groups.begin(), {"master", "distrl-ps", 1});
  return r;
}
Roles pipeline_stages(const KeyReader& key) {
  return {{{"stage", "distrl-pipeline", count_key(key, "roles.stages", 2)}}};
}
Roles pipeline_master_and_two_workers(const KeyReader&) {
  return {{{"master", "distrl-pipeline", 1}, {"worker", "distrl-pipeline", 2}}};
}
Roles one_process(const KeyReader&) { return {{{"process", "distrl-pipeline", 1}}}; }
Roles ddp_roles(const KeyReader& key) {
  return {{{"data-parallel trainer", "distrl-train", count_key(key, "dist.world_size", 2)}}};
}

std::string count_of(int n, const std::string& what) { return std::to_string(n) + " " + what + (n == 1 ? "" : "s"); }

}  // namespace

int Roles::ranks() const {
  int n = 0;
  for (const RoleGroup& g : groups) n += g.count;
  return n;
}

int Roles::count(const std::string& role) const {
  for (const RoleGroup& g : groups)
    if (g.role == role) return g.count;
  return 0;
}

std::string Roles::text() const {
  std::string words;
  for (const RoleGroup& g : groups)
    if (g.count > 0) words += (words.empty() ? "" : " + ") + count_of(g.count, g.role);
  return words;
}

const std::vector<WorkloadEntry>& workload_catalog() {
  static const std::vector<WorkloadEntry> all = {
      {kRlWorkload, "distrl-agent", "runs/cartpole", rl_roles},
      {"rnn_dist_autograd", "distrl-rnn", "runs/rnn_dist_autograd", rnn_roles},
      {"ps_batch_update", "distrl-ps", "runs/ps", ps_roles},
      {"ps_model_on_server", "distrl-ps", "runs/ps", ps_roles},
      {"ps_hybrid", "distrl-ps", "runs/ps", ps_hybrid_roles},
      {"ps_skipgram", "distrl-ps", "runs/ps", ps_roles},
      {"pipeline_fashion_mnist", "distrl-pipeline", "runs/pipeline", pipeline_stages},
      {"pipeline_resnet50", "distrl-pipeline", "runs/pipeline", pipeline_master_and_two_workers},
      {"pipeline_resnet50_model_parallel", "distrl-pipeline", "runs/pipeline", one_process},
      {"ddp", "distrl-train", "runs/ddp", ddp_roles},
  };
  return all;
}

const WorkloadEntry& find_workload_entry(const std::string& name, const std::string& source) {
  std::string known;
  for (const WorkloadEntry& w : workload_catalog()) {
    if (w.name == name) return w;
    known += (known.empty() ? "" : ", ") + w.name;
  }
  throw ConfigError(source + ": workload: '" + name + "' is not known (known: " + known + ")");
}

namespace {
std::string named_by(const KeyReader& key) {
  if (auto named = key("workload")) return *named;
  return key("dist") ? "ddp" : kRlWorkload;
}
}  // namespace

std::string workload_named_by(const std::string& file, const std::vector<std::string>& overrides) {
  return named_by(Settings::peeker(file, overrides));
}

World world_of(const std::string& file, const std::vector<std::string>& overrides) {
  World w;
  const KeyReader key = Settings::peeker(file, overrides);  // the file parsed once for every key
  w.workload = &find_workload_entry(named_by(key), file);
  try {
    w.roles = w.workload->roles(key);
  } catch (const ConfigError& e) {
    throw ConfigError(file + ": " + e.what());
  }
  w.out_dir = key("run.out_dir").value_or(w.workload->out_dir);
  return w;
}

std::string check_line(const std::string& tool, const std::string& workload, const Roles& roles,
                       const std::string& detail, const std::string& out_dir) {
  const int n = roles.ranks();
  return tool + ": ok: " + workload + ", " + count_of(n, "rank") + " (" + roles.text() +
         (detail.empty() ? "" : "; " + detail) + "); outputs in " + out_dir;
}

}  // namespace distrl::run
