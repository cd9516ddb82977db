#include "agent/ppo.h"

#include <torch/nn/utils/clip_grad.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <numeric>

#include "agent/observer_pool.h"
#include "common/error.h"
#include "models/checkpoint.h"

namespace distrl::agent {

// ------------------------------------------------------------------ RunningMeanStd

RunningMeanStd::RunningMeanStd(int dim) : dim_(dim), mean_(dim, 0.0), var_(dim, 1.0) { refresh(); }

void RunningMeanStd::refresh() {
  mean_t_ = torch::tensor(std::vector<float>(mean_.begin(), mean_.end()));
  std_t_ = torch::tensor(std::vector<float>(var_.begin(), var_.end())).add(1e-8).sqrt();
}

void RunningMeanStd::update(const float* x, std::size_t rows) {
  if (rows == 0) return;
  for (int d = 0; d < dim_; ++d) {
    double m = 0, v = 0;
    for (std::size_t r = 0; r < rows; ++r) m += x[r * dim_ + d];
    m /= rows;
    for (std::size_t r = 0; r < rows; ++r) v += (x[r * dim_ + d] - m) * (x[r * dim_ + d] - m);
    v /= rows;
    const double n = count_ + rows, delta = m - mean_[d];
    mean_[d] += delta * rows / n;
    var_[d] = (var_[d] * count_ + v * rows + delta * delta * count_ * rows / n) / n;
  }
  count_ += rows;
  refresh();
}

torch::Tensor RunningMeanStd::normalize(const torch::Tensor& x, double clip) const {
  return ((x - mean_t_.to(x.device())) / std_t_.to(x.device())).clamp(-clip, clip);
}

torch::Tensor RunningMeanStd::state() const {
  std::vector<double> v(mean_);
  v.insert(v.end(), var_.begin(), var_.end());
  v.push_back(count_);
  return torch::tensor(v, torch::kFloat64);
}

void RunningMeanStd::load(const torch::Tensor& state) {
  auto s = state.to(torch::kFloat64).contiguous();
  if (s.numel() != 2 * dim_ + 1)
    throw ConfigError("normaliser state has " + std::to_string(s.numel()) + " values, expected " +
                      std::to_string(2 * dim_ + 1) + " (a checkpoint of another environment?)");
  const double* p = s.data_ptr<double>();
  mean_.assign(p, p + dim_);
  var_.assign(p + dim_, p + 2 * dim_);
  count_ = p[2 * dim_];
  refresh();
}

// ------------------------------------------------------------------ GAE, checks

std::vector<float> gae(const rl::Fragment& f, const std::vector<float>& rewards, double gamma, double lambda,
                       std::vector<float>* returns) {
  const int T = f.steps, E = f.num_envs;
  std::vector<float> adv(static_cast<std::size_t>(T) * E);
  returns->assign(adv.size(), 0.0f);
  for (int e = 0; e < E; ++e) {
    double next_adv = 0, next_value = f.last_values[e];
    for (int t = T - 1; t >= 0; --t) {
      const std::size_t i = static_cast<std::size_t>(t) * E + e;
      double r = rewards[i];
      double cont = 1.0;
      if (f.terminated[i]) {
        cont = 0.0;
      } else if (f.truncated[i]) {  // bootstrap the cut episode with its final state's value
        r += gamma * (f.truncated_values.empty() ? f.values[i] : f.truncated_values[i]);
        cont = 0.0;
      }
      const double delta = r + gamma * next_value * cont - f.values[i];
      next_adv = delta + gamma * lambda * cont * next_adv;
      adv[i] = static_cast<float>(next_adv);
      (*returns)[i] = static_cast<float>(next_adv + f.values[i]);
      next_value = f.values[i];
    }
  }
  return adv;
}

void check_fragment(const rl::Fragment& f, int obs_dim, int act_dim, bool bootstrapped) {
  auto bad = [&](const std::string& what) {
    throw ProtocolError("fragment from observer " + std::to_string(f.observer_id) + ": " + what);
  };
  if (f.obs_dim != obs_dim) bad("obs_dim " + std::to_string(f.obs_dim) + ", the env has " + std::to_string(obs_dim));
  if (f.act_dim != act_dim) bad("act_dim " + std::to_string(f.act_dim) + ", the env has " + std::to_string(act_dim));
  if (f.steps < 1 || f.num_envs < 1) bad("no steps");
  if (!(f.cpu_us >= 0 && f.cpu_us < 1e15)) bad("cpu_us " + std::to_string(f.cpu_us) + " is not a CPU time");
  const std::size_t n = f.transitions();
  if (f.obs.size() != n * obs_dim)
    bad(std::to_string(f.obs.size()) + " observation floats for " + std::to_string(n) + " steps");
  if (act_dim == 0 ? f.actions.size() != n : f.cont_actions.size() != n * act_dim) bad("action count");
  if (f.log_probs.size() != n || f.values.size() != n || f.rewards.size() != n || f.terminated.size() != n ||
      f.truncated.size() != n)
    bad("per-step arrays of different lengths");
  if (bootstrapped) {
    if (f.last_values.size() != static_cast<std::size_t>(f.num_envs)) bad("one bootstrap value per env expected");
    if (!f.truncated_values.empty() && f.truncated_values.size() != n) bad("truncated_values of the wrong length");
  }
  if (f.versions.size() != static_cast<std::size_t>(f.steps)) bad("one policy version per step expected");
  if (f.next_obs.size() != static_cast<std::size_t>(f.num_envs) * obs_dim) bad("next_obs of the wrong length");
  std::size_t cut = 0;
  for (std::size_t i = 0; i < n; ++i) cut += f.truncated[i] && !f.terminated[i];
  if (f.final_obs.size() != cut * obs_dim)
    bad(std::to_string(f.final_obs.size()) + " final-observation floats for " + std::to_string(cut) +
        " truncated episodes");
}

// ------------------------------------------------------------------ acting

PpoActor::PpoActor(std::shared_ptr<models::ActorCritic> net, torch::Device device, bool norm_obs, std::uint64_t seed)
    : net_(std::move(net)), device_(device), norm_obs_(norm_obs), obs_rms_(net_->spec().obs_dim), rng_(seed) {
  net_->to(device_);
  net_->eval();
}

torch::Tensor PpoActor::prepare(const torch::Tensor& obs) const {
  auto x = obs.to(device_);
  return norm_obs_ ? obs_rms_.normalize(x) : x;
}

rl::ActReply PpoActor::act(const float* obs, int rows) { return act_impl(obs, rows, false); }
rl::ActReply PpoActor::act_greedy(const float* obs, int rows) { return act_impl(obs, rows, true); }

std::vector<float> PpoActor::values(const float* obs, int rows) {
  std::shared_lock<std::shared_mutex> lock(mu_);
  c10::InferenceMode guard;
  auto x = torch::from_blob(const_cast<float*>(obs), {rows, net_->spec().obs_dim}, torch::kFloat32);
  const auto v = net_->forward(prepare(x)).value.to(torch::kCPU).contiguous();
  return std::vector<float>(v.data_ptr<float>(), v.data_ptr<float>() + rows);
}

rl::ActReply PpoActor::act_impl(const float* obs, int rows, bool greedy) {
  const int dim = net_->spec().obs_dim;
  rl::ActReply reply;
  torch::Tensor head, value, log_std;
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    c10::InferenceMode guard;
    auto x = torch::from_blob(const_cast<float*>(obs), {rows, dim}, torch::kFloat32);
    auto out = net_->forward(prepare(x));
    reply.version = version_;
    head = out.head.to(torch::kCPU).contiguous();
    value = out.value.to(torch::kCPU).contiguous();
    if (net_->continuous()) log_std = net_->log_std().to(torch::kCPU).contiguous();
  }
  reply.values.assign(value.data_ptr<float>(), value.data_ptr<float>() + rows);
  reply.log_probs.resize(rows);
  std::lock_guard<std::mutex> lock(rng_mu_);
  if (!net_->continuous()) {  // categorical: inverse CDF on softmax
    const int n = static_cast<int>(head.size(1));
    auto logp = torch::log_softmax(head, -1).contiguous();
    const float* lp = logp.data_ptr<float>();
    reply.actions.resize(rows);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    for (int r = 0; r < rows; ++r) {
      int a = 0;
      if (greedy) {
        a = static_cast<int>(std::max_element(lp + r * n, lp + (r + 1) * n) - (lp + r * n));
      } else {
        double x = u(rng_), acc = 0;
        for (a = 0; a < n - 1; ++a) {
          acc += std::exp(lp[r * n + a]);
          if (x < acc) break;
        }
      }
      reply.actions[r] = a;
      reply.log_probs[r] = lp[r * n + a];
    }
  } else {  // Gaussian: mean + std * N(0, 1); the env clips
    const int a_dim = static_cast<int>(head.size(1));
    const float* mean = head.data_ptr<float>();
    const float* ls = log_std.data_ptr<float>();
    reply.cont_actions.resize(static_cast<std::size_t>(rows) * a_dim);
    std::normal_distribution<double> nd(0.0, 1.0);
    for (int r = 0; r < rows; ++r) {
      double lp = 0;
      for (int d = 0; d < a_dim; ++d) {
        const double z = greedy ? 0.0 : nd(rng_);
        reply.cont_actions[r * a_dim + d] = static_cast<float>(mean[r * a_dim + d] + std::exp(ls[d]) * z);
        lp += -0.5 * z * z - ls[d] - 0.5 * std::log(2 * M_PI);
      }
      reply.log_probs[r] = static_cast<float>(lp);
    }
  }
  return reply;
}

