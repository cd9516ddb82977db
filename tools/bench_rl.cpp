// distrl-bench rl: PyTorch's batched-RPC RL experiment, made to say something. For each model
// and observer count, run the agent and the observers as real processes (distrl-launch
// --config) in batched and in unbatched mode, alternating, with learning off (both modes serve
// the same fixed policy: rounds x observers x steps, nearly fixed work), and split the observers'
// round trip into what the agent measured: queue wait, forward, and the rest (transport and
// reply), with the forward's cost per row.
#include <unistd.h>

#include <cstdio>
#include <functional>
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
  double agent_cpu_us = 0, observer_cpu_us = 0;                              // per act request
  double mean_us = 0, queue_us = 0, forward_us = 0, forward_per_row_us = 0;  // the round trip's parts
  double reply_us() const { return mean_us - queue_us - forward_us; }
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
  std::vector<std::string> cmd{self_dir() + "/distrl-launch",
                               "--config",
                               o.config,
                               "observers=" + std::to_string(observers),
                               "agent.mode=" + mode,
                               "learner.rounds=" + std::to_string(o.episodes),
                               "learner.max_steps=" + std::to_string(o.steps),
                               "learner.log_interval=1000000",
                               "learner.learn=false",
                               "run.tensorboard=false",
                               "run.out_dir=" + dir,
                               "env.per_observer=" + std::to_string(o.envs_per_observer)};
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
  r.mean_us = std::stod(cells["latency_mean_us"]);
  r.queue_us = std::stod(cells["queue_wait_us"]);
  r.forward_us = std::stod(cells["forward_us"]);
  r.forward_per_row_us = std::stod(cells["forward_us_per_row"]);
  return r;
}

// The run with the median env-steps/s (the upper median of an even count).
RlResult median_run(std::vector<RlResult> runs) {
  std::sort(runs.begin(), runs.end(),
            [](const RlResult& a, const RlResult& b) { return a.steps_per_s < b.steps_per_s; });
  return runs[runs.size() / 2];
}

// " 12.3 / 4.5": a batched and an unbatched figure.
std::string pair(double b, double u, int digits = 0) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(digits) << b << " / " << u;
  return s.str();
}

// One PNG per model (a sweep of models would mix its rows in one chart): env-steps/s, the round
// trip's parts and the forward's cost per row against observers, batched and unbatched.
void plot_model(const std::string& csv, const std::string& png, const std::string& model) {
  const std::string sub = csv + "." + std::to_string(std::hash<std::string>{}(model)) + ".csv";
  {
    std::ifstream in(csv);
    std::ofstream out(sub);
    std::string line;
    std::getline(in, line);
    out << line << "\n";
    while (std::getline(in, line))
      if (line.rfind(model + ",", 0) == 0) out << line << "\n";
  }
  const bool drawn = plot_csv(
      sub, png,
      {{"env-steps/s, " + model,
        "observers",
        {{"observers", "batched_steps_per_s", "batched"}, {"observers", "unbatched_steps_per_s", "unbatched"}}},
       {"round trip, mean us",
        "observers",
        {{"observers", "batched_queue_us", "batched: queue wait"},
         {"observers", "batched_forward_us", "batched: forward"},
         {"observers", "batched_reply_us", "batched: transport + reply"},
         {"observers", "unbatched_forward_us", "unbatched: forward"},
         {"observers", "unbatched_reply_us", "unbatched: transport + reply + wait behind others"}}},
       {"forward per row, us",
        "observers",
        {{"observers", "batched_forward_per_row_us", "batched"},
         {"observers", "unbatched_forward_per_row_us", "unbatched"}}}});
  std::remove(sub.c_str());
  if (drawn) std::cout << "plot: " << png << "\n";
}

}  // namespace

