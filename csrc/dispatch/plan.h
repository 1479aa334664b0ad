// One launch's plan: everything about a call that is not its data, from the window tables
// (windows.h), the call's shape, weight dtype and route, the architecture's tuning table and the
// device's facts (its SM count and each instance's resident CTAs). The backward's plan is one
// function (plan_backward) down to its kernel, grid, ring and finalize; resolve.h wraps the
// forward's. CUDA-free and torch-free, so the C API's plan query (program_windows.cpp) reports
// what a call runs.
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
constexpr Program without_rows(Program prog, bool w_fp32, bool residual, const ArchTable& t) {
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
                               const ArchTable& t) {
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

// ---- device facts -------------------------------------------------------------------------

// What a plan asks of the device: its architecture and SM count, and the CTAs of an instance
// resident on it at a block and shared-memory size (0: unknown). Asking also makes the instance
// launchable with that shared memory (api/execute.cu), so a launch needs no second query.
// Without a device (the plan query) residency is the launch bounds' guarantee (below).
struct DeviceFacts {
  int sm;
  int64_t sms;
  int64_t (*resident)(const KernelKey& key, int block, size_t smem);  // null: unknown
};
// Without a device: the CTAs an SM that the backward's launch bounds guarantee (params.h: at most
// 65536 / (kMaxBwdThreads * kBwdMinBlocks) registers a thread, the wide instances' at 512 x 1),
// at most 2048 threads and 228 KB of shared memory (1 KB reserved a CTA) an SM, as on every
// shipped architecture, and the register-named barriers' 4 CTAs; 0 (unknown) for the forward's
// instances, whose register caps differ by instance. A model, not a query: a device's own count
// (the occupancy query) is what a call uses.
constexpr int64_t kRegsPerSm = 65536, kThreadsPerSm = 2048;  // shared memory: params.h, kSmemPerSm
constexpr int64_t kRegisterBarrierCtas = 4;
constexpr int64_t resident_bound_per_sm(const KernelKey& k, int block, size_t smem) {
  const bool wide = k.family == Family::kBwdWide || k.family == Family::kBwdOneWide;
  const bool rows = wide || k.family == Family::kBwdRows || k.family == Family::kBwdOne ||
                    k.family == Family::kBwdWarpChunks;
  if (!rows || block <= 0) return 0;
  const int64_t regs = wide ? kRegsPerSm / kMaxBwdWideThreads : kRegsPerSm / (kMaxBwdThreads * kBwdMinBlocks);
  int64_t n = kRegsPerSm / (regs * block);
  if (kThreadsPerSm / block < n) n = kThreadsPerSm / block;
  // A runtime-width instance names its barriers by register, so ptxas reserves all 16 of a
  // CTA's: 4 CTAs an SM at most (params.h, GroupSync).
  if (k.tpr == 0 && n > kRegisterBarrierCtas) n = kRegisterBarrierCtas;
  const int64_t by_smem = static_cast<int64_t>(kSmemPerSm / (smem + kSmemReservedPerCta));
  return by_smem < n ? by_smem : n;
}
constexpr int64_t ask_resident(const DeviceFacts& d, const KernelKey& k, int block, size_t smem) {
  return d.resident != nullptr ? d.resident(k, block, smem) : resident_bound_per_sm(k, block, smem) * d.sms;
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
// same dx and dw bits. The kernel is a compile-time width's, so the exact-groups hook's
// runtime-width runs (Program::exact_instances false) keep the row kernel.
constexpr bool warp_chunks_fit(const Program& prog, int hidden, int64_t chunk_rows, int min_chunk_rows) {
  return prog.exact_instances && min_chunk_rows > 0 && chunk_rows >= min_chunk_rows && warp_chunks_instance(prog.tpr, prog.vpt) &&
         hidden == prog.tpr * prog.vpt * 8;
}

// At most the resident CTAs (ctas_per_sm > 0: that many a SM) where known, at most max_ctas.
constexpr int64_t persistent_grid(int64_t resident, int64_t sms, int ctas_per_sm, int64_t wanted,
                                  int64_t max_ctas = 0) {
  if (ctas_per_sm > 0 && resident > 0) resident = sms * ctas_per_sm;
  if (resident > 0 && wanted > resident) wanted = resident;
  if (max_ctas > 0 && wanted > max_ctas) wanted = max_ctas;
  return wanted;
}

// The kernel choices beside the program, the architecture table's or the tuning hooks': the
// one launch up to one_launch_chunks dw chunks (one_launch_fits), warp chunks from
// warp_chunk_rows rows a chunk (warp_chunks_fit); 0: never.
struct BwdLimits {
  int one_launch_chunks;
  int warp_chunk_rows;
  int warp_chunks_cta;  // ArchTable::bwd_warp_chunks_cta
  size_t smem_per_cta;  // ArchTable::smem_per_cta: the backward from y's 1 / w shrinks the ring to fit
};
// A backward call as its plan sees it: dtype codes (g is x's), the route, the shape, the dw
// chunking (contract.h), whether dw is wanted (false: no dw, or partials kept for the caller),
// whether it comes back in w's 16-bit dtype, and the caller's grid cap (0: none).
struct BwdCall {  // built by field name
  int x = kBf16, w = kBf16;
  bool residual = false;
  int hidden = 0;
  int64_t rows = 0;
  int chunks = 0;
  bool want_dw = false;
  bool dw_in_w_dtype = false;
  int max_ctas = 0;
  bool from_y = false;  // the backward from y: the row kernel and its one launch (kernel_key.h, compiled)
};
struct BwdPlan {
  Program program;    // what the grid runs: the table's, its pair twin or the one launch's; its
                      // stages the ring kept, its ctas_per_sm the CTAs an SM the grid holds (0: all)
  Program pair_twin;  // the row-pair candidate (cta 0: none), which pair_fits held to the resident CTAs
  KernelKey key;
  int64_t grid;
  size_t smem;
  bool smem_ready;            // the instance's residency was asked at this size (DeviceFacts::resident)
  bool pair, constant_width, one_launch, warp_chunks;
  int64_t dx_ctas;            // the one launch's row CTAs, before its column CTAs
  bool finalize;              // the dw finalize runs after the kernel
  FinalizeKey fin;
  int64_t fin_grid;           // its CTAs (block: fin.cols * fin.lanes)
};

constexpr KernelKey backward_key(Family f, const BwdCall& c, int vectors) {
  KernelKey k = plain_key(f, c.x, c.x, c.w, c.residual, vectors);
  k.from_y = c.from_y;
  return k;
}
// The backward's row kernel for a program (or its pair twin): the exact group's instance where
// the plan says so, the wide rows' CTAs past kMaxBwdThreads, holding the vectors the row fills
// (params.h, bwd_wide_held_vectors; the key's vectors, which size the ring).
constexpr KernelKey rows_key(const BwdCall& c, const Program& p, bool constant_width, bool pair) {
  KernelKey k = backward_key(Family::kBwdRows, c, p.vpt);
  if (p.vpt == kBwdWideVpt && !pair && p.cta > kMaxBwdThreads) {
    k.family = Family::kBwdWide;
    k.vectors = bwd_wide_held_vectors(static_cast<int>(c.hidden), p.tpr);
    return k;
  }
  k.pair = pair;
  if (constant_width) k.tpr = p.tpr;
  return k;
}

// The one plan of a backward call, down to its launch: the one launch (dw wanted, an uncapped
// grid, few chunks), else warp chunks, else the table's program or its pair twin, on a
// persistent grid of every CTA the device keeps resident (its SM count, the instance's
// residency), then the finalize. Nothing here
// moves a bit: the chunks (and so dw's order) are the call's, the row group the table's.
// The backward from y runs the table's program in the runtime-width row kernel or its one launch
// (no warp chunks, pairs or exact groups: the same bits, fewer instances).
constexpr BwdPlan plan_backward(const BwdCall& c, const Program& table, const BwdLimits& lim, const DeviceFacts& d) {
  BwdPlan b{};
  b.program = table;
  const int64_t q = c.chunks > 0 ? c.rows / c.chunks : 0;
  const int rem = c.chunks > 0 ? static_cast<int>(c.rows % c.chunks) : 0;
  const int64_t sms = c.want_dw ? d.sms : 0;  // the finalize's shape reads it
  if (c.from_y || !pair_candidate(table, q, rem, &b.pair_twin)) b.pair_twin = Program{};
  const int one_launch_limit = c.want_dw && c.max_ctas == 0 ? lim.one_launch_chunks : 0;  // a capped grid: two kernels
  if (one_launch_fits(c.rows, c.chunks, one_launch_limit)) {  // dx by rows, then dw by columns: no partials
    b.program.stages = 1;  // a group's one row: nothing to prefetch
    b.constant_width = !c.from_y && backward_exact(b.program, c.hidden, false);
    b.one_launch = true;
    KernelKey k = rows_key(c, b.program, b.constant_width, false);
    k.family = k.family == Family::kBwdWide ? Family::kBwdOneWide : Family::kBwdOne;
    k.vectors = b.program.vpt;  // the one launch's wide CTAs hold all 4 (their dx pass spills nothing)
    b.key = k;
    b.smem = backward_smem_bytes(b.program.cta, b.program.vpt, b.program.stages, c.residual, c.from_y);
    b.dx_ctas = one_launch_dx_ctas(b.program, c.rows);
    b.grid = b.dx_ctas + one_launch_dw_ctas(b.program, c.hidden, c.rows);
    return b;
  }
  const FinalizeShape fs = finalize_shape(c.chunks, c.hidden, sms);
  b.finalize = c.want_dw;
  b.fin = FinalizeKey{fs.cols, fs.lanes, c.dw_in_w_dtype && c.w != kFp32 ? c.w : kFp32};
  b.fin_grid = ceil_div(c.hidden, fs.cols);
  if (!c.from_y && warp_chunks_fit(table, c.hidden, q, lim.warp_chunk_rows)) {  // a warp a chunk, its groups a row each
    b.warp_chunks = true;
    b.program.cta = lim.warp_chunks_cta;
    KernelKey k = backward_key(Family::kBwdWarpChunks, c, table.vpt);
    k.tpr = table.tpr;
    b.key = k;
    b.smem = size_t(b.program.cta / 32) * 32 * b.program.vpt * 8 * sizeof(float);
    const int64_t resident = ask_resident(d, k, b.program.cta, b.smem);
    b.grid = persistent_grid(resident, d.sms, 0, ceil_div(c.chunks, b.program.cta / 32), c.max_ctas);
    b.smem_ready = d.resident != nullptr;
    return b;
  }
  if (b.pair_twin.cta > 0) {
    const Program& twin = b.pair_twin;
    const KernelKey pk = rows_key(c, twin, backward_exact(twin, c.hidden, true), true);
    if (pair_fits(twin, c.chunks, ask_resident(d, pk, twin.cta, backward_smem_bytes(twin.cta, twin.vpt, twin.stages, c.residual)))) {
      b.program = twin;
      b.pair = true;
    }
  }
  b.constant_width = !c.from_y && backward_exact(b.program, c.hidden, b.pair);
  b.key = rows_key(c, b.program, b.constant_width, b.pair);
  const int units = b.program.cta / b.program.tpr / (b.pair ? 2 : 1);  // chunks a CTA takes at a time
  const int64_t wanted = ceil_div(c.chunks, units);
  const int held = b.key.vectors;  // the program's VPT, or fewer for the wide rows (rows_key)
  while (b.program.stages > 1 && backward_smem_bytes(b.program.cta, held, b.program.stages, c.residual, c.from_y) >
                                     lim.smem_per_cta)
    --b.program.stages;  // from y: 1 / w beside the ring (the ring alone fits: programs.h, shaped)
  b.smem = backward_smem_bytes(b.program.cta, held, b.program.stages, c.residual, c.from_y);
  int64_t resident = ask_resident(d, b.key, b.program.cta, b.smem);
  b.smem_ready = d.resident != nullptr;
  // Every resident CTA at the table's ring: fewer CTAs an SM with a deeper ring, and a deeper ring
  // alone, were derived and timed and lost on shapes nobody tuned for
  // (docs/perf/runs/h200-plan-ab-sweep-d3aeefd.json, docs/perf/dispatch.md).
  b.grid = persistent_grid(resident, d.sms, b.program.ctas_per_sm, wanted, c.max_ctas);
  return b;
}

// ---- FP32 activations (kernels/fp32_rows.cuh, row groups of fp32_width.h) ------------------

struct Fp32Plan {
  int tpr, cta;  // threads a row group, a CTA
  int nv;        // the instance's float4 vectors a thread (2, 4 or 8)
  int stages;    // the backward's ring of rows (2, or 1 where two exceed shared memory); 0 forward
  bool late_w;   // the forward loads w after the sum (ArchTable::fp32_fwd_late_w_tpr)
};
constexpr Fp32Plan plan_fp32_forward(int hidden, const ArchTable& t) {
  const int tpr = fp32_group_tpr(hidden, false), nv = fp32_nv(hidden, tpr);
  return Fp32Plan{tpr, fp32_cta(tpr, t.fp32_min_cta), nv, 0, nv > 2 && tpr >= t.fp32_fwd_late_w_tpr};
}
// g_bytes: the size of g's elements (y's dtype).
constexpr Fp32Plan plan_fp32_backward(int hidden, int g_bytes, bool residual, const ArchTable& t) {
  const int tpr = fp32_group_tpr(hidden, true), cta = fp32_cta(tpr, t.fp32_min_cta), nv = fp32_nv(hidden, tpr);
  const int stages = fp32_bwd_smem_bytes(cta, nv, 2, g_bytes, residual) <= t.smem_per_cta ? 2 : 1;
  return Fp32Plan{tpr, cta, nv, stages, false};
}

}  // namespace cake
