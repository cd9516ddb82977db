// The RPC engine. Threads: the I/O loop (sockets, pending-call table, deadlines, RRef control
// messages) and the handler pool (user functions, packing replies). Pending calls are touched
// only on the I/O thread; the registry and the object table have their own locks.
#include "transport/rpc/detail/rpc_core.h"

#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include "transport/rpc/detail/rpc_state.h"
#include "transport/detail/endpoints.h"
#include "transport/detail/wire_codec.h"
#include "transport/detail/zmq_context.h"

#include <zmq_addon.hpp>

namespace distrl::transport::detail {

RpcCore::RpcCore(RpcOptions options) : s_(std::make_unique<State>()) { s_->opts = std::move(options); }

RpcCore::~RpcCore() { shutdown(false); }

bool RpcCore::running() const { return s_->running.load(); }
const RpcOptions& RpcCore::options() const { return s_->opts; }
int RpcCore::rank() const { return s_->rank; }
int RpcCore::world_size() const { return s_->world; }
std::int64_t RpcCore::incarnation() const { return s_->incarnation; }
const std::vector<WorkerInfo>& RpcCore::workers() const { return s_->workers; }
Store& RpcCore::store() {
  if (!s_->rdv) throw TransportError("rpc: the agent is shut down; its store is gone");
  return s_->rdv->store();
}
Executor* RpcCore::callback_executor() { return s_->pool.get(); }

RpcStats RpcCore::stats() const {
  RpcStats st;
  st.calls_sent = s_->calls_sent.load();
  st.calls_served = s_->calls_served.load();
  st.bad_messages = s_->bad.load();
  st.dropped_messages = s_->dropped.load();
  st.timeouts = s_->timeouts.load();
  st.bytes_sent = s_->sync_bytes_sent.load() + (s_->io ? s_->io->bytes_sent() : 0);
  st.bytes_received = s_->sync_bytes_received.load() + (s_->io ? s_->io->bytes_received() : 0);
  std::lock_guard<std::mutex> lock(s_->obj_mu);
  st.live_objects = s_->objects.size();
  st.releases_refused = s_->releases_refused;
  return st;
}

std::uint64_t RpcCore::connection_drops(int rank) const {
  return rank >= 0 && rank < s_->world && s_->peer_drops ? s_->peer_drops[rank].load() : 0;
}

bool RpcCore::connection_lost(int rank) const {
  std::lock_guard<std::mutex> lock(s_->down_mu);
  return s_->down_peers.count(rank) > 0;
}

void RpcCore::watch(int rank) {
  IoLoop* io = s_->io.get();
  if (!io) throw Error("rpc: watch() needs a started agent");
  io->post([io, rank] { io->watch_peer(rank); });
}

void RpcCore::serve_until_shutdown(int rank) {
  if (rank == s_->rank) throw Error("rpc: serve_until_shutdown: " + s_->opts.name + " would wait for itself");
  watch(rank);
  const std::string key = "rpc/shutdown/arrived/" + std::to_string(rank);
  while (!store().check({key})) {
    if (connection_lost(rank))
      throw TransportError("rpc: " + s_->worker_name(rank) + " (rank " + std::to_string(rank) + ") is gone; " +
                           s_->opts.name + " was serving until it finished");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

int RpcCore::resolve(const Target& to) const {
  if (to.name.empty()) {
    if (to.rank < 0 || to.rank >= s_->world)
      throw Error("rpc: no worker with rank " + std::to_string(to.rank) + " (world size " + std::to_string(s_->world) + ")");
    return to.rank;
  }
  auto it = s_->by_name.find(to.name);
  if (it == s_->by_name.end()) {
    std::string names;
    for (auto& w : s_->workers) names += (names.empty() ? "" : ", ") + w.name;
    throw Error("rpc: no worker named '" + to.name + "' (workers: " + names + ")");
  }
  return it->second;
}

std::chrono::milliseconds RpcCore::timeout_for(const Target& to) const {
  return to.timeout.count() > 0 ? to.timeout : s_->opts.rpc_timeout;
}

void RpcCore::add_callable(const std::string& name, Callable c) {
  std::unique_lock<std::shared_mutex> lock(s_->reg_mu);
  s_->functions[name] = std::make_shared<const Callable>(std::move(c));
}

void RpcCore::add_class(const std::string& name, ClassInfo info) {
  std::unique_lock<std::shared_mutex> lock(s_->reg_mu);
  auto type = info.type;
  s_->classes[type] = std::make_shared<const ClassInfo>(std::move(info));
}

void RpcCore::set_hooks(std::shared_ptr<MessageHooks> hooks) {
  if (s_->running.load() && s_->hooks != hooks)
    throw Error("rpc: set_hooks must be called in the agent's setup callback, before any peer can send");
  s_->hooks = std::move(hooks);
}

MessageHooks* RpcCore::hooks() const { return s_->hooks.get(); }

void RpcCore::after_requests_read(std::function<void()> fn) {
  if (s_->running.load())
    throw Error("rpc: after_requests_read must be called in the agent's setup callback, before any peer can send");
  s_->after_requests_read = std::move(fn);
}

void attach_hooks(RpcCore::State& s, InMessage& m) {
  if (!s.hooks || m.header.ctx < 0 || m.header.rg.empty()) return;
  m.frames->hooks = s.hooks;
  m.frames->tag = MessageTag{m.header.ctx, m.header.am, m.header.rg};
  m.frames->src = m.header.src;
}

std::uint64_t RpcCore::new_object_id() {
  // Random 64 bits from the kernel: unique in practice (a repeat among 10^6 live ids is a
  // 1-in-10^7 event) and unguessable, so that nobody who has not been handed an RRef can call
  // or release its object (sequential ids let a peer release others' objects: issue 14, case 4).
  std::uint64_t id = 0;
  while (id == 0) {
    if (::getrandom(&id, sizeof(id), 0) != static_cast<ssize_t>(sizeof(id))) {
      if (errno == EINTR) continue;
      throw Error(std::string("rpc: getrandom failed: ") + std::strerror(errno));
    }
  }
  return id;
}

// ------------------------------------------------------------------ outgoing calls

namespace {
// "rpc to worker1 (rank 1) 'fn'": how every call failure names the call.
std::string describe_call(const RpcCore::State& s, int dest, const std::string& fn) {
  return "rpc to " + s.worker_name(dest) + " (rank " + std::to_string(dest) + ") '" + fn + "'";
}
std::exception_ptr call_failed(const RpcCore::State& s, int dest, const std::string& fn, const std::string& why) {
  return std::make_exception_ptr(TransportError(describe_call(s, dest, fn) + " failed: " + why));
}
std::exception_ptr agent_shut_down(const RpcCore::State& s, const std::string& fn) {
  if (!s.stopped.load())
    return std::make_exception_ptr(TransportError("rpc: agent " + s.opts.name + " is not started yet; cannot call '" + fn +
                                                  "' (the setup callback runs before the peers are known: call out "
                                                  "after the RpcAgent is constructed)"));
  return std::make_exception_ptr(TransportError("rpc: agent " + s.opts.name + " is shut down; cannot call '" + fn + "'"));
}

// A request's header stamped (kind, source, a fresh call id, the hooks' context) and packed.
// Throws what packing the body throws.
OutMessage request_message(RpcCore& core, RpcCore::State& s, int dest, Header& h, const BodyWriter& body) {
  h.kind = Kind::Request;
  h.src = s.rank;
  h.call_id = s.next_call_id.fetch_add(1);
  MessageHooks* hooks = s.hooks.get();
  if (hooks && h.ctx < 0) h.ctx = hooks->current_context();
  return build_message(h, &core, dest, body, hooks);
}

// A call is in flight (shutdown waits for it) from start_inflight until finish_inflight.
void start_inflight(RpcCore::State& s) {
  {
    std::lock_guard<std::mutex> lock(s.inflight_mu);
    ++s.inflight;
  }
  s.calls_sent.fetch_add(1, std::memory_order_relaxed);
}
void finish_inflight(RpcCore::State& s) {
  std::lock_guard<std::mutex> lock(s.inflight_mu);
  if (--s.inflight == 0) s.inflight_cv.notify_all();
}

std::exception_ptr malformed_reply(const RpcCore::State& s, int peer, const std::string& what) {
  return std::make_exception_ptr(ProtocolError("rpc: malformed reply from " + s.worker_name(peer) + ": " + what));
}
}  // namespace

void RpcCore::call(int dest, Header h, const BodyWriter& body, Completion done, std::chrono::milliseconds timeout) {
  if (!s_->running.load()) {
    done(nullptr, agent_shut_down(*s_, h.fn));
    return;
  }
  std::shared_ptr<OutMessage> msg;
  try {
    msg = std::make_shared<OutMessage>(request_message(*this, *s_, dest, h, body));
  } catch (...) {
    done(nullptr, std::current_exception());
    return;
  }
  start_inflight(*s_);
  State* s = s_.get();
  auto shared_done = std::make_shared<Completion>(std::move(done));
  const bool queued = s->io->post([s, dest, id = h.call_id, fn = h.fn, msg, shared_done, timeout]() mutable {
    auto frames = encode_message(std::move(*msg));
    std::string err;
    if (!s->io->send_to_peer(dest, frames, &err)) {
      (*shared_done)(nullptr, call_failed(*s, dest, fn, err));
      finish_inflight(*s);
      return;
    }
    DISTRL_LOG(Debug, "rpc: call #" << id << " '" << fn << "' sent to " << s->worker_name(dest));
    auto deadline = Clock::now() + timeout;
    s->deadlines.emplace(deadline, id);
    s->pending.emplace(id, State::Pending{dest, std::move(fn), std::move(*shared_done), deadline, timeout});
  });
  if (!queued) {  // raced with shutdown
    (*shared_done)(nullptr, agent_shut_down(*s, h.fn));
    finish_inflight(*s);
  }
}

namespace {

// I/O thread: completes one pending call with a message or an error.
void complete(RpcCore::State& s, std::uint64_t id, InMessage* m, std::exception_ptr err) {
  auto it = s.pending.find(id);
  if (it == s.pending.end()) return;  // timed out earlier, or a stray reply
  auto p = std::move(it->second);
  s.pending.erase(it);
  auto range = s.deadlines.equal_range(p.deadline);
  for (auto d = range.first; d != range.second; ++d)
    if (d->second == id) {
      s.deadlines.erase(d);
      break;
    }
  try {
    p.done(m, err);
  } catch (const std::exception& e) {
    DISTRL_LOG(Error, "rpc: completion of '" << p.fn << "' threw " << e.what());
  }
  finish_inflight(s);
}

std::exception_ptr error_from_reply(RpcCore::State& s, const InMessage& m, const std::string& fn) {
  std::string origin, type, message;
  try {
    std::tuple<std::string, std::string, std::string> t;
    m.body().convert(t);
    std::tie(origin, type, message) = t;
  } catch (const std::exception&) {
    return std::make_exception_ptr(ProtocolError("rpc: malformed error reply from " + s.worker_name(m.header.src) + " to '" + fn + "'"));
  }
  if (origin == "agent")
    return std::make_exception_ptr(ProtocolError("rpc '" + fn + "' refused by " + s.worker_name(m.header.src) + ": " + message));
  return std::make_exception_ptr(RemoteError(s.worker_name(m.header.src), type, message));
}

}  // namespace

// ------------------------------------------------------------------ the synchronous fast path

namespace {

using ChannelPtr = std::unique_ptr<RpcCore::State::Channel>;

// An idle channel to `dest`, or a new one (then the I/O loop is asked to connect its own
// DEALER to dest too, so that it watches the connection and reports the peer's death).
ChannelPtr acquire_channel(RpcCore::State& s, int dest) {
  {
    std::lock_guard<std::mutex> lock(s.chan_mu);
    if (s.channels_closed) return nullptr;
    auto& idle = s.idle_channels[dest];
    if (!idle.empty()) {
      ChannelPtr c = std::move(idle.back());
      idle.pop_back();
      return c;
    }
  }
  auto c = std::make_unique<RpcCore::State::Channel>(RpcCore::State::Channel{zmq::socket_t(*s.ctx, zmq::socket_type::dealer), 0});
  apply_common_options(c->socket, 0);
  secure_client(c->socket);
  c->socket.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(s.opts.limits.max_message_bytes));
  c->socket.set(zmq::sockopt::routing_id, s.identity_prefix + "c" + std::to_string(++s.channels_made));
  std::string endpoint;
  {
    std::lock_guard<std::mutex> lock(s.chan_mu);  // a rejoin changes both together
    endpoint = s.endpoints[dest];
    c->epoch = s.peer_epoch[dest].load();
  }
  c->socket.connect(endpoint);
  IoLoop* io = s.io.get();
  io->post([io, dest] { io->watch_peer(dest); });
  return c;
}

void release_channel(RpcCore::State& s, int dest, ChannelPtr c) {
  std::lock_guard<std::mutex> lock(s.chan_mu);
  if (!s.channels_closed && c->epoch == s.peer_epoch[dest].load()) s.idle_channels[dest].push_back(std::move(c));
  // else: closed here, under the lock that shutdown (or the peer's rejoin) took to close the idle ones
}

std::string down_reason(RpcCore::State& s, int dest) {
  std::lock_guard<std::mutex> lock(s.down_mu);
  auto it = s.down_peers.find(dest);
  return it == s.down_peers.end() ? std::string() : it->second;
}

}  // namespace

void RpcCore::call_sync(int dest, Header h, const BodyWriter& body, const Completion& done,
                        std::chrono::milliseconds timeout) {
  State& s = *s_;
  if (!s.running.load()) return done(nullptr, agent_shut_down(s, h.fn));
  if (const std::string why = down_reason(s, dest); !why.empty())
    return done(nullptr, call_failed(s, dest, h.fn, why));
  std::vector<zmq::message_t> frames;
  try {
    frames = encode_message(request_message(*this, s, dest, h, body));
  } catch (...) {
    return done(nullptr, std::current_exception());
  }
  start_inflight(s);
  // Exactly one of these ends the call: done runs, the channel goes back, shutdown may go on.
  ChannelPtr chan;
  auto finish = [&](InMessage* m, std::exception_ptr err) {
    if (chan) release_channel(s, dest, std::move(chan));
    try {
      done(m, err);
    } catch (...) {
      finish_inflight(s);
      throw;
    }
    finish_inflight(s);
  };
  try {
    chan = acquire_channel(s, dest);
    if (!chan) return finish(nullptr, agent_shut_down(s, h.fn));
    const std::size_t bytes = frames_bytes(frames);
    if (!zmq::send_multipart(chan->socket, frames, zmq::send_flags::dontwait))
      return finish(nullptr, call_failed(s, dest, h.fn, "send queue full (peer not reading?)"));
    s.sync_bytes_sent.fetch_add(bytes, std::memory_order_relaxed);
    DISTRL_LOG(Debug, "rpc: sync call #" << h.call_id << " '" << h.fn << "' sent to " << s.worker_name(dest));
  } catch (const zmq::error_t& e) {
    return finish(nullptr, call_failed(s, dest, h.fn, e.what()));
  }

  const auto deadline = Clock::now() + timeout;
  const auto spin_until = Clock::now() + future_spin();
  zmq::pollitem_t item{chan->socket.handle(), 0, ZMQ_POLLIN, 0};
  for (;;) {
    // Wait in slices: between them, see what the I/O loop saw (a dead peer) and shutdown.
    const auto now = Clock::now();
    long slice_ms = 0;
    if (now >= spin_until)
      slice_ms = std::clamp<long>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1, 0, 10);
    int ready = 0;
    try {
      ready = poll_nointr(&item, 1, std::chrono::milliseconds(slice_ms));
    } catch (const zmq::error_t& e) {
      return finish(nullptr, call_failed(s, dest, h.fn, e.what()));
    }
    if (ready > 0) {
      std::vector<zmq::message_t> in;
      const Received got = recv_bounded(chan->socket, in, s.opts.limits.max_frames + 1);
      if (got == Received::TooManyParts) {
        count_bad(s, "a reply of more than " + std::to_string(s.opts.limits.max_frames + 1) + " frames", false);
        continue;
      }
      if (got == Received::Nothing) continue;
      s.sync_bytes_received.fetch_add(frames_bytes(in), std::memory_order_relaxed);
      DecodeFailure why;
      auto m = decode_message(std::move(in), s.opts.limits, &why);
      if (!m) {
        s.bad.fetch_add(1);
        if (why.call_id && *why.call_id == h.call_id) return finish(nullptr, malformed_reply(s, dest, why.what));
        continue;
      }
      if (m->header.call_id != h.call_id) continue;  // the late reply of an earlier call that timed out
      attach_hooks(s, *m);
      DISTRL_LOG(Debug, "rpc: sync call #" << h.call_id << " '" << h.fn << "' answered");
      if (m->header.kind == Kind::Response) return finish(&*m, nullptr);
      if (m->header.kind == Kind::Error) return finish(nullptr, error_from_reply(s, *m, h.fn));
      continue;
    }
    if (!s.running.load())
      return finish(nullptr, call_failed(s, dest, h.fn, "agent " + s.opts.name + " shut down"));
    if (const std::string gone = down_reason(s, dest); !gone.empty())
      return finish(nullptr, call_failed(s, dest, h.fn, gone));
    if (s.peer_epoch[dest].load() != chan->epoch)
      return finish(nullptr, call_failed(s, dest, h.fn, "the process restarted (its rank rejoined) before answering"));
    if (Clock::now() >= deadline) {
      s.timeouts.fetch_add(1);
      return finish(nullptr, std::make_exception_ptr(TimeoutError(describe_call(s, dest, h.fn) + " timed out after " +
                                                                  std::to_string(timeout.count()) + " ms")));
    }
  }
}

void on_reply(RpcCore::State& s, int peer, IoLoop::Frames&& frames) {
  DecodeFailure why;
  auto m = decode_message(std::move(frames), s.opts.limits, &why);
  if (!m) {
    s.bad.fetch_add(1);
    if (why.call_id)
      complete(s, *why.call_id, nullptr, malformed_reply(s, peer, why.what));
    return;
  }
  attach_hooks(s, *m);
  auto it = s.pending.find(m->header.call_id);
  if (it == s.pending.end()) return;
  DISTRL_LOG(Debug, "rpc: call #" << m->header.call_id << " '" << it->second.fn << "' answered");
  if (m->header.kind == Kind::Response) complete(s, m->header.call_id, &*m, nullptr);
  else if (m->header.kind == Kind::Error) complete(s, m->header.call_id, nullptr, error_from_reply(s, *m, it->second.fn));
}

void on_peer_down(RpcCore::State& s, int peer, const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(s.down_mu);
    s.down_peers.emplace(peer, why);
  }
  if (peer >= 0 && peer < s.world) s.peer_drops[peer].fetch_add(1);
  if (s.hooks) s.hooks->on_peer_down(peer, why);
  std::vector<std::uint64_t> ids;
  for (auto& [id, p] : s.pending)
    if (p.dest == peer) ids.push_back(id);
  if (!ids.empty())
    DISTRL_LOG(Warn, "rpc: peer " << s.worker_name(peer) << " (rank " << peer << ") is gone: failing " << ids.size() << " pending call(s)");
  for (auto id : ids) {
    const std::string fn = s.pending[id].fn;
    complete(s, id, nullptr, call_failed(s, peer, fn, why));
  }
}

