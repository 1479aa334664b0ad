// The tuning hooks' current value (cake_rmsnorm_set_program_override, _set_exact_groups,
// _set_one_launch, _set_warp_chunks) as one Overrides value (dispatch/overrides.h). CUDA-free.
#pragma once

#include "../dispatch/overrides.h"
#include "cake_rmsnorm/cake_rmsnorm.h"

// The tuning hooks: exported for the benchmarks and tests (cake_rmsnorm.tuning, lab/), not part of
// the public C API (cake_rmsnorm.h declares the operator only).
extern "C" {

/* Tuning hook (program sweeps): while set, this thread's CUDA launches of `direction`
 * (0 forward, 1 backward) use the given program shape instead of the window table's: tpr
 * threads a row (a power of two), cta threads a CTA (a multiple of tpr and of 32), vpt
 * 16-byte vectors a thread carried through the shared-memory ring (forward 1, 2, 3, 4, 6, 8;
 * backward 1, 2, 3, 4), at most ctas_per_sm CTAs a SM (0: as many as fit), a ring of
 * `stages` rows (1..8) per row group (forward 0: the streaming kernel, no ring) and `rows`
 * rows a row group takes in the streaming forward (1, or 4 with stages 0: compiled for the
 * plain route's exact narrow groups with a 16-bit w or at most 3 vectors a thread; an FP32 w
 * at 4 vectors and the residual route run the group's ring program instead, other groups one
 * row a group; the same bits either way). tpr = 0 clears the override. A shape the kernels
 * cannot run for a call (its ring over the shared-memory limit) makes that call return
 * CAKE_ERR_INVALID_ARGUMENT. y, rstd and dx bits depend on (tpr, vpt); dw bits on no program
 * parameter. */
CAKE_API cake_status_t cake_rmsnorm_set_program_override(int direction, int tpr, int cta, int vpt,
                                                         int ctas_per_sm, int stages, int rows);

/* Tuning hook (A/B measurements and tests): enabled = 0 makes this thread's CUDA launches run
 * the runtime-width kernels where a program's row group has an exact, compile-time-width
 * kernel (groups of at most a warp whose vectors cover the row); 1 (the default) restores
 * them. The outputs' bits are the same either way. */
CAKE_API cake_status_t cake_rmsnorm_set_exact_groups(int enabled);

/* Tuning hook (A/B measurements and tests), process-wide (autograd runs backward calls on its
 * own threads): the CUDA backward calls that want dw run
 * the one-launch kernel (dx by rows and dw by columns in one grid, no workspace traffic) up to
 * max_chunks dw chunks (cake_rmsnorm_backward_chunks), and the main kernel and its finalize
 * above; 0 never runs it, -1 (the default) restores the architecture table's limit. At most
 * 1023. The outputs' bits are the same either way. */
CAKE_API cake_status_t cake_rmsnorm_set_one_launch(int max_chunks);

/* Tuning hook (A/B measurements and tests), process-wide: narrow rows whose row group covers
 * them exactly with groups of 4 or 8 threads (H 64, 96, 128 and 192 on the tables) run warp
 * chunks (a warp a dw chunk, its groups a row each) where a chunk holds at least
 * min_chunk_rows rows; 0 never, -1 (the default) restores the architecture table's bound.
 * The outputs' bits are the same either way. */
CAKE_API cake_status_t cake_rmsnorm_set_warp_chunks(int min_chunk_rows);

}  // extern "C"

namespace cake {

// This thread's program overrides and exact-group switch, with the process's backward limits.
Overrides current_overrides();

}  // namespace cake
