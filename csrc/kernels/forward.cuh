// RMSNorm forward: y = cast(h * rstd * w), rstd = 1 / sqrt(mean(h^2) + eps), FP32 inside.
// Torch-free.
#pragma once

#include "params.h"
#include "pipeline.cuh"
#include "reduce.cuh"
#include "vec.cuh"

namespace cake {


// w for the ring kernel: loaded once a CTA, held in registers across its rows.
template <typename WT, int VPT>
struct HeldW {
  WVec<WT> v[VPT];
  __device__ __forceinline__ void before_sum() {}
  template <bool kBits>
  __device__ __forceinline__ void get(int k, float (&f)[kVec]) const { v[k].template get<kBits>(f); }
};

// w for the streaming kernel, loaded where kW says.
template <typename WT, int VPT, WLoad kW>
struct StreamW {
  WVec<WT> v[VPT];
  const void* w;
  int lane, tpr, nvec;
  __device__ __forceinline__ StreamW(const void* w_, int lane_, int tpr_, int nvec_)
      : w(w_), lane(lane_), tpr(tpr_), nvec(nvec_) {}
  __device__ __forceinline__ void first() {
    if (kW == WLoad::kFirst) load_weights(v, w, lane, tpr, nvec);
  }
  __device__ __forceinline__ void before_sum() {
    if (kW == WLoad::kBeforeSum) load_weights(v, w, lane, tpr, nvec);
  }
  template <bool kBits>
  __device__ __forceinline__ void get(int k, float (&f)[kVec]) {
    if (kW == WLoad::kAtUse) v[k].load(w, (lane + k * tpr) * kVec, true);  // get() runs only where stored
    v[k].template get<kBits>(f);
  }
};

// At most 64 registers a thread (two 512-thread CTAs, four of 256) for kBeforeSum at VPT <= 4.
// kAtUse states one CTA an SM: ptxas compiles that differently from stating none, and measured
// faster so (docs/perf/dispatch.md#stream-launch-bounds).
template <WLoad kW, int VPT>
constexpr int stream_min_ctas() {
  return kW == WLoad::kBeforeSum && VPT <= 4 ? 2 : kW == WLoad::kAtUse ? 1 : 0;
}

// Register caps (0: none) for the instances whose even/odd sums (kPairs) cost an occupancy
// step their one-sum code held, each held at that step (ptxas -v, sm_90a; spill-free). 80:
// three 256-thread CTAs an SM (at two, the ring ran rows of 776..1016 3-4 % slower); 96: five
// CTAs of 128 threads; 72: seven of 128 (FP16 x, FP32 w at H 32..248). The other plain-route
// V4 generic streaming instances that load an FP32 w first (x re-widened, stream_rewiden) are
// stated 80 for their schedule: without it ptxas issues w's loads after x's squares (a second
// wait on memory a row); with it, beside x's, at 74-76 registers (sm_90a, sm_100a, sm_103a),
// which keep the CTAs an SM of their uncapped 72-73 at every CTA size the plans give them
// (docs/perf/runs/h200-pairs-ab4.md).
template <typename T, typename WT, bool RES, int VPT, GroupSync kSync>
constexpr int ring_max_regs() {
  if (VPT != 4 || kSync != GroupSync::kWarp) return 0;
  if (!RES && std::is_same<WT, T>::value) return 80;
  return std::is_same<T, __half>::value && std::is_same<WT, float>::value && RES ? 96 : 0;
}
template <typename T, typename WT, bool RES, int VPT, WLoad kW, GroupSync kSync, int kTpr, int kRows>
constexpr int stream_max_regs() {
  if (kTpr != 0 || kRows != 1) return 0;  // held: the generic instance only
  // 16-bit V6 with w after the sum: at 80 every load first, three 256-thread CTAs an SM.
  if (VPT == 6 && !RES && kW == WLoad::kBeforeSum && sizeof(WT) == 2) return 80;
  if (VPT != 4 || RES || kW != WLoad::kFirst || !std::is_same<WT, float>::value) return 0;
  return std::is_same<T, __half>::value && kSync == GroupSync::kWarp ? 72 : 80;
}
// Whether a streaming row widens x again for its output instead of keeping the first widening
// live: where w comes late (its registers free then), and on the plain route's generic pairs
// instances with an FP32 w (BF16 and FP16 x), where w's 32 words beside the widened x cost
// BF16 an occupancy step (three 256-thread CTAs an SM so, two otherwise; FP16's count is the
// same either way). The same values either way.
template <typename WT, bool RES, int VPT, WLoad kW, int kTpr>
CAKE_HD constexpr bool stream_rewiden() {
  return kW != WLoad::kFirst || (pairs_vpt(VPT) && !RES && kTpr == 0 && std::is_same<WT, float>::value);
}

// One row of the forward, once its first VPT vectors a thread are at hand: xvec(k) and
// rvec(k) (residual route) return vector lane + k * tpr of x and r, zeros where masked; w.get(k,
// f) widens w's vector k, and w.before_sum() runs once the thread's own sum of squares is done
// (a streaming kernel may load w there). Every thread of the group calls it (group_sum);
// `valid` false: an empty group of the streaming kernel's last CTA, which computes on zeros but
// neither reads the rest of a wide row nor stores. kRewiden: widen x again for the output
// instead of keeping the first widening live (opaque). kSync: how group_sum meets (reduce.cuh).
// kTpr > 0: an exact group of kTpr threads (<= 32) known at compile time, whose VPT vectors a
// thread cover the row exactly (hidden == kTpr * VPT * 8): no masks, no rest loops, constant
// offsets and a butterfly of log2(kTpr) steps, the same adds in the same order as the runtime
// group's. The reduction order depends on (hidden, tpr, VPT) only, in both kernels, and on the
// plain route a group of (2 tpr, VPT / 2) meets that of (tpr, VPT) (kPairs below).
template <typename T, typename WT, bool RES, int VPT, bool kRewiden, GroupSync kSync, int kTpr, typename RG,
          typename W, typename XVec, typename RVec>
__device__ __forceinline__ void fwd_row(const FwdParams& p, int64_t row, bool valid, const RG& rg, GroupScratch& gs,
                                        W& w, XVec xvec, RVec rvec) {
  constexpr bool kExact = kTpr > 0;
  // kPairs: 4 and 6 vectors a thread (pairs_vpt) sum even and odd vectors apart, in the order
  // of a group of twice the threads and half the vectors (group_sum_pairs): the plain route's
  // small-T group, and at some widths the other route's group, so a row's bits depend neither
  // on T nor on the route. Such a group holds its row (program_for refuses others): no rest
  // loop, past which the compiler sank one half's loads (a streaming row then waited for memory
  // twice: 1.3x at VPT 6).
  constexpr bool kPairs = pairs_vpt(VPT);
  constexpr bool kRest = !kExact && !kPairs;
  // kLean (groups of at most a warp, BF16 activations and w: where it was measured): BF16
  // widened by bit operations, a power-of-two width's mean by its exact reciprocal, rstd
  // computed once. The same values. Other instances keep the previous code: there the lean
  // code moved row loads behind arithmetic (docs/perf/dispatch.md#lean-row-code).
  constexpr bool kLean = kSync == GroupSync::kWarp && std::is_same<T, __nv_bfloat16>::value && sizeof(WT) == 2;
  const int tpr = rg.tpr, lane = rg.lane;
  const int nvec = kExact ? kTpr * VPT : p.hidden / kVec;
  const int hidden = kExact ? kTpr * VPT * kVec : p.hidden;
  const T* x = static_cast<const T*>(p.x) + row * p.x_stride;
  const T* r = RES ? static_cast<const T*>(p.r) + row * p.r_stride : nullptr;
  T* h = RES ? static_cast<T*>(p.h) + row * p.h_stride : nullptr;
  T* y = static_cast<T*>(p.y) + row * p.y_stride;

  uint4 hv[VPT];
  float part[VPT];  // each vector's sum of squares, then a tree over the vectors
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    float f[kVec];
    hv[k] = xvec(k);
    unpack8<T, kLean>(hv[k], f);
    if (RES) {
      float u[kVec];
      unpack8<T, kLean>(rvec(k), u);
#pragma unroll
      for (int j = 0; j < kVec; ++j) f[j] += u[j];
      hv[k] = pack8<T>(f);  // h_new is rounded to the activation type, then normalised
      unpack8<T, kLean>(hv[k], f);
      const int v = lane + k * tpr;
      if (valid && (kExact || v < nvec)) store16(h + v * kVec, hv[k]);
    }
#pragma unroll
    for (int j = 0; j < kVec; ++j) f[j] *= f[j];
    part[k] = tree_sum(f);
  }
  float ss, even = 0.f;
  if constexpr (kPairs) {  // even and odd vectors apart, in the small-T group's order
    float e[VPT / 2], o[VPT / 2];
#pragma unroll
    for (int m = 0; m < VPT / 2; ++m) e[m] = part[2 * m], o[m] = part[2 * m + 1];
    even = tree_sum(e);
    ss = tree_sum(o);
  } else {
    ss = tree_sum(part);
  }
  // Rows wider than VPT * tpr vectors: first pass over the rest (writes h_new).
#pragma unroll 1
  for (int v = lane + VPT * tpr; kRest && valid && v < nvec; v += tpr) {
    float f[kVec];
    unpack8<T, kLean>(load16(x + v * kVec), f);
    if (RES) {
      float u[kVec];
      unpack8<T, kLean>(load16(r + v * kVec), u);
#pragma unroll
      for (int j = 0; j < kVec; ++j) f[j] += u[j];
      const uint4 packed = pack8<T>(f);
      store16(h + v * kVec, packed);
      unpack8<T, kLean>(packed, f);
    }
#pragma unroll
    for (int j = 0; j < kVec; ++j) f[j] *= f[j];
    ss += tree_sum(f);
  }
  w.before_sum();
  ss = kPairs ? group_sum_pairs<kSync>(even, ss, rg, gs) : group_sum<kSync>(ss, rg, gs);
  const float mean = kLean ? row_mean(ss, hidden) : __fdiv_rn(ss, static_cast<float>(p.hidden));
  float rstd = __fdiv_rn(1.f, __fsqrt_rn(__fadd_rn(mean, p.eps)));
  // One value for the store and the output: otherwise the compiler recomputes the division
  // after lane 0's store branch, so that lane runs the sequence twice while the warp waits.
  if constexpr (kLean) asm volatile("" : "+f"(rstd));
  if (valid && lane == 0) p.rstd[row] = rstd;

#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int v = lane + k * tpr;
    if (valid && (kExact || v < nvec)) {
      float f[kVec], wf[kVec];
      unpack8<T, kLean>(kRewiden ? opaque(hv[k]) : hv[k], f);
      w.template get<kLean>(k, wf);
#pragma unroll
      for (int j = 0; j < kVec; ++j) f[j] = (f[j] * rstd) * wf[j];
      store16(y + v * kVec, pack8<T>(f));
    }
  }
  // Second pass over the rest: the same thread wrote h_new there, so it reads its own store.