void on_peer_up(RpcCore::State& s, int peer) {
  std::string why;
  {
    std::lock_guard<std::mutex> lock(s.down_mu);
    auto it = s.down_peers.find(peer);
    if (it == s.down_peers.end()) return;
    why = it->second;
    s.down_peers.erase(it);
  }
  DISTRL_LOG(Warn, "rpc: " << s.worker_name(peer) << " (rank " << peer << ") is reachable again (its " << why
                           << "); new calls to it go through");
}

void on_rejoin(RpcCore::State& s, int peer, const InMessage& m) {
  if (peer < 0 || peer >= s.world || peer == s.rank)
    return count_bad(s, "a rejoin notice from rank " + std::to_string(peer) + ", which is not a peer", false);
  std::tuple<std::int64_t, Address> notice;
  std::string endpoint;
  try {
    notice = m.body_as<std::tuple<std::int64_t, Address>>(nullptr, "rejoin notice");
    endpoint = endpoint_for(s.me, std::get<1>(notice), s.opts.transport);
  } catch (const Error& e) {
    return count_bad(s, "from rank " + std::to_string(peer) + ": " + e.what(), false);
  }
  const std::int64_t incarnation = std::get<0>(notice);
  if (incarnation <= s.peer_incarnation[peer]) return;  // an older or repeated notice
  s.peer_incarnation[peer] = incarnation;
  bool was_down;
  {
    std::lock_guard<std::mutex> lock(s.down_mu);
    was_down = s.down_peers.count(peer) > 0;
  }
  // Calls to the earlier process will never be answered: fail them now, as its death would
  // have (this worker may not have noticed the death yet).
  if (!was_down) on_peer_down(s, peer, s.worker_name(peer) + " restarted (incarnation " + std::to_string(incarnation) + ")");
  {
    std::lock_guard<std::mutex> lock(s.chan_mu);
    s.peer_epoch[peer].fetch_add(1);
    s.endpoints[peer] = endpoint;
    if (!s.channels_closed) s.idle_channels[peer].clear();
  }
  s.io->replace_peer(peer, endpoint);
  {
    std::lock_guard<std::mutex> lock(s.down_mu);
    s.down_peers.erase(peer);
  }
  DISTRL_LOG(Info, "rpc: " << s.worker_name(peer) << " (rank " << peer << ") rejoined (incarnation " << incarnation
                           << ") at " << endpoint);
}

