// A run's claim on its output directory, so that two runs never write into one (two
// `make demo`s into runs/cartpole overwrote each other and both exited 0).
//
// The claim is flock(2) on OUT_DIR/.distrl-run.lock (a regular file of this user: a symbolic
// link, a FIFO or another user's file there is refused, never followed), held for the holder's life: the kernel
// drops it when the holder exits however it exits, so the lock of a dead run is simply free
// (taken over, nothing to clean). The file says who holds it (pid, host, tool, since when) for
// the refusal's message; it stays behind, empty of meaning once unlocked.
//
// distrl-launch --config takes it before it starts anything and hands it to its ranks: the fd is
// inherited and DISTRL_RUN_LOCK_FD names it, so the rank that writes the outputs finds its
// launcher's claim and takes none of its own (and passes it no further). A tool started by hand
// takes its own. On NFS, Linux emulates flock with POSIX locks: a claim then guards against a
// second run on any host, but belongs to the launcher alone (its ranks do not hold it if the
// launcher dies first); with the local_lock=flock mount option it guards one host only.
//
// Claiming also makes the directory this run's (common/run_dir.h): a fresh run (this_run().resume
// false) is refused when the directory holds another run's outputs, or with --force
// (DISTRL_RUN_LOCK_FORCE=1 in the environment) moves them aside first, and writes the
// directory's identity with a new run id; a resumed run keeps the directory's id, and so does a
// rank restarted after a failure (common/run_dir.h: restarted()). A live run's claim is never
// taken, --force or not; on another node than node 0 a claim held there is node 0's launcher's
// for this run (a shared file system) and is adopted, not refused.
//
// Lifetime: the claim lasts as long as the RunLock (and every process that inherited its fd).
// Not thread-safe; take it on the main thread before any output is written.
#pragma once

#include <string>

namespace distrl {

class RunLock {
 public:
  RunLock() = default;  // holds nothing
  // Claims dir (creating it) for this process and makes it this run's (above). ConfigError
  // naming the holder and how to go on when a live process holds it, or naming the outputs of
  // another run a fresh run would mix with; OutputError when a file cannot be made or moved.
  explicit RunLock(const std::string& dir);
  ~RunLock();
  RunLock(RunLock&& other) noexcept;
  RunLock& operator=(RunLock&& other) noexcept;
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  // For a launcher: makes the claim inheritable and exports DISTRL_RUN_LOCK_FD, so that the
  // processes it starts share it (and it lasts while any of them runs).
  void hand_to_children();
  // In a process the launcher started (guarded_main calls it first): the inherited claim goes
  // no further, to whatever this process runs (gnuplot, a plugin's helper) and might outlive it.
  static void keep_inherited_claim_here();
  bool held() const { return fd_ >= 0; }
  // --force: DISTRL_RUN_LOCK_FORCE=1 (set by the tools' and distrl-launch's --force).
  static bool forced();
  // --check-config's look at run.out_dir before anything starts (node 0's only: other nodes
  // write no outputs): a live run there, or, for a fresh run, another run's outputs, refused as
  // the claim would refuse them. Takes no claim.
  static void check_before_start(const std::string& dir);
  // ConfigError naming the live run that holds dir's claim, else nothing.
  static void refuse_if_claimed(const std::string& dir);

 private:
  int fd_ = -1;
};

}  // namespace distrl
