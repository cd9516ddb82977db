#include "common/run_dir.h"

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>

#include "common/error.h"
#include "common/output_file.h"
#include "common/settings.h"

namespace distrl {
namespace fs = std::filesystem;
namespace {

constexpr const char* kIdentity = ".distrl-run";
constexpr const char* kPrevious = "previous";

// Every name a tool writes into run.out_dir (tests check that a run leaves nothing else), and
// the prefixes of those it numbers.
const char* const kOutputs[] = {
    kIdentity,      "config.yaml",   "metrics.csv",    "summary.csv",    "learning_curve.png",
    "policy.pt",    "checkpoint.pt", "checkpoints",    "timeline.json",  "timeline.png",
    "timeline.csv", "sweep.csv",     "params.pt",      "embeddings.pt",  "ps_stats.csv",
    "server.csv",   "epochs.csv",    "step_order.csv", "neighbours.txt", "snapshots"};
const char* const kOutputPrefixes[] = {"events.out.tfevents."};
// What --resume takes, in the order a refusal suggests them.
const char* const kCheckpoints[] = {"policy.pt", "checkpoint.pt", "checkpoints"};

bool is_output(const std::string& name) {
  for (const char* n : kOutputs)
    if (name == n) return true;
  for (const char* p : kOutputPrefixes)
    if (name.rfind(p, 0) == 0) return true;
  return false;
}

std::string random_id() {
  std::random_device rd;
  std::ostringstream s;
  s << std::hex;
  for (int i = 0; i < 12; ++i) s << (rd() & 0xf);
  return s.str();
}

// "metrics.csv, policy.pt and 2 TensorBoard event files"
std::string listed(const std::vector<std::string>& names) {
  std::vector<std::string> shown;
  int events = 0;
  for (const auto& n : names)
    if (n.rfind(kOutputPrefixes[0], 0) == 0) ++events;
    else if (n != kIdentity) shown.push_back(n);
  if (events > 0) shown.push_back(std::to_string(events) + " TensorBoard event file" + (events == 1 ? "" : "s"));
  std::string out;
  for (std::size_t i = 0; i < shown.size(); ++i)
    out += (i == 0 ? "" : i + 1 == shown.size() ? " and " : ", ") + shown[i];
  return out.empty() ? "its identity file" : out;
}

std::string whose(const std::optional<RunIdentity>& id) {
  if (!id) return "";
  return "; run " + id->run + " of " + id->workload + ", started " + id->started + " by " + id->tool;
}

struct Remembered {
  std::string tool, config;
  std::vector<std::string> overrides;
};
Remembered& remembered() {
  static Remembered r;
  return r;
}

}  // namespace

std::string local_time_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  return buf;
}

std::string shell_quoted(const std::string& w) {
  // Brackets are globs to the shell (model.hidden=[32,32]: zsh refuses it unquoted).
  if (!w.empty() && w.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=.,/:@%") ==
                        std::string::npos)
    return w;
  std::string q = "'";
  for (char c : w) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

ThisRun& this_run() {
  static ThisRun r;
  return r;
}

std::optional<RunIdentity> read_run_identity(const std::string& dir) {
  std::ifstream in(fs::path(dir) / kIdentity);
  if (!in) return std::nullopt;
  RunIdentity id;
  for (std::string field; in >> field;) {
    const auto eq = field.find('=');
    if (eq == std::string::npos) continue;
    const std::string k = field.substr(0, eq), v = field.substr(eq + 1);
    if (k == "run") id.run = v;
    else if (k == "workload") id.workload = v;
    else if (k == "tool") id.tool = v;
    else if (k == "started") id.started = v;
  }
  if (id.run.empty()) return std::nullopt;
  return id;
}

void write_run_identity(const std::string& dir, const RunIdentity& id) {
  write_file_atomically((fs::path(dir) / kIdentity).string(), "run=" + id.run + " workload=" + id.workload +
                                                                  " tool=" + id.tool + " started=" + id.started + "\n");
}

RunIdentity new_run_identity(const std::string& tool) {
  return RunIdentity{random_id(), this_run().workload.empty() ? "?" : this_run().workload, tool, local_time_now()};
}

std::vector<std::string> earlier_outputs(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& name : run_outputs(dir)) {
    if (name == kIdentity) continue;  // alone it is a run stopped before it wrote anything
    const auto when = fs::last_write_time(fs::path(dir) / name, ec);
    if (!ec && this_run().started != fs::file_time_type{} && when >= this_run().started) continue;
    out.push_back(name);
  }
  return out;
}

