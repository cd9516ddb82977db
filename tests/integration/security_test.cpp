// security: curve (transport/bootstrap/security.h): key files, a CURVE world that works as a plain one,
// and strangers — a plain ZeroMQ client, and a CURVE client with a key of its own — refused at
// the handshake by the RPC server and the store, counted, and never answered.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <torch/torch.h>

#include <zmq.hpp>

#include <fstream>

#include "common/error.h"
#include "tests/support/multiproc.h"
#include "tests/support/rpc_world.h"
#include "transport/collectives/process_group.h"
#include "transport/rpc/rpc_agent.h"
#include "transport/bootstrap/security.h"
#include "transport/bootstrap/store.h"
#include "transport/wire/tensor.h"

using namespace distrl;
using namespace distrl::testing;
using namespace distrl::transport;

namespace {

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// A stranger: connects to endpoint (plain, or CURVE with a key of its own that knows the
// server's public key), sends a request-shaped message and waits. True if anything came back.
bool stranger_gets_an_answer(const std::string& endpoint, const std::string& server_public, bool with_own_key) {
  zmq::context_t ctx(1);
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  if (with_own_key) {
    const WorldKey mine = generate_world_key();
    s.set(zmq::sockopt::curve_serverkey, server_public);
    s.set(zmq::sockopt::curve_publickey, mine.public_z85);
    s.set(zmq::sockopt::curve_secretkey, mine.secret_z85);
  }
  s.connect(endpoint);
  const std::string hello(64, 'x');
  (void)s.send(zmq::buffer(hello), zmq::send_flags::dontwait);
  zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
  zmq::poll(&item, 1, std::chrono::milliseconds(700));
  return (item.revents & ZMQ_POLLIN) != 0;
}

}  // namespace

TEST(SecurityTest, KeyFilesAreSecretAndChecked) {
  TempDir dir;
  const std::string path = dir.file("world.key");
  const WorldKey k = generate_world_key();
  write_world_key(path, k);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const WorldKey back = read_world_key(path);
  EXPECT_EQ(back.public_z85, k.public_z85);
  EXPECT_EQ(back.secret_z85, k.secret_z85);

  EXPECT_NE(error_of([&] { read_world_key(dir.file("missing.key")); }).find("distrl-keygen"), std::string::npos);
  ::chmod(path.c_str(), 0644);
  EXPECT_NE(error_of([&] { read_world_key(path); }).find("chmod 600"), std::string::npos);
  ::chmod(path.c_str(), 0600);
  const WorldKey other = generate_world_key();
  write_world_key(path, WorldKey{other.public_z85, k.secret_z85});  // halves of two keys
  EXPECT_NE(error_of([&] { read_world_key(path); }).find("does not belong"), std::string::npos);
  { std::ofstream(path) << "public = short\n"; }
  ::chmod(path.c_str(), 0600);
  EXPECT_NE(error_of([&] { read_world_key(path); }).find("40 Z85 characters"), std::string::npos);
  EXPECT_NE(error_of([&] { use_security("tls", ""); }).find("known: off, curve"), std::string::npos);
  ::unsetenv("DISTRL_CURVE_KEY");
  EXPECT_NE(error_of([&] { use_security("curve", ""); }).find("distrl-keygen"), std::string::npos);
}

TEST(SecurityTest, ACurveWorldWorksAndRefusesStrangersAtTheHandshake) {
  TempDir dir;
  const WorldKey key = generate_world_key();  // no ZeroMQ context yet: the ranks fork clean
  auto codes = run_ranks(2, [&](int rank) {
    use_curve(key);
    auto o = rpc_options(dir, rank, 2);
    o.transport = "zmq";  // CURVE is ZeroMQ's (on one host, auto takes shared memory: docs/security.md)
    RpcAgent agent(o, [](RpcAgent& a) {
      a.register_function("add", [](int x, int y) { return x + y; });
      a.register_function("scale", [](at::Tensor t, double f) { return t * f; });
      a.register_function("refused", [] { return security_stats().handshakes_refused; });
    });
    expect(curve_enabled(), "curve is on");
    // The process group's sockets are CURVE too.
    auto pg = make_zmq_process_group(agent.store(), agent.rank(), agent.world_size(), ProcessGroupOptions{});
    auto t = torch::full({1000}, float(rank + 1));
    pg->all_reduce(t);
    expect(torch::all(t == 3.0f).item<bool>(), "all_reduce under CURVE");
    const int peer = 1 - rank;
    expect(agent.rpc_sync<int>(peer, "add", 2, 3) == 5, "a call under CURVE");
    const at::Tensor big = torch::rand({256, 1024});
    expect(torch::allclose(agent.rpc_sync<at::Tensor>(peer, "scale", big, 2.0), big * 2), "1 MiB tensor under CURVE");
    pg->barrier();
    if (rank == 0) {  // strangers at rank 1's RPC server
      const std::string ep = agent.worker(1).endpoint;
      expect(!stranger_gets_an_answer(ep, key.public_z85, false), "a plain client got an answer");
      expect(!stranger_gets_an_answer(ep, key.public_z85, true), "a client with its own key got an answer");
      expect(wait_until([&] { return agent.rpc_sync<std::uint64_t>(1, "refused") >= 2; }, std::chrono::seconds(10)),
             "rank 1 counted both strangers");
    } else {  // a stranger at the store (rank 0 hosts it)
      expect(!stranger_gets_an_answer(agent.store().endpoint(), key.public_z85, false),
             "the store answered a stranger");
      expect(!stranger_gets_an_answer(agent.store().endpoint(), key.public_z85, true),
             "the store answered a wrong key");
      expect(wait_until([&] { return agent.rpc_sync<std::uint64_t>(0, "refused") >= 2; }, std::chrono::seconds(10)),
             "rank 0 counted the store's strangers");
    }
    pg->barrier();
    expect(agent.rpc_sync<int>(peer, "add", 4, 5) == 9, "members still served after the strangers");
    agent.shutdown();
    return 0;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

TEST(SecurityTest, AMemberWithoutTheKeyCannotJoin) {
  TempDir dir;
  const WorldKey key = generate_world_key();
  auto codes = run_ranks(2, [&](int rank) {
    if (rank == 0) {
      use_curve(key);
    }  // rank 1 runs plain: it cannot even reach the store
    try {
      auto o = rpc_options(dir, rank, 2);
      o.rendezvous_timeout = std::chrono::seconds(3);
      RpcAgent agent(o);
      agent.shutdown();
    } catch (const std::exception& e) {
      if (rank == 1 && std::string(e.what()).find("refused this process's handshake") != std::string::npos) return 3;
      std::cerr << "rank " << rank << ": " << e.what() << "\n";
      return 4;
    }
    return 0;
  });
  EXPECT_EQ(codes[1], 3);  // the plain rank was told why the store does not answer
  EXPECT_NE(codes[0], 0);  // and the keyed rank 0 waited for it in vain
}
