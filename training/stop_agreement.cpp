#include "training/stop_agreement.h"

#include <torch/torch.h>

#include "common/stop_signal.h"
#include "transport/collectives/process_group.h"

namespace distrl::training {

bool stop_agreed(transport::ProcessGroup* pg) {
  if (!pg || pg->size() == 1) return stop_signal() != 0;
  auto flag = torch::tensor({stop_signal() != 0 ? 1.0 : 0.0}, torch::kDouble);
  pg->all_reduce(flag, transport::ReduceOp::Max);
  return flag.item<double>() > 0;
}

}  // namespace distrl::training
