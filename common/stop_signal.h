// Graceful stop on SIGINT / SIGTERM, for tools whose long loops can end at a step boundary.
//
// install_stop_handlers() makes the first SIGINT or SIGTERM only set a flag that the loop polls
// (stop_signal()); the loop finishes its step, saves, flushes its outputs and the tool exits
// with stop_exit_code() (128 + the signal, as a shell reports a signal death). A second SIGINT
// or SIGTERM restores the default action and re-raises it: pressing Ctrl-C twice always gets out.
// A tool that never polls must not install the handlers (a signal would then be ignored).
//
// Thread-safety: everything here may be called from any thread; the handler itself only
// stores into a lock-free atomic (async-signal-safe).
#pragma once

#include <string>

namespace distrl {

// Idempotent. Call it before the loop that polls, after any work a signal should still end
// at once (argument parsing, rendezvous).
void install_stop_handlers();

// The signal that asked for a stop (SIGINT or SIGTERM), or 0.
int stop_signal();

// 128 + stop_signal(), or 0 when no stop was asked for.
int stop_exit_code();

// "SIGINT" / "SIGTERM" (for messages); "" when none.
const char* stop_signal_name();

// Tests: pretend that sig arrived (as the handler would), or forget it (sig 0).
void set_stop_signal_for_test(int sig);

// Socket files this process made (ipc:// endpoints, shared-memory link sockets, under /tmp):
// it removes them itself when it shuts down, but a SIGINT, SIGTERM or SIGHUP that ends it first
// (before install_stop_handlers, e.g. in the rendezvous, or the second one after) used to leave
// them behind. Registered, they are removed by such a signal too (async-signal-safe unlink, then
// the signal's default action). The first registration installs that handler for each of the
// three signals still at its default. Best effort: up to 64 paths of up to 255 bytes at once.
// SIGKILL cannot be caught: whoever started the process removes its files (remove_ipc_files_of).
void remove_on_fatal_signal(const char* path);
// Removed by the process itself: no longer the signal's to remove.
void forget_on_fatal_signal(const char* path);

// A registered path that a start which throws must not leave registered (nor on disk): on
// destruction, unless release()d, unlinks it and forgets it. An empty path does nothing.
class RegisteredPathGuard {
 public:
  explicit RegisteredPathGuard(std::string path) : path_(std::move(path)) {}
  ~RegisteredPathGuard();
  RegisteredPathGuard(const RegisteredPathGuard&) = delete;
  RegisteredPathGuard& operator=(const RegisteredPathGuard&) = delete;
  void release() { path_.clear(); }  // the owner removes it from now on

 private:
  std::string path_;
};

}  // namespace distrl
