#include "agent/vtrace.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace distrl::agent {

VtraceOutput vtrace(const VtraceInput& in, const VtraceOptions& o) {
  const int T = in.steps, E = in.envs;
  if (T < 1 || E < 1)
    throw std::invalid_argument("vtrace: " + std::to_string(T) + " steps x " + std::to_string(E) + " envs");
  if (!in.log_rhos || !in.rewards || !in.values || !in.bootstrap || !in.terminated || !in.truncated)
    throw std::invalid_argument("vtrace: an input array is missing");
  if (!(o.gamma >= 0 && o.gamma <= 1) || !(o.lambda >= 0 && o.lambda <= 1) || !(o.rho_bar > 0) || !(o.c_bar > 0) ||
      !(o.pg_rho_bar > 0))
    throw std::invalid_argument("vtrace: gamma and lambda must lie in [0, 1] and the clips be positive");
  const std::size_t n = static_cast<std::size_t>(T) * E;
  VtraceOutput out;
  out.vs.resize(n);
  out.q.resize(n);
  out.pg_advantages.resize(n);
  for (int e = 0; e < E; ++e) {
    double acc = 0;                    // v_{t+1} - V(x_{t+1}) of the step after t
    double next_v = in.bootstrap[e];   // V(x_{t+1})
    double next_vs = in.bootstrap[e];  // v_{t+1}
    for (int t = T - 1; t >= 0; --t) {
      const std::size_t i = static_cast<std::size_t>(t) * E + e;
      const double ratio = std::exp(static_cast<double>(in.log_rhos[i]));
      const double v = in.values[i], r = in.rewards[i];
      bool cut = false;
      if (in.terminated[i]) {
        next_v = next_vs = 0;
        cut = true;
      } else if (in.truncated[i]) {
        if (!in.truncated_values) throw std::invalid_argument("vtrace: a truncated step needs truncated_values");
        next_v = next_vs = in.truncated_values[i];
        cut = true;
      }
      const double delta = std::min(o.rho_bar, ratio) * (r + o.gamma * next_v - v);
      acc = delta + (cut ? 0.0 : o.gamma * o.lambda * std::min(o.c_bar, ratio) * acc);
      const double vs = v + acc;
      const double q = r + o.gamma * next_vs;
      out.vs[i] = static_cast<float>(vs);
      out.q[i] = static_cast<float>(q);
      out.pg_advantages[i] = static_cast<float>(std::min(o.pg_rho_bar, ratio) * (q - v));
      next_v = v;
      next_vs = vs;
    }
  }
  return out;
}

}  // namespace distrl::agent
