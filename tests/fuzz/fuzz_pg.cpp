// The process group's receive path as rank 0 of a 4-rank world meets it: a message of
// [48-byte header, payload] that the link read on a connection of member `from` (the first
// input frame, as text: the rank the link gives, -1 for no member's) is admitted or dropped
// (admit_pg_message), then checked
// against the collective this rank runs (check_collective_message: all_reduce #7 of
// float32[64], sum) and, if it passes, reduced into the local buffer. A forged header may be
// dropped or refused with a typed error; it must never read past its payload.
#include <cstring>

#include <ATen/ATen.h>

#include "common/error.h"
#include "tests/fuzz/fuzz_input.h"
#include "transport/collectives/detail/algorithms.h"
#include "transport/collectives/detail/reduce_ops.h"
#include "transport/wire/detail/tensor_wire.h"

namespace distrl::fuzz {
namespace {

using namespace transport::detail;
using Kind = transport::ProcessGroup::Kind;

constexpr int kRank = 0, kWorld = 4;
constexpr std::int64_t kNumel = 64;

PgHeader expected() {
  PgHeader h;
  h.magic = kPgMagic;
  h.kind = static_cast<std::uint8_t>(PgKind::Data);
  h.coll = static_cast<std::uint8_t>(Kind::AllReduce);
  h.dtype = dtype_code(at::kFloat);
  h.op = static_cast<std::uint8_t>(transport::ReduceOp::Sum);
  h.group = 0;
  h.seq = 7;
  h.numel = kNumel;
  return h;
}

std::string header_bytes(const PgHeader& h) { return std::string(reinterpret_cast<const char*>(&h), sizeof h); }

}  // namespace

int fuzz_pg(const std::uint8_t* data, std::size_t size) {
  quiet_logs();
  auto parts = split_frames(data, size, 5);
  if (parts.empty()) return 0;
  // The member rank the link read the connection as: a small number, anything else none.
  int from = -1;
  if (!parts[0].empty() && parts[0].size() <= 3 && parts[0].find_first_not_of("0123456789") == std::string::npos)
    from = std::stoi(parts[0]);
  Frames frames;
  for (std::size_t i = 1; i < parts.size(); ++i) frames.emplace_back(std::string_view(parts[i]));
  std::string why;
  auto m = admit_pg_message(frames, from, kRank, kWorld, &why);
  if (!m) {
    FUZZ_CHECK(!why.empty());
    return 0;
  }
  FUZZ_CHECK(m->h.src > 0 && m->h.src < kWorld && m->h.src == from);
  (void)describe(m->h);
  if (m->h.kind == static_cast<std::uint8_t>(PgKind::Abort)) return 0;  // its text is only shown
  std::vector<float> buf(kNumel, 1.0f);
  try {
    check_collective_message(expected(), *m, m->h.src, 0, 0, kNumel * sizeof(float), "fuzz all_reduce");
  } catch (const Error&) {
    return 0;  // a mismatch or a wrong size: the collective fails with this error
  }
  FUZZ_CHECK(m->payload.size() == kNumel * sizeof(float));
  reduce_into(transport::ReduceOp::Sum, at::kFloat, buf.data(), m->payload.data(), kNumel);
  return 0;
}

std::vector<std::string> seeds_pg() {
  std::vector<std::string> out;
  PgHeader h = expected();
  h.src = 1;
  const std::string payload(kNumel * sizeof(float), '\0');
  out.push_back(join_frames({"1", header_bytes(h), payload}));
  PgHeader other = h;
  other.src = 2;
  other.seq = 8;
  other.coll = static_cast<std::uint8_t>(Kind::Broadcast);
  other.root = 3;
  out.push_back(join_frames({"2", header_bytes(other), std::string(12, '\1')}));
  PgHeader p2p = h;
  p2p.src = 3;
  p2p.coll = kP2P;
  p2p.tag = 5;
  out.push_back(join_frames({"3", header_bytes(p2p), "hello"}));
  PgHeader abort = h;
  abort.kind = static_cast<std::uint8_t>(PgKind::Abort);
  out.push_back(join_frames({"1", header_bytes(abort), "TimeoutError\nrank 1 gave up"}));
  out.push_back(join_frames({"2", header_bytes(h), payload}));   // src 1 on rank 2's connection
  out.push_back(join_frames({"-1", header_bytes(h), payload}));  // src 1 on a stranger's
  return out;
}

}  // namespace distrl::fuzz

DISTRL_FUZZ_ENTRY(distrl::fuzz::fuzz_pg)
