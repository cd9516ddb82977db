#include "envs/env.h"

#include <map>
#include <mutex>

#include "common/error.h"
#include "envs/cartpole.h"
#include "envs/classic_control.h"
#include "envs/lunar_lander.h"

namespace distrl::envs {

std::string Space::describe() const {
  return kind == Kind::Discrete ? "Discrete(" + std::to_string(n) + ")" : "Box(" + std::to_string(low.size()) + ")";
}

Step Env::step(int, float*) {
  throw EnvError(name() + ": takes continuous actions (" + action_space().describe() + "), not a discrete one");
}

Step Env::step(const float*, float*) {
  throw EnvError(name() + ": takes a discrete action (" + action_space().describe() + "), not a vector");
}

namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, EnvFactory> factories;
  Registry() {
    factories["CartPole-v1"] = [] { return std::make_unique<CartPole>(); };
    factories["LunarLander-v2"] = [] { return std::make_unique<LunarLander>(); };
    factories["Acrobot-v1"] = [] { return std::make_unique<Acrobot>(); };
    factories["MountainCar-v0"] = [] { return std::make_unique<MountainCar>(false); };
    factories["MountainCarContinuous-v0"] = [] { return std::make_unique<MountainCar>(true); };
    factories["Pendulum-v1"] = [] { return std::make_unique<Pendulum>(); };
    factories["LunarLanderContinuous-v2"] = [] {
      LunarLanderOptions o;
      o.continuous = true;
      return std::make_unique<LunarLander>(o);
    };
  }
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

void register_env(const std::string& name, EnvFactory factory) {
  std::lock_guard<std::mutex> lock(registry().mu);
  registry().factories[name] = std::move(factory);
}

std::vector<std::string> env_names() {
  std::lock_guard<std::mutex> lock(registry().mu);
  std::vector<std::string> names;
  for (const auto& kv : registry().factories) names.push_back(kv.first);
  return names;
}

std::unique_ptr<Env> make_env(const std::string& name) {
  EnvFactory f;
  {
    std::lock_guard<std::mutex> lock(registry().mu);
    auto it = registry().factories.find(name);
    if (it != registry().factories.end()) f = it->second;
  }
  if (!f) {
    std::string names;
    for (const auto& n : env_names()) names += (names.empty() ? "" : ", ") + n;
    throw EnvError("unknown environment '" + name + "' (available: " + names + ")");
  }
  return f();
}

}  // namespace distrl::envs
