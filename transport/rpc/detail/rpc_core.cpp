// The RPC engine's lifecycle: start (rendezvous, bind, threads), the accessors, and shutdown.
// Threads: the I/O loop (sockets, replies, deadlines, RRef control messages) and the handler
// pool (user functions, packing replies). Outgoing calls are rpc_call.cpp, incoming requests
// rpc_serve.cpp; each owned part of the State has its own lock (rpc_state.h).
#include "transport/rpc/detail/rpc_core.h"

#include <unistd.h>

#include <algorithm>
#include <set>
#include <thread>

#include "common/host.h"
#include "common/stop_signal.h"
#include "transport/link/endpoints.h"
#include "transport/link/world_links.h"
#include "transport/wire/detail/wire_codec.h"
#include "transport/rpc/detail/rpc_state.h"

namespace distrl::transport::detail {

RpcCore::RpcCore(RpcOptions options) : s_(std::make_unique<State>(std::move(options))) {}

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
  st.calls_sent = s_->calls.sent();
  st.calls_served = s_->calls_served.load();
  st.bad_messages = s_->bad.load();
  st.dropped_messages = s_->dropped.load();
  st.timeouts = s_->timeouts.load();
  st.bytes_sent = s_->sync_bytes_sent.load() + (s_->link ? s_->link->bytes_sent() : 0);
  st.bytes_received = s_->sync_bytes_received.load() + (s_->link ? s_->link->bytes_received() : 0);
  st.live_objects = s_->objects.live();
  st.releases_refused = s_->objects.releases_refused();
  return st;
}

std::uint64_t RpcCore::connection_drops(int rank) const { return s_->peers.drops(rank); }

bool RpcCore::connection_lost(int rank) const { return s_->peers.is_down(rank); }

void RpcCore::watch(int rank) {
  Link* link = s_->link.get();
  if (!link) throw Error("rpc: watch() needs a started agent");
  link->post([link, rank] { link->watch_peer(rank); });
}

bool RpcCore::has_shut_down(int rank) { return store().check({"rpc/shutdown/arrived/" + std::to_string(rank)}); }

