// The kernel instances, as values: a key names one instance (its template arguments), and
// `compiled` is the one rule for which keys the library builds. resolve.h returns only compiled
// keys; the registry (api/registry_*.cuh) instantiates exactly these; tests/cpp/keys_sweep.cpp
// checks that every compiled key is one some call resolves to. CUDA-free and torch-free.
#pragma once

#include <stdint.h>

#include "programs.h"

namespace cake {

// The kernel families (kernels/): the forward's ring and streaming kernels, the backward's
// row kernel, its wide rows' CTAs, the one launch and its wide CTAs, warp chunks, and the FP32
// activations' forward and backward.
enum class Family : uint8_t { kFwdRing, kFwdStream, kBwdRows, kBwdWide, kBwdOne, kBwdOneWide, kBwdWarpChunks,
                              kFp32Fwd, kFp32Bwd };

// dtype codes as cake_dtype_t; kAsX: the residual's dtype is x's.
constexpr int kBf16 = 0, kFp16 = 1, kFp32 = 2, kAsX = -1;

struct KernelKey {
  Family family;
  int x;        // activations' dtype
  int y;        // y's (forward) or g's (backward) dtype: x's unless x is FP32
  int w;        // the weight's
  bool residual;
  int vectors;  // 16-byte vectors a thread (VPT); FP32 x: float4 vectors a thread (NV)
  int tpr;      // a constant-width instance's threads a row; 0: the runtime width's
  int rows;     // rows a streaming group (1 or kStreamRows)
  WLoad wload;  // the streaming forward's w load; FP32 forward: kAtUse where w is loaded late
  GroupSync sync;
  bool pair;    // the backward's row pairs
  int r = kAsX; // the residual's dtype where not x's: a 16-bit branch added to the FP32 stream
  bool from_y = false;  // the backward from y (memory-efficient mode): xhat = y (1 / w)
};
constexpr bool operator==(const KernelKey& a, const KernelKey& b) {
  return a.family == b.family && a.x == b.x && a.y == b.y && a.w == b.w && a.residual == b.residual &&
         a.vectors == b.vectors && a.tpr == b.tpr && a.rows == b.rows && a.wload == b.wload && a.sync == b.sync &&
         a.pair == b.pair && a.r == b.r && a.from_y == b.from_y;
}
// A key by field name with the plain values of the fields a family may leave: the runtime width's
// instance (tpr 0), one row a group, w loaded first, named barriers, no row pairs.
constexpr KernelKey plain_key(Family f, int x, int y, int w, bool residual, int vectors) {
  KernelKey k{};
  k.family = f;
  k.x = x;
  k.y = y;
  k.w = w;
  k.residual = residual;
  k.vectors = vectors;
  k.tpr = 0;
  k.rows = 1;
  k.wload = WLoad::kFirst;
  k.sync = GroupSync::kNamed;
  k.pair = false;
  return k;
}
constexpr int residual_dtype(const KernelKey& k) { return k.r == kAsX ? k.x : k.r; }

// The dw finalize (kernels/backward.cuh, dw_finalize_kernel): columns a CTA, lanes a column, dw's dtype.
struct FinalizeKey {
  int cols, lanes, out;
};

namespace keys {
constexpr bool in(int v, const int* list, int n) {
  for (int i = 0; i < n; ++i)
    if (list[i] == v) return true;
  return false;
}
constexpr bool dtype16(int t) { return t == kBf16 || t == kFp16; }
constexpr bool any_dtype(int t) { return t == kBf16 || t == kFp16 || t == kFp32; }
// The 16-bit families' dtypes: y of x, w of x or FP32.
constexpr bool dtypes16(const KernelKey& k) { return dtype16(k.x) && k.y == k.x && (k.w == k.x || k.w == kFp32); }
// Fields a family does not use hold these values, so one instance has one key.
constexpr bool plain_rest(const KernelKey& k) { return k.rows == 1 && k.wload == WLoad::kFirst && !k.pair; }
constexpr bool fp32_nv(int nv) { return nv == 2 || nv == 4 || nv == 8; }
}  // namespace keys

// Several rows a streaming group are compiled for the plain route with a 16-bit w, or an FP32 w
// at up to 3 vectors a thread: 4 rows of x and an FP32 w at VPT 4 spill (24-32 bytes at 128
// registers), and the residual route (not measured with several rows) doubles the loads held.
constexpr bool multirow_instance(bool w_fp32, bool residual, int vpt) { return !residual && (!w_fp32 || vpt <= 3); }

// The streaming instances plan_forward can return, by (w load, sync, FP32 w, route, VPT): kWarp
// runs w first; w at each use is the plain route's FP32 w at VPT 6 and 8; w before the sum the
// plain route's other wide programs; w first with named barriers the residual route's and an
// FP32 w's groups of two warps or more.
constexpr bool forward_stream_instance(WLoad wload, GroupSync sync, bool w_fp32, bool residual, int vpt) {
  if (sync == GroupSync::kWarp) return vpt <= 4 && wload == WLoad::kFirst;
  if (wload == WLoad::kAtUse) return !residual && w_fp32 && vpt >= 6;
  if (wload == WLoad::kBeforeSum) return !residual && !(w_fp32 && vpt >= 6);
  return residual || (w_fp32 && vpt <= 4);
}

// The one rule: whether the library builds the instance `k`.
constexpr bool compiled(const KernelKey& k) {
  using namespace keys;
  const bool w32 = k.w == kFp32;
  // A 16-bit residual beside FP32 x (AMP's mixed add) only in the FP32 forward, with y and w in
  // its dtype or FP32.
  if (k.r != kAsX && (k.family != Family::kFp32Fwd || !k.residual || !dtype16(k.r) || (k.y != k.r && k.y != kFp32) ||
                      (k.w != k.r && k.w != kFp32)))
    return false;
  // The backward from y only in the row kernel and its one launch at runtime widths (no pairs),
  // their wide CTAs and the FP32 backward: the plan sends every such call there (plan.h), keeping
  // the instance count small.
  if (k.from_y && !(((k.family == Family::kBwdRows || k.family == Family::kBwdOne) && k.tpr == 0 && !k.pair) ||
                    k.family == Family::kBwdWide || k.family == Family::kBwdOneWide || k.family == Family::kFp32Bwd))
    return false;
  switch (k.family) {
    case Family::kFwdRing:
      return dtypes16(k) && in(k.vectors, kFwdVpts, kNumFwdVpts) && k.tpr == 0 && plain_rest(k) &&
             (k.sync == GroupSync::kNamed || k.vectors <= 4);
    case Family::kFwdStream:
      if (!dtypes16(k) || !in(k.vectors, kFwdVpts, kNumFwdVpts) || k.pair) return false;
      if (k.tpr == 0) return k.rows == 1 && forward_stream_instance(k.wload, k.sync, w32, k.residual, k.vectors);
      return exact_group(k.tpr, k.vectors) && k.sync == GroupSync::kWarp && k.wload == WLoad::kFirst &&
             (k.rows == 1 || (k.rows == kStreamRows && multirow_instance(w32, k.residual, k.vectors)));
    case Family::kBwdRows:
    case Family::kBwdOne:
      if (!dtypes16(k) || !in(k.vectors, kBwdVpts, kNumBwdVpts) || k.rows != 1 || k.wload != WLoad::kFirst ||
          k.sync != GroupSync::kNamed || (k.pair && k.family == Family::kBwdOne))
        return false;
      return k.tpr == 0 || (k.tpr == 32 && exact_group(32, k.vectors, true)) ||
             (k.tpr == 16 && !k.pair && exact_group(16, k.vectors, true));
    case Family::kBwdWide:  // held vectors: 3 up to 12288 elements, else 4 (params.h, bwd_wide_held_vectors)
    case Family::kBwdOneWide:
      return dtypes16(k) && (k.vectors == kBwdWideVpt || (k.vectors == 3 && k.family == Family::kBwdWide)) &&
             k.tpr == 0 && plain_rest(k) && k.sync == GroupSync::kNamed;
    case Family::kBwdWarpChunks:
      return dtypes16(k) && warp_chunks_instance(k.tpr, k.vectors) && plain_rest(k) && k.sync == GroupSync::kNamed;
    case Family::kFp32Fwd:
      return k.x == kFp32 && any_dtype(k.y) && any_dtype(k.w) && fp32_nv(k.vectors) && k.tpr == 0 && k.rows == 1 &&
             !k.pair && k.sync == GroupSync::kNamed &&
             // w late where a row takes more than two vectors a thread; NV 8 only at 512 threads, always late
             ((k.wload == WLoad::kAtUse && k.vectors > 2) || (k.wload == WLoad::kFirst && k.vectors < 8));
    case Family::kFp32Bwd:
      return k.x == kFp32 && any_dtype(k.y) && any_dtype(k.w) && fp32_nv(k.vectors) && k.tpr == 0 && plain_rest(k) &&
             k.sync == GroupSync::kNamed;
  }
  return false;
}

constexpr bool compiled(const FinalizeKey& f) {
  return keys::any_dtype(f.out) &&
         ((f.lanes == kFinalizeLanes && (f.cols == 8 || f.cols == 32)) || (f.lanes == kFinalizeLanesMany && f.cols == 8));
}

}  // namespace cake
