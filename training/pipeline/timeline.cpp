#include "training/pipeline/timeline.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>

#include "common/plot.h"

namespace distrl::training::pipeline {

double monotonic_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

ClockOffset clock_offset(const std::vector<ClockSample>& samples) {
  if (samples.empty()) throw ArgumentError("clock_offset: no round trips");
  const ClockSample& best = *std::min_element(
      samples.begin(), samples.end(), [](const auto& a, const auto& b) { return a.back - a.sent < b.back - b.sent; });
  return {best.peer - (best.sent + best.back) / 2, (best.back - best.sent) / 2};
}

namespace {

constexpr int kTimelineTag = 1 << 30;  // + 0: row count, + 1: rows, + 2: clock round trips
constexpr int kClockRounds = 8;

// Stage 0's side of the round trips with rank r; r answers each with its clock (answer_clock).
ClockOffset measure_clock(transport::ProcessGroup& pg, int r, const std::function<double()>& clock) {
  std::vector<ClockSample> samples;
  at::Tensor t = at::zeros({1}, at::kDouble);
  for (int i = 0; i < kClockRounds; ++i) {
    const double sent = clock();
    pg.send(t, r, kTimelineTag + 2);
    pg.recv(t, r, kTimelineTag + 2);
    samples.push_back({sent, t.item<double>(), clock()});
  }
  return clock_offset(samples);
}

void answer_clock(transport::ProcessGroup& pg, const std::function<double()>& clock) {
  at::Tensor t = at::zeros({1}, at::kDouble);
  for (int i = 0; i < kClockRounds; ++i) {
    pg.recv(t, 0, kTimelineTag + 2);
    t.fill_(clock());
    pg.send(t, 0, kTimelineTag + 2);
  }
}

at::Tensor pack_timeline(const std::vector<TimedAction>& tl) {
  at::Tensor t = at::empty({static_cast<std::int64_t>(tl.size()), 5}, at::kDouble);
  auto a = t.accessor<double, 2>();
  for (std::size_t i = 0; i < tl.size(); ++i) {
    a[i][0] = static_cast<double>(tl[i].action.op);
    a[i][1] = tl[i].action.mb;
    a[i][2] = tl[i].action.chunk;
    a[i][3] = tl[i].start_us;
    a[i][4] = tl[i].end_us;
  }
  return t;
}

// Rank r's timeline, its times moved onto our clock.
std::vector<TimedAction> receive_timeline(transport::ProcessGroup& pg, int r, double offset_us) {
  at::Tensor n = at::empty({1}, at::kLong);
  pg.recv(n, r, kTimelineTag);
  const std::int64_t rows = n.item<std::int64_t>();
  if (rows < 0 || rows > (1 << 24))
    throw ProtocolError("gather_timelines: stage " + std::to_string(r) + " announced a timeline of " +
                        std::to_string(rows) + " actions (0 to 2^24)");
  std::vector<TimedAction> out;
  if (rows == 0) return out;
  at::Tensor t = at::empty({rows, 5}, at::kDouble);
  pg.recv(t, r, kTimelineTag + 1);
  auto a = t.accessor<double, 2>();
  for (std::int64_t i = 0; i < rows; ++i)
    out.push_back(TimedAction{
        Action{static_cast<Op>(static_cast<int>(a[i][0])), static_cast<int>(a[i][1]), static_cast<int>(a[i][2])},
        a[i][3] - offset_us, a[i][4] - offset_us});
  return out;
}

}  // namespace

GatheredTimelines gather_timelines(transport::ProcessGroup& pg, const std::vector<TimedAction>& mine,
                                   const std::function<double()>& clock) {
  if (pg.rank() != 0) {
    answer_clock(pg, clock);
    pg.send(at::full({1}, static_cast<std::int64_t>(mine.size()), at::kLong), 0, kTimelineTag);
    if (!mine.empty()) pg.send(pack_timeline(mine), 0, kTimelineTag + 1);
    return {};
  }
  GatheredTimelines all;
  all.stages.assign(pg.size(), {});
  all.clock_error_us.assign(pg.size(), 0);
  all.stages[0] = mine;
  for (int r = 1; r < pg.size(); ++r) {
    const ClockOffset off = measure_clock(pg, r, clock);
    all.clock_error_us[r] = off.error_us;
    all.stages[r] = receive_timeline(pg, r, off.offset_us);
  }
  return all;
}

std::pair<double, double> timeline_span(const std::vector<std::vector<TimedAction>>& tls) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const auto& tl : tls)
    for (const auto& a : tl) {
      lo = std::min(lo, a.start_us);
      hi = std::max(hi, a.end_us);
    }
  return {lo, hi};
}

