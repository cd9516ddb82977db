// Talking to tests/support/gym_reference.py (Gymnasium's own Box2D environments, stepped as a
// test asks): a script of commands in, one answer line per command out, parsed here. Used by
// the LunarLander and BipedalWalker tests, which rebuild Gymnasium's episodes and compare.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/multiproc.h"
#include "tests/support/reference_python.h"

namespace distrl::testing {

// A double as the script reads it back exactly.
inline std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// A "bodies" / "lander_bodies" command: every body's x y angle vx vy w, then the env's shaping.
template <typename Env>
std::string bodies_command(const char* word, const Env& env) {
  std::string line = word;
  for (const auto& b : env.bodies())
    for (double v : {b.x, b.y, b.angle, b.vx, b.vy, b.angular_velocity}) line += " " + number(v);
  return line + " " + number(env.prev_shaping()) + "\n";
}

// Runs the commands in `script`; skip the check when !ran (no Gymnasium or Box2D here).
inline PythonRun run_gym_reference(const std::string& script) {
  TempDir dir;
  std::ofstream(dir.file("commands.txt")) << script;
  return run_reference_python("gym_reference.py", "< " + dir.file("commands.txt"), "gymnasium[box2d]");
}

// The numbers after `word`, the line's first word.
inline std::vector<double> numbers_after(const std::string& line, const std::string& word) {
  std::istringstream in(line);
  std::string w;
  in >> w;
  EXPECT_EQ(w, word) << line.substr(0, 200);
  std::vector<double> v;
  for (double x; in >> x;) v.push_back(x);
  return v;
}

// An "obs O... reward R terminated T truncated U" line.
struct StepLine {
  std::vector<double> obs;
  double reward = 0;
  bool terminated = false;
};

inline StepLine parse_step(const std::string& line, int obs_dim) {
  std::istringstream in(line);
  std::string w;
  in >> w;
  EXPECT_EQ(w, "obs") << line.substr(0, 200);
  StepLine s;
  for (int i = 0; i < obs_dim; ++i) {
    double x = 0;
    in >> x;
    s.obs.push_back(x);
  }
  int terminated = 0;
  in >> w >> s.reward >> w >> terminated;
  s.terminated = terminated != 0;
  return s;
}

// What the script printed for a "walker" or "lander" command: its draws, terrain points,
// obstacle polygons (the walker's hardcore course) and first observation; then one step line
// per "step" command after it.
struct GymEpisode {
  std::vector<double> draws, terrain;
  std::vector<std::vector<double>> obstacles;
  StepLine first;
  std::vector<StepLine> steps;
};

inline bool read_gym_episode(const std::string& out, int obs_dim, GymEpisode* r) {
  std::istringstream lines(out);
  std::string line;
  if (!std::getline(lines, line)) return false;
  r->draws = numbers_after(line, "draws");
  if (!std::getline(lines, line)) return false;
  r->terrain = numbers_after(line, "terrain");
  while (std::getline(lines, line) && line.rfind("obstacle ", 0) == 0)
    r->obstacles.push_back(numbers_after(line, "obstacle"));
  if (!lines && line.empty()) return false;
  r->first = parse_step(line, obs_dim);
  while (std::getline(lines, line)) r->steps.push_back(parse_step(line, obs_dim));
  return true;
}

}  // namespace distrl::testing
