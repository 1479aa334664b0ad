// The exported tuning hooks (A/B measurements and tests): each sets one field of the Overrides
// value that calls read once (dispatch/overrides.h).
#include "tuning.h"

#include <atomic>

#include "cake_rmsnorm/cake_rmsnorm.h"

namespace {

thread_local cake::Program g_program[2] = {};
thread_local bool g_exact_groups = true;
// Process-wide, unlike the two above: autograd runs backward calls on its own device
// threads, and the hook must reach those too.
std::atomic<int> g_one_launch{-1};
std::atomic<int> g_warp_chunks{-1};

}  // namespace

namespace cake {

Overrides current_overrides() {
  Overrides o;
  o.program[0] = g_program[0];
  o.program[1] = g_program[1];
  o.exact_groups = g_exact_groups;
  o.one_launch_chunks = g_one_launch.load(std::memory_order_relaxed);
  o.warp_chunk_rows = g_warp_chunks.load(std::memory_order_relaxed);
  return o;
}

}  // namespace cake

extern "C" {

cake_status_t cake_rmsnorm_set_program_override(int direction, int tpr, int cta, int vpt, int ctas_per_sm,
                                                int stages, int rows) {
  if (direction != 0 && direction != 1) return CAKE_ERR_INVALID_ARGUMENT;
  if (tpr == 0) {
    g_program[direction] = cake::Program{};
    return CAKE_OK;
  }
  const cake::Program p{tpr, cta, vpt, ctas_per_sm, stages, /*exact_instances=*/true, rows};
  // Route-independent checks now (the smaller, residual-free ring); the rest at each launch.
  if (!cake::program_valid(p, direction == 1, false)) return CAKE_ERR_INVALID_ARGUMENT;
  g_program[direction] = p;
  return CAKE_OK;
}

cake_status_t cake_rmsnorm_set_exact_groups(int enabled) {
  if (enabled != 0 && enabled != 1) return CAKE_ERR_INVALID_ARGUMENT;
  g_exact_groups = enabled == 1;
  return CAKE_OK;
}

cake_status_t cake_rmsnorm_set_warp_chunks(int min_chunk_rows) {
  if (min_chunk_rows < -1) return CAKE_ERR_INVALID_ARGUMENT;
  g_warp_chunks = min_chunk_rows;
  return CAKE_OK;
}

cake_status_t cake_rmsnorm_set_one_launch(int max_chunks) {
  if (max_chunks < -1 || max_chunks >= cake::kFinalizeManyLanesChunks) return CAKE_ERR_INVALID_ARGUMENT;
  g_one_launch = max_chunks;
  return CAKE_OK;
}

}  // extern "C"
