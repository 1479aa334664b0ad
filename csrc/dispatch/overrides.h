// What the tuning hooks may change about a call, as one value, and the two places it meets the
// tables: a call's program and the backward's limits. resolve.h (every call, and the plan query
// with no overrides) goes through these. CUDA-free and torch-free.
#pragma once

#include <stdint.h>

#include "plan.h"
#include "windows.h"

namespace cake {

// Each field's default leaves the table's choice (api/tuning.cpp holds the current value:
// cake_rmsnorm_set_program_override, _set_exact_groups, _set_one_launch, _set_warp_chunks).
struct Overrides {
  Program program[2] = {};     // forward, backward; tpr 0: the window table's
  bool exact_groups = true;    // false: the runtime-width kernels where an exact group has its own
  int one_launch_chunks = -1;  // -1: ArchTable::bwd_one_launch_chunks
  int warp_chunk_rows = -1;    // -1: ArchTable::bwd_warp_chunk_rows
};

// The program a launch of `rows` rows on `route` uses on architecture `sm` with `sms` SMs; false
// if an overriding program cannot run the route (its ring too large for the residual stream, or
// a pairs group narrower than the row).
inline bool program_for(Route route, int64_t hidden, int64_t rows, int sm, int64_t sms, const Overrides& o,
                        Program* out) {
  const bool backward = !is_forward(route);
  const Program& p = o.program[backward ? 1 : 0];
  *out = p.tpr == 0 ? select_program(route, hidden, rows, sm, sms) : p;
  out->exact_instances = o.exact_groups;
  return p.tpr == 0 || (program_valid(p, backward, has_residual(route), arch_table(sm).smem_per_cta) &&
                        holds_pairs_row(p, backward, hidden));
}

// The backward's one-launch and warp-chunk limits on architecture table `t`.
constexpr BwdLimits limits_for(const ArchTable& t, const Overrides& o) {
  return BwdLimits{o.one_launch_chunks >= 0 ? o.one_launch_chunks : t.bwd_one_launch_chunks,
                   o.warp_chunk_rows >= 0 ? o.warp_chunk_rows : t.bwd_warp_chunk_rows, t.bwd_warp_chunks_cta,
                   t.smem_per_cta};
}

}  // namespace cake
