// Outgoing calls: through the I/O loop (call: the call table keeps them until their answer,
// their deadline or their peer's death) or on the caller's own channel (call_sync, the fast
// path). Also the I/O loop's view of peers: replies, connections lost and back, rejoins.
#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "transport/wire/detail/wire_codec.h"
#include "transport/rpc/detail/rpc_state.h"

namespace distrl::transport::detail {

std::string describe_call(const RpcCore::State& s, int dest, const std::string& fn) {
  return "rpc to " + s.worker_name(dest) + " (rank " + std::to_string(dest) + ") '" + fn + "'";
}

std::exception_ptr call_failed(const RpcCore::State& s, int dest, const std::string& fn, const std::string& why) {
  return std::make_exception_ptr(TransportError(describe_call(s, dest, fn) + " failed: " + why));
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

void attach_hooks(RpcCore::State& s, InMessage& m) {
  if (!s.hooks || m.header.ctx < 0 || m.header.rg.empty()) return;
  m.frames->hooks = s.hooks;
  m.frames->tag = MessageTag{m.header.ctx, m.header.am, m.header.rg};
  m.frames->src = m.header.src;
}

// Runs a pending call's completion (it left the call table) and ends the call.
void complete(RpcCore::State& s, CallTable::Pending& p, InMessage* m, std::exception_ptr err) {
  try {
    p.done(m, err);
  } catch (const std::exception& e) {
    DISTRL_LOG(Error, "rpc: completion of '" << p.fn << "' threw " << e.what());
  }
  s.calls.end();
}

namespace {

// The longest a link's I/O loop sleeps without a deadline (ShmLink::run, IoLoop::run).
constexpr auto kLoopSleepBound = std::chrono::milliseconds(100);

std::exception_ptr agent_shut_down(const RpcCore::State& s, const std::string& fn) {
  if (!s.stopped.load())
    return std::make_exception_ptr(TransportError("rpc: agent " + s.opts.name + " is not started yet; cannot call '" +
                                                  fn +
                                                  "' (the setup callback runs before the peers are known: call out "
                                                  "after the RpcAgent is constructed)"));
  return std::make_exception_ptr(
      TransportError("rpc: agent " + s.opts.name + " is shut down; cannot call '" + fn + "'"));
}

// A request's header stamped (kind, source, a fresh call id, the hooks' context) and packed.
// Throws what packing the body throws.
OutMessage request_message(RpcCore& core, RpcCore::State& s, int dest, Header& h, const BodyWriter& body) {
  h.kind = Kind::Request;
  h.src = s.rank;
  h.call_id = s.calls.next_id();
  MessageHooks* hooks = s.hooks.get();
  if (hooks && h.ctx < 0) h.ctx = hooks->current_context();
  return build_message(h, &core, dest, body, hooks);
}

std::exception_ptr malformed_reply(const RpcCore::State& s, int peer, const std::string& what) {
  return std::make_exception_ptr(ProtocolError("rpc: malformed reply from " + s.worker_name(peer) + ": " + what));
}

std::exception_ptr error_from_reply(RpcCore::State& s, const InMessage& m, const std::string& fn) {
  std::string origin, type, message;
  try {
    std::tuple<std::string, std::string, std::string> t;
    m.body().convert(t);
    std::tie(origin, type, message) = t;
  } catch (const std::exception&) {
    return std::make_exception_ptr(
        ProtocolError("rpc: malformed error reply from " + s.worker_name(m.header.src) + " to '" + fn + "'"));
  }
  if (origin == "agent")
    return std::make_exception_ptr(
        ProtocolError("rpc '" + fn + "' refused by " + s.worker_name(m.header.src) + ": " + message));
  return std::make_exception_ptr(RemoteError(s.worker_name(m.header.src), type, message));
}

}  // namespace

void RpcCore::call(int dest, Header h, const BodyWriter& body, Completion done, std::chrono::milliseconds timeout) {
  State& s = *s_;
  if (!s.running.load()) return done(nullptr, agent_shut_down(s, h.fn));
  Frames frames;
  try {
    frames = encode_message(request_message(*this, s, dest, h, body));
  } catch (...) {
    return done(nullptr, std::current_exception());
  }
  // In the table before it is sent: the reply may be read before the send returns. Whoever
  // takes it out of the table (the reply, its deadline, its peer's death, a failed send) ends it.
  const std::uint64_t id = h.call_id;
  const bool earliest = s.calls.begin_pending(
      CallTable::Pending{id, dest, std::move(h.fn), std::move(done), Clock::now() + timeout, timeout});
  // The I/O loop sleeps 100 ms at most, or until the earliest deadline it knew: a call sent
  // without it that ends sooner than that wakes it (a post), so that its timeout is on time.
  if (earliest && timeout < kLoopSleepBound) s.link->post([] {});
  // A peer reported down before the call was in the table took nothing of it: fail it here. (A
  // rank that rejoined meanwhile is caught the same way: its old process was reported down
  // first, and once it is up again the link sends to the new one.)
  std::string why = s.peers.down_reason(dest);
  if (why.empty() && s.link->send_any_thread(dest, frames, &why)) {
    DISTRL_LOG(Debug, "rpc: call #" << id << " sent to " << s.worker_name(dest));
    return;
  }
  if (auto p = s.calls.take(id))
    complete(s, *p, nullptr, s.running.load() ? call_failed(s, dest, p->fn, why) : agent_shut_down(s, p->fn));
}

// ------------------------------------------------------------------ the synchronous fast path

namespace {

// An idle channel to `dest`, or a new one opened by `deadline` (then the I/O thread is asked to
// connect to dest too, so that it watches the connection and reports the peer's death).
// nullptr once the agent is shutting down. Throws TransportError when the link cannot open a
// channel (TimeoutError: not by the deadline).
ChannelPtr acquire_channel(RpcCore::State& s, int dest, Clock::time_point deadline) {
  bool closed = false;
  if (ChannelPtr c = s.channels.take(dest, &closed)) return c;
  if (closed) return nullptr;
  std::int64_t incarnation = 0;
  const std::string endpoint = s.peers.endpoint(dest, &incarnation);  // a rejoin changes both together
  Link* link = s.link.get();
  link->post([link, dest] { link->watch_peer(dest); });  // first: a peer that never answers is reported down
  // A busy peer is waited for until the call's deadline, a stopped or dead one until the I/O
  // thread reports it down; and not past shutdown.
  std::string why;
  const auto abandon = [&] {
    std::int64_t now_incarnation = 0;
    if (!s.running.load()) why = "agent " + s.opts.name + " shut down";
    else if (std::string down = s.peers.down_reason(dest, &now_incarnation); !down.empty()) why = std::move(down);
    else if (now_incarnation != incarnation) why = "the process restarted (its rank rejoined)";
    return !why.empty();
  };
  try {
    return std::make_unique<PooledChannel>(
        PooledChannel{link->open_channel(dest, endpoint, deadline, abandon), incarnation});
  } catch (const TransportError&) {
    if (why.empty()) throw;
  }
  throw TransportError(why);
}

// What ends a synchronous call: a reply (its message), a failure, or nothing yet.
struct SyncOutcome {
  std::optional<InMessage> reply;
  std::exception_ptr error;
  bool done() const { return reply || error; }
};

// Reads what arrived on the channel: the call's answer ends it; a late reply of an earlier call
// (it timed out) or a refused message is skipped.
SyncOutcome read_reply(RpcCore::State& s, Channel& chan, int dest, const Header& h) {
  Frames in;
  const Received got = chan.receive(in, s.opts.limits.max_frames + 1);
  if (got == Received::TooManyParts) {
    count_bad(s, "a reply of more than " + std::to_string(s.opts.limits.max_frames + 1) + " frames", false);
    return {};
  }
  if (got == Received::Nothing) return {};
  s.sync_bytes_received.fetch_add(frames_bytes(in), std::memory_order_relaxed);
  DecodeFailure why;
  auto m = decode_message(std::move(in), s.opts.limits, &why);
  if (!m) {
    s.bad.fetch_add(1);
    if (why.call_id && *why.call_id == h.call_id) return {std::nullopt, malformed_reply(s, dest, why.what)};
    return {};
  }
  if (m->header.call_id != h.call_id) return {};  // the late reply of an earlier call that timed out
  attach_hooks(s, *m);
  DISTRL_LOG(Debug, "rpc: sync call #" << h.call_id << " '" << h.fn << "' answered");
  if (m->header.kind == Kind::Response) return {std::move(m), nullptr};
  if (m->header.kind == Kind::Error) return {std::nullopt, error_from_reply(s, *m, h.fn)};
  return {};
}

// Between waits: what the I/O loop saw (a dead peer, a restart), shutdown and the deadline.
std::exception_ptr sync_call_ended(RpcCore::State& s, std::int64_t chan_incarnation, int dest, const Header& h,
                                   Clock::time_point deadline, std::chrono::milliseconds timeout) {
  if (!s.running.load()) return call_failed(s, dest, h.fn, "agent " + s.opts.name + " shut down");
  std::int64_t incarnation = 0;
  if (const std::string gone = s.peers.down_reason(dest, &incarnation); !gone.empty())
    return call_failed(s, dest, h.fn, gone);
  if (incarnation != chan_incarnation)
    return call_failed(s, dest, h.fn, "the process restarted (its rank rejoined) before answering");
  if (Clock::now() >= deadline) {
    s.timeouts.fetch_add(1);
    return std::make_exception_ptr(
        TimeoutError(describe_call(s, dest, h.fn) + " timed out after " + std::to_string(timeout.count()) + " ms"));
  }
  return nullptr;
}

// Waits on the channel for the call's answer, in slices: between them, see what the I/O loop
// saw (a dead peer) and shutdown.
SyncOutcome await_reply(RpcCore::State& s, PooledChannel& chan, int dest, const Header& h, Clock::time_point deadline,
                        std::chrono::milliseconds timeout) {
  const auto spin_until = Clock::now() + future_spin();
  for (;;) {
    const auto now = Clock::now();
    long slice_ms = 0;
    if (now >= spin_until)
      slice_ms =
          std::clamp<long>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1, 0, 10);
    if (chan.channel->readable(std::chrono::milliseconds(slice_ms))) {
      SyncOutcome out = read_reply(s, *chan.channel, dest, h);
      if (out.done()) return out;
      continue;
    }
    if (auto ended = sync_call_ended(s, chan.incarnation, dest, h, deadline, timeout)) return {std::nullopt, ended};
  }
}

}  // namespace

void RpcCore::call_sync(int dest, Header h, const BodyWriter& body, const Completion& done,
                        std::chrono::milliseconds timeout) {
  State& s = *s_;
  if (!s.running.load()) return done(nullptr, agent_shut_down(s, h.fn));
  if (const std::string why = s.peers.down_reason(dest); !why.empty())
    return done(nullptr, call_failed(s, dest, h.fn, why));
  Frames frames;
  try {
    frames = encode_message(request_message(*this, s, dest, h, body));
  } catch (...) {
    return done(nullptr, std::current_exception());
  }
  s.calls.begin();
  const auto deadline = Clock::now() + timeout;  // opening a channel and the wait for the reply
  // Exactly one of these ends the call: done runs, the channel goes back, shutdown may go on.
  ChannelPtr chan;
  auto finish = [&](InMessage* m, std::exception_ptr err) {
    if (chan) s.channels.give_back(dest, std::move(chan));
    try {
      done(m, err);
    } catch (...) {
      s.calls.end();
      throw;
    }
    s.calls.end();
  };
  std::exception_ptr failed;
  try {
    chan = acquire_channel(s, dest, deadline);
  } catch (const TimeoutError& e) {  // the peer took no new connection by the deadline (busy)
    s.timeouts.fetch_add(1);
    failed = std::make_exception_ptr(TimeoutError(describe_call(s, dest, h.fn) + " timed out after " +
                                                  std::to_string(timeout.count()) + " ms: " + e.what()));
  } catch (const TransportError& e) {
    failed = call_failed(s, dest, h.fn, e.what());
  }
  if (!failed) {
    try {
      const std::size_t bytes = frames_bytes(frames);
      if (!chan) {
        failed = agent_shut_down(s, h.fn);
      } else if (!chan->channel->send(frames)) {
        failed = call_failed(s, dest, h.fn, "send queue full (peer not reading?)");
      } else {
        s.sync_bytes_sent.fetch_add(bytes, std::memory_order_relaxed);
        frames.clear();  // the link holds what it still needs: the arguments' tensors go now, not at the reply
        DISTRL_LOG(Debug, "rpc: sync call #" << h.call_id << " '" << h.fn << "' sent to " << s.worker_name(dest));
      }
    } catch (const TransportError& e) {
      chan.reset();  // a send that failed may have left part of a message: never reused
      failed = call_failed(s, dest, h.fn, e.what());
    }
  }
  if (failed) return finish(nullptr, failed);
  SyncOutcome out;
  try {
    out = await_reply(s, *chan, dest, h, deadline, timeout);
  } catch (const TransportError& e) {  // the channel failed: it is closed, not reused
    const std::int64_t incarnation = chan->incarnation;
    chan.reset();
    // What the agent knows says more than the channel (it closed because this agent or the
    // peer shut down, or the peer died).
    out.error = sync_call_ended(s, incarnation, dest, h, Clock::time_point::max(), timeout);
    if (!out.error) out.error = call_failed(s, dest, h.fn, e.what());
  } catch (...) {  // anything else still ends the call (done runs, shutdown's count drops)
    chan.reset();
    out.error = std::current_exception();
  }
  finish(out.reply ? &*out.reply : nullptr, out.error);
}

// ------------------------------------------------------------------ the I/O loop's side

void on_reply(RpcCore::State& s, int peer, Frames&& frames) {
  DecodeFailure why;
  auto m = decode_message(std::move(frames), s.opts.limits, &why);
  if (!m) {
    s.bad.fetch_add(1);
    if (why.call_id)
      if (auto p = s.calls.take(*why.call_id)) complete(s, *p, nullptr, malformed_reply(s, peer, why.what));
    return;
  }
  attach_hooks(s, *m);
  const Kind kind = m->header.kind;
  if (kind != Kind::Response && kind != Kind::Error) return;
  auto p = s.calls.take(m->header.call_id);
  if (!p) return;  // timed out earlier, or a stray reply
  DISTRL_LOG(Debug, "rpc: call #" << m->header.call_id << " '" << p->fn << "' answered");
  if (kind == Kind::Response) complete(s, *p, &*m, nullptr);
  else complete(s, *p, nullptr, error_from_reply(s, *m, p->fn));
}

void on_send_failed(RpcCore::State& s, int peer, Frames&& frames, const std::string& why) {
  DecodeFailure bad;
  auto m = decode_message(std::move(frames), s.opts.limits, &bad);  // our own message
  if (!m) return;
  if (m->header.kind == Kind::Response || m->header.kind == Kind::Error) {
    s.dropped.fetch_add(1);
    return;
  }
  if (m->header.kind != Kind::Request) return;  // a one-way notice: nobody waits for it
  if (auto p = s.calls.take(m->header.call_id)) complete(s, *p, nullptr, call_failed(s, peer, p->fn, why));
}

void on_peer_down(RpcCore::State& s, int peer, const std::string& why) {
  s.peers.down(peer, why);
  if (s.hooks) s.hooks->on_peer_down(peer, why);
  auto calls = s.calls.take_to(peer);
  if (!calls.empty())
    DISTRL_LOG(Warn, "rpc: peer " << s.worker_name(peer) << " (rank " << peer << ") is gone: failing " << calls.size()
                                  << " pending call(s)");
  for (auto& p : calls) complete(s, p, nullptr, call_failed(s, peer, p.fn, why));
}

void on_peer_up(RpcCore::State& s, int peer) {
  const std::string why = s.peers.up(peer);
  if (why.empty()) return;
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
    endpoint = endpoint_for(s.me, std::get<1>(notice), s.link_transport);
  } catch (const Error& e) {
    return count_bad(s, "from rank " + std::to_string(peer) + ": " + e.what(), false);
  }
  const std::int64_t incarnation = std::get<0>(notice);
  if (incarnation <= s.peers.incarnation(peer)) return;  // an older or repeated notice
  // Calls to the earlier process will never be answered: fail them now, as its death would
  // have (this worker may not have noticed the death yet).
  if (!s.peers.is_down(peer))
    on_peer_down(s, peer, s.worker_name(peer) + " restarted (incarnation " + std::to_string(incarnation) + ")");
  s.channels.retire(peer, incarnation);  // no channel to the earlier process is reused from here
  s.peers.rejoined(peer, incarnation, endpoint);
  s.link->replace_peer(peer, endpoint);
  s.peers.up(peer);
  DISTRL_LOG(Info, "rpc: " << s.worker_name(peer) << " (rank " << peer << ") rejoined (incarnation " << incarnation
                           << ") at " << endpoint);
}

void expire(RpcCore::State& s, Clock::time_point now) {
  s.objects.expire(now);
  for (auto& p : s.calls.take_expired(now)) {
    s.timeouts.fetch_add(1);
    complete(s, p, nullptr,
             std::make_exception_ptr(TimeoutError(describe_call(s, p.dest, p.fn) + " timed out after " +
                                                  std::to_string(p.timeout.count()) + " ms")));
  }
}

}  // namespace distrl::transport::detail
