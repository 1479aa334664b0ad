// select_program (which caches each thread's recent tables) against a fresh windows_for lookup,
// for every route, many widths, known and unknown architectures, SM counts (the table's own and
// others, whose window edges scale) and T across the edges, with more keys than the cache holds
// so entries are evicted and rebuilt. Header-only: built from
// csrc/ by tests/test_dispatch.py. Prints the mismatches; exits nonzero on any.
#include <cstdio>
#include <initializer_list>

#include "dispatch/windows.h"

int main() {
  int checked = 0, bad = 0;
  const cake::Route routes[] = {cake::Route::kFwd, cake::Route::kFwdResidual, cake::Route::kBwd,
                                cake::Route::kBwdResidual};
  for (int pass = 0; pass < 3; ++pass)
    for (int h = 8; h <= 20000; h += h < 2048 ? 8 : 520)
      for (cake::Route r : routes)
        for (int sm : {90, 100, 80})
          for (int64_t sms : {0, 132, 148, 212})
          for (int64_t t : {1, 255, 256, 512, 513, 1024, 1025, 2048, 2049, 4096, 4097, 65535, 65536, 1 << 20}) {
            cake::Window w[16];
            const int n = cake::windows_for(r, h, cake::device_table(cake::arch_known(sm) ? sm : 90, sms), w, 16);
            cake::Program want{};
            for (int i = 0; i < n; ++i)
              if (t > w[i].above && (w[i].at_most < 0 || t <= w[i].at_most)) {
                want = w[i].program;
                break;
              }
            const cake::Program got = cake::select_program(r, h, t, sm, sms);
            ++checked;
            if (n > cake::kMaxWindows || got.tpr != want.tpr || got.cta != want.cta || got.vpt != want.vpt ||
                got.stages != want.stages || got.ctas_per_sm != want.ctas_per_sm) {
              if (++bad <= 10)
                std::printf("mismatch: route %d H %d sm %d sms %lld T %lld\n", int(r), h, sm, (long long)sms,
                            (long long)t);
            }
          }
  std::printf("%d lookups, %d mismatches\n", checked, bad);
  return bad != 0;
}
