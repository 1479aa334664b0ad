// rmsnorm_cpu.h's FMA clones (forward_fma, backward_fma: the row code compiled for the FMA
// instruction) against the baseline code, bit for bit: y, rstd, h_new, dx, the dw partials and
// dw, and the dw finalize's column blocks against the column-by-column reference, over every
// activation / weight dtype, widths of every row group shape and data at unit,
// tiny (squares below 2^-60), huge (overflowing squares) and subnormal scales with Inf and NaN
// entries. Prints the mismatches; exits 1 on any, 2 where the clone is not built or the host
// has no FMA (nothing to compare).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "dispatch/plan.h"
#include "kernels/cpu/rmsnorm_cpu.h"

using namespace cake;
using namespace cake::cpu;

#if CAKE_CPU_FMA_CLONE  // the clones exist only there

static long checked = 0, bad = 0;

template <typename V>
static void same(const std::vector<V>& a, const std::vector<V>& b, const char* what, int H, int kind) {
  for (size_t i = 0; i < a.size(); ++i) {
    float fa, fb;
    if constexpr (sizeof(V) == 4) {
      std::memcpy(&fa, &a[i], 4);
      std::memcpy(&fb, &b[i], 4);
    } else {
      fa = V::to_float(a[i]);
      fb = V::to_float(b[i]);
    }
    ++checked;
    const bool nan = std::isnan(fa) && std::isnan(fb);
    if (std::memcmp(&a[i], &b[i], sizeof(V)) != 0 && !nan && bad++ < 10)
      std::printf("%s H %d data %d [%zu]: baseline %a, fma clone %a\n", what, H, kind, i, fa, fb);
  }
}

template <typename V>
static std::vector<V> data(std::mt19937& rng, size_t n, int kind) {
  std::normal_distribution<float> nd;
  const float scale[] = {1.f, 0x1p-64f, 0x1p70f, 0x1p-130f};
  std::vector<V> out(n);
  for (size_t i = 0; i < n; ++i) {
    float v = nd(rng) * scale[kind];
    if (kind > 0 && i % 97 == 5) v = nd(rng);               // mixed scales in a row
    if (kind == 2 && i % 211 == 7) v = INFINITY;            // Inf and NaN entries
    if (kind == 2 && i % 307 == 11) v = NAN;
    out[i] = V::from_float(v);
  }
  return out;
}

template <typename T, typename W, typename TY>
static void check(int H, int kind, std::mt19937& rng) {
  const bool fp32 = sizeof(T) == 4;
  const int64_t rows = 37;
  const RowOrderGroup fg = row_order_group(H, false, fp32), bg = row_order_group(H, true, fp32);
  const RowOrder fo{fg.tpr, fg.vectors, fg.pairs, fg.fp32}, bo{bg.tpr, bg.vectors, bg.pairs, bg.fp32};
  const auto x = data<T>(rng, rows * H, kind), r = data<T>(rng, rows * H, kind), g = data<TY>(rng, rows * H, kind);
  const auto w = data<W>(rng, H, kind == 2 ? 0 : kind);
  for (int res = 0; res < 2; ++res) {
    std::vector<TY> y[2];
    std::vector<T> h[2];
    std::vector<float> rstd[2];
    for (int c = 0; c < 2; ++c) {
      y[c].resize(rows * H), h[c].resize(rows * H), rstd[c].resize(rows);
      FwdParams p{x.data(), H, res ? r.data() : nullptr, H, w.data(), y[c].data(), H, h[c].data(), H,
                  rstd[c].data(), rows, H, 1e-6f, 0, 0};
      c == 0 ? forward<T, W, TY>(p, fo) : forward_fma<T, W, TY>(p, fo);
    }
    same(y[0], y[1], "y", H, kind);
    same(rstd[0], rstd[1], "rstd", H, kind);
    if (res) same(h[0], h[1], "h_new", H, kind);
    for (int w16 = 0; w16 < 1 + (sizeof(W) == 2); ++w16) {
      const int chunks = 5;
      std::vector<T> dx[2];
      std::vector<float> part[2], dw[2];
      for (int c = 0; c < 2; ++c) {
        dx[c].resize(rows * H), part[c].resize(chunks * H), dw[c].assign(H, 0.f);
        BwdParams p{g.data(), H, x.data(), H, w.data(), rstd[0].data(), res ? r.data() : nullptr, H, dx[c].data(), H,
                    part[c].data(), dw[c].data(), w16, 0, rows, H, chunks, rows / chunks,
                    static_cast<int>(rows % chunks), 0, 0, 0};
        c == 0 ? backward<T, W, TY>(p, bo) : backward_fma<T, W, TY>(p, bo);
      }
      same(dx[0], dx[1], "dx", H, kind);
      same(part[0], part[1], "dw partials", H, kind);
      if (w16) {
        std::vector<W> a(H), b(H);
        std::memcpy(a.data(), dw[0].data(), H * sizeof(W));
        std::memcpy(b.data(), dw[1].data(), H * sizeof(W));
        same(a, b, "dw (w's dtype)", H, kind);
      } else {
        same(dw[0], dw[1], "dw", H, kind);
      }
    }
  }
}

