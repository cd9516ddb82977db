#include "envs/lunar_lander.h"

#include <box2d/box2d.h>

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "envs/detail/box2d_parts.h"
#include "envs/detail/draws.h"

namespace distrl::envs {
namespace {

constexpr double kPi = 3.14159265358979323846;
using LL = LunarLander;

// Gym's LANDER_POLY, in pixels.
constexpr std::array<std::array<double, 2>, 6> kLanderPoly{
    {{-14, +17}, {-17, 0}, {-17, -10}, {+17, -10}, {+17, 0}, {+14, +17}}};

// Gym's fixtureDef for the lander and the legs: they collide with the ground only.
constexpr auto add_part = detail::add_ground_colliding_part;
using detail::outline;
using detail::vec;

}  // namespace

// One episode's physics; rebuilt at every reset so nothing carries over between episodes.
struct LunarLander::World : b2ContactListener {
  explicit World(double gravity) : world(vec(0, gravity)) { world.SetContactListener(this); }

  void BeginContact(b2Contact* c) override { touch(c, true); }
  void EndContact(b2Contact* c) override { touch(c, false); }
  void touch(b2Contact* c, bool begin) {
    const b2Body* a = c->GetFixtureA()->GetBody();
    const b2Body* b = c->GetFixtureB()->GetBody();
    if (begin && (a == lander || b == lander)) game_over = true;
    for (int i = 0; i < 2; ++i)
      if (a == legs[i] || b == legs[i]) leg_contact[i] = begin;
  }

