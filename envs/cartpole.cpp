#include "envs/cartpole.h"

#include <cmath>
#include <limits>

#include "common/error.h"

namespace distrl::envs {

CartPole::CartPole() = default;

const std::string& CartPole::name() const {
  static const std::string n = "CartPole-v1";
  return n;
}

Space CartPole::observation_space() const {
  const float inf = std::numeric_limits<float>::max();
  Space s;
  s.kind = Space::Kind::Box;
  s.high = {static_cast<float>(kXThreshold * 2), inf, static_cast<float>(kThetaThreshold * 2), inf};
  for (float h : s.high) s.low.push_back(-h);
  return s;
}

Space CartPole::action_space() const {
  Space s;
  s.kind = Space::Kind::Discrete;
  s.n = 2;
  return s;
}

void CartPole::observe(float* obs) const {
  for (int i = 0; i < 4; ++i) obs[i] = static_cast<float>(s_[i]);
}

void CartPole::reset(float* obs) {
  for (auto& v : s_) v = rng_.uniform(-0.05, 0.05);
  steps_ = 0;
  done_ = false;
  observe(obs);
}

Step CartPole::step(int action, float* obs) {
  if (action != 0 && action != 1)
    throw EnvError("CartPole-v1: action " + std::to_string(action) + " is out of range (0: push left, 1: push right)");
  if (done_) throw EnvError("CartPole-v1: step() after the episode ended; call reset() first");
  auto& [x, x_dot, theta, theta_dot] = s_;
  const double force = action == 1 ? kForceMag : -kForceMag;
  const double costheta = std::cos(theta);
  const double sintheta = std::sin(theta);
  const double temp = (force + kPoleMassLength * theta_dot * theta_dot * sintheta) / kTotalMass;
  const double thetaacc =
      (kGravity * sintheta - costheta * temp) / (kLength * (4.0 / 3.0 - kMassPole * costheta * costheta / kTotalMass));
  const double xacc = temp - kPoleMassLength * thetaacc * costheta / kTotalMass;
  // Euler: positions move with the old velocities.
  x = x + kTau * x_dot;
  x_dot = x_dot + kTau * xacc;
  theta = theta + kTau * theta_dot;
  theta_dot = theta_dot + kTau * thetaacc;
  ++steps_;
  Step r;
  r.reward = 1.0f;  // also on the step that ends the episode
  r.terminated = x < -kXThreshold || x > kXThreshold || theta < -kThetaThreshold || theta > kThetaThreshold;
  r.truncated = !r.terminated && steps_ >= kMaxSteps;
  done_ = r.done();
  observe(obs);
  return r;
}

}  // namespace distrl::envs
