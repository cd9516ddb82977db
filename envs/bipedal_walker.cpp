#include "envs/bipedal_walker.h"

#include <box2d/box2d.h>

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "envs/detail/box2d_parts.h"
#include "envs/detail/draws.h"

namespace distrl::envs {
namespace {

using BW = BipedalWalker;
constexpr double kPi = 3.14159265358979323846;
constexpr double kViewportW = 600, kViewportH = 400;
constexpr double kTerrainHeight = kViewportH / BW::kScale / 4;
constexpr double kLidarRange = 160 / BW::kScale;
constexpr double kInitialRandom = 5;
constexpr double kLegDown = -8 / BW::kScale, kLegW = 8 / BW::kScale, kLegH = 34 / BW::kScale;
constexpr double kFriction = 2.5;
constexpr std::uint16_t kGround = 0x0001, kWalker = 0x0020;

// Gymnasium's HULL_POLY, in pixels.
constexpr std::array<std::array<double, 2>, 5> kHullPoly{{{-30, +9}, {+6, +9}, {+34, +1}, {+34, -8}, {-30, -8}}};

using detail::outline;
using detail::vec;

// Gymnasium's HULL_FD / LEG_FD / LOWER_FD: the walker collides with the ground only.
void add_walker_part(b2Body* body, const b2Shape& shape, float density, float friction) {
  detail::add_ground_colliding_part(body, shape, density, friction, kWalker);
}

// Gymnasium's LidarCallback: the closest fixture of the ground along the ray.
struct Lidar : b2RayCastCallback {
  float fraction = 1;
  b2Vec2 p2;
  float ReportFixture(b2Fixture* fixture, const b2Vec2& point, const b2Vec2&, float f) override {
    if ((fixture->GetFilterData().categoryBits & 1) == 0) return -1;
    p2 = point;
    fraction = f;
    return f;
  }
};

double sign(double v) { return v > 0 ? 1.0 : v < 0 ? -1.0 : 0.0; }

}  // namespace

// One episode's physics; rebuilt at every reset so nothing carries over between episodes.
struct BipedalWalker::World : b2ContactListener {
  World() : world(b2Vec2(0, -10)) { world.SetContactListener(this); }

  void BeginContact(b2Contact* c) override { touch(c, true); }
  void EndContact(b2Contact* c) override { touch(c, false); }
  void touch(b2Contact* c, bool begin) {
    const b2Body* a = c->GetFixtureA()->GetBody();
    const b2Body* b = c->GetFixtureB()->GetBody();
    if (begin && (a == hull || b == hull)) game_over = true;
    for (int i : {1, 3})
      if (a == legs[i] || b == legs[i]) ground_contact[i] = begin;
  }

  b2Body* static_polygon(const std::array<std::array<double, 2>, 4>& poly) {
    b2BodyDef bd;
    b2Body* body = world.CreateBody(&bd);
    std::array<b2Vec2, 4> v;
    for (int i = 0; i < 4; ++i) v[i] = vec(poly[i][0], poly[i][1]);
    b2PolygonShape shape;
    shape.Set(v.data(), 4);
    b2FixtureDef fd;  // Gymnasium's fd_polygon: friction 2.5, the default filter
    fd.shape = &shape;
    fd.friction = static_cast<float>(kFriction);
    body->CreateFixture(&fd);
    obstacles.push_back(body);
    return body;
  }

