// The exported window-table and launch-plan queries.
#include "cake_rmsnorm/cake_rmsnorm.h"

#include <stdio.h>

#include "../dispatch/resolve.h"
#include "dtypes.h"
#include "facts.h"
#if CAKE_WITH_CUDA
#include "execute.h"
#endif

namespace {

cake_rmsnorm_group group_of(const cake::Program& p) {
  return cake_rmsnorm_group{p.tpr, p.cta / p.tpr, p.vpt, p.stages, p.group_rows};
}

}  // namespace

extern "C" int cake_rmsnorm_program_windows_sms(const char* route, int64_t hidden, int sm, int64_t sms,
                                                cake_rmsnorm_window* out, int capacity) {
  cake::Route r;
  if (!cake::parse_route(route, &r) || capacity < 0 || (capacity > 0 && out == nullptr) || sms < 0 ||
      sms > (int64_t(1) << 20))
    return -1;
  cake::Window tmp[16];
  const int n = cake::arch_known(sm) ? cake::windows_for(r, hidden, cake::device_table(sm, sms), tmp, 16) : -1;
  for (int i = 0; i < n && i < capacity && i < 16; ++i) {
    out[i].above = tmp[i].above;
    out[i].at_most = tmp[i].at_most;
    cake::program_name(tmp[i].program, out[i].program, sizeof(out[i].program));
    out[i].group = group_of(tmp[i].program);
  }
  return n;
}

extern "C" int cake_rmsnorm_program_windows(const char* route, int64_t hidden, int sm, cake_rmsnorm_window* out,
                                            int capacity) {
  return cake_rmsnorm_program_windows_sms(route, hidden, sm, 0, out, capacity);
}

namespace {

// A Launch as the plan fields: what the plan query reports and the last call recorded.
void launch_fields(const cake::Call& c, const cake::Launch& l, cake_rmsnorm_plan* out) {
  using cake::Family;
  const cake::KernelKey& k = l.key;
  const cake::Program& p = l.program;
  if (c.x == CAKE_DTYPE_FP32)
    snprintf(out->program, sizeof(out->program), "fp32_t%dx%d_v%d_s%d", p.tpr, p.cta / p.tpr, p.vpt, p.stages);
  else
    cake::program_name(p, out->program, sizeof(out->program));
  out->group = group_of(p);
  out->kernel = cake_rmsnorm_kernel{static_cast<int>(k.family), static_cast<cake_dtype_t>(k.x),
                                    static_cast<cake_dtype_t>(k.y), static_cast<cake_dtype_t>(k.w), k.residual,
                                    k.vectors, k.tpr, k.rows, static_cast<int>(k.wload),
                                    k.sync == cake::GroupSync::kWarp, k.pair,
                                    static_cast<cake_dtype_t>(cake::residual_dtype(k)), k.from_y};
  out->grid = l.grid;
  out->block = l.block;
  out->smem_bytes = static_cast<int64_t>(l.smem);
  const bool streaming = k.family == Family::kFwdStream || k.family == Family::kFp32Fwd;
  const bool one = k.family == Family::kBwdOne || k.family == Family::kBwdOneWide;
  out->exact = k.tpr != 0 && (k.family == Family::kFwdStream || k.family == Family::kBwdRows || one);
  if (cake::is_forward(c.route)) {
    out->streaming = streaming;
    out->warp_sync = c.x == CAKE_DTYPE_FP32 ? p.tpr <= 32 : k.sync == cake::GroupSync::kWarp;
    out->w_load = streaming ? static_cast<int>(k.wload) : -1;
    return;
  }
  out->w_load = -1;
  out->warp_sync = c.x == CAKE_DTYPE_FP32 && p.tpr <= 32;
  out->chunks = c.chunks;
  out->one_launch = one;
  out->dx_ctas = one ? l.dx_ctas : 0;
  out->dw_ctas = one ? l.grid - l.dx_ctas : 0;
  out->warp_chunks = k.family == Family::kBwdWarpChunks;
  out->finalize = l.finalize;
  out->finalize_cols = l.finalize ? l.fin.cols : 0;
  out->finalize_lanes = l.finalize ? l.fin.lanes : 0;
  out->finalize_grid = l.finalize ? l.fin_grid : 0;
  if (!one && !out->warp_chunks && l.pair_twin.cta > 0) {
    out->pair_min_resident = static_cast<int>(cake::pair_min_resident(l.pair_twin, c.chunks));
    out->pair_cta = l.pair_twin.cta;
  }
}

thread_local cake::Call g_last_call;
thread_local cake::Launch g_last_launch;
thread_local bool g_has_last = false;

}  // namespace

namespace cake {
bool device_facts_here(DeviceFacts* out) {
#if CAKE_WITH_CUDA
  *out = current_device_facts();
  return out->sm != 0;
#else
  (void)out;
  return false;
#endif
}

void record_launch(const Call& c, const Launch& l) {
  g_last_call = c;
  g_last_launch = l;
  g_has_last = true;
}
}  // namespace cake

extern "C" int cake_rmsnorm_last_launch(cake_rmsnorm_plan* out) {
  if (out == nullptr || !g_has_last) return -1;
  *out = cake_rmsnorm_plan{};
  launch_fields(g_last_call, g_last_launch, out);
  return 0;
}

extern "C" int cake_rmsnorm_launch_plan(const char* route, int64_t hidden, int64_t rows, int sm, int sms,
                                        cake_dtype_t x_dtype, cake_dtype_t w_dtype, cake_dtype_t y_dtype,
                                        cake_rmsnorm_plan* out) {
  cake::Route r;
  if (!cake::parse_route(route, &r) || out == nullptr || rows < 0 || sms < 0 ||
      !cake::dtypes_served(x_dtype, w_dtype, y_dtype) || !cake::width_served(hidden) ||
      (x_dtype == CAKE_DTYPE_FP32 && !cake::fp32_width_ok(hidden)))
    return -1;
  cake::DeviceFacts facts{sm, sms, nullptr};
  if (sm == 0 && !cake::device_facts_here(&facts)) return -1;
  cake::Window tmp[cake::kMaxWindows];
  if (!cake::arch_known(facts.sm) ||
      cake::windows_for(r, hidden, cake::device_table(facts.sm, facts.sms), tmp, cake::kMaxWindows) < 0)
    return -1;
  *out = cake_rmsnorm_plan{};
  out->table_measured = cake::arch_table(facts.sm).measured;
  const bool fwd = cake::is_forward(r);
  cake::Call call;
  call.route = r;
  call.x = x_dtype;
  call.y = y_dtype;
  call.w = w_dtype;
  call.hidden = static_cast<int>(hidden);
  call.rows = rows;
  call.chunks = fwd ? 0 : static_cast<int>(cake::backward_chunks(rows, hidden));
  call.finalize_dw = !fwd;
  cake::Launch l;
  const cake::Overrides none{};  // the plan of a call with no tuning hook set
  const cake::Resolved got = cake::resolve(call, facts, none, &l);
  if (got != cake::Resolved::kOk && got != cake::Resolved::kGridTooLarge) return -2;  // the plan, whose launch would fail
  launch_fields(call, l, out);
  return 0;
}
