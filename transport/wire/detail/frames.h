// A message as the links carry it: its frames, and what reading a ring or socket gave. The
// seam's own buffer type, below the links and the ZeroMQ plumbing: the ZeroMQ link converts
// at its sockets (transport/zmq/zmq_context.h), the shared-memory link reads and writes the
// bytes, RPC encodes and decodes them; no zmq::message_t above the ZeroMQ link. Private to
// transport/.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace distrl::transport::detail {

// The shared part of a frame's bytes: a reference count and how to let go of them. A frame
// either owns its bytes (allocated with the block, right after it) or holds something that owns
// them (a tensor's storage, a received ZeroMQ message) until its last reference goes.
struct FrameBlock {
  std::atomic<std::uint32_t> refs{1};
  void (*destroy)(FrameBlock*) = nullptr;

  void retain() { refs.fetch_add(1, std::memory_order_relaxed); }
  void release() {
    if (refs.fetch_sub(1, std::memory_order_acq_rel) == 1) destroy(this);
  }
};

// One frame: up to kInline bytes inside the object (headers, routes, small arguments: no
// allocation), larger ones in a reference-counted block (one allocation when it owns them, none
// beyond the holder's when it shares another owner's). Copying shares a block's bytes (the
// copy and the original see the same bytes: write into a frame before sharing it, as the
// readers do); moving leaves the source empty. Not thread-safe as an object; the count is, so
// copies may live on different threads.
class Frame {
 public:
  static constexpr std::size_t kInline = 40;

  Frame() noexcept = default;
  // `size` bytes, not initialised (a reader fills them).
  explicit Frame(std::size_t size) : size_(size) {
    if (size_ <= kInline) return;
    void* mem = ::operator new(sizeof(OwnedBlock) + size_);
    block_ = new (mem) OwnedBlock;
    block_->destroy = [](FrameBlock* b) {
      static_cast<OwnedBlock*>(b)->~OwnedBlock();
      ::operator delete(b);
    };
    data_ = reinterpret_cast<char*>(mem) + sizeof(OwnedBlock);
  }
  // A copy of `size` bytes at data.
  Frame(const void* data, std::size_t size) : Frame(size) {
    if (size_) std::memcpy(this->data(), data, size_);
  }
  explicit Frame(std::string_view bytes) : Frame(bytes.data(), bytes.size()) {}
  // The bytes at data, not copied: `owner` (moved into the frame's block) keeps them alive and
  // is destroyed with the last reference. Small ones are copied instead (cheaper than a block).
  template <typename Owner>
  static Frame sharing(const void* data, std::size_t size, Owner&& owner) {
    if (size <= kInline) {
      Frame copy(data, size);
      std::decay_t<Owner> let_go(std::forward<Owner>(owner));  // taken either way, as the caller expects
      return copy;
    }
    Frame f;
    f.size_ = size;
    f.block_ = new Holder<std::decay_t<Owner>>(std::forward<Owner>(owner));
    f.data_ = static_cast<char*>(const_cast<void*>(data));
    return f;
  }

  Frame(const Frame& o) : size_(o.size_), block_(o.block_), data_(o.data_) {
    if (block_) block_->retain();
    else std::memcpy(inline_, o.inline_, size_);
  }
  Frame(Frame&& o) noexcept : size_(o.size_), block_(o.block_), data_(o.data_) {
    if (!block_) std::memcpy(inline_, o.inline_, size_);
    o.size_ = 0;
    o.block_ = nullptr;
  }
  Frame& operator=(Frame o) noexcept {
    swap(o);
    return *this;
  }
  ~Frame() {
    if (block_) block_->release();
  }

  void* data() { return block_ ? data_ : inline_; }
  const void* data() const { return block_ ? data_ : inline_; }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::string_view view() const { return {static_cast<const char*>(data()), size_}; }
  std::string to_string() const { return std::string(view()); }

  // For a link that hands the bytes to another owner without copying (ZeroMQ's zero-copy send):
  // a reference to the frame's block, or null when the bytes are inline (copy them). Pass a
  // non-null one to release() when done.
  FrameBlock* retain() const {
    if (block_) block_->retain();
    return block_;
  }
  static void release(FrameBlock* b) {
    if (b) b->release();
  }

 private:
  struct alignas(16) OwnedBlock : FrameBlock {};  // the bytes follow it, 16-aligned
  template <typename Owner>
  struct Holder : FrameBlock {
    explicit Holder(Owner&& o) : owner(std::move(o)) {
      destroy = [](FrameBlock* b) { delete static_cast<Holder*>(b); };
    }
    explicit Holder(const Owner& o) : owner(o) {
      destroy = [](FrameBlock* b) { delete static_cast<Holder*>(b); };
    }
    Owner owner;
  };

  void swap(Frame& o) noexcept {
    char tmp[kInline];
    std::memcpy(tmp, inline_, kInline);
    std::memcpy(inline_, o.inline_, kInline);
    std::memcpy(o.inline_, tmp, kInline);
    std::swap(size_, o.size_);
    std::swap(block_, o.block_);
    std::swap(data_, o.data_);
  }

  std::size_t size_ = 0;
  FrameBlock* block_ = nullptr;  // null: the bytes are inline_
  char* data_ = nullptr;         // the bytes, when block_
  alignas(8) char inline_[kInline] = {};
};

// One message: its frames.
using Frames = std::vector<Frame>;

// The bytes of a message's frames.
inline std::size_t frames_bytes(const Frames& frames) {
  std::size_t n = 0;
  for (const auto& f : frames) n += f.size();
  return n;
}

// What reading a channel or socket gave: nothing waiting, one message, or a message of more
// frames than allowed (read to its end and dropped).
enum class Received { Nothing, Message, TooManyParts };

}  // namespace distrl::transport::detail
