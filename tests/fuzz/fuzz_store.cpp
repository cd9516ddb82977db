// The rendezvous store's request handling (StoreCore, the state machine behind StoreServer's
// socket): a sequence of requests from up to 4 peers. Every answer must be a well-formed
// reply, the store must stay inside its limits, and every parked wait must be answered once
// its deadline passes.
#include "tests/fuzz/fuzz_input.h"
#include "transport/bootstrap/detail/store_core.h"

namespace distrl::fuzz {
namespace {

using namespace transport::detail;

const transport::StoreLimits kLimits{64, 16 << 10, 4 << 10, 16};

std::string request(int peer, int op, std::uint64_t id, std::vector<std::string> keys, std::string value = {},
                    std::int64_t delta = 0, std::int64_t timeout_ms = 0) {
  StoreRequest q;
  q.op = op;
  q.id = id;
  q.keys = std::move(keys);
  q.value = std::move(value);
  q.delta = delta;
  q.timeout_ms = timeout_ms;
  return std::string(1, static_cast<char>(peer)) + pack_store_message(q);
}

}  // namespace

int fuzz_store(const std::uint8_t* data, std::size_t size) {
  quiet_logs();
  std::size_t replies = 0;
  StoreCore core(kLimits, [&](const std::string& peer, std::string&& bytes) {
    StoreReply r;
    FUZZ_CHECK(unpack_store_message(bytes.data(), bytes.size(), &r));
    FUZZ_CHECK(r.status >= kStoreOk && r.status <= kStoreBad);
    FUZZ_CHECK(peer.size() == 1);
    ++replies;
  });
  // Each frame: one byte naming the peer (0..3), then the request's bytes.
  for (auto& part : split_frames(data, size, 64)) {
    if (part.empty()) continue;
    const std::string peer(1, static_cast<char>('a' + (part[0] & 3)));
    core.on_request(peer, part.data() + 1, part.size() - 1);
    FUZZ_CHECK(core.keys() <= kLimits.max_keys);
    FUZZ_CHECK(core.bytes() <= kLimits.max_bytes);
    FUZZ_CHECK(core.waiting() <= kLimits.max_waiters);
  }
  // Waits are bounded by their (clamped) timeouts: two days on, none may be left.
  core.expire(StoreClock::now() + std::chrono::hours(48));
  FUZZ_CHECK(core.waiting() == 0);
  return 0;
}

std::vector<std::string> seeds_store() {
  std::vector<std::string> out;
  auto join = [](std::vector<std::string> reqs) { return join_frames(reqs); };
  out.push_back(
      join({request(0, kStoreSet, 1, {"addr/0"}, "tcp://10.0.0.1:29500"), request(1, kStoreGet, 1, {"addr/0"}),
            request(1, kStoreCheck, 2, {"addr/0", "addr/1"}), request(2, kStorePing, 1, {})}));
  out.push_back(join({request(0, kStoreWait, 1, {"a", "b"}, {}, 0, 30000), request(1, kStoreSet, 1, {"a"}, "1"),
                      request(2, kStoreSet, 1, {"b"}, "2")}));
  out.push_back(join({request(0, kStoreAdd, 1, {"n"}, {}, 1), request(1, kStoreAdd, 1, {"n"}, {}, 41),
                      request(2, kStoreAdd, 1, {"n"}, {}, INT64_MAX)}));
  // the case that once killed the server thread: add() on a key holding text
  out.push_back(join({request(0, kStoreSet, 1, {"k"}, "abc"), request(0, kStoreAdd, 2, {"k"}, {}, 1)}));
  out.push_back(join({request(3, kStoreGet, 9, {"never"}, {}, 0, 5), request(3, 99, 10, {}),
                      request(1, kStoreSet, 3, {"big"}, std::string(5000, 'x'))}));
  return out;
}

}  // namespace distrl::fuzz

DISTRL_FUZZ_ENTRY(distrl::fuzz::fuzz_store)
