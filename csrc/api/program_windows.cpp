// The exported window-table and launch-plan queries.
#include "cake_rmsnorm/cake_rmsnorm.h"

#include <stdio.h>

#include "../dispatch/overrides.h"
#include "dtypes.h"

namespace {

cake_rmsnorm_group group_of(const cake::Program& p) {
  return cake_rmsnorm_group{p.tpr, p.cta / p.tpr, p.vpt, p.stages, p.group_rows};
}

}  // namespace

extern "C" int cake_rmsnorm_program_windows(const char* route, int64_t hidden, int sm,
                                            cake_rmsnorm_window* out, int capacity) {
  cake::Route r;
  if (!cake::parse_route(route, &r) || capacity < 0 || (capacity > 0 && out == nullptr)) return -1;
  cake::Window tmp[16];
  const int n = cake::windows_for(r, hidden, sm, tmp, 16);
  for (int i = 0; i < n && i < capacity && i < 16; ++i) {
    out[i].above = tmp[i].above;
    out[i].at_most = tmp[i].at_most;
    cake::program_name(tmp[i].program, out[i].program, sizeof(out[i].program));
    out[i].group = group_of(tmp[i].program);
  }
  return n;
}

namespace {


// The backward's dw fields, common to both activation dtypes.
void dw_fields(int64_t rows, int64_t hidden, int sms, cake_rmsnorm_plan* out) {
  out->chunks = cake::backward_chunks(rows, hidden);
  const cake::FinalizeShape f = cake::finalize_shape(static_cast<int>(out->chunks), static_cast<int>(hidden), sms);
  out->finalize_cols = f.cols;
  out->finalize_lanes = f.lanes;
}

int fp32_plan(cake::Route r, int64_t hidden, int64_t rows, int sm, int sms, int y_dtype, cake_rmsnorm_plan* out) {
  if (!cake::fp32_width_ok(hidden)) return -1;
  const int h = static_cast<int>(hidden);
  const cake::ArchTable& t = cake::arch_table(sm);
  const cake::Fp32Plan f = cake::is_forward(r) ? cake::plan_fp32_forward(h, t)
                                               : cake::plan_fp32_backward(h, y_dtype == CAKE_DTYPE_FP32 ? 4 : 2,
                                                                          cake::has_residual(r), t);
  snprintf(out->program, sizeof(out->program), "fp32_t%dx%d_v%d_s%d", f.tpr, f.cta / f.tpr, f.nv, f.stages);
  out->group = cake_rmsnorm_group{f.tpr, f.cta / f.tpr, f.nv, f.stages, 1};
  out->warp_sync = f.tpr <= 32;
  if (cake::is_forward(r)) {
    out->streaming = 1;
    out->w_load = f.late_w ? 2 : 0;
  } else {
    out->w_load = -1;
    dw_fields(rows, hidden, sms, out);
  }
  return 0;
}

}  // namespace

extern "C" int cake_rmsnorm_launch_plan(const char* route, int64_t hidden, int64_t rows, int sm, int sms,
                                        cake_dtype_t x_dtype, cake_dtype_t w_dtype, cake_dtype_t y_dtype,
                                        cake_rmsnorm_plan* out) {
  cake::Route r;
  cake::Window tmp[cake::kMaxWindows];
  if (!cake::parse_route(route, &r) || out == nullptr || rows < 0 || sms < 0 ||
      !cake::dtypes_served(x_dtype, w_dtype, y_dtype) ||
      cake::windows_for(r, hidden, sm, tmp, cake::kMaxWindows) < 0)
    return -1;
  *out = cake_rmsnorm_plan{};
  out->table_measured = cake::arch_table(sm).measured;
  if (x_dtype == CAKE_DTYPE_FP32) return fp32_plan(r, hidden, rows, sm, sms, y_dtype, out);
  const bool w_fp32 = w_dtype == CAKE_DTYPE_FP32;
  const int h = static_cast<int>(hidden);
  const cake::Overrides none{};  // the plan of a call with no tuning hook set
  cake::Program table;
  cake::program_for(r, hidden, rows, sm, none, &table);
  const bool res = cake::has_residual(r);
  if (cake::is_forward(r)) {
    const cake::FwdPlan f = cake::plan_forward(table, h, rows, w_fp32, res, cake::arch_table(sm));
    if (f.program.stages == 0 && !cake::forward_stream_instance(f.wload, f.sync, w_fp32, res, f.program.vpt))
      return -2;  // a plan with no compiled instance: the launcher would refuse it (plan.h)
    cake::program_name(f.program, out->program, sizeof(out->program));
    out->group = group_of(f.program);
    out->streaming = f.program.stages == 0;
    out->exact = f.exact;
    out->warp_sync = f.sync == cake::GroupSync::kWarp;
    out->w_load = f.program.stages != 0 ? -1 : static_cast<int>(f.wload);
    return 0;
  }
  dw_fields(rows, hidden, sms, out);
  const int c = static_cast<int>(out->chunks);
  const int64_t q = c > 0 ? rows / c : 0;
  const int rem = c > 0 ? static_cast<int>(rows % c) : 0;
  const cake::ArchTable& t = cake::arch_table(sm);
  // The launchers' plan, with dw wanted, no grid cap, and no residency known (so no pairs);
  // the pair twin and the residency from which it runs are reported beside it.
  const cake::BwdCall call{h, rows, c, q, rem, true, 0};
  const cake::BwdPlan b = cake::plan_backward(table, call, cake::limits_for(t, none), sms,
                                              [](const cake::Program&) { return int64_t(0); });
  cake::program_name(b.program, out->program, sizeof(out->program));
  out->group = group_of(b.program);
  out->exact = b.exact;
  out->w_load = -1;
  if (b.one_launch) {
    out->one_launch = 1;
    out->dx_ctas = b.dx_ctas;
    out->dw_ctas = b.dw_ctas;
    return 0;
  }
  out->warp_chunks = b.warp_chunks;
  cake::Program twin = table;
  if (!b.warp_chunks && cake::pair_candidate(table, q, rem, &twin)) {
    out->pair_min_resident = static_cast<int>(cake::pair_min_resident(twin, c));
    out->pair_cta = twin.cta;
  }
  return 0;
}
