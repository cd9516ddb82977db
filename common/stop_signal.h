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

}  // namespace distrl
