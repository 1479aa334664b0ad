// What fixes bits: one contract for every architecture. The widths served, the dw chunking
// (a function of rows and width alone), the finalize's lanes (kernels/params.h, a function of
// the chunk count alone) and each width's row groups, whose shape sets the order of a row's
// sums (rstd, the backward's mean) that the CPU path replays. No field here may differ by
// device: an architecture's tuning table (programs.h, ArchTable) sizes CTAs, rings, windows and
// grids around these groups and never picks another. constexpr, CUDA-free and torch-free.
#pragma once

#include <stdint.h>

#include "../kernels/fp32_width.h"
#include "../kernels/params.h"

namespace cake {

// ---- widths ------------------------------------------------------------------------------

// The widths the library serves: positive multiples of 8 (16-byte vectors of 16-bit values),
// at most 2^30 (rows * hidden stays an int64 with room). The one statement of the rule.
constexpr int64_t kMaxHidden = int64_t(1) << 30;
constexpr bool width_served(int64_t hidden) { return hidden > 0 && hidden % 8 == 0 && hidden <= kMaxHidden; }

constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---- dw chunking --------------------------------------------------------------------------

// dw partial chunks for `rows` rows of width `hidden`: a function of (rows, hidden) alone,
// never of the device or the program, so dw's reduction tree (and bits) is the same on every
// GPU and on the CPU path. At least two rows a chunk, at most max_chunks; widths 264..4096 hold
// half the cap until the full cap's chunks would each hold 32 rows, then take the cap: the
// count doubles in one step, never a few chunks past a full wave (docs/perf/dispatch.md#dw-chunks).
constexpr int64_t kRowsPerChunkMin = 2;
constexpr int64_t kRowsPerChunkAtCap = 32;
constexpr int64_t max_chunks(int64_t hidden) {
  return hidden <= 256 ? 4096 : hidden <= 512 ? 2048 : hidden <= 2048 ? 1024 : hidden <= 4096 ? 512 : 256;
}
// The most chunks a caller may give (cake_rmsnorm_backward_partials, dw_finalize): the
// largest count the library itself uses.
constexpr int64_t kMaxGivenChunks = max_chunks(1);
constexpr bool holds_half_cap(int64_t hidden) { return hidden > 256 && hidden <= 4096; }
constexpr int64_t backward_chunks(int64_t rows, int64_t hidden) {
  if (rows <= 0) return 0;
  const int64_t cap = max_chunks(hidden);
  const int64_t pairs = ceil_div(rows, kRowsPerChunkMin);
  int64_t c = pairs < cap ? pairs : cap;
  if (holds_half_cap(hidden) && ceil_div(rows, kRowsPerChunkAtCap) < cap && c > cap / 2) c = cap / 2;
  return c;
}
// Rows from which the chunk count (and the workspace) stops growing: the first with
// backward_chunks == max_chunks.
constexpr int64_t backward_saturating_rows(int64_t hidden) {
  return holds_half_cap(hidden) ? kRowsPerChunkAtCap * (max_chunks(hidden) - 1) + 1
                                : kRowsPerChunkMin * (max_chunks(hidden) - 1) + 1;
}

// ---- row groups ---------------------------------------------------------------------------

// The compile-time vector counts that are instantiated (vectors per thread): the row groups
// below are searched over them.
constexpr int kFwdVpts[] = {1, 2, 3, 4, 6, 8};
constexpr int kBwdVpts[] = {1, 2, 3, 4};
constexpr int kNumFwdVpts = sizeof(kFwdVpts) / sizeof(int);
constexpr int kNumBwdVpts = sizeof(kBwdVpts) / sizeof(int);
constexpr int kMaxFwdTpr = kMaxFwdThreads;
constexpr int kMaxBwdTpr = kMaxBwdThreads;

// A row group: threads a row (a power of two) and 16-byte vectors a thread.
struct Group {
  int tpr, vpt;
};

// The rule every width's groups follow (each fit on the H200 first, then frozen: a different
// group on another device would give a row other bits; docs/perf/dispatch.md#ring-programs).
struct GroupRule {
  int fwd_vpt_target;           // the plain forward's ring group: vectors a thread it aims at
  int fwd_residual_vpt_target;  // the residual forward's (summed in the plain group's order: kPairs)
  int fwd_small_vpt_target;     // the plain forward's wider group at the smallest T (the same order)
  int fwd_two_vector_max;       // plain-forward rows of 64 up to this many elements (a power of two)
                                // take two vectors a thread (dispatch.md#two-vector-rows)
  int bwd_vpt_target;           // the backward's group
  int bwd_wide_above;           // backward rows wider than this take one 512-thread group at VPT 4
                                // (dispatch.md#wide-rows)
  int fp32_fwd_vectors;         // FP32 activations: float4 vectors a thread, forward (dispatch.md#fp32-vectors)
  int fp32_bwd_vectors;         // ... backward
};
constexpr GroupRule kGroupRule{5, 4, 3, 128, 2, 10240, 4, 2};

// The power-of-two tpr (<= max_tpr) and instantiated VPT that cover the row with the fewest
// idle vector slots, ties going to the VPT nearest `target` (registers against threads), then
// to the smaller VPT; rows wider than max_tpr * the largest VPT keep the widest group and read
// the rest directly.
constexpr Group row_group(int hidden, int target, int max_tpr, const int* vpts, int n) {
  const int nvec = hidden / 8;
  Group best{0, 0};
  int best_waste = 1 << 30, best_dist = 1 << 30;
  for (int tpr = 1; tpr <= max_tpr; tpr <<= 1) {
    for (int i = 0; i < n; ++i) {
      const int cover = tpr * vpts[i];
      const int waste = cover >= nvec ? cover - nvec : (tpr == max_tpr && i == n - 1 ? 0 : -1);
      if (waste < 0) continue;
      const int dist = vpts[i] > target ? vpts[i] - target : target - vpts[i];
      if (waste < best_waste || (waste == best_waste && dist <= best_dist)) {  // ties: fewer registers
        best = Group{tpr, vpts[i]};
        best_waste = waste;
        best_dist = dist;
      }
    }
  }
  return best;
}

// Plain-forward rows of 64 and 128 elements take two vectors a thread (t4 v2, t8 v2): a warp's
// load then reads 64 or 128 contiguous bytes of each row it touches, not 32 or 64.
constexpr bool two_vector_row(int hidden, bool residual) {
  return !residual && hidden >= 64 && hidden <= kGroupRule.fwd_two_vector_max && (hidden & (hidden - 1)) == 0;
}
// The forward's ring group of a width and route (its streaming windows run it too).
constexpr Group forward_group(int hidden, bool residual) {
  if (two_vector_row(hidden, residual)) return Group{hidden / 16, 2};
  return row_group(hidden, residual ? kGroupRule.fwd_residual_vpt_target : kGroupRule.fwd_vpt_target, kMaxFwdTpr,
                   kFwdVpts, kNumFwdVpts);
}
// The plain forward's wider group at the smallest T: (2 tpr, VPT / 2) of the ring's where it
// has a window, summing a row in the ring's order (kernels/reduce.cuh, group_sum_pairs).
constexpr Group forward_small_group(int hidden) {
  return row_group(hidden, kGroupRule.fwd_small_vpt_target, kMaxFwdTpr, kFwdVpts, kNumFwdVpts);
}
// The backward's one group a width: rows wider than bwd_wide_above (and than a 256-thread group
// at VPT 4 holds) take one 512-thread group at VPT 4 (the wide instance, backward.cuh).
constexpr bool backward_wide(int hidden) {
  return hidden > kGroupRule.bwd_wide_above && hidden > kMaxBwdTpr * 4 * 8;
}
constexpr Group backward_group(int hidden) {
  if (backward_wide(hidden)) return Group{kMaxBwdWideThreads, kBwdWideVpt};
  return row_group(hidden, kGroupRule.bwd_vpt_target, kMaxBwdTpr, kBwdVpts, kNumBwdVpts);
}
// FP32 activations (kernels/fp32_rows.cuh): threads a row.
constexpr int fp32_group_tpr(int hidden, bool backward) {
  return fp32_tpr(hidden, backward ? kGroupRule.fp32_bwd_vectors : kGroupRule.fp32_fwd_vectors);
}

// The row group whose order every GPU program of a width follows for a row's sums (rstd, the
// backward's mean(g*w*xhat)); the CPU path computes it (kernels/cpu/row_order.h). The forward:
// the plain route's ring group, whose order the small-T group and the residual route's group
// share (kPairs; tests/cpp/pairs_twins.cpp); the backward: its one group a width; FP32
// activations: their groups. Rows past what the GPU serves (FP32 wider than 16384) keep the
// widest group with more vectors a thread.
struct RowOrderGroup {
  int tpr, vectors;
  bool pairs, fp32;
};
constexpr RowOrderGroup row_order_group(int64_t hidden, bool backward, bool fp32) {
  const int h = static_cast<int>(hidden);
  if (fp32) {
    const int tpr = fp32_group_tpr(h, backward);
    const int need = static_cast<int>((hidden / 4 + tpr - 1) / tpr), nv = fp32_nv(h, tpr);
    return RowOrderGroup{tpr, need > nv ? need : nv, false, true};
  }
  const Group g = backward ? backward_group(h) : forward_group(h, false);
  return RowOrderGroup{g.tpr, g.vpt, !backward && pairs_vpt(g.vpt), false};
}

static_assert(backward_chunks(1, 6144) == 1 && backward_chunks(1 << 20, 6144) == 256 &&
                  backward_chunks(1 << 20, 512) == 2048 && backward_chunks(2048, 512) == 1024 &&
                  backward_chunks(4096, 512) == 1024 && backward_chunks(32768, 512) == 1024 &&
                  backward_chunks(65536, 512) == 2048 && backward_chunks(16384, 2048) == 512 &&
                  backward_chunks(65536, 2048) == 1024 && backward_chunks(8192, 256) == 4096 &&
                  backward_chunks(4096, 4096) == 256 && backward_chunks(1024, 4096) == 256 &&
                  backward_chunks(65536, 4096) == 512 && backward_chunks(4096, 5120) == 256 &&
                  backward_chunks(12345, 3584) == 256 && backward_chunks(16352, 4096) == 256 &&
                  backward_chunks(16353, 4096) == 512 && backward_chunks(32736, 2048) == 512 &&
                  backward_chunks(32737, 2048) == 1024,
              "chunks: the contract's counts (a change moves every dw bit of these shapes)");
constexpr bool chunks_nondecreasing(int64_t hidden) {
  const int64_t sat = backward_saturating_rows(hidden);
  // Nondecreasing, and past half the cap only half the cap or the cap (whole doublings, never a
  // few chunks over a wave); checked at every row near both ends and every 61st between.
  for (int64_t r = 1; r < sat + 64; r += (r < 64 || r + 64 > sat) ? 1 : 61) {
    const int64_t c = backward_chunks(r, hidden), cap = max_chunks(hidden);
    if (backward_chunks(r + 1, hidden) < c) return false;
    if (holds_half_cap(hidden) && c > cap / 2 && c != cap) return false;
  }
  return backward_chunks(sat, hidden) == max_chunks(hidden) && backward_chunks(sat - 1, hidden) < max_chunks(hidden);
}
static_assert(chunks_nondecreasing(256) && chunks_nondecreasing(512) && chunks_nondecreasing(1536) &&
                  chunks_nondecreasing(2048) && chunks_nondecreasing(4096) && chunks_nondecreasing(6144),
              "chunk counts never shrink as rows grow, and saturate where backward_saturating_rows says");
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

}  // namespace cake
