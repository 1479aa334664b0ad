// The tuning hooks' state (this thread's program override, exact-group switch and one-launch
// limit, set through cake_rmsnorm_set_program_override / _set_exact_groups / _set_one_launch) and the one place a call's
// program is resolved: the dispatch tables' choice, or the override. CUDA-free.
#pragma once

#include <stdint.h>

#include "../dispatch/windows.h"

namespace cake {

// The program a launch of `rows` rows on `route` uses on architecture `sm`, with this
// thread's tuning applied; false if an override cannot run the route (its ring too large).
bool program_for_call(Route route, int64_t hidden, int64_t rows, int sm, Program* out);

// The dw chunk count up to which the backward calls on architecture `sm` run the
// one-launch kernel (dispatch/plan.h, one_launch_fits): the table's, or the tuning hook's.
int one_launch_limit(int sm);

}  // namespace cake
