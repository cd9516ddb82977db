#include "net/rpc/detail/core.h"

int core() { return 0; }
