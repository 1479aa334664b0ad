// Per-architecture window tables: (route, hidden, T window) -> program. Every architecture
// serves every width with the sweep-fit general program (programs.h): the backward over one
// window (0, inf), the forward over up to four: on the plain route a wider row group at the
// smallest T (at every T where programs.h says so: H 768), then the ring program and its
// streaming twins of one row group (their CTAs may differ), or, for the narrow exact rows
// (H 128, 256, 512, 1024), the first window's group streaming several rows a group (H 64: its
// streaming twin at every T). A row's outputs do not depend on T: the windows of one row group
// share its order, and the wider group sums in the ring group's (tests/test_determinism.py).
// Each architecture reads its tuning table (programs.h, ArchTable), its counts scaled to the
// device's SM count (for_device): sm_90a's is the H200's fit, sm_100a/103a/107a's are copies of it
// marked unmeasured (nothing was timed there). CUDA-free and torch-free.
#pragma once

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../include/cake_rmsnorm/cake_rmsnorm_archs.h"
#include "programs.h"

namespace cake {

enum class Route { kFwd, kFwdResidual, kBwd, kBwdResidual };

constexpr bool is_forward(Route r) { return r == Route::kFwd || r == Route::kFwdResidual; }
constexpr bool has_residual(Route r) { return r == Route::kFwdResidual || r == Route::kBwdResidual; }

struct Window {
  int64_t above;
  int64_t at_most;  // -1: unbounded
  Program program;
};
constexpr int kMaxWindows = 4;  // a route's most windows (windows_for)

constexpr int kArchs[] = {CAKE_RMSNORM_SHIPPED_ARCHS};  // cake_rmsnorm_archs.h: the one list

inline bool parse_route(const char* s, Route* out) {
  if (s == nullptr) return false;
  if (strcmp(s, "fwd") == 0) *out = Route::kFwd;
  else if (strcmp(s, "fwd_residual") == 0) *out = Route::kFwdResidual;
  else if (strcmp(s, "bwd") == 0) *out = Route::kBwd;
  else if (strcmp(s, "bwd_residual") == 0) *out = Route::kBwdResidual;
  else return false;
  return true;
}

inline bool arch_known(int sm) {
  for (int a : kArchs)
    if (a == sm) return true;
  return false;
}

// The ring program's windows from T `lo` on: its streaming twin up to `small`, the ring, and
// the widened twin from `large` (-1: none); where the two streaming windows meet (very wide
// rows) no ring.
inline void ring_windows(Window* w, int& n, int64_t lo, int64_t small, int64_t large, const Program& stream,
                         const Program& ring, const Program& wide) {
  if (large >= 0 && large - 1 <= (small > lo ? small : lo)) {
    w[n++] = Window{lo, -1, wide};
    return;
  }
  if (small > lo) w[n++] = Window{lo, small, stream}, lo = small;
  w[n++] = Window{lo, large >= 0 ? large - 1 : -1, ring};
  if (large >= 0) w[n++] = Window{large - 1, -1, wide};
}

// The tuning table a device of architecture `sm` and `sms` SMs runs (sms 0: the table's own
// count): its architecture's, its counts scaled to the SM count (programs.h, for_device).
inline ArchTable device_table(int sm, int64_t sms) { return for_device(arch_table(sm), sms); }

// Fills up to `cap` windows of table `t`; returns how many the route has, or -1 if not served.
inline int windows_for(Route route, int64_t hidden, const ArchTable& t, Window* out, int cap) {
  if (!arch_known(t.sm) || !width_served(hidden)) return -1;
  const int h = static_cast<int>(hidden);
  if (!is_forward(route)) {
    if (cap > 0) out[0] = Window{0, -1, backward_program(h, t)};
    return 1;
  }
  // Forward: the ring program, and its streaming twins below small and from large, after the
  // plain route's wider group at the smallest T (programs.h).
  const bool res = has_residual(route);
  const Program ring = forward_program(h, res, t), stream = as_streaming(ring),
                wide = widened_streaming(ring, h, res, t);
  const int64_t group_max = res ? 0 : small_group_max(ring, h, t);
  const int64_t small = small_window_max(ring, h, res, t), large = large_window_min(ring, h, res, t);
  Window w[kMaxWindows];
  int n = 0;
  int64_t lo = 0;  // the last T served so far
  if (group_max > 0 && small_group_everywhere(ring, h, t)) {  // one window, one row group (H 768)
    w[n++] = Window{0, -1, forward_small_program(h, t)};
  } else if (streams_everywhere(ring, h, res, t)) {  // one window, the streaming twin (H 64)
    w[n++] = Window{0, -1, stream};
  } else {
    if (group_max > 0) w[n++] = Window{0, group_max, forward_small_program(h, t)}, lo = group_max;
    const Program first = group_max > 0 ? forward_small_program(h, t) : stream;
    if (!res && (group_max > 0 || small > 0) && can_stream_rows(first, h)) {  // narrow exact rows (programs.h)
      if (group_max == 0) w[n++] = Window{0, small, stream}, lo = small;
      w[n++] = Window{lo, -1, multirow_streaming(first, t)};
    } else {
      ring_windows(w, n, lo, small, large, stream, ring, wide);
    }
  }
  for (int i = 0; i < n && i < cap; ++i) out[i] = w[i];
  return n;
}

// The program a launch of `rows` rows uses on a device of architecture `sm` and `sms` SMs: the
// one whose window holds rows. An architecture without a table of its own (no fatbin ships for
// it) takes the sm_90a table. Every launch asks, so each thread keeps the tables of its last few
// (route, width, architecture, SM count) keys: building one runs the row-group searches of up
// to three programs (about 180 ns on a CPU core).
inline Program select_program(Route route, int64_t hidden, int64_t rows, int sm, int64_t sms) {
  struct Entry {
    Route route;
    int64_t hidden;
    int sm;
    int64_t sms;
    int n;
    Window w[kMaxWindows];
  };
  constexpr int kEntries = 8;
  thread_local Entry cache[kEntries];
  thread_local int filled = 0, next = 0;
  const int arch = arch_known(sm) ? sm : 90;
  const Entry* e = nullptr;
  for (int i = 0; i < filled && e == nullptr; ++i)
    if (cache[i].route == route && cache[i].hidden == hidden && cache[i].sm == arch && cache[i].sms == sms)
      e = &cache[i];
  if (e == nullptr) {
    Entry& fresh = cache[next];
    fresh.route = route;
    fresh.hidden = hidden;
    fresh.sm = arch;
    fresh.sms = sms;
    fresh.n = windows_for(route, hidden, device_table(arch, sms), fresh.w, kMaxWindows);
    next = (next + 1) % kEntries;
    if (filled < kEntries) ++filled;
    e = &fresh;
  }
  for (int i = 0; i < e->n && i < kMaxWindows; ++i)
    if (rows > e->w[i].above && (e->w[i].at_most < 0 || rows <= e->w[i].at_most)) return e->w[i].program;
  const ArchTable t = device_table(arch, sms);  // no window holds rows (a width not served)
  return is_forward(route) ? forward_program(static_cast<int>(hidden), has_residual(route), t)
                           : backward_program(static_cast<int>(hidden), t);
}

// "general_t256x1_v4_s3": threads per row, row groups per CTA, vectors per thread, ring
// stages; "_r4" where a streaming group takes several rows.
inline void program_name(const Program& p, char* buf, size_t n) {
  if (p.group_rows > 1)
    snprintf(buf, n, "general_t%dx%d_v%d_s%d_r%d", p.tpr, p.cta / p.tpr, p.vpt, p.stages, p.group_rows);
  else
    snprintf(buf, n, "general_t%dx%d_v%d_s%d", p.tpr, p.cta / p.tpr, p.vpt, p.stages);
}

}  // namespace cake
