// Distributed autograd when things go wrong, across real processes: a rank restarted mid-run
// trains on with fresh context ids; a dead creator's contexts, and contexts stranded behind a
// dead middle worker, are reaped on every survivor; a nested call made after its context was
// released fails and leaves nothing behind; a context reaped while its creator was stopped
// fails loudly when it comes back; a killed peer fails the backward, a dead owner the step, a
// slow part the backward's deadline, each named; malformed gradients and too many contexts or
// messages are refused while the worker keeps serving.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <sys/wait.h>

#include <fstream>

#include "autograd/optimizer.h"
#include "tests/support/autograd_world.h"
#include "transport/bootstrap/store.h"

using namespace distrl;
using namespace distrl::transport;
using namespace std::chrono_literals;
using namespace distrl::testing;

namespace {

void register_die(RpcAgent& a) {
  a.register_function("die", [] { ::kill(::getpid(), SIGKILL); });
}

// Kills rank k through its "die" function (the call fails with the connection).
void kill_rank(RpcAgent& agent, int k) {
  const std::string e = error_of<TransportError>([&] { agent.rpc_sync<void>(k, "die"); });
  expect(!e.empty(), "the call to die fails with the dying process");
}

// The end of each rank of a world where rank `doomed` is killed: it waits to be; the others
// shut down, rank 0's peers serving until it is done however slow the machine (their shutdown
// bound is short so that nobody waits long for the dead rank).
int end_with_a_dead_rank(RpcAgent& agent, int rank, int doomed) {
  if (rank == doomed) {
    wait_until([] { return false; }, 30s);
    return 1;
  }
  try {
    if (rank != 0) agent.serve_until_shutdown(0);
    agent.shutdown();
  } catch (const std::exception& e) {
    std::cout << "rank " << rank << " shutdown: " << e.what() << std::endl;
  }
  return 0;
}

RpcOptions short_shutdown(const TempDir& dir, int rank, int world) {
  RpcOptions o = rpc_options(dir, rank, world);
  o.shutdown_timeout = 5s;
  return o;
}

// Three ranks of which `doomed` is SIGKILLed during body(agent, me, rank, dir); extra adds
// registrations to each rank's setup (default: "die"). Every rank ends as end_with_a_dead_rank
// says; the survivors exit 0.
void run_with_a_dead_rank(int doomed, const std::function<void(RpcAgent&, Worker&, int, const TempDir&)>& body,
                          const std::function<void(RpcAgent&)>& extra = register_die) {
  TempDir dir;
  auto codes = run_ranks(3, [&](int rank) {
    Worker me;
    RpcAgent agent(short_shutdown(dir, rank, 3), [&](RpcAgent& a) {
      setup(a, me);
      extra(a);
    });
    body(agent, me, rank, dir);
    return end_with_a_dead_rank(agent, rank, doomed);
  });
  std::vector<int> want(3, 0);
  want[doomed] = 128 + SIGKILL;
  EXPECT_EQ(codes, want);
}

// Every survivor's live contexts return to 0 within the bound (a dead peer is noticed at once;
// its contexts and those it brought go with it).
void expect_no_live_contexts(RpcAgent& agent, const std::vector<int>& survivors) {
  std::uint64_t live = 0;
  const bool zero = wait_until([&] { return (live = live_everywhere(agent, survivors)) == 0; }, 20s);
  expect(zero, "live contexts on the survivors return to 0 (still " + std::to_string(live) + ")");
}

}  // namespace

