#include "agent/batcher.h"
#include "agent/detail/state.h"
