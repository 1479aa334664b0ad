// Runs a resolved Launch (dispatch/resolve.h): its kernel from the registry on its grid, then
// the dw finalize. No decisions here. Host-only declarations: no CUDA headers needed.
#pragma once

#include "../dispatch/resolve.h"
#include "../kernels/params.h"

namespace cake {

// The current device's facts for resolve (its architecture, SM count and instance residency,
// gathered once per device); sm 0 where there is no device.
DeviceFacts current_device_facts();

// Each returns 0 on success or the CUDA error code of the launch; `stream` is a cudaStream_t.
// p's tpr, stages and dx_ctas are the Launch's.
int execute_forward(const Launch& l, const FwdParams& p, void* stream);
// The kernel, then the finalize into p.dw where l.finalize.
int execute_backward(const Launch& l, const BwdParams& p, void* stream);
// The finalize alone (a caller's partials; resolve_finalize).
int execute_finalize(const Launch& l, const BwdParams& p, void* stream);

// The CUDA error a call with no compiled instance reports (invalid configuration).
int no_instance_error();
const char* cuda_error_string(int code);
int zero_bytes(void* p, size_t n, void* stream);
// The current device's architecture as 10 * major + minor (90 for sm_90a; 0 if unknown).
int device_sm();

}  // namespace cake
