#include "transport/rpc/rpc_agent.h"

#include "transport/rpc/detail/rpc_core.h"

namespace distrl::transport {

RpcAgent::RpcAgent(RpcOptions options, const std::function<void(RpcAgent&)>& setup)
    : core_(std::make_shared<detail::RpcCore>(std::move(options))), engine_(core_) {
  core_->start([&] {
    if (setup) setup(*this);
  });
}

RpcAgent::~RpcAgent() {
  try {
    core_->shutdown(false);
  } catch (const std::exception&) {
    // Not graceful by definition; nothing to report.
  }
}

const std::string& RpcAgent::name() const { return core_->options().name; }
const RpcOptions& RpcAgent::options() const { return core_->options(); }
int RpcAgent::rank() const { return core_->rank(); }
int RpcAgent::world_size() const { return core_->world_size(); }
std::int64_t RpcAgent::incarnation() const { return core_->incarnation(); }
const std::vector<WorkerInfo>& RpcAgent::workers() const { return core_->workers(); }
Store& RpcAgent::store() { return core_->store(); }
const WorkerInfo& RpcAgent::worker(const Target& t) const { return core_->workers().at(core_->resolve(t)); }
RpcStats RpcAgent::stats() const { return core_->stats(); }
bool RpcAgent::connection_lost(const Target& t) const { return core_->connection_lost(core_->resolve(t)); }
std::uint64_t RpcAgent::connection_drops(const Target& t) const { return core_->connection_drops(core_->resolve(t)); }
void RpcAgent::serve_until_shutdown(const Target& who) { core_->serve_until_shutdown(core_->resolve(who)); }
bool RpcAgent::has_shut_down(const Target& who) { return core_->has_shut_down(core_->resolve(who)); }
void RpcAgent::watch(const Target& t) { core_->watch(core_->resolve(t)); }
void RpcAgent::shutdown() { core_->shutdown(true); }
void RpcAgent::set_hooks(std::shared_ptr<MessageHooks> hooks) { core_->set_hooks(std::move(hooks)); }
MessageHooks* RpcAgent::hooks() const { return core_->hooks(); }
void RpcAgent::after_requests_read(std::function<void()> fn) { core_->after_requests_read(std::move(fn)); }

}  // namespace distrl::transport