// A rank killed while it holds a context is restarted (as --max-restarts does) and runs
// backward passes through its peer again: its new process's context ids differ from the
// earlier process's (the peer remembers those as released), so its calls are recorded and the
// gradients equal the local model's.
TEST(DistAutogradFaultTest, ARankRestartedMidContextRunsBackwardPassesAfterItsRestart) {
  TempDir dir;
  const std::string store_file = dir.file("store"), done = dir.file("done");
  auto options = [&](int rank) {
    ::setenv("DISTRL_STORE_HOSTED", "1", 1);  // rank 0 hosts no store: the restart needs one that outlives ranks
    auto o = rpc_options(dir, rank, 2);
    expect(wait_for_file(store_file, 10s), "the store's endpoint");
    o.init_method = read_file(store_file);
    return o;
  };
  // Rank 1's steps: y = hop on rank 1 then rank 0; both weights' gradients against the local model.
  auto train = [](RpcAgent& agent, Worker& me, int steps) {
    for (int i = 0; i < steps; ++i) {
      dist_autograd::Context ctx(agent);
      at::Tensor y = hop(me, input(), {0});
      dist_autograd::backward(ctx, {(y * y).sum()});
      at::Tensor w0 = weight_of(0).requires_grad_(true), w1 = weight_of(1).requires_grad_(true);
      at::Tensor ly = local_hop(local_hop(input(), w1), w0);
      (ly * ly).sum().backward();
      const at::Tensor g0 = agent.rpc_sync<at::Tensor>(0, "grad_of", ctx.id());
      const auto mine = dist_autograd::get_gradients(ctx);
      expect(g0.numel() == 16 && rel_err(g0, w0.grad()) < kFloat64GraphTolerance,
             "worker0's gradient equals the local one");
      expect(mine.size() == 1 && rel_err(mine[0].second, w1.grad()) < kFloat64GraphTolerance,
             "worker1's gradient equals the local one");
    }
  };
  auto codes = run_ranks(
      3,
      [&](int rank) {
        if (rank == 2) {  // hosts the store, as distrl-launch does
          StoreServer store("tcp://127.0.0.1:*");
          std::ofstream(store_file + ".tmp") << store.endpoint();
          std::rename((store_file + ".tmp").c_str(), store_file.c_str());
          wait_until([&] { return read_file(done).size() >= 2; }, 90s);
          return 0;
        }
        auto finished = [&] { std::ofstream(done, std::ios::app) << rank; };
        if (rank == 1) {
          const pid_t first = ::fork();
          if (first == 0) {
            Worker me;
            RpcAgent agent(options(1), [&](RpcAgent& a) { setup(a, me); });
            train(agent, me, 3);
            dist_autograd::Context ctx(agent);
            hop(me, input(), {0});  // worker0 holds this context when the process dies
            ::raise(SIGKILL);
          }
          int status = 0;
          ::waitpid(first, &status, 0);
          transport::remove_ipc_files_of(first);
          expect(exit_code(status) == 128 + SIGKILL, "the first process was killed");
          Worker me;
          RpcAgent agent(options(1), [&](RpcAgent& a) { setup(a, me); });
          expect(agent.incarnation() == 2, "the restarted process is incarnation 2");
          train(agent, me, 3);
          touch(dir.file("trained"));
          agent.shutdown();
          finished();
          return 0;
        }
        Worker me;
        RpcAgent agent(options(0), [&](RpcAgent& a) { setup(a, me); });
        expect(wait_for_file(dir.file("trained"), 60s), "rank 1 trained after its restart");
        expect_no_live_contexts(agent, {0});  // the dead process's context was reaped
        agent.shutdown();
        finished();
        return 0;
      },
      90s);
  EXPECT_EQ(codes, (std::vector<int>{0, 0, 0}));
}

// Worker1 makes a context that goes 1 -> 0 -> 2 -> 0 (workers 0 and 2 each brought it to the
// other) and dies holding it: workers 0 and 2 reap it (0 sees its creator die; 2 never talked
// to worker1 and drops it when 0 passes the release on).
TEST(DistAutogradFaultTest, ContextsOfADeadCreatorAreReapedOnEverySurvivor) {
  run_with_a_dead_rank(1, [](RpcAgent& agent, Worker& me, int rank, const TempDir& dir) {
    if (rank == 1) {
      dist_autograd::Context ctx(agent);
      hop(me, input(), {0, 2, 0});
      touch(dir.file("holding"));
      end_with_a_dead_rank(agent, rank, 1);  // killed by rank 0 while holding the context
    }
    if (rank == 0) {
      expect(wait_for_file(dir.file("holding"), 20s), "worker1 holds its context");
      expect(live_everywhere(agent, {0, 2}) == 2, "workers 0 and 2 hold worker1's context");
      kill_rank(agent, 1);
      expect_no_live_contexts(agent, {0, 2});
    }
  });
}

