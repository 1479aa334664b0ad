// The exported tuning hooks (A/B measurements and tests) and the per-call program they steer.
#include "tuning.h"

#include <atomic>

#include "cake_rmsnorm/cake_rmsnorm.h"

namespace {

thread_local cake::Program g_override[2] = {};
thread_local bool g_exact_groups = true;
// Process-wide, unlike the two above: autograd runs backward calls on its own device
// threads, and the hook must reach those too. -1: the architecture table's limit.
std::atomic<int> g_one_launch{-1};
std::atomic<int> g_warp_chunks{-1};

}  // namespace

namespace cake {

bool program_for_call(Route route, int64_t hidden, int64_t rows, int sm, Program* out) {
  const bool backward = !is_forward(route);
  const Program& o = g_override[backward ? 1 : 0];
  *out = o.tpr == 0 ? select_program(route, hidden, rows, sm) : o;
  out->exact = g_exact_groups;
  return o.tpr == 0 || program_valid(o, backward, has_residual(route));
}

BwdLimits backward_limits(int sm) {
  const ArchTable& t = arch_table(sm);
  const int o = g_one_launch.load(std::memory_order_relaxed), w = g_warp_chunks.load(std::memory_order_relaxed);
  return BwdLimits{o >= 0 ? o : t.bwd_one_launch_chunks, w >= 0 ? w : t.bwd_team_chunk_rows};
}

}  // namespace cake

extern "C" {

cake_status_t cake_rmsnorm_set_program_override(int direction, int tpr, int cta, int vpt, int ctas_per_sm,
                                                int stages, int rows) {
  if (direction != 0 && direction != 1) return CAKE_ERR_INVALID_ARGUMENT;
  if (tpr == 0) {
    g_override[direction] = cake::Program{};
    return CAKE_OK;
  }
  const cake::Program p{tpr, cta, vpt, ctas_per_sm, stages, /*exact=*/true, rows};
  // Route-independent checks now (the smaller, residual-free ring); the rest at each launch.
  if (!cake::program_valid(p, direction == 1, false)) return CAKE_ERR_INVALID_ARGUMENT;
  g_override[direction] = p;
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
  if (max_chunks < -1 || max_chunks >= cake::kFinalizeWideChunks) return CAKE_ERR_INVALID_ARGUMENT;
  g_one_launch = max_chunks;
  return CAKE_OK;
}

}  // extern "C"
