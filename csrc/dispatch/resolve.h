// A call's launch, resolved once: the program (windows.h, or an override) and its plan
// (plan.h: the backward's whole, the forward's program and instance choices), and from them the
// kernel instance (kernel_key.h), its grid, block and shared memory, the parameters the kernel
// reads and the dw finalize after it. The C API resolves each call with
// the device's facts and executes the Launch (api/execute.cu); the plan query resolves with given
// facts. CUDA-free and torch-free.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "kernel_key.h"
#include "overrides.h"
#include "plan.h"

namespace cake {

struct Launch {
  KernelKey key;
  int64_t grid;
  int block;
  size_t smem;
  bool smem_ready;    // resolve asked the instance's residency at this size (DeviceFacts::resident)
  int tpr, stages;    // the kernel's parameters: threads a row, ring rows
  int64_t dx_ctas;    // the one launch's row CTAs, before its column CTAs
  bool finalize;      // the dw finalize runs after the kernel
  FinalizeKey fin;
  int64_t fin_grid;   // its CTAs (block: fin.cols * fin.lanes)
  Program program;    // the program the grid runs (its row group and CTA)
  Program pair_twin;  // the backward's row-pair twin, cta 0 where there is none
};

// A call as resolve sees it: the route, dtype codes (y: y's forward, g's backward), shape, and
// for the backward the dw chunking (params.h), whether dw is finalized (not: no dw, or partials
// kept for the caller) and the caller's grid cap (0: none).
// Built by field name (Call c; c.route = ...): every field has its plain value.
struct Call {
  Route route = Route::kFwd;
  int x = kBf16, y = kBf16, w = kBf16;
  int hidden = 0;
  int64_t rows = 0;
  int chunks = 0;
  bool finalize_dw = false;
  bool dw_in_w_dtype = false;
  int max_ctas = 0;
  int r = kAsX;  // the forward's residual dtype where not x's (FP32 x, a 16-bit branch)
  bool from_y = false;  // the backward from y (the memory-efficient mode)
};

// kGridTooLarge: a streaming grid past 2^31 - 1 CTAs (the launch would refuse it).
enum class Resolved { kOk, kBadProgram, kNoInstance, kGridTooLarge };

namespace detail {

constexpr KernelKey key16(Family f, const Call& c, int vectors) {
  return plain_key(f, c.x, c.x, c.w, has_residual(c.route), vectors);
}

// The dw finalize over c.chunks partials: dw in FP32, or rounded once to a 16-bit weight's dtype.
constexpr void set_finalize(const Call& c, int64_t sms, Launch* l) {
  const FinalizeShape s = finalize_shape(c.chunks, c.hidden, sms);
  l->finalize = c.finalize_dw;
  l->fin = FinalizeKey{s.cols, s.lanes, c.dw_in_w_dtype && c.w != kFp32 ? c.w : kFp32};
  l->fin_grid = ceil_div(c.hidden, s.cols);
}

inline Resolved forward16(const Call& c, const Program& table, const ArchTable& t, const DeviceFacts& d, Launch* l) {
  const bool w32 = c.w == kFp32, res = has_residual(c.route);
  const FwdPlan f = plan_forward(table, c.hidden, c.rows, w32, res, t);
  const Program& prog = f.program;
  const int64_t rpc = prog.cta / prog.tpr;  // rows a CTA, a row a group
  l->program = prog;
  l->block = prog.cta;
  l->tpr = prog.tpr;
  l->stages = prog.stages;
  KernelKey k = key16(Family::kFwdRing, c, prog.vpt);
  k.sync = f.sync;
  if (prog.stages != 0) {  // the ring kernel on a persistent grid
    l->key = k;
    l->smem = forward_smem_bytes(prog.cta, prog.vpt, prog.stages, res);
    l->grid = persistent_grid(ask_resident(d, k, prog.cta, l->smem), d.sms, prog.ctas_per_sm, ceil_div(c.rows, rpc));
    l->smem_ready = d.resident != nullptr;
    return compiled(k) ? Resolved::kOk : Resolved::kNoInstance;
  }
  // Streaming: a group a row (or group_rows rows), every row's group in the grid.
  k.family = Family::kFwdStream;
  k.wload = f.wload;
  l->grid = ceil_div(c.rows, rpc);
  if (l->grid > 0x7fffffff) return Resolved::kGridTooLarge;
  if (f.constant_width) {
    k.tpr = prog.tpr;
    if (prog.group_rows == kStreamRows && multirow_instance(w32, res, prog.vpt)) {
      k.rows = kStreamRows;
      l->grid = ceil_div(c.rows, rpc * kStreamRows);
    }
  }
  l->key = k;
  return compiled(k) ? Resolved::kOk : Resolved::kNoInstance;
}

// The backward's launch: its plan (plan.h, plan_backward) as it is.
inline Resolved backward16(const Call& c, const Program& table, const BwdLimits& lim, const DeviceFacts& d,
                           Launch* l) {
  BwdCall call;
  call.x = c.x;
  call.w = c.w;
  call.residual = has_residual(c.route);
  call.hidden = c.hidden;
  call.rows = c.rows;
  call.chunks = c.chunks;
  call.want_dw = c.finalize_dw;
  call.dw_in_w_dtype = c.dw_in_w_dtype;
  call.max_ctas = c.max_ctas;
  call.from_y = c.from_y;
  const BwdPlan b = plan_backward(call, table, lim, d);
  l->key = b.key;
  l->program = b.program;
  l->pair_twin = b.pair_twin;
  l->block = b.program.cta;
  l->tpr = b.program.tpr;
  l->stages = b.program.stages;
  l->grid = b.grid;
  l->smem = b.smem;
  l->smem_ready = b.smem_ready;
  l->dx_ctas = b.dx_ctas;
  l->finalize = b.finalize;
  l->fin = b.fin;
  l->fin_grid = b.fin_grid;
  return compiled(b.key) ? Resolved::kOk : Resolved::kNoInstance;
}

inline Resolved fp32(const Call& c, const ArchTable& t, const DeviceFacts& d, Launch* l) {
  const bool res = has_residual(c.route);
  const int g_bytes = c.y == kFp32 ? 4 : 2;
  const bool fwd = is_forward(c.route);
  const Fp32Plan f = fwd ? plan_fp32_forward(c.hidden, t) : plan_fp32_backward(c.hidden, g_bytes, res, t);
  KernelKey k{fwd ? Family::kFp32Fwd : Family::kFp32Bwd, kFp32, c.y, c.w, res, f.nv, 0, 1, WLoad::kFirst,
              GroupSync::kNamed, false};
  if (f.late_w) k.wload = WLoad::kAtUse;
  if (fwd && res && c.r != kFp32) k.r = c.r;
  k.from_y = !fwd && c.from_y;
  l->key = k;
  l->program = Program{f.tpr, f.cta, f.nv, 0, f.stages};
  l->block = f.cta;
  l->tpr = f.tpr;
  l->stages = f.stages;
  if (fwd) {
    l->grid = ceil_div(c.rows, f.cta / f.tpr);
  } else {
    l->smem = fp32_bwd_smem_bytes(f.cta, f.nv, f.stages, g_bytes, res);
    l->grid = ceil_div(c.chunks, f.cta / f.tpr);
    set_finalize(c, d.sms, l);
  }
  return compiled(k) ? Resolved::kOk : Resolved::kNoInstance;
}

}  // namespace detail

// The one resolution of a call, with the overrides' program and limits in place of the tables'.
inline Resolved resolve(const Call& c, const DeviceFacts& d, const Overrides& o, Launch* out) {
  *out = Launch{};
  const ArchTable t = device_table(d.sm, d.sms);  // the architecture's table at the device's SM count
  if (c.x == kFp32) return detail::fp32(c, t, d, out);
  Program table;
  if (!program_for(c.route, c.hidden, c.rows, d.sm, d.sms, o, &table)) return Resolved::kBadProgram;
  if (is_forward(c.route)) return detail::forward16(c, table, t, d, out);
  return detail::backward16(c, table, limits_for(t, o), d, out);
}

// The finalize of a caller's partials (cake_rmsnorm_dw_finalize), dw of dtype `out`.
constexpr Launch resolve_finalize(int chunks, int hidden, int out, int64_t sms) {
  Launch l{};
  const FinalizeShape s = finalize_shape(chunks, hidden, sms);
  l.finalize = true;
  l.fin = FinalizeKey{s.cols, s.lanes, out};
  l.fin_grid = ceil_div(hidden, s.cols);
  return l;
}

}  // namespace cake
