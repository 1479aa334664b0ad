// C shims of the functional ops for inductor's cpp_wrapper: a model compiled with
// torch._inductor.config.cpp_wrapper calls these straight from its generated C++, with no
// dispatcher and no boxing (python/cake_rmsnorm/_lowering.py declares them to inductor). The
// arguments follow inductor's convention for a custom op's shim: tensors as borrowed handles,
// float as double, bool as int32_t, an optional tensor or dtype as a pointer (null for None),
// then one new handle out a returned tensor. They run the registered ops' bodies, so the bits
// are the ops'. Inductor names a shim aoti_torch_<device>_<op>; the declarations bind that name
// to these symbols (an asm label), so the library exports no generic names.
#include <cstdio>
#include <exception>

#include "ops_impl.h"
#include "streams.h"

namespace {

using cake_torch::Tensor;
using torch::headeronly::ScalarType;

Tensor own(AtenTensorHandle borrowed) {
  AtenTensorHandle h = nullptr;
  CAKE_SHIM_CHECK(aoti_torch_new_tensor_handle(borrowed, &h));
  return Tensor(h);
}

std::optional<Tensor> own_opt(AtenTensorHandle* borrowed) {
  if (borrowed == nullptr) return std::nullopt;
  return own(*borrowed);
}

std::optional<ScalarType> dtype_of(const int32_t* code) {
  if (code == nullptr) return std::nullopt;
  if (*code == aoti_torch_dtype_bfloat16()) return ScalarType::BFloat16;
  if (*code == aoti_torch_dtype_float16()) return ScalarType::Half;
  if (*code == aoti_torch_dtype_float32()) return ScalarType::Float;
  STD_TORCH_CHECK(false, "out_dtype must be bfloat16, float16 or float32");
  return std::nullopt;
}

void give(const Tensor& t, AtenTensorHandle* out) { CAKE_SHIM_CHECK(aoti_torch_new_tensor_handle(t.get(), out)); }

// An exception becomes AOTI_TORCH_FAILURE, its message on stderr (inductor's own shims do the same).
template <typename Body>
AOTITorchError shim(const char* op, Body&& body) {
  try {
    body();
    return AOTI_TORCH_SUCCESS;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cake_rmsnorm::%s: %s\n", op, e.what());
  } catch (...) {
    std::fprintf(stderr, "cake_rmsnorm::%s failed\n", op);
  }
  return AOTI_TORCH_FAILURE;
}

template <typename Ops>
AOTITorchError fwd(AtenTensorHandle x, AtenTensorHandle w, double eps, int32_t* out_dtype, AtenTensorHandle* y,
                   AtenTensorHandle* rstd) {
  return shim("fwd", [&] {
    auto [yt, rt] = Ops::fwd(own(x), own(w), eps, dtype_of(out_dtype));
    give(yt, y);
    give(rt, rstd);
  });
}

template <typename Ops>
AOTITorchError fwd_residual(AtenTensorHandle x, AtenTensorHandle r, AtenTensorHandle w, double eps,
                            int32_t* out_dtype, AtenTensorHandle* y, AtenTensorHandle* rstd, AtenTensorHandle* h) {
  return shim("fwd_residual", [&] {
    auto [yt, rt, ht] = Ops::fwd_residual(own(x), own(r), own(w), eps, dtype_of(out_dtype));
    give(yt, y);
    give(rt, rstd);
    give(ht, h);
  });
}

template <typename Ops>
AOTITorchError bwd(AtenTensorHandle g, AtenTensorHandle x, AtenTensorHandle w, AtenTensorHandle rstd,
                   AtenTensorHandle* g_residual, int32_t dw_in_w_dtype, AtenTensorHandle* dx, AtenTensorHandle* dw) {
  return shim("bwd", [&] {
    auto [dxt, dwt] = Ops::bwd(own(g), own(x), own(w), own(rstd), own_opt(g_residual), dw_in_w_dtype != 0);
    give(dxt, dx);
    give(dwt, dw);
  });
}

template <typename Ops>
AOTITorchError bwd_dx(AtenTensorHandle g, AtenTensorHandle x, AtenTensorHandle w, AtenTensorHandle rstd,
                      AtenTensorHandle* g_residual, AtenTensorHandle* dx) {
  return shim("bwd_dx", [&] { give(Ops::bwd_dx(own(g), own(x), own(w), own(rstd), own_opt(g_residual)), dx); });
}

using Cpu = cake_torch::Ops<cake_torch::CpuStream>;
using Cuda = cake_torch::Ops<cake_torch::CudaStream>;

}  // namespace

#define CAKE_SHIMS(device, OPS)                                                                              \
  extern "C" __attribute__((visibility("default"))) AOTITorchError cake_rmsnorm_shim_##device##_fwd(         \
      AtenTensorHandle x, AtenTensorHandle w, double eps, int32_t* out_dtype, AtenTensorHandle* y,           \
      AtenTensorHandle* rstd) {                                                                              \
    return fwd<OPS>(x, w, eps, out_dtype, y, rstd);                                                          \
  }                                                                                                          \
  extern "C" __attribute__((visibility("default"))) AOTITorchError cake_rmsnorm_shim_##device##_fwd_residual( \
      AtenTensorHandle x, AtenTensorHandle r, AtenTensorHandle w, double eps, int32_t* out_dtype,            \
      AtenTensorHandle* y, AtenTensorHandle* rstd, AtenTensorHandle* h) {                                    \
    return fwd_residual<OPS>(x, r, w, eps, out_dtype, y, rstd, h);                                           \
  }                                                                                                          \
  extern "C" __attribute__((visibility("default"))) AOTITorchError cake_rmsnorm_shim_##device##_bwd(         \
      AtenTensorHandle g, AtenTensorHandle x, AtenTensorHandle w, AtenTensorHandle rstd,                     \
      AtenTensorHandle* g_residual, int32_t dw_in_w_dtype, AtenTensorHandle* dx, AtenTensorHandle* dw) {     \
    return bwd<OPS>(g, x, w, rstd, g_residual, dw_in_w_dtype, dx, dw);                                       \
  }                                                                                                          \
  extern "C" __attribute__((visibility("default"))) AOTITorchError cake_rmsnorm_shim_##device##_bwd_dx(      \
      AtenTensorHandle g, AtenTensorHandle x, AtenTensorHandle w, AtenTensorHandle rstd,                     \
      AtenTensorHandle* g_residual, AtenTensorHandle* dx) {                                                  \
    return bwd_dx<OPS>(g, x, w, rstd, g_residual, dx);                                                       \
  }

CAKE_SHIMS(cpu, Cpu)
CAKE_SHIMS(cuda, Cuda)
