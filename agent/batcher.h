// Gathers act requests from many observers into one forward pass.
//
// A batch closes when (1) every active observer has a request in it, (2) it holds max_batch
// rows, (3) max_wait has passed since its first request, so a slow or dead observer delays the
// others by at most max_wait (PyTorch's tutorial waits for all, forever), or (4) flush() is
// called: with Close::WhenRead the agent calls it once the RPC I/O thread has read every request
// waiting for it, so a batch is whatever arrived together and nobody waits for the slowest.
// The forward runs on the thread that closed the batch, one of five: the thread of the request
// that completed it (the RPC I/O loop when served inline, else a pool thread), the batcher's
// timer thread (max_wait), the caller of set_active(..., false) or of flush(). Each request's
// future gets its own rows of the answer, completed on that same thread. docs/threads.md says
// why the I/O loop may run it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "rl/protocol.h"
#include "transport/runtime/future.h"

namespace distrl::agent {

struct BatchOptions {
  // AllAsked: lock-step like the tutorial (every active observer, bounded by max_wait).
  // WhenRead: also closes at flush(): the requests that arrived together, no waiting.
  enum class Close { AllAsked, WhenRead };
  int max_batch = 256;                       // rows per forward pass
  std::chrono::microseconds max_wait{5000};  // since the batch's first request
  Close close = Close::AllAsked;
  // Rows one request may carry (an observer sends one per env); more is refused with a
  // ProtocolError, so that one request cannot stall every observer's batch. 0: no cap.
  int max_request_rows = 0;
};

struct BatchStats {
  std::uint64_t batches = 0, requests = 0, rows = 0;
  std::uint64_t closed_all_asked = 0, closed_full = 0, closed_timeout = 0, closed_inactive = 0, closed_read = 0;
  // Where a request's time in the agent goes, summed: from submit() to its batch closing
  // (queue_us, per request), the forward passes (forward_us, per batch), and each request's wait
  // for its batch's forward (forward_wait_us: a batch's forward counted once per request in it).
  double queue_us = 0, forward_us = 0, forward_wait_us = 0;
  double mean_rows() const { return batches ? static_cast<double>(rows) / batches : 0.0; }
};

class Batcher {
 public:
  // Answers `rows` observations laid out row after row in obs (rows * obs_dim floats) with
  // one action and log-prob per row. May throw: every request of the batch gets the error.
  using Forward = std::function<rl::ActReply(const float* obs, int rows)>;

  Batcher(int obs_dim, int num_observers, BatchOptions options, Forward forward);
  ~Batcher();
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // One observer's request; obs holds rows * obs_dim floats. Throws distrl::Error for a bad
  // observer id or a row count that does not match obs_dim.
  transport::Future<rl::ActReply> submit(int observer, std::vector<float> obs);
  // A batch waits only for the observers that play (set_active: the pool's say; false for one
  // dropped or not started) and whose step is not waiting (set_waiting: the serving path's say,
  // while a step is held at a synchronous round's end or parked by a full queue). Two flags, so
  // that neither side can undo the other's.
  void set_active(int observer, bool active);
  void set_waiting(int observer, bool waiting);
  int active_count() const;
  // Closes the open batch now if it holds a request (Close::WhenRead; a no-op otherwise) and
  // runs its forward on the calling thread.
  void flush();
  BatchStats stats() const;
  // Fails pending requests and stops the timer thread. Idempotent.
  void stop();

 private:
  struct Pending {
    int rows;
    transport::Promise<rl::ActReply> promise;
    std::chrono::steady_clock::time_point arrived;  // in submit()
  };
  struct Batch {
    std::vector<float> obs;
    std::vector<Pending> requests;
    int rows = 0;
    int active_asked = 0;
    std::chrono::steady_clock::time_point first;
  };
  enum class Reason { AllAsked, Full, Timeout, Inactive, Read };

  // Closes the open batch if a condition holds; returns it (empty when it stays open).
  bool should_close_locked() const;
  Batch take_locked(Reason why);
  void run(Batch& batch);  // then hands the batch's buffers back for the next one
  void recycle(Batch&& batch, double forward_us);
  void timer_loop();
  void update(int observer, std::vector<std::uint8_t>* flags, bool value);

  const int obs_dim_;
  const BatchOptions options_;
  const Forward forward_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::uint8_t> active_;  // playing_ and not waiting_: the observers a batch waits for
  std::vector<std::uint8_t> playing_, waiting_;
  std::vector<std::uint8_t> asked_;  // observer has a request in the open batch
  int active_count_ = 0;
  Batch open_;
  Batch spare_;  // a finished batch's buffers (capacity kept): no allocations per batch
  BatchStats stats_;
  bool stopped_ = false;
  bool timer_idle_ = false;  // the timer waits with no deadline: the next open batch must wake it
  std::thread timer_;
};

}  // namespace distrl::agent
