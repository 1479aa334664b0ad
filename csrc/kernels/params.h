// Plain launch parameters shared by the CUDA and CPU kernels. Torch-free, CUDA-free.
#pragma once

#include <stddef.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define CAKE_HD __host__ __device__
#else
#define CAKE_HD
#endif

namespace cake {

// CTA size caps the kernels are compiled for (__launch_bounds__): 512 threads leave 128
// registers a thread to the forward; the backward asks for two 256-thread CTAs an SM (128
// registers), which holds w and the compensated dw sums of up to 3 vectors spill-free (ptxas
// -v); at VPT 4 (rows of 7168 and wider) the backward spills 28-48 bytes a thread (FP32 w read
// at each use: bwd_w_at_use), and the forward's VPT 8 a few hundred.
constexpr int kMaxFwdThreads = 512;
constexpr int kMaxBwdThreads = 256;
constexpr int kBwdMinBlocks = 2;
// The backward's widest rows (programs.h, backward_program: wider than 10240) take one
// 512-thread group a CTA at VPT 4: instances of their own, one CTA an SM at the same 128
// registers a thread, so no other backward instance changes.
constexpr int kMaxBwdWideThreads = 512;
constexpr int kBwdWideVpt = 4;  // the wide group's vectors a thread, and so its order (contract.h)
// Rows of a wide group of tpr threads up to tpr x 3 vectors (12288 elements at 512) leave every
// thread's fourth vector past the row: their instance holds 3 (ring, registers) and sums as the
// group of 4 does, adding what the fourth gives (backward.cuh, bwd_rows' pad): the same bits.
// At 4 held, ptxas -v on sm_90a spilled 44-320 bytes a thread; at 3, 0-24.
CAKE_HD constexpr int bwd_wide_held_vectors(int hidden, int tpr) {
  return hidden <= tpr * 3 * 8 ? 3 : kBwdWideVpt;
}
// cp.async ring depth: rows in flight per row group, the current one included.
constexpr int kMaxStages = 8;
// The dw finalize sums chunk k into lane k % finalize_lanes(chunks) of its column, folds lanes
// l + 32, l + 64, ... into lane l in order, then merges the 32 lanes by an xor butterfly.
// 128 lanes from 1024 chunks: with 32, each lane summed 32-128 chunks in dependent batches of
// loads (at H 256 and 512 the whole finalize had at most 1 MB of loads in flight). A function
// of the chunk count alone, so dw's bits stay a function of (T, H).
constexpr int kFinalizeLanes = 32;
constexpr int kFinalizeLanesMany = 128;
constexpr int kFinalizeManyLanesChunks = 1024;
CAKE_HD constexpr int finalize_lanes(int chunks) {
  return chunks >= kFinalizeManyLanesChunks ? kFinalizeLanesMany : kFinalizeLanes;
}

// The plain forward's vectors a thread that sum even and odd vectors apart (forward.cuh, kPairs).
CAKE_HD constexpr bool pairs_vpt(int vpt) { return vpt == 4 || vpt == 6; }

// Where the streaming forward loads w, chosen per launch (dispatch/plan.h); the bits are the
// same for all three. kFirst: with x, so every load of the row is in flight at once, at the
// most registers. kBeforeSum issues w's loads once the thread's sum of squares is done, where
// they overlap group_sum (64 registers forced at VPT <= 4). kAtUse (FP32 w at VPT 6 and 8)
// loads each vector as the output needs it, the fewest registers (docs/perf/dispatch.md#wload).
enum class WLoad { kFirst, kBeforeSum, kAtUse };

// How group_sum's threads meet. kWarp: the kernel instance only runs groups of at most a warp,
// so it shuffles and needs neither a barrier nor scratch. That matters for occupancy: a named
// barrier whose id is a register makes ptxas reserve all 16 of the CTA's barriers, which held
// any such kernel to 4 CTAs an SM, and static scratch let the driver pick a smaller
// shared-memory carveout (docs/perf/dispatch.md#group-sync). kNamed: groups of any width
// (tpr), as below.
enum class GroupSync { kWarp, kNamed };

struct FwdParams {
  const void* x;
  int64_t x_stride;
  const void* r;  // null: no residual
  int64_t r_stride;
  const void* w;
  void* y;
  int64_t y_stride;
  void* h;  // h_new out (residual route)
  int64_t h_stride;
  float* rstd;
  int64_t rows;
  int hidden;
  float eps;
  int tpr;     // threads per row group (CUDA)
  int stages;  // rows in flight per row group (CUDA), 1..kMaxStages
};

// The one-launch small-T backward's column role (backward_small.cuh): 16-byte vectors of
// columns a lane sums, so a warp covers 8 * kDwColVecs columns.
constexpr int kDwColVecs = 1;

// The warp-chunk backward's compiled shapes (backward_warp_chunks.cuh): exact covers of the tables'
// narrow programs, H 64 (t4 v2), 96 (t4 v3), 128 (t8 v2), 192 (t8 v3). Not H 256 (t16 v2: two
// groups a warp), where it gained nothing (docs/perf/dispatch.md#warp-chunks).
CAKE_HD constexpr bool warp_chunks_instance(int tpr, int vpt) { return (vpt == 2 || vpt == 3) && (tpr == 4 || tpr == 8); }

struct BwdParams {
  const void* g;
  int64_t g_stride;
  const void* x;  // x, or y (g's type) with from_y
  int64_t x_stride;
  const void* w;
  const float* rstd;
  const void* gr;  // null: no g_residual
  int64_t gr_stride;
  void* dx;
  int64_t dx_stride;
  float* partials;  // [chunks, hidden] FP32 dw partials
  void* dw;         // null: skip dw; FP32, or the weight's type with dw_w_dtype
  int dw_w_dtype;   // 1: dw is written in w's (16-bit) dtype, rounded once from the FP32 sum
  int accumulate;   // dw += sum instead of dw = sum (FP32 dw only)
  int64_t rows;
  int hidden;
  int chunks;
  int64_t chunk_rows;  // rows / chunks
  int chunk_rem;       // rows % chunks
  int tpr;
  int stages;
  int dx_ctas;  // the one-launch kernel: CTAs [0, dx_ctas) compute dx, the rest dw by columns
  int from_y;   // 1: x holds y (g's type) and xhat = y (1 / w) (the memory-efficient backward)
  float y_lo, y_hi;  // from_y: the |w| y rebuilds xhat from (y_rebuild_range); 1 / w is NaN outside
};

// The memory-efficient backward's weights (cake_rmsnorm_y_rebuild_range): xhat = y (1 / w) holds
// to one rounding of y's dtype and two of FP32, relative to xhat or to 1 (the row's RMS of
// xhat), for every column with lo <= |w| <= hi. lo: y's smallest normal (a subnormal y's
// spacing over 2|w| is then one rounding of y's dtype); hi: |xhat| <= sqrt(hidden), so |xhat w|
// stays under half y's largest, and at most 2^126, so 1 / w is a normal number.
struct YRange {
  float lo, hi;
};
// 1 / w, one IEEE division, where lo <= |w| <= hi; NaN elsewhere (and for a NaN w), so a weight y
// cannot rebuild xhat from makes dx and dw NaN, never a biased gradient. The CPU and CUDA
// kernels' one definition.
CAKE_HD inline float inv_weight(float w, float lo, float hi) {
  const float a = w < 0.f ? -w : w;
  return a >= lo && a <= hi ? 1.f / w : __builtin_nanf("");
}
inline YRange y_rebuild_range(float y_min_normal, float y_max, int64_t hidden) {
  const double hi = static_cast<double>(y_max) / (2.0 * __builtin_sqrt(static_cast<double>(hidden)));
  return {y_min_normal, static_cast<float>(hi < 0x1p126 ? hi : 0x1p126)};
}

// Dynamic shared memory of the forward: the cp.async ring of x (and residual) vectors.
CAKE_HD constexpr size_t forward_smem_bytes(int cta, int vpt, int stages, bool res) {
  return size_t(stages) * (res ? 2 : 1) * vpt * cta * 16;
}
// Of the backward: the ring of g, x (and g_residual) vectors, then one rstd a thread and stage.
CAKE_HD constexpr size_t backward_ring_bytes(int cta, int vpt, int stages, bool res) {
  return size_t(stages) * cta * ((res ? 3 : 2) * vpt * 16 + 4);
}
// An SM's shared memory on every shipped architecture, and what each CTA's launch reserves of it.
constexpr size_t kSmemPerSm = 228 * 1024, kSmemReservedPerCta = 1024;
// The backward from y, from this many vectors a thread, reads w at each use (from L1) and keeps
// 1 / w of its columns in shared memory past the ring, 8 floats a vector: held in registers it
// spilled (docs/perf/runs/sass-from-y.md). Only where kBwdMinBlocks CTAs of kMaxBwdThreads at a
// two-row ring still fit an SM beside it: not on the residual route at 4 vectors (its third
// stream takes the room), which keeps 1 / w in registers.
constexpr int kFromYWideVpt = 3;
// Where the backward reads w at each use (from L1) instead of holding it in registers: from y at
// kFromYWideVpt vectors, where 1 / w takes its registers, and an FP32 w at 4 vectors where the CTA
// keeps dw sums (64 registers): held, its 32 registers spilled 284 bytes a thread, and read at use
// it ran 1.11-1.13x faster (BF16 w, 16 registers: 0.96-0.98x; docs/perf/runs/h100-w-at-use-*.md).
CAKE_HD constexpr bool bwd_w_at_use(bool from_y, int vpt, bool dw_sums, bool w_fp32) {
  return (from_y && vpt >= kFromYWideVpt) || (dw_sums && w_fp32 && vpt >= 4);
}
CAKE_HD constexpr size_t from_y_iw_bytes(int cta, int vpt) { return size_t(cta) * vpt * 8 * sizeof(float); }  // 8 a vector
CAKE_HD constexpr bool from_y_iw_in_smem(bool from_y, int vpt, bool res) {
  return from_y && vpt >= kFromYWideVpt &&
         kBwdMinBlocks * (backward_ring_bytes(kMaxBwdThreads, vpt, 2, res) + from_y_iw_bytes(kMaxBwdThreads, vpt) +
                          kSmemReservedPerCta) <= kSmemPerSm;
}
// The backward's dynamic shared memory: the ring, then (from_y_iw_in_smem) 1 / w.
CAKE_HD constexpr size_t backward_smem_bytes(int cta, int vpt, int stages, bool res, bool from_y = false) {
  return backward_ring_bytes(cta, vpt, stages, res) + (from_y_iw_in_smem(from_y, vpt, res) ? from_y_iw_bytes(cta, vpt) : 0);
}
constexpr size_t kMaxSmemPerCta = 227 * 1024;  // the largest opt-in of the shipped architectures (sm_90, sm_100)

// First row of chunk c: floor(c * rows / chunks), balanced and a function of rows alone,
// computed as c * q + floor(c * r / chunks) (q, r = rows / chunks, rows % chunks) so the
// kernels divide 32-bit numbers (c * r < chunks^2 <= 2^24, programs.h holds chunks to 4096)
// instead of calling the 64-bit division routine.
CAKE_HD constexpr int64_t chunk_first_row(int c, int64_t q, int r, int chunks) {
  return c * q + static_cast<int64_t>(static_cast<uint32_t>(c * r) / static_cast<uint32_t>(chunks));
}
CAKE_HD inline int64_t chunk_begin(int c, const BwdParams& p) {
  return chunk_first_row(c, p.chunk_rows, p.chunk_rem, p.chunks);
}

}  // namespace cake