void expire(RpcCore::State& s, Clock::time_point now) {
  // Objects named by calls or notices whose creation never came (a forged or stale id, or an
  // object already released): their queued calls fail, their memory goes.
  std::vector<std::pair<std::uint64_t, std::shared_ptr<RpcCore::State::Object>>> unknown;
  if (now >= s.next_unknown_sweep) {
    s.next_unknown_sweep = now + std::chrono::milliseconds(100);
    std::lock_guard<std::mutex> lock(s.obj_mu);
    while (!s.unknown_objects.empty() && s.unknown_objects.front().first + s.opts.unknown_object_wait <= now) {
      const std::uint64_t id = s.unknown_objects.front().second;
      s.unknown_objects.pop_front();
      auto it = s.objects.find(id);
      if (it == s.objects.end() || it->second->constructed_seen) continue;
      unknown.emplace_back(id, std::move(it->second));
      s.objects.erase(it);
    }
  }
  for (auto& [id, o] : unknown)  // callbacks answer the queued calls: outside obj_mu
    o->promise.set_error(std::make_exception_ptr(BadCallError(
        "no object " + std::to_string(id) + " on " + s.opts.name + ": nothing created it within " +
        std::to_string(s.opts.unknown_object_wait.count()) + " ms (never created, or already released)")));
  while (!s.deadlines.empty() && s.deadlines.begin()->first <= now) {
    auto id = s.deadlines.begin()->second;
    auto it = s.pending.find(id);
    if (it == s.pending.end()) {
      s.deadlines.erase(s.deadlines.begin());
      continue;
    }
    s.timeouts.fetch_add(1);
    auto& p = it->second;
    complete(s, id, nullptr,
             std::make_exception_ptr(TimeoutError(describe_call(s, p.dest, p.fn) + " timed out after " +
                                                  std::to_string(p.timeout.count()) + " ms")));
  }
}


