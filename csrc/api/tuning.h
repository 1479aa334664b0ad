// The tuning hooks' current value (cake_rmsnorm_set_program_override, _set_exact_groups,
// _set_one_launch, _set_warp_chunks) as one Overrides value (dispatch/overrides.h). CUDA-free.
#pragma once

#include "../dispatch/overrides.h"

namespace cake {

// This thread's program overrides and exact-group switch, with the process's backward limits.
Overrides current_overrides();

}  // namespace cake
