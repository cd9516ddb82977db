"""Steps Gymnasium's own environments as tests/unit/envs/gymnasium_test.cpp asks, line by line on
stdin, and prints what Gymnasium answers (one line per command). Exit 3 when gymnasium is absent.

  make ID         a fresh gymnasium.make(ID), reset; prints "spec MAX_STEPS THRESHOLD" ("none")
  set V...        the unwrapped env's state becomes these numbers (float64)
  step A...       one step (one integer for a discrete action space, else floats); prints
                  "obs O... reward R terminated T truncated U"
"""
import sys
import warnings

try:
    import gymnasium
    import numpy as np
except ImportError as e:  # the caller skips, saying why
    print(f"no gymnasium here: {e}")
    sys.exit(3)

warnings.filterwarnings("ignore")  # out-of-bounds actions on purpose: the clipping is tested
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
        obs, reward, terminated, truncated, _ = env.step(action)
        values = " ".join(repr(float(v)) for v in np.asarray(obs, dtype=np.float64))
        print(f"obs {values} reward {float(reward)!r} terminated {int(terminated)} truncated {int(truncated)}",
              flush=True)
    else:
        print(f"unknown command {words[0]}")
        sys.exit(2)
