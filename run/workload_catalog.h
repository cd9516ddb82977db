// The workload catalog: every workload a config file can name (`workload: X`), with the tool
// each of its roles runs, the roles its keys make (hence the world's size) and its run.out_dir
// default. The one list of names: distrl-launch reads it to start a world (without LibTorch:
// this library links only common/), the training registry (training/workload.h) and the agent
// take each workload's tool and roles from it, and both print their --check-config line with
// check_line. Pure functions over immutable data: any thread.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace distrl::run {

// A key's text as the workload's tool would hold it: the tool's bound value
// (Settings::value), or what a file and its overrides give (Settings::peek; nullopt: the key's
// default).
using KeyReader = std::function<std::optional<std::string>(const std::string& key)>;

// One role of a world: `count` ranks (next after the roles before it) running `tool`.
struct RoleGroup {
  std::string role;  // singular, as the words say it: "server", "parameter server"
  std::string tool;  // the executable those ranks run (distrl-launch finds it beside itself)
  int count = 0;
};

// The ranks a workload's roles make, in rank order.
struct Roles {
  std::vector<RoleGroup> groups;

  int ranks() const;
  // The ranks of `role` (0 when it has none).
  int count(const std::string& role) const;
  // "1 server + 2 trainers" (a role of no ranks left out).
  std::string text() const;
};

struct WorkloadEntry {
  std::string name;     // a config's `workload` value
  std::string tool;     // rank 0's tool; every rank's but rl's
  std::string out_dir;  // run.out_dir when the file names none
  // The roles the workload's keys make; ConfigError naming a key that is not a count.
  Roles (*roles)(const KeyReader& key);
};

// The rl workload's name ("rl": a config that names no workload and has no `dist` section).
inline constexpr const char* kRlWorkload = "rl";

// Every workload: rl first, then the training registry's in its order; names are unique.
const std::vector<WorkloadEntry>& workload_catalog();
// The workload called `name`; else ConfigError "<source>: workload: 'x' is not known (known: rl, ...)".
const WorkloadEntry& find_workload_entry(const std::string& name, const std::string& source);

// The workload a config file names, with its overrides: its `workload` key, else "ddp" for a
// file with a `dist` section (the supervised trainer's configs name none), else "rl" (a file of
// before `workload: rl`; the agent says so). ConfigError when the file cannot be read as YAML.
std::string workload_named_by(const std::string& file, const std::vector<std::string>& overrides);

// What a config file runs, read as distrl-launch reads it (the tool's --check-config has
// validated the keys): the workload its file and overrides name, its roles and run.out_dir.
struct World {
  const WorkloadEntry* workload = nullptr;
  Roles roles;
  std::string out_dir;
};
World world_of(const std::string& file, const std::vector<std::string>& overrides);

// The line a tool's --check-config ends with when it accepts the file:
// "TOOL: ok: WORKLOAD, N ranks (ROLES[; DETAIL]); outputs in DIR".
std::string check_line(const std::string& tool, const std::string& workload, const Roles& roles,
                       const std::string& detail, const std::string& out_dir);

}  // namespace distrl::run
