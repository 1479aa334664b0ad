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
constexpr int kMaxFwdTpr = kMaxFwdThreads;
constexpr int kMaxBwdTpr = kMaxBwdThreads;

// dw partial chunks for `rows` rows of width `hidden`: a function of (rows, hidden) alone,
// never of the device or the program, so the dw reduction tree (and its bits) is the same on
// every GPU and on the CPU path. At least two rows a chunk; at most about a whole number of
// waves of the row groups an H200 holds at once for that width (no ragged tail), which keeps
// the FP32 partials near 1-3 % of the backward's traffic at large T.
constexpr int64_t kRowsPerChunkMin = 2;
constexpr int64_t max_chunks(int64_t hidden) {
  return hidden <= 256 ? 4096 : hidden <= 512 ? 2048 : hidden <= 2048 ? 1024 : hidden <= 4096 ? 512 : 256;
}
constexpr int64_t backward_chunks(int64_t rows, int64_t hidden) {
  return rows <= 0 ? 0
                   : ((rows + kRowsPerChunkMin - 1) / kRowsPerChunkMin < max_chunks(hidden)
                          ? (rows + kRowsPerChunkMin - 1) / kRowsPerChunkMin
                          : max_chunks(hidden));
}
// Rows from which the chunk count (and the workspace) stops growing.
constexpr int64_t backward_saturating_rows(int64_t hidden) {
  return max_chunks(hidden) * kRowsPerChunkMin;
}

struct Program {
  int tpr;  // threads per row group, a power of two
  int cta;  // threads per CTA: tpr * row groups per CTA
  int vpt;  // 16-byte vectors per thread held in the ring (an instantiated value)
  int ctas_per_sm = 0;  // persistent grid: CTAs per SM (0: as many as fit)
  int stages = 1;       // cp.async ring depth, 1..kMaxStages
};

constexpr bool vpt_instantiated(int vpt, bool backward) {
  bool ok = false;
  for (int v : kFwdVpts) ok = ok || (!backward && v == vpt);
  for (int v : kBwdVpts) ok = ok || (backward && v == vpt);
  return ok;
}

// Whether the kernels can run `p` on a route with (res) or without a residual stream (what a
// tuning override must satisfy).
constexpr bool program_valid(const Program& p, int hidden, bool backward, bool res = true) {
  const int max_threads = backward ? kMaxBwdThreads : kMaxFwdThreads;
  const bool pow2 = p.tpr > 0 && (p.tpr & (p.tpr - 1)) == 0;
  const int rpc = p.tpr > 0 ? p.cta / p.tpr : 0;
  const size_t smem = backward ? backward_smem_bytes(p.cta, p.vpt, p.stages, res)
                               : forward_smem_bytes(p.cta, p.vpt, p.stages, res);
  (void)hidden;  // any width runs: columns past vpt * tpr vectors take the direct path
  return vpt_instantiated(p.vpt, backward) && pow2 && p.tpr <= max_threads && p.cta % 32 == 0 &&
         p.cta % p.tpr == 0 && p.cta <= max_threads &&
         (p.tpr <= 32 || rpc < 16) &&  // named barriers 1..15
         p.stages >= 1 && p.stages <= kMaxStages && smem <= kMaxSmemPerCta && p.ctas_per_sm >= 0;
}

constexpr int pow2_ceil(int v) {
  int p = 1;
  while (p < v) p <<= 1;
  return p;
}

// The general program's row group: the power-of-two tpr (>= min_tpr, <= max_tpr) and an
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

// Deepest ring (<= kMaxStages) whose CTA stays within `budget` bytes of shared memory.
constexpr int ring_stages(int cta, int vpt, bool backward, bool res, size_t budget) {
  int s = kMaxStages;
  while (s > 1 && (backward ? backward_smem_bytes(cta, vpt, s, res) : forward_smem_bytes(cta, vpt, s, res)) > budget)
    --s;
  return s;
}

// Small launches (few rows) want many small CTAs, so every row lands on its own SM; large
// ones want CTAs of a few hundred threads.
constexpr int64_t kSmallRows = 4096;
constexpr Program with_cta(Program p, int min_cta, bool backward, bool res, size_t budget) {
  p.cta = p.tpr < min_cta ? min_cta : p.tpr;
  p.stages = ring_stages(p.cta, p.vpt, backward, res, budget);
  return p;
}

constexpr size_t kFwdRingBudget = 48 * 1024;   // >= 4 CTAs an SM
constexpr size_t kBwdRingBudget = 100 * 1024;  // 2 CTAs an SM

constexpr Program forward_program(int hidden, int64_t rows, bool res = false) {
  return with_cta(row_group(hidden, 2, kMaxFwdTpr, kFwdVpts, kNumFwdVpts), rows <= kSmallRows ? 32 : 128,
                  false, res, kFwdRingBudget);
}
constexpr Program backward_program(int hidden, int64_t rows, bool res = false) {
  return with_cta(row_group(hidden, 3, kMaxBwdTpr, kBwdVpts, kNumBwdVpts), rows <= kSmallRows ? 32 : 256,
                  true, res, kBwdRingBudget);
}

static_assert(row_group(6144, 2, 512, kFwdVpts, kNumFwdVpts).tpr == 256 &&
                  row_group(6144, 2, 512, kFwdVpts, kNumFwdVpts).vpt == 3,
              "fwd 6144: 256 threads x 3 vectors");
static_assert(backward_program(6144, 1 << 16).tpr == 256 && backward_program(6144, 1 << 16).vpt == 3, "bwd 6144");
static_assert(backward_program(512, 1 << 16).cta == 256, "narrow rows share a CTA");
static_assert(backward_program(1 << 20, 1).tpr == kMaxBwdTpr && backward_program(1 << 20, 1).vpt == 4,
              "very wide rows: the widest group, the rest read directly");
static_assert(kMaxBwdThreads / 64 < 16 && kMaxFwdThreads / 64 < 16, "named barriers 1..15 suffice");
static_assert(program_valid(forward_program(6144, 1), 6144, false) &&
                  program_valid(forward_program(6144, 1 << 20), 6144, false) &&
                  program_valid(backward_program(6144, 1 << 20), 6144, true) &&
                  program_valid(backward_program(1 << 20, 1 << 20, true), 1 << 20, true, true) &&
                  program_valid(forward_program(6144, 1 << 20, true), 6144, false, true) &&
                  program_valid(backward_program(8, 1), 8, true),
              "the general programs are valid");
static_assert(backward_chunks(1, 6144) == 1 && backward_chunks(1 << 20, 6144) == 256 &&
                  backward_chunks(1 << 20, 512) == 2048,
              "chunks");

}  // namespace cake
