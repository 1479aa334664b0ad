// The exported window-table query.
#include "cake_rmsnorm/cake_rmsnorm.h"

#include "../dispatch/windows.h"

extern "C" int cake_rmsnorm_program_windows(const char* route, int64_t hidden, int sm,
                                            cake_rmsnorm_window* out, int capacity) {
  cake::Route r;
  if (!cake::parse_route(route, &r) || capacity < 0 || (capacity > 0 && out == nullptr)) return -1;
  cake::Window tmp[16];
  const int n = cake::windows_for(r, hidden, sm, tmp, 16);
  for (int i = 0; i < n && i < capacity && i < 16; ++i) {
    out[i].above = tmp[i].above;
    out[i].at_most = tmp[i].at_most;
    cake::program_name(tmp[i].program, out[i].program, sizeof(out[i].program));
  }
  return n;
}
