// Forward launcher template: picks the instantiation for (weight dtype, residual, VPT) and
// launches a persistent grid of at most the resident CTAs (one wave; row groups stride over
// rows), or, for a streaming program (stages 0), a grid of every row's group.
#pragma once

#include <cuda_runtime.h>

#include "../kernels/forward.cuh"
#include "launch.h"
#include "occupancy.h"

namespace cake {

// Several rows a group are compiled for the plain route with a 16-bit w, or an FP32 w at up to
// 3 vectors a thread: 4 rows of x and an FP32 w at VPT 4 spill (24-32 bytes at 128 registers),
// and the residual route (not measured with several rows) doubles the loads held.
template <typename WT, bool RES, int VPT>
constexpr bool rows_instance() {
  return !RES && (sizeof(WT) == 2 || VPT <= 3);
}
// The streaming kernel's exact narrow groups (programs.h, exact_group) take the instance with
// the constant width, one row a group or prog.group_rows (kStreamRows, programs.h); other groups
// (and the runtime-width tuning hook) the runtime-width one, one row a group: the same bits.
template <typename T, typename WT, bool RES, int VPT, int kTpr, int kRows>
void launch_exact_rows(const FwdParams& q, const Program& prog, cudaStream_t s) {
  if constexpr (exact_group(kTpr, VPT) && (kRows == 1 || rows_instance<WT, RES, VPT>())) {
    const int64_t rows_per_cta = int64_t(prog.cta / kTpr) * kRows;
    const unsigned grid = static_cast<unsigned>(ceil_div(q.rows, rows_per_cta));
    rmsnorm_fwd_stream_kernel<T, WT, RES, VPT, WLoad::kFirst, GroupSync::kWarp, kTpr, kRows>
        <<<grid, prog.cta, 0, s>>>(q);
  }
}
template <typename T, typename WT, bool RES, int VPT, int kTpr>
void launch_exact_tpr(const FwdParams& q, const Program& prog, cudaStream_t s) {
  if (rows_instance<WT, RES, VPT>() && prog.group_rows == kStreamRows)
    launch_exact_rows<T, WT, RES, VPT, kTpr, kStreamRows>(q, prog, s);
  else
    launch_exact_rows<T, WT, RES, VPT, kTpr, 1>(q, prog, s);
}
template <typename T, typename WT, bool RES, int VPT, GroupSync kSync>
bool launch_exact(const FwdParams& q, const Program& prog, cudaStream_t s) {
  if (kSync != GroupSync::kWarp || !prog.exact || !exact_cover(prog.tpr, VPT, q.hidden)) return false;
  switch (prog.tpr) {
    case 8: launch_exact_tpr<T, WT, RES, VPT, 8>(q, prog, s); break;
    case 16: launch_exact_tpr<T, WT, RES, VPT, 16>(q, prog, s); break;
    default: launch_exact_tpr<T, WT, RES, VPT, 32>(q, prog, s); break;
  }
  return true;
}

// A program of several rows a group with no instance for them (an FP32 w at VPT 4, the
// residual route) runs the ring program of its row group instead, with the same bits: with an
// FP32 w at H 256 and 1024 that ring measured faster than one row a group (H 256 T 16384 6.5
// vs 7.25 us, H 1024 T 65536 70.0 vs 75.0; runs/h200-stream-rows.md).
template <typename WT, bool RES, int VPT>
Program without_rows(Program prog) {
  if (prog.group_rows == 1 || rows_instance<WT, RES, VPT>()) return prog;
  Program ring = shaped(Program{prog.tpr, 0, prog.vpt, 0, 1}, forward_groups(prog.tpr), 256, false);
  ring.exact = prog.exact;
  return ring;
}

template <typename T, typename WT, bool RES, int VPT, GroupSync kSync>
int launch_forward_sync(const FwdParams& p, const Program& table_prog, cudaStream_t s) {
  const Program prog = without_rows<WT, RES, VPT>(table_prog);
  const int64_t rpc = prog.cta / prog.tpr;
  FwdParams q = p;
  q.tpr = prog.tpr;
  q.stages = prog.stages;
  if (prog.stages == 0) {  // streaming: a group a row (or prog.group_rows), every row's group in the grid
    const int64_t blocks = ceil_div(p.rows, rpc);
    if (blocks > 0x7fffffff) return static_cast<int>(cudaErrorInvalidConfiguration);
    const unsigned grid = static_cast<unsigned>(blocks);
    // Where w is loaded (forward.cuh, WLoad), as measured on the plain route
    // (docs/perf/runs/h200-stream-wload.md): late at VPT 6 (and 8, which no table streams) and
    // for groups of two warps or more (an FP32 w there only from 2^26 elements: H 4096 T 4096
    // 19.0 us first against 20.75 before the sum, T 65536 269 against 256.5); narrow groups
    // (H <= 1024) and the residual route measured fastest or tied with w first.
    constexpr bool kFp32W = sizeof(WT) == 4, kWideVpt = VPT >= 6;
    const bool wide_group = prog.tpr >= 64 && (!kFp32W || p.rows * p.hidden >= (int64_t(1) << 26));
    if (!RES && kWideVpt && kFp32W)
      rmsnorm_fwd_stream_kernel<T, WT, RES, VPT, WLoad::kAtUse, kSync><<<grid, prog.cta, 0, s>>>(q);
    else if (!RES && (kWideVpt || wide_group))
      rmsnorm_fwd_stream_kernel<T, WT, RES, VPT, WLoad::kBeforeSum, kSync><<<grid, prog.cta, 0, s>>>(q);
    else if (!launch_exact<T, WT, RES, VPT, kSync>(q, prog, s))
      rmsnorm_fwd_stream_kernel<T, WT, RES, VPT, WLoad::kFirst, kSync><<<grid, prog.cta, 0, s>>>(q);
    return static_cast<int>(cudaGetLastError());
  }
  auto kernel = rmsnorm_fwd_kernel<T, WT, RES, VPT, kSync>;
  const size_t smem = forward_smem_bytes(prog.cta, VPT, prog.stages, RES);
  const int64_t blocks = persistent_grid(reinterpret_cast<const void*>(kernel), prog.cta, smem, prog.ctas_per_sm,
                                         ceil_div(p.rows, rpc));
  kernel<<<static_cast<unsigned>(blocks), prog.cta, smem, s>>>(q);
  return static_cast<int>(cudaGetLastError());
}

// Groups of at most a warp with up to 4 vectors a thread (the narrow rows measured: H 256..1024)
// run the instance without barrier or scratch (reduce.cuh, GroupSync), which is not held to 4
// CTAs an SM, as small CTAs need, and its lean row code (forward.cuh, kLean). Other programs
// keep the previous instance, SASS for SASS. The same bits either way.
template <typename T, typename WT, bool RES, int VPT>
int launch_forward_kernel(const FwdParams& p, const Program& prog, cudaStream_t s) {
  if constexpr (VPT <= 4) {
    if (prog.tpr <= 32) return launch_forward_sync<T, WT, RES, VPT, GroupSync::kWarp>(p, prog, s);
  }
  return launch_forward_sync<T, WT, RES, VPT, GroupSync::kNamed>(p, prog, s);
}

template <typename T, typename WT, bool RES>
int launch_forward_vpt(const FwdParams& p, const Program& prog, cudaStream_t s) {
  switch (prog.vpt) {
    case 1: return launch_forward_kernel<T, WT, RES, 1>(p, prog, s);
    case 2: return launch_forward_kernel<T, WT, RES, 2>(p, prog, s);
    case 3: return launch_forward_kernel<T, WT, RES, 3>(p, prog, s);
    case 4: return launch_forward_kernel<T, WT, RES, 4>(p, prog, s);
    case 6: return launch_forward_kernel<T, WT, RES, 6>(p, prog, s);
    case 8: return launch_forward_kernel<T, WT, RES, 8>(p, prog, s);
    default: return static_cast<int>(cudaErrorInvalidConfiguration);
  }
}

template <typename T>
int launch_forward(const FwdParams& p, bool w_fp32, const Program& prog, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const bool res = p.r != nullptr;
  if (w_fp32) {
    return res ? launch_forward_vpt<T, float, true>(p, prog, s)
               : launch_forward_vpt<T, float, false>(p, prog, s);
  }
  return res ? launch_forward_vpt<T, T, true>(p, prog, s) : launch_forward_vpt<T, T, false>(p, prog, s);
}

}  // namespace cake
