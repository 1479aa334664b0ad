// Per-thread cp.async rings: each thread copies the 16-byte vectors it will itself consume
// a few rows ahead into shared memory, so the next rows' loads are in flight while the current
// row is reduced and written, without holding them in registers. A thread reads only slots it
// filled, so the ring needs no barrier, only cp.async.wait_group. Torch-free.
#pragma once

#include <stdint.h>

#include "params.h"

namespace cake {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared (a 32-bit shared address), cached in L2 only (streamed once);
// an invalid source copies nothing and fills zeros.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
// Deeper rings (the backward's three-row ring where the plan derives it, and tuning overrides):
// out of line (static: one copy a translation unit), so the jump table and its constant-bank
// loads stay off the two-row ring's path.
static __device__ __noinline__ void cp_async_wait_deep(int stages) {
  switch (stages) {
    case 3: cp_async_wait<2>(); break;
    case 4: cp_async_wait<3>(); break;
    case 5: cp_async_wait<4>(); break;
    case 6: cp_async_wait<5>(); break;
    case 7: cp_async_wait<6>(); break;
    default: cp_async_wait<7>(); break;
  }
}
// Waits until at most `stages - 1` groups are pending: the oldest row of the ring has landed.
// The tables' depths (2, or 1 for very wide rows) cost a compare and a branch; deeper ones a call.
__device__ __forceinline__ void cp_async_wait_ring(int stages) {
  if (stages == 2) {
    cp_async_wait<1>();
  } else if (stages == 1) {
    cp_async_wait<0>();
  } else {
    cp_async_wait_deep(stages);
  }
}

// The ring slot after `slot` (a compare, not a modulo: at small T the row loop's chain is
// the kernel's latency).
__device__ __forceinline__ int ring_next(int slot, int stages) { return slot + 1 == stages ? 0 : slot + 1; }

__device__ __forceinline__ uint4 lds16(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr));
  return v;
}
__device__ __forceinline__ void sts16f(uint32_t addr, float a, float b, float c, float d) {
  asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
}
__device__ __forceinline__ float lds4f(uint32_t addr) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(addr));
  return v;
}

// Programmatic dependent launch (sm_90+): let the next kernel in the stream start its
// prologue, and wait for the previous one's memory before touching it.
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait_primary() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

}  // namespace cake
