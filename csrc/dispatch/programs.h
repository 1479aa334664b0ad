// Program selection: (route, hidden, T) -> the compile-time shape a launch uses (why each rule:
// docs/perf/dispatch.md). constexpr,
// CUDA-free and torch-free, so the C API, the tests and the CPU path all see the same tables.
#pragma once

#include <stdint.h>

#include "../kernels/params.h"

namespace cake {

// The compile-time vector caches that are instantiated (vectors per thread).
constexpr int kFwdVpts[] = {1, 2, 3, 4, 6, 8};
constexpr int kBwdVpts[] = {1, 2, 3, 4};
constexpr int kNumFwdVpts = sizeof(kFwdVpts) / sizeof(int);
constexpr int kNumBwdVpts = sizeof(kBwdVpts) / sizeof(int);
// The exact narrow groups, compiled with a constant width (forward.cuh and backward.cuh, kTpr):
// groups of at most a warp whose vectors cover a row exactly (forward H 64, 128, 256, 512, 768,
// 1024; backward t16 v2, t32 v2, t32 v3). No masks or rest loops; the same bits as the
// runtime-width kernels (docs/perf/dispatch.md#exact-groups).
// The widths the library serves: positive multiples of 8 (16-byte vectors of 16-bit values),
// at most 2^30 (rows * hidden stays an int64 with room). The one statement of the rule.
constexpr int64_t kMaxHidden = int64_t(1) << 30;
constexpr bool width_served(int64_t hidden) { return hidden > 0 && hidden % 8 == 0 && hidden <= kMaxHidden; }

constexpr bool exact_group(int tpr, int vpt, bool backward = false) {
  const bool listed = ((tpr == 4 || tpr == 8) && vpt == 2) || (tpr == 8 && vpt == 4) ||
                      (tpr == 16 && (vpt == 2 || vpt == 4)) || (tpr == 32 && vpt >= 2 && vpt <= 4);
  return listed && (!backward || (tpr >= 16 && vpt <= 3));
}
constexpr bool exact_cover(int tpr, int vpt, int hidden, bool backward = false) {
  return exact_group(tpr, vpt, backward) && tpr * vpt * 8 == hidden;
}
static_assert(exact_group(16, 2, true) && exact_group(32, 2, true) && exact_group(32, 3, true) &&
                  !exact_group(8, 4, true) && !exact_group(16, 4, true) && !exact_group(32, 4, true),
              "the backward's exact groups: t16 v2, t32 v2, t32 v3");
constexpr int kMaxFwdTpr = kMaxFwdThreads;
constexpr int kMaxBwdTpr = kMaxBwdThreads;

// dw partial chunks for `rows` rows of width `hidden`: a function of (rows, hidden) alone,
// never of the device or the program, so dw's reduction tree (and bits) is the same on every
// GPU and on the CPU path. At least two rows a chunk, at most max_chunks (about whole waves of
// an H200's resident row groups); widths 264..4096 hold half the cap, then grow one chunk per
// 32 rows (docs/perf/dispatch.md#dw-chunks).
constexpr int64_t kRowsPerChunkMin = 2;
constexpr int64_t kRowsPerChunkGrowing = 32;
constexpr int64_t max_chunks(int64_t hidden) {
  return hidden <= 256 ? 4096 : hidden <= 512 ? 2048 : hidden <= 2048 ? 1024 : hidden <= 4096 ? 512 : 256;
}
// The most chunks a caller may give (cake_rmsnorm_backward_partials, dw_finalize): the
// largest count the library itself uses.
constexpr int64_t kMaxGivenChunks = max_chunks(1);
constexpr bool holds_half_cap(int64_t hidden) { return hidden > 256 && hidden <= 4096; }
constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
constexpr int64_t backward_chunks(int64_t rows, int64_t hidden) {
  if (rows <= 0) return 0;
  const int64_t cap = max_chunks(hidden);
  const int64_t pairs = ceil_div(rows, kRowsPerChunkMin);
  int64_t c = pairs < cap ? pairs : cap;
  if (holds_half_cap(hidden)) {
    const int64_t grown = ceil_div(rows, kRowsPerChunkGrowing), hold = grown > cap / 2 ? grown : cap / 2;
    if (c > hold) c = hold;
  }
  return c;
}
// Rows from which the chunk count (and the workspace) stops growing: the first with
// backward_chunks == max_chunks.
constexpr int64_t backward_saturating_rows(int64_t hidden) {
  return holds_half_cap(hidden) ? kRowsPerChunkGrowing * (max_chunks(hidden) - 1) + 1
                                : max_chunks(hidden) * kRowsPerChunkMin;
}

// The tuning data of one architecture: every constant the tables below are fit with. sm_90a's
// is the H200's (docs/perf/dispatch.md); sm_100a, sm_103a and sm_107a start as copies marked
// unmeasured (nothing was timed there), so a later fit changes one row here. Only what is free
// to differ by device lives here: the dw chunk counts and the finalize's lanes above are part
// of dw's bit contract (a function of T and the width alone) and stay shared.
struct ArchTable {
  int sm;
  bool measured;                 // false: a copy of sm_90a's, not measured on this architecture
  int fwd_vpt_target;            // the plain forward's ring row group: vectors a thread
  int fwd_residual_vpt_target;   // the residual forward's
  int fwd_small_vpt_target;      // the plain forward's wider group at the smallest T
  int fwd_max_groups;            // row groups a forward CTA
  int fwd_min_cta_threads;       // ... and at least this many threads
  int fwd_cta_cap;               // threads a forward ring CTA at most
  int bwd_vpt_target;            // the backward's row group
  int bwd_max_groups;            // row groups a backward CTA
  int bwd_cta_cap;               // threads a backward CTA at most
  int ring_stages;               // rows in a row group's cp.async ring
  int64_t stream_max_ctas;       // the small streaming window: at most this grid ...
  int64_t stream_small_elems;    // ... and this many elements read
  int64_t stream_large_elems;    // the large streaming window from this many elements
  int64_t stream_widened_elems;  // ... from this many with CTAs widened for narrow rows
  int64_t stream_min_cta_bytes;  // a streaming CTA reads at least this much in the large window
  int64_t fp32_w_late_elems;     // an FP32 w loaded after the sum from this many elements (plan.h)
  int fwd_two_vector_max;        // plain-forward rows of 64 up to this many elements (a power of
                                 // two) take two vectors a thread (forward_program)
  int bwd_wide_above;            // the backward's rows wider than this take one 512-thread group
                                 // a CTA (backward_program)
  int bwd_one_launch_chunks;     // the backward runs one launch up to this many dw chunks (plan.h;
                                 // dispatch.md#one-launch)
  int bwd_warp_chunk_rows;       // ... and warp chunks for narrow rows from this many rows a chunk
                                 // (dispatch.md#warp-chunks)
  int bwd_warp_chunks_cta;       // ... in CTAs of this many threads (the row kernel's cap)
  size_t smem_per_cta;           // dynamic shared memory a CTA may opt into (rings shrink to fit)
  // FP32 activations (kernels/fp32_width.h, dispatch/plan.h):
  int fp32_fwd_vectors;     // float4 vectors a thread the forward's row group aims at (four
                            // measured faster than two; dispatch.md#fp32-vectors)
  int fp32_bwd_vectors;     // ... the backward's (two: with four a chunk's group had too few loads
                            // in flight)
  int fp32_min_cta;         // threads a CTA of groups of a warp or less
  int fp32_fwd_late_w_tpr;  // the forward loads w after the sum in groups of this many threads
                            // and up (a whole 512-thread CTA: three an SM instead of two;
                            // narrower groups measured slower with it; dispatch.md#fp32-late-w)
};
constexpr ArchTable sm90_table() {
  ArchTable t{};
  t.sm = 90;
  t.measured = true;
  t.fwd_vpt_target = 5;
  t.fwd_residual_vpt_target = 4;
  t.fwd_small_vpt_target = 3;
  t.fwd_max_groups = 8;
  t.fwd_min_cta_threads = 128;
  t.fwd_cta_cap = 256;
  t.bwd_vpt_target = 2;
  t.bwd_max_groups = 8;
  t.bwd_cta_cap = 128;
  t.ring_stages = 2;
  t.stream_max_ctas = 512;
  t.stream_small_elems = int64_t(1) << 22;
  t.stream_large_elems = int64_t(1) << 24;
  t.stream_widened_elems = int64_t(1) << 25;
  t.stream_min_cta_bytes = 16384;
  t.fp32_w_late_elems = int64_t(1) << 26;
  t.fwd_two_vector_max = 128;
  t.bwd_wide_above = 10240;
  t.bwd_one_launch_chunks = 64;
  t.bwd_warp_chunk_rows = 8;
  t.bwd_warp_chunks_cta = 256;
  t.smem_per_cta = kMaxSmemPerCta;
  t.fp32_fwd_vectors = 4;
  t.fp32_bwd_vectors = 2;
  t.fp32_min_cta = 128;
  t.fp32_fwd_late_w_tpr = 512;
  return t;
}
constexpr ArchTable kSm90 = sm90_table();
constexpr ArchTable unmeasured_copy(int sm) {
  ArchTable t = kSm90;
  t.sm = sm;
  t.measured = false;
  return t;
}
constexpr ArchTable kArchTables[] = {kSm90, unmeasured_copy(100), unmeasured_copy(103), unmeasured_copy(107)};
// The table of `sm`; an architecture without one takes sm_90a's.
constexpr const ArchTable& arch_table(int sm) {
  for (const ArchTable& t : kArchTables)
    if (t.sm == sm) return t;
  return kArchTables[0];
}

struct Program {
  int tpr;  // threads per row group, a power of two
  int cta;  // threads per CTA: tpr * row groups per CTA
  int vpt;  // 16-byte vectors per thread held in the ring (an instantiated value)
  int ctas_per_sm = 0;  // persistent grid: CTAs per SM (0: as many as fit)
  int stages = 1;       // cp.async ring depth, 1..kMaxStages; 0: the streaming forward (no ring)
  bool exact_instances = true;  // an exact group runs its constant-width instance where one exists (same bits)
  int group_rows = 1;  // rows a row group takes in the streaming forward: 1, or kStreamRows (exact groups)
};

constexpr bool vpt_instantiated(int vpt, bool backward) {
  bool ok = false;
  for (int v : kFwdVpts) ok = ok || (!backward && v == vpt);
  for (int v : kBwdVpts) ok = ok || (backward && v == vpt);
  return ok;
}

// Rows a row group of the streaming forward takes (Program::group_rows > 1): their loads issued
// together, then each row's body in turn (forward.cuh, rmsnorm_fwd_stream_kernel). Compiled for
// the exact narrow groups only; any other group streams one row a group, and a group without a
// 4-row instance runs its ring program (plan.h, without_rows): the same bits.
constexpr int kStreamRows = 4;
constexpr bool group_rows_valid(int rows) { return rows == 1 || rows == kStreamRows; }

// Whether the kernels can run `p` on a route with (res) or without a residual stream (what a
// tuning override must satisfy).
constexpr bool program_valid(const Program& p, bool backward, bool res = true, size_t smem_limit = kMaxSmemPerCta) {
  // The backward's wide instance (params.h, kMaxBwdWideThreads) runs VPT 4 only, unpaired.
  const int max_threads = backward ? (p.vpt == 4 ? kMaxBwdWideThreads : kMaxBwdThreads) : kMaxFwdThreads;
  const bool pow2 = p.tpr > 0 && (p.tpr & (p.tpr - 1)) == 0;
  const int rpc = p.tpr > 0 ? p.cta / p.tpr : 0;
  const size_t smem = backward ? backward_smem_bytes(p.cta, p.vpt, p.stages, res)
                               : forward_smem_bytes(p.cta, p.vpt, p.stages, res);
  // Any width runs: columns past vpt * tpr vectors take the direct path.
  return vpt_instantiated(p.vpt, backward) && pow2 && p.tpr <= max_threads && p.cta % 32 == 0 &&
         p.cta % p.tpr == 0 && p.cta <= max_threads &&
         (p.tpr <= 32 || rpc < 16) &&  // named barriers 1..15
         p.stages >= (backward ? 1 : 0) && p.stages <= kMaxStages && smem <= smem_limit && p.ctas_per_sm >= 0 &&
         group_rows_valid(p.group_rows) && (p.group_rows == 1 || (!backward && p.stages == 0));
}

// The general program's row group: the power-of-two tpr (<= max_tpr) and an
// instantiated VPT that cover the row with the fewest idle vector slots, ties going to the
// VPT nearest `target` (registers against threads), then to the smaller VPT; rows wider than max_tpr * the largest
// VPT keep the widest group and read the rest directly.
constexpr Program row_group(int hidden, int target, int max_tpr, const int* vpts, int n) {
  const int nvec = hidden / 8;
  Program best{0, 0, 0, 0, 1};
  int best_waste = 1 << 30, best_dist = 1 << 30;
  for (int tpr = 1; tpr <= max_tpr; tpr <<= 1) {
    for (int i = 0; i < n; ++i) {
      const int cover = tpr * vpts[i];
      const int waste = cover >= nvec ? cover - nvec : (tpr == max_tpr && i == n - 1 ? 0 : -1);
      if (waste < 0) continue;
      const int dist = vpts[i] > target ? vpts[i] - target : target - vpts[i];
      if (waste < best_waste || (waste == best_waste && dist <= best_dist)) {  // ties: fewer registers
        best = Program{tpr, 0, vpts[i], 0, 1};
        best_waste = waste;
        best_dist = dist;
      }
    }
  }
  return best;
}

// The CTA: up to max_groups row groups, at most cta_cap threads, and a two-row ring (the next
// row's loads fly while this one is reduced), fit to program sweeps on the H200
// (docs/perf/dispatch.md#cta-and-ring).
constexpr Program shaped(Program p, int max_groups, int cta_cap, bool backward, const ArchTable& t = kSm90) {
  int cta = p.tpr * max_groups;
  if (cta > cta_cap) cta = cta_cap;
  if (cta < p.tpr) cta = p.tpr;
  if (cta < 32) cta = 32;
  p.cta = cta;
  p.stages = t.ring_stages;
  // Very wide rows: a single-row ring when two rows' vectors exceed shared memory.
  while (p.stages > 1 && (backward ? backward_smem_bytes(cta, p.vpt, p.stages, true)
                                   : forward_smem_bytes(cta, p.vpt, p.stages, true)) > t.smem_per_cta)
    --p.stages;
  return p;
}

// One ring program per width, direction and route (the ring is sized for the residual route);
// the forward's streaming windows run its row group, except the plain route's smallest T
// (forward_small_program below). VPT targets 5 (plain forward) and 4 (residual); forward CTAs
// of up to 8 groups and at least 128 threads (docs/perf/dispatch.md#ring-programs).
constexpr int forward_groups(int tpr, const ArchTable& t = kSm90) {
  return tpr * t.fwd_max_groups >= t.fwd_min_cta_threads ? t.fwd_max_groups : t.fwd_min_cta_threads / tpr;
}
// Plain-forward rows of 64 and 128 elements take two vectors a thread (t4 v2, t8 v2) in place of
// the VPT target's four (t2 v4, t4 v4): a warp's load then reads 64 or 128 contiguous bytes of
// each row it touches, not 32 or 64, and the narrow groups' L2 request rate held them behind
// (docs/perf/dispatch.md#two-vector-rows).
constexpr bool two_vector_row(int hidden, bool residual, const ArchTable& t = kSm90) {
  return !residual && hidden >= 64 && hidden <= t.fwd_two_vector_max && (hidden & (hidden - 1)) == 0;
}
constexpr Program forward_program(int hidden, bool residual = false, const ArchTable& t = kSm90) {
  const Program g = two_vector_row(hidden, residual, t)
                        ? Program{hidden / 16, 0, 2, 0, 1}
                        : row_group(hidden, residual ? t.fwd_residual_vpt_target : t.fwd_vpt_target, kMaxFwdTpr,
                                    kFwdVpts, kNumFwdVpts);
  return shaped(g, forward_groups(g.tpr, t), t.fwd_cta_cap, false, t);
}
// The streaming forward (stages 0: no ring, every row's group in the grid, direct loads) runs
// the ring program's tpr, CTA and VPT, so a row's bits are the same in both and T may pick
// between them: streaming wins for VPT <= 4 and a row held whole up to 512 CTAs and 4M elements
// read, and from 2^24 elements where a CTA reads >= 16 KB (2^25 with widened CTAs for narrow
// rows); at VPT 6 on the plain route from 2^24 with w loaded late
// (docs/perf/dispatch.md#streaming).
constexpr bool holds_row(const Program& p, int hidden) {
  return int64_t(p.tpr) * p.vpt * 8 >= hidden;  // 8 16-bit elements a vector
}
// A forward group of pairs_vpt vectors a thread must hold its row (kernels/forward.cuh).
constexpr bool holds_pairs_row(const Program& p, bool backward, int64_t hidden) {
  return backward || !pairs_vpt(p.vpt) || int64_t(p.tpr) * p.vpt * 8 >= hidden;
}
constexpr bool can_stream(const Program& p, int hidden) { return p.vpt <= 4 && holds_row(p, hidden); }
constexpr bool can_stream_vpt6(const Program& p, int hidden, bool residual) {
  return p.vpt == 6 && !residual && holds_row(p, hidden);
}
// The most rows a small streaming window of program p serves: a grid of stream_max_ctas CTAs,
// stream_small_elems elements read.
constexpr int64_t small_window_rows(const Program& p, int hidden, bool residual, const ArchTable& t = kSm90) {
  const int64_t by_ctas = t.stream_max_ctas * (p.cta / p.tpr);
  const int64_t by_elems = t.stream_small_elems / (int64_t(hidden) * (residual ? 2 : 1));
  return by_ctas < by_elems ? by_ctas : by_elems;
}
// The last T of the small streaming window (0: none).
constexpr int64_t small_window_max(const Program& p, int hidden, bool residual, const ArchTable& t = kSm90) {
  return can_stream(p, hidden) ? small_window_rows(p, hidden, residual, t) : 0;
}
constexpr Program as_streaming(Program p) {
  p.stages = 0;
  return p;
}

// The smallest T of the plain forward streams in a wider row group: VPT target 3 instead of 5,
// twice the warps a row, up to the small streaming bounds of its own program. Where it has a
// window it is (2 tpr, VPT / 2) of the ring's (tpr, VPT), VPT 4 or 6 (tests/cpp/keys_sweep.cpp),
// and sums a row in the ring's order (kernels/reduce.cuh, group_sum_pairs), so a row's outputs
// do not depend on T (docs/perf/dispatch.md#small-t-group).
constexpr Program forward_small_program(int hidden, const ArchTable& t = kSm90) {
  const Program g = row_group(hidden, t.fwd_small_vpt_target, kMaxFwdTpr, kFwdVpts, kNumFwdVpts);
  return as_streaming(shaped(g, forward_groups(g.tpr, t), t.fwd_cta_cap, false, t));
}
// The last T of the wider group's window (0: none); none where the ring's own group is an
// exact warp (H 1024 t32 v4; docs/perf/dispatch.md#small-t-group).
constexpr int64_t small_group_max(const Program& ring, int hidden, const ArchTable& t = kSm90) {
  const Program w = forward_small_program(hidden, t);
  if (w.tpr == ring.tpr || w.tpr < 32 || w.tpr > 256 || !holds_row(w, hidden)) return 0;
  if (ring.tpr == 32 && exact_cover(ring.tpr, ring.vpt, hidden)) return 0;
  return small_window_rows(w, hidden, false, t);
}
constexpr int64_t cta_read_bytes(const Program& p, int hidden, bool residual) {
  return int64_t(p.cta / p.tpr) * hidden * 2 * (residual ? 2 : 1);
}
// The large window's streaming program: the ring's row group, its CTA doubled while that
// stays a valid program, until it reads stream_min_cta_bytes.
constexpr Program widened_streaming(const Program& ring, int hidden, bool residual, const ArchTable& t = kSm90) {
  Program p = as_streaming(ring);
  while (cta_read_bytes(p, hidden, residual) < t.stream_min_cta_bytes) {
    Program wider = p;
    wider.cta *= 2;
    if (!program_valid(wider, false, residual)) break;
    p = wider;
  }
  return p;
}
// The first T of the large streaming window (-1: none).
constexpr int64_t large_window_min(const Program& ring, int hidden, bool residual, const ArchTable& t = kSm90) {
  if (can_stream_vpt6(ring, hidden, residual))  // unwidened: its CTA reads >= 16 KB, or it keeps the ring
    return cta_read_bytes(ring, hidden, residual) >= t.stream_min_cta_bytes ? ceil_div(t.stream_large_elems, hidden)
                                                                             : -1;
  if (!can_stream(ring, hidden) ||
      cta_read_bytes(widened_streaming(ring, hidden, residual, t), hidden, residual) < t.stream_min_cta_bytes)
    return -1;
  const bool widened = cta_read_bytes(ring, hidden, residual) < t.stream_min_cta_bytes;
  return ceil_div(widened ? t.stream_widened_elems : t.stream_large_elems, hidden);
}
// Whether the wider group serves every T: where it is an exact warp and the ring never streams
// (H 768: one row group, no edge across which a row's bits move; docs/perf/dispatch.md#small-t-group).
constexpr bool small_group_everywhere(const Program& ring, int hidden, const ArchTable& t = kSm90) {
  const Program w = forward_small_program(hidden, t);
  return small_group_max(ring, hidden, t) > 0 && w.tpr == 32 && exact_cover(w.tpr, w.vpt, hidden) &&
         !can_stream(ring, hidden) && large_window_min(ring, hidden, false, t) < 0;
}
static_assert(small_window_max(forward_program(512), 512, false) == 4096 &&
                  large_window_min(forward_program(512), 512, false) == 65536 &&
                  widened_streaming(forward_program(512), 512, false).cta == 256 &&
                  large_window_min(forward_program(256), 256, false) == 131072 &&
                  widened_streaming(forward_program(256), 256, false).cta == 256 &&
                  widened_streaming(forward_program(4096), 4096, false).cta == forward_program(4096).cta &&
                  large_window_min(forward_program(8), 8, false) == -1 &&
                  small_window_max(forward_program(4096), 4096, false) == 1024 &&
                  large_window_min(forward_program(4096), 4096, false) == 4096 &&
                  small_window_max(forward_program(4096, true), 4096, true) == 512 &&
                  small_window_max(forward_program(6144), 6144, false) == 0 &&
                  large_window_min(forward_program(6144), 6144, false) == 2731 &&
                  widened_streaming(forward_program(6144), 6144, false).cta == forward_program(6144).cta &&
                  large_window_min(forward_program(1536), 1536, false) == 10923 &&
                  large_window_min(forward_program(768), 768, false) == -1 &&
                  large_window_min(forward_program(6144, true), 6144, true) == 2731,
              "streaming windows at the measured widths");
static_assert(small_group_max(forward_program(512), 512) == 4096 && forward_small_program(512).tpr == 32 &&
                  forward_small_program(512).cta == 256 && small_group_max(forward_program(768), 768) == 4096 &&
                  small_group_max(forward_program(1536), 1536) == 2048 && forward_small_program(1536).vpt == 3 &&
                  small_group_max(forward_program(2048), 2048) == 1024 &&
                  small_group_max(forward_program(3072), 3072) == 1024 &&
                  small_group_max(forward_program(4096), 4096) == 512 && forward_small_program(4096).tpr == 256 &&
                  small_group_max(forward_program(5120), 5120) == 512 &&
                  small_group_max(forward_program(6144), 6144) == 512 && forward_small_program(6144).vpt == 3 &&
                  small_group_max(forward_program(256), 256) == 0 &&
                  small_group_max(forward_program(8192), 8192) == 0 &&
                  small_group_max(forward_program(1024), 1024) == 0 &&
                  small_group_everywhere(forward_program(768), 768) &&
                  !small_group_everywhere(forward_program(512), 512) &&
                  !small_group_everywhere(forward_program(1536), 1536),
              "the wider small-T group at the measured widths; none at H 256 (16 threads), 1024 (an exact warp "
              "ring) or 8192 (512); at every T for H 768");

// Narrow exact rows of the plain forward (H 128 t8 v2, 256 t8 v4, 512 t32 v2, 1024 t32 v4): past their
// first streaming window the same group streams kStreamRows rows a group in 128-thread CTAs,
// in place of the ring and its widened twin; one row group at every T, so no window edge
// moves a row's bits (docs/perf/dispatch.md#multirow).
constexpr Program multirow_streaming(Program p, const ArchTable& t = kSm90) {
  p.stages = 0;
  p.group_rows = kStreamRows;
  p.cta = p.tpr < t.fwd_min_cta_threads ? t.fwd_min_cta_threads : p.tpr;
  return p;
}
constexpr bool can_stream_rows(const Program& first, int hidden) {
  return first.stages == 0 && first.tpr >= 8 && first.tpr <= 32 && exact_cover(first.tpr, first.vpt, hidden);
}
// H 64's group (t4 v2) streams one row a group at every T instead: four rows a group and the
// ring measured slower (docs/perf/dispatch.md#two-vector-rows).
constexpr bool streams_everywhere(const Program& ring, int hidden, bool residual, const ArchTable& t = kSm90) {
  return two_vector_row(hidden, residual, t) && ring.tpr < 8;
}
static_assert(can_stream_rows(as_streaming(forward_program(256)), 256) && can_stream_rows(forward_small_program(512), 512) &&
                  can_stream_rows(as_streaming(forward_program(1024)), 1024) &&
                  !can_stream_rows(as_streaming(forward_program(2048)), 2048) &&
                  multirow_streaming(forward_small_program(512)).cta == 128 &&
                  program_valid(multirow_streaming(forward_small_program(512)), false) &&
                  program_valid(multirow_streaming(as_streaming(forward_program(256))), false) &&
                  can_stream_rows(as_streaming(forward_program(128)), 128) &&
                  !can_stream_rows(as_streaming(forward_program(64)), 64) &&
                  streams_everywhere(forward_program(64), 64, false) &&
                  !streams_everywhere(forward_program(128), 128, false),
              "several rows a group at H 128, 256, 512 and 1024 only; H 64 streams one");

// Rows wider than ArchTable::bwd_wide_above (10240) take one 512-thread group a CTA at VPT 4
// (the wide instance, backward.cuh): up to 16384 held whole in the ring, where the 256-thread
// group (8192 held) read the rest of each row directly twice and again for dw. Up to 10240 the
// rest is at most a fifth of the row and one group an SM measured slower (dispatch.md#wide-rows).
constexpr Program backward_program(int hidden, const ArchTable& t = kSm90) {
  if (hidden > t.bwd_wide_above && hidden > kMaxBwdTpr * 4 * 8)
    return shaped(Program{kMaxBwdWideThreads, 0, 4, 0, 1}, 1, kMaxBwdWideThreads, true, t);
  return shaped(row_group(hidden, t.bwd_vpt_target, kMaxBwdTpr, kBwdVpts, kNumBwdVpts), t.bwd_max_groups,
                t.bwd_cta_cap, true, t);
}

static_assert(row_group(6144, 2, 512, kFwdVpts, kNumFwdVpts).tpr == 256 &&
                  row_group(6144, 2, 512, kFwdVpts, kNumFwdVpts).vpt == 3,
              "fwd 6144: 256 threads x 3 vectors");
static_assert(backward_program(6144).tpr == 256 && backward_program(6144).vpt == 3, "bwd 6144");
static_assert(backward_program(512).tpr == 32 && backward_program(512).cta == 128, "narrow rows share a CTA");
static_assert(forward_program(2048).tpr == 64 && forward_program(2048).vpt == 4 && forward_program(2048).cta == 256,
              "fwd 2048: the sweep's t64x4_v4");
static_assert(forward_program(512).tpr == 16 && forward_program(512).cta == 128, "fwd 512: t16x8_v4");
static_assert(forward_program(256).tpr == 8 && forward_program(256).cta == 128 && forward_program(8).cta == 128,
              "narrow forward groups fill 128-thread CTAs");
static_assert(forward_program(64).tpr == 4 && forward_program(64).vpt == 2 && forward_program(128).tpr == 8 &&
                  forward_program(128).vpt == 2 && forward_program(128).cta == 128 &&
                  forward_program(64, true).tpr == 2 && forward_program(128, true).vpt == 4 &&
                  forward_program(96).vpt != 2 && forward_program(32).tpr == 1,
              "two vectors a thread at H 64 and 128 on the plain route only");
static_assert(forward_program(6144).tpr == 128 && forward_program(6144).vpt == 6 && forward_program(6144).cta == 256 &&
                  forward_program(5120).tpr == 128 && forward_program(5120).vpt == 6 &&
                  forward_program(1536).tpr == 32 && forward_program(1536).vpt == 6 &&
                  forward_program(4096).tpr == 128 && forward_program(4096).vpt == 4,
              "fwd: 6 vectors a thread where the row splits evenly into them");
static_assert(forward_program(6144, true).tpr == 256 && forward_program(6144, true).vpt == 3 &&
                  forward_program(1536, true).tpr == 64 && forward_program(1536, true).vpt == 3,
              "residual fwd: the 4-vector target");
static_assert(backward_program(1 << 20).tpr == kMaxBwdWideThreads && backward_program(1 << 20).vpt == 4 &&
                  backward_program(10240).tpr == 256 && backward_program(10248).tpr == 512 &&
                  backward_program(16384).cta == 512 && backward_program(16384).stages == 2 &&
                  program_valid(backward_program(16384), true) && !program_valid(Program{512, 512, 3, 0, 2}, true),
              "rows wider than 10240: one 512-thread group a CTA, the rest of rows past 16384 read directly");
constexpr bool widths_valid(const int* hs, int n) {
  for (int i = 0; i < n; ++i)
    if (!program_valid(forward_program(hs[i]), false) || !program_valid(forward_program(hs[i], true), false) ||
        !program_valid(as_streaming(forward_program(hs[i])), false) ||
        !program_valid(widened_streaming(forward_program(hs[i]), hs[i], false), false) ||
        !program_valid(widened_streaming(forward_program(hs[i], true), hs[i], true), false) ||
        !program_valid(backward_program(hs[i]), true))
      return false;
  return true;
}
constexpr int kCheckedWidths[] = {8,    16,   24,   40,    64,    104,   256,   512,    520,    768,   1000,
                                  1024, 1536, 2048, 2560,  3072,  3080,  4096,  5120,   6144,   7168,  8192,
                                  8200, 12288, 16384, 32768, 65536, 131072, 262144, 524288, 1 << 20};
static_assert(widths_valid(kCheckedWidths, sizeof(kCheckedWidths) / sizeof(int)),
              "every width's program runs on both routes");
static_assert(kMaxBwdThreads / 64 < 16 && kMaxFwdThreads / 64 < 16, "named barriers 1..15 suffice");
static_assert(kMaxBwdThreads / 32 <= 16 && kMaxFwdThreads / 32 <= 16,
              "group_sum's scratch: two halves of 16 floats, one a warp of the CTA");
// chunk_first_row's 32-bit numerator c * (rows % chunks) needs chunks <= 65535.
static_assert(max_chunks(1) <= 65535, "chunk counts keep c * r in 32 bits");
constexpr bool first_rows_exact(int64_t rows, int chunks) {
  for (int c = 0; c <= chunks; ++c)
    if (chunk_first_row(c, rows / chunks, static_cast<int>(rows % chunks), chunks) != c * rows / chunks)
      return false;
  return true;
}
static_assert(first_rows_exact(1, 1) && first_rows_exact(129, 65) && first_rows_exact(8193, 4096) &&
                  first_rows_exact((int64_t(1) << 19) + 3, 256) && first_rows_exact((int64_t(1) << 40) + 4095, 4096),
              "chunk_first_row equals floor(c * rows / chunks)");
static_assert(backward_chunks(1, 6144) == 1 && backward_chunks(1 << 20, 6144) == 256 &&
                  backward_chunks(1 << 20, 512) == 2048 && backward_chunks(2048, 512) == 1024 &&
                  backward_chunks(4096, 512) == 1024 && backward_chunks(32768, 512) == 1024 &&
                  backward_chunks(65536, 512) == 2048 && backward_chunks(16384, 2048) == 512 &&
                  backward_chunks(65536, 2048) == 1024 && backward_chunks(8192, 256) == 4096 &&
                  backward_chunks(4096, 4096) == 256 && backward_chunks(1024, 4096) == 256 &&
                  backward_chunks(65536, 4096) == 512 && backward_chunks(4096, 5120) == 256,
              "chunks");
constexpr bool chunks_nondecreasing(int64_t hidden) {
  const int64_t sat = backward_saturating_rows(hidden);
  // Nondecreasing by construction (a min and max of nondecreasing terms); checked at every row
  // near both ends and every 61st between.
  for (int64_t r = 1; r < sat + 64; r += (r < 64 || r + 64 > sat) ? 1 : 61)
    if (backward_chunks(r + 1, hidden) < backward_chunks(r, hidden)) return false;
  return backward_chunks(sat, hidden) == max_chunks(hidden) &&
         (!holds_half_cap(hidden) || backward_chunks(sat - 1, hidden) < max_chunks(hidden));
}
static_assert(chunks_nondecreasing(256) && chunks_nondecreasing(512) && chunks_nondecreasing(1536) &&
                  chunks_nondecreasing(2048) && chunks_nondecreasing(4096) && chunks_nondecreasing(6144),
              "chunk counts never shrink as rows grow, and saturate where backward_saturating_rows says");

}  // namespace cake
