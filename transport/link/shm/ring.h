// A single-producer, single-consumer byte ring in a shared-memory segment, and the framing of
// messages over it. Segment layout: one page of control words (RingControl), then the data,
// a power of two bytes. The writer owns `tail`, the reader `head` (both count bytes since the
// start, never wrap); each side keeps its own copy and treats the other's as untrusted input:
// an index that moves backwards or claims more than the ring holds is a ProtocolError naming
// the peer, never a read out of bounds (every access is masked into the data) and never a
// wait without end (every wait has a deadline). Bytes are copied out of the ring before they
// are parsed, so a peer that rewrites them afterwards changes nothing.
//
// Thread-safety: one writing thread per RingWriter, one reading thread per RingReader; the
// two may live in different processes. Private to transport/ (the shared-memory link).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "transport/link/link.h"
#include "transport/link/shm/futex.h"

namespace distrl::transport::detail {

constexpr std::uint64_t kRingMagic = 0x31474e4952534444ull;  // "DDSRING1"
constexpr std::size_t kRingControlBytes = 4096;

struct RingControl {
  std::uint64_t magic;     // written by the creator; checked by both ends
  std::uint64_t capacity;  // data bytes; each end also derives it from its own mapping's size
  alignas(64) std::atomic<std::uint64_t> tail;
  alignas(64) std::atomic<std::uint64_t> head;
  alignas(64) Doorbell data_bell;                        // the reader sleeps here for data
  alignas(64) Doorbell space_bell;                       // the writer sleeps here for space
  alignas(64) std::atomic<std::uint32_t> writer_closed;  // an orderly end, for the reader's error
  // Raised by the writing process's I/O thread every second while it runs (ShmLink's liveness:
  // a process stopped or hung stops raising it, as ZeroMQ's heartbeats stop).
  std::atomic<std::uint64_t> writer_beat;
};
static_assert(sizeof(RingControl) <= kRingControlBytes, "RingControl fits its page");

// The segment size for a ring of `capacity` data bytes (a power of two, at least a page).
std::size_t ring_segment_bytes(std::size_t capacity);
// Writes the control page of a new ring over zeroed memory of ring_segment_bytes(capacity).
void init_ring(void* base, std::size_t capacity);

// The state both ends share: the control page, the data, the capacity from our own mapping.
class RingEnd {
 public:
  std::size_t capacity() const { return static_cast<std::size_t>(mask_ + 1); }
  RingControl* control() const { return ctl_; }
  const std::string& peer() const { return peer_; }
  // The other end's eventfd, when it waits in poll(2) instead of on the futex (not owned; -1:
  // the futex). Set once the handshake brought it.
  void set_peer_wake_fd(int fd) { wake_fd_ = fd; }

 protected:
  RingEnd() = default;
  // Checks the layout of a mapped ring of `bytes` (ProtocolError naming `peer` when wrong).
  RingEnd(void* base, std::size_t bytes, std::string peer);
  [[noreturn]] void corrupt(const std::string& what) const;
  RingControl* ctl_ = nullptr;
  char* data_ = nullptr;
  std::uint64_t mask_ = 0;
  int wake_fd_ = -1;
  std::string peer_;  // for errors: "rank 1's requests"
};

class RingWriter : public RingEnd {
 public:
  RingWriter() = default;
  RingWriter(void* base, std::size_t bytes, std::string peer) : RingEnd(base, bytes, std::move(peer)) {}
  // Bytes that can be written now (ProtocolError when the reader's head is impossible).
  std::size_t writable();
  // Copies up to n bytes (at most writable()); invisible to the reader until publish().
  std::size_t put(const void* p, std::size_t n);
  // Makes the bytes put so far visible and wakes the reader if it sleeps.
  void publish();
  // Until at least min(want, capacity) bytes are writable; false at the deadline.
  bool wait_writable(std::size_t want, std::chrono::steady_clock::time_point deadline, Spinner& spinner);
  // Tells the reader that no more will come (it reports an orderly close, not corruption).
  void close();

