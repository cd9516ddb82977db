// V-trace (Espeholt et al. 2018, "IMPALA", section 4.1): off-policy corrected value targets and
// policy-gradient advantages for trajectories acted by an older policy (the behaviour policy mu)
// and learned by the current one (pi). Torch-free: the learner computes the values and
// log-probabilities in one forward pass and hands the numbers here.
//
// Layout: time-major [steps, envs], index t * envs + e, as rl::Fragment. Episode ends inside
// a trajectory: a terminated step has no successor (its target is r); a truncated step (the time
// limit cut it) bootstraps from V(final observation) (truncated_values) and the recursion does
// not cross into the next episode either. The last step's successor is `bootstrap` (V of the
// observation after the trajectory).
//
//   rho_t = min(rho_bar, pi/mu),  c_t = lambda * min(c_bar, pi/mu)
//   delta_t = rho_t * (r_t + gamma * V(x_{t+1}) - V(x_t))
//   v_t - V(x_t) = delta_t + gamma * c_t * (v_{t+1} - V(x_{t+1}))       (0 past an episode end)
//   q_t = r_t + gamma * v_{t+1}   (V(final) when truncated, 0 when terminated)
//   pg_advantage_t = min(pg_rho_bar, pi/mu) * (q_t - V(x_t))
//
// With pi = mu (no lag) and lambda = 1, v_t is the n-step return bootstrapped at the end of the
// trajectory; with lambda < 1, v_t - V(x_t) is GAE(lambda)'s advantage.
// Thread-safety: a pure function.
#pragma once

#include <cstdint>
#include <vector>

namespace distrl::agent {

struct VtraceOptions {
  double gamma = 0.99;
  double lambda = 1.0;      // the trace-cutting lambda of the paper's remark 2
  double rho_bar = 1.0;     // clips the importance weight in the value target's deltas
  double c_bar = 1.0;       // clips the traces
  double pg_rho_bar = 1.0;  // clips the importance weight on the policy-gradient advantage
};

struct VtraceInput {
  int steps = 0, envs = 0;
  const float* log_rhos = nullptr;           // [T, E] log pi(a_t|x_t) - log mu(a_t|x_t)
  const float* rewards = nullptr;            // [T, E]
  const float* values = nullptr;             // [T, E] V(x_t), the current critic
  const float* bootstrap = nullptr;          // [E] V(x_T)
  const std::uint8_t* terminated = nullptr;  // [T, E]
  const std::uint8_t* truncated = nullptr;   // [T, E]
  const float* truncated_values = nullptr;   // [T, E] V(final observation) where truncated; may be null
                                             // when nothing is truncated
};

struct VtraceOutput {
  std::vector<float> vs;             // [T, E] value targets
  std::vector<float> q;              // [T, E] r_t + gamma * v_{t+1}: APPO's advantage is q - V
  std::vector<float> pg_advantages;  // [T, E] IMPALA's: min(pg_rho_bar, pi/mu) * (q - V)
};

// Computed in double, returned as float. Throws std::invalid_argument for a non-positive shape,
// a truncated step without truncated_values, or an option out of range.
VtraceOutput vtrace(const VtraceInput& in, const VtraceOptions& options);

}  // namespace distrl::agent