  b2World world;
  b2Body* moon = nullptr;
  b2Body* lander = nullptr;
  std::array<b2Body*, 2> legs{};
  std::array<bool, 2> leg_contact{};
  bool game_over = false;
  std::vector<std::array<float, 2>> terrain;
  double helipad_x1 = 0, helipad_x2 = 0, helipad_y = 0;
  bool has_prev_shaping = false;
  double prev_shaping = 0;
  int wind_idx = 0, torque_idx = 0;
  float main_power = 0, side_power = 0;
  int side_direction = 0;
};

LunarLander::LunarLander(LunarLanderOptions options)
    : opt_(options), name_(std::string(options.continuous ? "LunarLanderContinuous-v" : "LunarLander-v") +
                           std::to_string(options.version)),
      draws_(std::make_unique<detail::Draws>(name_)) {
  if (opt_.version != 2 && opt_.version != 3)
    throw EnvError("LunarLander: version must be 2 or 3, got " + std::to_string(opt_.version));
  if (!(opt_.gravity > -12.0 && opt_.gravity < 0.0))
    throw EnvError(name_ + ": gravity must be in (-12, 0), got " + std::to_string(opt_.gravity));
  if (opt_.wind_power < 0 || opt_.wind_power > 20)
    throw EnvError(name_ + ": wind_power must be in [0, 20], got " + std::to_string(opt_.wind_power));
  if (opt_.turbulence_power < 0 || opt_.turbulence_power > 2)
    throw EnvError(name_ + ": turbulence_power must be in [0, 2], got " + std::to_string(opt_.turbulence_power));
}

LunarLander::~LunarLander() = default;

const std::string& LunarLander::name() const { return name_; }

Space LunarLander::observation_space() const {
  Space s;
  s.kind = Space::Kind::Box;
  const bool v3 = opt_.version == 3;  // Gymnasium widened the bounds in v3
  const float pos = v3 ? 2.5f : 1.5f, vel = v3 ? 10.f : 5.f, angle = static_cast<float>(v3 ? 2 * kPi : kPi);
  s.low = {-pos, -pos, -vel, -vel, -angle, -vel, 0.f, 0.f};
  s.high = {pos, pos, vel, vel, angle, vel, 1.f, 1.f};
  return s;
}

Space LunarLander::action_space() const {
  Space s;
  if (opt_.continuous) {
    s.kind = Space::Kind::Box;
    s.low = {-1.f, -1.f};
    s.high = {1.f, 1.f};
  } else {
    s.kind = Space::Kind::Discrete;
    s.n = 4;
  }
  return s;
}

void LunarLander::seed(std::uint64_t seed) { draws_->seed(seed); }

void LunarLander::replay_draws(std::vector<double> draws) { draws_->replay_next(std::move(draws)); }

void LunarLander::reset(float* obs) {
  draws_->begin_episode();  // a replay covers the episode this reset begins
  done_ = true;             // until the world is whole
  try {
    build_world();
    // Like Gym, the first observation comes from one no-op step (not counted towards the limit).
    done_ = false;
    steps_ = 0;
    advance(0, 0, 0, obs);
  } catch (...) {
    w_.reset();  // never half a world: scene() and bodies() see none
    done_ = true;
    throw;
  }
  steps_ = 0;
}

// Gymnasium's reset, draw for draw, in double as Python computes it.
void LunarLander::build_world() {
  w_ = std::make_unique<World>(opt_.gravity);
  World& w = *w_;

  // Terrain: random chunk heights, flattened to a helipad in the middle, smoothed.
  std::array<double, kChunks + 1> height{};
  for (auto& h : height) h = draws_->uniform(0, kH / 2);
  std::array<double, kChunks> chunk_x{};
  for (int i = 0; i < kChunks; ++i) chunk_x[i] = kW / (kChunks - 1) * i;
  w.helipad_x1 = chunk_x[kChunks / 2 - 1];
  w.helipad_x2 = chunk_x[kChunks / 2 + 1];
  w.helipad_y = kH / 4;
  for (int d = -2; d <= 2; ++d) height[kChunks / 2 + d] = w.helipad_y;
  std::array<double, kChunks> smooth_y{};
  for (int i = 0; i < kChunks; ++i)  // Gym's height[i - 1] wraps: height[-1] is the last one
    smooth_y[i] = 0.33 * (height[i == 0 ? kChunks : i - 1] + height[i] + height[i + 1]);

  b2BodyDef moon_def;
  w.moon = w.world.CreateBody(&moon_def);
  b2EdgeShape edge;
  edge.SetTwoSided(b2Vec2(0, 0), vec(kW, 0));
  b2FixtureDef base;
  base.shape = &edge;
  base.friction = 0.2f;
  w.moon->CreateFixture(&base);
  for (int i = 0; i < kChunks - 1; ++i) {
    edge.SetTwoSided(vec(chunk_x[i], smooth_y[i]), vec(chunk_x[i + 1], smooth_y[i + 1]));
    b2FixtureDef fd;
    fd.shape = &edge;
    fd.density = 0;
    fd.friction = 0.1f;
    w.moon->CreateFixture(&fd);
  }
  for (int i = 0; i < kChunks; ++i)
    w.terrain.push_back({static_cast<float>(chunk_x[i]), static_cast<float>(smooth_y[i])});

  // The lander, top centre, pushed randomly.
  const double initial_y = kViewportH / kScale;
  b2BodyDef ld;
  ld.type = b2_dynamicBody;
  ld.position = vec(kViewportW / kScale / 2, initial_y);
  ld.angle = 0;
  w.lander = w.world.CreateBody(&ld);
  std::array<b2Vec2, 6> verts;
  for (std::size_t i = 0; i < kLanderPoly.size(); ++i)
    verts[i] = vec(kLanderPoly[i][0] / kScale, kLanderPoly[i][1] / kScale);
  b2PolygonShape hull;
  hull.Set(verts.data(), static_cast<int32>(verts.size()));
  add_part(w.lander, hull, 5.0f, 0.1f, 0x0010);
  const double fx = draws_->uniform(-kInitialRandom, kInitialRandom);
  const double fy = draws_->uniform(-kInitialRandom, kInitialRandom);
  w.lander->ApplyForceToCenter(vec(fx, fy), true);
  if (opt_.enable_wind) {
    w.wind_idx = draws_->integer(-9999, 9999);
    w.torque_idx = draws_->integer(-9999, 9999);
  }

  // Two legs on spring-loaded revolute joints.
  for (int k = 0; k < 2; ++k) {
    const double i = k == 0 ? -1.0 : 1.0;
    b2BodyDef bd;
    bd.type = b2_dynamicBody;
    bd.position = vec(kViewportW / kScale / 2 - i * kLegAway / kScale, initial_y);
    bd.angle = static_cast<float>(i * 0.05);
    b2Body* leg = w.world.CreateBody(&bd);
    b2PolygonShape box;
    box.SetAsBox(static_cast<float>(kLegW / kScale), static_cast<float>(kLegH / kScale));
    add_part(leg, box, 1.0f, 0.2f, 0x0020);  // pybox2d's default friction
    b2RevoluteJointDef rjd;
    rjd.bodyA = w.lander;
    rjd.bodyB = leg;
    rjd.localAnchorA.Set(0, 0);
    rjd.localAnchorB = vec(i * kLegAway / kScale, kLegDown / kScale);
    rjd.referenceAngle = bd.angle;  // as pybox2d's joint def sets it: bodyB's angle - bodyA's
    rjd.enableMotor = true;
    rjd.enableLimit = true;
    rjd.maxMotorTorque = static_cast<float>(kLegSpringTorque);
    rjd.motorSpeed = static_cast<float>(0.3 * i);
    if (k == 0) {
      rjd.lowerAngle = static_cast<float>(0.9 - 0.5);
      rjd.upperAngle = 0.9f;
    } else {
      rjd.lowerAngle = -0.9f;
      rjd.upperAngle = static_cast<float>(-0.9 + 0.5);
    }
    w.world.CreateJoint(&rjd);
    w.legs[k] = leg;
  }
}

Step LunarLander::step(int action, float* obs) {
  if (opt_.continuous) return Env::step(action, obs);
  if (action < 0 || action > 3)
    throw EnvError(name_ + ": action " + std::to_string(action) + " is out of range (0 noop, 1 left, 2 main, 3 right)");
  return advance(action == 2 ? 1.0 : 0.0, action == 1 || action == 3 ? 1.0 : 0.0, action - 2, obs);
}

Step LunarLander::step(const float* action, float* obs) {
  if (!opt_.continuous) return Env::step(action, obs);
  if (!std::isfinite(action[0]) || !std::isfinite(action[1]))
    throw EnvError(name_ + ": action [" + std::to_string(action[0]) + ", " + std::to_string(action[1]) +
                   "] is not finite");
  const double main = std::clamp<double>(action[0], -1, 1), lateral = std::clamp<double>(action[1], -1, 1);
  const double m_power = main > 0 ? (std::clamp(main, 0.0, 1.0) + 1.0) * 0.5 : 0.0;  // 50..100 %
  const bool side = std::abs(lateral) > 0.5;
  return advance(m_power, side ? std::clamp(std::abs(lateral), 0.5, 1.0) : 0.0, side ? (lateral > 0 ? 1 : -1) : 0, obs);
}

// Gymnasium's step, in double as Python computes it; Box2D gets floats.
Step LunarLander::advance(double m_power, double s_power, int direction, float* obs) {
  if (done_ || !w_) throw EnvError(name_ + ": step() after the episode ended; call reset()");
  World& w = *w_;
  b2Body* lander = w.lander;
  // Gymnasium draws the two dispersions after the wind, which draws nothing: drawn first here,
  // a replay that runs out leaves the episode as it was.
  const double d0 = draws_->uniform(-1.0, 1.0) / kScale;
  const double d1 = draws_->uniform(-1.0, 1.0) / kScale;

  if (opt_.enable_wind && !(w.leg_contact[0] || w.leg_contact[1])) {
    const double wind = std::tanh(std::sin(0.02 * w.wind_idx) + std::sin(kPi * 0.01 * w.wind_idx)) * opt_.wind_power;
    ++w.wind_idx;
    lander->ApplyForceToCenter(vec(wind, 0), true);
    const double torque =
        std::tanh(std::sin(0.02 * w.torque_idx) + std::sin(kPi * 0.01 * w.torque_idx)) * opt_.turbulence_power;
    ++w.torque_idx;
    lander->ApplyTorque(static_cast<float>(torque), true);
  }

  const double angle = lander->GetAngle();
  const double tip_x = std::sin(angle), tip_y = std::cos(angle);
  const double side_x = -tip_y, side_y = tip_x;
  const double px = lander->GetPosition().x, py = lander->GetPosition().y;

  if (m_power > 0) {
    const double ox = tip_x * (4 / kScale + 2 * d0) + side_x * d1;
    const double oy = -tip_y * (4 / kScale + 2 * d0) - side_y * d1;
    lander->ApplyLinearImpulse(vec(-ox * kMainEnginePower * m_power, -oy * kMainEnginePower * m_power),
                               vec(px + ox, py + oy), true);
  }
  if (s_power > 0) {
    const double ox = tip_x * d0 + side_x * (3 * d1 + direction * kSideEngineAway / kScale);
    const double oy = -tip_y * d0 - side_y * (3 * d1 + direction * kSideEngineAway / kScale);
    lander->ApplyLinearImpulse(vec(-ox * kSideEnginePower * s_power, -oy * kSideEnginePower * s_power),
                               vec(px + ox - tip_x * 17 / kScale, py + oy + tip_y * kSideEngineHeight / kScale), true);
  }
  w.main_power = static_cast<float>(m_power);
  w.side_power = static_cast<float>(s_power);
  w.side_direction = s_power > 0 ? direction : 0;

  w.world.Step(static_cast<float>(1.0 / kFps), 6 * 30, 2 * 30);

  const b2Vec2 pos = lander->GetPosition(), vel = lander->GetLinearVelocity();
  const std::array<double, 8> state{(pos.x - kViewportW / kScale / 2) / (kViewportW / kScale / 2),
                                    (pos.y - (w.helipad_y + kLegDown / kScale)) / (kViewportH / kScale / 2),
                                    vel.x * (kViewportW / kScale / 2) / kFps,
                                    vel.y * (kViewportH / kScale / 2) / kFps,
                                    lander->GetAngle(),
                                    20.0 * lander->GetAngularVelocity() / kFps,
                                    w.leg_contact[0] ? 1.0 : 0.0,
                                    w.leg_contact[1] ? 1.0 : 0.0};
  for (int i = 0; i < 8; ++i) obs[i] = static_cast<float>(state[i]);

  const double shaping = -100 * std::sqrt(state[0] * state[0] + state[1] * state[1]) -
                         100 * std::sqrt(state[2] * state[2] + state[3] * state[3]) - 100 * std::abs(state[4]) +
                         10 * state[6] + 10 * state[7];
  double reward = w.has_prev_shaping ? shaping - w.prev_shaping : 0.0;
  w.prev_shaping = shaping;
  w.has_prev_shaping = true;
  reward -= m_power * 0.30;
  reward -= s_power * 0.03;
  Step s;
  if (w.game_over || std::abs(state[0]) >= 1.0) {
    s.terminated = true;
    reward = -100;
  }
  if (!lander->IsAwake()) {
    s.terminated = true;
    reward = +100;
  }
  s.reward = static_cast<float>(reward);
  if (!s.terminated && ++steps_ >= kMaxSteps) s.truncated = true;
  done_ = s.done();
  return s;
}

LunarLander::Scene LunarLander::scene() const {
  Scene sc;
  if (!w_) return sc;
  sc.terrain = w_->terrain;
  sc.helipad_x1 = static_cast<float>(w_->helipad_x1);
  sc.helipad_x2 = static_cast<float>(w_->helipad_x2);
  sc.helipad_y = static_cast<float>(w_->helipad_y);
  sc.lander = outline(w_->lander);
  for (int i = 0; i < 2; ++i) sc.legs[i] = outline(w_->legs[i]);
  sc.leg_contact = w_->leg_contact;
  sc.main_power = w_->main_power;
  sc.side_power = w_->side_power;
  sc.side_direction = w_->side_direction;
  return sc;
}

bool LunarLander::awake() const { return w_ && w_->lander->IsAwake(); }

std::array<LunarLander::BodyState, 3> LunarLander::bodies() const {
  std::array<BodyState, 3> out{};
  if (!w_) return out;
  for (int i = 0; i < 3; ++i) out[i] = detail::state_of(i == 0 ? w_->lander : w_->legs[i - 1]);
  return out;
}

double LunarLander::prev_shaping() const { return w_ ? w_->prev_shaping : 0.0; }

namespace {
// The heuristic's two controls: what the angle and the hover height still need.
std::array<float, 2> heuristic_todo(const float* s) {
  float angle_targ = std::clamp(s[0] * 0.5f + s[2] * 1.0f, -0.4f, 0.4f);  // point towards the centre
  const float hover_targ = 0.55f * std::abs(s[0]);                        // lower when closer
  float angle_todo = (angle_targ - s[4]) * 0.5f - s[5] * 1.0f;
  float hover_todo = (hover_targ - s[1]) * 0.5f - s[3] * 0.5f;
  if (s[6] > 0 || s[7] > 0) {  // legs down: only slow the fall
    angle_todo = 0;
    hover_todo = -s[3] * 0.5f;
  }
  return {angle_todo, hover_todo};
}
}  // namespace

int lunar_lander_heuristic(const float* obs) {
  const auto [angle_todo, hover_todo] = heuristic_todo(obs);
  if (hover_todo > std::abs(angle_todo) && hover_todo > 0.05f) return 2;
  if (angle_todo < -0.05f) return 3;
  if (angle_todo > 0.05f) return 1;
  return 0;
}

std::array<float, 2> lunar_lander_heuristic_continuous(const float* obs) {
  const auto [angle_todo, hover_todo] = heuristic_todo(obs);
  return {std::clamp(hover_todo * 20 - 1, -1.0f, 1.0f), std::clamp(-angle_todo * 20, -1.0f, 1.0f)};
}

}  // namespace distrl::envs
