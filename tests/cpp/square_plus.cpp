// row_order.h's square_plus(a, c) is fma(a, a, c) for every 16-bit a (BF16 and FP16, each bit
// pattern) against c = b * b over a stride of 16-bit b: the CPU leaf's plain add where a * a is
// exact, the FMA below 2^-60. Prints the mismatches; exits 1 on any.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "kernels/cpu/row_order.h"

static float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
static uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
static float bf16(uint32_t v) { return bits_to_float(v << 16); }
static float fp16(uint32_t v) {  // IEEE half to float, exactly
  const int e = (v >> 10) & 31, m = v & 1023;
  const float s = (v & 0x8000) ? -1.f : 1.f;
  if (e == 0) return s * std::ldexp(static_cast<float>(m), -24);
  if (e == 31) return m ? NAN : s * INFINITY;
  return s * std::ldexp(static_cast<float>(m | 1024), e - 25);
}

int main() {
  long checked = 0, bad = 0;
  for (auto conv : {bf16, fp16}) {
    std::vector<float> cs;
    for (uint32_t b = 0; b < 65536; b += 13) cs.push_back(conv(b) * conv(b));
    for (uint32_t v = 0; v < 65536; ++v) {
      const float a = conv(v);
      for (float c : cs) {
        const float got = cake::cpu::square_plus(a, c), want = std::fma(a, a, c);
        ++checked;
        if (float_bits(got) != float_bits(want) && !(std::isnan(got) && std::isnan(want)) && bad++ < 10)
          std::printf("a %a c %a: %a, fma %a\n", a, c, got, want);
      }
    }
  }
  std::printf("checked %ld mismatches %ld\n", checked, bad);
  return bad != 0;
}