// ------------------------------------------------------------------ learning

PpoLoss ppo_loss(const torch::Tensor& logp, const torch::Tensor& old_logp, const torch::Tensor& adv,
                 const torch::Tensor& value, const torch::Tensor& old_value, const torch::Tensor& ret,
                 const torch::Tensor& entropy, const rl::PpoOptions& o) {
  PpoLoss l;
  const auto ratio = (logp - old_logp).exp();
  l.policy = -torch::min(ratio * adv, ratio.clamp(1 - o.clip, 1 + o.clip) * adv).mean();
  if (o.value_clip > 0) {
    const auto clipped = old_value + (value - old_value).clamp(-o.value_clip, o.value_clip);
    l.value = 0.5 * torch::max((value - ret).pow(2), (clipped - ret).pow(2)).mean();
  } else {
    l.value = 0.5 * (value - ret).pow(2).mean();
  }
  l.entropy = entropy.mean();
  l.total = l.policy + o.vf_coef * l.value - o.ent_coef * l.entropy;
  return l;
}

std::vector<float> RewardScaler::scale(const rl::Fragment& f) {
  std::vector<float> rewards = f.rewards, seen;
  for (std::size_t i = 0; i < rewards.size(); ++i) {
    const int e = static_cast<int>(i % f.num_envs);  // time-major: step i / num_envs, env i % num_envs
    double& d = discounted_[static_cast<long>(f.observer_id) * 65536 + e];
    d = d * gamma_ + rewards[i];
    seen.push_back(static_cast<float>(d));
    if (f.terminated[i] || f.truncated[i]) d = 0;
  }
  rms_.update(seen.data(), seen.size());
  const double scale = std::sqrt(rms_.var()[0] + 1e-8);
  for (auto& r : rewards) r = static_cast<float>(std::clamp(r / scale, -10.0, 10.0));
  return rewards;
}

