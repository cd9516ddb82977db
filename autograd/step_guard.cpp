#include "autograd/step_guard.h"

#include <algorithm>
#include <functional>

#include "autograd/detail/engine.h"
#include "transport/rpc/rpc_agent.h"

namespace distrl::autograd {

StepPolicy parse_step_policy(const std::string& name) {
  if (name == "serialize") return StepPolicy::Serialize;
  if (name == "hogwild") return StepPolicy::Hogwild;
  if (name == "versioned") return StepPolicy::Versioned;
  throw ConfigError("step policy '" + name + "' is not known (known: serialize, hogwild, versioned)");
}

const char* to_string(StepPolicy p) {
  switch (p) {
    case StepPolicy::Serialize: return "serialize";
    case StepPolicy::Hogwild: return "hogwild";
    case StepPolicy::Versioned: return "versioned";
  }
  return "?";
}

std::shared_ptr<ParameterGuard> ParameterGuard::create(transport::RpcAgent& agent, std::vector<at::Tensor> params,
                                                       StepPolicy policy, std::chrono::milliseconds wait_timeout) {
  auto engine = detail::engine_of(agent);
  auto g = std::make_shared<ParameterGuard>(engine, std::move(params), policy, wait_timeout);
  engine->add_guard(g);
  return g;
}

ParameterGuard::ParameterGuard(std::shared_ptr<detail::Engine> engine, std::vector<at::Tensor> params,
                               StepPolicy policy, std::chrono::milliseconds wait_timeout)
    : engine_(std::move(engine)), policy_(policy), wait_timeout_(wait_timeout) {
  for (auto& p : params) impls_.insert(p.unsafeGetTensorImpl());
}

bool ParameterGuard::guards(const at::Tensor& t) const { return impls_.count(t.unsafeGetTensorImpl()) > 0; }

ParameterGuard::Stats ParameterGuard::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void ParameterGuard::enter() {
  const std::int64_t ctx = engine_->current_context();
  if (ctx < 0 || policy_ == StepPolicy::Hogwild) return;
  std::unique_lock<std::mutex> lock(mu_);
  if (policy_ == StepPolicy::Versioned) {
    seen_.emplace(ctx, stats_.version);
    return;
  }
  if (holder_ == ctx) return;
  if (holder_ >= 0) {
    const auto t0 = std::chrono::steady_clock::now();
    ++waiting_[ctx];
    try {
      wait_for_holder(lock, ctx);
    } catch (...) {
      if (--waiting_[ctx] == 0) waiting_.erase(ctx);
      throw;
    }
    if (--waiting_[ctx] == 0) waiting_.erase(ctx);
    ++stats_.waits;
    stats_.wait_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  holder_ = ctx;
  held_since_ = std::chrono::steady_clock::now();
}

namespace {

constexpr auto kDeadlockProbe = std::chrono::milliseconds(200);      // first question after this wait
constexpr auto kDeadlockProbeMax = std::chrono::milliseconds(3200);  // then doubling up to this

// The cycle of waits that leads from ctx back to ctx (ctx first), or empty. waits: flat
// (waiter, holder) pairs from every worker.
std::vector<std::int64_t> cycle_through(std::int64_t ctx, const std::vector<std::int64_t>& waits) {
  std::unordered_multimap<std::int64_t, std::int64_t> holders;
  for (std::size_t i = 0; i + 1 < waits.size(); i += 2) holders.emplace(waits[i], waits[i + 1]);
  std::vector<std::int64_t> path{ctx};
  std::unordered_set<std::int64_t> seen{ctx};
  std::function<bool(std::int64_t)> reaches = [&](std::int64_t from) {
    auto range = holders.equal_range(from);
    for (auto it = range.first; it != range.second; ++it) {
      if (it->second == ctx) return true;
      if (!seen.insert(it->second).second) continue;
      path.push_back(it->second);
      if (reaches(it->second)) return true;
      path.pop_back();
    }
    return false;
  };
  return reaches(ctx) ? path : std::vector<std::int64_t>{};
}

}  // namespace

void ParameterGuard::wait_for_holder(std::unique_lock<std::mutex>& lock, std::int64_t ctx) {
  const auto until = std::chrono::steady_clock::now() + wait_timeout_;
  auto probe = kDeadlockProbe;
  while (
      !cv_.wait_until(lock, std::min(until, std::chrono::steady_clock::now() + probe), [&] { return holder_ < 0; })) {
    probe = std::min(probe * 2, kDeadlockProbeMax);
    if (std::chrono::steady_clock::now() >= until) {
      const double held = std::chrono::duration<double>(std::chrono::steady_clock::now() - held_since_).count();
      throw TimeoutError("ParameterGuard (serialize) on " + engine_->agent().name() + ": " + engine_->describe(ctx) +
                         " waited " + std::to_string(wait_timeout_.count()) + " ms for the parameters; " +
                         engine_->describe(holder_) + " has held them for " + std::to_string(held) +
                         " s without stepping or leaving its context");
    }
    lock.unlock();  // the workers are asked without the lock: their own waits change meanwhile
    const auto cycle = cycle_through(ctx, engine_->guard_waits_everywhere());
    lock.lock();
    if (cycle.empty() || *std::max_element(cycle.begin(), cycle.end()) != ctx || holder_ < 0) continue;
    std::string chain;
    for (auto c : cycle) chain += detail::id_name(c) + " waits for ";
    throw GuardDeadlockError("ParameterGuard (serialize) on " + engine_->agent().name() + ": deadlock: context " +
                             chain + detail::id_name(ctx) + " (serialize guards entered in opposite orders); " +
                             engine_->describe(ctx) +
                             ", the largest id of the cycle, is refused: leave it (which frees what it "
                             "holds) and retry, or enter guards in one order (by owner rank)");
  }
}

void ParameterGuard::waits(std::vector<std::int64_t>* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (holder_ < 0) return;
  for (auto& [ctx, n] : waiting_) {
    out->push_back(ctx);
    out->push_back(holder_);
  }
}

void ParameterGuard::before_step(std::int64_t ctx) {
  if (policy_ != StepPolicy::Versioned) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = seen_.find(ctx);
  if (it == seen_.end() || it->second == stats_.version) return;
  const std::uint64_t saw = it->second;
  seen_.erase(it);
  ++stats_.stale_refused;
  throw StaleStepError("stale step refused on " + engine_->agent().name() + ": " + engine_->describe(ctx) +
                       " computed its gradients against parameter version " + std::to_string(saw) +
                       ", the parameters are at version " + std::to_string(stats_.version) +
                       " (policy versioned: run the forward again and retry)");
}

void ParameterGuard::after_step(std::int64_t ctx, bool stepped) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stepped) ++stats_.version;
    seen_.erase(ctx);
    if (holder_ != ctx) return;
    holder_ = -1;
  }
  cv_.notify_all();
}

void ParameterGuard::released(std::int64_t ctx) { after_step(ctx, false); }

}  // namespace distrl::autograd