std::vector<double> measured_bubbles(const std::vector<std::vector<TimedAction>>& tls) {
  const auto [lo, hi] = timeline_span(tls);
  std::vector<double> out;
  for (const auto& tl : tls) {
    double busy = 0;
    for (const auto& a : tl)
      if (is_compute(a.action.op)) busy += a.end_us - a.start_us;
    out.push_back(hi > lo ? 1.0 - busy / (hi - lo) : 0);
  }
  return out;
}

void write_chrome_trace(const Schedule& s, const std::vector<std::vector<TimedAction>>& tls, const std::string& path) {
  const double t0 = timeline_span(tls).first;
  std::ofstream out(path);
  if (!out) throw Error("cannot write " + path);
  out << std::fixed << std::setprecision(3);  // microseconds to the nanosecond, at any length of run
  out << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  bool first = true;
  auto sep = [&] {
    if (!first) out << ",\n";
    first = false;
  };
  // Where each transfer was received: (kind, mb, receiving vs) -> (stage, end time).
  std::map<std::tuple<int, int, int>, std::pair<int, double>> received;
  for (std::size_t st = 0; st < tls.size(); ++st) {
    sep();
    out << "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":0,\"tid\":" << st << ",\"args\":{\"name\":\"stage " << st
        << "\"}}";
    for (const auto& a : tls[st]) {
      const bool compute = is_compute(a.action.op);
      sep();
      out << "{\"ph\":\"X\",\"pid\":0,\"tid\":" << st << ",\"name\":\"" << to_string(a.action) << "\",\"cat\":\""
          << (compute ? "compute" : "transfer") << "\",\"ts\":" << (a.start_us - t0)
          << ",\"dur\":" << std::max(0.0, a.end_us - a.start_us) << "}";
      const int vs = s.virtual_stage(static_cast<int>(st), a.action.chunk);
      if (a.action.op == Op::RecvF) received[{0, a.action.mb, vs}] = {static_cast<int>(st), a.end_us};
      if (a.action.op == Op::RecvB) received[{1, a.action.mb, vs}] = {static_cast<int>(st), a.end_us};
    }
  }
  int id = 0;
  for (std::size_t st = 0; st < tls.size(); ++st)
    for (const auto& a : tls[st]) {
      if (a.action.op != Op::SendF && a.action.op != Op::SendB) continue;
      const int vs = s.virtual_stage(static_cast<int>(st), a.action.chunk);
      auto it =
          received.find({a.action.op == Op::SendF ? 0 : 1, a.action.mb, a.action.op == Op::SendF ? vs + 1 : vs - 1});
      if (it == received.end()) continue;
      ++id;
      sep();
      out << "{\"ph\":\"s\",\"id\":" << id << ",\"pid\":0,\"tid\":" << st << ",\"name\":\"" << to_string(a.action)
          << "\",\"cat\":\"p2p\",\"ts\":" << (a.start_us - t0) << "}";
      sep();
      out << "{\"ph\":\"f\",\"bp\":\"e\",\"id\":" << id << ",\"pid\":0,\"tid\":" << it->second.first << ",\"name\":\""
          << to_string(a.action) << "\",\"cat\":\"p2p\",\"ts\":" << (it->second.second - t0) << "}";
    }
  out << "\n]}\n";
  if (!out.flush()) throw Error("cannot write " + path + " (disk full?)");
}

bool plot_timeline(const std::vector<std::vector<TimedAction>>& tls, const std::string& csv, const std::string& png) {
  const double t0 = timeline_span(tls).first;
  {
    std::ofstream out(csv);
    if (!out) {
      std::cerr << "(no timeline plot: cannot write " << csv << ")\n";
      return false;
    }
    out << "stage,action,kind,start_ms,end_ms\n";
    for (std::size_t st = 0; st < tls.size(); ++st)
      for (const auto& a : tls[st]) {
        if (!is_compute(a.action.op)) continue;
        const int kind = a.action.op == Op::F ? 1 : a.action.op == Op::W ? 3 : 2;
        out << st << "," << to_string(a.action) << "," << kind << "," << (a.start_us - t0) / 1000 << ","
            << (a.end_us - t0) / 1000 << "\n";
      }
  }
  std::ostringstream g;
  const std::size_t p = tls.size();
  g << "set terminal png size 1200," << 120 + 50 * p << "\n"
    << "set datafile separator ','\nset xlabel 'ms'\nset yrange [" << p - 0.5 << ":-0.5]\nset ytics (";
  for (std::size_t st = 0; st < p; ++st) g << (st ? ", " : "") << "'stage " << st << "' " << st;
  g << ")\nset key outside right\nset style fill solid 0.85 noborder\n"
    << "plot '" << csv << "' skip 1 using (($4+$5)/2):1:(($5-$4)/2):(0.38):3 with boxxyerror lc variable notitle, "
    << "NaN with boxes lc 1 title 'forward', NaN with boxes lc 2 title 'backward (B / I)', "
    << "NaN with boxes lc 3 title 'weight gradient (W)'\n";
  return run_gnuplot(g.str(), png);
}

}  // namespace distrl::training::pipeline
