#include "envs/lunar_lander.h"

#include <box2d/box2d.h>

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "envs/detail/box2d_parts.h"

namespace distrl::envs {
namespace {

constexpr float kPi = 3.14159265358979323846f;
using LL = LunarLander;

// Gym's LANDER_POLY, in pixels.
constexpr std::array<std::array<float, 2>, 6> kLanderPoly{
    {{-14, +17}, {-17, 0}, {-17, -10}, {+17, -10}, {+17, 0}, {+14, +17}}};

// Gym's fixtureDef for the lander and the legs: they collide with the ground only.
constexpr auto add_part = detail::add_ground_colliding_part;
using detail::outline;

}  // namespace

// One episode's physics; rebuilt at every reset so nothing carries over between episodes.
struct LunarLander::World : b2ContactListener {
  explicit World(float gravity) : world(b2Vec2(0, gravity)) { world.SetContactListener(this); }

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
  float helipad_x1 = 0, helipad_x2 = 0, helipad_y = 0;
  bool has_prev_shaping = false;
  float prev_shaping = 0;
  int wind_idx = 0, torque_idx = 0;
  float main_power = 0, side_power = 0;
  int side_direction = 0;
};

LunarLander::LunarLander(LunarLanderOptions options)
    : opt_(options), name_(options.continuous ? "LunarLanderContinuous-v2" : "LunarLander-v2") {
  if (!(opt_.gravity > -12.0f && opt_.gravity < 0.0f))
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
  s.low = {-1.5f, -1.5f, -5.f, -5.f, -kPi, -5.f, 0.f, 0.f};
  s.high = {1.5f, 1.5f, 5.f, 5.f, kPi, 5.f, 1.f, 1.f};
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

void LunarLander::reset(float* obs) {
  w_ = std::make_unique<World>(opt_.gravity);
  World& w = *w_;

  // Terrain: random chunk heights, flattened to a helipad in the middle, smoothed.
  std::array<float, kChunks + 1> height{};
  for (auto& h : height) h = static_cast<float>(rng_.uniform(0, kH / 2));
  std::array<float, kChunks> chunk_x{};
  for (int i = 0; i < kChunks; ++i) chunk_x[i] = kW / (kChunks - 1) * i;
  w.helipad_x1 = chunk_x[kChunks / 2 - 1];
  w.helipad_x2 = chunk_x[kChunks / 2 + 1];
  w.helipad_y = kH / 4;
  for (int d = -2; d <= 2; ++d) height[kChunks / 2 + d] = w.helipad_y;
  std::array<float, kChunks> smooth_y{};
  for (int i = 0; i < kChunks; ++i)  // Gym's height[i - 1] wraps: height[-1] is the last one
    smooth_y[i] = 0.33f * (height[i == 0 ? kChunks : i - 1] + height[i] + height[i + 1]);

  b2BodyDef moon_def;
  w.moon = w.world.CreateBody(&moon_def);
  b2EdgeShape edge;
  edge.SetTwoSided(b2Vec2(0, 0), b2Vec2(kW, 0));
  b2FixtureDef base;
  base.shape = &edge;
  base.friction = 0.2f;
  w.moon->CreateFixture(&base);
  for (int i = 0; i < kChunks - 1; ++i) {
    edge.SetTwoSided(b2Vec2(chunk_x[i], smooth_y[i]), b2Vec2(chunk_x[i + 1], smooth_y[i + 1]));
    b2FixtureDef fd;
    fd.shape = &edge;
    fd.density = 0;
    fd.friction = 0.1f;
    w.moon->CreateFixture(&fd);
  }
  for (int i = 0; i < kChunks; ++i) w.terrain.push_back({chunk_x[i], smooth_y[i]});

  // The lander, top centre, pushed randomly.
  const float initial_y = kViewportH / kScale;
  b2BodyDef ld;
  ld.type = b2_dynamicBody;
  ld.position.Set(kViewportW / kScale / 2, initial_y);
  ld.angle = 0;
  w.lander = w.world.CreateBody(&ld);
  std::array<b2Vec2, 6> verts;
  for (std::size_t i = 0; i < kLanderPoly.size(); ++i)
    verts[i].Set(kLanderPoly[i][0] / kScale, kLanderPoly[i][1] / kScale);
  b2PolygonShape hull;
  hull.Set(verts.data(), static_cast<int32>(verts.size()));
  add_part(w.lander, hull, 5.0f, 0.1f, 0x0010);
  const float fx = static_cast<float>(rng_.uniform(-kInitialRandom, kInitialRandom));
  const float fy = static_cast<float>(rng_.uniform(-kInitialRandom, kInitialRandom));
  w.lander->ApplyForceToCenter(b2Vec2(fx, fy), true);
  if (opt_.enable_wind) {
    w.wind_idx = static_cast<int>(std::floor(rng_.uniform(-9999, 9999)));
    w.torque_idx = static_cast<int>(std::floor(rng_.uniform(-9999, 9999)));
  }

  // Two legs on spring-loaded revolute joints.
  for (int k = 0; k < 2; ++k) {
    const float i = k == 0 ? -1.0f : 1.0f;
    b2BodyDef bd;
    bd.type = b2_dynamicBody;
    bd.position.Set(kViewportW / kScale / 2 - i * kLegAway / kScale, initial_y);
    bd.angle = i * 0.05f;
    b2Body* leg = w.world.CreateBody(&bd);
    b2PolygonShape box;
    box.SetAsBox(kLegW / kScale, kLegH / kScale);
    add_part(leg, box, 1.0f, 0.2f, 0x0020);  // pybox2d's default friction
    b2RevoluteJointDef rjd;
    rjd.bodyA = w.lander;
    rjd.bodyB = leg;
    rjd.localAnchorA.Set(0, 0);
    rjd.localAnchorB.Set(i * kLegAway / kScale, kLegDown / kScale);
    rjd.referenceAngle = bd.angle;  // as pybox2d's joint def sets it: bodyB's angle - bodyA's
    rjd.enableMotor = true;
    rjd.enableLimit = true;
    rjd.maxMotorTorque = kLegSpringTorque;
    rjd.motorSpeed = 0.3f * i;
    if (k == 0) {
      rjd.lowerAngle = 0.9f - 0.5f;
      rjd.upperAngle = 0.9f;
    } else {
      rjd.lowerAngle = -0.9f;
      rjd.upperAngle = -0.9f + 0.5f;
    }
    w.world.CreateJoint(&rjd);
    w.legs[k] = leg;
  }

  // Like Gym, the first observation comes from one no-op step (not counted towards the limit).
  done_ = false;
  steps_ = 0;
  advance(0, 0, 0, obs);
  steps_ = 0;
}

Step LunarLander::step(int action, float* obs) {
  if (opt_.continuous) return Env::step(action, obs);
  if (action < 0 || action > 3)
    throw EnvError(name_ + ": action " + std::to_string(action) + " is out of range (0 noop, 1 left, 2 main, 3 right)");
  return advance(action == 2 ? 1.0f : 0.0f, action == 1 || action == 3 ? 1.0f : 0.0f, action - 2, obs);
}

Step LunarLander::step(const float* action, float* obs) {
  if (!opt_.continuous) return Env::step(action, obs);
  if (!std::isfinite(action[0]) || !std::isfinite(action[1]))
    throw EnvError(name_ + ": action [" + std::to_string(action[0]) + ", " + std::to_string(action[1]) +
                   "] is not finite");
  const float main = std::clamp(action[0], -1.0f, 1.0f), lateral = std::clamp(action[1], -1.0f, 1.0f);
  const float m_power = main > 0 ? (std::clamp(main, 0.0f, 1.0f) + 1.0f) * 0.5f : 0.0f;  // 50..100 %
  const bool side = std::abs(lateral) > 0.5f;
  return advance(m_power, side ? std::clamp(std::abs(lateral), 0.5f, 1.0f) : 0.0f, side ? (lateral > 0 ? 1 : -1) : 0,
                 obs);
}

Step LunarLander::advance(float m_power, float s_power, int direction, float* obs) {
  if (done_ || !w_) throw EnvError(name_ + ": step() after the episode ended; call reset()");
  World& w = *w_;
  b2Body* lander = w.lander;

  if (opt_.enable_wind && !(w.leg_contact[0] || w.leg_contact[1])) {
    const float wind = std::tanh(std::sin(0.02f * w.wind_idx) + std::sin(kPi * 0.01f * w.wind_idx)) * opt_.wind_power;
    ++w.wind_idx;
    lander->ApplyForceToCenter(b2Vec2(wind, 0), true);
    const float torque =
        std::tanh(std::sin(0.02f * w.torque_idx) + std::sin(kPi * 0.01f * w.torque_idx)) * opt_.turbulence_power;
    ++w.torque_idx;
    lander->ApplyTorque(torque, true);
  }

  const b2Vec2 tip(std::sin(lander->GetAngle()), std::cos(lander->GetAngle()));
  const b2Vec2 side(-tip.y, tip.x);
  const float d0 = static_cast<float>(rng_.uniform(-1.0, 1.0)) / kScale;
  const float d1 = static_cast<float>(rng_.uniform(-1.0, 1.0)) / kScale;

  if (m_power > 0) {
    const float ox = tip.x * (4 / kScale + 2 * d0) + side.x * d1;
    const float oy = -tip.y * (4 / kScale + 2 * d0) - side.y * d1;
    const b2Vec2 at(lander->GetPosition().x + ox, lander->GetPosition().y + oy);
    lander->ApplyLinearImpulse(b2Vec2(-ox * kMainEnginePower * m_power, -oy * kMainEnginePower * m_power), at, true);
  }
  if (s_power > 0) {
    const float ox = tip.x * d0 + side.x * (3 * d1 + direction * kSideEngineAway / kScale);
    const float oy = -tip.y * d0 - side.y * (3 * d1 + direction * kSideEngineAway / kScale);
    const b2Vec2 at(lander->GetPosition().x + ox - tip.x * 17 / kScale,
                    lander->GetPosition().y + oy + tip.y * kSideEngineHeight / kScale);
    lander->ApplyLinearImpulse(b2Vec2(-ox * kSideEnginePower * s_power, -oy * kSideEnginePower * s_power), at, true);
  }
  w.main_power = m_power;
  w.side_power = s_power;
  w.side_direction = s_power > 0 ? direction : 0;

  w.world.Step(1.0f / kFps, 6 * 30, 2 * 30);

  const b2Vec2 pos = lander->GetPosition(), vel = lander->GetLinearVelocity();
  obs[0] = (pos.x - kW / 2) / (kW / 2);
  obs[1] = (pos.y - (w.helipad_y + kLegDown / kScale)) / (kH / 2);
  obs[2] = vel.x * (kW / 2) / kFps;
  obs[3] = vel.y * (kH / 2) / kFps;
  obs[4] = lander->GetAngle();
  obs[5] = 20.0f * lander->GetAngularVelocity() / kFps;
  obs[6] = w.leg_contact[0] ? 1.0f : 0.0f;
  obs[7] = w.leg_contact[1] ? 1.0f : 0.0f;

  const float shaping = -100 * std::sqrt(obs[0] * obs[0] + obs[1] * obs[1]) -
                        100 * std::sqrt(obs[2] * obs[2] + obs[3] * obs[3]) - 100 * std::abs(obs[4]) + 10 * obs[6] +
                        10 * obs[7];
  Step s;
  s.reward = w.has_prev_shaping ? shaping - w.prev_shaping : 0.0f;
  w.prev_shaping = shaping;
  w.has_prev_shaping = true;
  s.reward -= m_power * 0.30f;
  s.reward -= s_power * 0.03f;
  if (w.game_over || std::abs(obs[0]) >= 1.0f) {
    s.terminated = true;
    s.reward = -100;
  }
  if (!lander->IsAwake()) {
    s.terminated = true;
    s.reward = +100;
  }
  if (!s.terminated && ++steps_ >= kMaxSteps) s.truncated = true;
  done_ = s.done();
  return s;
}

LunarLander::Scene LunarLander::scene() const {
  Scene sc;
  if (!w_) return sc;
  sc.terrain = w_->terrain;
  sc.helipad_x1 = w_->helipad_x1;
  sc.helipad_x2 = w_->helipad_x2;
  sc.helipad_y = w_->helipad_y;
  sc.lander = outline(w_->lander);
  for (int i = 0; i < 2; ++i) sc.legs[i] = outline(w_->legs[i]);
  sc.leg_contact = w_->leg_contact;
  sc.main_power = w_->main_power;
  sc.side_power = w_->side_power;
  sc.side_direction = w_->side_direction;
  return sc;
}

bool LunarLander::awake() const { return w_ && w_->lander->IsAwake(); }

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
