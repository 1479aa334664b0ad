// Op schemas and the CPU implementations. Activations are [..., hidden] of any layout (read in
// place where the leading dims collapse into rows, else copied once). The functional ops
// allocate their outputs; the _out ops write caller buffers and return nothing. User-facing
// errors (argument names, the documented refusals) live in Python.
#include "gen/schemas.h"
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

// The schemas, one an op, from the op table (python/cake_rmsnorm/_optable.py, gen/schemas.h).
STABLE_TORCH_LIBRARY(cake_rmsnorm, m) { CAKE_DEFINE_OPS(m); }

STABLE_TORCH_LIBRARY_IMPL(cake_rmsnorm, CPU, m) { CAKE_REGISTER_IMPLS(m, CpuOps); }
