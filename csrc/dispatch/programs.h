// Program selection: (route, hidden, T) -> the compile-time shape a launch uses. constexpr,
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
// The streaming forward's exact narrow groups, compiled with a constant width (forward.cuh,
// kTpr): groups of at most a warp whose vectors cover a row exactly, for the common narrow
// widths H 256 (t8 v4, t16 v2), 512 (t16 v4, t32 v2), 768 (t32 v3) and 1024 (t32 v4). Their
// SASS has no masks, rest loops or runtime shifts: the t16 v4 instance has 560 instructions
// against the runtime-width one's 784 (456 with the lean row code), the same bits
// (tests/test_tuning.py). The backward (backward.cuh, kTpr) has those of its tables' narrow
// programs: H 256 (t16 v2), 512 (t32 v2) and 768 (t32 v3).
constexpr bool exact_group(int tpr, int vpt, bool backward = false) {
  const bool listed =
      (tpr == 8 && vpt == 4) || (tpr == 16 && (vpt == 2 || vpt == 4)) || (tpr == 32 && vpt >= 2 && vpt <= 4);
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
// never of the device or the program, so the dw reduction tree (and its bits) is the same on
// every GPU and on the CPU path. At least two rows a chunk; at most about a whole number of
// waves of the row groups an H200 holds at once for that width (no ragged tail), which keeps
// the FP32 partials near 1-3 % of the backward's traffic at large T.
// Widths 264..4096 hold half that cap from where the count reaches it, and grow again as one
// chunk per 32 rows up to the cap: there the partials (4 B a column a chunk, written and read
// back) were a third of the traffic at T 4096 and the finalize ran 6-9 us past the main
// kernel. Measured at H 512, 1536 and 2048 (docs/perf/README.md): T 4096 and 16384 2-25 %
// faster (H 512 T 4096: 12.25 -> 9.25 us); the full cap stays best at T 65536 for H <= 1536.
// At H 3072 and 4096 (runs/h200-chunk-hold-wide.md) 256 chunks, about one chunk a resident
// row group, beat 512 at T 1024..8192 (H 4096 T 1024: 17.5 -> 13.75 us, T 4096: 38.1 ->
// 34.6), except H 3072 T 8192 (48.0 -> 50.6); at H 5120 and 6144 (cap 256) half the cap
// left half the groups idle and lost up to 13 % (H 6144 T 4096: 48.4 -> 53.9).
constexpr int64_t kRowsPerChunkMin = 2;
constexpr int64_t kRowsPerChunkGrowing = 32;
constexpr int64_t max_chunks(int64_t hidden) {
  return hidden <= 256 ? 4096 : hidden <= 512 ? 2048 : hidden <= 2048 ? 1024 : hidden <= 4096 ? 512 : 256;
}
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

struct Program {
  int tpr;  // threads per row group, a power of two
  int cta;  // threads per CTA: tpr * row groups per CTA
  int vpt;  // 16-byte vectors per thread held in the ring (an instantiated value)
  int ctas_per_sm = 0;  // persistent grid: CTAs per SM (0: as many as fit)
  int stages = 1;       // cp.async ring depth, 1..kMaxStages; 0: the streaming forward (no ring)
  bool exact = true;    // an exact group's compile-time-width kernel where one exists (same bits)
  int rows = 1;  // rows a row group takes in the streaming forward: 1, or kStreamRows (exact groups)
};

constexpr bool vpt_instantiated(int vpt, bool backward) {
  bool ok = false;
  for (int v : kFwdVpts) ok = ok || (!backward && v == vpt);
  for (int v : kBwdVpts) ok = ok || (backward && v == vpt);
  return ok;
}

// Rows a row group of the streaming forward takes (Program::rows > 1): their loads issued
// together, then each row's body in turn (forward.cuh, rmsnorm_fwd_stream_kernel). Compiled for
// the exact narrow groups only; any other group streams one row a group, and a group without a
// 4-row instance runs its ring program (launch_forward.cuh, without_rows): the same bits.
constexpr int kStreamRows = 4;
constexpr bool stream_rows_valid(int rows) { return rows == 1 || rows == kStreamRows; }

// Whether the kernels can run `p` on a route with (res) or without a residual stream (what a
// tuning override must satisfy).
constexpr bool program_valid(const Program& p, bool backward, bool res = true) {
  const int max_threads = backward ? kMaxBwdThreads : kMaxFwdThreads;
  const bool pow2 = p.tpr > 0 && (p.tpr & (p.tpr - 1)) == 0;
  const int rpc = p.tpr > 0 ? p.cta / p.tpr : 0;
  const size_t smem = backward ? backward_smem_bytes(p.cta, p.vpt, p.stages, res)
                               : forward_smem_bytes(p.cta, p.vpt, p.stages, res);
  // Any width runs: columns past vpt * tpr vectors take the direct path.
  return vpt_instantiated(p.vpt, backward) && pow2 && p.tpr <= max_threads && p.cta % 32 == 0 &&
         p.cta % p.tpr == 0 && p.cta <= max_threads &&
         (p.tpr <= 32 || rpc < 16) &&  // named barriers 1..15
         p.stages >= (backward ? 1 : 0) && p.stages <= kMaxStages && smem <= kMaxSmemPerCta && p.ctas_per_sm >= 0 &&
         stream_rows_valid(p.rows) && (p.rows == 1 || (!backward && p.stages == 0));
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

// The CTA: up to max_groups row groups, at most cta_cap threads (narrow rows share a CTA, so
// the persistent grid stays a few CTAs an SM), and a two-row ring: the next row's loads fly
// while this one is reduced. Fit to program sweeps on H200 (benchmarks/sweep_programs.py,
// docs/perf/README.md): deeper rings and other CTA sizes measured no faster at T 256..65536
// for H 256, 512, 2048 and 6144; the other widths follow the same rule.
constexpr int kRingStages = 2;
constexpr Program shaped(Program p, int max_groups, int cta_cap, bool backward) {
  int cta = p.tpr * max_groups;
  if (cta > cta_cap) cta = cta_cap;
  if (cta < p.tpr) cta = p.tpr;
  if (cta < 32) cta = 32;
  p.cta = cta;
  p.stages = kRingStages;
  // Very wide rows: a single-row ring when two rows' vectors exceed shared memory.
  while (p.stages > 1 && (backward ? backward_smem_bytes(cta, p.vpt, p.stages, true)
                                   : forward_smem_bytes(cta, p.vpt, p.stages, true)) > kMaxSmemPerCta)
    --p.stages;
  return p;
}

// One ring program per width, direction and route (the ring is sized for the residual route);
// the forward's streaming windows run its row group, except the plain route's smallest T
// (forward_small_program below).
// Plain forward, VPT target 5: where a row splits evenly either way, 6 vectors a thread beat 3
// (half the warps a row, a shorter cross-warp reduction): H 6144 t128x2_v6 against t256x1_v3
// at T 1024: 8.2 vs 9.0 us, H 5120 T 4096: 23.8 vs 25.0 us, H 1536 (t32 v6 against t64 v3)
// T 4096: 7.8 vs 8.8 us; widths with a 4-vector split keep it (runs/h200-sweep-fwd-direct.json).
// Residual forward, VPT target 4: its two streams double the ring, and 6 vectors a thread
// measured 0.68-0.82x of the best peer at H 6144 (runs/h200-residual-perhead.json, d707f8b)
// where target 4 had measured 0.91-0.96x (runs/h200-residual-perhead-f31bcf5.json, the same
// forward kernel).
// Forward CTAs: up to 8 row groups, and at least 128 threads where groups are narrower (rows of
// 256 elements and less): H 256 t8x16 against t8x8 (ring) at T 16384 6.0 vs 7.0 us, T 65536
// 19.75 vs 21.0, residual T 16384 10.25 vs 11.0 (runs/h200-sweep-fwd-cta.json); at H 512, 16
// groups measured slower than 8 (T 65536 37.25 vs 36.1).
constexpr int kFwdVptTarget = 5;
constexpr int kFwdResidualVptTarget = 4;
constexpr int kFwdMinCtaThreads = 128;
constexpr int forward_groups(int tpr) { return tpr * 8 >= kFwdMinCtaThreads ? 8 : kFwdMinCtaThreads / tpr; }
constexpr Program forward_program(int hidden, bool residual = false) {
  const Program g = row_group(hidden, residual ? kFwdResidualVptTarget : kFwdVptTarget, kMaxFwdTpr, kFwdVpts,
                              kNumFwdVpts);
  return shaped(g, forward_groups(g.tpr), 256, false);
}
// The streaming forward (stages 0: no ring, every row's group in the grid, direct loads)
// runs the ring program's tpr, CTA and VPT, so a row's bits are the same in both (the row
// body is shared) and T may pick between them. Measured against the two-row ring on H200
// (benchmarks/sweep_programs.py --stages 0,2, docs/perf/runs/h200-sweep-fwd-stream.json; H
// 256..8192 plain, 1536..6144 residual, T 256..65536), for VPT <= 4 and a row held whole in
// the group's vectors, it wins
//  - while its grid is at most 512 CTAs and a call reads at most 4M elements (x, and r):
//    every load issued at once, no ring to fill (H 512 T 1024: 2.75 -> 2.5 us, H 2048
//    residual T 1024: 6.5 -> 6.0 us); past either bound it lost up to 15 %;
//  - from T * H >= 2^24 where a CTA reads >= 16 KB: 56 registers a thread against the ring's
//    115 keep twice the warps resident (H 4096: 4 CTAs of 256 threads an SM against 2; T 65536:
//    281.6 -> 260.0 us, H 8192 T 4096: 38.3 -> 35.0); with the ring's smaller CTAs (H 256,
//    H 512) it lost 9-30 % there: its CTAs turn over faster than the persistent ring's;
//  - for those narrow rows, from T * H >= 2^25 with CTAs widened to read 16 KB (H 256: t8x32,
//    H 512: t16x16; runs/h200-sweep-fwd-large.json): H 256 at 393216 rows (the per-head view's
//    T 16384) 105.0 -> 99.9 us and at 1572864 rows 421.8 -> 389.6, H 512 at 393216 rows 205.0
//    -> 194.9 and 65536 rows 35.9 -> 35.6; at 2^23..2^24 elements they lost up to 7 % (H 512
//    T 16384: 10.75 vs 11.5 us) or tied (H 256 T 65536). (The plain route at H 256, 512 and
//    1024 has streamed four rows a group there since: streaming_rows below.)
// At VPT 6 (H 768, 1536, 3072, 5120, 6144) the same kernel lost up to 20 % at most T: it held
// 74-118 registers a thread. Loading w after the thread's sum of squares, or an FP32 w at each
// use (forward.cuh, WLoad), brings it to 55-72, and from T * H >= 2^24 on the plain route, where
// the ring's CTA already reads >= 16 KB, it wins (runs/h200-stream-wload.md): H 6144 T 4096 28.6
// -> 26.9 us, T 65536 411 -> 384, H 5120 T 65536 343 -> 330 (FP32 w: 344 -> 323), H 3072 204 ->
// 191, H 1536 T 16384 28.5 -> 26.75; below 2^24 it lost up to 6 % (H 3072 T 4096: 14.75 vs
// 15.25), and H 768 (t16x8, 12 KB a CTA) tied at T 65536 widened. The residual route keeps the
// ring at VPT 6 (not measured streaming there).
constexpr int64_t kStreamMaxCtas = 512;
constexpr int64_t kStreamSmallElems = int64_t(1) << 22;
constexpr int64_t kStreamLargeElems = int64_t(1) << 24;
constexpr int64_t kStreamWidenedElems = int64_t(1) << 25;
constexpr int64_t kStreamMinCtaBytes = 16384;
constexpr bool holds_row(const Program& p, int hidden) {
  return int64_t(p.tpr) * p.vpt * 8 >= hidden;  // 8 16-bit elements a vector
}
constexpr bool streams(const Program& p, int hidden) { return p.vpt <= 4 && holds_row(p, hidden); }
constexpr bool streams_vpt6(const Program& p, int hidden, bool residual) {
  return p.vpt == 6 && !residual && holds_row(p, hidden);
}
// The most rows a small streaming window of program p serves: a grid of kStreamMaxCtas CTAs,
// kStreamSmallElems elements read.
constexpr int64_t stream_small_rows(const Program& p, int hidden, bool residual) {
  const int64_t by_ctas = kStreamMaxCtas * (p.cta / p.tpr);
  const int64_t by_elems = kStreamSmallElems / (int64_t(hidden) * (residual ? 2 : 1));
  return by_ctas < by_elems ? by_ctas : by_elems;
}
// The last T of the small streaming window (0: none).
constexpr int64_t stream_small_max(const Program& p, int hidden, bool residual) {
  return streams(p, hidden) ? stream_small_rows(p, hidden, residual) : 0;
}
constexpr Program streaming(Program p) {
  p.stages = 0;
  return p;
}

// The smallest T of the plain forward stream in a wider row group: VPT target 3 instead of 5
// (H 512 t32 v2, 1536 t64 v3, 2048 t128 v2, 4096 t256 v2, 6144 t256 v3), twice the warps
// a row and half the chain a thread, where a call is one latency-bound wave. Measured paired
// against the ring and stream programs of the ring's group (runs/h200-fwd-small-wide.md) at H
// 512..6144, T 256..3072: faster up to the small streaming bounds of its own program (512 CTAs,
// 4M elements: H 512 and 768 to T 4096, 1536 to 2048, 2048 and 3072 to 1024, 4096..6144 to
// 512), e.g. H 1536 T 256 2.75 -> 2.25 us, T 2048 5.25 -> 4.75, H 3072 T 1024 5.25 -> 4.75, H
// 5120 T 512 5.0 -> 4.5; past them it lost (H 2048 T 2048 5.75 -> 6.75, H 4096 T 1024 6.0 ->
// 6.9). A row group of its own, so at this window's upper edge the sum of squares is reduced
// in another order: rstd may move by an ulp or two and y by one ulp of the activation type on
// a few rows (measured and bounded in tests/test_determinism.py); within each window a row's
// outputs still do not depend on T. Groups of 32..256 threads (the measured range); the
// residual route keeps its own small window (not measured this way).
constexpr int kFwdSmallVptTarget = 3;
constexpr Program forward_small_program(int hidden) {
  const Program g = row_group(hidden, kFwdSmallVptTarget, kMaxFwdTpr, kFwdVpts, kNumFwdVpts);
  return streaming(shaped(g, forward_groups(g.tpr), 256, false));
}
// The last T of the wider group's window (0: none). None where the ring's own group is an
// exact warp (H 1024 t32 v4): streamed by its constant-width instance it beat the wider t64 v2
// at T 256 (2.0 vs 2.25 us) and 1024 (2.75 vs 3.0; runs/h200-sweep-narrow-exact.json).
constexpr int64_t small_group_max(const Program& ring, int hidden) {
  const Program w = forward_small_program(hidden);
  if (w.tpr == ring.tpr || w.tpr < 32 || w.tpr > 256 || !holds_row(w, hidden)) return 0;
  if (ring.tpr == 32 && exact_cover(ring.tpr, ring.vpt, hidden)) return 0;
  return stream_small_rows(w, hidden, false);
}
constexpr int64_t cta_read_bytes(const Program& p, int hidden, bool residual) {
  return int64_t(p.cta / p.tpr) * hidden * 2 * (residual ? 2 : 1);
}
// The large window's streaming program: the ring's row group, its CTA doubled while that
// stays a valid program, until it reads kStreamMinCtaBytes.
constexpr Program streaming_large(const Program& ring, int hidden, bool residual) {
  Program p = streaming(ring);
  while (cta_read_bytes(p, hidden, residual) < kStreamMinCtaBytes) {
    Program wider = p;
    wider.cta *= 2;
    if (!program_valid(wider, false, residual)) break;
    p = wider;
  }
  return p;
}
// The first T of the large streaming window (-1: none).
constexpr int64_t stream_large_min(const Program& ring, int hidden, bool residual) {
  if (streams_vpt6(ring, hidden, residual))  // unwidened: its CTA reads >= 16 KB, or it keeps the ring
    return cta_read_bytes(ring, hidden, residual) >= kStreamMinCtaBytes ? ceil_div(kStreamLargeElems, hidden)
                                                                         : -1;
  if (!streams(ring, hidden) || cta_read_bytes(streaming_large(ring, hidden, residual), hidden, residual) <
                                    kStreamMinCtaBytes)
    return -1;
  const bool widened = cta_read_bytes(ring, hidden, residual) < kStreamMinCtaBytes;
  return ceil_div(widened ? kStreamWidenedElems : kStreamLargeElems, hidden);
}
// Whether the wider group serves every T: where it is an exact warp and the ring never streams
// (VPT 6 in CTAs that read < 16 KB: H 768, t32 v3 against the ring's t16x8 v6). Measured in two
// sweeps (runs/h200-sweep-narrow.json, before the exact instances, and -exact.json): t32x8 v3
// streaming against the ring at T 8192 8.25 vs 8.0 us, T 16384 14.5 vs 14.75, T 65536 50.6 vs
// 52.4; so H 768 has one row group and no edge across which a row's bits move.
constexpr bool small_group_everywhere(const Program& ring, int hidden) {
  const Program w = forward_small_program(hidden);
  return small_group_max(ring, hidden) > 0 && w.tpr == 32 && exact_cover(w.tpr, w.vpt, hidden) &&
         !streams(ring, hidden) && stream_large_min(ring, hidden, false) < 0;
}
static_assert(stream_small_max(forward_program(512), 512, false) == 4096 &&
                  stream_large_min(forward_program(512), 512, false) == 65536 &&
                  streaming_large(forward_program(512), 512, false).cta == 256 &&
                  stream_large_min(forward_program(256), 256, false) == 131072 &&
                  streaming_large(forward_program(256), 256, false).cta == 256 &&
                  streaming_large(forward_program(4096), 4096, false).cta == forward_program(4096).cta &&
                  stream_large_min(forward_program(8), 8, false) == -1 &&
                  stream_small_max(forward_program(4096), 4096, false) == 1024 &&
                  stream_large_min(forward_program(4096), 4096, false) == 4096 &&
                  stream_small_max(forward_program(4096, true), 4096, true) == 512 &&
                  stream_small_max(forward_program(6144), 6144, false) == 0 &&
                  stream_large_min(forward_program(6144), 6144, false) == 2731 &&
                  streaming_large(forward_program(6144), 6144, false).cta == forward_program(6144).cta &&
                  stream_large_min(forward_program(1536), 1536, false) == 10923 &&
                  stream_large_min(forward_program(768), 768, false) == -1 &&
                  stream_large_min(forward_program(6144, true), 6144, true) == 2731,
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

// Narrow exact rows of the plain forward, whose first streaming window runs an exact group of
// at most a warp (H 256 t8 v4, 512 t32 v2 (the wider small-T group), 1024 t32 v4): past that
// window the same group streams kStreamRows rows a group in 128-thread CTAs, in place of the
// ring and its widened twin. Each thread has its 4 rows' loads in flight at once, where the
// ring's persistent groups kept one row ahead and one-row streaming CTAs turned over 4x as
// often. One row group at every T, so these widths have no window edge across which a row's
// bits move. Measured paired against the tables before (runs/h200-stream-rows.md, H 512 on two
// GPUs): H 512 T 8192..65536 6.25 -> 6.12, 10.25 -> 9.75, 18.9 -> 18.4, 35.6 -> 34.6 us;
// H 1024 T 4096..65536 6.25 -> 6.0, 19.5 -> 18.5, 68.1 -> 67.5; the per-head view [T, 24, 256]
// at T 1024..16384 8.25 -> 7.9, 27.75 -> 27.0, 100.5 -> 100.25, tied at T 65536 (392). H 768
// (t32 v3, one window) measured no faster with several rows (T 65536, 128-thread CTAs: 51.1 us
// one row, 51.4 four).
constexpr Program streaming_rows(Program p) {
  p.stages = 0;
  p.rows = kStreamRows;
  p.cta = p.tpr < kFwdMinCtaThreads ? kFwdMinCtaThreads : p.tpr;
  return p;
}
constexpr bool streams_rows(const Program& first, int hidden) {
  return first.stages == 0 && first.tpr <= 32 && exact_cover(first.tpr, first.vpt, hidden);
}
static_assert(streams_rows(streaming(forward_program(256)), 256) && streams_rows(forward_small_program(512), 512) &&
                  streams_rows(streaming(forward_program(1024)), 1024) &&
                  !streams_rows(streaming(forward_program(2048)), 2048) &&
                  streaming_rows(forward_small_program(512)).cta == 128 &&
                  program_valid(streaming_rows(forward_small_program(512)), false) &&
                  program_valid(streaming_rows(streaming(forward_program(256))), false),
              "several rows a group at H 256, 512 and 1024 only");

constexpr Program backward_program(int hidden) {
  return shaped(row_group(hidden, 2, kMaxBwdTpr, kBwdVpts, kNumBwdVpts), 8, 128, true);
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
static_assert(forward_program(6144).tpr == 128 && forward_program(6144).vpt == 6 && forward_program(6144).cta == 256 &&
                  forward_program(5120).tpr == 128 && forward_program(5120).vpt == 6 &&
                  forward_program(1536).tpr == 32 && forward_program(1536).vpt == 6 &&
                  forward_program(4096).tpr == 128 && forward_program(4096).vpt == 4,
              "fwd: 6 vectors a thread where the row splits evenly into them");
static_assert(forward_program(6144, true).tpr == 256 && forward_program(6144, true).vpt == 3 &&
                  forward_program(1536, true).tpr == 64 && forward_program(1536, true).vpt == 3,
              "residual fwd: the 4-vector target");
static_assert(backward_program(1 << 20).tpr == kMaxBwdTpr && backward_program(1 << 20).vpt == 4,
              "very wide rows: the widest group, the rest read directly");
constexpr bool widths_valid(const int* hs, int n) {
  for (int i = 0; i < n; ++i)
    if (!program_valid(forward_program(hs[i]), false) || !program_valid(forward_program(hs[i], true), false) ||
        !program_valid(streaming(forward_program(hs[i])), false) ||
        !program_valid(streaming_large(forward_program(hs[i]), hs[i], false), false) ||
        !program_valid(streaming_large(forward_program(hs[i], true), hs[i], true), false) ||
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
