#include "transport/link/world_links.h"

#include "common/host.h"
#include "common/log.h"
#include "transport/link/pair_link.h"
#include "transport/zmq/zmq_context.h"

namespace distrl::transport::detail {
namespace {

// The ranks whose endpoint is (or is not) shm://, as runs ("0-1, 3").
std::string ranks_over(const std::vector<std::string>& endpoints, bool shm) {
  std::vector<int> ranks;
  for (int r = 0; r < static_cast<int>(endpoints.size()); ++r)
    if ((PairLink::via_of(endpoints[r]) == PairLink::kLocal) == shm) ranks.push_back(r);
  return rank_ranges(ranks);
}

}  // namespace

WorldLinks::WorldLinks(LinkSettings settings, const Link::Events& events) : settings_(std::move(settings)) {
  const Transport transport = settings_.transport;
  std::vector<std::string> bound;
  if (transport != Transport::Shm) {
    auto loop = std::make_unique<IoLoop>(shared_zmq_context(), settings_.zmq, events);
    zmq_loop_ = loop.get();
    zmq_ = std::move(loop);
    // tcp and/or ipc on the one ROUTER; peers pick ipc when they share our host.
    bound = zmq_->bind(
        endpoints_to_bind(zmq_transport(transport), settings_.bind_ip, std::to_string(settings_.rank), &ipc_path_));
  }
  me_ = transport == Transport::Shm ? Address{settings_.name, host_id(), host_name(), "", "", ""}
                                    : make_address(settings_.name, zmq_transport(transport), bound);
  if (transport == Transport::Shm || transport == Transport::Auto) {
    settings_.shm.rank = settings_.rank;
    shm_ = std::make_unique<ShmLink>(settings_.shm, events);
    try {
      me_.shm = shm_->bind({shm_endpoint_to_bind(std::to_string(settings_.rank))}).front();
    } catch (const TransportError& e) {
      if (transport == Transport::Shm) throw;
      // auto: this process offers no shared memory, so its peers reach it over ZeroMQ.
      DISTRL_LOG(Warn, settings_.what << ": " << settings_.name << " cannot use shared memory (" << e.what()
                                      << "); using ZeroMQ");
      shm_.reset();
    }
  }
  transport_ = transport == Transport::Auto && !shm_ ? Transport::Zmq : transport;
}

void WorldLinks::set_member_key(const std::string& key, std::uint64_t nonce) {
  if (zmq_loop_) zmq_loop_->set_member_identity(IoLoop::member_identity(settings_.rank, key, nonce), key);
}

std::vector<std::string> WorldLinks::endpoints(const std::vector<Address>& peers) const {
  const int rank = settings_.rank;
  bool any_local = peers.size() == 1;
  for (int r = 0; r < static_cast<int>(peers.size()); ++r) any_local |= r != rank && shm_reachable(me_, peers[r]);
  std::vector<std::string> endpoints;
  for (int r = 0; r < static_cast<int>(peers.size()); ++r) {
    const bool self_over_zmq = r == rank && transport_ == Transport::Auto && !any_local;
    try {
      endpoints.push_back(endpoint_for(me_, peers[r], self_over_zmq ? Transport::Zmq : transport_));
    } catch (const ConfigError& e) {
      throw ConfigError(settings_.what + ": worker " + e.what());
    }
  }
  return endpoints;
}

std::unique_ptr<Link> WorldLinks::take(const std::vector<std::string>& endpoints, Link::Events events) {
  const std::string local = ranks_over(endpoints, true), remote = ranks_over(endpoints, false);
  const std::string rank = "rank " + std::to_string(settings_.rank);
  std::string line =
      settings_.what + ": " + (settings_.name == rank ? rank : settings_.name + " (" + rank + ")") + " reaches ";
  if (local.empty() || remote.empty())
    line += std::string("every rank over ") + (remote.empty() ? "shared memory" : "ZeroMQ");
  else line += "ranks " + local + " over shared memory, ranks " + remote + " over ZeroMQ";
  if (!local.empty() && !remote.empty()) DISTRL_LOG(Info, line);
  else DISTRL_LOG(Debug, line);
  if (transport_ == Transport::Auto)
    return std::make_unique<PairLink>(std::move(shm_), std::move(zmq_), std::move(events));
  return transport_ == Transport::Shm ? std::move(shm_) : std::move(zmq_);
}

}  // namespace distrl::transport::detail
