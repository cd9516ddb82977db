#include "envs/render.h"

#include <gif_lib.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>

#include "common/error.h"
#include "envs/bipedal_walker.h"
#include "envs/cartpole.h"
#include "envs/lunar_lander.h"

namespace distrl::envs {
namespace {

enum Colour : std::uint8_t {
  kSky,
  kGround,
  kPole,
  kFlag,
  kBody,
  kLeg,
  kFlame,
  kContact,
  kCart,
  kRod,
  kTrack,
  kGrass,
  kLidar,
  kFarLeg,
  kDaySky
};
constexpr std::array<std::array<std::uint8_t, 3>, 16> kPalette{{{0, 0, 0},
                                                                {255, 255, 255},
                                                                {204, 204, 204},
                                                                {204, 204, 0},
                                                                {128, 102, 230},
                                                                {77, 77, 128},
                                                                {255, 140, 30},
                                                                {80, 200, 80},
                                                                {60, 60, 60},
                                                                {202, 152, 101},
                                                                {120, 120, 120},
                                                                {102, 153, 76},
                                                                {255, 80, 80},
                                                                {110, 60, 100},
                                                                {215, 215, 255}}};

using Pt = std::array<float, 2>;  // pixels, y down

class Canvas {
 public:
  explicit Canvas(Frame* f) : f_(f) { f_->pixels.assign(static_cast<std::size_t>(f->width) * f->height, kSky); }
  void clear(std::uint8_t c) { std::fill(f_->pixels.begin(), f_->pixels.end(), c); }
  // Even-odd scanline fill, sampling pixel centres.
  void polygon(const std::vector<Pt>& p, std::uint8_t c) {
    if (p.size() < 3) return;
    float lo = p[0][1], hi = p[0][1];
    for (const auto& q : p) lo = std::min(lo, q[1]), hi = std::max(hi, q[1]);
    const int y0 = std::max(0, static_cast<int>(std::floor(lo))),
              y1 = std::min(f_->height - 1, static_cast<int>(std::ceil(hi)));
    std::vector<float> xs;
    for (int y = y0; y <= y1; ++y) {
      const float yc = y + 0.5f;
      xs.clear();
      for (std::size_t i = 0; i < p.size(); ++i) {
        const Pt& a = p[i];
        const Pt& b = p[(i + 1) % p.size()];
        if ((a[1] <= yc) != (b[1] <= yc)) xs.push_back(a[0] + (yc - a[1]) / (b[1] - a[1]) * (b[0] - a[0]));
      }
      std::sort(xs.begin(), xs.end());
      for (std::size_t k = 0; k + 1 < xs.size(); k += 2) {
        const int xa = std::max(0, static_cast<int>(std::ceil(xs[k] - 0.5f)));
        const int xb = std::min(f_->width - 1, static_cast<int>(std::floor(xs[k + 1] - 0.5f)));
        for (int x = xa; x <= xb; ++x) f_->pixels[static_cast<std::size_t>(y) * f_->width + x] = c;
      }
    }
  }
  void rect(float x0, float y0, float x1, float y1, std::uint8_t c) {
    polygon({{x0, y0}, {x1, y0}, {x1, y1}, {x0, y1}}, c);
  }
  void line(Pt a, Pt b, std::uint8_t c) {  // one pixel wide
    const int n = static_cast<int>(std::max(std::abs(b[0] - a[0]), std::abs(b[1] - a[1]))) + 1;
    for (int i = 0; i <= n; ++i) {
      const int x = static_cast<int>(a[0] + (b[0] - a[0]) * i / n), y = static_cast<int>(a[1] + (b[1] - a[1]) * i / n);
      if (x >= 0 && x < f_->width && y >= 0 && y < f_->height)
        f_->pixels[static_cast<std::size_t>(y) * f_->width + x] = c;
    }
  }

