#include "agent/rl_agent.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <numeric>

#include "common/error.h"
#include "common/log.h"
#include "envs/env.h"
#include "envs/render.h"
#include "models/checkpoint.h"

namespace distrl::agent {
namespace {

using Clock = std::chrono::steady_clock;

double percentile(std::vector<float>& v, double q) {
  if (v.empty()) return 0;
  const std::size_t k = std::min(v.size() - 1, static_cast<std::size_t>(q * (v.size() - 1) + 0.5));
  std::nth_element(v.begin(), v.begin() + k, v.end());
  return v[k];
}

std::string thousands(double v) {
  std::string s = std::to_string(static_cast<long long>(v + 0.5));
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(i, ",");
  return s;
}

// Calls `method(arg)` on every live observer at once and collects the answers; an observer
// whose call fails (or whose answer fails `check`) is dropped through `drop`.
template <typename T, typename Check, typename Drop>
std::vector<T> gather(std::vector<transport::RRef<rl::ObserverObject>>& obs, const std::vector<int>& ids,
                      const std::vector<bool>& alive, Batcher* b, const char* method, int arg, Check check, Drop drop) {
  std::vector<transport::Future<T>> futs(obs.size());
  for (std::size_t i = 0; i < obs.size(); ++i) {
    if (!alive[i]) continue;
    if (b) b->set_active(ids[i], true);
    const int id = ids[i];
    futs[i] = obs[i].template rpc_async<T>(method, arg).then([b, id](const transport::Future<T>& f) {
      if (b) b->set_active(id, false);
      return f.value();
    });
  }
  std::vector<T> out;
  std::string last_error;
  for (std::size_t i = 0; i < obs.size(); ++i) {
    if (!alive[i]) continue;
    try {
      T r = futs[i].value();
      check(r);  // before the stats or the learner read it
      out.push_back(std::move(r));
    } catch (const std::exception& e) {
      last_error = e.what();
      drop(i, e);
    }
  }
  if (out.empty()) throw TransportError("every observer is gone; the last error: " + last_error);
  return out;
}

}  // namespace

RlAgent::RlAgent(rl::RlConfig config, const std::string& resume) : cfg_(std::move(config)) {
  auto env = envs::make_env(cfg_.env);
  const auto space = env->action_space();
  obs_dim_ = env->observation_space().dim();
  n_actions_ = space.kind == envs::Space::Kind::Discrete ? space.n : 0;
  act_dim_ = space.kind == envs::Space::Kind::Box ? space.dim() : 0;
  torch::manual_seed(cfg_.seed);
  at::set_num_threads(cfg_.torch_threads);
  const auto device = parse_device(cfg_.device);
  const std::uint64_t seed = static_cast<std::uint64_t>(cfg_.seed) * 0x9E3779B97F4A7C15ull + 1;
  if (cfg_.algo == "ppo") {
    models::ActorCriticSpec spec;
    spec.obs_dim = obs_dim_;
    spec.n_actions = n_actions_;
    spec.action_dim = act_dim_;
    spec.hidden = cfg_.hidden;
    spec.activation = cfg_.activation;
    spec.shared = cfg_.shared;
    spec.init_log_std = cfg_.ppo_log_std_init;
    std::shared_ptr<models::ActorCritic> net;
    try {
      net = std::make_shared<models::ActorCritic>(spec);
    } catch (const ModelError& e) {
      throw ConfigError(std::string("model: ") + e.what());
    }
    ppo_actor_ = std::make_unique<PpoActor>(net, device, cfg_.ppo.norm_obs, seed);
    rl::PpoOptions o = cfg_.ppo;
    o.gamma = cfg_.gamma;
    o.lr = cfg_.lr;
    o.seed = seed + 2;
    ppo_ = std::make_unique<Ppo>(*ppo_actor_, o);
    PpoActor* a = ppo_actor_.get();
    act_ = [a](const float* obs, int rows) { return a->act(obs, rows); };
  } else {
    if (act_dim_ > 0)
      throw ConfigError("env.name: " + cfg_.env + " has continuous actions; REINFORCE here needs a discrete env "
                        "(use learner.algo=ppo)");
    models::PolicySpec spec;
    spec.obs_dim = obs_dim_;
    spec.n_actions = n_actions_;
    spec.hidden = cfg_.hidden;
    spec.dropout = cfg_.dropout;
    std::shared_ptr<models::PolicyNet> net;
    try {
      net = models::make_policy(cfg_.model, spec);
    } catch (const ModelError& e) {
      throw ConfigError(std::string("model: ") + e.what());
    }
    actor_ = std::make_unique<PolicyActor>(net, device, obs_dim_, seed);
    learner_ = std::make_unique<Reinforce>(*actor_, ReinforceOptions{cfg_.gamma, cfg_.lr});
    PolicyActor* a = actor_.get();
    act_ = [a](const float* obs, int rows) { return a->act(obs, rows); };
  }
  if (!resume.empty()) load(resume);
}

RlAgent::~RlAgent() {
  if (batcher_) batcher_->stop();
}

std::string RlAgent::checkpoint_path() const { return cfg_.out_dir + "/policy.pt"; }

void RlAgent::serve(transport::RpcAgent& rpc) {
  const int observers = rpc.world_size() - 1;
  if (observers < 1) throw ConfigError("the world has no observers: start distrl-agent with world size >= 2");
  if (observers != cfg_.observers)
    DISTRL_LOG(Info, "agent: " << observers << " observer(s) in the world (config 'observers' says " << cfg_.observers
                               << "; the world wins)");
  auto act = act_;
  const auto where = cfg_.serve_inline ? transport::RunOn::IoThread : transport::RunOn::Pool;
  if (cfg_.mode == "batched") {
    BatchOptions bo;
    bo.max_batch = cfg_.max_batch;
    bo.max_wait = std::chrono::microseconds(cfg_.max_wait_us);
    batcher_ = std::make_unique<Batcher>(obs_dim_, observers, bo, act);
    Batcher* b = batcher_.get();
    rpc.register_function(rl::kSelectAction, [b](int observer, std::vector<float> obs) {
      return b->submit(observer, std::move(obs));
    }, where);
  } else {
    const int dim = obs_dim_;
    rpc.register_function(rl::kSelectAction, [act, dim](int observer, std::vector<float> obs) {
      return act(obs.data(), rl::observation_rows(obs, dim));
    }, where);
  }
}

RunSummary RlAgent::run(transport::RpcAgent& rpc) {
  std::vector<transport::RRef<rl::ObserverObject>> obs;
  std::vector<int> ids;
  for (const auto& w : rpc.workers()) {
    if (w.rank == rpc.rank()) continue;
    rl::ObserverSpec spec;
    spec.agent = rpc.name();
    spec.observer_id = static_cast<int>(obs.size());
    spec.env = cfg_.env;
    spec.num_envs = cfg_.envs_per_observer;
    spec.seed = static_cast<std::uint64_t>(cfg_.seed) * 1000003ull + 7919ull * (spec.observer_id + 1);
    spec.record_latency = true;
    spec.fragments = ppo();
    obs.push_back(rpc.remote<rl::ObserverObject>(w.name, rl::kObserverClass, spec));
    ids.push_back(spec.observer_id);
  }
  for (auto& r : obs) r.created().value();  // a bad env name on an observer fails here, named

  std::filesystem::create_directories(cfg_.out_dir);
  const std::string metrics = cfg_.out_dir + "/metrics.csv";
  std::error_code ec;
  const bool append = rounds_done_ > 0 && std::filesystem::file_size(metrics, ec) > 0 && !ec;
  std::ofstream csv(metrics, append ? std::ios::app : std::ios::trunc);
  if (!append)
    csv << "round,episodes,env_steps,seconds,mean_reward,min_reward,max_reward,running_reward,loss,mean_batch\n";
  if (rounds_done_ >= cfg_.episodes)
    DISTRL_LOG(Warn, "agent: the checkpoint is at round " << rounds_done_ << " and learner.episodes is "
                                                        << cfg_.episodes << ": nothing to run (raise learner.episodes)");

  RunSummary sum;
  sum.rounds = rounds_done_;
  sum.episodes = episodes_done_;
  sum.env_steps = env_steps_done_;
  sum.running_reward = running_reward_;
  std::vector<float> latencies;
  std::vector<bool> alive(obs.size(), true);
  const auto start = Clock::now();
  const double seconds_before = seconds_done_;  // earlier runs of a resumed one
  auto last_log = start;
  long long steps_at_log = sum.env_steps;
  BatchStats batch_at_log;
  for (int round = rounds_done_ + 1; round <= cfg_.episodes; ++round) {
    std::vector<double> returns;
    long long steps = 0;
    double loss = 0;
    auto drop = [&](std::size_t i, const std::exception& e) {
      alive[i] = false;
      ++sum.observers_lost;
      DISTRL_LOG(Warn, "agent: dropping observer " << ids[i] << " (" << obs[i].owner_name() << "): " << e.what());
    };
    if (ppo()) {
      auto frags = gather<rl::Fragment>(obs, ids, alive, batcher_.get(), "run_fragment", cfg_.ppo_steps,
                                    [&](const rl::Fragment& f) { check_fragment(f, obs_dim_, act_dim_); }, drop);
      for (auto& f : frags) {
        returns.insert(returns.end(), f.episode_returns.begin(), f.episode_returns.end());
        steps += static_cast<long long>(f.transitions());
        latencies.insert(latencies.end(), f.latency_us.begin(), f.latency_us.end());
      }
      if (cfg_.learn) loss = ppo_->update(frags).policy_loss;
    } else {
      auto rollouts = gather<rl::Rollout>(obs, ids, alive, batcher_.get(), "run_episode", cfg_.max_steps,
                                      [&](const rl::Rollout& r) { check_rollout(r, obs_dim_); }, drop);
      if (cfg_.learn) loss = learner_->update(rollouts);
      for (auto& r : rollouts) {
        std::size_t at = 0;
        for (auto len : r.lengths) {
          returns.push_back(std::accumulate(r.rewards.begin() + at, r.rewards.begin() + at + len, 0.0));
          at += len;
        }
        steps += static_cast<long long>(r.steps());
        latencies.insert(latencies.end(), r.latency_us.begin(), r.latency_us.end());
      }
    }
    const long long episodes = static_cast<long long>(returns.size());
    double total = 0, lo = 1e300, hi = -1e300;
    for (double ret : returns) {
      total += ret;
      lo = std::min(lo, ret);
      hi = std::max(hi, ret);
    }
    if (returns.empty()) lo = hi = std::nan("");
    const double mean = returns.empty() ? std::nan("") : total / episodes;
    if (ppo()) {  // the mean return of the last solved_window episodes
      for (double ret : returns) {
        recent_.push_back(ret);
        if (static_cast<int>(recent_.size()) > cfg_.solved_window) recent_.pop_front();
      }
      if (!recent_.empty()) running_reward_ = std::accumulate(recent_.begin(), recent_.end(), 0.0) / recent_.size();
    } else {
      running_reward_ = 0.05 * mean + 0.95 * running_reward_;
    }
    rounds_done_ = round;
    sum.rounds = round;
    sum.episodes += episodes;
    sum.env_steps += steps;
    sum.last_reward = mean;
    sum.running_reward = running_reward_;
    episodes_done_ = sum.episodes;
    env_steps_done_ = sum.env_steps;
    const double elapsed = seconds_before + std::chrono::duration<double>(Clock::now() - start).count();
    seconds_done_ = elapsed;
    const BatchStats bs = batcher_ ? batcher_->stats() : BatchStats{};
    csv << round << ',' << sum.episodes << ',' << sum.env_steps << ',' << elapsed << ',' << mean << ',' << lo << ','
        << hi << ',' << running_reward_ << ',' << loss << ',' << (batcher_ ? bs.mean_rows() : 1.0) << std::endl;  // tail -f

    const bool solved = cfg_.learn && running_reward_ >= cfg_.target_reward &&
                        (!ppo() || static_cast<int>(recent_.size()) >= cfg_.solved_window);
    if (round % cfg_.log_interval == 0 || solved || round == cfg_.episodes) {
      const auto now = Clock::now();
      const double dt = std::chrono::duration<double>(now - last_log).count();
      const double batch = bs.batches > batch_at_log.batches
                               ? double(bs.rows - batch_at_log.rows) / double(bs.batches - batch_at_log.batches)
                               : 1.0;
      std::ostringstream line;
      line << "round " << std::setw(5) << round << "  episodes " << std::setw(6) << sum.episodes << "  reward "
           << std::fixed << std::setprecision(1) << std::setw(6);
      if (std::isnan(mean)) line << "-";  // PPO: no episode ended in this round's fragments
      else line << mean;
      line << "  running " << std::setw(6)
           << running_reward_ << "  env-steps/s " << std::setw(9) << thousands((sum.env_steps - steps_at_log) / dt)
           << "  batch " << std::setprecision(2) << (batcher_ ? batch : 1.0) << "  " << std::setprecision(1)
           << elapsed << " s";
      std::printf("%s\n", line.str().c_str());
      std::fflush(stdout);
      last_log = now;
      steps_at_log = sum.env_steps;
      batch_at_log = bs;
    }
    if (cfg_.learn && ((cfg_.checkpoint_every > 0 && round % cfg_.checkpoint_every == 0) ||
                       checkpoint_requested_.exchange(false)))
      save(checkpoint_path());
    if (solved) {
      sum.solved = true;
      break;
    }
  }
  seconds_done_ = seconds_before + std::chrono::duration<double>(Clock::now() - start).count();
  sum.seconds = seconds_done_;
  sum.mean_batch = batcher_ ? batcher_->stats().mean_rows() : 1.0;
  sum.latency_median_us = percentile(latencies, 0.5);
  sum.latency_p99_us = percentile(latencies, 0.99);
  std::ostringstream why;
  if (sum.solved)
    why << "running reward " << std::fixed << std::setprecision(1) << sum.running_reward << " >= "
        << cfg_.target_reward;
  else if (cfg_.learn)
    why << "ran all " << cfg_.episodes << " rounds; running reward " << std::fixed << std::setprecision(1)
        << sum.running_reward << " < target " << cfg_.target_reward
        << " (raise learner.episodes or tune learner.lr)";
  else
    why << "ran all " << cfg_.episodes << " rounds (learner.learn is off)";
  sum.stop_reason = why.str();

  // Tell the observers the run is over; they then join the graceful shutdown.
  std::vector<transport::Future<void>> done;
  for (std::size_t i = 0; i < obs.size(); ++i)
    if (alive[i]) done.push_back(obs[i].rpc_async<void>("finish"));
  for (auto& f : done) {
    try {
      f.value();
    } catch (const std::exception& e) {
      DISTRL_LOG(Warn, "agent: an observer did not take 'finish': " << e.what());
    }
  }
  if (cfg_.learn) save(checkpoint_path());
  return sum;
}

void RlAgent::save(const std::string& path) {
  // Counts are exact in a double up to 2^53.
  const std::map<std::string, double> numbers{{"running_reward", running_reward_},
                                              {"rounds", static_cast<double>(rounds_done_)},
                                              {"episodes", static_cast<double>(episodes_done_)},
                                              {"env_steps", static_cast<double>(env_steps_done_)},
                                              {"seconds", seconds_done_}};
  if (ppo()) {
    auto lock = ppo_actor_->exclusive();
    const std::vector<double> recent(recent_.begin(), recent_.end());
    models::save_checkpoint(path, ppo_actor_->net(), &ppo_->optimizer(), numbers,
                            {{"obs_rms", ppo_actor_->obs_rms().state()},
                             {"ret_rms", ppo_->return_rms().state()},
                             {"recent_returns", torch::tensor(recent, torch::kDouble)}});
  } else {
    auto lock = actor_->exclusive();
    models::save_checkpoint(path, actor_->net(), &learner_->optimizer(), numbers);
  }
  DISTRL_LOG(Info, "agent: saved " << path);
}

void RlAgent::load(const std::string& path) {
  std::map<std::string, double> numbers;
  try {
    if (ppo()) {
      auto lock = ppo_actor_->exclusive();
      std::map<std::string, torch::Tensor> tensors;
      numbers = models::load_checkpoint(path, ppo_actor_->net(), &ppo_->optimizer(), ppo_actor_->device(), &tensors);
      if (tensors.count("obs_rms")) ppo_actor_->obs_rms().load(tensors["obs_rms"]);
      if (tensors.count("ret_rms")) ppo_->return_rms().load(tensors["ret_rms"]);
      if (tensors.count("recent_returns")) {
        const auto r = tensors["recent_returns"].to(torch::kDouble).contiguous();
        recent_.assign(r.data_ptr<double>(), r.data_ptr<double>() + r.numel());
        while (static_cast<int>(recent_.size()) > cfg_.solved_window) recent_.pop_front();
      }
      ppo_actor_->net().eval();
    } else {
      auto lock = actor_->exclusive();
      numbers = models::load_checkpoint(path, actor_->net(), &learner_->optimizer(), actor_->device());
      actor_->net().eval();
    }
  } catch (const ConfigError& e) {
    throw ConfigError(std::string(e.what()) + " (learner.algo " + cfg_.algo + ", env " + cfg_.env +
                      ", model.hidden as configured)");
  }
  if (numbers.count("running_reward")) running_reward_ = numbers["running_reward"];
  if (numbers.count("rounds")) rounds_done_ = static_cast<int>(numbers["rounds"]);
  if (numbers.count("episodes")) episodes_done_ = static_cast<long long>(numbers["episodes"]);
  if (numbers.count("env_steps")) env_steps_done_ = static_cast<long long>(numbers["env_steps"]);
  if (numbers.count("seconds")) seconds_done_ = numbers["seconds"];
  std::ostringstream line;  // progress output, shown at every log level like the round lines
  line << "agent: resumed from " << path << " at round " << rounds_done_ << " (" << episodes_done_ << " episodes, "
       << env_steps_done_ << " env steps, running reward " << running_reward_;
  if (ppo()) line << ", observation statistics over " << static_cast<long long>(ppo_actor_->obs_rms().count()) << " samples";
  line << ")";
  std::printf("%s\n", line.str().c_str());
  std::fflush(stdout);
}

std::vector<double> RlAgent::evaluate(int episodes, std::uint64_t seed, const std::string& gif_path) {
  auto env = envs::make_env(cfg_.env);
  std::vector<float> obs(obs_dim_);
  std::vector<double> returns;
  std::unique_ptr<envs::GifWriter> gif;
  envs::Frame frame;
  for (int ep = 0; ep < episodes; ++ep) {
    env->reset(seed + static_cast<std::uint64_t>(ep), obs.data());
    if (ep == 0 && !gif_path.empty()) {
      envs::draw(*env, &frame);
      gif = std::make_unique<envs::GifWriter>(gif_path, frame.width, frame.height, 4);
      gif->add(frame);
    }
    double ret = 0;
    for (int t = 0; t < cfg_.max_steps; ++t) {
      const rl::ActReply a = ppo() ? ppo_actor_->act_greedy(obs.data(), 1) : act_(obs.data(), 1);
      const envs::Step s = act_dim_ > 0 ? env->step(a.cont_actions.data(), obs.data()) : env->step(a.actions[0], obs.data());
      ret += s.reward;
      if (gif && (t % 2 == 1 || s.done())) {  // 25 frames per second of game time
        envs::draw(*env, &frame);
        gif->add(frame);
      }
      if (s.done()) break;
    }
    if (gif) {
      gif->close();
      gif.reset();
    }
    returns.push_back(ret);
  }
  return returns;
}

}  // namespace distrl::agent
