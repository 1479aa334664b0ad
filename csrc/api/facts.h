// What the plan query shares with calls: the current device's facts, and the record of this
// thread's last call's Launch (cake_rmsnorm_last_launch). Host-only.
#pragma once

#include "../dispatch/resolve.h"

namespace cake {

// The current CUDA device's facts (execute.h); false in a CPU-only build or with no device.
bool device_facts_here(DeviceFacts* out);
void record_launch(const Call& c, const Launch& l);

}  // namespace cake
