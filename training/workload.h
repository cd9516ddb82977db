// The workload registry: every training workload a config file can name (`workload: X`), with
// its keys (bind + validate) and its run. Each entry's tool and the world its roles make come
// from the workload catalog (run/workload_catalog.h, no LibTorch), which distrl-launch reads;
// make_workload refuses a name the catalog lacks, so the two hold the same names. RL (the
// catalog's first entry) is run by agent/'s tools, beside this registry. Each mode's folder
// gives its entries (make_workload); workloads() lists them all. --check-config and the tools'
// mains ask it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/command_line.h"
#include "common/settings.h"
#include "run/workload_catalog.h"

namespace distrl::training {

// What a rank's run gets besides its keys.
struct RunContext {
  WorldFlags world;         // --rank, --world-size, ... (unset: the environment's)
  std::string resume;       // --resume ("" for a fresh run)
  std::string config_yaml;  // the effective configuration, for OUT_DIR/config.yaml
};

// A workload's configuration as one process holds it: made by Workload::make, bound, loaded,
// validated, then run once, all on the tool's main thread.
class WorkloadConfig {
 public:
  virtual ~WorkloadConfig() = default;
  // The workload's keys (all but `workload` and `security`, which the command line binds).
  virtual void bind(Settings& s) = 0;
  // After the file and the overrides: every check a rank makes before it starts that needs no
  // other rank (combinations of keys); ConfigError naming the key.
  virtual void validate() const = 0;
  // Words --check-config adds after the roles (a pipeline: its schedule and ideal bubble); "" for none.
  virtual std::string detail() const = 0;
  // This rank's part of the run, to its end or a stop (the tool then exits stop_exit_code()).
  virtual void run(const RunContext& ctx) const = 0;
};

struct Workload {
  std::string name;                           // a config's `workload` value
  const run::WorkloadEntry* entry = nullptr;  // the catalog's: the tool every rank runs, the roles
  std::string tool;                           // entry->tool
  std::function<std::unique_ptr<WorkloadConfig>()> make;
  bool resumes = false;  // takes --resume (a checkpoint of its own); the others start afresh each run
};

// w, taking --resume.
inline Workload resuming(Workload w) {
  w.resumes = true;
  return w;
}

// Each mode's entries, defined in its folder.
std::vector<Workload> rnn_workloads();       // rnn/
std::vector<Workload> ps_workloads();        // ps/
std::vector<Workload> pipeline_workloads();  // pipeline/
std::vector<Workload> ddp_workloads();       // ddp/

// Every workload, in a fixed order; names are unique.
const std::vector<Workload>& workloads();
// The workload called `name`; else ConfigError "<source>: workload: 'x' is not known (known: ...)".
const Workload& find_workload(const std::string& name, const std::string& source);
// workload_named_by: run/workload_catalog.h.
using run::workload_named_by;

// The catalog's entry of a registry workload (DISTRL_CHECK: the catalog has it).
const run::WorkloadEntry* catalog_entry(const std::string& name);

namespace detail {
// Outside any class, so that `bind` is found by argument-dependent lookup.
template <typename Config>
void bind_config(Settings& s, Config& c) {
  bind(s, c);
}
}  // namespace detail

// A registry entry over a Config struct with `void bind(Settings&, Config&)` (found by
// argument-dependent lookup) and the workload's functions; validate may be null (nothing to
// check beyond the keys' own ranges), and so may detail (no words after the roles). `name`
// must be in the catalog (run/workload_catalog.h): DISTRL_CHECK.
template <typename Config>
Workload make_workload(std::string name, void (*validate)(const Config&), void (*run)(const Config&, const RunContext&),
                       std::string (*detail)(const Config&) = nullptr) {
  class Bound final : public WorkloadConfig {
   public:
    Bound(void (*v)(const Config&), void (*r)(const Config&, const RunContext&), std::string (*d)(const Config&))
        : validate_(v), run_(r), detail_(d) {}
    void bind(Settings& s) override { detail::bind_config(s, config_); }
    void validate() const override {
      if (validate_) validate_(config_);
    }
    std::string detail() const override { return detail_ ? detail_(config_) : ""; }
    void run(const RunContext& ctx) const override { run_(config_, ctx); }

   private:
    Config config_;
    void (*validate_)(const Config&);
    void (*run_)(const Config&, const RunContext&);
    std::string (*detail_)(const Config&);
  };
  const run::WorkloadEntry* entry = catalog_entry(name);
  return Workload{std::move(name), entry, entry->tool,
                  [=] { return std::unique_ptr<WorkloadConfig>(std::make_unique<Bound>(validate, run, detail)); }};
}

// The command line of a tool that runs workloads (distrl-train, distrl-rnn, distrl-ps,
// distrl-pipeline): the keys bound are those of the workload its config file names (the
// tool's first workload when it names none of the tool's, so that loading the file says what
// is wrong), `workload` among them.
class WorkloadCommandLine : public ToolCommandLine {
 public:
  WorkloadCommandLine(const std::string& tool, const std::string& description = "",
                      const std::string& example_config = "", const std::string& resume_help = "");

  // The flags, the file and the overrides; false after --help. ConfigError.
  bool parse(int argc, char** argv);
  bool parse(const std::vector<std::string>& args);  // the same without argv[0]
  // Everything a rank checks before it starts: the security key file, the workload's checks,
  // and --resume (a workload that resumes, a checkpoint that exists and is this workload's and
  // this run directory's: common/run_dir.h). With check_only, a fresh run's directory too (the
  // claim checks it when the run starts).
  void validate() const;
  // The roles the file's keys make (the catalog's, over this tool's values of the keys).
  run::Roles roles() const;
  int world_size() const { return roles().ranks(); }
  // The tool's whole life after its flags: parse, validate, --check-config or run; the exit
  // code (0, or 128 + the signal that stopped the run).
  int main(int argc, char** argv);

 private:
  std::string tool_;
  std::string name_;  // the `workload` key
  bool resumes_ = false;
  std::unique_ptr<WorkloadConfig> config_;
};

}  // namespace distrl::training
