// Failure injection for tests: a named point in the code that a test arms from the environment
// to crash a process or lose a reply at an exact step (as FoundationDB's buggify or TiKV's
// fail-rs do), so the retry and restart paths can be tested deterministically.
//
//   DISTRL_FAILPOINTS="ps.shard.crash_before_answer@10#0,ps.client.resend@3"
//
// `name@N` fires the N-th time the point is reached (default: the first) and only then; `#R`
// restricts it to the process whose RANK is R. Points never fire in a process that a launcher
// restarted (DISTRL_RESTART_COUNT set and not 0), so a rank restarted by distrl-launch runs
// clean. What firing does is the caller's: the point only answers whether it fires now.
// Unset (every production run), a point costs one load of a flag. Thread-safe.
#pragma once

namespace distrl {

// True exactly when the point `name` fires now (see above). ConfigError for a malformed
// DISTRL_FAILPOINTS (at the first point reached).
bool failpoint(const char* name);

}  // namespace distrl
