// The CPU path's parallel-for: a hook the host installs (cake_rmsnorm_set_cpu_parallel_for; the
// PyTorch extension installs torch's, so torch.set_num_threads governs it), serial where none
// is. Ranges never split a task's unit (a row, a dw chunk, a column), so results do not depend
// on how the range is cut. Torch-free.
#pragma once

#include <stdint.h>

#include <algorithm>
#include <atomic>

namespace cake {
namespace cpu {

// Runs body(lo, hi, ctx) over [begin, end) in ranges of at least `grain` (except the last).
using ParallelBody = void (*)(int64_t lo, int64_t hi, void* ctx);
using ParallelFor = void (*)(int64_t begin, int64_t end, int64_t grain, ParallelBody body, void* ctx);

inline std::atomic<ParallelFor> g_parallel_for{nullptr};

// Elements a task takes at least: below this a thread's start costs more than the rows.
constexpr int64_t kParallelGrainElems = 1 << 15;

template <class F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, const F& f) {
  const ParallelFor pf = g_parallel_for.load(std::memory_order_acquire);
  if (pf == nullptr || end - begin <= grain) {
    f(begin, end);
    return;
  }
  auto body = [](int64_t lo, int64_t hi, void* ctx) { (*static_cast<const F*>(ctx))(lo, hi); };
  pf(begin, end, grain, body, const_cast<void*>(static_cast<const void*>(&f)));
}

}  // namespace cpu
}  // namespace cake
