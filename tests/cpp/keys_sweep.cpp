// Every kernel key the library compiles (dispatch/kernel_key.h, `compiled`) is one some call
// resolves to, and every call resolves to a compiled key: resolve (dispatch/resolve.h) over
// every architecture's table, route, dtype combination, width, token count and tuning hook,
// with the launch bounds' residency (no device), every pair fitting, and SM counts that move the
// derived grids and rings (dispatch/plan.h, plan_backward). Prints "compiled N emitted N dead N unresolved N" and the
// keys behind any nonzero count; exits 1 if a key is dead or a call unresolved.
// Built by tests/test_kernel_keys.py with the host compiler: the dispatch layer is CUDA-free.
#include <cstdio>
#include <set>
#include <tuple>
#include <vector>

#include "dispatch/resolve.h"

using namespace cake;

namespace {

using Tuple = std::tuple<int, int, int, int, bool, int, int, int, int, int, bool, int, bool>;
Tuple tuple_of(const KernelKey& k) {
  return Tuple{static_cast<int>(k.family), k.x, k.y, k.w, k.residual, k.vectors, k.tpr, k.rows,
               static_cast<int>(k.wload), static_cast<int>(k.sync), k.pair, k.r, k.from_y};
}
void print(const char* what, const Tuple& t) {
  std::printf("%s family %d x %d y %d w %d residual %d vectors %d tpr %d rows %d wload %d sync %d pair %d r %d "
              "from_y %d\n",
              what, std::get<0>(t), std::get<1>(t), std::get<2>(t), std::get<3>(t), std::get<4>(t), std::get<5>(t),
              std::get<6>(t), std::get<7>(t), std::get<8>(t), std::get<9>(t), std::get<10>(t), std::get<11>(t),
              std::get<12>(t));
}
// The residual dtypes a call may pass with (x, y, w): x's, or with FP32 x a 16-bit branch whose
// dtype y and w share or leave FP32 (the C API refuses the rest).
std::vector<int> residual_dtypes(const int* c, Route route) {
  std::vector<int> out{kAsX};
  if (c[0] == kFp32 && route == Route::kFwdResidual)
    for (int r : {kBf16, kFp16})
      if ((c[1] == r || c[1] == kFp32) && (c[2] == r || c[2] == kFp32)) out.push_back(r);
  return out;
}

int64_t many(const KernelKey&, int, size_t) { return int64_t(1) << 20; }  // every pair fits

}  // namespace