 private:
  Frame* f_;
};

void draw_lander(const LunarLander& env, Canvas& cv) {
  const auto sc = env.scene();
  const float s = LunarLander::kScale, h = LunarLander::kViewportH;
  auto px = [&](const std::array<float, 2>& w) { return Pt{w[0] * s, h - w[1] * s}; };
  cv.clear(kSky);
  std::vector<Pt> ground{{0, h}};
  for (const auto& p : sc.terrain) ground.push_back(px(p));
  ground.push_back({LunarLander::kViewportW, h});
  cv.polygon(ground, kGround);
  for (float x : {sc.helipad_x1, sc.helipad_x2}) {  // flag poles and flags, as Gym draws them
    const Pt base = px({x, sc.helipad_y});
    cv.rect(base[0] - 1, base[1] - 50, base[0] + 1, base[1], kPole);
    cv.polygon({{base[0], base[1] - 50}, {base[0], base[1] - 40}, {base[0] + 25, base[1] - 45}}, kFlag);
  }
  std::vector<Pt> body;
  for (const auto& p : sc.lander) body.push_back(px(p));
  Pt mid{0, 0};  // the body's centre, where the flames start
  for (const auto& p : body) mid[0] += p[0] / body.size(), mid[1] += p[1] / body.size();
  if (sc.main_power > 0) {  // flame under the body, as long as the thrust
    const float len = 12 + 20 * sc.main_power;
    cv.polygon({{mid[0] - 6, mid[1] + 8}, {mid[0] + 6, mid[1] + 8}, {mid[0], mid[1] + 8 + len}}, kFlame);
  }
  if (sc.side_power > 0) {
    const float dir = static_cast<float>(-sc.side_direction);  // the exhaust leaves on the other side
    cv.polygon({{mid[0] + dir * 17, mid[1] - 10}, {mid[0] + dir * 17, mid[1] - 4}, {mid[0] + dir * 30, mid[1] - 7}},
               kFlame);
  }
  for (int i = 0; i < 2; ++i) {
    std::vector<Pt> leg;
    for (const auto& p : sc.legs[i]) leg.push_back(px(p));
    cv.polygon(leg, sc.leg_contact[i] ? kContact : kLeg);
  }
  cv.polygon(body, kBody);
}

// Gymnasium's view: 600x400 pixels at 30 per unit, scrolled to keep the hull a fifth from the
// left; the first lidar ray that hits, the far leg darker than the near one.
void draw_walker(const BipedalWalker& env, Canvas& cv) {
  const auto sc = env.scene();
  const float s = static_cast<float>(BipedalWalker::kScale), h = kFrameHeight;
  const auto hull_body = env.bodies()[0];
  const float scroll = static_cast<float>(hull_body.x) - kFrameWidth / s / 5;
  auto px = [&](const std::array<float, 2>& w) { return Pt{(w[0] - scroll) * s, h - w[1] * s}; };
  cv.clear(kDaySky);
  for (std::size_t i = 0; i + 1 < sc.terrain.size(); ++i) {
    const Pt a = px({static_cast<float>(sc.terrain[i][0]), static_cast<float>(sc.terrain[i][1])});
    const Pt b = px({static_cast<float>(sc.terrain[i + 1][0]), static_cast<float>(sc.terrain[i + 1][1])});
    if (b[0] < 0 || a[0] > kFrameWidth) continue;
    cv.polygon({a, b, {b[0], h}, {a[0], h}}, kGrass);
  }
  for (const auto& o : sc.obstacles) {
    std::vector<Pt> poly;
    for (const auto& p : o) poly.push_back(px(p));
    cv.polygon(poly, kGround);
  }
  const Pt start = px({static_cast<float>(BipedalWalker::kTerrainStep * 3), static_cast<float>(sc.terrain[3][1])});
  cv.rect(start[0] - 1, start[1] - 50, start[0] + 1, start[1], kPole);  // Gymnasium's start flag
  cv.polygon({{start[0], start[1] - 50}, {start[0], start[1] - 40}, {start[0] + 25, start[1] - 45}}, kFlag);
  const Pt hull_at = px({static_cast<float>(hull_body.x), static_cast<float>(hull_body.y)});
  for (const auto& p : sc.lidar) cv.line(hull_at, px(p), kLidar);
  for (int i : {2, 3, 0, 1}) {  // the far leg first
    std::vector<Pt> leg;
    for (const auto& p : sc.legs[i]) leg.push_back(px(p));
    cv.polygon(leg, i < 2 ? kLeg : kFarLeg);
  }
  std::vector<Pt> hull;
  for (const auto& p : sc.hull) hull.push_back(px(p));
  cv.polygon(hull, kBody);
}

void draw_cartpole(const CartPole& env, Canvas& cv) {  // Gym's classic_control drawing
  const auto& st = env.state();
  const float world_width = static_cast<float>(CartPole::kXThreshold * 2);
  const float scale = kFrameWidth / world_width, carty = kFrameHeight - 100.0f;
  const float polewidth = 10, polelen = scale * static_cast<float>(2 * CartPole::kLength);
  const float cartw = 50, carth = 30;
  cv.clear(kGround);
  cv.rect(0, carty - 0.5f, kFrameWidth, carty + 0.5f, kTrack);
  const float cx = static_cast<float>(st[0]) * scale + kFrameWidth / 2.0f;
  cv.rect(cx - cartw / 2, carty - carth / 2, cx + cartw / 2, carty + carth / 2, kCart);
  const float th = static_cast<float>(st[2]);
  const float axle_y = carty - carth / 4;
  std::vector<Pt> pole;
  for (const auto& c : std::array<Pt, 4>{{{-polewidth / 2, 0},
                                          {-polewidth / 2, polelen - polewidth / 2},
                                          {polewidth / 2, polelen - polewidth / 2},
                                          {polewidth / 2, 0}}}) {
    // rotate by -theta (clockwise positive angle leans right), y up -> down
    const float x = c[0] * std::cos(th) + c[1] * std::sin(th), y = -c[0] * std::sin(th) + c[1] * std::cos(th);
    pole.push_back({cx + x, axle_y - y});
  }
  cv.polygon(pole, kRod);
}

}  // namespace

void draw(const Env& env, Frame* frame) {
  frame->width = kFrameWidth;
  frame->height = kFrameHeight;
  Canvas cv(frame);
  if (const auto* l = dynamic_cast<const LunarLander*>(&env)) return draw_lander(*l, cv);
  if (const auto* c = dynamic_cast<const CartPole*>(&env)) return draw_cartpole(*c, cv);
  if (const auto* w = dynamic_cast<const BipedalWalker*>(&env)) return draw_walker(*w, cv);
  throw EnvError("render: no picture for " + env.name() +
                 " (drawn: CartPole-v1, LunarLander-v2/-v3, "
                 "LunarLanderContinuous-v2/-v3, BipedalWalker-v3, BipedalWalkerHardcore-v3)");
}

struct GifWriter::Impl {
  GifFileType* gif = nullptr;
  ColorMapObject* map = nullptr;
  std::string path;
  int width = 0, height = 0, delay = 2;
};

GifWriter::GifWriter(const std::string& path, int width, int height, int delay_cs) : impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  impl_->width = width;
  impl_->height = height;
  impl_->delay = delay_cs;
  int err = 0;
  impl_->gif = EGifOpenFileName(path.c_str(), false, &err);
  if (!impl_->gif) throw EnvError("render: cannot write '" + path + "': " + GifErrorString(err));
  EGifSetGifVersion(impl_->gif, true);
  std::array<GifColorType, kPalette.size()> colours{};
  for (std::size_t i = 0; i < kPalette.size(); ++i) colours[i] = {kPalette[i][0], kPalette[i][1], kPalette[i][2]};
  impl_->map = GifMakeMapObject(static_cast<int>(kPalette.size()), colours.data());
  if (EGifPutScreenDesc(impl_->gif, width, height, 8, 0, impl_->map) == GIF_ERROR)
    throw EnvError("render: writing '" + path + "' failed: " + GifErrorString(impl_->gif->Error));
  // Loop forever (the NETSCAPE2.0 application extension).
  const unsigned char loop[3] = {1, 0, 0};
  EGifPutExtensionLeader(impl_->gif, APPLICATION_EXT_FUNC_CODE);
  EGifPutExtensionBlock(impl_->gif, 11, "NETSCAPE2.0");
  EGifPutExtensionBlock(impl_->gif, 3, loop);
  EGifPutExtensionTrailer(impl_->gif);
}

