// The observer side of the RL loop. An Observer object lives in an observer process, created
// by the agent through remote<Observer>(...), which then starts its loop once (run_stream): it
// steps its environments and reports every step's outcome with the next action request (kAct)
// until the agent says stop. Every learner, synchronous or not, learns from those steps; a
// synchronous one holds the observer's next request while it learns (the observer just waits
// for the answer).
#pragma once

#include <chrono>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "rl/protocol.h"
#include "envs/vec_env.h"
#include "transport/rpc/rpc_agent.h"

namespace distrl::observer {

// The observer's loop: resets every env of venv (an autoreset VecEnv),
// then until a reply says stop or `stop` is set: sends the observations with what the previous
// actions did (StepReport) through `step`, and steps the envs with the answer. Throws what
// `step` throws, ProtocolError for a malformed answer.
using StepFn = std::function<rl::ActReply(const rl::StepReport& report)>;
void run_stream(envs::VecEnv& venv, int observer_id, const StepFn& step, const std::atomic<bool>& stop);

// What the observer process's main thread watches: the agent's "finish", a failed call to
// the agent, or a silent agent.
class ObserverHost {
 public:
  static constexpr std::chrono::seconds kAgentLostGrace{3};
  void touch();
  // The agent has made this process's Observer: the run is on (a stop waits for its end).
  void run_started();
  bool started();
  void finish();
  void fail(const std::string& why);
  // Blocks until finished (true), failed (throws TransportError with the reason), the agent's
  // connection is gone (agent_lost() says why, not empty, for kAgentLostGrace in a row: a
  // connection that comes back sooner was a stall or a blink; TransportError "lost the agent:
  // WHY") or idle for longer
  // than idle_limit (throws TimeoutError). agent_lost is polled every 200 ms. After a SIGINT or
  // SIGTERM (common/stop_signal.h) it waits at most stop_grace more for the agent to end the
  // run (the agent, stopped too, finishes its round and says so), then returns false; at once
  // when no run has started.
  bool wait(std::chrono::milliseconds idle_limit, const std::function<std::string()>& agent_lost = {},
            std::chrono::milliseconds stop_grace = std::chrono::seconds(20));

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool finished_ = false;
  bool started_ = false;
  std::string failure_;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

class Observer {
 public:
  Observer(transport::RpcAgent& rpc, ObserverHost& host, rl::ObserverSpec spec);
  // Starts this observer's own loop (run_stream above) on its own thread and returns at once;
  // the loop ends at a stop reply, finish() or a failure (the host then fails, naming it). A
  // call whose connection dropped (this process or the agent was stopped, the network blinked)
  // is sent again as a `restart` once the connection is back, within ObserverHost::kAgentLostGrace
  // (the host's wait gives up on the agent after that).
  int run_stream(int unused);
  void finish();
  ~Observer();

  // Registers the rl::kObserverClass ("Observer") class (constructed by the agent) on this process's agent.
  static void register_class(transport::RpcAgent& rpc, ObserverHost& host);

 private:
  rl::ActReply step(const rl::StepReport& report);  // the loop's call to the agent, with the retry
  transport::RpcAgent& rpc_;
  ObserverHost& host_;
  rl::ObserverSpec spec_;
  envs::VecEnv venv_;
  std::mutex mu_;  // run_stream's start
  std::atomic<bool> stop_{false};
  std::thread stream_;
};

}  // namespace distrl::observer
