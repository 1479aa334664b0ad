// The dtype combinations the library serves, stated once for the C API's calls and its plan
// query: 16-bit activations take their own dtype for g, y, dx and the residual stream and a w
// of that dtype or FP32; FP32 activations (the mixed-precision residual stream) any of the
// three for w and for y or g.
#pragma once

#include "cake_rmsnorm/cake_rmsnorm.h"

namespace cake {

constexpr bool is_16bit(int t) { return t == CAKE_DTYPE_BF16 || t == CAKE_DTYPE_FP16; }
constexpr bool is_dtype(int t) { return is_16bit(t) || t == CAKE_DTYPE_FP32; }
// x, w and y-or-g (`other`) of one call.
constexpr bool dtypes_served(int x, int w, int other) {
  return is_dtype(x) && is_dtype(w) && is_dtype(other) &&
         (!is_16bit(x) || ((w == x || w == CAKE_DTYPE_FP32) && other == x));
}

}  // namespace cake