GifWriter::~GifWriter() {
  try {
    close();
  } catch (...) {}
}

void GifWriter::add(const Frame& f) {
  if (!impl_->gif) throw EnvError("render: '" + impl_->path + "' is already closed");
  if (f.width != impl_->width || f.height != impl_->height)
    throw EnvError("render: frame of " + std::to_string(f.width) + "x" + std::to_string(f.height) + " for a " +
                   std::to_string(impl_->width) + "x" + std::to_string(impl_->height) + " GIF");
  const unsigned char gce[4] = {0, static_cast<unsigned char>(impl_->delay & 0xff),
                                static_cast<unsigned char>(impl_->delay >> 8), 0};
  EGifPutExtension(impl_->gif, GRAPHICS_EXT_FUNC_CODE, 4, gce);
  if (EGifPutImageDesc(impl_->gif, 0, 0, f.width, f.height, false, nullptr) == GIF_ERROR)
    throw EnvError("render: writing '" + impl_->path + "' failed: " + GifErrorString(impl_->gif->Error));
  std::vector<GifPixelType> row(f.width);
  for (int y = 0; y < f.height; ++y) {
    std::copy_n(f.pixels.begin() + static_cast<std::ptrdiff_t>(y) * f.width, f.width, row.begin());
    if (EGifPutLine(impl_->gif, row.data(), f.width) == GIF_ERROR)
      throw EnvError("render: writing '" + impl_->path + "' failed: " + GifErrorString(impl_->gif->Error));
  }
  ++frames_;
}

void GifWriter::close() {
  if (!impl_->gif) return;
  int err = 0;
  const int rc = EGifCloseFile(impl_->gif, &err);
  impl_->gif = nullptr;
  GifFreeMapObject(impl_->map);
  impl_->map = nullptr;
  if (rc == GIF_ERROR) throw EnvError("render: finishing '" + impl_->path + "' failed: " + GifErrorString(err));
  // giflib creates the file 0600; a picture is for sharing.
  std::error_code ec;
  namespace fs = std::filesystem;
  fs::permissions(impl_->path,
                  fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read, ec);
}

}  // namespace distrl::envs