// ------------------------------------------------------------------ lifecycle

namespace {

void validate(const RpcOptions& o) {
  auto bad = [](const std::string& what) { throw ConfigError("rpc options: " + what); };
  if (o.num_worker_threads < 1 || o.num_worker_threads > 1024)
    bad("num_worker_threads is " + std::to_string(o.num_worker_threads) + ", allowed 1..1024");
  if (o.transport != "auto" && o.transport != "tcp" && o.transport != "ipc")
    bad("transport is '" + o.transport + "', allowed: auto, tcp, ipc");
  if (o.rpc_timeout.count() <= 0) bad("rpc_timeout must be positive");
  if (o.rendezvous_timeout.count() <= 0) bad("rendezvous_timeout must be positive");
  if (o.shutdown_timeout.count() <= 0) bad("shutdown_timeout must be positive");
  if (o.unknown_object_wait.count() <= 0) bad("unknown_object_wait must be positive");
  if (o.max_unknown_objects < 1) bad("max_unknown_objects must be at least 1");
  if (o.max_parked_bytes < 1) bad("max_parked_bytes must be at least 1");
}

// Tells every peer where this restarted rank listens now (one-way notices; a peer that is
// gone too is skipped).
void announce_rejoin(RpcCore::State& s) {
  DISTRL_LOG(Info, "rpc: " << s.opts.name << " (rank " << s.rank << ") rejoins the group (incarnation " << s.incarnation << ")");
  for (int r = 0; r < s.world; ++r) {
    if (r == s.rank) continue;
    Header h;
    h.kind = Kind::Control;
    h.src = s.rank;
    h.fn = kRejoinFn;
    auto notice = std::make_tuple(s.incarnation, s.me);
    auto m = std::make_shared<OutMessage>(build_message(h, nullptr, r, [&](Packer& pk) { pk.pack(notice); }, nullptr));
    RpcCore::State* sp = &s;
    s.io->post([sp, r, m] {
      auto frames = encode_message(std::move(*m));
      std::string err;
      sp->io->send_to_peer(r, frames, &err);
    });
  }
}

}  // namespace