void RpcCore::serve_until_shutdown(int rank) {
  if (rank == s_->rank) throw Error("rpc: serve_until_shutdown: " + s_->opts.name + " would wait for itself");
  watch(rank);
  while (!has_shut_down(rank)) {
    if (connection_lost(rank))
      throw TransportError("rpc: " + s_->worker_name(rank) + " (rank " + std::to_string(rank) + ") is gone; " +
                           s_->opts.name + " was serving until it finished");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

int RpcCore::resolve(const Target& to) const {
  if (to.name.empty()) {
    if (to.rank < 0 || to.rank >= s_->world)
      throw Error("rpc: no worker with rank " + std::to_string(to.rank) + " (world size " + std::to_string(s_->world) +
                  ")");
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

void RpcCore::add_callable(const std::string& name, Callable c) { s_->registry.add_function(name, std::move(c)); }

void RpcCore::add_class(const std::string&, ClassInfo info) { s_->registry.add_class(std::move(info)); }

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

// ------------------------------------------------------------------ lifecycle

namespace {

void validate(const RpcOptions& o) {
  auto bad = [](const std::string& what) { throw ConfigError("rpc options: " + what); };
  if (o.num_worker_threads < 1 || o.num_worker_threads > 1024)
    bad("num_worker_threads is " + std::to_string(o.num_worker_threads) + ", allowed 1..1024");
  if (o.rpc_timeout.count() <= 0) bad("rpc_timeout must be positive");
  if (o.rendezvous_timeout.count() <= 0) bad("rendezvous_timeout must be positive");
  if (o.shutdown_timeout.count() <= 0) bad("shutdown_timeout must be positive");
  if (o.unknown_object_wait.count() <= 0) bad("unknown_object_wait must be positive");
  if (o.max_unknown_objects < 1) bad("max_unknown_objects must be at least 1");
  if (o.max_parked_bytes < 1) bad("max_parked_bytes must be at least 1");
}

// What the world's links are made with (link/world_links.h), from the options. The member
// identity comes once the world's member key is known (member_key).
LinkSettings link_settings(const RpcCore::State& s, const WorldSpec& w, Transport transport) {
  LinkSettings l;
  l.name = s.opts.name;
  l.rank = s.rank;
  l.transport = transport;
  if (transport != Transport::Shm) l.bind_ip = bind_ip(w, s.opts.bind_host);
  l.zmq = IoLoop::Options{
      s.opts.limits.max_message_bytes, s.opts.limits.max_frames + 2, s.opts.io_spin, s.opts.thread_init, "", ""};
  l.shm.max_message_bytes = s.opts.limits.max_message_bytes;
  l.shm.max_parts = s.opts.limits.max_frames + 1;  // header + tensor frames (ZeroMQ's + 2 counts the routing id)
  l.shm.spin = s.opts.shm_spin;
  l.shm.send_timeout = s.opts.rpc_timeout;
  l.shm.thread_init = s.opts.thread_init;
  return l;
}

// The world's member key (link/endpoints.h: world_member_key): every connection of a member is
// made under its tag (IoLoop's member_identity), so that a server can check that a message's src
// is the rank of the connection it came on, and a stranger who names itself a member without the
// key is not one.
constexpr const char* kMemberKey = "rpc/member_key";

// Tells every peer where this restarted rank listens now (one-way notices; a peer that is
// gone too is skipped).
void announce_rejoin(RpcCore::State& s) {
  DISTRL_LOG(Info, "rpc: " << s.opts.name << " (rank " << s.rank << ") rejoins the group (incarnation " << s.incarnation
                           << ")");
  for (int r = 0; r < s.world; ++r) {
    if (r == s.rank) continue;
    Header h;
    h.kind = Kind::Control;
    h.src = s.rank;
    h.fn = kRejoinFn;
    auto notice = std::make_tuple(s.incarnation, s.me);
    Frames frames = encode_message(build_message(
        h, nullptr, r, [&](Packer& pk) { pk.pack(notice); }, nullptr));
    std::string err;
    (void)s.link->send_any_thread(r, frames, &err);
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
  s.pool = std::make_unique<ThreadPool>(s.opts.num_worker_threads, "rpc-handlers", s.opts.thread_init);

  Link::Events cb;
  State* sp = &s;
  cb.on_request = [this, sp](Caller&& from, Frames&& f) { on_request(*this, *sp, std::move(from), std::move(f)); };
  cb.on_reply = [sp](int peer, Frames&& f) { on_reply(*sp, peer, std::move(f)); };
  cb.on_peer_down = [sp](int peer, const std::string& why) { on_peer_down(*sp, peer, why); };
  cb.on_peer_up = [sp](int peer) { on_peer_up(*sp, peer); };
  cb.on_tick = [sp](Clock::time_point now) { expire(*sp, now); };
  cb.on_served = [sp] {  // set by the setup callback, which runs below, before the loop starts
    if (sp->after_requests_read) sp->after_requests_read();
  };
  cb.on_dropped = [sp](const std::string& what) { count_bad(*sp, what, false); };
  cb.on_send_failed = [sp](int peer, Frames&& f, const std::string& why) {
    on_send_failed(*sp, peer, std::move(f), why);
  };
  cb.next_deadline = [sp] { return sp->calls.next_deadline(); };
  // The links: ZeroMQ (unless shm is asked for) and shared memory (when it may be used), both
  // bound before the addresses are published; the world's addresses decide which runs: one of
  // them, or both (a world that spans hosts: shared memory to the ranks on this host).
  const Transport transport = parse_transport(s.opts.transport, "rpc options");
  WorldLinks links(link_settings(s, w, transport), cb);
  s.me = links.me();
  s.ipc_path = links.ipc_path();
  RegisteredPathGuard ipc_file(s.ipc_path);  // a rendezvous that throws leaves no slot behind
  if (before_publish) before_publish();      // registrations land before any peer can reach us

  auto& store = s.rdv->store();
  const Address& me = s.me;
  const auto peers = exchange_addresses(store, kWorkerAddressPrefix, s.rank, s.world, me, s.opts.rendezvous_timeout);
  links.set_member_key(world_member_key(store, kMemberKey, s.rank, s.opts.rendezvous_timeout), new_object_id());
  // Auto without shared memory here is ZeroMQ's (per pair: ipc on this host, tcp between hosts).
  s.link_transport = links.transport();
  const std::vector<std::string> endpoints = links.endpoints(peers);
  std::vector<std::int64_t> incarnations(s.world, 1);
  if (s.incarnation > 1)
    for (int r = 0; r < s.world; ++r)
      incarnations[r] = std::max<std::int64_t>(1, store.add("rpc/incarnation/" + std::to_string(r), 0));
  for (int r = 0; r < s.world; ++r) {
    const Address& p = peers[r];
    if (s.by_name.count(p.name))
      throw ConfigError("rpc: two workers are named '" + p.name + "' (ranks " + std::to_string(s.by_name[p.name]) +
                        " and " + std::to_string(r) + "); give each a unique name");
    s.by_name[p.name] = r;
    s.workers.push_back(WorkerInfo{p.name, r, p.hostname, endpoints[r]});
  }
  s.link = links.take(endpoints, std::move(cb));
  s.link->set_peers(endpoints);
  s.channels.reset(incarnations);
  s.peers.reset(endpoints, std::move(incarnations));
  // Running before the loop starts: peers have our address already, so requests may be waiting,
  // and a handler that calls out must never see this agent as not running. (It once did, under
  // load: the main thread was preempted between the two lines, a handler's nested rpc_sync failed
  // "agent is shut down", and the 4-process dist-autograd test failed about once in 60 runs.)
  s.running.store(true);
  s.link->start();
  ipc_file.release();  // shutdown removes it
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
    for (int peer : s.peers.down_peers())
      if (published.insert(peer).second) store.set(dead_rank_key(peer), "1", time_left(until));
    std::vector<int> still;
    for (int r : missing)
      if (!store.check({prefix + std::to_string(r)}, time_left(until)) &&
          !store.check({dead_rank_key(r)}, time_left(until)))
        still.push_back(r);
    missing.swap(still);
    if (missing.empty()) return;
    if (Clock::now() >= until) {
      std::string names;
      for (int r : missing)
        names += (names.empty() ? "" : ", ") + s.worker_name(r) + " (rank " + std::to_string(r) + ")";
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
  if (graceful && s.link) {
    // 1. Our own calls finish (their timeouts bound this).
    if (std::size_t left = 0; !s.calls.wait_idle(until, &left))
      failure = std::to_string(left) + " call(s) still pending";
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
  if (s.link) s.link->stop();
  if (s.pool) s.pool->stop();
  s.channels.close();  // a channel in use is closed when given back
  // The I/O thread is gone: no call it sent can be answered now.
  for (auto& p : s.calls.take_all())
    complete(s, p, nullptr, call_failed(s, p.dest, p.fn, "agent " + s.opts.name + " shut down"));
  s.objects.clear();
  s.rdv.reset();
  if (!s.ipc_path.empty()) {
    ::unlink(s.ipc_path.c_str());
    forget_on_fatal_signal(s.ipc_path.c_str());
  }
  if (!failure.empty()) throw TimeoutError("rpc shutdown of " + s.opts.name + ": " + failure);
}

}  // namespace distrl::transport::detail
