// distrl-bench rl: PyTorch's batched-RPC RL experiment. For each observer count, run the
// agent and the observers as real processes (distrl-launch --config) in batched and in
// unbatched mode, E rounds of S steps each, and compare the agent's timings.
#include <unistd.h>

#include <cstdio>
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
};

// Runs one configuration; its output goes to a log that is shown only when it fails.
RlResult run_one(const RlBenchOptions& o, int observers, const std::string& mode, const std::string& dir) {
  std::filesystem::create_directories(dir);
  std::vector<std::string> cmd{self_dir() + "/distrl-launch", "--config", o.config,
                               "observers=" + std::to_string(observers), "agent.mode=" + mode,
                               "learner.episodes=" + std::to_string(o.episodes),
                               "learner.max_steps=" + std::to_string(o.steps), "learner.log_interval=1000000",
                               "run.out_dir=" + dir, "env.per_observer=" + std::to_string(o.envs_per_observer)};
  for (const auto& extra : o.overrides) cmd.push_back(extra);
  const std::string log = dir + "/log.txt";
  const int code = run_process(cmd, log);
  RlResult r;
  std::ifstream f(dir + "/summary.csv");
  std::string header, row;
  std::getline(f, header);
  std::getline(f, row);
  std::map<std::string, std::string> cells;
  std::stringstream hs(header), rs(row);
  for (std::string h, v; std::getline(hs, h, ',') && std::getline(rs, v, ',');) cells[h] = v;
  if (code != 0 || cells.empty()) {
    std::ifstream l(log);
    std::cerr << l.rdbuf();
    throw Error("rl: the run with " + std::to_string(observers) + " observer(s), " + mode + ", failed (its log is above)");
  }
  r.seconds = std::stod(cells["seconds"]);
  r.env_steps = std::stod(cells["env_steps"]);
  r.steps_per_s = std::stod(cells["env_steps_per_s"]);
  r.median_us = std::stod(cells["latency_median_us"]);
  r.p99_us = std::stod(cells["latency_p99_us"]);
  r.mean_batch = std::stod(cells["mean_batch"]);
  return r;
}

}  // namespace

int run_rl_bench(const RlBenchOptions& o) {
  if (!std::filesystem::exists(o.config))
    throw ConfigError("--config: no file '" + o.config + "' (run from the repository root or pass --config)");
  const auto work = std::filesystem::temp_directory_path() / ("distrl-bench-rl-" + std::to_string(::getpid()));
  std::cout << "distrl-bench rl on " << machine_description() << "\n"
            << o.episodes << " rounds x " << o.steps << " steps, " << o.envs_per_observer
            << " env(s) per observer; times taken inside the agent; latency = observers' select_action round trip\n\n";
  std::ofstream csv(o.csv);
  csv << "observers,batched_s,unbatched_s,batched_median_us,batched_p99_us,unbatched_median_us,unbatched_p99_us,"
         "batched_steps_per_s,unbatched_steps_per_s,mean_batch,speedup\n";
  std::cout << std::setw(9) << "observers" << std::setw(11) << "batched s" << std::setw(13) << "unbatched s"
            << std::setw(20) << "batched us p50/p99" << std::setw(22) << "unbatched us p50/p99" << std::setw(16)
            << "batched steps/s" << std::setw(18) << "unbatched steps/s" << std::setw(7) << "batch" << std::setw(9)
            << "speedup\n";
  for (int n : o.observers) {
    RlResult b = run_one(o, n, "batched", (work / ("b" + std::to_string(n))).string());
    RlResult u = run_one(o, n, "unbatched", (work / ("u" + std::to_string(n))).string());
    const double speedup = u.steps_per_s > 0 ? b.steps_per_s / u.steps_per_s : 0;
    std::ostringstream bl, ul;
    bl << std::fixed << std::setprecision(0) << b.median_us << " / " << b.p99_us;
    ul << std::fixed << std::setprecision(0) << u.median_us << " / " << u.p99_us;
    std::cout << std::fixed << std::setw(9) << n << std::setw(11) << std::setprecision(3) << b.seconds << std::setw(13)
              << u.seconds << std::setw(20) << bl.str() << std::setw(22) << ul.str() << std::setw(16)
              << std::setprecision(0) << b.steps_per_s << std::setw(18) << u.steps_per_s << std::setw(7)
              << std::setprecision(2) << b.mean_batch << std::setw(8) << speedup << "x\n";
    std::cout.flush();
    csv << n << ',' << b.seconds << ',' << u.seconds << ',' << b.median_us << ',' << b.p99_us << ',' << u.median_us
        << ',' << u.p99_us << ',' << b.steps_per_s << ',' << u.steps_per_s << ',' << b.mean_batch << ',' << speedup
        << '\n';
  }
  csv.close();
  std::cout << "\nwrote " << o.csv << "\n";
  if (!o.png.empty() &&
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