// A -> B -> C, then B dies and A leaves the context: A's release cannot go through B, and C
// reaps the context itself (every worker that brought it there is lost).
TEST(DistAutogradFaultTest, AContextBehindADeadMiddleWorkerIsReapedDownstream) {
  run_with_a_dead_rank(1, [](RpcAgent& agent, Worker& me, int rank, const TempDir&) {
    if (rank != 0) return;
    {
      dist_autograd::Context ctx(agent);
      hop(me, input(), {1, 2});
      expect(live_everywhere(agent, {0, 2}) == 2, "workers 0 and 2 hold the context");
      auto none = autograd::detail::engine_of(agent)->make_current(-1);
      kill_rank(agent, 1);
    }
    expect_no_live_contexts(agent, {0, 2});
  });
}

// B's handler calls C after A left the context and B dropped it: the call fails on B, naming
// the released context, and C never holds it (it used to create a context nothing released).
TEST(DistAutogradFaultTest, ANestedCallAfterItsContextWasReleasedFailsAndLeavesNothingBehind) {
  World world{3, {}, [](RpcAgent& a, Worker&) {
                a.register_function("nested_later", [&a](at::Tensor x) {
                  expect(wait_until([&] { return dist_autograd::live_contexts(a) == 0; }, 10s),
                         "the release reached worker1");
                  return a.rpc_sync<at::Tensor>(2, "hop", x, std::vector<int>{});
                });
              }};
  run_on_rank0(world, [](RpcAgent& agent, Worker&) {
    Future<at::Tensor> late;
    std::int64_t id = 0;
    {
      dist_autograd::Context ctx(agent);
      id = ctx.id();
      late = agent.rpc_async<at::Tensor>(1, "nested_later", input().requires_grad_(true));
      expect(wait_until([&] { return agent.rpc_sync<std::uint64_t>(1, "live") == 1; }, 10s),
             "worker1 serves the context");
    }
    std::string type, what;
    try {
      late.value();
    } catch (const RemoteError& e) {
      type = e.type();
      what = e.what();
    }
    expect(type == "distrl::autograd::BackwardError" && contains(what, autograd::detail::id_name(id)) &&
               contains(what, "released on worker1"),
           "the nested call fails on worker1 naming the released context: " + type + " " + what);
    expect_no_live_contexts(agent, {0, 1, 2});
  });
}

