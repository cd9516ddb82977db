// The NCCL backend (DISTRL_NCCL builds): stub for now
#include "common/config.h"
#include "transport/process_group.h"

namespace distrl::transport::detail {

std::shared_ptr<ProcessGroup> make_nccl_process_group(Store&, int, int, const ProcessGroupOptions&,
                                                      std::shared_ptr<void>) {
  throw ConfigError("process group: this build has no NCCL backend; use backend zmq");
}

}  // namespace distrl::transport::detail
