#include "training/pipeline/schedule.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

namespace distrl::training::pipeline {

namespace {

std::string str(int v) { return std::to_string(v); }

void check_sizes(const std::string& what, int stages, int microbatches, int chunks) {
  if (stages < 1 || stages > 1024) throw ScheduleError(what + ": stages must be 1..1024, got " + str(stages));
  if (microbatches < 1) throw ScheduleError(what + ": micro-batches must be >= 1, got " + str(microbatches));
  if (chunks < 1 || chunks > 64) throw ScheduleError(what + ": chunks per stage must be 1..64, got " + str(chunks));
}

Schedule empty(const std::string& name, int stages, int microbatches, int chunks) {
  Schedule s;
  s.name = name;
  s.stages = stages;
  s.chunks = chunks;
  s.microbatches = microbatches;
  s.actions.assign(stages, {});
  return s;
}

Schedule gpipe(int p, int m) {
  Schedule s = empty("gpipe", p, m, 1);
  for (int st = 0; st < p; ++st) {
    for (int j = 0; j < m; ++j) s.actions[st].push_back({Op::F, j, 0});
    for (int j = 0; j < m; ++j) s.actions[st].push_back({Op::B, j, 0});
  }
  return s;
}

// The 1F1B order over n forwards and n backwards: `warm` forwards, then one forward and one
// backward at a time, then the backwards left. fwd(k) / bwd(k) append the k-th of each.
template <typename Fwd, typename Bwd>
void one_f_one_b_order(int warm, int n, Fwd fwd, Bwd bwd) {
  for (int k = 0; k < warm; ++k) fwd(k);
  for (int k = 0; k < n - warm; ++k) {
    fwd(warm + k);
    bwd(k);
  }
  for (int k = n - warm; k < n; ++k) bwd(k);
}

Schedule one_f_one_b(int p, int m) {
  Schedule s = empty("1f1b", p, m, 1);
  for (int st = 0; st < p; ++st) {
    auto& a = s.actions[st];
    one_f_one_b_order(
        std::min(p - st - 1, m), m,
        [&](int j) {
          a.push_back({Op::F, j, 0});
        },
        [&](int j) {
          a.push_back({Op::B, j, 0});
        });
  }
  return s;
}

// Megatron-LM's interleaved 1F1B: the k-th forward (backward) of a stage runs chunk
// (k mod p*v) / p (counted from the last chunk for backward) on micro-batch (k / p*v) * p + k mod p.
Schedule interleaved(int p, int m, int v) {
  if (m % p != 0)
    throw ScheduleError("interleaved: needs micro-batches a multiple of the stages (" + str(p) + "), given " + str(m) +
                        " (use " + str((m / p + 1) * p) + ")");
  Schedule s = empty("interleaved", p, m, v);
  const int total = m * v;
  auto at = [&](int k, bool forward) {
    const int in_group = k % (p * v);
    int chunk = in_group / p;
    if (!forward) chunk = v - 1 - chunk;
    return std::make_pair((k / (p * v)) * p + k % p, chunk);
  };
  for (int st = 0; st < p; ++st) {
    auto& a = s.actions[st];
    const int warm = m == p ? total : std::min((p - st - 1) * 2 + (v - 1) * p, total);
    auto fwd = [&](int k) {
      auto [mb, c] = at(k, true);
      a.push_back({Op::F, mb, c});
    };
    auto bwd = [&](int k) {
      auto [mb, c] = at(k, false);
      a.push_back({Op::B, mb, c});
    };
    one_f_one_b_order(warm, total, fwd, bwd);
  }
  return s;
}

// ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", 2023): 1F1B's warm-up and order with the
// backward split into I (input gradient, which the previous stage waits for) and W (weight
// gradient, which nobody waits for); stage s runs its W's s micro-batches late, so the last
// stages answer the gradients at once and the W's fill what were 1F1B's bubbles. Every stage
// then holds at most `stages` micro-batches' activations (until their W): 1F1B's peak.
Schedule zb_h1(int p, int m) {
  Schedule s = empty("zb-h1", p, m, 1);
  for (int st = 0; st < p; ++st) {
    auto& a = s.actions[st];
    const int warm = std::min(p - st - 1, m);
    int nw = 0;
    auto weight = [&](int j) {
      if (j - st >= 0) a.push_back({Op::W, nw++, 0});
    };
    one_f_one_b_order(
        warm, m,
        [&](int j) {
          a.push_back({Op::F, j, 0});
        },
        [&](int j) {
          a.push_back({Op::I, j, 0});
          weight(j);
        });
    while (nw < m) a.push_back({Op::W, nw++, 0});
  }
  return s;
}

struct Key {
  int kind, mb, vs;  // kind 0: activation into vs; 1: gradient into vs
  bool operator<(const Key& o) const { return std::tie(kind, mb, vs) < std::tie(o.kind, o.mb, o.vs); }
};

bool has_transfers(const Schedule& s) {
  for (const auto& list : s.actions)
    for (const auto& a : list)
      if (!is_compute(a.op)) return true;
  return false;
}

}  // namespace

const char* op_token(Op op) {
  switch (op) {
    case Op::F: return "F";
    case Op::B: return "B";
    case Op::I: return "I";
    case Op::W: return "W";
    case Op::SendF: return "SF";
    case Op::RecvF: return "RF";
    case Op::SendB: return "SB";
    case Op::RecvB: return "RB";
  }
  return "?";
}

bool is_compute(Op op) { return op == Op::F || op == Op::B || op == Op::I || op == Op::W; }

std::string to_string(const Action& a) {
  std::string t = op_token(a.op) + str(a.mb);
  if (a.chunk != 0) {  // appended piecewise: GCC 12's -Wstringop-overflow misfires on "." + s in C++20
    t += '.';
    t += str(a.chunk);
  }
  return t;
}

const std::vector<std::string>& schedule_names() {
  static const std::vector<std::string> names{"gpipe", "1f1b", "interleaved", "zb-h1"};
  return names;
}

Schedule make_schedule(const std::string& name, int stages, int microbatches, int chunks) {
  check_sizes("schedule " + name, stages, microbatches, chunks);
  if (name != "interleaved" && chunks != 1)
    throw ScheduleError("schedule " + name + ": one piece per stage (chunks 1), got " + str(chunks) +
                        "; only 'interleaved' runs several");
  Schedule s;
  if (name == "gpipe") s = gpipe(stages, microbatches);
  else if (name == "1f1b") s = one_f_one_b(stages, microbatches);
  else if (name == "interleaved") s = interleaved(stages, microbatches, chunks);
  else if (name == "zb-h1") s = zb_h1(stages, microbatches);
  else throw ScheduleError("schedule '" + name + "' is not known (known: gpipe, 1f1b, interleaved, zb-h1, or a file)");
  return lower(std::move(s));
}

Schedule lower(Schedule s) {
  if (has_transfers(s)) return s;
  const int last = s.virtual_stages() - 1;
  for (int st = 0; st < s.stages; ++st) {
    std::vector<Action> out;
    for (const Action& a : s.actions[st]) {
      const int vs = s.virtual_stage(st, a.chunk);
      const bool fwd = a.op == Op::F, bwd_in = a.op == Op::B || a.op == Op::I;
      if (fwd && vs > 0) out.push_back({Op::RecvF, a.mb, a.chunk});
      if (bwd_in && vs < last) out.push_back({Op::RecvB, a.mb, a.chunk});
      out.push_back(a);
      if (fwd && vs < last) out.push_back({Op::SendF, a.mb, a.chunk});
      if (bwd_in && vs > 0) out.push_back({Op::SendB, a.mb, a.chunk});
    }
    s.actions[st] = std::move(out);
  }
  return s;
}

Schedule parse_schedule(const std::string& text) {
  Schedule s;
  s.actions.clear();
  std::istringstream in(text);
  std::string line;
  int n = 0;
  bool header = false;
  std::map<int, std::vector<Action>> lists;
  while (std::getline(in, line)) {
    ++n;
    const std::string where = "schedule line " + str(n) + ": ";
    if (auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream ls(line);
    std::string word;
    if (!(ls >> word)) continue;
    if (word == "schedule") {
      std::string k1, k2, k3;
      if (!(ls >> s.name >> k1 >> s.stages >> k2 >> s.chunks >> k3 >> s.microbatches) || k1 != "stages" ||
          k2 != "chunks" || k3 != "microbatches")
        throw ScheduleError(where + "expected 'schedule NAME stages P chunks V microbatches M'");
      check_sizes(where + "schedule", s.stages, s.microbatches, s.chunks);
      header = true;
      continue;
    }
    if (!header) throw ScheduleError(where + "the first line must be 'schedule NAME stages P chunks V microbatches M'");
    if (word != "stage") throw ScheduleError(where + "expected 'stage N: ACTIONS', got '" + word + "'");
    std::string idx;
    ls >> idx;
    if (idx.empty() || idx.back() != ':') throw ScheduleError(where + "expected 'stage N:' (with the colon)");
    int st = -1;
    try {
      st = std::stoi(idx.substr(0, idx.size() - 1));
    } catch (const std::exception&) {
      throw ScheduleError(where + "'" + idx + "' is not a stage number");
    }
    if (st < 0 || st >= s.stages)
      throw ScheduleError(where + "stage " + str(st) + " is not in 0.." + str(s.stages - 1));
    if (lists.count(st)) throw ScheduleError(where + "stage " + str(st) + " is listed twice");
    auto& list = lists[st];
    std::string tok;
    while (ls >> tok) {
      std::size_t p = 0;
      while (p < tok.size() && std::isalpha(static_cast<unsigned char>(tok[p]))) ++p;
      const std::string op = tok.substr(0, p);
      Action a;
      static const std::map<std::string, Op> ops{{"F", Op::F},      {"B", Op::B},      {"I", Op::I},
                                                 {"W", Op::W},      {"SF", Op::SendF}, {"RF", Op::RecvF},
                                                 {"SB", Op::SendB}, {"RB", Op::RecvB}};
      auto it = ops.find(op);
      if (it == ops.end())
        throw ScheduleError(where + "'" + tok +
                            "': unknown action (F, B, I, W, SF, RF, SB, RB followed by the micro-batch)");
      a.op = it->second;
      const std::string rest = tok.substr(p);
      const auto dot = rest.find('.');
      try {
        std::size_t used = 0;
        a.mb = std::stoi(rest.substr(0, dot), &used);
        if (used != rest.substr(0, dot).size()) throw std::invalid_argument(rest);
        if (dot != std::string::npos) {
          a.chunk = std::stoi(rest.substr(dot + 1), &used);
          if (used != rest.size() - dot - 1) throw std::invalid_argument(rest);
        }
      } catch (const std::exception&) {
        throw ScheduleError(where + "'" + tok + "': expected a micro-batch number (and '.chunk'), as in F3 or B2.1");
      }
      list.push_back(a);
    }
  }
  if (!header)
    throw ScheduleError(
        "schedule: empty (expected 'schedule NAME stages P chunks V microbatches M' and 'stage N:' lines)");
  s.actions.assign(s.stages, {});
  for (int st = 0; st < s.stages; ++st) {
    if (!lists.count(st))
      throw ScheduleError("schedule " + s.name + ": stage " + str(st) + " has no 'stage " + str(st) + ":' line");
    s.actions[st] = std::move(lists[st]);
  }
  return s;
}

Schedule load_schedule_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ScheduleError("schedule file " + path + ": cannot be read");
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return parse_schedule(ss.str());
  } catch (const ScheduleError& e) {
    throw ScheduleError(path + ": " + e.what());
  }
}