// The creator is stopped (SIGSTOP) past the heartbeat timeout: worker0 reaps its context.
// When it runs again, using the context fails loudly, naming it, the worker and the reaping:
// a new call of it, its backward and its optimizer step (the call used to be served outside any
// context and the step to step nothing, the gradients lost silently).
TEST(DistAutogradFaultTest, AContextReapedWhileItsCreatorWasStoppedFailsLoudlyWhenItComesBack) {
  TempDir dir;
  auto codes = run_ranks(
      2,
      [&](int rank) {
        Worker me;
        RpcAgent agent(rpc_options(dir, rank, 2), [&](RpcAgent& a) { setup(a, me); });
        if (rank == 1) {
          autograd::DistributedOptimizer opt(agent, autograd::OptimizerSpec{"sgd", 0.1},
                                             {agent.rpc_sync<RRef<at::Tensor>>(0, "param")});
          {
            dist_autograd::Context ctx(agent);
            at::Tensor y = hop(me, input(), {0});
            std::ofstream(dir.file("pid.tmp")) << ::getpid();
            std::rename(dir.file("pid.tmp").c_str(), dir.file("pid").c_str());
            expect(wait_for_file(dir.file("watched"), 20s), "worker0 is connected to this worker");
            ::raise(SIGSTOP);  // worker0 sends SIGCONT once it reaped the context
            const std::string name = "context " + autograd::detail::id_name(ctx.id());
            std::string call;
            expect(wait_until(
                       [&] {  // the connection may first have to come back
                         try {
                           hop(me, input(), {0});
                         } catch (const RemoteError& e) {
                           call = e.type() + ": " + e.what();
                         } catch (const TransportError&) {}
                         return !call.empty();
                       },
                       20s),
                   "a call of the reaped context fails");
            expect(contains(call, "distrl::autograd::BackwardError") && contains(call, name) &&
                       contains(call, "reaped on worker0"),
                   "a call of the reaped context fails naming it and the reaping: " + call);
            const std::string back =
                error_of<dist_autograd::BackwardError>([&] { dist_autograd::backward(ctx, {(y * y).sum()}); });
            expect(contains(back, name) && contains(back, "reaped on worker0"),
                   "its backward fails naming the reaping: " + back);
            const std::string step = error_of<distrl::Error>([&] { opt.step(ctx); });
            expect(contains(step, name) && contains(step, "reaped on worker0"),
                   "its step fails naming the reaping: " + step);
          }
          // Both sides see the connection back before they shut down together (a side that still
          // counts the other as dead would leave at once, taking the store with it).
          expect(wait_until([&] { return !agent.connection_lost(0); }, 20s), "worker0 reachable again");
          touch(dir.file("done"));
        }
        if (rank == 0) {
          expect(wait_for_file(dir.file("pid"), 20s), "worker1 stopped");
          pid_t peer = 0;
          std::ifstream(dir.file("pid")) >> peer;
          // A call through the I/O loop's connection to worker1 (the one whose heartbeats tell that
          // it stopped) completes its handshake before worker1 stops (a connection still
          // handshaking with a stopped peer is noticed only at the handshake timeout, 10 s).
          agent.rpc_async<std::uint64_t>(1, "live").value();
          touch(dir.file("watched"));
          expect(wait_until([&] { return dist_autograd::live_contexts(agent) == 0; }, 30s),
                 "worker1's context is reaped");
          ::kill(peer, SIGCONT);
          expect(wait_for_file(dir.file("done"), 40s), "worker1 is done");
          expect(wait_until([&] { return !agent.connection_lost(1); }, 20s), "worker1 reachable again");
        }
        agent.shutdown();
        return 0;
      },
      90s);
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

// Worker1's part of the backward takes longer than rank 0's rpc_timeout: backward fails with
// BackwardError naming the context and the deadline, and the context still goes everywhere.
TEST(DistAutogradFaultTest, ABackwardPastItsDeadlineFailsNamingTheContext) {
  World world;
  world.configure = [](int rank, RpcOptions& o, autograd::AutogradOptions&) {
    if (rank == 0) o.rpc_timeout = 2s;
  };
  world.extra_setup = [](RpcAgent& a, Worker&) {
    a.register_function("slow_in_backward", [](at::Tensor x) {
      struct Slow : torch::autograd::Function<Slow> {
        static at::Tensor forward(torch::autograd::AutogradContext*, at::Tensor v) { return v * 2; }
        static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                       torch::autograd::variable_list g) {
          std::this_thread::sleep_for(5s);
          return {g[0] * 2};
        }
      };
      return Slow::apply(x);
    });
  };
  run_on_rank0(world, [](RpcAgent& agent, Worker&) {
    std::string error, name;
    {
      dist_autograd::Context ctx(agent);
      name = "context " + autograd::detail::id_name(ctx.id());
      at::Tensor y = agent.rpc_sync<at::Tensor>(1, "slow_in_backward", input().requires_grad_(true));
      error = error_of<dist_autograd::BackwardError>([&] { dist_autograd::backward(ctx, {y.sum()}); });
    }
    expect(contains(error, name) &&
               (contains(error, "rpc_timeout (2000 ms)") || contains(error, "timed out after 2000 ms")),
           "backward fails naming the context and its deadline: " + error);
    expect_no_live_contexts(agent, {0, 1});
  });
}