Ppo::Ppo(PpoActor& actor, rl::PpoOptions options, TrajectoryOptions intake, int solved_window)
    : actor_(actor), o_(options), intake_(intake), recent_(solved_window), optimizer_(actor.net(), options.lr, 1e-5),
      scaler_(options.gamma), rng_(options.seed) {}

PpoStats Ppo::update(const std::vector<rl::Fragment>& fragments) {
  using Clock = std::chrono::steady_clock;
  const auto t_start = Clock::now();
  auto& net = actor_.net();
  const int obs_dim = net.spec().obs_dim, act_dim = net.spec().action_dim;
  for (const auto& f : fragments) check_fragment(f, obs_dim, act_dim, true);

  // Returns and advantages per fragment (rewards scaled by the running return std).
  std::vector<float> obs, adv_all, ret_all, logp_all, val_all, cont;
  std::vector<std::int64_t> acts;
  for (const auto& f : fragments) {
    const std::vector<float> rewards = o_.norm_reward ? scaler_.scale(f) : f.rewards;
    std::vector<float> returns;
    auto adv = gae(f, rewards, o_.gamma, o_.lambda, &returns);
    adv_all.insert(adv_all.end(), adv.begin(), adv.end());
    ret_all.insert(ret_all.end(), returns.begin(), returns.end());
    obs.insert(obs.end(), f.obs.begin(), f.obs.end());
    logp_all.insert(logp_all.end(), f.log_probs.begin(), f.log_probs.end());
    val_all.insert(val_all.end(), f.values.begin(), f.values.end());
    if (act_dim == 0) acts.insert(acts.end(), f.actions.begin(), f.actions.end());
    else cont.insert(cont.end(), f.cont_actions.begin(), f.cont_actions.end());
  }
  const auto n = static_cast<std::int64_t>(adv_all.size());
  PpoStats st;
  st.transitions = static_cast<std::size_t>(n);
  if (n == 0) return st;

  auto lock = actor_.exclusive();
  // The observation statistics the acting side used so far, then this batch joins them.
  auto obs_t = torch::from_blob(obs.data(), {n, obs_dim}, torch::kFloat32).clone();
  auto x = actor_.prepare(obs_t);
  if (actor_.norm_obs()) actor_.obs_rms().update(obs.data(), static_cast<std::size_t>(n));
  const auto dev = actor_.device();
  auto adv = torch::tensor(adv_all).to(dev), ret = torch::tensor(ret_all).to(dev);
  auto old_logp = torch::tensor(logp_all).to(dev), old_v = torch::tensor(val_all).to(dev);
  auto a = act_dim == 0 ? torch::tensor(acts).to(dev) : torch::tensor(cont).view({n, act_dim}).to(dev);
  if (o_.norm_adv && n > 1) adv = (adv - adv.mean()) / (adv.std() + 1e-8);

  net.train();
  std::vector<std::int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  const std::int64_t mb = std::min<std::int64_t>(o_.minibatch, n);
  int batches = 0;
  for (int epoch = 0; epoch < o_.epochs; ++epoch) {
    std::shuffle(order.begin(), order.end(), rng_);
    // The epoch's order gathered once; a minibatch is then a slice of each (a view): six
    // operations per epoch instead of six per minibatch.
    const auto perm = torch::tensor(order).to(dev);
    const auto xe = x.index_select(0, perm), ae = a.index_select(0, perm), olde = old_logp.index_select(0, perm),
               adve = adv.index_select(0, perm), olde_v = old_v.index_select(0, perm), rete = ret.index_select(0, perm);
    for (std::int64_t s = 0; s + mb <= n; s += mb) {
      const auto t0 = Clock::now();
      auto out = net.forward(xe.narrow(0, s, mb));
      auto logp = net.log_prob(out, ae.narrow(0, s, mb));
      const auto old = olde.narrow(0, s, mb);
      const auto l = ppo_loss(logp, old, adve.narrow(0, s, mb), out.value, olde_v.narrow(0, s, mb),
                              rete.narrow(0, s, mb), net.entropy(out), o_);
      gradient_step(optimizer_, l.total, o_.max_grad_norm, t0, mb, &times_);
      torch::NoGradGuard g;
      st.policy_loss += l.policy.item<double>();
      st.value_loss += l.value.item<double>();
      st.entropy += l.entropy.item<double>();
      const auto lr = logp - old;
      st.approx_kl += ((lr.exp() - 1) - lr).mean().item<double>();
      st.clip_fraction += ((lr.exp() - 1).abs() > o_.clip).to(torch::kFloat32).mean().item<double>();
      ++batches;
    }
  }
  net.eval();
  ++times_.updates;
  times_.total_s += seconds_between(t_start, Clock::now());
  if (batches > 0) {
    st.policy_loss /= batches;
    st.value_loss /= batches;
    st.entropy /= batches;
    st.approx_kl /= batches;
    st.clip_fraction /= batches;
  }
  return st;
}