 private:
  std::uint64_t tail_ = 0, published_ = 0, head_seen_ = 0;
};

class RingReader : public RingEnd {
 public:
  RingReader() = default;
  RingReader(void* base, std::size_t bytes, std::string peer) : RingEnd(base, bytes, std::move(peer)) {}
  // Bytes that can be read now (ProtocolError when the writer's tail is impossible).
  std::size_t readable();
  // Copies n bytes (at most readable()) out; the space is returned to the writer by release().
  void get(void* out, std::size_t n);
  // Returns the space read so far to the writer and wakes it if it waits for space.
  void release();
  // Reads past n bytes (at most readable()) without copying them.
  void skip(std::size_t n) { head_ += n; }
  // Until something is readable; false at the deadline.
  bool wait_readable(std::chrono::steady_clock::time_point deadline, Spinner& spinner);
  // True when the writer closed the ring and everything it wrote was read.
  bool closed();
  // Bytes read (or skipped) since the ring began: with readable(), where everything published
  // so far ends.
  std::uint64_t position() const { return head_; }

 private:
  std::uint64_t head_ = 0, released_ = 0, tail_seen_ = 0;
};

// A message in a ring: one word (kFrameMagic | frame count), a u32 length per frame, then the
// frames' bytes, all host byte order (both ends are on one host).
constexpr std::uint32_t kFrameMagic = 0xD15A0000u;
constexpr std::uint32_t kMaxRingFrames = 0xFFFF;

// Writes one message, as far as the ring has room, without blocking. Owns the message until
// it is written. One per RingWriter.
class MessageWriter {
 public:
  bool idle() const { return frames_.empty(); }
  // The bytes a message takes in a ring: its header (a word, a length per frame) and frames.
  static std::size_t wire_bytes(const Frames& frames) {
    return sizeof(std::uint32_t) * (1 + frames.size()) + frames_bytes(frames);
  }
  // Takes frames (idle() must be true). Throws ProtocolError for more than kMaxRingFrames
  // frames or a frame of 4 GiB or more.
  void start(Frames&& frames);
  // Writes what fits and publishes it; true when the whole message is written (idle again).
  bool pump(RingWriter& ring);
  // start + pump until written; TimeoutError (the message partly written: the ring is no
  // longer usable) at the deadline.
  void write(RingWriter& ring, Frames&& frames, std::chrono::steady_clock::time_point deadline, Spinner& spinner);

 private:
  Frames frames_;
  std::vector<std::uint32_t> header_;
  std::size_t part_ = 0, offset_ = 0;  // part 0 is the header, then frames_[part - 1]
};

// Reads messages back, checking them as untrusted input: the marker, then the frame count and
// every length, all before anything is allocated. A well-framed message over the limits (more
// than max_parts frames or max_message_bytes in all) is read past and dropped, not kept (as
// ZeroMQ drops a message of too many parts); a stream out of step is a ProtocolError. One per
// RingReader.
class MessageDecoder {
 public:
  MessageDecoder(std::size_t max_parts, std::size_t max_message_bytes)
      : max_parts_(max_parts), max_bytes_(max_message_bytes) {}
  // Reads what the ring holds of the current message: Message (in out) when one is complete,
  // TooManyParts when one over the limits was read past (what() says which), Nothing while the
  // ring holds only part of one. Throws ProtocolError naming the ring's peer.
  Received next(RingReader& ring, Frames& out);
  // Blocking form: until a whole message arrived (false at the deadline, the part read kept;
  // messages over the limits are skipped).
  bool read(RingReader& ring, Frames& out, std::chrono::steady_clock::time_point deadline, Spinner& spinner);
  // What the last TooManyParts dropped: "a message of 9 frames (at most 8)".
  const std::string& dropped() const { return dropped_; }
  // True while a message is begun but not finished.
  bool mid_message() const { return stage_ != Stage::Count || have_ != 0; }

 private:
  enum class Stage { Count, Lengths, Body, Skip };
  // Reads and checks the count word and the lengths, then allocates the frames (or prepares to
  // skip the message); false when the ring ran dry first.
  bool read_header(RingReader& ring);
  bool fill_word(RingReader& ring, std::uint32_t* word);
  std::size_t max_parts_, max_bytes_;
  Stage stage_ = Stage::Count;
  std::uint32_t count_ = 0, word_ = 0;
  std::size_t have_ = 0;    // bytes of the current word or frame already read
  std::size_t part_ = 0;    // the frame being filled
  std::uint64_t skip_ = 0;  // bytes of a dropped message still to read past
  std::vector<std::uint32_t> lengths_;
  Frames frames_;
  std::string dropped_;
};

}  // namespace distrl::transport::detail
