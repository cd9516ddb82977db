// SIGINT/SIGTERM in lock-step training (DDP, the pipeline's stages): every rank must stop after
// the same step, or the others wait in a collective for a rank that left. The ranks agree with
// one 8-byte all_reduce (max of "a signal arrived here"), called at the same step on every rank
// (every kStopCheckSteps steps: cheap next to a step's own collectives).
// Call install_stop_handlers() (common/stop_signal.h) before the loop.
#pragma once

namespace distrl::transport {
class ProcessGroup;
}

namespace distrl::training {

constexpr long long kStopCheckSteps = 10;

// True on every rank when any rank got SIGINT/SIGTERM. A collective: all ranks of pg call it
// at the same point. pg null or of size 1: this process's own stop_signal().
bool stop_agreed(transport::ProcessGroup* pg);

}  // namespace distrl::training
