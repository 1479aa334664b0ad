// Op schemas and the CPU implementations. Activations are [..., hidden] of any layout (read in
// place where the leading dims collapse into rows, else copied once). The functional ops
// allocate their outputs; the _out ops write caller buffers and return nothing. User-facing
// errors (argument names, the documented refusals) live in Python.
#include "ops_impl.h"
#include "streams.h"

namespace {
using CpuOps = cake_torch::Ops<cake_torch::CpuStream>;

// The CPU path on torch's threads (torch.set_num_threads governs them): torch's parallel-for,
// through the stable ABI, installed once at load. Where it fails the range runs here, whole.
void torch_parallel(int64_t begin, int64_t end, int64_t grain, cake_parallel_body_fn body, void* ctx) {
  if (torch_parallel_for(begin, end, grain, body, ctx) != AOTI_TORCH_SUCCESS) body(begin, end, ctx);
}
const bool kParallelInstalled = cake_rmsnorm_set_cpu_parallel_for(&torch_parallel) == CAKE_OK;
}  // namespace

STABLE_TORCH_LIBRARY(cake_rmsnorm, m) {
  // out_dtype: y's dtype when not x's (FP32 x: a 16-bit compute dtype, cast in the same pass).
  // The gradient of y may come in y's dtype: g is x's dtype, or 16-bit with FP32 x.
  m.def("fwd(Tensor x, Tensor w, float eps, ScalarType? out_dtype=None) -> (Tensor y, Tensor rstd)");
  m.def(
      "fwd_residual(Tensor x, Tensor residual, Tensor w, float eps, ScalarType? out_dtype=None) "
      "-> (Tensor y, Tensor rstd, Tensor h_new)");
  m.def("fwd_out(Tensor x, Tensor w, float eps, Tensor(a!) y, Tensor(b!) rstd) -> ()");
  m.def(
      "fwd_residual_out(Tensor x, Tensor residual, Tensor w, float eps, Tensor(a!) y, "
      "Tensor(b!) rstd, Tensor(c!) h_new) -> ()");
  // dw_in_w_dtype: dw in a 16-bit w's dtype (what autograd returns), else FP32. No determinism
  // flag: dw is reproducible on every path (the Python API's deterministic=False runs it too).
  m.def(
      "bwd(Tensor g, Tensor x, Tensor w, Tensor rstd, Tensor? g_residual, bool dw_in_w_dtype=False) "
      "-> (Tensor dx, Tensor dw)");
  m.def("bwd_dx(Tensor g, Tensor x, Tensor w, Tensor rstd, Tensor? g_residual) -> Tensor dx");
  // dw None skips the weight gradient; accumulate adds the sum into dw (main_grad buffers);
  // workspace None with dw: the op allocates one.
  m.def(
      "bwd_out(Tensor g, Tensor x, Tensor w, Tensor rstd, Tensor? g_residual, "
      "Tensor(a!) dx, Tensor(b!)? dw, Tensor(c!)? workspace, int max_ctas=0, bool accumulate=False) -> ()");
  // The memory-efficient backward: y (the forward's output) read in x's place, xhat = y (1 / w); dx
  // in dx_dtype (None: y's; float32 beside a 16-bit y, AMP's stream).
  m.def(
      "bwd_y(Tensor g, Tensor y, Tensor w, Tensor rstd, Tensor? g_residual, ScalarType? dx_dtype=None, "
      "bool dw_in_w_dtype=False) -> (Tensor dx, Tensor dw)");
  m.def(
      "bwd_y_dx(Tensor g, Tensor y, Tensor w, Tensor rstd, Tensor? g_residual, ScalarType? dx_dtype=None) "
      "-> Tensor dx");
}

STABLE_TORCH_LIBRARY_IMPL(cake_rmsnorm, CPU, m) { CAKE_REGISTER_IMPLS(m, CpuOps); }
