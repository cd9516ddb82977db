#include "common/error.h"
#include "agent/batcher.h"