void RpcCore::start(const std::function<void()>& before_publish) {
  auto& s = *s_;
  validate(s.opts);
  const WorldSpec w = resolve_world(s.opts.init_method, s.opts.rank, s.opts.world_size);
  s.rank = w.rank;
  s.world = w.world_size;
  if (s.opts.name.empty()) s.opts.name = "worker" + std::to_string(s.rank);
  s.rdv = std::make_unique<Rendezvous>(w, s.opts.rendezvous_timeout);
  // A rank that has been here before (its process died) rejoins: same rank and name, a new
  // address, peers told once it runs.
  s.incarnation = s.rdv->store().add("rpc/incarnation/" + std::to_string(s.rank), 1);
  s.ctx = shared_zmq_context();
  {
    char nonce[17];
    std::snprintf(nonce, sizeof(nonce), "%016llx", static_cast<unsigned long long>(new_object_id()));
    s.identity_prefix = "rpc-r" + std::to_string(s.rank) + "-" + nonce + "-";
  }
  s.pool = std::make_unique<ThreadPool>(s.opts.num_worker_threads, "rpc-handlers", s.opts.thread_init);

  IoLoop::Callbacks cb;
  State* sp = &s;
  cb.on_request = [this, sp](zmq::message_t&& id, IoLoop::Frames&& f) { on_request(*this, *sp, std::move(id), std::move(f)); };
  cb.on_reply = [sp](int peer, IoLoop::Frames&& f) { on_reply(*sp, peer, std::move(f)); };
  cb.on_peer_down = [sp](int peer, const std::string& why) { on_peer_down(*sp, peer, why); };
  cb.on_peer_up = [sp](int peer) { on_peer_up(*sp, peer); };
  cb.on_tick = [sp](Clock::time_point now) { expire(*sp, now); };
  cb.on_served = [sp] {  // set by the setup callback, which runs below, before the loop starts
    if (sp->after_requests_read) sp->after_requests_read();
  };
  cb.on_dropped = [sp](const std::string& what) { count_bad(*sp, what, false); };
  cb.next_deadline = [sp] { return sp->deadlines.empty() ? Clock::time_point::max() : sp->deadlines.begin()->first; };
  s.io = std::make_unique<IoLoop>(s.ctx, IoLoop::Options{s.opts.limits.max_message_bytes, s.opts.limits.max_frames + 2, s.opts.io_spin, s.opts.thread_init, s.identity_prefix}, std::move(cb));

  // Bind tcp and/or ipc on the one ROUTER; peers pick ipc when they share our host.
  auto bound = s.io->bind(endpoints_to_bind(s.opts.transport, bind_ip(w, s.opts.bind_host),
                                            std::to_string(s.rank), &s.ipc_path));
  const Address me = make_address(s.opts.name, s.opts.transport, bound);
  if (before_publish) before_publish();  // registrations land before any peer can reach us

  auto& store = s.rdv->store();
  s.me = me;
  const auto peers = exchange_addresses(store, "rpc/worker/", s.rank, s.world, me, s.opts.rendezvous_timeout);
  s.peer_incarnation.assign(s.world, 1);
  if (s.incarnation > 1)
    for (int r = 0; r < s.world; ++r) s.peer_incarnation[r] = std::max<std::int64_t>(1, store.add("rpc/incarnation/" + std::to_string(r), 0));
  std::vector<std::string> endpoints;
  for (int r = 0; r < s.world; ++r) {
    const Address& p = peers[r];
    if (s.by_name.count(p.name))
      throw ConfigError("rpc: two workers are named '" + p.name + "' (ranks " + std::to_string(s.by_name[p.name]) +
                        " and " + std::to_string(r) + "); give each a unique name");
    s.by_name[p.name] = r;
    try {
      endpoints.push_back(endpoint_for(me, p, s.opts.transport));
    } catch (const ConfigError& e) {
      throw ConfigError(std::string("rpc: worker ") + e.what());
    }
    s.workers.push_back(WorkerInfo{p.name, r, p.hostname, endpoints.back()});
  }
  s.io->set_peers(endpoints);
  s.endpoints = endpoints;
  s.idle_channels.resize(s.world);
  s.peer_epoch = std::make_unique<std::atomic<std::uint64_t>[]>(s.world);
  s.peer_drops = std::make_unique<std::atomic<std::uint64_t>[]>(s.world);
  // Running before the loop starts: peers have our address already, so requests may be waiting,
  // and a handler that calls out must never see this agent as not running. (It once did, under
  // load: the main thread was preempted between the two lines, a handler's nested rpc_sync failed
  // "agent is shut down", and the 4-process dist-autograd test failed about once in 60 runs.)
  s.running.store(true);
  s.io->start();
  if (s.incarnation > 1) announce_rejoin(s);
}