#pragma unroll 1
  for (int v = lane + VPT * tpr; kRest && valid && v < nvec; v += tpr) {
    float f[kVec], wf[kVec];
    unpack8<T, kLean>(RES ? *reinterpret_cast<const uint4*>(h + v * kVec) : load16(x + v * kVec), f);
    WVec<WT> w2;
    w2.load(p.w, v * kVec, true);
    w2.template get<kLean>(wf);
#pragma unroll
    for (int j = 0; j < kVec; ++j) f[j] = (f[j] * rstd) * wf[j];
    store16(y + v * kVec, pack8<T>(f));
  }
}

// One row per group of p.tpr threads, blockDim.x / p.tpr groups per CTA; group j of CTA b
// takes rows b * rpc + j, then every gridDim.x * rpc-th row (a persistent grid). Each thread
// owns vectors lane, lane + tpr, ... of its rows: the first VPT of them come through a
// p.stages-deep cp.async ring (the next rows' loads fly while this one is reduced), the rest
// (rows wider than VPT * tpr vectors) are read directly in two passes. w stays in registers.
// The reduction order depends on (hidden, tpr, VPT) only, so a row's outputs do not depend on
// the number of rows or the grid.
// Loops other than the per-vector ones stay rolled and the row loop does no integer division:
// at small T a warp's instruction chain is the kernel's latency (one warp a scheduler), so
// every instruction on the hot path costs time (docs/perf/runs/notebook.md, small-T measurements).
// kSync kWarp: an instance for groups of at most a warp, with no barrier and no scratch.
template <typename T, typename WT, bool RES, int VPT, GroupSync kSync>
__device__ __forceinline__ void fwd_ring(const FwdParams& p) {
  extern __shared__ uint4 ring[];  // [stages][1 + RES][VPT][blockDim.x]
  __shared__ float scratch[kSync == GroupSync::kWarp ? 1 : 32];  // unused (and dropped) for kWarp
  GroupScratch gs{scratch};
  constexpr int kStreams = RES ? 2 : 1;
  const RowGroup rg(p.tpr);
  const int tpr = rg.tpr, rpc = rg.rpc, group = rg.group, lane = rg.lane;
  const int cta = blockDim.x, stages = p.stages;
  const int nvec = p.hidden / kVec;
  const int64_t step = static_cast<int64_t>(gridDim.x) * rpc;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * rpc + group;
  // Slot (stage s, stream, vector k) of this thread: base + ((s * kStreams + stream) * VPT + k) * kstep.
  const uint32_t base = smem_addr(ring) + threadIdx.x * 16u;
  const uint32_t kstep = cta * 16u;
  const uint32_t sstep = kStreams * VPT * kstep;
  auto issue = [&](int64_t row, int s) {
    const bool valid = row < p.rows;
    const T* x = static_cast<const T*>(p.x) + (valid ? row * p.x_stride : 0) + lane * kVec;
    const T* r = RES ? static_cast<const T*>(p.r) + (valid ? row * p.r_stride : 0) + lane * kVec : nullptr;
    const uint32_t dst = base + s * sstep;
    if (valid) {  // past the last row: an empty group, so the ring's group count stays uniform
#pragma unroll
      for (int k = 0; k < VPT; ++k) {
        const bool ok = lane + k * tpr < nvec;  // masked vectors land as zeros
        cp_async16(dst + k * kstep, ok ? x + k * tpr * kVec : x, ok);
        if (RES) cp_async16(dst + (VPT + k) * kstep, ok ? r + k * tpr * kVec : r, ok);
      }
    }
    cp_async_commit();
  };

  HeldW<WT, VPT> w;
  load_weights(w.v, p.w, lane, tpr, nvec);

#pragma unroll 1
  for (int s = 0; s + 1 < stages; ++s) issue(first + s * step, s);
  const int64_t ahead = (stages - 1) * step;
  int cur = 0, next = stages - 1;  // ring slots of this row and of the row issued next (no modulo)
#pragma unroll 1
  for (int64_t row = first; row < p.rows; row += step) {
    issue(row + ahead, next);
    next = ring_next(next, stages);
    cp_async_wait_ring(stages);
    const uint32_t src = base + cur * sstep;
    cur = ring_next(cur, stages);
    fwd_row<T, WT, RES, VPT, false, kSync, 0>(p, row, true, rg, gs, w,
                                              [&](int k) { return lds16(src + k * kstep); },
                                              [&](int k) { return lds16(src + (VPT + k) * kstep); });
  }
  cp_async_wait<0>();  // no copy outlives the CTA
}
template <typename T, typename WT, bool RES, int VPT, GroupSync kSync>
__global__ void __launch_bounds__(kMaxFwdThreads) rmsnorm_fwd_kernel(const FwdParams p) {
  fwd_ring<T, WT, RES, VPT, kSync>(p);
}
// The same kernel held at ring_max_regs registers (registry.cuh takes it where that is set).
// The launch bounds stay: nvcc 13.0 and 13.5 take both, and without them the caps spill.
template <typename T, typename WT, bool RES, int VPT, GroupSync kSync>
__global__ void __launch_bounds__(kMaxFwdThreads) __maxnreg__((ring_max_regs<T, WT, RES, VPT, kSync>()))
    rmsnorm_fwd_kernel_held(const FwdParams p) {
  fwd_ring<T, WT, RES, VPT, kSync>(p);
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
constexpr bool kWBeforeXArch = false;
#else
constexpr bool kWBeforeXArch = true;
#endif

// The streaming forward (a program with stages 0): one row a group and a grid of every row's
// groups (no persistence, no ring). Each thread loads its first VPT vectors of x (and r)
// straight into registers (and w, kFirst), so every resident CTA has its rows' loads in flight
// at once; at large T the persistent kernel keeps at most one row a group ahead. The same row
// body as rmsnorm_fwd_kernel: the same bits for the same (hidden, tpr, VPT).
// kTpr > 0: the exact narrow group of fwd_row, for the groups programs.h lists (exact_group).
// kRows > 1: each group takes rows first, first + rpc, ... (kRows of them, the CTA's rows
// contiguous), all their loads issued before the first row's sum, then each row's body in turn:
// more bytes in flight a thread and a quarter of the CTAs to schedule (programs.h,
// multirow_streaming). Each row's body is the one-row kernel's, so its bits are too.
template <typename T, typename WT, bool RES, int VPT, WLoad kW, GroupSync kSync, int kTpr, int kRows>
__device__ __forceinline__ void fwd_stream(const FwdParams& p) {
  __shared__ float scratch[kSync == GroupSync::kWarp ? 1 : 32];
  GroupScratch gs{scratch};
  const RowGroupT<kTpr> rg(p.tpr);
  const int tpr = rg.tpr, lane = rg.lane;
  const int nvec = kTpr > 0 ? kTpr * VPT : p.hidden / kVec;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * (rg.rpc * kRows) + rg.group;
  // kFirst's w before x where, issued after, w's loads waited for x's first ones (ptxas gave
  // w's address and those loads one scoreboard): BF16 x, FP32 w, 4 and 6 vectors a thread, on
  // sm_90 (sass_schedule.py's "in flight"; elsewhere the order moved nothing, lost a CTA an SM,
  // or, on sm_100, held fewer loads in flight).
  constexpr bool kWBeforeX = kWBeforeXArch && std::is_same<T, __nv_bfloat16>::value &&
                             std::is_same<WT, float>::value && pairs_vpt(VPT);
  StreamW<WT, VPT, kW> w(p.w, lane, tpr, nvec);
  if (kWBeforeX) w.first();
  bool valid[kRows];  // the last CTA's empty groups still run group_sum's shuffles
  uint4 xv[kRows][VPT], rv[kRows][VPT];
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const int64_t row = first + i * rg.rpc;
    valid[i] = row < p.rows;
    const T* x = static_cast<const T*>(p.x) + (valid[i] ? row * p.x_stride : 0);
    const T* r = RES ? static_cast<const T*>(p.r) + (valid[i] ? row * p.r_stride : 0) : nullptr;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int v = lane + k * tpr;
      const bool ok = valid[i] && (kTpr > 0 || v < nvec);
      xv[i][k] = ok ? load16(x + v * kVec) : make_uint4(0, 0, 0, 0);
      if (RES) rv[i][k] = ok ? load16(r + v * kVec) : make_uint4(0, 0, 0, 0);
    }
  }
  if (!kWBeforeX) w.first();
  constexpr bool kRewiden = stream_rewiden<WT, RES, VPT, kW, kTpr>();
