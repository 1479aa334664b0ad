// Program selection: (route, hidden, T) -> the compile-time shape a launch uses. constexpr,
// CUDA-free and torch-free, so the C API, the tests and the CPU path all see the same tables.
#pragma once

#include <stdint.h>

#include "../kernels/params.h"

namespace cake {

// The compile-time vector caches that are instantiated (vectors per thread).
constexpr int kFwdVpts[] = {1, 2, 4, 8};
constexpr int kBwdVpts[] = {1, 2, 4};
constexpr int kMaxFwdTpr = kMaxFwdThreads;
constexpr int kMaxBwdTpr = kMaxBwdThreads;

// dw partial chunks for `rows` rows: a function of rows alone, never of the device, so the
// dw reduction tree (and its bits) is the same on every GPU and on the CPU path.
constexpr int64_t kMaxChunks = 256;
constexpr int64_t kRowsPerChunkMin = 2;
constexpr int64_t backward_chunks(int64_t rows) {
  return rows <= 0 ? 0
                   : ((rows + kRowsPerChunkMin - 1) / kRowsPerChunkMin < kMaxChunks
                          ? (rows + kRowsPerChunkMin - 1) / kRowsPerChunkMin
                          : kMaxChunks);
}
constexpr int64_t backward_saturating_rows() { return kMaxChunks * kRowsPerChunkMin; }

struct Program {
  int tpr;  // threads per row group, a power of two
  int cta;  // threads per CTA: tpr * rows per CTA
  int vpt;  // 16-byte vectors per thread held in registers (an instantiated value)
  int ctas_per_sm = 0;  // forward persistent grid: CTAs per SM (0: as many as fit)
};

// Whether the kernels can run `p` for `hidden` (what a tuning override must satisfy).
constexpr bool program_valid(const Program& p, int hidden, bool backward) {
  const int max_threads = backward ? kMaxBwdThreads : kMaxFwdThreads;
  bool vpt_ok = false;
  for (int v : kFwdVpts) vpt_ok = vpt_ok || (!backward && v == p.vpt);
  for (int v : kBwdVpts) vpt_ok = vpt_ok || (backward && v == p.vpt);
  const bool pow2 = p.tpr > 0 && (p.tpr & (p.tpr - 1)) == 0;
  const int rpc = p.tpr > 0 ? p.cta / p.tpr : 0;
  const bool second_pass = hidden / 8 > p.vpt * p.tpr;
  return vpt_ok && pow2 && p.tpr <= max_threads && p.cta % 32 == 0 && p.cta % p.tpr == 0 &&
         p.cta <= max_threads && (p.tpr <= 32 || rpc < 16) &&  // named barriers 1..15
         (!backward || !second_pass || rpc == 1) && p.ctas_per_sm >= 0;  // in-place dw of the rest
}

constexpr int pow2_ceil(int v) {
  int p = 1;
  while (p < v) p <<= 1;
  return p;
}

constexpr int instantiated_vpt(int need, const int* vpts, int n) {
  for (int i = 0; i < n; ++i)
    if (vpts[i] >= need) return vpts[i];
  return vpts[n - 1];  // wider rows: the kernel's second pass re-reads the rest
}

// The general program: the narrowest power-of-two group that holds the row in `target`
// vectors per thread (capped at max_tpr), and as many groups per CTA as fill `min_cta`
// threads (groups wider than a warp synchronise on named barriers of their own).
constexpr Program general_program(int hidden, int target, int max_tpr, int min_cta, const int* vpts,
                                  int n) {
  const int nvec = hidden / 8;
  int tpr = pow2_ceil((nvec + target - 1) / target);
  if (tpr > max_tpr) tpr = max_tpr;
  const int need = (nvec + tpr - 1) / tpr;
  const int cta = tpr < min_cta ? min_cta : tpr;
  return Program{tpr, cta, instantiated_vpt(need, vpts, n), 0};
}

constexpr int kFwdMinCta = 128;
constexpr int kBwdMinCta = 256;  // several rows in flight per CTA: the grid is only kMaxChunks

constexpr Program forward_program(int hidden) {
  return general_program(hidden, 2, kMaxFwdTpr, kFwdMinCta, kFwdVpts, 4);
}
constexpr Program backward_program(int hidden) {
  return general_program(hidden, 4, kMaxBwdTpr, kBwdMinCta, kBwdVpts, 3);
}

static_assert(forward_program(6144).tpr == 512 && forward_program(6144).vpt == 2, "fwd 6144");
static_assert(backward_program(6144).tpr == 256 && backward_program(6144).vpt == 4, "bwd 6144");
static_assert(backward_program(512).cta == kBwdMinCta, "narrow rows share a CTA");
static_assert(backward_program(2048).tpr == 64 && backward_program(2048).cta == 256, "4 rows a CTA");
static_assert(kMaxBwdThreads / 64 < 16 && kMaxFwdThreads / 64 < 16, "named barriers 1..15 suffice");
static_assert(backward_program(8192).vpt == 4 && backward_program(8192).tpr == 256, "bwd 8192");
static_assert(backward_program(1 << 20).tpr == kMaxBwdTpr && backward_program(1 << 20).cta == kMaxBwdTpr,
              "rows with a second pass own the CTA (dw of the rest is summed in place)");
static_assert(program_valid(forward_program(6144), 6144, false) && program_valid(backward_program(6144), 6144, true) &&
                  program_valid(backward_program(1 << 20), 1 << 20, true),
              "the general programs are valid");
static_assert(backward_chunks(1) == 1 && backward_chunks(1 << 20) == kMaxChunks, "chunks");

}  // namespace cake
