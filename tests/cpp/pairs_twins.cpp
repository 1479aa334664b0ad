// The plain forward's one order a width (kernels/reduce.cuh, group_sum_pairs): wherever a
// table gives the smallest T a wider group (programs.h, small_group_max), that group is
// (2 tpr, VPT / 2) of the ring's (tpr, VPT) and the ring's VPT is a pairs_vpt, so the two sum a
// row alike; every streaming twin of the ring keeps its (tpr, VPT); and the residual route's
// group sums in the plain route's order (the same group, or one's pairs twin), so a compiled
// graph whose pass fuses the add before a norm has eager's y and rstd; and every table's row
// order is the one the CPU path computes (sm_90a's), so rows agree across devices. Prints
// "widths N twins N bad N" and each bad width; exits 1 if any.
#include <cstdio>

#include "dispatch/plan.h"
#include "dispatch/programs.h"

using namespace cake;

// A group's order as the group of natural order it equals: a pairs group sums as its twin.
bool same_order(const Program& a, const Program& b) {
  auto tpr = [](const Program& p) { return pairs_vpt(p.vpt) ? 2 * p.tpr : p.tpr; };
  auto vpt = [](const Program& p) { return pairs_vpt(p.vpt) ? p.vpt / 2 : p.vpt; };
  return tpr(a) == tpr(b) && vpt(a) == vpt(b);
}

int main() {
  int widths = 0, twins = 0, bad = 0;
  for (const ArchTable& t : kArchTables)
    for (int h = 8; h <= 131072; h += 8, ++widths) {
      const Program ring = forward_program(h, false, t);
      const Program stream = widened_streaming(ring, h, false, t);
      const bool same_group = stream.tpr == ring.tpr && stream.vpt == ring.vpt;
      bool ok = same_group && same_order(ring, forward_program(h, true, t));
      if (small_group_max(ring, h, t) > 0) {
        const Program small = forward_small_program(h, t);
        ++twins;
        ok = ok && small.tpr == 2 * ring.tpr && 2 * small.vpt == ring.vpt && pairs_vpt(ring.vpt) &&
             !pairs_vpt(small.vpt) && holds_row(ring, h);
      }
      // Every device's programs run the contract's groups, whose order the CPU path replays
      // (contract.h, row_order_group): the table shapes CTAs around them, never another group.
      for (int d = 0; d < 2; ++d) {
        const RowOrderGroup o = row_order_group(h, d == 1, false);
        const Program p = d == 1 ? backward_program(h, t) : ring;
        ok = ok && p.tpr == o.tpr && p.vpt == o.vectors;
      }
      if (!ok && ++bad <= 20) std::printf("bad sm_%d H %d ring t%d v%d\n", t.sm, h, ring.tpr, ring.vpt);
    }
  std::printf("widths %d twins %d bad %d\n", widths, twins, bad);
  return bad == 0 && twins > 0 ? 0 : 1;
}
