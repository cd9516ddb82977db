// distrl-bench soak: the RL run left going for a long time, side by side in each serving mode
// (distrl-launch --config, agent + N observers each), its processes' resident memory, open file
// descriptors and threads sampled from /proc every interval. What grows after the warm-up is a
// leak (memory, sockets, pending calls): the summary compares the first sample after the warm-up
// with the last, and the plot shows the whole run. Stops the runs with SIGTERM at the end (they
// save and write their outputs: the graceful stop is checked too).
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "common/error.h"
#include "common/plot.h"
#include "tools/bench.h"
#include "tools/config_launch.h"
#include "tools/launcher.h"

namespace distrl::tools {
namespace {

using Clock = std::chrono::steady_clock;

struct ProcSample {
  std::string comm;  // distrl-agent, distrl-observe(r), distrl-launch (hosts the store)
  double rss_mb = 0;
  int fds = 0, threads = 0;
};

// Every live descendant of `root` (and root itself), read from /proc.
std::vector<ProcSample> sample_tree(pid_t root) {
  std::map<pid_t, pid_t> parent;
  std::map<pid_t, std::string> comm;
  if (DIR* d = ::opendir("/proc")) {
    while (dirent* e = ::readdir(d)) {
      const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
      if (pid <= 0) continue;
      std::ifstream stat("/proc/" + std::string(e->d_name) + "/stat");
      std::string line;
      if (!std::getline(stat, line)) continue;
      const auto open = line.find('('), close = line.rfind(')');
      if (open == std::string::npos || close == std::string::npos) continue;
      std::istringstream rest(line.substr(close + 2));
      char state;
      pid_t ppid = 0;
      rest >> state >> ppid;
      parent[pid] = ppid;
      comm[pid] = line.substr(open + 1, close - open - 1);
    }
    ::closedir(d);
  }
  std::vector<ProcSample> out;
  for (const auto& [pid, ppid] : parent) {
    pid_t p = pid;
    while (p > 1 && p != root) p = parent.count(p) ? parent[p] : 0;
    if (p != root) continue;
    ProcSample s;
    s.comm = comm[pid];
    std::ifstream status("/proc/" + std::to_string(pid) + "/status");
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("VmRSS:", 0) == 0) s.rss_mb = std::stod(line.substr(6)) / 1024.0;
      if (line.rfind("Threads:", 0) == 0) s.threads = std::stoi(line.substr(8));
    }
    std::error_code ec;
    for (auto it = std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec);
         !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
      ++s.fds;
    out.push_back(s);
  }
  return out;
}

struct Run {
  std::string mode, dir;
  pid_t launcher = -1;
  int code = -1;  // once it exited
};

// The columns sampled for each mode, in CSV order: (name, value of one sample).
const std::vector<std::string> kSeries = {"agent_rss_mb", "agent_fds",       "agent_threads", "observer_rss_mb",
                                          "observer_fds", "launcher_rss_mb", "launcher_fds",  "processes"};

std::map<std::string, double> summarize(const std::vector<ProcSample>& tree) {
  std::map<std::string, double> v;
  for (const auto& s : kSeries) v[s] = 0;
  for (const auto& p : tree) {
    v["processes"] += 1;
    if (p.comm == "distrl-agent") {
      v["agent_rss_mb"] = p.rss_mb;
      v["agent_fds"] = p.fds;
      v["agent_threads"] = p.threads;
    } else if (p.comm.rfind("distrl-observe", 0) == 0) {  // the largest observer
      v["observer_rss_mb"] = std::max(v["observer_rss_mb"], p.rss_mb);
      v["observer_fds"] = std::max(v["observer_fds"], static_cast<double>(p.fds));
    } else if (p.comm == "distrl-launch") {
      v["launcher_rss_mb"] = p.rss_mb;
      v["launcher_fds"] = p.fds;
    }
  }
  return v;
}

using Samples = std::map<std::string, std::vector<std::pair<double, std::map<std::string, double>>>>;  // by mode