int main() {
  std::set<Tuple> universe;
  for (int f = 0; f <= static_cast<int>(Family::kFp32Bwd); ++f)
    for (int x = 0; x < 3; ++x)
      for (int y = 0; y < 3; ++y)
        for (int w = 0; w < 3; ++w)
          for (int res = 0; res < 2; ++res)
            for (int v : {1, 2, 3, 4, 6, 8})
              for (int tpr : {0, 4, 8, 16, 32})
                for (int rows : {1, kStreamRows})
                  for (int wl = 0; wl < 3; ++wl)
                    for (int sync = 0; sync < 2; ++sync)
                      for (int pair = 0; pair < 2; ++pair)
                        for (int rd : {kAsX, kBf16, kFp16, kFp32})
                          for (int fy = 0; fy < 2; ++fy) {
                            const KernelKey k{static_cast<Family>(f), x, y, w, res == 1, v, tpr, rows,
                                              static_cast<WLoad>(wl), static_cast<GroupSync>(sync), pair == 1, rd,
                                              fy == 1};
                            if (compiled(k)) universe.insert(tuple_of(k));
                          }

  std::vector<int> widths;
  for (int h = 8; h <= 16384; h += 8) widths.push_back(h);
  for (int h = 16384 + 1024; h <= 131072; h += 1024) widths.push_back(h);
  const int64_t tokens[] = {1, 2, 3, 4, 7, 8, 16, 33, 64, 100, 128, 256, 512, 1000, 1024, 2048, 4096, 8192,
                            16384, 65536, 262144, 1 << 20};
  const int combos[][3] = {{0, 0, 0}, {0, 0, 2}, {1, 1, 1}, {1, 1, 2}, {2, 0, 0}, {2, 0, 1}, {2, 0, 2},
                           {2, 1, 0}, {2, 1, 1}, {2, 1, 2}, {2, 2, 0}, {2, 2, 1}, {2, 2, 2}};  // x, y, w
  std::set<Tuple> emitted;
  int64_t calls = 0, unresolved = 0, oversized = 0, held_short = 0;  // oversized: more shared memory than a CTA may have
  for (int sm : {90, 100, 103, 107}) {
    for (int r = 0; r < 4; ++r) {
      const Route route = static_cast<Route>(r);
      for (int h : widths) {
        for (const auto& c : combos) {
          if (c[0] == kFp32 && !fp32_width_ok(h)) continue;
          for (int64_t t : tokens) {
            for (int hooks = 0; hooks < 9; ++hooks) {
              if (hooks != 0 && (c[0] == kFp32 || is_forward(route) != (hooks == 1))) continue;
              Overrides o;
              o.exact_groups = hooks != 1 && hooks != 2;  // 1: forward, 2: backward without exact groups
              if (hooks == 3) o.one_launch_chunks = 0;
              if (hooks == 4) o.warp_chunk_rows = 0;
              const bool capped = hooks == 5;
              const DeviceFacts d{sm, hooks == 7 ? 212 : hooks == 8 ? 16 : 132, hooks >= 6 ? nullptr : many};
              const int chunks = is_forward(route) ? 0 : static_cast<int>(backward_chunks(t, h));
              for (int fin = 0; fin < 2; ++fin) {
                if (fin == 0 && (is_forward(route) || hooks != 0)) continue;
                for (int rd : residual_dtypes(c, route))
                  for (int fy = 0; fy < (is_forward(route) ? 1 : 2); ++fy) {  // the backward from y too
                    Call call;
                    call.route = route;
                    call.x = c[0];
                    call.y = c[1];
                    call.w = c[2];
                    call.hidden = h;
                    call.rows = t;
                    call.chunks = chunks;
                    call.finalize_dw = fin == 1;
                    call.max_ctas = capped ? 1 : 0;
                    call.r = rd;
                    call.from_y = fy == 1;
                    Launch l;
                    ++calls;
                    if (resolve(call, d, o, &l) != Resolved::kOk) {
                      if (++unresolved <= 10) print("unresolved", tuple_of(l.key));
                      continue;
                    }
                    emitted.insert(tuple_of(l.key));
                    if (l.smem > arch_table(sm).smem_per_cta && ++oversized <= 10) print("oversized", tuple_of(l.key));
                  }
              }
            }
          }
        }
      }
    }
  }
  // Every program a tuning hook may force (program_valid), at widths its groups cover exactly
  // and not, with and without exact groups: the keys only such calls reach are compiled too.
  for (int back = 0; back < 2; ++back) {
    for (int tpr = 1; tpr <= 512; tpr *= 2) {
      for (int v : {1, 2, 3, 4, 6, 8}) {
        for (int cta = 32; cta <= 512; cta += 32) {
          for (int stages = 0; stages <= 2; ++stages) {
            for (int rows : {1, kStreamRows}) {
              const Program p{tpr, cta, v, 0, stages, true, rows};
              for (int res = 0; res < 2; ++res) {
                if (!program_valid(p, back == 1, res == 1)) continue;
                const Route route = static_cast<Route>(2 * back + res);
                for (int h : {tpr * v * 8, tpr * v * 8 + 8, 8 * v, 4096}) {
                  for (const auto& c : combos) {
                    if (c[0] == kFp32) continue;
                    for (int64_t t : {int64_t(1), int64_t(2), int64_t(64), int64_t(256), int64_t(1000), int64_t(1) << 16, int64_t(1) << 20}) {
                      for (int exact = 0; exact < 2; ++exact) {
                        Overrides o;
                        o.program[back] = p;
                        o.exact_groups = exact == 1;
                        const int chunks = back ? static_cast<int>(backward_chunks(t, h)) : 0;
                        Call call;
                        call.route = route;
                        call.x = c[0];
                        call.y = c[1];
                        call.w = c[2];
                        call.hidden = h;
                        call.rows = t;
                        call.chunks = chunks;
                        call.finalize_dw = back == 1;
                        Launch l;
                        ++calls;
                        const Resolved got = resolve(call, DeviceFacts{90, 132, many}, o, &l);
                        if (got == Resolved::kNoInstance && ++unresolved <= 10) print("unresolved", tuple_of(l.key));
                        if (got != Resolved::kOk) continue;
                        emitted.insert(tuple_of(l.key));
                        // The wide row kernel holds fewer vectors than the group only where the group's
                        // last are all past the row (params.h, bwd_wide_held_vectors): the group's order.
                        if (l.key.family == Family::kBwdWide && l.key.vectors < p.vpt && h > p.tpr * l.key.vectors * 8 &&
                            ++held_short <= 10)
                          print("held short", tuple_of(l.key));
                      }
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  int dead = 0;
  if (held_short > 0) std::printf("held short %lld\n", static_cast<long long>(held_short));
  for (const Tuple& t : universe)
    if (!emitted.count(t)) {
      ++dead;
      print("dead", t);
    }
  std::printf("calls %lld compiled %zu emitted %zu dead %d unresolved %lld oversized %lld\n",
              static_cast<long long>(calls), universe.size(), emitted.size(), dead, static_cast<long long>(unresolved),
              static_cast<long long>(oversized));
  return dead == 0 && unresolved == 0 && oversized == 0 && held_short == 0 ? 0 : 1;
}
