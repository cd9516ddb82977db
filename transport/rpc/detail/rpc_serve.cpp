// Incoming requests: decoded and checked on the I/O thread, run on the handler pool, answered
// through the link. RRef bookkeeping messages (fork, release) are handled on the I/O thread.
#include "transport/rpc/detail/rpc_state.h"
#include "transport/wire/detail/wire_codec.h"

namespace distrl::transport::detail {
namespace {

using RoutingId = std::shared_ptr<const Caller>;  // where a reply goes

// What a served call produced: the value and how to pack it.
struct Outcome {
  std::shared_ptr<void> value;
  std::type_index type = typeid(void);
  std::function<void(const void*, Packer&)> pack;
};

void reply(RpcCore& core, RpcCore::State& s, const RoutingId& to, const Header& req, Kind kind,
           const BodyWriter& body) {
  if (req.call_id == 0) return;  // one-way
  Header h;
  h.kind = kind;
  h.call_id = req.call_id;
  h.src = s.rank;
  if (kind == Kind::Response && s.hooks) h.ctx = req.ctx;  // a result is sent inside the request's context
  Frames frames;
  try {
    frames = encode_message(build_message(h, &core, req.src, body, s.hooks.get()));
  } catch (const std::exception& e) {
    // The result could not be packed (a CUDA tensor, say): tell the caller that instead.
    if (kind == Kind::Error) return;
    const std::string what = std::string("cannot send the result of '") + req.fn + "': " + e.what();
    reply(core, s, to, req, Kind::Error,
          [&](Packer& pk) { pk.pack(std::make_tuple(std::string("handler"), demangle(typeid(e).name()), what)); });
    return;
  }
  // From any thread: the link writes it at once where it can (shared memory), else its I/O
  // thread sends it.
  if (!s.link->send_reply_any_thread(*to, frames)) s.dropped.fetch_add(1);  // the caller is gone
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

Future<Outcome> outcome_of(const Future<std::shared_ptr<void>>& f, std::type_index type,
                           std::function<void(const void*, Packer&)> pack) {
  return f.then_inline([type, pack](const Future<std::shared_ptr<void>>& r) { return Outcome{r.value(), type, pack}; });
}

// Runs the target of one request; the outcome completes when the (possibly async) call does.
Future<Outcome> invoke(RpcCore& core, RpcCore::State& s, const std::shared_ptr<InMessage>& m) {
  const Header& h = m->header;
  auto self = core.shared_from_this();
  if (!h.obj) {
    auto c = s.registry.function(h.fn, s.opts.name);
    return outcome_of(c->invoke(nullptr, *m, self), c->result_type, c->pack_result);
  }
  // The object may not be created yet (an RRef passed on by another member can overtake its
  // creating request): a member's call then waits for it, bounded (ObjectTable::park).
  std::shared_ptr<ObjectTable::Object> obj;
  const std::size_t parked = s.objects.park(h.obj, h.src, m->wire_bytes, s.world, s.worker_name(h.src), &obj);
  // The object may still be under construction: chain on it instead of blocking a worker.
  Promise<Outcome> p;
  obj->value.then([&s, m, self, obj, p, parked](const Future<std::shared_ptr<void>>& f) {
    s.objects.unpark(m->header.src, parked);
    try {
      std::shared_ptr<void> target = f.value();
      const auto [type, pack] = s.objects.kind(*obj);
      if (m->header.fn == kFetchMethod) {
        if (!pack)
          throw BadCallError("object of type " + demangle(type.name()) +
                             " is not fetchable: register its class with .fetchable() or call its methods");
        p.set_value(Outcome{target, type, pack});
        return;
      }
      std::shared_ptr<const ClassInfo> cls;
      const Callable* method = s.registry.method(type, m->header.fn, s.opts.name, &cls);
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
  DISTRL_LOG(Debug,
             "rpc: serving #" << m->header.call_id << " '" << m->header.fn << "' of " << s.worker_name(m->header.src));
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
  // An async handler's reply goes out from the thread that completed its future (the I/O thread,
  // when that was an RPC result): packing and sending it needs no hand-off. A remote() creation
  // takes the pool: completing its object runs the calls that waited for it (user code).
  auto answer = [self, &s, to, m](const Future<Outcome>& f) {
    const Header& h = m->header;
    DISTRL_LOG(Debug, "rpc: served #" << h.call_id << " '" << h.fn << "' of " << s.worker_name(h.src)
                                      << (f.has_error() ? " (error)" : ""));
    if (h.new_obj) {                         // remote(): keep the result here, answer with nil
      auto obj = s.objects.find(h.new_obj);  // null: every holder let go already
      if (obj && !f.has_error()) {
        const Outcome& out = f.value();
        s.objects.set_kind(*obj, out.type, out.pack ? out.pack : s.registry.object_packer(out.type));
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
  };
  if (m->header.new_obj) {
    result.then(std::move(answer));
    return;
  }
  if (result.done()) return answer(result);  // answered at once: on this thread, as ever
  result.then_inline([answer = std::move(answer), &s](const Future<Outcome>& f) {
    // A value to pack (a user type's adaptor, a tensor made contiguous) is packed on the pool,
    // not on the I/O thread; nil results and errors are answered where they completed.
    if (s.link->on_io_thread() && !f.has_error() && f.value().value) s.pool->post([answer, f] { answer(f); });
    else answer(f);
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

void on_request(RpcCore& core, RpcCore::State& s, Caller&& from_conn, Frames&& frames) {
  auto to = std::make_shared<const Caller>(std::move(from_conn));
  DecodeFailure why;
  auto decoded = decode_message(std::move(frames), s.opts.limits, &why);
  // No trust in identity fields: a message that names a member as its src must come on a
  // connection that member made. An outsider (src -1) stays an outsider: it can call, never act
  // as a member (hold forks, rejoin, enter autograd contexts as one). Dropped unanswered.
  const int claimed = decoded ? decoded->header.src : why.src;
  if (claimed >= 0 && claimed != to->rank) {
    const int conn = to->rank;
    count_bad(
        s,
        "a message claiming to come from rank " + std::to_string(claimed) + " on " +
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
      reply_error(core, s, to, req,
                  std::make_exception_ptr(BadCallError("message refused by " + s.opts.name + ": " + why.what)));
    }
    return;
  }
  auto m = std::make_shared<InMessage>(std::move(*decoded));
  attach_hooks(s, *m);
  const Header& h = m->header;
  if (h.kind == Kind::Request && h.fn == kForkFn) {  // a holder passes an RRef on
    try {
      auto ids = m->body_as<std::tuple<std::uint64_t, std::uint64_t, std::int32_t>>(nullptr, "RRef fork notice");
      s.objects.add_fork(std::get<0>(ids), std::get<1>(ids), std::get<2>(ids));
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
      (void)s.objects.release(std::get<0>(ids), std::get<1>(ids), h.src);  // a last reference goes here
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
  if (h.new_obj) s.objects.creating(h.new_obj, h.src);  // remote(): calls can queue on it from now on
  if (!h.obj && !h.new_obj && s.registry.runs_inline(h.fn)) {
    serve(core, s, to, m);
    return;
  }
  DISTRL_LOG(Debug, "rpc: request #" << h.call_id << " '" << h.fn << "' of " << s.worker_name(h.src) << " queued");
  s.pool->post([&core, &s, to, m] { serve(core, s, to, m); });
}

}  // namespace distrl::transport::detail