std::string format_schedule(const Schedule& s) {
  std::ostringstream out;
  out << "schedule " << s.name << " stages " << s.stages << " chunks " << s.chunks << " microbatches " << s.microbatches
      << "\n";
  for (int st = 0; st < s.stages; ++st) {
    out << "stage " << st << ":";
    for (const Action& a : s.actions[st]) out << " " << to_string(a);
    out << "\n";
  }
  return out.str();
}

double Plan::mean_bubble() const {
  double sum = 0;
  for (double b : bubble) sum += b;
  return bubble.empty() ? 0 : sum / static_cast<double>(bubble.size());
}

double theory_bubble(int stages, int microbatches) {
  return static_cast<double>(stages - 1) / static_cast<double>(microbatches + stages - 1);
}

namespace {

// Ranges, each compute action once, order within a stage, transfers where a neighbour is.
void check_stage(const std::string& name, const Schedule& s, int st) {
  const int m = s.microbatches, v = s.chunks, last = s.virtual_stages() - 1;
  const std::string at = name + ": stage " + str(st) + ": ";
  std::map<std::tuple<int, int, int>, int> pos;  // (op, mb, chunk) -> index
  for (std::size_t k = 0; k < s.actions[st].size(); ++k) {
    const Action& a = s.actions[st][k];
    if (a.mb < 0) throw ScheduleError(at + to_string(a) + ": negative micro-batch");
    if (a.mb >= m)
      throw ScheduleError(at + to_string(a) + ": needs at least " + str(a.mb + 1) + " micro-batches, given " + str(m));
    if (a.chunk < 0 || a.chunk >= v)
      throw ScheduleError(at + to_string(a) + ": chunk " + str(a.chunk) + " is not in 0.." + str(v - 1));
    if (!pos.emplace(std::make_tuple(static_cast<int>(a.op), a.mb, a.chunk), static_cast<int>(k)).second)
      throw ScheduleError(at + to_string(a) + " appears twice");
  }
  auto find = [&](Op op, int mb, int c) {
    auto it = pos.find({static_cast<int>(op), mb, c});
    return it == pos.end() ? -1 : it->second;
  };
  for (int c = 0; c < v; ++c) {
    const int vs = s.virtual_stage(st, c);
    for (int j = 0; j < m; ++j) {
      std::string mbs = str(j);
      if (c) {
        mbs += '.';
        mbs += str(c);
      }
      const int f = find(Op::F, j, c), b = find(Op::B, j, c), i = find(Op::I, j, c), w = find(Op::W, j, c);
      if (f < 0) throw ScheduleError(at + "micro-batch " + mbs + " is never run forward (F" + mbs + ")");
      if (b < 0 && (i < 0 || w < 0))
        throw ScheduleError(at + "micro-batch " + mbs + " has no backward (B" + mbs + ", or I" + mbs + " and W" + mbs +
                            ")");
      if (b >= 0 && (i >= 0 || w >= 0)) throw ScheduleError(at + "micro-batch " + mbs + " has both B and I/W");
      const int bin = b >= 0 ? b : i;
      if (bin < f) throw ScheduleError(at + "the backward of " + mbs + " comes before its forward");
      if (b < 0 && w < i) throw ScheduleError(at + "W" + mbs + " comes before I" + mbs);
      auto need = [&](Op op, bool wanted, bool before, int ref) {
        const int k = find(op, j, c);
        const std::string t = std::string(op_token(op)) + mbs;
        if (!wanted && k >= 0) throw ScheduleError(at + t + ": this piece has no neighbour there to talk to");
        if (wanted && k < 0) throw ScheduleError(at + t + " is missing");
        if (wanted && (before ? k > ref : k < ref))
          throw ScheduleError(at + t + " must come " + (before ? "before" : "after") + " the action it serves");
      };
      need(Op::RecvF, vs > 0, true, f);
      need(Op::SendF, vs < last, false, f);
      need(Op::RecvB, vs < last, true, bin);
      need(Op::SendB, vs > 0, false, bin);
    }
  }
}

// The simulation's state: program order per stage; a receive waits for its send; a send never
// blocks, or (sends_block) waits until its receiver has taken it.
struct Simulation {
  const Schedule& s;
  const VerifyOptions& o;
  Plan plan;
  std::vector<std::size_t> next;
  std::vector<double> clock, busy;
  std::vector<int> held;
  std::map<Key, double> sent, taken;  // when each transfer was sent / received

