// Helpers the distrl-bench suites share: worker runs under distrl-launch, their result lines,
// percentiles.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "common/error.h"
#include "tools/bench.h"
#include "tools/config_launch.h"
#include "tools/launcher.h"

namespace distrl::tools {

std::ofstream open_csv(const std::string& path) {
  const auto dir = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  std::ofstream f(path);
  if (!f)
    throw ConfigError("cannot write " + path + (ec ? ": " + ec.message() : std::string()) +
                      " (pass --csv PATH somewhere writable)");
  return f;
}

std::string temp_file(const std::string& tag) {
  return (std::filesystem::temp_directory_path() / ("distrl-bench-" + tag + "-" + std::to_string(::getpid()))).string();
}

// distrl-launch --nproc N -- distrl-bench WORKER ARGS --out FILE; returns FILE's lines.
std::vector<std::string> run_workers(int ranks, const std::string& worker, const std::vector<std::string>& args,
                                     const std::string& security, const std::string& transport) {
  const std::string out = temp_file(worker);
  // The workers inherit DISTRL_TRANSPORT from this process: set it for them, put it back after.
  const char* before = std::getenv("DISTRL_TRANSPORT");
  const std::optional<std::string> saved = before ? std::optional<std::string>(before) : std::nullopt;
  struct Restore {
    const std::optional<std::string>& saved;
    bool active;
    ~Restore() {
      if (!active) return;
      if (saved) ::setenv("DISTRL_TRANSPORT", saved->c_str(), 1);
      else ::unsetenv("DISTRL_TRANSPORT");
    }
  } restore{saved, !transport.empty()};
  if (!transport.empty()) ::setenv("DISTRL_TRANSPORT", transport.c_str(), 1);
  std::vector<std::string> cmd{self_dir() + "/distrl-launch",
                               "--nproc",
                               std::to_string(ranks),
                               "--security",
                               security,
                               "--",
                               self_dir() + "/distrl-bench",
                               worker,
                               "--out",
                               out};
  cmd.insert(cmd.end(), args.begin(), args.end());
  const std::string log = out + ".log";
  run_or_show_log(cmd, log, worker + " with " + std::to_string(ranks) + " ranks");
  std::ifstream f(out);
  std::vector<std::string> lines;
  for (std::string line; std::getline(f, line);) lines.push_back(line);
  std::remove(out.c_str());
  std::remove(log.c_str());
  if (lines.empty()) throw Error(worker + " with " + std::to_string(ranks) + " ranks exited 0 but wrote no result");
  return lines;
}

// A worker's CSV line as its n fields; anything else means the worker and this table disagree,
// which must fail the benchmark rather than drop a row.
std::vector<std::string> fields(const std::string& line, std::size_t n, const std::string& worker) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  for (std::string c; std::getline(ss, c, ',');) out.push_back(c);
  if (out.size() != n)
    throw Error(worker + " wrote a line with " + std::to_string(out.size()) + " fields, expected " + std::to_string(n) +
                ": '" + line + "'");
  return out;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(q * (v.size() - 1) + 0.5))];
}

void run_or_show_log(const std::vector<std::string>& argv, const std::string& log, const std::string& what) {
  if (run_process(argv, log) == 0) return;
  std::ifstream l(log);
  std::cerr << l.rdbuf();
  throw Error(what + " failed (its log is above)");
}

std::string find_config(const std::string& path, const std::string& flag) {
  namespace fs = std::filesystem;
  if (fs::exists(path)) return path;
  const fs::path installed = fs::path(self_dir()) / ".." / "share" / "distrl" / path;
  const fs::path in_source = fs::path(DISTRL_SOURCE_DIR) / path;
  if (fs::path(path).is_relative()) {
    if (fs::exists(installed)) return installed.lexically_normal().string();
    if (fs::exists(in_source)) return in_source.string();
  }
  throw ConfigError(flag + ": no '" + path + "' here (" + fs::current_path().string() + ")" +
                    (fs::path(path).is_relative() ? ", in the installation (" + installed.lexically_normal().string() +
                                                        ") nor in the source tree (" + in_source.string() + ")"
                                                  : "") +
                    "; pass " + flag + " with its path");
}

std::vector<std::map<std::string, std::string>> read_csv(const std::string& path) {
  std::ifstream f(path);
  std::string header;
  std::getline(f, header);
  std::vector<std::string> cols;
  std::stringstream hs(header);
  for (std::string c; std::getline(hs, c, ',');) cols.push_back(c);
  std::vector<std::map<std::string, std::string>> rows;
  for (std::string line; std::getline(f, line) && !line.empty();) {
    std::stringstream rs(line);
    std::map<std::string, std::string> row;
    std::string v;
    for (std::size_t i = 0; i < cols.size() && std::getline(rs, v, ','); ++i) row[cols[i]] = v;
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace distrl::tools
