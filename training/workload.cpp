#include "training/workload.h"

#include <iostream>

#include "common/error.h"
#include "common/run_dir.h"
#include "common/run_lock.h"
#include "models/checkpoint.h"
#include "common/stop_signal.h"
#include "transport/bootstrap/security.h"

namespace distrl::training {

const run::WorkloadEntry* catalog_entry(const std::string& name) {
  for (const run::WorkloadEntry& e : run::workload_catalog())
    if (e.name == name) return &e;
  DISTRL_CHECK(false, "the workload registry's " + name + " is not in the catalog (run/workload_catalog.cpp)");
  return nullptr;
}

const std::vector<Workload>& workloads() {
  static const std::vector<Workload> all = [] {
    std::vector<Workload> w;
    for (auto part : {rnn_workloads, ps_workloads, pipeline_workloads, ddp_workloads})
      for (Workload& e : part()) w.push_back(std::move(e));
    return w;
  }();
  return all;
}

const Workload& find_workload(const std::string& name, const std::string& source) {
  const run::WorkloadEntry& entry = run::find_workload_entry(name, source);  // an unknown name: the catalog's error
  for (const Workload& w : workloads())
    if (w.name == entry.name) return w;
  throw ConfigError(source + ": workload: '" + name + "' is run by " + entry.tool +
                    ", not by the training registry (run it with distrl-launch --config " + source + ")");
}

WorkloadCommandLine::WorkloadCommandLine(const std::string& tool, const std::string& description,
                                         const std::string& example_config, const std::string& resume_help)
    : ToolCommandLine(tool, description, example_config, resume_help), tool_(tool) {}

bool WorkloadCommandLine::parse(int argc, char** argv) {
  // The workload the file names, if it is one of this tool's; else the tool's first, whose
  // keys then refuse the file's with its own words (a `workload` of another tool included).
  std::vector<std::string> mine;
  const Workload* chosen = nullptr;
  const auto [file, overrides] = config_and_overrides(argc, argv);
  std::string named;
  try {
    if (!file.empty()) named = workload_named_by(file, overrides);
  } catch (const ConfigError&) {  // load_file says what is wrong with the file
  }
  for (const Workload& w : workloads()) {
    if (w.tool != tool_) continue;
    mine.push_back(w.name);
    if (!chosen || w.name == named) chosen = &w;
  }
  DISTRL_CHECK(chosen, "no workload runs on " + tool_);
  name_ = chosen->name;
  resumes_ = chosen->resumes;
  config_ = chosen->make();
  settings
      .bind("workload", &name_,
            "which workload this file runs (distrl-launch starts its ranks); the keys below are " + name_ +
                "'s: --config FILE --help lists those of the file's workload")
      .choices(mine);
  config_->bind(settings);
  if (!ToolCommandLine::parse(argc, argv)) return false;
  this_run().workload = name_;  // the file's, after the overrides: what checkpoints record
  return true;
}

bool WorkloadCommandLine::parse(const std::vector<std::string>& args) {
  std::vector<std::string> copy{tool_};
  copy.insert(copy.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : copy) argv.push_back(a.data());
  return parse(static_cast<int>(argv.size()), argv.data());
}

void WorkloadCommandLine::validate() const {
  transport::use_security(flags.security, flags.security_key);  // checks the key file
  config_->validate();
  if (!flags.resume.empty()) {
    if (!resumes_)
      throw ConfigError("--resume: " + name_ +
                        " starts afresh each run and takes no checkpoint (drop --resume; "
                        "another run.out_dir keeps the last run's outputs)");
    models::check_resume_from(settings.output_dir(), flags.resume);
  }
  if (flags.check_only) RunLock::check_before_start(settings.output_dir());
}

run::Roles WorkloadCommandLine::roles() const {
  return find_workload(name_, tool_).entry->roles([this](const std::string& key) { return settings.value(key); });
}

int WorkloadCommandLine::main(int argc, char** argv) {
  if (!parse(argc, argv)) return 0;
  validate();
  if (flags.check_only) {
    std::cout << run::check_line(tool_, name_, roles(), config_->detail(), settings.output_dir()) << std::endl;
    return 0;
  }
  config_->run(RunContext{flags.world, flags.resume, settings.to_yaml()});
  return stop_exit_code();  // 0, or 128 + a SIGINT/SIGTERM that stopped the run
}

}  // namespace distrl::training