// The finalize as it was written column by column (one column a pass), the reference for the
// column blocks of finalize_cols and its clone: the same dw bits.
template <typename W>
static void finalize_reference(const BwdParams& p) {
  const int lanes = finalize_lanes(p.chunks);
  for (int i = 0; i < p.hidden; ++i) {
    float s[kFinalizeLanesMany], c[kFinalizeLanesMany];
    for (int l = 0; l < lanes; ++l) s[l] = c[l] = 0.f;
    for (int k = 0; k < p.chunks; ++k)
      neumaier_add(s[k % lanes], c[k % lanes], p.partials[static_cast<int64_t>(k) * p.hidden + i]);
    for (int l = 0; l < kFinalizeLanes; ++l)
      for (int q = 1; q < lanes / kFinalizeLanes; ++q)
        neumaier_merge(s[l], c[l], s[l + kFinalizeLanes * q], c[l + kFinalizeLanes * q]);
    for (int o = kFinalizeLanes / 2; o > 0; o >>= 1)
      for (int j = 0; j < o; ++j) neumaier_merge(s[j], c[j], s[j + o], c[j + o]);
    const float sum = s[0] + c[0];
    if (p.dw_w_dtype)
      static_cast<W*>(p.dw)[i] = W::from_float(sum);
    else
      static_cast<float*>(p.dw)[i] = p.accumulate ? static_cast<float*>(p.dw)[i] + sum : sum;
  }
}

template <typename W>
static void check_finalize(int H, int chunks, int kind, std::mt19937& rng) {
  auto part = data<F32>(rng, static_cast<size_t>(chunks) * H, kind < 4 ? kind : 0);
  if (kind == 4) {  // magnitudes spread over 2^-40 .. 2^40, where the order shows in the bits
    std::uniform_int_distribution<int> e(-40, 40);
    for (auto& v : part) v.v = std::ldexp(v.v, e(rng));
  }
  for (int w16 = 0; w16 < 1 + (sizeof(W) == 2); ++w16)
    for (int acc = 0; acc < 1 + !w16; ++acc) {
      std::vector<float> dw[3];
      for (int c = 0; c < 3; ++c) {
        dw[c].assign(H, 0.5f);
        BwdParams p{};
        p.partials = const_cast<float*>(reinterpret_cast<const float*>(part.data()));
        p.dw = dw[c].data();
        p.dw_w_dtype = w16;
        p.accumulate = acc;
        p.hidden = H;
        p.chunks = chunks;
        if (c == 0) finalize_reference<W>(p);
        if (c == 1) finalize<W>(p);
        if (c == 2) {  // the clone over uneven column ranges, as the parallel-for hands them out
          for (int i0 = 0; i0 < H; i0 += 13) finalize_cols_fma<W>(p, i0, i0 + 13 < H ? i0 + 13 : H);
        }
      }
      for (int c = 1; c < 3; ++c) {
        const char* what = c == 1 ? "dw finalize (column blocks)" : "dw finalize (clone)";
        if (w16) {
          std::vector<W> a(H), b(H);
          std::memcpy(a.data(), dw[0].data(), H * sizeof(W));
          std::memcpy(b.data(), dw[c].data(), H * sizeof(W));
          same(a, b, what, H, kind);
        } else {
          same(dw[0], dw[c], what, H, kind);
        }
      }
    }
}

#endif

int main() {
#if CAKE_CPU_FMA_CLONE
  if (!host_has_fma()) {
    std::printf("host has no FMA\n");
    return 2;
  }
  std::mt19937 rng(1234);
  for (int H : {8, 64, 136, 520, 776, 1000, 1536, 2048, 3072, 4096, 5120, 6144, 8192, 12288, 16384})
    for (int kind = 0; kind < 4; ++kind) {
      check<BF16, BF16, BF16>(H, kind, rng);
      check<BF16, F32, BF16>(H, kind, rng);
      check<FP16, FP16, FP16>(H, kind, rng);
      check<FP16, F32, FP16>(H, kind, rng);
      check<F32, F32, BF16>(H, kind, rng);
      check<F32, BF16, FP16>(H, kind, rng);
    }
  for (int H : {8, 24, 136, 1000, 4096})
    for (int chunks : {1, 5, 37, 300, 1031})
      for (int kind = 0; kind < 5; ++kind) {
        check_finalize<BF16>(H, chunks, kind, rng);
        check_finalize<F32>(H, chunks, kind, rng);
      }
  std::printf("checked %ld mismatches %ld\n", checked, bad);
  return bad != 0;
#else
  std::printf("no FMA clone in this build\n");
  return 2;
#endif
}
