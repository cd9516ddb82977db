// One Box2D body's state in world units (x right, y up): what LunarLander and BipedalWalker
// report of their bodies, for tests that set Gymnasium's bodies to theirs. A plain value.
#pragma once

namespace distrl::envs {

struct BodyState {
  double x = 0, y = 0, angle = 0, vx = 0, vy = 0, angular_velocity = 0;
};

}  // namespace distrl::envs