int run_rl_bench(const RlBenchOptions& options) {
  RlBenchOptions o = options;
  o.config = find_config(o.config, "--config");
  const auto work = std::filesystem::temp_directory_path() / ("distrl-bench-rl-" + std::to_string(::getpid()));
  std::cout << "distrl-bench rl on " << machine_description() << "\n"
            << o.episodes << " rounds x " << o.steps << " steps per observer, " << o.envs_per_observer
            << " env(s) per observer, learning off (the same fixed policy in both modes); each cell the median of "
            << o.repeats << " runs per mode (alternating)\n"
            << "round trip = an observer's act call, split by the agent's clocks: queue wait (until its "
               "batch closes) + forward (the pass it waited for) + the rest (transport both ways, decode, reply; "
               "unbatched also the wait behind other observers' forwards on the serving thread)\n"
            << "fwd/row = a forward pass's time over its rows; cpu = CPU us per request (agent: serving threads; "
               "observer: its process, env steps included); b / u = batched / unbatched\n\n";
  for (const auto& m : o.models) model_overrides(m);  // refuse a bad name before anything runs
  std::ofstream csv = open_csv(o.csv);
  csv << "model,observers,batched_env_steps,unbatched_env_steps,batched_s,unbatched_s,batched_steps_per_s,"
         "unbatched_steps_per_s,speedup,mean_batch,batched_mean_us,unbatched_mean_us,batched_median_us,"
         "unbatched_median_us,batched_p99_us,unbatched_p99_us,batched_queue_us,batched_forward_us,batched_reply_us,"
         "unbatched_forward_us,unbatched_reply_us,batched_forward_per_row_us,unbatched_forward_per_row_us,"
         "batched_agent_cpu_us,unbatched_agent_cpu_us,batched_observer_cpu_us,unbatched_observer_cpu_us\n";
  std::cout << std::left << std::setw(15) << "model" << std::right << std::setw(4) << "obs" << std::setw(17)
            << "env-steps/s b/u" << std::setw(8) << "speedup" << std::setw(7) << "batch" << std::setw(15)
            << "rtt mean b/u" << std::setw(8) << "queue b" << std::setw(15) << "forward b/u" << std::setw(15)
            << "rest b/u" << std::setw(15) << "fwd/row b/u" << std::setw(13) << "agent cpu"
            << "\n";
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
      std::ostringstream sp;
      sp << std::fixed << std::setprecision(2) << speedup << "x";
      std::cout << std::left << std::setw(15) << model << std::right << std::setw(4) << n << std::setw(17)
                << pair(b.steps_per_s, u.steps_per_s) << std::setw(8) << sp.str() << std::setw(7) << std::fixed
                << std::setprecision(2) << b.mean_batch << std::setw(15) << pair(b.mean_us, u.mean_us) << std::setw(8)
                << std::setprecision(0) << b.queue_us << std::setw(15) << pair(b.forward_us, u.forward_us)
                << std::setw(15) << pair(b.reply_us(), u.reply_us()) << std::setw(15)
                << pair(b.forward_per_row_us, u.forward_per_row_us, 1) << std::setw(13)
                << pair(b.agent_cpu_us, u.agent_cpu_us) << std::defaultfloat << "\n";
      std::cout.flush();
      csv << model << ',' << n << ',' << b.env_steps << ',' << u.env_steps << ',' << b.seconds << ',' << u.seconds
          << ',' << b.steps_per_s << ',' << u.steps_per_s << ',' << speedup << ',' << b.mean_batch << ',' << b.mean_us
          << ',' << u.mean_us << ',' << b.median_us << ',' << u.median_us << ',' << b.p99_us << ',' << u.p99_us << ','
          << b.queue_us << ',' << b.forward_us << ',' << b.reply_us() << ',' << u.forward_us << ',' << u.reply_us()
          << ',' << b.forward_per_row_us << ',' << u.forward_per_row_us << ',' << b.agent_cpu_us << ','
          << u.agent_cpu_us << ',' << b.observer_cpu_us << ',' << u.observer_cpu_us << '\n';
    }
  }
  csv.close();
  std::cout << "\nwrote " << o.csv << "\n";
  if (!o.png.empty())
    for (const auto& model : o.models) {
      std::string png = o.png;
      if (o.models.size() > 1) {  // rl.png -> rl-mlp-256x256.png
        std::string name = model;
        std::replace(name.begin(), name.end(), ':', '-');
        const auto dot = png.rfind('.');
        png = (dot == std::string::npos ? png : png.substr(0, dot)) + "-" + name + ".png";
      }
      plot_model(o.csv, png, model);
    }
  std::filesystem::remove_all(work);
  return 0;
}

}  // namespace distrl::tools
