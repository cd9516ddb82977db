// A shared-memory ring as its reader meets a writer that misbehaves: the input is a script of
// what the writer does — write raw bytes, write a well-formed message, move its index anywhere
// (backwards, past the capacity), close — interleaved with reads. The reader must end every
// script with whole messages within its limits or a typed error (ProtocolError, or
// TransportError for a ring closed mid-message), never a read out of bounds, a crash or a hang.
#include <cstdlib>
#include <cstring>
#include <memory>

#include "common/error.h"
#include "tests/fuzz/fuzz_input.h"
#include "transport/link/shm/ring.h"

namespace distrl::fuzz {
namespace {

using namespace transport::detail;

constexpr std::size_t kCap = 4096, kMaxParts = 8, kMaxBytes = 1 << 16;

// The ring's memory, reused by every run (the control page is rewritten each time).
void* ring_memory() {
  static void* mem = [] {
    void* p = std::aligned_alloc(4096, ring_segment_bytes(kCap));
    return p;
  }();
  return mem;
}

struct Script {
  const std::uint8_t* p;
  std::size_t left;
  bool more() const { return left > 0; }
  std::uint8_t byte() {
    if (left == 0) return 0;
    --left;
    return *p++;
  }
  std::uint64_t number(int bytes) {
    std::uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= std::uint64_t(byte()) << (8 * i);
    return v;
  }
  std::string bytes(std::size_t n) {
    n = std::min(n, left);
    std::string s(reinterpret_cast<const char*>(p), n);
    p += n;
    left -= n;
    return s;
  }
};

// Reads every whole message the ring holds now, checking each against the limits.
void drain(RingReader& reader, MessageDecoder& decoder) {
  Frames out;
  for (Received got; (got = decoder.next(reader, out)) != Received::Nothing;) {
    if (got == Received::TooManyParts) {
      FUZZ_CHECK(!decoder.dropped().empty());
      continue;
    }
    FUZZ_CHECK(out.size() <= kMaxParts);
    FUZZ_CHECK(frames_bytes(out) <= kMaxBytes);
  }
}

}  // namespace

int fuzz_ring(const std::uint8_t* data, std::size_t size) {
  quiet_logs();
  void* mem = ring_memory();
  std::memset(mem, 0, kRingControlBytes);
  init_ring(mem, kCap);
  RingWriter writer(mem, ring_segment_bytes(kCap), "the fuzzed writer");
  RingReader reader(mem, ring_segment_bytes(kCap), "the fuzzed writer");
  MessageDecoder decoder(kMaxParts, kMaxBytes);
  MessageWriter message;
  auto* ctl = writer.control();
  Script s{data, size};
  try {
    while (s.more()) {
      switch (s.byte() % 7) {
        case 0: {  // raw bytes
          const std::string b = s.bytes(s.number(2) % 2048);
          writer.put(b.data(), b.size());
          writer.publish();
          break;
        }
        case 1: {  // a well-formed message, as much of it as fits
          Frames f;
          const std::size_t n = s.byte() % 4;
          for (std::size_t i = 0; i < n; ++i) {
            const std::string b = s.bytes(s.number(2) % 1024);
            f.emplace_back(b.data(), b.size());
          }
          if (message.idle()) message.start(std::move(f));
          message.pump(writer);
          break;
        }
        case 2:  // the writer's index, anywhere
          ctl->tail.store(s.number(8));
          break;
        case 3:  // the writer's index nudged (a few bytes ahead or behind)
          ctl->tail.fetch_add(static_cast<std::uint64_t>(static_cast<std::int8_t>(s.byte())));
          break;
        case 4:  // the reader's index, as the writer meets a reader that misbehaves
          if (s.byte() % 2 == 0) ctl->head.store(s.number(8));
          else ctl->head.fetch_add(static_cast<std::uint64_t>(static_cast<std::int8_t>(s.byte())));
          break;
        case 5: writer.close(); break;
        default: drain(reader, decoder);
      }
    }
    drain(reader, decoder);
  } catch (const ProtocolError&) {
    // The reader refused the writer (the link drops the peer): fine.
  } catch (const TransportError&) {}
  return 0;
}

std::vector<std::string> seeds_ring() {
  // A message of two frames ("hdr", "body"), read; raw garbage; an index moved backwards; the
  // reader's index moved back under the writer; a message cut by a close.
  std::string one;
  one += '\x01';  // a message
  one += '\x02';  // two frames
  one += std::string("\x03\x00", 2) + "hdr";
  one += std::string("\x04\x00", 2) + "body";
  one += '\x06';  // drain
  std::string garbage = one + '\x00' + std::string("\x08\x00", 2) + "garbage!" + '\x06';
  std::string backwards = one + '\x03' + '\xfe' + '\x06';
  std::string head_back = one + '\x04' + '\x01' + '\xf0' + one;
  std::string closed = one + '\x00' + std::string("\x04\x00", 2) + std::string("\x01\x00\x5a\xd1", 4) + '\x05' + '\x06';
  return {one, garbage, backwards, head_back, closed};
}

}  // namespace distrl::fuzz

DISTRL_FUZZ_ENTRY(distrl::fuzz::fuzz_ring)
