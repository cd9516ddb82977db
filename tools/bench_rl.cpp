// distrl-bench rl: PyTorch's batched-RPC RL experiment. For each observer count, run the
// agent and the observers as real processes (distrl-launch --config) in batched and in
// unbatched mode, E rounds of S steps each, and compare the agent's timings.
#include <unistd.h>

#include <cstdio>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>

#include "common/error.h"
#include "tools/bench.h"
#include "common/plot.h"
#include "tools/launcher.h"
#include "tools/config_launch.h"

namespace distrl::tools {
namespace {

struct RlResult {
  double seconds = 0, env_steps = 0, steps_per_s = 0, median_us = 0, p99_us = 0, mean_batch = 0;
  double agent_cpu_us = 0, observer_cpu_us = 0;  // per select_action request
};

// "tutorial" or "mlp:256x256" -> the config overrides; ConfigError for anything else.
std::vector<std::string> model_overrides(const std::string& m) {
  if (m == "tutorial") return {"model.name=tutorial"};
  if (m.rfind("mlp:", 0) == 0 && m.size() > 4) {
    std::string widths = m.substr(4);
    for (char& c : widths) {
      if (c == 'x') c = ',';
      else if (c < '0' || c > '9') throw ConfigError("--models: '" + m + "' is not mlp:WxW.. (e.g. mlp:256x256)");
    }
    return {"model.name=mlp", "model.hidden=[" + widths + "]"};
  }
  throw ConfigError("--models: '" + m + "' is neither tutorial nor mlp:WxW.. (e.g. mlp:256x256)");
}

// Runs one configuration; its output goes to a log that is shown only when it fails.
RlResult run_one(const RlBenchOptions& o, const std::string& model, int observers, const std::string& mode,
                 const std::string& dir) {
  std::filesystem::create_directories(dir);
  std::vector<std::string> cmd{self_dir() + "/distrl-launch", "--config", o.config,
                               "observers=" + std::to_string(observers), "agent.mode=" + mode,
                               "learner.rounds=" + std::to_string(o.episodes),
                               "learner.max_steps=" + std::to_string(o.steps), "learner.log_interval=1000000",
                               "run.out_dir=" + dir, "env.per_observer=" + std::to_string(o.envs_per_observer)};
  for (const auto& m : model_overrides(model)) cmd.push_back(m);
  for (const auto& extra : o.overrides) cmd.push_back(extra);
  const std::string what = "rl: the run with " + model + ", " + std::to_string(observers) + " observer(s), " + mode;
  run_or_show_log(cmd, dir + "/log.txt", what);
  auto rows = read_csv(dir + "/summary.csv");
  if (rows.empty()) throw Error(what + " wrote no " + dir + "/summary.csv (its log: " + dir + "/log.txt)");
  auto& cells = rows.front();
  RlResult r;
  r.seconds = std::stod(cells["seconds"]);
  r.env_steps = std::stod(cells["env_steps"]);
  r.steps_per_s = std::stod(cells["env_steps_per_s"]);
  r.median_us = std::stod(cells["latency_median_us"]);
  r.p99_us = std::stod(cells["latency_p99_us"]);
  r.mean_batch = std::stod(cells["mean_batch"]);
  r.agent_cpu_us = std::stod(cells["agent_cpu_us_per_request"]);
  r.observer_cpu_us = std::stod(cells["observer_cpu_us_per_request"]);
  return r;
}

// The run with the median env-steps/s (the upper median of an even count).
RlResult median_run(std::vector<RlResult> runs) {
  std::sort(runs.begin(), runs.end(), [](const RlResult& a, const RlResult& b) { return a.steps_per_s < b.steps_per_s; });
  return runs[runs.size() / 2];
}

}  // namespace

int run_rl_bench(const RlBenchOptions& options) {
  RlBenchOptions o = options;
  o.config = find_config(o.config, "--config");
  const auto work = std::filesystem::temp_directory_path() / ("distrl-bench-rl-" + std::to_string(::getpid()));
  std::cout << "distrl-bench rl on " << machine_description() << "\n"
            << o.episodes << " rounds x " << o.steps << " steps, " << o.envs_per_observer
            << " env(s) per observer; each cell the median of " << o.repeats
            << " runs per mode (alternating); times taken inside the agent;\nlatency = observers' select_action round trip;\n"
            << "cpu us/req = CPU time per select_action request (agent: its serving threads; observer: its process, env "
               "steps included), batched / unbatched\n\n";
  for (const auto& m : o.models) model_overrides(m);  // refuse a bad name before anything runs
  std::ofstream csv = open_csv(o.csv);
  csv << "model,observers,batched_s,unbatched_s,batched_median_us,batched_p99_us,unbatched_median_us,unbatched_p99_us,"
         "batched_steps_per_s,unbatched_steps_per_s,mean_batch,speedup,batched_agent_cpu_us,unbatched_agent_cpu_us,"
         "batched_observer_cpu_us,unbatched_observer_cpu_us\n";
  std::cout << std::left << std::setw(16) << "model" << std::right << std::setw(9) << "observers" << std::setw(20)
            << "batched us p50/p99" << std::setw(22) << "unbatched us p50/p99" << std::setw(16) << "batched steps/s"
            << std::setw(18) << "unbatched steps/s" << std::setw(7) << "batch" << std::setw(9) << "speedup"
            << std::setw(22) << "agent cpu us/req b/u" << std::setw(16) << "obs cpu us/req" << "\n";
  for (const auto& model : o.models) {
    for (int n : o.observers) {
      const std::string tag = std::to_string(&model - o.models.data()) + "-" + std::to_string(n);
      std::vector<RlResult> bs, us;
      for (int k = 0; k < o.repeats; ++k) {
        bs.push_back(run_one(o, model, n, "batched", (work / ("b" + tag + "-" + std::to_string(k))).string()));
        us.push_back(run_one(o, model, n, "unbatched", (work / ("u" + tag + "-" + std::to_string(k))).string()));
      }
      const RlResult b = median_run(bs), u = median_run(us);
      const double speedup = u.steps_per_s > 0 ? b.steps_per_s / u.steps_per_s : 0;
      std::ostringstream bl, ul, cpu, ocpu;
      bl << std::fixed << std::setprecision(0) << b.median_us << " / " << b.p99_us;
      ul << std::fixed << std::setprecision(0) << u.median_us << " / " << u.p99_us;
      cpu << std::fixed << std::setprecision(0) << b.agent_cpu_us << " / " << u.agent_cpu_us;
      ocpu << std::fixed << std::setprecision(0) << b.observer_cpu_us << " / " << u.observer_cpu_us;
      std::cout << std::left << std::setw(16) << model << std::right << std::fixed << std::setw(9) << n
                << std::setw(20) << bl.str() << std::setw(22) << ul.str() << std::setw(16) << std::setprecision(0)
                << b.steps_per_s << std::setw(18) << u.steps_per_s << std::setw(7) << std::setprecision(2)
                << b.mean_batch << std::setw(8) << speedup << "x" << std::setw(22) << cpu.str() << std::setw(16)
                << ocpu.str() << "\n";
      std::cout.flush();
      csv << model << ',' << n << ',' << b.seconds << ',' << u.seconds << ',' << b.median_us << ',' << b.p99_us << ','
          << u.median_us << ',' << u.p99_us << ',' << b.steps_per_s << ',' << u.steps_per_s << ',' << b.mean_batch
          << ',' << speedup << ',' << b.agent_cpu_us << ',' << u.agent_cpu_us << ',' << b.observer_cpu_us << ','
          << u.observer_cpu_us << '\n';
    }
  }
  csv.close();
  std::cout << "\nwrote " << o.csv << "\n";
  if (!o.png.empty() && o.models.size() == 1 &&  // one curve per mode: a sweep of models stays a table
      plot_csv(o.csv, o.png,
               {{"env-steps/s (higher is better)", "observers",
                 {{"observers", "batched_steps_per_s", "batched"}, {"observers", "unbatched_steps_per_s", "unbatched"}}},
                {"select_action round trip, median us", "observers",
                 {{"observers", "batched_median_us", "batched"}, {"observers", "unbatched_median_us", "unbatched"}}}}))
    std::cout << "plot: " << o.png << "\n";
  std::filesystem::remove_all(work);
  return 0;
}

}  // namespace distrl::tools