#pragma unroll
  for (int i = 0; i < kRows; ++i)
    fwd_row<T, WT, RES, VPT, kRewiden, kSync, kTpr>(p, first + i * rg.rpc, valid[i], rg, gs, w,
                                                    [&](int k) { return xv[i][k]; },
                                                    [&](int k) { return rv[i][k]; });
}
template <typename T, typename WT, bool RES, int VPT, WLoad kW, GroupSync kSync, int kTpr = 0, int kRows = 1>
__global__ void __launch_bounds__(kMaxFwdThreads, stream_min_ctas<kW, VPT>())
    rmsnorm_fwd_stream_kernel(const FwdParams p) {
  fwd_stream<T, WT, RES, VPT, kW, kSync, kTpr, kRows>(p);
}
// The generic instance (runtime width, one row a group) held at stream_max_regs registers
// (kFirst, and V6 kBeforeSum: neither states a CTA count of its own to combine with).
template <typename T, typename WT, bool RES, int VPT, WLoad kW, GroupSync kSync>
__global__ void __launch_bounds__(kMaxFwdThreads) __maxnreg__((stream_max_regs<T, WT, RES, VPT, kW, kSync, 0, 1>()))
    rmsnorm_fwd_stream_kernel_held(const FwdParams p) {
  fwd_stream<T, WT, RES, VPT, kW, kSync, 0, 1>(p);
}

}  // namespace cake
