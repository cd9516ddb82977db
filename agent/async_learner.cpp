#include "agent/async_learner.h"

#include <torch/types.h>
#include <torch/utils.h>

#include <algorithm>
#include <array>
#include <numeric>
#include <optional>
#include <thread>

#include "agent/observer_pool.h"
#include "common/error.h"
#include "common/log.h"
#include "common/stop_signal.h"
#include "models/checkpoint.h"

namespace distrl::agent {
namespace {

// to's parameters take from's values (the same network spec; any devices).
void copy_parameters(torch::nn::Module& to, const torch::nn::Module& from) {
  torch::NoGradGuard g;
  auto dst = to.parameters();
  const auto src = from.parameters();
  for (std::size_t i = 0; i < dst.size(); ++i) dst[i].copy_(src[i]);
}

// Every observation the loss and V-trace need, in one buffer: the steps' (N), then each
// trajectory's next observation, then the final observations of truncated episodes; and the
// steps' behaviour log-probs and actions.
struct Gathered {
  std::vector<float> obs, old_logp, cont;
  std::vector<std::int64_t> acts;
};

Gathered gather(const std::vector<rl::Fragment>& keep, int obs_dim, int act_dim, std::int64_t N) {
  Gathered g;
  g.obs.reserve(static_cast<std::size_t>(N + 64) * obs_dim);
  for (const auto& f : keep) {
    g.obs.insert(g.obs.end(), f.obs.begin(), f.obs.end());
    g.old_logp.insert(g.old_logp.end(), f.log_probs.begin(), f.log_probs.end());
    if (act_dim == 0) g.acts.insert(g.acts.end(), f.actions.begin(), f.actions.end());
    else g.cont.insert(g.cont.end(), f.cont_actions.begin(), f.cont_actions.end());
  }
  for (const auto& f : keep) g.obs.insert(g.obs.end(), f.next_obs.begin(), f.next_obs.end());
  for (const auto& f : keep) g.obs.insert(g.obs.end(), f.final_obs.begin(), f.final_obs.end());
  return g;
}

}  // namespace

void check_queue_holds_batch(int queue, int batch) {
  if (queue < batch)
    throw ConfigError("async.queue is " + std::to_string(queue) + " and async.batch " + std::to_string(batch) +
                      ": the queue must hold a whole batch (async.queue >= async.batch; equal keeps the policy lag "
                      "lowest)");
}

AsyncLearner::AsyncLearner(PpoActor& actor, Loss loss, rl::PpoOptions ppo, rl::AsyncOptions async,
                           TrajectoryOptions intake, int solved_window, std::chrono::milliseconds timeout,
                           torch::Device device)
    : actor_(actor), device_(device), loss_(loss), o_(ppo), a_(async),
      net_(std::make_shared<models::ActorCritic>(actor.net().spec())),
      optimizer_(*prepared(net_, actor, device), ppo.lr, 1e-5), obs_rms_(actor.net().spec().obs_dim),
      scaler_(ppo.gamma), recent_(solved_window), intake_(intake), timeout_(timeout), rng_(ppo.seed) {}

std::shared_ptr<models::ActorCritic> AsyncLearner::prepared(const std::shared_ptr<models::ActorCritic>& net,
                                                            PpoActor& actor, torch::Device device) {
  net->to(device);  // before the optimizer makes the parameters views of its buffer
  copy_parameters(*net, actor.net());
  return net;
}

void AsyncLearner::set_observers(int observers) {
  if (a_.batch == 0) a_.batch = observers;
  if (a_.queue == 0) a_.queue = a_.batch;
  check_queue_holds_batch(a_.queue, a_.batch);
  intake_.set_observers(observers, a_.queue);
}

void AsyncLearner::publish() {
  auto lock = actor_.exclusive();
  copy_parameters(actor_.net(), *net_);
  if (actor_.norm_obs()) actor_.obs_rms() = obs_rms_;
  actor_.set_version(++version_);
}

std::vector<rl::Fragment> AsyncLearner::fresh(std::vector<rl::Fragment> batch, AsyncStats& st) const {
  const int obs_dim = net_->spec().obs_dim, act_dim = net_->spec().action_dim;
  std::vector<rl::Fragment> keep;
  double lag_sum = 0;
  for (auto& f : batch) {
    check_fragment(f, obs_dim, act_dim);
    const std::int64_t newest = *std::max_element(f.versions.begin(), f.versions.end());
    const std::int64_t oldest = *std::min_element(f.versions.begin(), f.versions.end());
    if (newest > version_)
      throw ProtocolError("trajectory from observer " + std::to_string(f.observer_id) + ": policy version " +
                          std::to_string(newest) + " is from the future (the learner is at " +
                          std::to_string(version_) + ")");
    if (version_ - oldest > a_.max_lag) {
      ++st.dropped_stale;
      continue;
    }
    for (auto v : f.versions) {
      lag_sum += static_cast<double>(version_ - v) * f.num_envs;
      st.lag_max = std::max<long long>(st.lag_max, version_ - v);
    }
    st.transitions += f.transitions();
    keep.push_back(std::move(f));
  }
  if (!keep.empty()) st.lag_mean = lag_sum / static_cast<double>(st.transitions);
  return keep;
}

void AsyncLearner::vtrace_targets(std::vector<rl::Fragment>& keep, const float* vp, const float* lr, std::int64_t N,
                                  std::vector<float>* targets, std::vector<float>* advantages) {
  VtraceOptions vo;
  vo.gamma = o_.gamma;
  vo.lambda = a_.lambda;
  vo.rho_bar = a_.rho_bar;
  vo.c_bar = a_.c_bar;
  vo.pg_rho_bar = a_.pg_rho_bar;
  targets->reserve(static_cast<std::size_t>(N));
  advantages->reserve(static_cast<std::size_t>(N));
  std::int64_t at = 0, boot = N, fin = N;
  for (const auto& f : keep) fin += f.num_envs;
  for (auto& f : keep) {
    const std::size_t n = f.transitions();
    std::vector<float> truncated_values(n, 0.0f);
    for (std::size_t i = 0; i < n; ++i)
      if (f.truncated[i] && !f.terminated[i]) truncated_values[i] = vp[fin++];
    const std::vector<float> rewards = o_.norm_reward ? scaler_.scale(f) : f.rewards;
    VtraceInput in;
    in.steps = f.steps;
    in.envs = f.num_envs;
    in.log_rhos = lr + at;
    in.rewards = rewards.data();
    in.values = vp + at;
    in.bootstrap = vp + boot;
    in.terminated = f.terminated.data();
    in.truncated = f.truncated.data();
    in.truncated_values = truncated_values.data();
    const VtraceOutput out = vtrace(in, vo);
    targets->insert(targets->end(), out.vs.begin(), out.vs.end());
    if (loss_ == Loss::Impala) {
      advantages->insert(advantages->end(), out.pg_advantages.begin(), out.pg_advantages.end());
    } else {
      for (std::size_t i = 0; i < n; ++i) advantages->push_back(out.q[i] - vp[at + static_cast<std::int64_t>(i)]);
    }
    at += static_cast<std::int64_t>(n);
    boot += f.num_envs;
  }
}

void AsyncLearner::learn_step(const models::ActorCritic::Out& out, const torch::Tensor& logp,
                              const std::array<torch::Tensor, 3>& cols, std::chrono::steady_clock::time_point t0,
                              AsyncStats& st) {
  const auto& A = cols[0];
  torch::Tensor policy;
  if (loss_ == Loss::Appo) {
    const auto ratio = (logp - cols[1]).exp();
    policy = -torch::min(ratio * A, ratio.clamp(1 - o_.clip, 1 + o_.clip) * A).mean();
  } else {
    policy = -(A * logp).mean();
  }
  const auto value = 0.5 * (out.value - cols[2]).pow(2).mean();
  const auto entropy = net_->entropy(out).mean();
  const auto total = policy + o_.vf_coef * value - o_.ent_coef * entropy;
  gradient_step(optimizer_, total, o_.max_grad_norm, t0, out.value.size(0), &times_);
  st.policy_loss += policy.item<double>();
  st.value_loss += value.item<double>();
  st.entropy += entropy.item<double>();
}

AsyncStats AsyncLearner::update(std::vector<rl::Fragment> batch) {
  using Clock = std::chrono::steady_clock;
  const auto t_start = Clock::now();
  const int obs_dim = net_->spec().obs_dim, act_dim = net_->spec().action_dim;
  AsyncStats st;
  std::vector<rl::Fragment> keep = fresh(std::move(batch), st);
  if (keep.empty()) return st;
  const auto N = static_cast<std::int64_t>(st.transitions);
  Gathered g = gather(keep, obs_dim, act_dim, N);  // the steps' observations, then the next and final ones
  auto& obs = g.obs;
  const auto rows = static_cast<std::int64_t>(obs.size() / obs_dim);
  const auto dev = device_;
  auto x = torch::from_blob(obs.data(), {rows, obs_dim}, torch::kFloat32).to(dev);
  if (o_.norm_obs) {
    x = obs_rms_.normalize(x);  // the statistics so far, then this batch's steps join them
    obs_rms_.update(obs.data(), static_cast<std::size_t>(N));
  }
  auto old = torch::from_blob(g.old_logp.data(), {N}, torch::kFloat32).to(dev);
  auto a = act_dim == 0 ? torch::from_blob(g.acts.data(), {N}, torch::kInt64).to(dev)
                        : torch::from_blob(g.cont.data(), {N, act_dim}, torch::kFloat32).to(dev);

  // One pass over the whole batch (IMPALA always; APPO by default): the forward that gives
  // V-trace its values is the one the loss differentiates.
  const bool one_pass = loss_ == Loss::Impala || (o_.epochs == 1 && o_.minibatch >= N);
  net_->train();
  models::ActorCritic::Out full;
  torch::Tensor logp_full;
  const auto t_fwd = Clock::now();
  {
    std::optional<torch::NoGradGuard> no_grad;
    if (!one_pass) no_grad.emplace();
    full = net_->forward(x);
    logp_full = net_->log_prob({full.head.narrow(0, 0, N), full.value.narrow(0, 0, N)}, a);
  }
  if (one_pass)
    times_.forward_s += seconds_between(t_fwd, Clock::now());  // the loss's forward; else V-trace's, the rest
  const auto values = full.value.detach().to(torch::kCPU).contiguous();
  const auto log_rhos = (logp_full.detach() - old).to(torch::kCPU).contiguous();
  const float* vp = values.data_ptr<float>();
  const float* lr = log_rhos.data_ptr<float>();

  std::vector<float> targets, advantages;
  vtrace_targets(keep, vp, lr, N, &targets, &advantages);
  auto vs = torch::from_blob(targets.data(), {N}, torch::kFloat32).to(dev);
  auto adv = torch::from_blob(advantages.data(), {N}, torch::kFloat32).to(dev);
  if (loss_ == Loss::Appo && o_.norm_adv && N > 1) adv = (adv - adv.mean()) / (adv.std() + 1e-8);
  if (!dev.is_cpu()) {  // from_blob over local vectors: own the data before they go
    vs = vs.clone();
    adv = adv.clone();
  }

  int steps = 0;
  const auto learn = [&](const models::ActorCritic::Out& out, const torch::Tensor& logp,
                         const std::array<torch::Tensor, 3>& cols, Clock::time_point t0) {
    learn_step(out, logp, cols, t0, st);
    ++steps;
  };
  if (one_pass) {
    learn({full.head.narrow(0, 0, N), full.value.narrow(0, 0, N)}, logp_full, {adv, old, vs}, Clock::now());
  } else {
    std::vector<std::int64_t> order(static_cast<std::size_t>(N));
    std::iota(order.begin(), order.end(), 0);
    const std::int64_t mb = std::min<std::int64_t>(o_.minibatch, N);
    const auto xs = x.narrow(0, 0, N);  // the steps' rows (x also holds the next and final observations)
    for (int epoch = 0; epoch < o_.epochs; ++epoch) {
      std::shuffle(order.begin(), order.end(), rng_);
      // The epoch's order gathered once; a minibatch is a slice of each (a view).
      const auto perm = torch::tensor(order).to(dev);
      const auto xe = xs.index_select(0, perm), ae = a.index_select(0, perm);
      const auto epoch_cols =
          std::array<torch::Tensor, 3>{adv.index_select(0, perm), old.index_select(0, perm), vs.index_select(0, perm)};
      for (std::int64_t s = 0; s + mb <= N; s += mb) {
        const auto t0 = Clock::now();
        auto out = net_->forward(xe.narrow(0, s, mb));
        learn(out, net_->log_prob(out, ae.narrow(0, s, mb)),
              {epoch_cols[0].narrow(0, s, mb), epoch_cols[1].narrow(0, s, mb), epoch_cols[2].narrow(0, s, mb)}, t0);
      }
    }
  }
  net_->eval();
  if (steps > 0) {
    st.policy_loss /= steps;
    st.value_loss /= steps;
    st.entropy /= steps;
  }
  publish();
  ++times_.updates;
  times_.total_s += seconds_between(t_start, Clock::now());
  return st;
}

rl::PolicyWeights AsyncLearner::weights() const {
  rl::PolicyWeights w;
  w.version = version_;
  std::vector<torch::Tensor> flat;
  for (const auto& p : net_->parameters()) flat.push_back(p.detach().reshape(-1));
  const auto all = torch::cat(flat).to(torch::kCPU, torch::kFloat32).contiguous();
  w.params.assign(all.data_ptr<float>(), all.data_ptr<float>() + all.numel());
  const auto rms = obs_rms_.state().contiguous();
  w.obs_rms.assign(rms.data_ptr<double>(), rms.data_ptr<double>() + rms.numel());
  return w;
}

rl::LearnReply AsyncLearner::reply(const AsyncStats& st) const {
  rl::LearnReply r;
  r.stats = st;
  r.times = times_;
  r.weights = weights();
  return r;
}

void AsyncLearner::install(const rl::PolicyWeights& w) {
  std::int64_t total = 0;
  for (const auto& p : net_->parameters()) total += p.numel();
  const auto rms_values = static_cast<std::size_t>(2 * net_->spec().obs_dim + 1);
  if (static_cast<std::int64_t>(w.params.size()) != total || w.obs_rms.size() != rms_values)
    throw ProtocolError("the learner's weights have " + std::to_string(w.params.size()) + " parameters and " +
                        std::to_string(w.obs_rms.size()) + " observation statistics; this network has " +
                        std::to_string(total) + " and " + std::to_string(rms_values) +
                        " (do the agent and distrl-learner run the same config?)");
  {
    torch::NoGradGuard g;
    std::int64_t at = 0;
    const auto src = torch::from_blob(const_cast<float*>(w.params.data()), {total}, torch::kFloat32);
    for (auto& p : net_->parameters()) {
      p.copy_(src.narrow(0, at, p.numel()).view(p.sizes()));
      at += p.numel();
    }
  }
  obs_rms_.load(torch::tensor(w.obs_rms, torch::kFloat64));
  version_ = w.version - 1;
  publish();  // as version w.version
}

void AsyncLearner::fetch_remote_weights() {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    try {
      install(remote_->rpc_sync<rl::PolicyWeights>(rl::kLearnerName, rl::kWeights, 0));
      DISTRL_LOG(Info, "agent: acting with the learner's weights, version " << version_);
      return;
    } catch (const TransportError& e) {
      if (std::chrono::steady_clock::now() - start > timeout_ || stop_signal())
        throw TransportError(std::string("the learner process (") + rl::kLearnerName +
                             ") did not answer for its weights within rpc.timeout_s: " + e.what());
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
}

bool AsyncLearner::learn_remotely(std::vector<rl::Fragment> batch, AsyncStats* st) {
  rl::LearnRequest req;
  req.version = version_;
  req.batch = std::move(batch);
  rl::LearnReply r;
  try {
    r = remote_->rpc_sync<rl::LearnReply>(rl::kLearnerName, rl::kLearn, req);
  } catch (const TransportError& e) {
    unlearned_ += static_cast<long long>(req.batch.size());
    if (!unreachable_) {
      unreachable_ = true;
      unreachable_since_ = std::chrono::steady_clock::now();
      DISTRL_LOG(Warn, "agent: the learner cannot be reached (" << e.what() << "); acting goes on with policy version "
                                                                << version_
                                                                << ", and the trajectories are dropped "
                                                                   "(counted) until it is back");
    }
    return false;
  }
  if (unreachable_) {
    unreachable_ = false;
    DISTRL_LOG(Warn, "agent: the learner is back after " << static_cast<long long>(seconds_between(
                                                                unreachable_since_, std::chrono::steady_clock::now()))
                                                         << " s at policy version " << r.weights.version << "; "
                                                         << unlearned_ << " trajectories went unlearned so far");
  }
  if (r.stop) {  // another agent's run is over: nothing was learned
    ended_elsewhere_ = true;
    return false;
  }
  install(r.weights);
  *st = r.stats;
  times_ = r.times;
  return true;
}

void AsyncLearner::stop_acting(bool ended) {
  intake_.close();
  if (!remote_ || !ended || ended_elsewhere_) return;
  try {
    remote_->rpc_sync<void>(rl::kLearnerName, rl::kFinished, remote_->rank());
  } catch (const Error& e) {  // the learner is gone: there is nobody to tell
    DISTRL_LOG(Info, "agent: could not tell the learner this run is over: " << e.what());
  }
}

RoundData AsyncLearner::round(ObserverPool& pool, bool learn) {
  if (!started_) {
    if (remote_) fetch_remote_weights();
    pool.start(intake_);
    started_ = true;
  }
  std::vector<rl::Fragment> batch;
  const auto start = std::chrono::steady_clock::now();
  while (static_cast<int>(batch.size()) < a_.batch) {
    pool.check(intake_);  // throws TransportError when every observer is gone
    for (auto& f : intake_.pop(a_.batch - static_cast<int>(batch.size()), std::chrono::milliseconds(200)))
      batch.push_back(std::move(f));
    if (stop_signal()) break;  // the run loop saves and reports
    if (std::chrono::steady_clock::now() - start > timeout_) {
      if (!batch.empty()) break;
      throw TransportError("no trajectory from any observer for " +
                           std::to_string(std::chrono::duration_cast<std::chrono::seconds>(timeout_).count()) +
                           " s (rpc.timeout_s): are the observers stalled?");
    }
  }
  RoundData d;
  for (const auto& f : batch) {
    d.returns.insert(d.returns.end(), f.episode_returns.begin(), f.episode_returns.end());
    d.add_acting(f);
  }
  // Env steps: every one acted since the last round, those of dropped trajectories included.
  const TrajectoryStats s = intake_.stats();
  d.env_steps = s.steps - steps_seen_;
  steps_seen_ = s.steps;
  if (learn && !batch.empty()) {
    AsyncStats st;
    if (!remote_) st = update(std::move(batch));
    else learn_remotely(std::move(batch), &st);
    d.loss = st.policy_loss;
    d.lag_mean = st.lag_mean;
    d.lag_max = st.lag_max;
    dropped_ += static_cast<long long>(st.dropped_stale);
  }
  d.dropped = dropped_ + unlearned_;
  d.ended_elsewhere = ended_elsewhere_;
  return d;
}

void AsyncLearner::save(const std::string& path, const std::map<std::string, double>& numbers) {
  auto tensors = optimizer_.state();
  tensors["obs_rms"] = obs_rms_.state();
  tensors["ret_rms"] = scaler_.return_rms().state();
  tensors["recent_returns"] = recent_.state();
  tensors["policy_version"] = torch::tensor({static_cast<double>(version_)}, torch::kDouble);
  models::save_checkpoint(path, *net_, nullptr, numbers, tensors);
}

std::map<std::string, double> AsyncLearner::load(const std::string& path) {
  std::map<std::string, torch::Tensor> tensors;
  auto numbers = models::load_checkpoint(path, *net_, nullptr, device_, &tensors);
  optimizer_.flatten();  // loading replaced the parameters' storage
  load_optimizer(optimizer_, tensors, path);
  if (tensors.count("obs_rms")) obs_rms_.load(tensors["obs_rms"]);
  if (tensors.count("ret_rms")) scaler_.return_rms().load(tensors["ret_rms"]);
  if (tensors.count("recent_returns")) recent_.load(tensors["recent_returns"]);
  if (tensors.count("policy_version"))
    version_ = static_cast<std::int64_t>(tensors["policy_version"].to(torch::kDouble).item<double>()) - 1;
  net_->eval();
  publish();  // the actor acts with the loaded weights, as the version they were
  return numbers;
}

std::string AsyncLearner::resume_note() const {
  return ", policy version " + std::to_string(version_) + ", observation statistics over " +
         std::to_string(static_cast<long long>(obs_rms_.count())) + " samples";
}

}  // namespace distrl::agent