void Ppo::bootstrap(rl::Fragment& f) {
  const int dim = actor_.net().spec().obs_dim;
  f.last_values = actor_.values(f.next_obs.data(), f.num_envs);
  f.truncated_values.assign(f.transitions(), 0.0f);
  const std::size_t cut = f.final_obs.size() / static_cast<std::size_t>(dim);
  if (cut == 0) return;
  const auto v = actor_.values(f.final_obs.data(), static_cast<int>(cut));
  std::size_t k = 0;  // final_obs holds the truncated-not-terminated steps in time-major order
  for (std::size_t i = 0; i < f.transitions(); ++i)
    if (f.truncated[i] && !f.terminated[i]) f.truncated_values[i] = v.at(k++);
}

RoundData Ppo::round(ObserverPool& pool, bool learn) {
  auto frags = pool.gather(intake_);
  ReleaseAtEnd release{intake_};  // the observers held at the round's end act with the new weights
  RoundData d;
  for (auto& f : frags) {
    bootstrap(f);
    d.returns.insert(d.returns.end(), f.episode_returns.begin(), f.episode_returns.end());
    d.add_acting(f);
  }
  if (learn) d.loss = update(frags).policy_loss;
  return d;
}

double Ppo::running_reward(const std::vector<double>& returns, double previous) {
  return recent_.running(returns, previous);
}

