// The pack scopes: this thread's message being packed (tensor frames, RRef forks) or read.
#include "transport/wire/detail/message.h"

namespace distrl::transport::detail {
namespace {

thread_local PackScope* t_pack = nullptr;
thread_local UnpackScope* t_unpack = nullptr;

}  // namespace

PackScope::PackScope(std::vector<OutFrame>* f, CallEngine* a, int dest)
    : frames(f), agent(a), dest_rank(dest), previous_(t_pack) {
  t_pack = this;
}
PackScope::~PackScope() { t_pack = previous_; }

UnpackScope::UnpackScope(const InFrames* f, std::shared_ptr<CallEngine> a)
    : frames(f), agent(std::move(a)), previous_(t_unpack) {
  t_unpack = this;
}
UnpackScope::~UnpackScope() { t_unpack = previous_; }

PackScope* current_pack_scope() { return t_pack; }
const UnpackScope* current_unpack_scope() { return t_unpack; }

CallEngine* current_pack_agent(int* dest_rank) {
  if (!t_pack) return nullptr;
  *dest_rank = t_pack->dest_rank;
  return t_pack->agent;
}
std::shared_ptr<CallEngine> current_unpack_agent() { return t_unpack ? t_unpack->agent : nullptr; }

}  // namespace distrl::transport::detail