// One distrl-launch per mode, each writing under out_dir/<mode>.
std::vector<Run> start_runs(const SoakBenchOptions& o) {
  std::vector<Run> runs;
  for (const auto& mode : o.modes) {
    Run r;
    r.mode = mode;
    r.dir = o.out_dir + "/" + mode;
    std::filesystem::create_directories(r.dir);
    std::vector<std::string> cmd{self_dir() + "/distrl-launch",
                                 "--force",
                                 "--config",
                                 o.config,
                                 "observers=" + std::to_string(o.observers),
                                 "agent.mode=" + mode,
                                 "learner.rounds=100000000",
                                 "learner.target_reward=1000000",
                                 "learner.log_interval=100",
                                 "run.out_dir=" + r.dir};
    for (const auto& extra : o.overrides) cmd.push_back(extra);
    r.launcher = start_process(cmd, r.dir + "/log.txt");
    runs.push_back(r);
  }
  return runs;
}

void write_headers(std::ostream& csv, const std::vector<Run>& runs) {
  csv << "minutes";
  for (const auto& r : runs) {
    csv << ',' << r.mode << "_rounds," << r.mode << "_env_steps";
    for (const auto& s : kSeries) csv << ',' << r.mode << '_' << s;
  }
  csv << '\n';
  std::cout << std::left << std::setw(8) << "minutes";
  for (const auto& r : runs)
    std::cout << std::setw(11) << r.mode << std::right << std::setw(9) << "rounds" << std::setw(13) << "agent MB"
              << std::setw(11) << "fds" << std::setw(13) << "observer MB" << std::setw(9) << "fds" << std::setw(13)
              << "launch MB"
              << "   " << std::left;
  std::cout << "\n";
}

// One sample of every run at `minutes`: a CSV row and a table line; kept for the summary once
// past the warm-up.
void sample_runs(std::ostream& csv, std::vector<Run>& runs, double minutes, double warmup_minutes, Samples& samples) {
  csv << std::fixed << std::setprecision(2) << minutes;
  std::cout << std::left << std::fixed << std::setprecision(1) << std::setw(8) << minutes;
  for (auto& r : runs) {
    auto v = summarize(sample_tree(r.launcher));
    auto rows = read_csv(r.dir + "/metrics.csv");  // its last row: the run's progress
    const std::string rounds = rows.empty() ? "" : rows.back()["round"];
    const std::string steps = rows.empty() ? "" : rows.back()["env_steps"];
    csv << ',' << rounds << ',' << steps;
    for (const auto& s : kSeries) csv << ',' << v[s];
    std::cout << std::setw(11) << r.mode << std::right << std::setw(9) << rounds << std::setw(13) << v["agent_rss_mb"]
              << std::setw(11) << std::setprecision(0) << v["agent_fds"] << std::setw(13) << std::setprecision(1)
              << v["observer_rss_mb"] << std::setw(9) << std::setprecision(0) << v["observer_fds"] << std::setw(13)
              << std::setprecision(1) << v["launcher_rss_mb"] << "   " << std::left;
    if (minutes >= warmup_minutes) samples[r.mode].push_back({minutes, v});
  }
  csv << '\n';
  csv.flush();
  std::cout << std::endl;
}

// The graceful stop: every run finishes its round, saves and exits 143.
void stop_runs(std::vector<Run>& runs) {
  for (auto& r : runs) ::kill(r.launcher, SIGTERM);
  for (auto& r : runs) {
    r.code = wait_process(r.launcher);
    const bool saved = std::filesystem::exists(r.dir + "/policy.pt") && std::filesystem::exists(r.dir + "/summary.csv");
    std::cout << r.mode << ": SIGTERM -> exit " << r.code << (r.code == 143 ? " (graceful)" : " (expected 143)")
              << ", policy.pt + summary.csv " << (saved ? "written" : "MISSING") << "\n";
  }
}

