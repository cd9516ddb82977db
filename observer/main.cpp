// distrl-observer: steps environments for the agent. Joins the run, hosts the Observer object
// the agent creates, runs episodes on request, and exits when the agent says the run is over
// (or, with a message and a non-zero code, when the agent is gone).
#include <iostream>

#include "rl/cli.h"
#include "common/log.h"
#include "common/main_guard.h"
#include "common/stop_signal.h"
#include "observer/observer.h"
#include "transport/bootstrap/rendezvous.h"
#include "transport/bootstrap/security.h"

int main(int argc, char** argv) {
  return distrl::guarded_main("distrl-observer", [&] {
    using namespace distrl;
    rl::RlCommandLine cmd("distrl-observer",
                          "distrl-observer: an RL observer process. Steps the environments the agent asks for and\n"
                          "asks the agent for every action. Takes the same --config and overrides as distrl-agent\n"
                          "(it uses the rpc.* keys; the agent sends it the rest). Exits when the agent finishes, or\n"
                          "with an error within rpc.timeout_s when the agent is gone.");
    cmd.help_keys = {"rpc.", "security"};
    cmd.help_keys_note = "the agent sends an observer what it steps: distrl-agent --help lists every key";
    if (!cmd.parse(argc, argv)) return 0;
    distrl::transport::use_security(cmd.flags.security, cmd.flags.security_key);  // checks the key file
    const rl::RlConfig& cfg = cmd.config;
    const ToolFlags& cli = cmd.flags;
    if (cli.check_only) return 0;

    auto opts = rl::rpc_options(cfg, cli.world, "");
    const auto world = transport::resolve_world(opts.init_method, opts.rank, opts.world_size);
    opts.name = "observer" + std::to_string(world.rank);
    set_log_tag(opts.name);
    observer::ObserverHost host;
    transport::RpcAgent rpc(opts, [&](transport::RpcAgent& a) { observer::Observer::register_class(a, host); });
    host.touch();
    // SIGINT/SIGTERM: keep serving while the agent (stopped too, by distrl-launch or the
    // terminal) finishes its round and ends the run; leave without it after the grace.
    install_stop_handlers();
    // Throws with the reason when the agent is gone (connection dropped) or silent too long.
    const std::string agent = rl::agent_name(rl::agent_of_observer(world.rank, cfg.agents));  // roles.agents
    const auto agent_lost = [&] {
      return rpc.connection_lost(agent) ? "its connection " + rpc.worker(agent).endpoint +
                                              " dropped (the process exited or crashed, or its host became unreachable)"
                                        : std::string();
    };
    if (!host.wait(opts.rpc_timeout, agent_lost)) {
      if (host.started())
        std::cerr << "distrl-observer: " << stop_signal_name()
                  << ": the agent did not end the run within 20 s of the signal; leaving without it\n";
      else std::cerr << "distrl-observer: " << stop_signal_name() << " before the agent started a run; leaving\n";
      return stop_exit_code();
    }
    rpc.shutdown();
    return stop_exit_code();  // 0, or 128 + the signal that stopped the run
  });
}
