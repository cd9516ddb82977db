#include "transport/collectives/detail/algorithms.h"

#include <algorithm>
#include <cstring>

#include "transport/collectives/detail/reduce_ops.h"
#include "transport/wire/detail/wire_codec.h"

namespace distrl::transport::detail {

using Kind = ProcessGroup::Kind;

std::string describe(const PgHeader& h) {
  if (h.coll == kP2P) return "a point-to-point message";
  std::string s = std::string(ProcessGroup::name(static_cast<Kind>(h.coll))) + " #" + std::to_string(h.seq) + " of " +
                  dtype_name(h.dtype) + "[" + std::to_string(h.numel) + "]";
  const auto k = static_cast<Kind>(h.coll);
  if (k == Kind::Reduce || k == Kind::AllReduce || k == Kind::ReduceScatter)
    s += std::string(" (") + to_string(static_cast<ReduceOp>(h.op)) + ")";
  if (is_rooted(k)) s += " root " + std::to_string(h.root);
  return s;
}

void check_collective_message(const PgHeader& h, const PgMessage& m, int from, std::uint32_t step, std::uint32_t chunk,
                              std::size_t bytes, const std::string& what) {
  const auto k = static_cast<Kind>(h.coll);
  const bool reduces = k == Kind::Reduce || k == Kind::AllReduce || k == Kind::ReduceScatter;
  if (m.h.coll != h.coll || m.h.seq != h.seq || m.h.dtype != h.dtype || m.h.numel != h.numel || m.h.root != h.root ||
      (reduces && m.h.op != h.op))
    throw MismatchError(what + ": rank " + std::to_string(from) + " called " + describe(m.h) + " but this rank " +
                        describe(h) +
                        "; every rank must issue the same collectives in the same order, with "
                        "tensors of one dtype and size");
  if (m.h.step != step || m.h.chunk != chunk || m.payload.size() != bytes)
    throw ProtocolError(what + ": rank " + std::to_string(from) + " sent step " + std::to_string(m.h.step) + "/" +
                        std::to_string(m.h.chunk) + " of " + std::to_string(m.payload.size()) + " bytes, expected " +
                        std::to_string(step) + "/" + std::to_string(chunk) + " of " + std::to_string(bytes));
}

PgMessage Exec::recv(int from, std::uint32_t step, std::uint32_t chunk, std::size_t bytes) {
  PgMessage m = mesh.recv(h.group, members[from], -1, deadline, what, h.seq);
  check_collective_message(h, m, members[from], step, chunk, bytes, what);  // named by its world rank
  return m;
}

void Exec::finish_sends() {
  if (!tracker->wait_idle(deadline))
    throw TimeoutError(what + ": ZeroMQ did not finish sending before the deadline (a peer stopped reading?)");
}

void agree_on_root(Exec& e) {
  const char none = 0;
  e.send(mod(e.me + 1, e.n), kRootCheckStep, 0, &none, 0, false);
  e.recv(mod(e.me - 1, e.n), kRootCheckStep, 0, 0);
}

static void reduce_msg(Exec& e, char* dst, const PgMessage& m, std::int64_t count) {
  reduce_into(e.op, e.type, dst, m.payload.data(), static_cast<std::size_t>(count));
}

// Recursive doubling on a whole buffer; sends copy (the buffer changes after each send).
void all_reduce_small(Exec& e, char* buf, std::int64_t numel) {
  const std::size_t bytes = static_cast<std::size_t>(numel) * e.esize;
  const int n = e.n, r = e.me;
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int rem = n - p;
  constexpr std::uint32_t kFinal = 0xffff;
  int vr;
  if (r < 2 * rem) {
    if (r % 2 == 0) {  // stand aside: hand the data to r+1, get the result back
      e.send(r + 1, 0, 0, buf, bytes, false);
      auto m = e.recv(r + 1, kFinal, 0, bytes);
      std::memcpy(buf, m.payload.data(), bytes);
      return;
    }
    reduce_msg(e, buf, e.recv(r - 1, 0, 0, bytes), numel);
    vr = r / 2;
  } else {
    vr = r - rem;
  }
  std::uint32_t step = 1;
  for (int mask = 1; mask < p; mask <<= 1, ++step) {
    const int pv = vr ^ mask;
    const int partner = pv < rem ? pv * 2 + 1 : pv + rem;
    e.send(partner, step, 0, buf, bytes, false);
    reduce_msg(e, buf, e.recv(partner, step, 0, bytes), numel);
  }
  if (e.op == ReduceOp::Avg) divide(e.type, buf, static_cast<std::size_t>(numel), n);
  if (r < 2 * rem) e.send(r - 1, kFinal, 0, buf, bytes, false);
}

// The ring over n segments, steps [k0, k1): steps 0..n-2 reduce-scatter (rank r ends with
// segment r reduced), steps n-1..2n-3 all-gather.
void ring(Exec& e, const std::vector<char*>& seg, const std::vector<std::int64_t>& len, int k0, int k1,
          std::size_t chunk_bytes) {
  const int n = e.n, r = e.me, next = mod(r + 1, n), prev = mod(r - 1, n);
  const std::int64_t chunk = std::max<std::int64_t>(1, static_cast<std::int64_t>(chunk_bytes / e.esize));
  auto for_chunks = [&](int s, auto&& f) {
    std::uint32_t c = 0;
    for (std::int64_t off = 0; off < len[s]; off += chunk, ++c)
      f(c, seg[s] + off * static_cast<std::int64_t>(e.esize), std::min(chunk, len[s] - off));
  };
  for_chunks(mod(r - k0 - 1, n),
             [&](std::uint32_t c, char* p, std::int64_t cnt) { e.send(next, k0, c, p, cnt * e.esize); });
  for (int k = k0; k < k1; ++k) {
    for_chunks(mod(r - k - 2, n), [&](std::uint32_t c, char* p, std::int64_t cnt) {
      const std::size_t bytes = cnt * e.esize;
      auto m = e.recv(prev, k, c, bytes);
      if (k < n - 1) {
        reduce_msg(e, p, m, cnt);
        if (k == n - 2 && e.op == ReduceOp::Avg) divide(e.type, p, static_cast<std::size_t>(cnt), n);
      } else {
        std::memcpy(p, m.payload.data(), bytes);
      }
      if (k + 1 < k1) e.send(next, k + 1, c, p, bytes);
    });
  }
  e.finish_sends();
}

// n near-equal segments of one buffer.
void split(char* base, std::int64_t numel, std::size_t esize, int n, std::vector<char*>* seg,
           std::vector<std::int64_t>* len) {
  const std::int64_t q = numel / n, extra = numel % n;
  std::int64_t off = 0;
  for (int i = 0; i < n; ++i) {
    len->push_back(q + (i < extra ? 1 : 0));
    seg->push_back(base + off * static_cast<std::int64_t>(esize));
    off += len->back();
  }
}

void run_broadcast(Exec& e, char* buf, std::int64_t numel, int root, std::size_t small_bytes, std::size_t chunk_bytes) {
  const int n = e.n, vr = mod(e.me - root, n);
  auto real = [&](int v) { return mod(v + root, n); };
  const std::size_t bytes = numel * e.esize;
  if (bytes <= small_bytes) {  // binomial tree
    int mask = 1;
    while (mask < n) {
      if (vr & mask) {
        auto m = e.recv(real(vr - mask), 0, 0, bytes);
        std::memcpy(buf, m.payload.data(), bytes);
        break;
      }
      mask <<= 1;
    }
    for (mask >>= 1; mask > 0; mask >>= 1)
      if (vr + mask < n) e.send(real(vr + mask), 0, 0, buf, bytes);
  } else {  // chain root -> root+1 -> ..., chunk by chunk
    const std::size_t chunk = std::max<std::size_t>(e.esize, chunk_bytes / e.esize * e.esize);
    std::uint32_t c = 0;
    for (std::size_t off = 0; off < bytes; off += chunk, ++c) {
      const std::size_t b = std::min(chunk, bytes - off);
      if (vr > 0) std::memcpy(buf + off, e.recv(real(vr - 1), 0, c, b).payload.data(), b);
      if (vr + 1 < n) e.send(real(vr + 1), 0, c, buf + off, b);
    }
  }
  e.finish_sends();
}

void run_reduce(Exec& e, char* work, std::int64_t numel, int root) {
  const int n = e.n, vr = mod(e.me - root, n);
  auto real = [&](int v) { return mod(v + root, n); };
  const std::size_t bytes = numel * e.esize;
  for (int mask = 1; mask < n; mask <<= 1) {
    if (vr & mask) {
      e.send(real(vr - mask), 0, 0, work, bytes);
      break;
    }
    if (vr + mask < n) reduce_msg(e, work, e.recv(real(vr + mask), 0, 0, bytes), numel);
  }
  if (vr == 0 && e.op == ReduceOp::Avg) divide(e.type, work, static_cast<std::size_t>(numel), n);
  e.finish_sends();
}

}  // namespace distrl::transport::detail