// First sample after the warm-up -> last, and the largest, per run and series; false when
// something grew (or too few samples were taken to tell).
bool report_growth(const std::vector<Run>& runs, const Samples& samples) {
  bool flat = true;
  for (const auto& r : runs) {
    const auto found = samples.find(r.mode);
    if (found == samples.end() || found->second.size() < 2) {
      std::cout << r.mode << ": fewer than 2 samples after the warm-up (raise --minutes)\n";
      flat = false;
      continue;
    }
    const auto& ss = found->second;
    for (const auto& s : kSeries) {
      double hi = 0;
      for (const auto& x : ss) hi = std::max(hi, x.second.at(s));
      const double first = ss.front().second.at(s), last = ss.back().second.at(s);
      const bool is_mb = s.find("_mb") != std::string::npos;
      // Growth worth a look: memory up by more than 5 MB and 5 %; a descriptor or thread more.
      const bool grows = is_mb ? (last - first > 5 && last > first * 1.05) : last > first;
      if (grows && s != "processes") flat = false;
      std::cout << "  " << std::left << std::setw(11) << r.mode << std::setw(17) << s << std::right << std::fixed
                << std::setprecision(is_mb ? 1 : 0) << std::setw(9) << first << " -> " << std::setw(9) << last
                << "   max " << std::setw(9) << hi << (grows ? "   GROWS" : "") << "\n";
    }
  }
  return flat;
}

void plot_runs(const std::vector<Run>& runs, const std::string& csv_path, const std::string& out_dir) {
  std::vector<Series> rss, fds;
  for (const auto& r : runs) {
    rss.emplace_back("minutes", r.mode + "_agent_rss_mb", r.mode + " agent");
    rss.emplace_back("minutes", r.mode + "_observer_rss_mb", r.mode + " largest observer");
    fds.emplace_back("minutes", r.mode + "_agent_fds", r.mode + " agent");
    fds.emplace_back("minutes", r.mode + "_observer_fds", r.mode + " largest observer");
  }
  if (plot_csv(csv_path, out_dir + "/soak.png",
               {{"resident memory, MB", "minutes", rss}, {"open file descriptors", "minutes", fds}}))
    std::cout << "plot: " << out_dir << "/soak.png\n";
}

}  // namespace

int run_soak_bench(const SoakBenchOptions& options) {
  SoakBenchOptions o = options;
  o.config = find_config(o.config, "--config");
  if (o.warmup_minutes >= o.minutes)
    throw ConfigError("--warmup-minutes (" + std::to_string(o.warmup_minutes) + ") must be less than --minutes (" +
                      std::to_string(o.minutes) + ")");
  std::filesystem::create_directories(o.out_dir);
  const std::string csv_path = o.out_dir + "/soak.csv";
  std::ofstream csv = open_csv(csv_path);
  std::cout << "distrl-bench soak on " << machine_description() << "\n"
            << o.minutes << " min, " << o.observers << " observers per run, modes side by side; a sample every "
            << o.interval_s << " s; warm-up " << o.warmup_minutes << " min; outputs in " << o.out_dir << "\n\n";

  std::vector<Run> runs = start_runs(o);
  // Whatever happens below, no run is left behind.
  struct Reaper {
    std::vector<Run>* runs;
    ~Reaper() {
      for (auto& r : *runs)
        if (r.code < 0) {
          ::kill(r.launcher, SIGTERM);  // it stops its ranks (SIGKILL after its grace)
          wait_process(r.launcher);
        }
    }
  } reaper{&runs};
  write_headers(csv, runs);

  Samples samples;  // after warm-up
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration<double, std::ratio<60>>(o.minutes);
  for (auto next = start + std::chrono::duration<double>(o.interval_s);;
       next += std::chrono::duration<double>(o.interval_s)) {
    while (Clock::now() < std::min(next, end)) {
      for (auto& r : runs)
        if (r.code < 0 && (r.code = wait_process(r.launcher, false)) >= 0)
          throw Error("soak: the " + r.mode + " run ended early (exit " + std::to_string(r.code) +
                      "); its log: " + r.dir + "/log.txt");
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    if (Clock::now() >= end) break;
    sample_runs(csv, runs, std::chrono::duration<double, std::ratio<60>>(Clock::now() - start).count(),
                o.warmup_minutes, samples);
  }
  stop_runs(runs);
  csv.close();

  std::cout << "\nafter the warm-up (" << o.warmup_minutes << " min): first sample -> last, largest\n";
  const bool flat = report_growth(runs, samples);
  std::cout << (flat ? "\nflat after the warm-up\n" : "\nsomething grew after the warm-up (above)\n") << "wrote "
            << csv_path << "\n";
  plot_runs(runs, csv_path, o.out_dir);
  return 0;
}

}  // namespace distrl::tools
