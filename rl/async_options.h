// The asynchronous learners' settings (learner.algo appo | impala), torch-free so the run
// configuration can hold them (RlConfig::async, bound to the async.* and vtrace.* keys).
#pragma once

namespace distrl::rl {

struct AsyncOptions {
  int rollout = 32;      // steps per env in one trajectory
  int batch = 0;         // trajectories per learner step (0: one per observer)
  int queue = 0;         // trajectories waiting for the learner at most (0: one batch); a full queue slows acting (each
                         // batch more in it adds about one version of policy lag)
  int max_lag = 20;      // a trajectory whose oldest step is more versions behind is dropped (counted)
  double lambda = 1.0;   // V-trace's trace-cutting lambda
  double rho_bar = 1.0;  // clips the importance weight in the value targets
  double c_bar = 1.0;    // clips the traces
  double pg_rho_bar = 1.0;  // clips the importance weight on IMPALA's policy gradient
};

}  // namespace distrl::rl
