#include "net/plumbing.h"
#include "net/coll/group.h"
