#include "common/error.h"
#include "net/link/pipe.h"
