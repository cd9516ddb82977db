#include "transport/link/shm/ring.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "common/error.h"

namespace distrl::transport::detail {
namespace {

bool power_of_two(std::uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

}  // namespace

std::size_t ring_segment_bytes(std::size_t capacity) { return kRingControlBytes + capacity; }

void init_ring(void* base, std::size_t capacity) {
  if (!power_of_two(capacity) || capacity < kRingControlBytes)
    throw ArgumentError("shared-memory ring: capacity " + std::to_string(capacity) +
                        " is not a power of two of at least 4096 bytes");
  auto* ctl = new (base) RingControl{};
  ctl->magic = kRingMagic;
  ctl->capacity = capacity;
}

RingEnd::RingEnd(void* base, std::size_t bytes, std::string peer) : peer_(std::move(peer)) {
  const std::uint64_t cap = bytes > kRingControlBytes ? bytes - kRingControlBytes : 0;
  ctl_ = static_cast<RingControl*>(base);
  if (!power_of_two(cap) || ctl_->magic != kRingMagic || ctl_->capacity != cap)
    corrupt("not a ring of " + std::to_string(cap) + " bytes (magic or capacity wrong)");
  data_ = static_cast<char*>(base) + kRingControlBytes;
  mask_ = cap - 1;
}

void RingEnd::corrupt(const std::string& what) const {
  throw ProtocolError("shared-memory ring of " + peer_ + ": " + what);
}

// ---- writer

std::size_t RingWriter::writable() {
  const std::uint64_t head = ctl_->head.load(std::memory_order_acquire);
  // The reader's index only moves forward and never past what we published.
  if (head < head_seen_ || head > published_ || tail_ - head > capacity())
    corrupt("the reader's index " + std::to_string(head) + " is impossible (written " + std::to_string(published_) +
            ", read before " + std::to_string(head_seen_) + ")");
  head_seen_ = head;
  return capacity() - static_cast<std::size_t>(tail_ - head);
}

std::size_t RingWriter::put(const void* p, std::size_t n) {
  n = std::min({n, writable(), capacity()});
  const std::size_t at = static_cast<std::size_t>(tail_ & mask_);
  const std::size_t first = std::min(n, capacity() - at);
  std::memcpy(data_ + at, p, first);
  std::memcpy(data_, static_cast<const char*>(p) + first, n - first);
  tail_ += n;
  return n;
}

void RingWriter::publish() {
  if (tail_ == published_) return;
  published_ = tail_;
  ctl_->tail.store(tail_, std::memory_order_release);
  ctl_->data_bell.ring(wake_fd_);
}

bool RingWriter::wait_writable(std::size_t want, std::chrono::steady_clock::time_point deadline, Spinner& spinner) {
  want = std::min(want, capacity());
  return wait_on(ctl_->space_bell, spinner, deadline, [&] { return writable() >= want; });
}

void RingWriter::close() {
  publish();
  ctl_->writer_closed.store(1, std::memory_order_release);
  ctl_->data_bell.ring(wake_fd_);
}

// ---- reader

std::size_t RingReader::readable() {
  const std::uint64_t tail = ctl_->tail.load(std::memory_order_acquire);
  if (tail < tail_seen_ || tail < head_ || tail - released_ > capacity())
    corrupt("the writer's index " + std::to_string(tail) + " is impossible (read " + std::to_string(head_) +
            ", written before " + std::to_string(tail_seen_) + ")");
  tail_seen_ = tail;
  return static_cast<std::size_t>(tail - head_);
}

void RingReader::get(void* out, std::size_t n) {
  const std::size_t at = static_cast<std::size_t>(head_ & mask_);
  const std::size_t first = std::min(n, capacity() - at);
  std::memcpy(out, data_ + at, first);
  std::memcpy(static_cast<char*>(out) + first, data_, n - first);
  head_ += n;
}

void RingReader::release() {
  if (head_ == released_) return;
  released_ = head_;
  ctl_->head.store(head_, std::memory_order_release);
  ctl_->space_bell.ring(wake_fd_);
}

bool RingReader::wait_readable(std::chrono::steady_clock::time_point deadline, Spinner& spinner) {
  return wait_on(ctl_->data_bell, spinner, deadline,
                 [&] { return readable() > 0 || ctl_->writer_closed.load(std::memory_order_acquire) != 0; });
}

bool RingReader::closed() { return ctl_->writer_closed.load(std::memory_order_acquire) != 0 && readable() == 0; }

// ---- messages

void MessageWriter::start(Frames&& frames) {
  if (frames.size() > kMaxRingFrames)
    throw ProtocolError("shared-memory ring: a message of " + std::to_string(frames.size()) + " frames (at most " +
                        std::to_string(kMaxRingFrames) + ")");
  header_.assign(1, kFrameMagic | static_cast<std::uint32_t>(frames.size()));
  for (const auto& f : frames) {
    if (f.size() > 0xFFFFFFFFull) throw ProtocolError("shared-memory ring: a frame of 4 GiB or more");
    header_.push_back(static_cast<std::uint32_t>(f.size()));
  }
  frames_ = std::move(frames);
  part_ = 0;
  offset_ = 0;
}

bool MessageWriter::pump(RingWriter& ring) {
  while (part_ <= frames_.size()) {
    const char* p = part_ == 0 ? reinterpret_cast<const char*>(header_.data())
                               : static_cast<const char*>(frames_[part_ - 1].data());
    const std::size_t n = part_ == 0 ? header_.size() * sizeof(std::uint32_t) : frames_[part_ - 1].size();
    offset_ += ring.put(p + offset_, n - offset_);
    if (offset_ < n) break;
    ++part_;
    offset_ = 0;
  }
  ring.publish();
  if (part_ <= frames_.size()) return false;
  frames_.clear();
  return true;
}

void MessageWriter::write(RingWriter& ring, Frames&& frames, std::chrono::steady_clock::time_point deadline,
                          Spinner& spinner) {
  start(std::move(frames));
  while (!pump(ring)) {
    if (!ring.wait_writable(ring.capacity() / 4, deadline, spinner))
      throw TimeoutError("shared-memory ring: the reader took nothing for the whole deadline (a message of " +
                         std::to_string(frames_bytes(frames_)) + " bytes stays unsent)");
  }
}

bool MessageDecoder::fill_word(RingReader& ring, std::uint32_t* word) {
  const std::size_t n = std::min(sizeof(std::uint32_t) - have_, ring.readable());
  ring.get(reinterpret_cast<char*>(&word_) + have_, n);
  have_ += n;
  if (have_ < sizeof(std::uint32_t)) return false;
  *word = word_;
  have_ = 0;
  return true;
}

bool MessageDecoder::read_header(RingReader& ring) {
  if (stage_ == Stage::Count) {
    std::uint32_t w = 0;
    if (!fill_word(ring, &w)) return false;
    if ((w & 0xFFFF0000u) != kFrameMagic)
      throw ProtocolError("shared-memory ring of " + ring.peer() +
                          ": a message does not start with the frame marker (read " + std::to_string(w) +
                          "): the writer's bytes are out of step");
    count_ = w & 0xFFFFu;
    lengths_.clear();
    stage_ = Stage::Lengths;
  }
  std::uint32_t len = 0;
  while (lengths_.size() < count_ && fill_word(ring, &len)) lengths_.push_back(len);
  if (lengths_.size() < count_) return false;
  std::uint64_t total = 0;
  for (auto l : lengths_) total += l;
  if (count_ > max_parts_ || total > max_bytes_) {
    dropped_ = count_ > max_parts_
                   ? "a message of " + std::to_string(count_) + " frames (at most " + std::to_string(max_parts_) + ")"
                   : "a message of " + std::to_string(total) + " bytes (at most " + std::to_string(max_bytes_) + ")";
    skip_ = total;
    stage_ = Stage::Skip;
    return true;
  }
  frames_.clear();
  frames_.reserve(count_);
  for (auto l : lengths_) frames_.emplace_back(static_cast<std::size_t>(l));
  part_ = 0;
  stage_ = Stage::Body;
  return true;
}

Received MessageDecoder::next(RingReader& ring, Frames& out) {
  const bool header = stage_ == Stage::Body || stage_ == Stage::Skip || read_header(ring);
  if (header && stage_ == Stage::Skip) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(skip_, ring.readable()));
    ring.skip(n);
    skip_ -= n;
    ring.release();
    if (skip_ != 0) return Received::Nothing;
    stage_ = Stage::Count;
    return Received::TooManyParts;
  }
  // The frames in order; have_ is how much of frames_[part_] is filled.
  while (header && part_ < frames_.size()) {
    auto& f = frames_[part_];
    const std::size_t n = std::min(f.size() - have_, ring.readable());
    ring.get(static_cast<char*>(f.data()) + have_, n);
    have_ += n;
    if (have_ < f.size()) break;
    ++part_;
    have_ = 0;
  }
  ring.release();
  if (!header || part_ < frames_.size()) return Received::Nothing;
  out = std::move(frames_);
  frames_.clear();
  stage_ = Stage::Count;
  return Received::Message;
}

bool MessageDecoder::read(RingReader& ring, Frames& out, std::chrono::steady_clock::time_point deadline,
                          Spinner& spinner) {
  for (;;) {
    const Received got = next(ring, out);
    if (got == Received::Message) return true;
    if (got == Received::TooManyParts) continue;
    if (ring.closed()) throw TransportError("shared-memory ring of " + ring.peer() + ": closed by the writer");
    if (!ring.wait_readable(deadline, spinner)) return false;
  }
}

}  // namespace distrl::transport::detail
