// The tuning hooks' state (this thread's program override and exact-group switch, the
// process's one-launch and warp-chunk bounds: cake_rmsnorm_set_program_override,
// _set_exact_groups, _set_one_launch, _set_warp_chunks) and the one place a call's
// program is resolved: the dispatch tables' choice, or the override. CUDA-free.
#pragma once

#include <stdint.h>

#include "../dispatch/windows.h"
#include "launch.h"

namespace cake {

// The program a launch of `rows` rows on `route` uses on architecture `sm`, with this
// thread's tuning applied; false if an override cannot run the route (its ring too large).
bool program_for_call(Route route, int64_t hidden, int64_t rows, int sm, Program* out);

// The backward's kernel choices on architecture `sm` (api/launch.h, BwdLimits): the table's,
// or the tuning hooks'.
BwdLimits backward_limits(int sm);

}  // namespace cake
