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

// A body's outputs into the shim's output handles, in order.
void give_all(const Tensor& t, AtenTensorHandle* out) { give(t, out); }
template <typename... Ts, typename... Outs>
void give_all(const std::tuple<Ts...>& ts, Outs*... outs) {
  std::apply([&](const auto&... t) { (give(t, outs), ...); }, ts);
}

using Cpu = cake_torch::Ops<cake_torch::CpuStream>;
using Cuda = cake_torch::Ops<cake_torch::CudaStream>;

}  // namespace

#define CAKE_SHIM_API __attribute__((visibility("default")))
#include "gen/shims.h"  // each shimmed op on each device, from the op table
