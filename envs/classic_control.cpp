#include "envs/classic_control.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace distrl::envs {
namespace {

constexpr double kPi = 3.14159265358979323846;

Space discrete(int n) {
  Space s;
  s.kind = Space::Kind::Discrete;
  s.n = n;
  return s;
}

Space box(std::vector<float> high, std::vector<float> low = {}) {
  Space s;
  s.kind = Space::Kind::Box;
  if (low.empty())
    for (float h : high) low.push_back(-h);
  s.low = std::move(low);
  s.high = std::move(high);
  return s;
}

void check_action(const std::string& env, int action, int n, const char* meaning) {
  if (action < 0 || action >= n)
    throw EnvError(env + ": action " + std::to_string(action) + " is out of range (" + meaning + ")");
}

float checked_value(const std::string& env, const float* action) {
  if (!std::isfinite(action[0]))
    throw EnvError(env + ": the action is " + std::to_string(action[0]) + ", not a finite number");
  return action[0];
}

// Gymnasium's wrap(): x moved by whole turns into [lo, hi].
double wrap(double x, double lo, double hi) {
  if (!std::isfinite(x) || std::abs(x) > 1e6) return std::remainder(x, hi - lo);  // set_state only; never loops long
  const double diff = hi - lo;
  while (x > hi) x = x - diff;
  while (x < lo) x = x + diff;
  return x;
}

// Python's (and numpy's) x % m for m > 0: the result has the divisor's sign.
double floor_mod(double x, double m) {
  double r = std::fmod(x, m);
  if (r != 0 && r < 0) r += m;
  return r;
}

}  // namespace

// ---------------------------------------------------------------- shared

void ClassicControl::reset(float* obs) {
  start();
  steps_ = 0;
  done_ = false;
  observe(obs);
}

void ClassicControl::check_running() const {
  if (done_) throw EnvError(name() + ": step() after the episode ended; call reset() first");
}

Step ClassicControl::finish(float reward, bool terminated, float* obs) {
  ++steps_;
  Step r;
  r.reward = reward;
  r.terminated = terminated;
  // Gymnasium's TimeLimit sets truncated on the last step even when it also terminated; here a
  // terminal step is terminated only (what a learner must see: nothing to bootstrap), as CartPole.
  r.truncated = !terminated && steps_ >= max_episode_steps();
  done_ = r.done();
  observe(obs);
  return r;
}

// ---------------------------------------------------------------- Acrobot-v1

namespace {

// Gymnasium's AcrobotEnv._dsdt ("book" dynamics): d/dt of (theta1, theta2, dtheta1, dtheta2)
// under torque a on the second joint. The expressions keep its order of operations.
std::array<double, 4> acrobot_dsdt(const std::array<double, 4>& s, double a) {
  constexpr double m1 = 1.0, m2 = 1.0, l1 = 1.0, lc1 = 0.5, lc2 = 0.5, I1 = 1.0, I2 = 1.0, g = 9.8;
  const double theta1 = s[0], theta2 = s[1], dtheta1 = s[2], dtheta2 = s[3];
  const double d1 = m1 * (lc1 * lc1) + m2 * ((l1 * l1) + (lc2 * lc2) + 2 * l1 * lc2 * std::cos(theta2)) + I1 + I2;
  const double d2 = m2 * ((lc2 * lc2) + l1 * lc2 * std::cos(theta2)) + I2;
  const double phi2 = m2 * lc2 * g * std::cos(theta1 + theta2 - kPi / 2.0);
  const double phi1 = -m2 * l1 * lc2 * (dtheta2 * dtheta2) * std::sin(theta2) -
                      2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * std::sin(theta2) +
                      (m1 * lc1 + m2 * l1) * g * std::cos(theta1 - kPi / 2) + phi2;
  const double ddtheta2 = (a + d2 / d1 * phi1 - m2 * l1 * lc2 * (dtheta1 * dtheta1) * std::sin(theta2) - phi2) /
                          (m2 * (lc2 * lc2) + I2 - (d2 * d2) / d1);
  const double ddtheta1 = -(d2 * ddtheta2 + phi1) / d1;
  return {dtheta1, dtheta2, ddtheta1, ddtheta2};
}

}  // namespace

const std::string& Acrobot::name() const {
  static const std::string n = "Acrobot-v1";
  return n;
}

Space Acrobot::observation_space() const {
  return box({1, 1, 1, 1, static_cast<float>(4 * kPi), static_cast<float>(9 * kPi)});
}

Space Acrobot::action_space() const { return discrete(3); }

void Acrobot::start() {
  // Gymnasium draws the state as float32.
  for (auto& v : s_) v = static_cast<float>(rng_.uniform(-0.1, 0.1));
}

void Acrobot::observe(float* obs) const {
  obs[0] = static_cast<float>(std::cos(s_[0]));
  obs[1] = static_cast<float>(std::sin(s_[0]));
  obs[2] = static_cast<float>(std::cos(s_[1]));
  obs[3] = static_cast<float>(std::sin(s_[1]));
  obs[4] = static_cast<float>(s_[2]);
  obs[5] = static_cast<float>(s_[3]);
}

