// A run's output directory holds one run's outputs, never two runs' mixed.
//
// A fresh run takes a directory that holds no run's outputs (metrics.csv, a checkpoint,
// TensorBoard event files, ...: `run_outputs`), or, with --force, moves the outputs there aside
// into OUT_DIR/previous/<when that run started>/ (TensorBoard then shows them as a run of their
// own). It writes OUT_DIR/.distrl-run, the directory's identity: a random run id, the workload,
// the tool and when it started. Every checkpoint carries the id and the workload
// (models/checkpoint.h), so a --resume can check that the checkpoint belongs to the outputs it
// appends to (`check_resume`), and a checkpoint of another workload is refused by name.
//
// RunLock (common/run_lock.h) applies the fresh-run rule when it claims the directory; tools call
// `check_fresh` and `check_resume` in --check-config too, so distrl-launch refuses before
// anything starts.
//
// `this_run()` is what this process runs (its main sets the workload and whether it resumes
// before anything is claimed; the claim sets the run id): process-wide, written on the main
// thread before other threads start, read after.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace distrl {

struct RunIdentity {
  std::string run;       // 12 hex digits, random per fresh run; a resumed run keeps its own
  std::string workload;  // "rl", "ddp", "pipeline_fashion_mnist", ...
  std::string tool;      // the tool that started it
  std::string started;   // local time, 2026-11-27T15:02:11
};

struct ThisRun {
  std::string workload;
  bool resume = false;
  bool check_only = false;  // --check-config: nothing runs (checks of inputs every rank may lack)
  std::string run;          // set by the claim (fresh: a new id; resume: the directory's or the checkpoint's)
  // When this process started (its command line was read): a directory's outputs from then on
  // are this run's own (another rank's), not an earlier run's.
  std::filesystem::file_time_type started{};
};
ThisRun& this_run();

// This machine's local time, 2026-11-27T15:02:11.
std::string local_time_now();

// OUT_DIR/.distrl-run; nullopt when absent or unreadable.
std::optional<RunIdentity> read_run_identity(const std::string& dir);
// Writes dir/.distrl-run (atomically). OutputError when it cannot.
void write_run_identity(const std::string& dir, const RunIdentity& id);
// A new identity for a fresh run of this_run().workload by `tool`, now.
RunIdentity new_run_identity(const std::string& tool);

// Whether this process is a rank a launcher or job scheduler started again after a failure
// (DISTRL_RESTART_COUNT, TORCHELASTIC_RESTART_COUNT or SLURM_RESTART_COUNT above 0): the
// directory's outputs are its own run's.
bool restarted();

// run_outputs(dir) less what this run wrote (modified since this_run().started) and the
// identity file (alone, it is a run stopped before it wrote anything).
std::vector<std::string> earlier_outputs(const std::string& dir);

// The entries of dir that are a run's outputs (what the tools write: metrics.csv, summary.csv,
// config.yaml, policy.pt, checkpoints, event files, plots, ...; .distrl-run too), sorted. The
// user's own files, the claim's lock file and previous/ are not.
std::vector<std::string> run_outputs(const std::string& dir);

// Whether this process's node writes the run's outputs: across nodes only node 0 does (its
// launcher claims the directory; on a shared file system another node would find node 0's
// claim and identity there already). DISTRL_NODE_RANK, which distrl-launch sets; unset: yes.
bool writes_outputs_here();

// A fresh run into dir: ConfigError naming the outputs there, whose run they are and the three
// ways on (another run.out_dir, --resume with the checkpoint there, --force), unless dir holds
// none or `force`, or !writes_outputs_here().
void check_fresh(const std::string& dir, bool force);
// With force: moves every run output of dir into dir/previous/<started>/ (said on stderr, by
// `tool`); returns where, "" when there was nothing. OutputError when a move fails.
std::string move_outputs_aside(const std::string& dir, const std::string& tool);

// A --resume from `checkpoint` into dir: ConfigError when the checkpoint was written by another
// workload than this_run()'s, or belongs to another run than the one whose outputs dir holds
// (both ids known), naming both and the fix. Checkpoints from before ids were recorded pass.
// Sets this_run().run to the checkpoint's id (the claim then writes it into a directory that
// has no identity yet).
void check_resume(const std::string& dir, const std::string& checkpoint, const std::string& checkpoint_run,
                  const std::string& checkpoint_workload);

// The whole command that continues this run from `checkpoint`, as the user would type it:
// distrl-launch --config F [overrides] run.out_dir=D --resume P when distrl-launch started this
// process, else this tool's own command line with those two. For stop lines and refusals.
std::string resume_command(const std::string& out_dir, const std::string& checkpoint);
// w as one word of a POSIX shell command (quoted only where it needs it).
std::string shell_quoted(const std::string& w);
// A command's words as one shell line, without what a resume replaces (--resume and its value,
// --force, --check-config, run.out_dir in any form Settings reads): resume_command's base.
std::string command_without_resume(const std::vector<std::string>& words);
// Called once by a tool's command line (common/command_line.h): what resume_command rebuilds.
void remember_command(const std::string& tool, const std::string& config, const std::vector<std::string>& overrides);

}  // namespace distrl