namespace {

// Marks this rank as `stage` (arrived, left) in the store and waits until `until` for every
// rank to be marked or dead: a peer whose connection dropped cannot arrive, so every rank publishes the
// peers it saw die (rpc/dead/<rank>) and nobody waits for them. Throws TimeoutError naming
// the ranks still missing at the deadline.
// What is left of a shutdown's one bound, for a store call (a store host that hangs must not
// stretch the shutdown to the store's own, longer timeout); never below 100 ms, so that the
// last calls of a shutdown that is out of time still get a fair chance to be answered.
std::chrono::milliseconds time_left(Clock::time_point until) {
  return std::max(std::chrono::milliseconds(100),
                  std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()));
}

void store_barrier(RpcCore::State& s, const std::string& stage, Clock::time_point until) {
  auto& store = s.rdv->store();
  const std::string prefix = "rpc/shutdown/" + stage + "/";
  store.set(prefix + std::to_string(s.rank), "1", time_left(until));
  std::vector<int> missing;
  for (int r = 0; r < s.world; ++r)
    if (r != s.rank) missing.push_back(r);
  std::set<int> published;
  for (auto pause = std::chrono::milliseconds(1);; pause = std::min(pause * 2, std::chrono::milliseconds(50))) {
    std::vector<int> down;
    {
      std::lock_guard<std::mutex> lock(s.down_mu);
      for (const auto& kv : s.down_peers) down.push_back(kv.first);
    }
    for (int peer : down)
      if (published.insert(peer).second) store.set("rpc/dead/" + std::to_string(peer), "1", time_left(until));
    std::vector<int> still;
    for (int r : missing)
      if (!store.check({prefix + std::to_string(r)}, time_left(until)) &&
          !store.check({"rpc/dead/" + std::to_string(r)}, time_left(until)))
        still.push_back(r);
    missing.swap(still);
    if (missing.empty()) return;
    if (Clock::now() >= until) {
      std::string names;
      for (int r : missing) names += (names.empty() ? "" : ", ") + s.worker_name(r) + " (rank " + std::to_string(r) + ")";
      throw TimeoutError("rpc: " + names + " did not reach shutdown (" + stage + ") within " +
                         std::to_string(s.opts.shutdown_timeout.count()) + " ms (rpc shutdown_timeout)");
    }
    std::this_thread::sleep_for(pause);
  }
}

}  // namespace

