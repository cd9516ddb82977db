// The Work handles of the ZeroMQ process group: a queued collective (a Future), a point-to-
// point send (ZeroMQ done with the buffer) and a receive (the message copied in). Private to
// transport/collectives/.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "transport/collectives/detail/pg_mesh.h"
#include "transport/wire/detail/tensor_wire.h"
#include "transport/wire/detail/wire_codec.h"
#include "transport/runtime/future.h"

namespace distrl::transport::detail {

class FutureWork final : public Work {
 public:
  explicit FutureWork(Future<void> f) : f_(std::move(f)) {}
  bool is_completed() override { return f_.done(); }
  void wait() override { f_.value(); }

 private:
  Future<void> f_;
};

class SendWork final : public Work {
 public:
  SendWork(std::shared_ptr<SendTracker> t, Clock::time_point deadline, std::string what)
      : t_(std::move(t)), deadline_(deadline), what_(std::move(what)) {}
  bool is_completed() override { return t_->idle(); }
  void wait() override {
    if (!t_->wait_idle(deadline_)) throw TimeoutError(what_ + ": not delivered to ZeroMQ before the deadline");
  }

 private:
  std::shared_ptr<SendTracker> t_;
  Clock::time_point deadline_;
  std::string what_;
};

class RecvWork final : public Work {
 public:
  RecvWork(std::shared_ptr<Mesh> mesh, std::uint32_t group, int src, int tag, at::Tensor dst, at::Tensor staged,
           Clock::time_point deadline, std::string what)
      : mesh_(std::move(mesh)), group_(group), src_(src), tag_(tag), dst_(std::move(dst)), staged_(std::move(staged)),
        deadline_(deadline), what_(std::move(what)) {}
  bool is_completed() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return true;
    if (auto m = mesh_->try_recv(group_, src_, tag_)) complete(*m);
    return done_;
  }
  void wait() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_) std::rethrow_exception(error_);
    if (done_) return;
    try {
      PgMessage m = mesh_->recv(group_, src_, tag_, deadline_, what_);
      complete(m);
    } catch (...) {
      error_ = std::current_exception();
      throw;
    }
  }

 private:
  void complete(const PgMessage& m) {
    const at::Tensor& t = staged_.defined() ? staged_ : dst_;
    const std::size_t bytes = t.numel() * t.element_size();
    if (m.h.dtype != dtype_code(t.scalar_type()) || m.h.numel != t.numel() || m.payload.size() != bytes) {
      error_ = std::make_exception_ptr(MismatchError(what_ + ": the sender sent " + dtype_name(m.h.dtype) + "[" +
                                                     std::to_string(m.h.numel) + "], this rank expects " +
                                                     describe_tensor(t)));
      done_ = true;
      std::rethrow_exception(error_);
    }
    std::memcpy(t.data_ptr(), m.payload.data(), bytes);
    if (staged_.defined()) dst_.copy_(staged_);
    done_ = true;
  }
  std::mutex mu_;
  std::shared_ptr<Mesh> mesh_;
  std::uint32_t group_;
  int src_, tag_;
  at::Tensor dst_, staged_;
  Clock::time_point deadline_;
  std::string what_;
  bool done_ = false;
  std::exception_ptr error_;
};

}  // namespace distrl::transport::detail
