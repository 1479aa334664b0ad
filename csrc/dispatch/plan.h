// One launch's plan: everything about a call that is not its data, resolved from the window
// tables (windows.h) and the call's shape, weight dtype and route. resolve.h maps a plan to its
// kernel key and grid; the two device facts a plan needs (the SM count, and a pair kernel's
// resident CTAs) are passed in. CUDA-free and torch-free, so the C API's plan query
// (program_windows.cpp) reports what a call runs.
#pragma once

#include <stdint.h>

#include "../kernels/fp32_width.h"
#include "kernel_key.h"
#include "programs.h"

namespace cake {

// ---- forward ----------------------------------------------------------------------------

// A program of several rows a group with no instance for them runs the ring program of its row
// group instead, with the same bits: with an FP32 w that ring measured faster than one row a
// group (docs/perf/dispatch.md#rows-fallback).
constexpr Program without_rows(Program prog, bool w_fp32, bool residual, const ArchTable& t = kSm90) {
  if (prog.group_rows == 1 || multirow_instance(w_fp32, residual, prog.vpt)) return prog;
  Program ring = shaped(Program{prog.tpr, 0, prog.vpt, 0, 1}, forward_groups(prog.tpr, t), t.fwd_cta_cap, false, t);
  ring.exact_instances = prog.exact_instances;
  return ring;
}

struct FwdPlan {
  Program program;  // what the grid runs (group_rows: the rows a streaming group takes)
  GroupSync sync;   // kWarp: groups of at most a warp with up to 4 vectors a thread
  WLoad wload;      // the streaming kernel's w load (the ring kernel holds w a CTA)
  bool constant_width;  // the constant-width instance (streaming exact narrow groups)
};

// Groups of at most a warp with up to 4 vectors a thread run the instance without barrier or
// scratch (GroupSync::kWarp) and its lean row code; the same bits either way. Where the
// streaming kernel loads w, the fastest on the plain route (docs/perf/dispatch.md#wload): late at
// VPT 6 and 8 (at each use with an FP32 w) and for groups of two warps or more (an FP32 w there
// only from 2^26 elements); narrow groups and the residual route load w first, where the exact
// narrow groups take their constant-width instance.
constexpr FwdPlan plan_forward(const Program& table, int hidden, int64_t rows, bool w_fp32, bool residual,
                               const ArchTable& t = kSm90) {
  FwdPlan f{without_rows(table, w_fp32, residual, t), GroupSync::kNamed, WLoad::kFirst, false};
  if (f.program.vpt <= 4 && f.program.tpr <= 32) f.sync = GroupSync::kWarp;
  if (f.program.stages != 0) return f;  // the ring kernel
  const bool many_vectors = f.program.vpt >= 6;
  const bool multiwarp_group = f.program.tpr >= 64 && (!w_fp32 || rows * hidden >= t.fp32_w_late_elems);
  if (!residual && many_vectors && w_fp32) {
    f.wload = WLoad::kAtUse;
  } else if (!residual && (many_vectors || multiwarp_group)) {
    f.wload = WLoad::kBeforeSum;
  } else {
    f.constant_width = f.sync == GroupSync::kWarp && f.program.exact_instances && exact_cover(f.program.tpr, f.program.vpt, hidden);
  }
  // Only the constant-width instances take several rows a group; any other runs one.
  if (!f.constant_width || !multirow_instance(w_fp32, residual, f.program.vpt)) f.program.group_rows = 1;
  return f;
}

// ---- backward ---------------------------------------------------------------------------

// Columns a finalize CTA takes: 8 (256 threads) while that grid still fits one CTA a SM, so
// narrow rows' partials are pulled by four times the SMs; 32 (1024 threads) otherwise; 128
// lanes (from kFinalizeManyLanesChunks chunks) take 8 columns, whose warps read whole 32-byte
// sectors of each chunk's row. Same bits either way. 8 columns past one CTA a SM measured
// slower (docs/perf/dispatch.md#finalize-columns).
struct FinalizeShape {
  int cols, lanes;
};
constexpr FinalizeShape finalize_shape(int chunks, int hidden, int64_t sms) {
  if (finalize_lanes(chunks) == kFinalizeLanesMany) return FinalizeShape{8, kFinalizeLanesMany};
  return FinalizeShape{sms > 0 && (hidden + 7) / 8 <= sms ? 8 : 32, kFinalizeLanes};
}

// Whether the backward's instance for `prog` is an exact group's (the same bits, no masks or
// rest loops): 32-thread groups, paired or not, and 16-thread groups unpaired.
constexpr bool backward_exact(const Program& prog, int hidden, bool pair) {
  return prog.exact_instances && exact_cover(prog.tpr, prog.vpt, hidden, true) && (prog.tpr == 32 || (!pair && prog.tpr == 16));
}

// Row pairs (the kernel's PAIR), for chunks of at most two rows (small T) and groups of a warp
// or more (named barriers count whole warps): two groups share each chunk, the CTA doubled when
// it holds one group, up to kMaxBwdThreads; the ring holds one row (a group has no next row to
// prefetch). The candidate program, or false.
constexpr bool pair_candidate(const Program& prog, int64_t chunk_rows, int chunk_rem, Program* out) {
  if (prog.tpr < 32 || chunk_rows + (chunk_rem > 0 ? 1 : 0) != 2) return false;
  Program q = prog;
  if ((q.cta / q.tpr) % 2 != 0) q.cta *= 2;
  q.stages = 1;
  if (q.cta > kMaxBwdThreads) return false;
  *out = q;
  return true;
}
// The resident CTAs of the pair kernel from which a twin's grid fills at most half of them.
constexpr int64_t pair_min_resident(const Program& q, int chunks) { return 2 * ceil_div(chunks, q.cta / q.tpr / 2); }
// Pairs run only while their grid fills at most half the resident CTAs of the pair kernel: a
// fuller grid leaves the finalize no room to wait beside it (PDL) and loses the second row's
// prefetch (docs/perf/dispatch.md#pair-bound). dx and dw have the same bits either way.
constexpr bool pair_fits(const Program& q, int chunks, int64_t resident) {
  return resident > 0 && pair_min_resident(q, chunks) <= resident;
}

// The one-launch backward (kernels/backward_small.cuh) where dw has at most `limit` chunks
// (ArchTable::bwd_one_launch_chunks, or the tuning hook's; 0: never) of at most two rows:
// row CTAs compute dx, one row a group, and column CTAs sum dw from g, x and rstd in the chunk
// order (the same bits), so neither partials nor the finalize exist. A column lane sums
// chunks / 32 chunks in a chain, which is why it stops at a few chunks (docs/perf/dispatch.md).
constexpr bool one_launch_fits(int64_t rows, int chunks, int limit) {
  return chunks > 0 && chunks <= limit && chunks < kFinalizeManyLanesChunks && rows <= kRowsPerChunkMin * chunks;
}
// Its grid: row CTAs of the table's groups, one row each, then column CTAs of one warp a
// kDwColVecs vectors of columns; none for one row, whose group writes dw itself.
constexpr int64_t one_launch_dx_ctas(const Program& prog, int64_t rows) { return ceil_div(rows, prog.cta / prog.tpr); }
constexpr int64_t one_launch_dw_ctas(const Program& prog, int hidden, int64_t rows) {
  return rows == 1 ? 0 : ceil_div(hidden / 8, int64_t(prog.cta / 32) * kDwColVecs);
}

// Warp chunks (kernels/backward_warp_chunks.cuh): for the narrow programs whose groups cover a row
// exactly (params.h, warp_chunks_instance), where a chunk holds at least ArchTable::bwd_warp_chunk_rows rows,
// a warp takes each chunk, its 32 / tpr groups a row each, instead of one group a chunk; the
// same dx and dw bits.
// The kernel is a compile-time width's, so the exact-groups hook's runtime-width runs
// (Program::exact_instances false) keep the row kernel.
constexpr bool warp_chunks_fit(const Program& prog, int hidden, int64_t chunk_rows, int min_chunk_rows) {
  return prog.exact_instances && min_chunk_rows > 0 && chunk_rows >= min_chunk_rows && warp_chunks_instance(prog.tpr, prog.vpt) &&
         hidden == prog.tpr * prog.vpt * 8;
}

struct BwdPlan {
  Program program;  // the table's, or its pair twin (one launch: the table's with a one-row ring)
  bool pair;
  bool constant_width;  // the exact group's constant-width instance
  FinalizeShape finalize;  // unused by the one launch
  bool one_launch;
  int64_t dx_ctas, dw_ctas;  // the one launch's grid: row CTAs, then column CTAs
  bool warp_chunks;          // a warp a dw chunk (the program's tpr and VPT, BwdLimits::warp_chunks_cta threads)
};
// The kernel choices beside the program, the architecture table's or the tuning hooks': the
// one launch up to one_launch_chunks dw chunks (one_launch_fits), warp chunks from
// warp_chunk_rows rows a chunk (warp_chunks_fit); 0: never.
struct BwdLimits {
  int one_launch_chunks;
  int warp_chunk_rows;
  int warp_chunks_cta;  // ArchTable::bwd_warp_chunks_cta
};
// A backward call as its plan sees it: the shape, the dw chunking (params.h), whether dw is
// wanted and the caller's grid cap (0: none).
struct BwdCall {
  int hidden;
  int64_t rows;
  int chunks;
  int64_t chunk_rows;
  int chunk_rem;
  bool want_dw;
  int max_ctas;
};
// The one plan of a call: the one launch (dw wanted, an uncapped grid, few chunks), else warp
// chunks, else the table's program or its pair twin. `sms`: the device's SM count (the
// finalize's shape; 0 where unknown). `pair_resident(twin)`: the resident CTAs of the pair
// kernel for the candidate twin, asked only when there is one (0: unknown, no pairs).
template <typename PairResident>
constexpr BwdPlan plan_backward(const Program& table, const BwdCall& c, const BwdLimits& lim, int64_t sms,
                                PairResident&& pair_resident) {
  BwdPlan b{table, false, false, finalize_shape(c.chunks, c.hidden, sms), false, 0, 0, false};
  const int one_launch_limit = c.want_dw && c.max_ctas == 0 ? lim.one_launch_chunks : 0;  // a capped grid: two kernels
  if (one_launch_fits(c.rows, c.chunks, one_launch_limit)) {
    b.program.stages = 1;  // a group's one row: nothing to prefetch
    b.constant_width = backward_exact(b.program, c.hidden, false);
    b.one_launch = true;
    b.dx_ctas = one_launch_dx_ctas(b.program, c.rows);
    b.dw_ctas = one_launch_dw_ctas(b.program, c.hidden, c.rows);
    return b;
  }
  if (warp_chunks_fit(table, c.hidden, c.chunk_rows, lim.warp_chunk_rows)) {
    b.warp_chunks = true;
    b.program.cta = lim.warp_chunks_cta;
    return b;
  }
  Program q = table;
  if (pair_candidate(table, c.chunk_rows, c.chunk_rem, &q) && pair_fits(q, c.chunks, pair_resident(q))) {
    b.program = q;
    b.pair = true;
  }
  b.constant_width = backward_exact(b.program, c.hidden, b.pair);
  return b;
}

// ---- FP32 activations (kernels/fp32_rows.cuh, row groups of fp32_width.h) ------------------

struct Fp32Plan {
  int tpr, cta;  // threads a row group, a CTA
  int nv;        // the instance's float4 vectors a thread (2, 4 or 8)
  int stages;    // the backward's ring of rows (2, or 1 where two exceed shared memory); 0 forward
  bool late_w;   // the forward loads w after the sum (ArchTable::fp32_fwd_late_w_tpr)
};
constexpr Fp32Plan plan_fp32_forward(int hidden, const ArchTable& t = kSm90) {
  const int tpr = fp32_tpr(hidden, t.fp32_fwd_vectors), nv = fp32_nv(hidden, tpr);
  return Fp32Plan{tpr, fp32_cta(tpr, t.fp32_min_cta), nv, 0, nv > 2 && tpr >= t.fp32_fwd_late_w_tpr};
}
// g_bytes: the size of g's elements (y's dtype).
constexpr Fp32Plan plan_fp32_backward(int hidden, int g_bytes, bool residual, const ArchTable& t = kSm90) {
  const int tpr = fp32_tpr(hidden, t.fp32_bwd_vectors), cta = fp32_cta(tpr, t.fp32_min_cta), nv = fp32_nv(hidden, tpr);
  const int stages = fp32_bwd_smem_bytes(cta, nv, 2, g_bytes, residual) <= t.smem_per_cta ? 2 : 1;
  return Fp32Plan{tpr, cta, nv, stages, false};
}
static_assert(plan_fp32_forward(6144).late_w && !plan_fp32_forward(4096).late_w && plan_fp32_forward(1024).nv == 4 &&
                  plan_fp32_backward(1024, 2, false).tpr == 128 && plan_fp32_backward(1024, 2, false).stages == 2 &&
                  plan_fp32_backward(16384, 2, true).stages == 1 && plan_fp32_backward(16384, 2, false).stages == 2,
              "FP32 plans at the measured widths");

// ---- A width's order of a row's sums ------------------------------------------------------

// The row group whose order every GPU program of a width follows for a row's sums (rstd, the
// backward's mean(g*w*xhat)); the CPU path computes it (kernels/cpu/row_order.h). The forward:
// the plain route's ring group, whose order the small-T group and the residual route's group
// share (kPairs; tests/cpp/pairs_twins.cpp); the backward: its one group a width; FP32
// activations: their groups. Rows past what the GPU serves (FP32 wider than 16384) keep the
// widest group with more vectors a thread. The shipped tables are sm_90a's copies: one order.
struct RowOrderGroup {
  int tpr, vectors;
  bool pairs, fp32;
};
constexpr RowOrderGroup row_order_group(int64_t hidden, bool backward, bool fp32, const ArchTable& t = kSm90) {
  if (fp32) {
    const int tpr = fp32_tpr(static_cast<int>(hidden), backward ? t.fp32_bwd_vectors : t.fp32_fwd_vectors);
    const int need = static_cast<int>((hidden / 4 + tpr - 1) / tpr), nv = fp32_nv(static_cast<int>(hidden), tpr);
    return RowOrderGroup{tpr, need > nv ? need : nv, false, true};
  }
  const Program p = backward ? backward_program(static_cast<int>(hidden), t) : forward_program(static_cast<int>(hidden), false, t);
  return RowOrderGroup{p.tpr, p.vpt, !backward && pairs_vpt(p.vpt), false};
}

static_assert(plan_forward(multirow_streaming(forward_small_program(512)), 512, 65536, false, false).program.group_rows ==
                      kStreamRows &&
                  plan_forward(multirow_streaming(forward_small_program(512)), 512, 65536, false, false).constant_width &&
                  plan_forward(as_streaming(forward_program(6144)), 6144, 4096, false, false).wload == WLoad::kBeforeSum &&
                  plan_forward(as_streaming(forward_program(6144)), 6144, 4096, true, false).wload == WLoad::kAtUse &&
                  plan_forward(forward_program(2048), 2048, 65536, false, false).sync == GroupSync::kNamed,
              "plans at the measured widths");

}  // namespace cake
