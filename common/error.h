// distrl's exception hierarchy. Every error a user can see is one of these types, and its
// message names the place, what failed and the values involved.
#pragma once

#include <stdexcept>
#include <string>

namespace distrl {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Bad configuration: an unknown key, a wrong type, a value out of range, a bad flag.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// Malformed wire data: bad msgpack, wrong version, short frames, unknown dtype, bad arguments.
class ProtocolError : public Error {
 public:
  using Error::Error;
};

// The transport failed: a peer is gone, a socket failed, the agent is shut down.
class TransportError : public Error {
 public:
  using Error::Error;
};

// A wait ran past its deadline.
class TimeoutError : public TransportError {
 public:
  using TransportError::TransportError;
};

// The callee threw; carries the remote exception's type and message.
class RemoteError : public Error {
 public:
  RemoteError(std::string worker, std::string type, std::string message)
      : Error("remote error on " + worker + ": " + type + ": " + message), worker_(std::move(worker)),
        type_(std::move(type)), message_(std::move(message)) {}
  const std::string& worker() const { return worker_; }
  const std::string& type() const { return type_; }        // e.g. "std::invalid_argument"
  const std::string& message() const { return message_; }  // the remote what()

 private:
  std::string worker_, type_, message_;
};

// A function was called with arguments it cannot use (wrong sizes, dtypes, ranks).
class ArgumentError : public Error {
 public:
  using Error::Error;
};

class EnvError : public Error {
 public:
  using Error::Error;
};

class ModelError : public Error {
 public:
  using Error::Error;
};

// A run's output (checkpoint, metrics, summary) could not be written: the disk is full, a
// quota or the permissions refuse it. The message names the file, the reason and a fix.
class OutputError : public Error {
 public:
  using Error::Error;
};

namespace detail {
[[noreturn]] void check_failed(const char* expr, const char* file, int line, const std::string& msg);
}  // namespace detail

}  // namespace distrl

// For our own invariants only; user and network input raise typed errors instead.
#define DISTRL_CHECK(cond, msg)                                                    \
  do {                                                                             \
    if (!(cond)) ::distrl::detail::check_failed(#cond, __FILE__, __LINE__, (msg)); \
  } while (0)