  b2World world;
  std::vector<b2Body*> obstacles;
  std::vector<double> terrain_x, terrain_y;
  b2Body* hull = nullptr;
  std::array<b2Body*, 4> legs{};
  std::array<b2RevoluteJoint*, 4> joints{};
  std::array<bool, 4> ground_contact{};
  std::array<Lidar, kLidarRays> lidar;
  bool game_over = false;
  bool has_prev_shaping = false;
  double prev_shaping = 0;
};

BipedalWalker::BipedalWalker(bool hardcore)
    : hardcore_(hardcore), name_(hardcore ? "BipedalWalkerHardcore-v3" : "BipedalWalker-v3"),
      draws_(std::make_unique<detail::Draws>(name_)) {}

BipedalWalker::~BipedalWalker() = default;

Space BipedalWalker::observation_space() const {
  Space s;
  s.kind = Space::Kind::Box;
  const float pi = static_cast<float>(kPi);
  s.low = {-pi, -5, -5, -5, -pi, -5, -pi, -5, -0.0f, -pi, -5, -pi, -5, -0.0f};
  s.high = {pi, 5, 5, 5, pi, 5, pi, 5, 5, pi, 5, pi, 5, 5};
  s.low.resize(24, -1.0f);
  s.high.resize(24, 1.0f);
  return s;
}

Space BipedalWalker::action_space() const {
  Space s;
  s.kind = Space::Kind::Box;
  s.low.assign(4, -1.0f);
  s.high.assign(4, 1.0f);
  return s;
}

void BipedalWalker::seed(std::uint64_t seed) { draws_->seed(seed); }

void BipedalWalker::replay_draws(std::vector<double> draws) { draws_->replay_next(std::move(draws)); }

// Gymnasium's _generate_terrain, draw for draw, in double as Python computes it.
void BipedalWalker::generate_terrain() {
  World& w = *w_;
  enum { kGrass, kStump, kStairs, kPit, kStates };
  int state = kGrass;
  double velocity = 0.0, y = kTerrainHeight, original_y = 0;
  int counter = kTerrainStartpad;
  bool oneshot = false;
  int stair_steps = 0, stair_width = 0, stair_height = 0;
  const double step = kTerrainStep;
  for (int i = 0; i < kTerrainLength; ++i) {
    const double x = i * step;
    w.terrain_x.push_back(x);
    if (state == kGrass && !oneshot) {
      velocity = 0.8 * velocity + 0.01 * sign(kTerrainHeight - y);
      if (i > kTerrainStartpad) velocity += draws_->uniform(-1, 1) / kScale;
      y += velocity;
    } else if (state == kPit && oneshot) {
      counter = draws_->integer(3, 5);
      const std::array<std::array<double, 2>, 4> poly{
          {{x, y}, {x + step, y}, {x + step, y - 4 * step}, {x, y - 4 * step}}};
      w.static_polygon(poly);
      auto moved = poly;
      for (auto& p : moved) p[0] += step * counter;
      w.static_polygon(moved);
      counter += 2;
      original_y = y;
    } else if (state == kPit && !oneshot) {
      y = original_y;
      if (counter > 1) y -= 4 * step;
    } else if (state == kStump && oneshot) {
      counter = draws_->integer(1, 3);
      w.static_polygon(
          {{{x, y}, {x + counter * step, y}, {x + counter * step, y + counter * step}, {x, y + counter * step}}});
    } else if (state == kStairs && oneshot) {
      stair_height = draws_->uniform(0, 1) > 0.5 ? +1 : -1;  // np_random.random()
      stair_width = draws_->integer(4, 5);
      stair_steps = draws_->integer(3, 5);
      original_y = y;
      for (int s = 0; s < stair_steps; ++s)
        w.static_polygon({{{x + (s * stair_width) * step, y + (s * stair_height) * step},
                           {x + ((1 + s) * stair_width) * step, y + (s * stair_height) * step},
                           {x + ((1 + s) * stair_width) * step, y + (-1 + s * stair_height) * step},
                           {x + (s * stair_width) * step, y + (-1 + s * stair_height) * step}}});
      counter = stair_steps * stair_width;
    } else if (state == kStairs && !oneshot) {
      const double s = stair_steps * stair_width - counter - stair_height;
      const double n = s / stair_width;
      y = original_y + (n * stair_height) * step;
    }
    oneshot = false;
    w.terrain_y.push_back(y);
    if (--counter == 0) {
      counter = draws_->integer(kTerrainGrass / 2, kTerrainGrass);
      state = state == kGrass && hardcore_ ? draws_->integer(1, kStates) : kGrass;
      oneshot = true;
    }
  }
  // One static body per edge, friction 2.5, created left to right as Gymnasium does (the
  // creation order is the solver's order).
  for (int i = 0; i < kTerrainLength - 1; ++i) {
    b2BodyDef bd;
    b2Body* body = w.world.CreateBody(&bd);
    b2EdgeShape edge;
    edge.SetTwoSided(vec(w.terrain_x[i], w.terrain_y[i]), vec(w.terrain_x[i + 1], w.terrain_y[i + 1]));
    b2FixtureDef fd;
    fd.shape = &edge;
    fd.friction = static_cast<float>(kFriction);
    fd.filter.categoryBits = kGround;
    body->CreateFixture(&fd);
  }
}

void BipedalWalker::reset(float* obs) {
  draws_->begin_episode();  // a replay covers this reset (the walker's steps draw nothing)
  done_ = true;             // until the world is whole
  try {
    build_world();
  } catch (...) {
    w_.reset();  // never half a world: scene() and bodies() see none
    throw;
  }
  if (draws_->left() > 0)
    throw EnvError(name_ + ": " + std::to_string(draws_->left()) + " replayed draws were left unused");
  // Like Gymnasium, the first observation comes from one step with the motors off (not
  // counted towards the limit).
  done_ = false;
  steps_ = 0;
  const std::array<float, 4> still{};
  advance(still.data(), obs);
  steps_ = 0;
}

void BipedalWalker::build_world() {
  w_ = std::make_unique<World>();
  World& w = *w_;
  generate_terrain();

  const double init_x = kTerrainStep * kTerrainStartpad / 2, init_y = kTerrainHeight + 2 * kLegH;
  b2BodyDef hd;
  hd.type = b2_dynamicBody;
  hd.position = vec(init_x, init_y);
  w.hull = w.world.CreateBody(&hd);
  std::array<b2Vec2, 5> verts;
  for (std::size_t i = 0; i < kHullPoly.size(); ++i) verts[i] = vec(kHullPoly[i][0] / kScale, kHullPoly[i][1] / kScale);
  b2PolygonShape hull_shape;
  hull_shape.Set(verts.data(), static_cast<int32>(verts.size()));
  add_walker_part(w.hull, hull_shape, 5.0f, 0.1f);
  w.hull->ApplyForceToCenter(vec(draws_->uniform(-kInitialRandom, kInitialRandom), 0), true);

  for (int k = 0; k < 2; ++k) {
    const double i = k == 0 ? -1.0 : 1.0;
    b2BodyDef ld;
    ld.type = b2_dynamicBody;
    ld.position = vec(init_x, init_y - kLegH / 2 - kLegDown);
    ld.angle = static_cast<float>(i * 0.05);
    b2Body* leg = w.world.CreateBody(&ld);
    b2PolygonShape leg_shape;
    leg_shape.SetAsBox(static_cast<float>(kLegW / 2), static_cast<float>(kLegH / 2));
    add_walker_part(leg, leg_shape, 1.0f, 0.2f);  // pybox2d's default friction
    b2RevoluteJointDef hip;
    hip.bodyA = w.hull;
    hip.bodyB = leg;
    hip.localAnchorA = vec(0, kLegDown);
    hip.localAnchorB = vec(0, kLegH / 2);
    hip.referenceAngle = ld.angle;  // pybox2d's joint defs take bodyB's angle - bodyA's

    hip.enableMotor = true;
    hip.enableLimit = true;
    hip.maxMotorTorque = static_cast<float>(kMotorsTorque);
    hip.motorSpeed = static_cast<float>(i);
    hip.lowerAngle = -0.8f;
    hip.upperAngle = 1.1f;
    w.legs[2 * k] = leg;
    w.joints[2 * k] = static_cast<b2RevoluteJoint*>(w.world.CreateJoint(&hip));

    b2BodyDef lod;
    lod.type = b2_dynamicBody;
    lod.position = vec(init_x, init_y - kLegH * 3 / 2 - kLegDown);
    lod.angle = static_cast<float>(i * 0.05);
    b2Body* lower = w.world.CreateBody(&lod);
    b2PolygonShape lower_shape;
    lower_shape.SetAsBox(static_cast<float>(0.8 * kLegW / 2), static_cast<float>(kLegH / 2));
    add_walker_part(lower, lower_shape, 1.0f, 0.2f);
    b2RevoluteJointDef knee;
    knee.bodyA = leg;
    knee.bodyB = lower;
    knee.localAnchorA = vec(0, -kLegH / 2);
    knee.localAnchorB = vec(0, kLegH / 2);
    knee.referenceAngle = 0.0f;  // the same angle
    knee.enableMotor = true;
    knee.enableLimit = true;
    knee.maxMotorTorque = static_cast<float>(kMotorsTorque);
    knee.motorSpeed = 1.0f;
    knee.lowerAngle = -1.6f;
    knee.upperAngle = -0.1f;
    w.legs[2 * k + 1] = lower;
    w.joints[2 * k + 1] = static_cast<b2RevoluteJoint*>(w.world.CreateJoint(&knee));
  }
}

Step BipedalWalker::step(const float* action, float* obs) {
  for (int i = 0; i < 4; ++i)
    if (!std::isfinite(action[i]))
      throw EnvError(name_ + ": action[" + std::to_string(i) + "] is " + std::to_string(action[i]) + ", not finite");
  return advance(action, obs);
}

Step BipedalWalker::advance(const float* action, float* obs) {
  if (done_ || !w_) throw EnvError(name_ + ": step() after the episode ended; call reset()");
  World& w = *w_;
  for (int i = 0; i < 4; ++i) {
    const double speed = i % 2 == 0 ? kSpeedHip : kSpeedKnee;
    w.joints[i]->SetMotorSpeed(static_cast<float>(speed * sign(action[i])));
    w.joints[i]->SetMaxMotorTorque(
        static_cast<float>(kMotorsTorque * std::clamp(std::abs(double(action[i])), 0.0, 1.0)));
  }

  w.world.Step(static_cast<float>(1.0 / kFps), 6 * 30, 2 * 30);

  const b2Vec2 pos = w.hull->GetPosition(), vel = w.hull->GetLinearVelocity();
  for (int i = 0; i < kLidarRays; ++i) {
    Lidar& l = w.lidar[i];
    l.fraction = 1.0f;
    l.p2 = vec(pos.x + std::sin(1.5 * i / 10.0) * kLidarRange, pos.y - std::cos(1.5 * i / 10.0) * kLidarRange);
    w.world.RayCast(&l, pos, l.p2);
  }

  // In double, then rounded once to float32 as Gymnasium's array is (NumPy 2 computes some of
  // these in float32: a few ulps of difference, ~1e-7).
  const double angle = w.hull->GetAngle();
  std::array<double, 24> state{
      angle,
      2.0 * w.hull->GetAngularVelocity() / kFps,
      0.3 * vel.x * (kViewportW / kScale) / kFps,
      0.3 * vel.y * (kViewportH / kScale) / kFps,
      w.joints[0]->GetJointAngle(),
      w.joints[0]->GetJointSpeed() / kSpeedHip,
      w.joints[1]->GetJointAngle() + 1.0,
      w.joints[1]->GetJointSpeed() / kSpeedKnee,
      w.ground_contact[1] ? 1.0 : 0.0,
      w.joints[2]->GetJointAngle(),
      w.joints[2]->GetJointSpeed() / kSpeedHip,
      w.joints[3]->GetJointAngle() + 1.0,
      w.joints[3]->GetJointSpeed() / kSpeedKnee,
      w.ground_contact[3] ? 1.0 : 0.0,
  };
  for (int i = 0; i < kLidarRays; ++i) state[14 + i] = w.lidar[i].fraction;
  for (int i = 0; i < 24; ++i) obs[i] = static_cast<float>(state[i]);

  // Moving forward is rewarded (300 at the far end); keep the head straight.
  const double shaping = 130 * double(pos.x) / kScale - 5.0 * std::abs(angle);
  double reward = w.has_prev_shaping ? shaping - w.prev_shaping : 0.0;
  w.prev_shaping = shaping;
  w.has_prev_shaping = true;
  for (int i = 0; i < 4; ++i) reward -= 0.00035 * kMotorsTorque * std::clamp(std::abs(double(action[i])), 0.0, 1.0);

  Step s;
  if (w.game_over || pos.x < 0) {
    reward = -100;
    s.terminated = true;
  }
  if (pos.x > (kTerrainLength - kTerrainGrass) * kTerrainStep) s.terminated = true;
  s.reward = static_cast<float>(reward);
  if (!s.terminated && ++steps_ >= max_episode_steps()) s.truncated = true;
  done_ = s.done();
  return s;
}

std::array<BipedalWalker::BodyState, 5> BipedalWalker::bodies() const {
  std::array<BodyState, 5> out{};
  if (!w_) return out;
  for (int i = 0; i < 5; ++i) out[i] = detail::state_of(i == 0 ? w_->hull : w_->legs[i - 1]);
  return out;
}

double BipedalWalker::prev_shaping() const { return w_ ? w_->prev_shaping : 0.0; }

BipedalWalker::Scene BipedalWalker::scene() const {
  Scene sc;
  if (!w_) return sc;
  for (std::size_t i = 0; i < w_->terrain_x.size(); ++i) sc.terrain.push_back({w_->terrain_x[i], w_->terrain_y[i]});
  for (const b2Body* b : w_->obstacles) sc.obstacles.push_back(outline(b));
  sc.hull = outline(w_->hull);
  for (int i = 0; i < 4; ++i) sc.legs[i] = outline(w_->legs[i]);
  for (int i = 0; i < kLidarRays; ++i) sc.lidar[i] = {w_->lidar[i].p2.x, w_->lidar[i].p2.y};
  return sc;
}

std::array<float, 4> BipedalWalkerHeuristic::operator()(const float* s) {
  constexpr double kSpeed = 0.29, kSupportKneeAngle = 0.1;
  const int moving_base = 4 + 5 * moving_leg_, supporting_base = 4 + 5 * supporting_leg_;
  std::array<double, 2> hip_targ{}, knee_targ{};  // 0: none (Python's falsy None / 0.0)
  std::array<double, 2> hip_todo{}, knee_todo{};
  if (state_ == kStayOnOneLeg) {
    hip_targ[moving_leg_] = 1.1;
    knee_targ[moving_leg_] = -0.6;
    supporting_knee_angle_ += 0.03;
    if (s[2] > kSpeed) supporting_knee_angle_ += 0.03;
    supporting_knee_angle_ = std::min(supporting_knee_angle_, kSupportKneeAngle);
    knee_targ[supporting_leg_] = supporting_knee_angle_;
    if (s[supporting_base + 0] < 0.10) state_ = kPutOtherDown;  // the supporting leg is behind
  }
  if (state_ == kPutOtherDown) {
    hip_targ[moving_leg_] = +0.1;
    knee_targ[moving_leg_] = kSupportKneeAngle;
    knee_targ[supporting_leg_] = supporting_knee_angle_;
    if (s[moving_base + 4] != 0) {
      state_ = kPushOff;
      supporting_knee_angle_ = std::min(double(s[moving_base + 2]), kSupportKneeAngle);
    }
  }
  if (state_ == kPushOff) {
    knee_targ[moving_leg_] = supporting_knee_angle_;
    knee_targ[supporting_leg_] = +1.0;
    if (s[supporting_base + 2] > 0.88 || s[2] > 1.2 * kSpeed) {
      state_ = kStayOnOneLeg;
      moving_leg_ = 1 - moving_leg_;
      supporting_leg_ = 1 - moving_leg_;
    }
  }
  if (hip_targ[0] != 0) hip_todo[0] = 0.9 * (hip_targ[0] - s[4]) - 0.25 * s[5];
  if (hip_targ[1] != 0) hip_todo[1] = 0.9 * (hip_targ[1] - s[9]) - 0.25 * s[10];
  if (knee_targ[0] != 0) knee_todo[0] = 4.0 * (knee_targ[0] - s[6]) - 0.25 * s[7];
  if (knee_targ[1] != 0) knee_todo[1] = 4.0 * (knee_targ[1] - s[11]) - 0.25 * s[12];
  for (int k = 0; k < 2; ++k) {
    hip_todo[k] -= 0.9 * (0 - s[0]) - 1.5 * s[1];  // PID to keep the head straight
    knee_todo[k] -= 15.0 * s[3];                   // vertical speed, to damp oscillations
  }
  const std::array<double, 4> a{hip_todo[0], knee_todo[0], hip_todo[1], knee_todo[1]};
  std::array<float, 4> out;
  for (int i = 0; i < 4; ++i) out[i] = static_cast<float>(std::clamp(0.5 * a[i], -1.0, 1.0));
  return out;
}

}  // namespace distrl::envs
