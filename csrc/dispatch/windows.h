// Per-architecture window tables: (route, hidden, T window) -> program. Every architecture
// serves every width with the general programs over two windows, (0, kSmallRows] and
// (kSmallRows, inf), which differ only in CTA size and ring depth (so a row's outputs are the
// same in both); tuned programs add rows here. CUDA-free and torch-free.
#pragma once

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "programs.h"

namespace cake {

enum class Route { kFwd, kFwdResidual, kBwd, kBwdResidual };

struct Window {
  int64_t above;
  int64_t at_most;  // -1: unbounded
  Program program;
};

constexpr int kArchs[] = {90, 100, 103, 107};

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

// Fills up to `cap` windows; returns how many the route has, or -1 if not served.
inline int windows_for(Route route, int64_t hidden, int sm, Window* out, int cap) {
  if (!arch_known(sm) || hidden <= 0 || hidden % 8 != 0 || hidden > (int64_t(1) << 30)) return -1;
  const bool fwd = route == Route::kFwd || route == Route::kFwdResidual;
  const bool res = route == Route::kFwdResidual || route == Route::kBwdResidual;
  const int h = static_cast<int>(hidden);
  const int64_t edges[2][2] = {{0, kSmallRows}, {kSmallRows, -1}};
  for (int i = 0; i < 2 && i < cap; ++i) {
    const int64_t rows = i == 0 ? 1 : kSmallRows + 1;
    out[i] = Window{edges[i][0], edges[i][1],
                    fwd ? forward_program(h, rows, res) : backward_program(h, rows, res)};
  }
  return 2;
}

// The program a launch of `rows` rows uses: the one whose window holds rows. An architecture
// without a table of its own (no fatbin ships for it) takes the sm_90a table.
inline Program select_program(Route route, int64_t hidden, int64_t rows, int sm) {
  Window w[16];
  const int n = windows_for(route, hidden, arch_known(sm) ? sm : 90, w, 16);
  for (int i = 0; i < n && i < 16; ++i)
    if (rows > w[i].above && (w[i].at_most < 0 || rows <= w[i].at_most)) return w[i].program;
  const bool fwd = route == Route::kFwd || route == Route::kFwdResidual;
  const bool res = route == Route::kFwdResidual || route == Route::kBwdResidual;
  return fwd ? forward_program(static_cast<int>(hidden), rows, res)
             : backward_program(static_cast<int>(hidden), rows, res);
}

// "general_t256x1_v4_s3": threads per row, rows per CTA, vectors per thread, ring stages.
inline void program_name(const Program& p, char* buf, size_t n) {
  snprintf(buf, n, "general_t%dx%d_v%d_s%d", p.tpr, p.cta / p.tpr, p.vpt, p.stages);
}

}  // namespace cake