void RpcCore::shutdown(bool graceful) {
  auto& s = *s_;
  if (s.stopped.exchange(true)) return;
  std::string failure;
  const auto until = Clock::now() + s.opts.shutdown_timeout;  // one bound for all of shutdown
  if (graceful && s.io) {
    // 1. Our own calls finish (their timeouts bound this).
    {
      std::unique_lock<std::mutex> lock(s.inflight_mu);
      if (!s.inflight_cv.wait_until(lock, until, [&] { return s.inflight == 0; }))
        failure = std::to_string(s.inflight) + " call(s) still pending";
    }
    // 2. Everyone has finished theirs: after this barrier nobody sends new requests.
    try {
      store_barrier(s, "arrived", until);
    } catch (const Error& e) {
      failure += (failure.empty() ? "" : "; ") + std::string(e.what());
    }
  }
  // 3. Rank 0 hosts the store, so it leaves last: the others say they are done with the store
  // while their connections are still open (a dropped connection then means nothing), and
  // rank 0 waits for that with its I/O loop still running, so that a peer dying now is seen.
  if (graceful && s.rdv) {
    try {
      if (s.rank == 0) store_barrier(s, "left", until);
      else s.rdv->store().set("rpc/shutdown/left/" + std::to_string(s.rank), "1", time_left(until));
    } catch (const Error& e) {
      failure += (failure.empty() ? "" : "; ") + std::string(e.what());
    }
  }
  s.running.store(false);
  if (s.io) s.io->stop();
  if (s.pool) s.pool->stop();
  {
    std::lock_guard<std::mutex> lock(s.chan_mu);  // a channel in use is closed when given back
    s.channels_closed = true;
    s.idle_channels.clear();
  }
  // The I/O thread is gone: its tables are ours now.
  std::vector<std::uint64_t> ids;
  for (auto& kv : s.pending) ids.push_back(kv.first);
  for (auto id : ids) {
    auto p = std::move(s.pending[id]);
    s.pending.erase(id);
    p.done(nullptr, call_failed(s, p.dest, p.fn, "agent " + s.opts.name + " shut down"));
  }
  {
    decltype(s.objects) dying;  // destroyed after the unlock: objects may hold RRefs
    std::lock_guard<std::mutex> lock(s.obj_mu);
    dying.swap(s.objects);
  }
  s.rdv.reset();
  if (!s.ipc_path.empty()) ::unlink(s.ipc_path.c_str());
  if (!failure.empty()) throw TimeoutError("rpc shutdown of " + s.opts.name + ": " + failure);
}

}  // namespace distrl::transport::detail