// Rank 2 SIGKILLs itself inside its backward: ranks 0 and 1 fail their parts at once, naming
// the dead worker; their contexts are gone afterwards.
TEST(DistAutogradFaultTest, APeerKilledMidBackwardFailsEverySurvivorNamingIt) {
  run_with_a_dead_rank(
      2,  // rank 2 dies in its backward
      [](RpcAgent& agent, Worker&, int rank, const TempDir&) {
        if (rank != 0) return;
        std::string error;
        {
          dist_autograd::Context ctx(agent);
          at::Tensor y = agent.rpc_sync<at::Tensor>(1, "via_dying", input().requires_grad_(true));
          error = error_of<dist_autograd::BackwardError>([&] { dist_autograd::backward(ctx, {y.sum()}); });
        }
        expect(contains(error, "worker2"), "the error names the dead worker: " + error);
        expect(contains(error, "context 0:1:"), "the error names the context: " + error);
        expect(agent.rpc_sync<std::uint64_t>(1, "failed_parts") >= 1, "worker1's part failed too");
        expect_no_live_contexts(agent, {0, 1});
      },
      [](RpcAgent& a) {
        a.register_function("via_dying",
                            [&a](at::Tensor x) { return a.rpc_sync<at::Tensor>(2, "die_in_backward", x); });
      });
}

// A DistributedOptimizer over weights on workers 1 and 2; worker2 dies after the backward:
// step fails naming worker2 as the owner whose step failed, after worker1 stepped (its weight
// equals one local SGD step).
TEST(DistAutogradFaultTest, AStepWhoseOwnerIsDeadFailsNamingItAfterTheOthersStepped) {
  run_with_a_dead_rank(2, [](RpcAgent& agent, Worker& me, int rank, const TempDir&) {
    if (rank != 0) return;
    autograd::DistributedOptimizer opt(
        agent, autograd::OptimizerSpec{"sgd", 0.1},
        {agent.rpc_sync<RRef<at::Tensor>>(1, "param"), agent.rpc_sync<RRef<at::Tensor>>(2, "param")});
    std::string error;
    {
      dist_autograd::Context ctx(agent);
      at::Tensor loss = hop(me, input(), {1}).sum() + hop(me, input(), {2}).sum();
      dist_autograd::backward(ctx, {loss});
      auto none = autograd::detail::engine_of(agent)->make_current(-1);
      kill_rank(agent, 2);
      error = error_of<distrl::Error>([&] { opt.step(ctx); });
    }
    expect(contains(error, "DistributedOptimizer::step") && contains(error, "failed on worker2"),
           "the step fails naming the dead owner: " + error);
    at::Tensor w0 = weight_of(0).requires_grad_(true), w1 = weight_of(1).requires_grad_(true);
    (local_hop(local_hop(input(), w0), w1).sum() + local_hop(local_hop(input(), w0), weight_of(2)).sum()).backward();
    const double e = rel_err(agent.rpc_sync<at::Tensor>(1, "weight"), (w1 - 0.1 * w1.grad()).detach());
    expect(e < kFloat64GraphTolerance, "worker1 stepped (rel err " + std::to_string(e) + ")");
  });
}

