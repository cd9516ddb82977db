#include "training/stop_agreement.h"

#include <torch/torch.h>

#include "common/stop_signal.h"
#include "common/error.h"
#include "transport/collectives/process_group.h"
#include "transport/bootstrap/store.h"

namespace distrl::training {

bool stop_agreed(transport::ProcessGroup* pg) {
  if (!pg || pg->size() == 1) return stop_signal() != 0;
  auto flag = torch::tensor({stop_signal() != 0 ? 1.0 : 0.0}, torch::kDouble);
  pg->all_reduce(flag, transport::ReduceOp::Max);
  return flag.item<double>() > 0;
}

namespace {
constexpr const char* kStopKey = "run/stop";
}

StopFlag::StopFlag(transport::Store& store) : store_(store) {}

bool StopFlag::requested() {
  if (stop_) return true;
  if (stop_signal()) {
    stop_ = true;
    by_ = stop_signal_name();
    try {
      store_.set(kStopKey, by_, std::chrono::seconds(2));
    } catch (const Error&) {
      // The store is gone: the others learn of this stop when this rank leaves.
    }
    return true;
  }
  const auto now = std::chrono::steady_clock::now();
  if (now < next_poll_) return false;
  next_poll_ = now + kPollInterval;
  try {
    if (!store_.check({kStopKey}, kPollInterval)) return false;
    by_ = store_.get(kStopKey, kPollInterval) + " on another rank";
  } catch (const Error&) {
    return false;
  }
  stop_ = true;
  return true;
}

}  // namespace distrl::training