std::vector<std::string> run_outputs(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (is_output(name)) out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool restarted() {
  for (const char* v : {"DISTRL_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT", "SLURM_RESTART_COUNT"}) {
    const char* n = std::getenv(v);
    if (n != nullptr && std::atoi(n) > 0) return true;
  }
  return false;
}

bool writes_outputs_here() {
  const char* node = std::getenv("DISTRL_NODE_RANK");
  return node == nullptr || *node == '\0' || std::string(node) == "0";
}

void check_fresh(const std::string& dir, bool force) {
  const auto outputs = earlier_outputs(dir);
  if (outputs.empty() || force) return;
  const auto id = read_run_identity(dir);
  std::string resume;  // only a run of this workload can be continued by this command
  for (const char* c : kCheckpoints)
    if ((!id || id->workload == this_run().workload) && std::find(outputs.begin(), outputs.end(), c) != outputs.end()) {
      resume = ", continue that run (" + resume_command(dir, (fs::path(dir) / c).string()) + ")";
      break;
    }
  throw ConfigError("run.out_dir '" + dir + "' holds another run's outputs (" + listed(outputs) +
                    whose(read_run_identity(dir)) +
                    "): a new run there would mix with them (TensorBoard would show "
                    "both as one run). Give this run its own directory (run.out_dir=" +
                    dir + "-2)" + resume + ", or pass --force to move them aside into " + dir + "/" + kPrevious + "/");
}

std::string move_outputs_aside(const std::string& dir, const std::string& tool) {
  const auto outputs = run_outputs(dir);
  if (outputs.empty()) return "";
  const auto id = read_run_identity(dir);
  std::string stamp = id ? id->started : local_time_now();
  std::replace(stamp.begin(), stamp.end(), ':', '-');
  fs::path to = fs::path(dir) / kPrevious / stamp;
  for (int n = 2; fs::exists(to); ++n) to = fs::path(dir) / kPrevious / (stamp + "-" + std::to_string(n));
  std::error_code ec;
  fs::create_directories(to, ec);
  if (ec) throw OutputError("--force: cannot make '" + to.string() + "': " + ec.message());
  for (const auto& name : outputs) {
    fs::rename(fs::path(dir) / name, to / name, ec);
    if (ec)
      throw OutputError("--force: cannot move '" + (fs::path(dir) / name).string() + "' to '" + to.string() +
                        "': " + ec.message());
  }
  std::cerr << tool << ": --force: moved the outputs of the run that was in " << dir << " (" << listed(outputs)
            << ") to " << to.string() << "/" << std::endl;
  return to.string();
}

void check_resume(const std::string& dir, const std::string& checkpoint, const std::string& checkpoint_run,
                  const std::string& checkpoint_workload) {
  const std::string& workload = this_run().workload;
  if (!checkpoint_workload.empty() && !workload.empty() && checkpoint_workload != workload)
    throw ConfigError("--resume " + checkpoint + ": that checkpoint was written by a run of workload " +
                      checkpoint_workload + ", and this run is " + workload +
                      " (resume it with that run's config, or start without --resume)");
  if (!checkpoint_run.empty()) this_run().run = checkpoint_run;  // the run goes on under its id
  const auto id = read_run_identity(dir);
  // A directory whose identity is all there is holds nothing to append to: the claim rewrites it.
  if (checkpoint_run.empty() || !id || id->run == checkpoint_run || earlier_outputs(dir).empty()) return;
  throw ConfigError("--resume " + checkpoint + ": the checkpoint belongs to run " + checkpoint_run +
                    ", but run.out_dir '" + dir + "' holds the outputs of run " + id->run + " (" + id->workload +
                    ", started " + id->started +
                    "): its metrics would go on another run's. Resume into the "
                    "directory the checkpoint came from (run.out_dir=" +
                    fs::path(checkpoint).parent_path().string() +
                    " when it is still there), or give this run a directory of its own");
}

void remember_command(const std::string& tool, const std::string& config, const std::vector<std::string>& overrides) {
  remembered() = Remembered{tool, config, overrides};
}

std::string command_without_resume(const std::vector<std::string>& words) {
  const std::vector<std::string> w = Settings::joined(words);  // "run.out_dir = x" is one word
  std::string cmd;
  for (std::size_t i = 0; i < w.size(); ++i) {
    const std::string& a = w[i];
    if (a == "--resume" || a == "--run.out_dir") {
      ++i;  // and its value
      continue;
    }
    if (a == "--force" || a == "--check-config" || a.rfind("--resume=", 0) == 0 || a.rfind("run.out_dir=", 0) == 0 ||
        a.rfind("--run.out_dir=", 0) == 0)
      continue;
    cmd += (cmd.empty() ? "" : " ") + shell_quoted(a);
  }
  return cmd;
}

std::string resume_command(const std::string& out_dir, const std::string& checkpoint) {
  // distrl-launch exports its own command line, already without --resume, --force and run.out_dir.
  const char* launched = std::getenv("DISTRL_LAUNCH_COMMAND");
  std::string cmd;
  if (launched != nullptr && *launched != '\0') {
    cmd = launched;
  } else {
    const Remembered& r = remembered();
    std::vector<std::string> words{r.tool.empty() ? "distrl-launch" : r.tool};
    if (!r.config.empty()) words.insert(words.end(), {"--config", r.config});
    words.insert(words.end(), r.overrides.begin(), r.overrides.end());
    cmd = command_without_resume(words);
  }
  return cmd + " run.out_dir=" + shell_quoted(out_dir) + " --resume " + shell_quoted(checkpoint);
}

}  // namespace distrl