// Gradient messages that do not fit what was sent are refused with ProtocolError (as a
// RemoteError naming it) and the worker keeps serving.
TEST(DistAutogradFaultTest, MalformedGradientMessagesAreRefusedAndTheWorkerKeepsServing) {
  TempDir dir;
  auto codes = run_ranks(2, [&](int rank) {
    Worker me;
    std::int64_t msg = -1;
    RpcAgent agent(rpc_options(dir, rank, 2), [&](RpcAgent& a) {
      setup(a, me);
      // Rank 0 learns the message id of what rank 1 sent from the received tensor's grad_fn.
      a.register_function("remember", [&msg](at::Tensor t) {
        auto* recv = dynamic_cast<autograd::detail::RecvBackward*>(t.grad_fn().get());
        expect(recv != nullptr && recv->src == 1, "a received tensor leads back to its sender");
        msg = recv->msg;
      });
      a.register_function("forge", [&a, &msg](std::int64_t ctx) {
        auto refused = [&](std::int64_t c, std::int64_t m, std::vector<std::uint32_t> frames, std::vector<at::Tensor> g,
                           const std::string& needle) {
          try {
            a.rpc_sync<void>(1, autograd::detail::kGradsFn, c, m, frames, g);
          } catch (const RemoteError& e) {
            const std::string what = e.what();
            expect(contains(what, "ProtocolError") && contains(what, needle),
                   "refused with ProtocolError naming '" + needle + "': " + what);
            expect(a.rpc_sync<std::uint64_t>(1, "live") == 1, "and worker1 keeps serving");
            return;
          }
          throw std::runtime_error("forged gradients were accepted: " + needle);
        };
        const at::Tensor good = torch::ones({2, 4}, torch::kFloat64);
        refused(ctx + (std::int64_t{1} << 48), msg, {1}, {good}, "unknown distributed-autograd context");
        refused(ctx, msg + 777, {1}, {good}, "unknown autograd message");
        refused(ctx, msg, {1}, {torch::ones({4, 2}, torch::kFloat64)},
                "is Double[4, 2], the tensor sent was Double[2, 4]");
        refused(ctx, msg, {1}, {torch::ones({2, 4}, torch::kFloat32)}, "is Float[2, 4]");
        refused(ctx, msg, {2}, {good}, "sent no tensor that requires grad in frame 2");
        refused(ctx, msg, {1, 1}, {good}, "2 frame numbers but 1 gradients");
      });
    });
    if (rank == 1) {
      dist_autograd::Context ctx(agent);
      agent.rpc_sync<void>(0, "remember", torch::tanh(input().matmul(*me.w)));
      agent.rpc_sync<void>(0, "forge", ctx.id());
    }
    agent.shutdown();
    return 0;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

// A peer cannot make a worker hold more than max_live_contexts contexts, nor record more than
// max_messages_per_context messages that require grad in one, received or sent: one more is
// refused with ProtocolError naming the option; once contexts are left, new ones are served.
TEST(DistAutogradFaultTest, APeerCannotMakeAWorkerHoldMoreContextsOrMessagesThanTheLimits) {
  World world;
  world.configure = [](int rank, RpcOptions&, autograd::AutogradOptions& ao) {
    ao.max_live_contexts = rank == 1 ? 3 : 1000;
    ao.max_messages_per_context = rank == 1 ? 4 : 1000;
  };
  run_on_rank0(world, [](RpcAgent& agent, Worker&) {
    at::Tensor x = input().requires_grad_(true);
    auto call = [&](const at::Tensor& in) { return agent.rpc_sync<at::Tensor>(1, "hop", in, std::vector<int>{}); };
    {
      dist_autograd::Context c1(agent);
      call(x);
      dist_autograd::Context c2(agent);
      call(x);
      dist_autograd::Context c3(agent);
      call(x);
      expect(agent.rpc_sync<std::uint64_t>(1, "live") == 3, "worker1 holds the three contexts");
      dist_autograd::Context c4(agent);
      const std::string refused = error_of<RemoteError>([&] { call(x); });
      expect(contains(refused, "max_live_contexts") && contains(refused, "ProtocolError"),
             "the fourth context is refused naming the limit: " + refused);
    }
    expect(wait_until([&] { return agent.rpc_sync<std::uint64_t>(1, "live") == 0; }, 10s),
           "the contexts left are released on worker1");
    {
      dist_autograd::Context again(agent);
      expect(call(x).requires_grad(), "a new context is served again");  // 1 received + 1 sent
      call(x);                                                           // 4 recorded on worker1
      const std::string too_many = error_of<distrl::ProtocolError>([&] { call(x); });
      expect(contains(too_many, "max_messages_per_context") && contains(too_many, "take one more from rank 0"),
             "a third request requiring grad is refused naming the limit: " + too_many);
    }
    {
      // Requests that do not require grad, replies that do (the model on a server): the
      // replies are recorded on worker1 and are capped the same way.
      dist_autograd::Context sends(agent);
      for (int i = 0; i < 4; ++i) expect(call(input()).requires_grad(), "a reply that requires grad");
      const std::string too_many = error_of<RemoteError>([&] { call(input()); });
      expect(contains(too_many, "max_messages_per_context") && contains(too_many, "send one more to rank 0"),
             "a fifth reply requiring grad is refused naming the limit: " + too_many);
      expect(wait_until([&] { return agent.rpc_sync<std::uint64_t>(1, "live") == 1; }, 10s),
             "and worker1 keeps serving (the context before released asynchronously)");
    }
  });
}
