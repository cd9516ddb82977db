// Incoming requests: decoded and checked on the I/O thread, run on the handler pool, answered
// through the ROUTER. RRef bookkeeping messages (fork, release) are handled on the I/O thread.
#include <string_view>

#include "transport/rpc/detail/rpc_state.h"
#include "transport/detail/wire_codec.h"

namespace distrl::transport::detail {
namespace {

using RoutingId = std::shared_ptr<zmq::message_t>;

// What a served call produced: the value and how to pack it.
struct Outcome {
  std::shared_ptr<void> value;
  std::type_index type = typeid(void);
  std::function<void(const void*, Packer&)> pack;
};

void send_frames(RpcCore::State& s, const RoutingId& to, std::shared_ptr<OutMessage> m) {
  auto send = [&s, to, m] {
    auto frames = encode_message(std::move(*m));
    if (!s.io->send_reply(*to, frames)) s.dropped.fetch_add(1);  // the caller is gone
  };
  if (s.io->on_io_thread()) send();
  else s.io->post(send);
}

void reply(RpcCore& core, RpcCore::State& s, const RoutingId& to, const Header& req, Kind kind, const BodyWriter& body) {
  if (req.call_id == 0) return;  // one-way
  Header h;
  h.kind = kind;
  h.call_id = req.call_id;
  h.src = s.rank;
  if (kind == Kind::Response && s.hooks) h.ctx = req.ctx;  // a result is sent inside the request's context
  std::shared_ptr<OutMessage> m;
  try {
    m = std::make_shared<OutMessage>(build_message(h, &core, req.src, body, s.hooks.get()));
  } catch (const std::exception& e) {
    // The result could not be packed (a CUDA tensor, say): tell the caller that instead.
    if (kind == Kind::Error) return;
    const std::string what = std::string("cannot send the result of '") + req.fn + "': " + e.what();
    reply(core, s, to, req, Kind::Error, [&](Packer& pk) { pk.pack(std::make_tuple(std::string("handler"), demangle(typeid(e).name()), what)); });
    return;
  }
  send_frames(s, to, std::move(m));
}

void reply_error(RpcCore& core, RpcCore::State& s, const RoutingId& to, const Header& req, std::exception_ptr err) {
  std::string origin = "handler", type, message;
  try {
    std::rethrow_exception(err);
  } catch (const BadCallError& e) {
    origin = "agent";
    type = "distrl::ProtocolError";
    message = e.what();
  } catch (const std::exception& e) {
    type = demangle(typeid(e).name());
    message = e.what();
  } catch (...) {
    type = "unknown";
    message = "a non-standard exception";
  }
  reply(core, s, to, req, Kind::Error, [&](Packer& pk) { pk.pack(std::make_tuple(origin, type, message)); });
}

std::shared_ptr<const Callable> find_function(RpcCore::State& s, const std::string& name) {
  std::shared_lock<std::shared_mutex> lock(s.reg_mu);
  auto it = s.functions.find(name);
  if (it != s.functions.end()) return it->second;
  std::string names;
  for (auto& kv : s.functions) names += (names.empty() ? "" : ", ") + kv.first;
  throw BadCallError("unknown function '" + name + "' on " + s.opts.name + " (registered: " + (names.empty() ? "none" : names) + ")");
}

bool runs_inline(RpcCore::State& s, const std::string& name) {
  std::shared_lock<std::shared_mutex> lock(s.reg_mu);
  auto it = s.functions.find(name);
  return it != s.functions.end() && it->second->run_inline;
}

const Callable* find_method(RpcCore::State& s, std::type_index type, const std::string& method,
                            std::shared_ptr<const ClassInfo>* keep) {
  std::shared_lock<std::shared_mutex> lock(s.reg_mu);
  auto it = s.classes.find(type);
  if (it == s.classes.end())
    throw BadCallError("object of type " + demangle(type.name()) + " on " + s.opts.name + " has no registered methods (no '" + method + "')");
  *keep = it->second;
  for (auto& [name, c] : it->second->methods)
    if (name == method) return &c;
  std::string names;
  for (auto& kv : it->second->methods) names += (names.empty() ? "" : ", ") + kv.first;
  throw BadCallError("class " + it->second->type_name + " has no method '" + method + "' (methods: " + names + ")");
}

Future<Outcome> outcome_of(const Future<std::shared_ptr<void>>& f, std::type_index type,
                           std::function<void(const void*, Packer&)> pack) {
  return f.then([type, pack](const Future<std::shared_ptr<void>>& r) { return Outcome{r.value(), type, pack}; });
}

// The object a call names (*obj). When its creating request has not arrived (an RRef passed on
// by another member can overtake it), a member's call waits for it on a placeholder and its
// bytes count against that member's max_parked_bytes until it is answered: the bytes to give
// back (unpark) are returned. A call that may not wait is refused: BadCallError naming the bound.
std::size_t park(RpcCore::State& s, const InMessage& m, std::shared_ptr<RpcCore::State::Object>* obj) {
  const Header& h = m.header;
  std::lock_guard<std::mutex> lock(s.obj_mu);
  auto it = s.objects.find(h.obj);
  if (it != s.objects.end() && it->second->constructed_seen) {
    *obj = it->second;
    return 0;
  }
  const std::string none = "no object " + std::to_string(h.obj) + " on " + s.opts.name;
  if (h.src < 0 || h.src >= s.world)
    throw BadCallError(none + " (a call from outside the world never waits for a creation: only members hold "
                              "references whose creation can still be on its way)");
  std::size_t& held = s.parked_bytes[h.src];
  const std::size_t bytes = m.wire_bytes;
  if (held + bytes > s.opts.max_parked_bytes || !(*obj = s.object_locked(h.obj))) {
    const std::string why =
        held + bytes > s.opts.max_parked_bytes
            ? "calls of " + s.worker_name(h.src) + " (rank " + std::to_string(h.src) + ") waiting for creations hold " +
                  std::to_string(held) + " bytes already and this one has " + std::to_string(bytes) +
                  ": max_parked_bytes is " + std::to_string(s.opts.max_parked_bytes)
            : std::to_string(s.opts.max_unknown_objects) +
                  " other unknown objects are already waiting for their creation: max_unknown_objects";
    if (held == 0) s.parked_bytes.erase(h.src);
    throw BadCallError(none + " (and " + why + ")");
  }
  held += bytes;
  return bytes;
}

void unpark(RpcCore::State& s, int src, std::size_t bytes) {
  if (bytes == 0) return;
  std::lock_guard<std::mutex> lock(s.obj_mu);
  auto it = s.parked_bytes.find(src);
  if (it == s.parked_bytes.end()) return;
  it->second -= std::min(it->second, bytes);
  if (it->second == 0) s.parked_bytes.erase(it);
}

// Runs the target of one request; the outcome completes when the (possibly async) call does.
Future<Outcome> invoke(RpcCore& core, RpcCore::State& s, const std::shared_ptr<InMessage>& m) {
  const Header& h = m->header;
  auto self = core.shared_from_this();
  if (!h.obj) {
    auto c = find_function(s, h.fn);
    return outcome_of(c->invoke(nullptr, *m, self), c->result_type, c->pack_result);
  }
  std::shared_ptr<RpcCore::State::Object> obj;
  const std::size_t parked = park(s, *m, &obj);
  // The object may still be under construction: chain on it instead of blocking a worker.
  Promise<Outcome> p;
  obj->value.then([&s, m, self, obj, p, parked](const Future<std::shared_ptr<void>>& f) {
    unpark(s, m->header.src, parked);
    try {
      std::shared_ptr<void> target = f.value();
      std::type_index type = typeid(void);
      std::function<void(const void*, Packer&)> pack;
      {
        std::lock_guard<std::mutex> lock(s.obj_mu);
        type = obj->type;
        pack = obj->pack;
      }
      if (m->header.fn == kFetchMethod) {
        if (!pack) throw BadCallError("object of type " + demangle(type.name()) + " is not fetchable: register its class with .fetchable() or call its methods");
        p.set_value(Outcome{target, type, pack});
        return;
      }
      std::shared_ptr<const ClassInfo> cls;
      const Callable* method = find_method(s, type, m->header.fn, &cls);
      outcome_of(method->invoke(target.get(), *m, self), method->result_type, method->pack_result)
          .then([p, target, cls](const Future<Outcome>& r) {
            try {
              p.set_value(r.value());
            } catch (...) {
              p.set_error(std::current_exception());
            }
          });
    } catch (...) {
      p.set_error(std::current_exception());
    }
  });
  return p.get_future();
}

// Pool thread: one request, start to answer.
void serve(RpcCore& core, RpcCore::State& s, RoutingId to, std::shared_ptr<InMessage> m) {
  s.calls_served.fetch_add(1, std::memory_order_relaxed);
  DISTRL_LOG(Debug, "rpc: serving #" << m->header.call_id << " '" << m->header.fn << "' of " << s.worker_name(m->header.src));
  Future<Outcome> result;
  try {
    // The request's context is current while the handler runs (its own calls carry it).
    std::shared_ptr<void> in_context;
    if (s.hooks && m->header.ctx >= 0) in_context = s.hooks->enter(m->header.ctx, m->header.src);
    result = invoke(core, s, m);
  } catch (...) {
    result = Future<Outcome>::failed(std::current_exception());
  }
  auto self = core.shared_from_this();
  result.then([self, &s, to, m](const Future<Outcome>& f) {
    const Header& h = m->header;
    DISTRL_LOG(Debug, "rpc: served #" << h.call_id << " '" << h.fn << "' of " << s.worker_name(h.src) << (f.has_error() ? " (error)" : ""));
    if (h.new_obj) {  // remote(): keep the result here, answer with nil
      std::shared_ptr<RpcCore::State::Object> obj;
      {
        std::lock_guard<std::mutex> lock(s.obj_mu);
        auto it = s.objects.find(h.new_obj);
        if (it != s.objects.end()) obj = it->second;  // else every holder let go already
        if (obj && !f.has_error()) {
          obj->type = f.value().type;
          obj->pack = f.value().pack;
          if (!obj->pack) {
            std::shared_lock<std::shared_mutex> rl(s.reg_mu);
            auto cls = s.classes.find(obj->type);
            if (cls != s.classes.end()) obj->pack = cls->second->pack_object;
          }
        }
      }
      if (f.has_error()) {
        if (obj) obj->promise.set_error(f.error());
        reply_error(*self, s, to, h, f.error());
      } else {
        if (obj) obj->promise.set_value(f.value().value);
        reply(*self, s, to, h, Kind::Response, [](Packer& pk) { pk.pack_nil(); });
      }
      return;
    }
    if (f.has_error()) {
      reply_error(*self, s, to, h, f.error());
      return;
    }
    const Outcome& out = f.value();
    reply(*self, s, to, h, Kind::Response, [&](Packer& pk) { out.pack(out.value.get(), pk); });
  });
}

}  // namespace

void count_bad(RpcCore::State& s, const std::string& what, bool answered) {
  s.bad.fetch_add(1);
  if (!answered) s.dropped.fetch_add(1);
  long held = 0;
  if (s.bad_log.allow(&held))
    DISTRL_LOG(Warn, "transport: " << (answered ? "refused" : "dropped") << " a message: " << what
                                   << (held ? " (" + std::to_string(held) + " more since the last report)" : ""));
}

// The rank a member's connection was made under ("rpc-r<rank>-..."), or -1 for any other
// routing id (libzmq's own, an outsider's).
static int rank_of_identity(const zmq::message_t& id) {
  const std::string_view v(static_cast<const char*>(id.data()), id.size());
  if (v.substr(0, 5) != "rpc-r") return -1;
  long r = 0;
  std::size_t i = 5;
  for (; i < v.size() && i < 12 && v[i] >= '0' && v[i] <= '9'; ++i) r = r * 10 + (v[i] - '0');
  return i > 5 && i < v.size() && v[i] == '-' ? static_cast<int>(r) : -1;
}

void on_request(RpcCore& core, RpcCore::State& s, zmq::message_t&& routing, IoLoop::Frames&& frames) {
  auto to = std::make_shared<zmq::message_t>(std::move(routing));
  DecodeFailure why;
  auto decoded = decode_message(std::move(frames), s.opts.limits, &why);
  // No trust in identity fields: a message that names a member as its src must come on a
  // connection that member made. An outsider (src -1) stays an outsider: it can call, never act
  // as a member (hold forks, rejoin, enter autograd contexts as one). Dropped unanswered.
  const int claimed = decoded ? decoded->header.src : why.src;
  if (claimed >= 0 && claimed != rank_of_identity(*to)) {
    const int conn = rank_of_identity(*to);
    count_bad(s, "a message claiming to come from rank " + std::to_string(claimed) + " on " +
                     (conn >= 0 ? "a connection of rank " + std::to_string(conn) : std::string("a connection of no member")),
              false);
    return;
  }
  const std::string from = why.src >= 0 ? s.worker_name(why.src) : std::string("an unknown peer");
  if (!decoded) {
    const bool answerable = why.call_id && why.kind == Kind::Request;
    count_bad(s, "from " + from + ": " + why.what, answerable);
    if (answerable) {
      Header req;
      req.call_id = *why.call_id;
      req.src = why.src;
      reply_error(core, s, to, req, std::make_exception_ptr(BadCallError("message refused by " + s.opts.name + ": " + why.what)));
    }
    return;
  }
  auto m = std::make_shared<InMessage>(std::move(*decoded));
  attach_hooks(s, *m);
  const Header& h = m->header;
  if (h.kind == Kind::Request && h.fn == kForkFn) {  // a holder passes an RRef on
    try {
      auto ids = m->body_as<std::tuple<std::uint64_t, std::uint64_t, std::int32_t>>(nullptr, "RRef fork notice");
      std::lock_guard<std::mutex> lock(s.obj_mu);
      s.add_fork_locked(std::get<0>(ids), std::get<1>(ids), std::get<2>(ids));
    } catch (const ProtocolError& e) {
      count_bad(s, e.what(), true);
      reply_error(core, s, to, h, std::make_exception_ptr(BadCallError(e.what())));
      return;
    }
    reply(core, s, to, h, Kind::Response, [](Packer& pk) { pk.pack_nil(); });
    return;
  }
  if (h.kind == Kind::Control && h.fn == kReleaseFn) {  // a holder let go
    try {
      auto ids = m->body_as<std::tuple<std::uint64_t, std::uint64_t>>(nullptr, "RRef release");
      std::shared_ptr<RpcCore::State::Object> last;
      std::lock_guard<std::mutex> lock(s.obj_mu);
      last = s.release_fork_locked(std::get<0>(ids), std::get<1>(ids), h.src);
    } catch (const ProtocolError& e) {
      count_bad(s, e.what(), false);
    }
    return;
  }
  if (h.kind == Kind::Control && h.fn == kRejoinFn) {  // a rank restarted at a new address
    on_rejoin(s, h.src, *m);
    return;
  }
  if (h.kind != Kind::Request) {
    count_bad(s, "from " + from + ": unexpected message kind " + std::to_string(static_cast<int>(h.kind)), false);
    return;
  }
  if (h.new_obj) {  // remote(): the object exists (pending) from now on, so calls can queue on it
    std::lock_guard<std::mutex> lock(s.obj_mu);
    s.object_locked(h.new_obj, /*creating=*/true)->constructed_seen = true;
    s.add_fork_locked(h.new_obj, h.new_obj, h.src);  // the creator holds the first reference
  }
  if (!h.obj && !h.new_obj && runs_inline(s, h.fn)) {
    serve(core, s, to, m);
    return;
  }
  DISTRL_LOG(Debug, "rpc: request #" << h.call_id << " '" << h.fn << "' of " << s.worker_name(h.src) << " queued");
  s.pool->post([&core, &s, to, m] { serve(core, s, to, m); });
}

}  // namespace distrl::transport::detail
