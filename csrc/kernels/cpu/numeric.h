// Round-to-nearest-even conversions between FP32 and the 16-bit activation types, matching
// the CUDA intrinsics (__float2bfloat16_rn, __float2half_rn). Torch-free.
#pragma once

#include <stdint.h>
#include <string.h>

namespace cake {
namespace cpu {

inline uint32_t bits_of(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
inline float float_of(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// kMinNormal and kMax: the smallest normal and the largest finite value (y_rebuild_range).
struct BF16 {
  uint16_t bits;
  static constexpr float kMinNormal = 0x1p-126f, kMax = 0x1.fep127f;
  static float to_float(BF16 v) { return float_of(static_cast<uint32_t>(v.bits) << 16); }
  static BF16 from_float(float f) {
    const uint32_t u = bits_of(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return BF16{static_cast<uint16_t>((u >> 16) | 0x40u)};
    return BF16{static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
  }
};

struct FP16 {
  uint16_t bits;
  static constexpr float kMinNormal = 0x1p-14f, kMax = 65504.f;
  static float to_float(FP16 v) {
    const uint32_t sign = static_cast<uint32_t>(v.bits & 0x8000u) << 16;
    const uint32_t exp = (v.bits >> 10) & 0x1fu;
    uint32_t man = v.bits & 0x3ffu;
    if (exp == 0x1f) return float_of(sign | 0x7f800000u | (man << 13));
    if (exp != 0) return float_of(sign | ((exp + 112u) << 23) | (man << 13));
    if (man == 0) return float_of(sign);
    int e = 113;  // subnormal: normalise the mantissa
    while ((man & 0x400u) == 0) {
      man <<= 1;
      --e;
    }
    return float_of(sign | (static_cast<uint32_t>(e) << 23) | ((man & 0x3ffu) << 13));
  }
  static FP16 from_float(float f) {
    const uint32_t u = bits_of(f);
    const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return FP16{static_cast<uint16_t>(sign | 0x7e00u)};
    if (a >= 0x477ff000u) return FP16{static_cast<uint16_t>(sign | 0x7c00u)};  // >= 65520
    if (a < 0x38800000u) {                                                    // below 2^-14
      if (a < 0x33000000u) return FP16{sign};                                 // <= 2^-25
      const uint32_t e = a >> 23;
      const uint32_t m = (a & 0x7fffffu) | 0x800000u;
      const uint32_t shift = 126u - e;  // in units of 2^-24
      uint32_t q = m >> shift;
      const uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
      if (rem > half || (rem == half && (q & 1u))) ++q;
      return FP16{static_cast<uint16_t>(sign | q)};
    }
    const uint32_t r = a + 0x0fffu + ((a >> 13) & 1u) - 0x38000000u;
    return FP16{static_cast<uint16_t>(sign | (r >> 13))};
  }
};

struct F32 {
  float v;
  static constexpr float kMinNormal = 0x1p-126f, kMax = 0x1.fffffep127f;
  static float to_float(F32 x) { return x.v; }
  static F32 from_float(float f) { return F32{f}; }
};

}  // namespace cpu
}  // namespace cake