bool Ppo::solved(double running_reward, double target) const { return recent_.solved(running_reward, target); }

double RecentReturns::running(const std::vector<double>& returns, double previous) {
  for (double r : returns) {
    recent_.push_back(r);
    if (static_cast<int>(recent_.size()) > window_) recent_.pop_front();
  }
  if (recent_.empty()) return previous;
  return std::accumulate(recent_.begin(), recent_.end(), 0.0) / static_cast<double>(recent_.size());
}

bool RecentReturns::solved(double running, double target) const {
  return running >= target && static_cast<int>(recent_.size()) >= window_;
}

torch::Tensor RecentReturns::state() const {
  return torch::tensor(std::vector<double>(recent_.begin(), recent_.end()), torch::kDouble);
}

void RecentReturns::load(const torch::Tensor& state) {
  const auto r = state.to(torch::kDouble).contiguous();
  recent_.assign(r.data_ptr<double>(), r.data_ptr<double>() + r.numel());
  while (static_cast<int>(recent_.size()) > window_) recent_.pop_front();
}

void Ppo::save(const std::string& path, const std::map<std::string, double>& numbers) {
  auto lock = actor_.exclusive();
  auto tensors = optimizer_.state();
  tensors["obs_rms"] = actor_.obs_rms().state();
  tensors["ret_rms"] = return_rms().state();
  tensors["recent_returns"] = recent_.state();
  models::save_checkpoint(path, actor_.net(), nullptr, numbers, tensors);
}

std::map<std::string, double> Ppo::load(const std::string& path) {
  auto lock = actor_.exclusive();
  std::map<std::string, torch::Tensor> tensors;
  auto numbers = models::load_checkpoint(path, actor_.net(), nullptr, actor_.device(), &tensors);
  optimizer_.flatten();  // loading replaced the parameters' storage
  load_optimizer(optimizer_, tensors, path);
  if (tensors.count("obs_rms")) actor_.obs_rms().load(tensors["obs_rms"]);
  if (tensors.count("ret_rms")) return_rms().load(tensors["ret_rms"]);
  if (tensors.count("recent_returns")) recent_.load(tensors["recent_returns"]);
  actor_.net().eval();
  return numbers;
}

std::string Ppo::resume_note() const {
  return ", observation statistics over " + std::to_string(static_cast<long long>(actor_.obs_rms().count())) +
         " samples";
}

}  // namespace distrl::agent
