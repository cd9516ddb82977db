#include "net/rpc/detail/core.h"