Step Acrobot::step(int action, float* obs) {
  check_action(name(), action, 3, "0: torque -1, 1: none, 2: torque +1");
  check_running();
  const double torque = action - 1.0;
  // One classical Runge-Kutta step over dt (Gymnasium's rk4 over [0, dt]).
  const auto add = [](const std::array<double, 4>& y, double h, const std::array<double, 4>& k) {
    std::array<double, 4> out;
    for (int i = 0; i < 4; ++i) out[i] = y[i] + h * k[i];
    return out;
  };
  const double dt2 = kDt / 2.0;
  const auto k1 = acrobot_dsdt(s_, torque);
  const auto k2 = acrobot_dsdt(add(s_, dt2, k1), torque);
  const auto k3 = acrobot_dsdt(add(s_, dt2, k2), torque);
  const auto k4 = acrobot_dsdt(add(s_, kDt, k3), torque);
  std::array<double, 4> ns;
  for (int i = 0; i < 4; ++i) ns[i] = s_[i] + kDt / 6.0 * (k1[i] + 2 * k2[i] + 2 * k3[i] + k4[i]);
  ns[0] = wrap(ns[0], -kPi, kPi);
  ns[1] = wrap(ns[1], -kPi, kPi);
  ns[2] = std::min(std::max(ns[2], -4 * kPi), 4 * kPi);
  ns[3] = std::min(std::max(ns[3], -9 * kPi), 9 * kPi);
  s_ = ns;
  const bool terminated = -std::cos(s_[0]) - std::cos(s_[1] + s_[0]) > 1.0;  // the tip a link above the pivot
  return finish(terminated ? 0.0f : -1.0f, terminated, obs);
}

// ---------------------------------------------------------------- MountainCar-v0 / Continuous-v0

namespace {
constexpr double kMinPosition = -1.2, kMaxPosition = 0.6, kMaxSpeed = 0.07;
}  // namespace

const std::string& MountainCar::name() const {
  static const std::string discrete_name = "MountainCar-v0", continuous_name = "MountainCarContinuous-v0";
  return continuous_ ? continuous_name : discrete_name;
}

Space MountainCar::observation_space() const {
  return box({static_cast<float>(kMaxPosition), static_cast<float>(kMaxSpeed)},
             {static_cast<float>(kMinPosition), static_cast<float>(-kMaxSpeed)});
}

Space MountainCar::action_space() const { return continuous_ ? box({1.0f}) : discrete(3); }

void MountainCar::start() { s_ = {rng_.uniform(-0.6, -0.4), 0.0}; }

void MountainCar::observe(float* obs) const {
  obs[0] = static_cast<float>(s_[0]);
  obs[1] = static_cast<float>(s_[1]);
}

bool MountainCar::move(double force_term) {
  auto& [position, velocity] = s_;
  velocity += force_term;
  velocity = std::min(std::max(velocity, -kMaxSpeed), kMaxSpeed);
  position += velocity;
  position = std::min(std::max(position, kMinPosition), kMaxPosition);
  if (position == kMinPosition && velocity < 0) velocity = 0;      // the left wall stops the car
  return position >= (continuous_ ? 0.45 : 0.5) && velocity >= 0;  // at the flag
}

Step MountainCar::step(int action, float* obs) {
  if (continuous_) return Env::step(action, obs);  // refuses: it takes a vector
  check_action(name(), action, 3, "0: push left, 1: no push, 2: push right");
  check_running();
  const bool terminated = move((action - 1) * 0.001 + std::cos(3 * s_[0]) * (-0.0025));
  return finish(-1.0f, terminated, obs);
}

Step MountainCar::step(const float* action, float* obs) {
  if (!continuous_) return Env::step(action, obs);  // refuses: it takes an index
  const float a = checked_value(name(), action);
  check_running();
  const double force = std::min(std::max(static_cast<double>(a), -1.0), 1.0);
  const bool terminated = move(force * 0.0015 - 0.0025 * std::cos(3 * s_[0]));
  for (auto& v : s_) v = static_cast<float>(v);  // Gymnasium keeps this env's state as float32
  // The reward charges the action as given, before clipping (as Gymnasium does).
  const double reward = (terminated ? 100.0 : 0.0) - static_cast<double>(a) * a * 0.1;
  return finish(static_cast<float>(reward), terminated, obs);
}

// ---------------------------------------------------------------- Pendulum-v1

const std::string& Pendulum::name() const {
  static const std::string n = "Pendulum-v1";
  return n;
}

Space Pendulum::observation_space() const { return box({1.0f, 1.0f, 8.0f}); }

Space Pendulum::action_space() const { return box({2.0f}); }

void Pendulum::start() {
  const double theta = rng_.uniform(-kPi, kPi);
  s_ = {theta, rng_.uniform(-1.0, 1.0)};
}

void Pendulum::observe(float* obs) const {
  obs[0] = static_cast<float>(std::cos(s_[0]));
  obs[1] = static_cast<float>(std::sin(s_[0]));
  obs[2] = static_cast<float>(s_[1]);
}

Step Pendulum::step(const float* action, float* obs) {
  const float u = std::min(std::max(checked_value(name(), action), -2.0f), 2.0f);
  check_running();
  const auto [th, thdot] = s_;
  const double angle = floor_mod(th + kPi, 2 * kPi) - kPi;
  // u stays float32 where Gymnasium's numpy does: u^2 * 0.001 and 3.0 * u.
  const double costs = angle * angle + 0.1 * (thdot * thdot) + static_cast<double>(0.001f * (u * u));
  constexpr double g = 10.0, dt = 0.05;
  double newthdot = thdot + (3 * g / 2.0 * std::sin(th) + static_cast<double>(3.0f * u)) * dt;
  newthdot = std::min(std::max(newthdot, -8.0), 8.0);
  s_ = {th + newthdot * dt, newthdot};
  return finish(static_cast<float>(-costs), false, obs);
}

}  // namespace distrl::envs