  Simulation(const Schedule& sched, const VerifyOptions& opts)
      : s(sched), o(opts), next(sched.stages, 0), clock(sched.stages, 0), busy(sched.stages, 0), held(sched.stages, 0) {
    plan.bubble.assign(s.stages, 0);
    plan.peak_activations.assign(s.stages, 0);
    plan.start.assign(s.stages, {});
  }

  // Runs stage st's next action if it can (false: it waits for a peer).
  bool step(int st) {
    const Action& a = s.actions[st][next[st]];
    const int vs = s.virtual_stage(st, a.chunk);
    double start = clock[st], cost = 0;
    switch (a.op) {
      case Op::RecvF:
      case Op::RecvB: {
        const Key k{a.op == Op::RecvF ? 0 : 1, a.mb, vs};
        auto it = sent.find(k);
        if (it == sent.end()) return false;
        start = taken[k] = std::max(start, it->second);
        break;
      }
      case Op::SendF:
      case Op::SendB: {
        const Key k = a.op == Op::SendF ? Key{0, a.mb, vs + 1} : Key{1, a.mb, vs - 1};
        sent.emplace(k, start);  // a blocked send is posted from its first try on
        if (!o.sends_block) break;
        auto it = taken.find(k);
        if (it == taken.end()) return false;
        start = it->second;
        break;
      }
      case Op::F:
        cost = o.costs.f;
        if (++held[st] > plan.peak_activations[st]) plan.peak_activations[st] = held[st];
        break;
      case Op::B:
        cost = o.costs.b;
        --held[st];
        break;
      case Op::I: cost = o.costs.i; break;
      case Op::W:
        cost = o.costs.w;
        --held[st];
        break;
    }
    plan.start[st].push_back(start);
    clock[st] = start + cost;
    busy[st] += cost;
    ++next[st];
    return true;
  }

