// What the Box2D environments (LunarLander, BipedalWalker) share: doubles into Box2D, a body's
// state, a body part made as Gym's fixtureDefs make theirs, and a polygon body's outline for
// pictures. Private to envs/.
#pragma once

#include <box2d/box2d.h>

#include <array>
#include <cstdint>
#include <vector>

#include "envs/body_state.h"

namespace distrl::envs::detail {

// A point or vector computed in double, as Gymnasium's Python computes it, rounded into Box2D.
inline b2Vec2 vec(double x, double y) { return b2Vec2(static_cast<float>(x), static_cast<float>(y)); }

// A body's position, angle and velocities.
inline BodyState state_of(const b2Body* b) {
  return {b->GetPosition().x,       b->GetPosition().y,       b->GetAngle(),
          b->GetLinearVelocity().x, b->GetLinearVelocity().y, b->GetAngularVelocity()};
}

// A part of the lander or the walker: restitution 0, category `category`, colliding with the
// ground (category 0x001) only.
inline void add_ground_colliding_part(b2Body* body, const b2Shape& shape, float density, float friction,
                                      std::uint16_t category) {
  b2FixtureDef fd;
  fd.shape = &shape;
  fd.density = density;
  fd.friction = friction;
  fd.restitution = 0.0f;
  fd.filter.categoryBits = category;
  fd.filter.maskBits = 0x001;
  body->CreateFixture(&fd);
}

// The world coordinates of a body's first fixture, a polygon.
inline std::vector<std::array<float, 2>> outline(const b2Body* body) {
  std::vector<std::array<float, 2>> out;
  const auto* poly = static_cast<const b2PolygonShape*>(body->GetFixtureList()->GetShape());
  for (int i = 0; i < poly->m_count; ++i) {
    const b2Vec2 p = body->GetWorldPoint(poly->m_vertices[i]);
    out.push_back({p.x, p.y});
  }
  return out;
}

}  // namespace distrl::envs::detail
