// Pictures of environments, for people: draw CartPole-v1, LunarLander or BipedalWalker into an
// indexed-colour frame (Gym's 600x400 view) and write frames as an animated GIF (giflib).
//
//   envs::Frame frame;
//   envs::GifWriter gif("episode.gif", envs::kFrameWidth, envs::kFrameHeight, /*delay_cs=*/2);
//   while (...) { env->step(a, obs); envs::draw(*env, &frame); gif.add(frame); }
//   gif.close();
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "envs/env.h"

namespace distrl::envs {

constexpr int kFrameWidth = 600, kFrameHeight = 400;

struct Frame {
  int width = kFrameWidth, height = kFrameHeight;
  std::vector<std::uint8_t> pixels;  // palette indices, row 0 at the top
};

// Draws the env's current state (after reset or step). Throws EnvError for an env without a
// picture (the message lists those that have one).
void draw(const Env& env, Frame* frame);

class GifWriter {
 public:
  // delay_cs: hundredths of a second per frame. Throws EnvError when the file cannot be written.
  GifWriter(const std::string& path, int width, int height, int delay_cs);
  ~GifWriter();
  GifWriter(const GifWriter&) = delete;
  GifWriter& operator=(const GifWriter&) = delete;
  void add(const Frame& frame);
  void close();  // finishes the file (also done by the destructor)
  int frames() const { return frames_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int frames_ = 0;
};

}  // namespace distrl::envs