  void run() {
    for (bool progress = true; progress;) {
      progress = false;
      for (int st = 0; st < s.stages; ++st)
        while (next[st] < s.actions[st].size() && step(st)) progress = true;
    }
  }

  // Every stage that did not finish: where it waits, and for whom ("" when all finished).
  std::string stuck() const {
    std::string out;
    for (int st = 0; st < s.stages; ++st) {
      if (next[st] == s.actions[st].size()) continue;
      const Action& a = s.actions[st][next[st]];
      const int vs = s.virtual_stage(st, a.chunk);
      const bool send = a.op == Op::SendF || a.op == Op::SendB;
      const int peer = s.stage_of(a.op == Op::RecvF || a.op == Op::SendB ? vs - 1 : vs + 1);
      out += (out.empty() ? "" : "; ") + std::string("stage ") + str(st) + " waits at " + to_string(a) + " (action " +
             str(static_cast<int>(next[st])) + ") for stage " + str(peer) + (send ? " to receive it" : "");
    }
    return out;
  }
};

}  // namespace

Plan verify(const Schedule& given, const VerifyOptions& o) {
  const std::string name = "schedule " + (given.name.empty() ? std::string("(unnamed)") : given.name);
  check_sizes(name, given.stages, given.microbatches, given.chunks);
  if (static_cast<int>(given.actions.size()) != given.stages)
    throw ScheduleError(name + ": has lists for " + str(static_cast<int>(given.actions.size())) + " stages, declares " +
                        str(given.stages));
  const Schedule s = lower(given);
  for (int st = 0; st < s.stages; ++st) check_stage(name, s, st);

  Simulation sim(s, o);
  sim.run();
  const std::string stuck = sim.stuck();
  if (!stuck.empty())
    throw ScheduleError(name + ": deadlock: " + stuck +
                        (o.sends_block ? " (sends block until received, as the nccl backend's do: order each stage's "
                                         "sends and receives so that every send meets its receive, or use gpipe; "
                                         "nothing was sent)"
                                       : " (nothing was sent)"));
  Plan plan = std::move(sim.plan);
  plan.makespan = *std::max_element(sim.clock.begin(), sim.clock.end());
  for (int st = 0; st < s.stages; ++st) plan.bubble[st] = plan.makespan > 0 ? 1.0 - sim.busy[st] / plan.makespan : 0;
  if (o.max_activations > 0)
    for (int st = 0; st < s.stages; ++st)
      if (plan.peak_activations[st] > o.max_activations)
        throw ScheduleError(name + ": stage " + str(st) + " would keep " + str(plan.peak_activations[st]) +
                            " micro-batches' activations at once; the bound (max_activations) is " +
                            str(o.max_activations) + " (use 1f1b or zb-h1, or fewer micro-batches in flight)");
  return plan;
}

}  // namespace distrl::training::pipeline
