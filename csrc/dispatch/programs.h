// Program selection: (route, hidden, T) -> the compile-time shape a launch uses (why each rule:
// docs/perf/dispatch.md). constexpr,
// CUDA-free and torch-free, so the C API, the tests and the CPU path all see the same tables.
#pragma once

#include <stdint.h>

#include "contract.h"

namespace cake {

// The exact narrow groups, compiled with a constant width (forward.cuh and backward.cuh, kTpr):
// groups of at most a warp whose vectors cover a row exactly (forward H 64, 128, 256, 512, 768,
// 1024; backward t16 v2, t32 v2, t32 v3). No masks or rest loops; the same bits as the
// runtime-width kernels (docs/perf/dispatch.md#exact-groups).
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
// The tuning data of one architecture: what may differ by device around the contract's groups
// (contract.h): CTA sizes, ring depths, window edges and kernel choices that move no bit. Each
// field names the measurement that set it (docs/perf/dispatch.md unless a run file is named).
// sm_90a's is the H200's; sm_100a, sm_103a and sm_107a are copies marked unmeasured (nothing was
// timed there). Fields that count CTAs or a launch's elements were fit at `tuned_sms` SMs and
// scale to the device's own count (for_device), so each device's windows and grids come from
// its own SM count rather than the H200's.
struct ArchTable {
  int sm;
  bool measured;                 // false: a copy of sm_90a's, not measured on this architecture
  int64_t tuned_sms;             // the SM count the counts below were fit at (H200: 132)
  int fwd_max_groups;            // row groups a forward CTA (#the-cta-and-the-two-row-ring)
  int fwd_min_cta_threads;       // ... and at least this many threads (#the-cta-and-the-two-row-ring)
  int fwd_cta_cap;               // threads a forward ring CTA at most (#the-cta-and-the-two-row-ring)
  int bwd_max_groups;            // row groups a backward CTA (#the-cta-and-the-two-row-ring)
  int bwd_cta_cap;               // threads a backward CTA at most (#the-cta-and-the-two-row-ring)
  int ring_stages;               // rows in a row group's cp.async ring (#the-cta-and-the-two-row-ring)
  int64_t stream_max_ctas;       // the small streaming window: at most this grid (scaled) ...
  int64_t stream_small_elems;    // ... and this many elements read (scaled; #the-streaming-forward...)
  int64_t stream_large_elems;    // the large streaming window from this many elements (scaled)
  int64_t stream_widened_elems;  // ... from this many with CTAs widened for narrow rows (scaled)
  int64_t stream_min_cta_bytes;  // a streaming CTA reads at least this much in the large window
  int64_t fp32_w_late_elems;     // an FP32 w loaded after the sum from this many elements (scaled;
                                 // #where-the-streaming-forward-loads-w)
  int bwd_one_launch_chunks;     // the backward runs one launch up to this many dw chunks
                                 // (#the-one-launch-backward-at-the-fewest-chunks)
  int bwd_warp_chunk_rows;       // ... and warp chunks for narrow rows from this many rows a chunk
                                 // (#warp-chunks-for-narrow-rows)
  int bwd_warp_chunks_cta;       // ... in CTAs of this many threads (the row kernel's cap)
  size_t smem_per_cta;           // dynamic shared memory a CTA may opt into (rings shrink to fit)
  int fp32_min_cta;              // FP32 activations: threads a CTA of groups of a warp or less
  int fp32_fwd_late_w_tpr;       // ... the forward loads w after the sum in groups of this many
                                 // threads and up (#w-after-the-sum-for-fp32-rows-of-a-whole-cta)
};
constexpr ArchTable sm90_table() {
  ArchTable t{};
  t.sm = 90;
  t.measured = true;
  t.tuned_sms = 132;
  t.fwd_max_groups = 8;
  t.fwd_min_cta_threads = 128;
  t.fwd_cta_cap = 256;
  t.bwd_max_groups = 8;
  t.bwd_cta_cap = 128;
  t.ring_stages = 2;
  t.stream_max_ctas = 512;
  t.stream_small_elems = int64_t(1) << 22;
  t.stream_large_elems = int64_t(1) << 24;
  t.stream_widened_elems = int64_t(1) << 25;
  t.stream_min_cta_bytes = 16384;
  t.fp32_w_late_elems = int64_t(1) << 26;
  t.bwd_one_launch_chunks = 64;
  t.bwd_warp_chunk_rows = 8;
  t.bwd_warp_chunks_cta = 256;
  t.smem_per_cta = kMaxSmemPerCta;
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
// `t` on a device of `sms` SMs: the counts fit at t.tuned_sms scaled by sms / tuned_sms (rounded
// to nearest), so a launch's windows cover the same waves of CTAs on every device; sms 0 (not
// known) keeps the table's own. A window edge moves no bit (windows.h), so neither does this.
constexpr int64_t scaled_count(int64_t v, int64_t sms, int64_t tuned) { return (v * sms + tuned / 2) / tuned; }
constexpr ArchTable for_device(const ArchTable& t, int64_t sms) {
  if (sms <= 0 || sms == t.tuned_sms) return t;
  ArchTable d = t;
  d.stream_max_ctas = scaled_count(t.stream_max_ctas, sms, t.tuned_sms);
  d.stream_small_elems = scaled_count(t.stream_small_elems, sms, t.tuned_sms);
  d.stream_large_elems = scaled_count(t.stream_large_elems, sms, t.tuned_sms);
  d.stream_widened_elems = scaled_count(t.stream_widened_elems, sms, t.tuned_sms);
  d.fp32_w_late_elems = scaled_count(t.fp32_w_late_elems, sms, t.tuned_sms);
  return d;
}
static_assert(for_device(kSm90, 132).stream_max_ctas == 512 && for_device(kSm90, 0).stream_max_ctas == 512 &&
                  for_device(kSm90, 148).stream_max_ctas == 574 && for_device(kSm90, 212).stream_max_ctas == 822,
              "the H200's counts scale with the SM count, unchanged at 132");

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

// A contract group (contract.h) as a program, its CTA and ring still to shape.
constexpr Program group_program(Group g) { return Program{g.tpr, 0, g.vpt, 0, 1}; }

// The CTA: up to max_groups row groups, at most cta_cap threads, and a two-row ring (the next
// row's loads fly while this one is reduced), fit to program sweeps on the H200
// (docs/perf/dispatch.md#cta-and-ring).
constexpr Program shaped(Program p, int max_groups, int cta_cap, bool backward, const ArchTable& t) {
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
constexpr int forward_groups(int tpr, const ArchTable& t) {
  return tpr * t.fwd_max_groups >= t.fwd_min_cta_threads ? t.fwd_max_groups : t.fwd_min_cta_threads / tpr;
}
// The ring program of a width and route: the contract's group (contract.h, forward_group) in
// the table's CTA.
constexpr Program forward_program(int hidden, bool residual, const ArchTable& t) {
  const Program g = group_program(forward_group(hidden, residual));
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
constexpr int64_t small_window_rows(const Program& p, int hidden, bool residual, const ArchTable& t) {
  const int64_t by_ctas = t.stream_max_ctas * (p.cta / p.tpr);
  const int64_t by_elems = t.stream_small_elems / (int64_t(hidden) * (residual ? 2 : 1));
  return by_ctas < by_elems ? by_ctas : by_elems;
}
// The last T of the small streaming window (0: none).
constexpr int64_t small_window_max(const Program& p, int hidden, bool residual, const ArchTable& t) {
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
constexpr Program forward_small_program(int hidden, const ArchTable& t) {
  const Program g = group_program(forward_small_group(hidden));
  return as_streaming(shaped(g, forward_groups(g.tpr, t), t.fwd_cta_cap, false, t));
}
// The last T of the wider group's window (0: none); none where the ring's own group is an
// exact warp (H 1024 t32 v4; docs/perf/dispatch.md#small-t-group).
constexpr int64_t small_group_max(const Program& ring, int hidden, const ArchTable& t) {
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
constexpr Program widened_streaming(const Program& ring, int hidden, bool residual, const ArchTable& t) {
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
constexpr int64_t large_window_min(const Program& ring, int hidden, bool residual, const ArchTable& t) {
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
constexpr bool small_group_everywhere(const Program& ring, int hidden, const ArchTable& t) {
  const Program w = forward_small_program(hidden, t);
  return small_group_max(ring, hidden, t) > 0 && w.tpr == 32 && exact_cover(w.tpr, w.vpt, hidden) &&
         !can_stream(ring, hidden) && large_window_min(ring, hidden, false, t) < 0;
}

// Narrow exact rows of the plain forward (H 128 t8 v2, 256 t8 v4, 512 t32 v2, 1024 t32 v4): past their
// first streaming window the same group streams kStreamRows rows a group in 128-thread CTAs,
// in place of the ring and its widened twin; one row group at every T, so no window edge
// moves a row's bits (docs/perf/dispatch.md#multirow).
constexpr Program multirow_streaming(Program p, const ArchTable& t) {
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
constexpr bool streams_everywhere(const Program& ring, int hidden, bool residual, const ArchTable& t) {
  return two_vector_row(hidden, residual) && ring.tpr < 8;
}

// The backward's program: the contract's group (contract.h, backward_group) in the table's CTA;
// the wide rows' 512-thread group is its CTA alone (backward.cuh's wide instance: rows up to
// 16384 held whole in the ring; dispatch.md#wide-rows).
constexpr Program backward_program(int hidden, const ArchTable& t) {
  const Program g = group_program(backward_group(hidden));
  if (backward_wide(hidden)) return shaped(g, 1, kMaxBwdWideThreads, true, t);
  return shaped(g, t.bwd_max_groups, t.bwd_cta_cap, true, t);
}

constexpr bool widths_valid(const int* hs, int n, const ArchTable& t) {
  for (int i = 0; i < n; ++i)
    if (!program_valid(forward_program(hs[i], false, t), false) || !program_valid(forward_program(hs[i], true, t), false) ||
        !program_valid(as_streaming(forward_program(hs[i], false, t)), false) ||
        !program_valid(widened_streaming(forward_program(hs[i], false, t), hs[i], false, t), false) ||
        !program_valid(widened_streaming(forward_program(hs[i], true, t), hs[i], true, t), false) ||
        !program_valid(backward_program(hs[i], t), true))
      return false;
  return true;
}
constexpr int kCheckedWidths[] = {8,    16,   24,   40,    64,    104,   256,   512,    520,    768,   1000,
                                  1024, 1536, 2048, 2560,  3072,  3080,  4096,  5120,   6144,   7168,  8192,
                                  8200, 12288, 16384, 32768, 65536, 131072, 262144, 524288, 1 << 20};
constexpr bool tables_valid() {
  for (const ArchTable& t : kArchTables)
    if (!widths_valid(kCheckedWidths, sizeof(kCheckedWidths) / sizeof(int), t)) return false;
  return true;
}
static_assert(tables_valid(), "every architecture's program of every width runs on both routes");
static_assert(kMaxBwdThreads / 64 < 16 && kMaxFwdThreads / 64 < 16, "named barriers 1..15 suffice");
static_assert(kMaxBwdThreads / 32 <= 16 && kMaxFwdThreads / 32 <= 16,
              "group_sum's scratch: two halves of 16 floats, one a warp of the CTA");

}  // namespace cake
