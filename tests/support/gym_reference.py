"""Steps Gymnasium's own environments as tests/unit/envs/gymnasium_test.cpp asks, line by line on
stdin, and prints what Gymnasium answers (one line per command). Exit 3 when gymnasium is absent.

  make ID         a fresh gymnasium.make(ID), reset; prints "spec MAX_STEPS THRESHOLD" ("none")
  set V...        the unwrapped env's state becomes these numbers (float64)
  step A...       one step (one integer for a discrete action space, else floats); prints
                  "obs O... reward R terminated T truncated U"
  walker ID SEED  a fresh gymnasium.make(ID) of a BipedalWalker, reset(seed=SEED), recording the
                  random draws of its terrain and initial push (not of its clouds); prints
                  "draws V...", "terrain X Y X Y ..." (every terrain point), "obstacle X Y ..."
                  per obstacle polygon in creation order, then the reset's "obs ..." line
  bodies V...     the walker's hull and four leg segments get these positions, angles and
                  velocities (x y angle vx vy w each, Gymnasium's order), then its prev_shaping
  lander ID SEED STEPS [wind]
                  a fresh gymnasium.make(ID) of a LunarLander (with enable_wind=True if "wind"),
                  reset(seed=SEED), recording every random draw of the reset (its first step's
                  included); prints "draws V..." (those, then 2*STEPS more from a copy of the
                  generator: the next steps' dispersions), "terrain X Y X Y ..." (the smoothed
                  chunk points) and the reset's "obs ..." line
  lander_bodies V...
                  the lander and its two legs get these positions, angles and velocities (as
                  bodies does), then its prev_shaping
"""
import copy
import sys
import warnings

try:
    import gymnasium
    import numpy as np
except ImportError as e:  # the caller skips, saying why
    print(f"no gymnasium here: {e}")
    sys.exit(3)

warnings.filterwarnings("ignore")  # out-of-bounds actions on purpose: the clipping is tested


class Recorder:
    """np_random as the walker's terrain sees it, writing down every number it gives."""

    def __init__(self, real, log):
        self.real, self.log = real, log

    def _record(self, value):
        self.log.extend(float(v) for v in np.ravel(value))
        return value

    def uniform(self, *args, **kwargs):
        return self._record(self.real.uniform(*args, **kwargs))

    def integers(self, *args, **kwargs):
        return self._record(self.real.integers(*args, **kwargs))

    def random(self, *args, **kwargs):
        return self._record(self.real.random(*args, **kwargs))


def make_walker(env_id, seed):
    from gymnasium.envs.box2d import bipedal_walker as bw  # Box2D: exits 3 below when absent

    draws = []
    walker = gymnasium.make(env_id)
    inner = walker.unwrapped
    terrain, clouds = inner._generate_terrain, inner._generate_clouds

    def recorded_terrain(hardcore):
        inner._np_random = Recorder(inner._np_random, draws)
        terrain(hardcore)

    def unrecorded_clouds():  # decoration: left out here; the push after it is recorded
        recorder = inner._np_random
        inner._np_random = recorder.real
        clouds()
        inner._np_random = recorder

    inner._generate_terrain, inner._generate_clouds = recorded_terrain, unrecorded_clouds
    obs, _ = walker.reset(seed=seed)
    inner._np_random = inner._np_random.real
    print("draws " + " ".join(repr(v) for v in draws))
    print("terrain " + " ".join(f"{float(x)!r} {float(y)!r}" for x, y in zip(inner.terrain_x, inner.terrain_y)))
    for body in reversed(inner.terrain):  # Gymnasium reversed its creation order
        shape = body.fixtures[0].shape
        if isinstance(shape, bw.polygonShape):
            print("obstacle " + " ".join(f"{float(x)!r} {float(y)!r}" for x, y in shape.vertices))
    print_step(obs, 0.0, False, False)
    return walker


def make_lander(env_id, seed, steps, wind):
    draws = []
    lander = gymnasium.make(env_id, enable_wind=wind)
    inner = lander.unwrapped
    destroy = inner._destroy

    def recorded_destroy():  # reset() calls it right after seeding np_random
        destroy()
        inner._np_random = Recorder(inner._np_random, draws)

    inner._destroy = recorded_destroy
    obs, _ = lander.reset(seed=seed)
    inner._np_random = inner._np_random.real
    inner._destroy = destroy
    ahead = copy.deepcopy(inner._np_random)
    draws += [float(ahead.uniform(-1.0, +1.0)) for _ in range(2 * steps)]
    print("draws " + " ".join(repr(v) for v in draws))
    points = [poly[0] for poly in inner.sky_polys] + [inner.sky_polys[-1][1]]
    print("terrain " + " ".join(f"{float(x)!r} {float(y)!r}" for x, y in points))
    print_step(obs, 0.0, False, False)
    return lander


def make_box2d(make, *args):
    """make(*args), or exit 3 (the caller skips) when Gymnasium has no Box2D here."""
    try:
        return make(*args)
    except gymnasium.error.DependencyNotInstalled as e:
        print(f"no Box2D for gymnasium here: {e}")
        sys.exit(3)


def set_bodies(bodies, values):
    for body, v in zip(bodies, [values[i:i + 6] for i in range(0, 6 * len(bodies), 6)]):
        body.position = (v[0], v[1])
        body.angle = v[2]
        body.linearVelocity = (v[3], v[4])
        body.angularVelocity = v[5]
    return values[6 * len(bodies)]


def print_step(obs, reward, terminated, truncated):
    values = " ".join(repr(float(v)) for v in np.asarray(obs, dtype=np.float64))
    print(f"obs {values} reward {float(reward)!r} terminated {int(terminated)} truncated {int(truncated)}", flush=True)


env = None
for line in sys.stdin:
    words = line.split()
    if not words:
        continue
    if words[0] == "make":
        env = gymnasium.make(words[1])
        env.reset(seed=0)
        spec = env.spec
        threshold = "none" if spec.reward_threshold is None else repr(float(spec.reward_threshold))
        print(f"spec {spec.max_episode_steps} {threshold}", flush=True)
    elif words[0] == "set":
        env.unwrapped.state = np.array([float(v) for v in words[1:]], dtype=np.float64)
    elif words[0] == "step":
        if isinstance(env.action_space, gymnasium.spaces.Discrete):
            action = int(words[1])
        else:
            action = np.array([float(v) for v in words[1:]], dtype=np.float32)
        print_step(*env.step(action)[:4])
    elif words[0] == "walker":
        env = make_box2d(make_walker, words[1], int(words[2]))
    elif words[0] == "bodies":
        walker = env.unwrapped
        walker.prev_shaping = set_bodies([walker.hull] + walker.legs, [float(v) for v in words[1:]])
    elif words[0] == "lander":
        env = make_box2d(make_lander, words[1], int(words[2]), int(words[3]), words[4:] == ["wind"])
    elif words[0] == "lander_bodies":
        lander = env.unwrapped
        lander.prev_shaping = set_bodies([lander.lander] + lander.legs, [float(v) for v in words[1:]])
    else:
        print(f"unknown command {words[0]}")
        sys.exit(2)
