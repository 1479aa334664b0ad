"""Every token count fills the machine, on every shipped architecture at its own SM count: the
backward's persistent grid (dispatch/plan.h, plan_backward) is derived from the SM count and
the instance's resident CTAs, so no SM runs more rounds of dw chunks than whole chunks force.
CUDA-free: the plan query with the launch bounds' residency (cake_rmsnorm.launch_plan)."""

import math

import pytest

import cake_rmsnorm as cr
from cake_rmsnorm.__main__ import REFERENCE_SMS

WIDTHS = [896, 2048, 3584, 4096, 6144, 8192]
SWEEP = range(1024, 65537, 257)  # the held-out fine sweep's token counts


def busiest_sm(hidden, tokens, sm, sms, route="bwd"):
    """(chunks the busiest SM works through, the least whole chunks allow), or None where the
    grid is one launch or fits in one round. A CTA takes `units` chunks at a time, round-robin
    over the grid; an SM runs its CTAs side by side, so its work is the rounds of its busiest
    CTA times the CTAs it holds."""
    p = cr.launch_plan(route, hidden, tokens, sm=sm, sms=sms)
    if p.get("one_launch"):
        return None
    launch = p["launch"]
    units = launch["block"] // 32 if p.get("warp_chunks") else \
        p["group"]["groups_per_cta"] // (2 if launch["instance"]["pair"] else 1)
    wanted, grid = math.ceil(p["chunks"] / units), launch["grid"]
    if wanted <= sms:
        return None
    return math.ceil(wanted / grid) * math.ceil(grid / sms), math.ceil(wanted / sms)


@pytest.mark.parametrize("sm", sorted(REFERENCE_SMS))
def test_every_token_count_fills_the_machine(sm):
    sms = REFERENCE_SMS[sm]
    worst, at_bound, rows = 0.0, 0, 0
    for h in WIDTHS:
        for t in SWEEP:
            got = busiest_sm(h, t, sm, sms)
            if got is None:
                continue
            work, bound = got
            rows += 1
            at_bound += work == bound
            worst = max(worst, work / bound)
            # 2048 at T 20000 on 132 SMs: 625 chunks, at most 5 an SM; 3 CTAs an SM of 2 rounds
            # is 6 (a fourth CTA's ring keeps too little in flight to go faster: plan.h).
            assert work <= 1.25 * bound, f"sm_{sm}a H {h} T {t}: the busiest SM takes {work} chunks, {bound} would do"
    assert rows > 1000 and at_bound / rows >= 0.85, (sm, at_bound, rows, worst)


def test_the_h3584_cliff_is_one_cta_an_sm():
    """H 3584 at T 12345 (386 chunks on the H200's 132 SMs of two resident CTAs): three rounds of
    one CTA with a three-row ring, not two rounds of two (1.46 waves)."""
    p = cr.launch_plan("bwd", 3584, 12345, sm=90, sms=132)
    assert p["chunks"] == 386 and p["launch"]["grid"] == 132 and p["program"].endswith("_s3")
    assert busiest_sm(3584, 12345, 90, 132) == (3, 3)
    # 256 and 512 chunks fill whole rounds of two: every resident CTA, the table's ring.
    for t in (5000, 20000):
        p = cr.launch_plan("bwd", 3584, t, sm=90, sms=132)
        assert p["launch"]["grid"] in (256, 264) and p["program"].endswith("_s2")


@pytest.mark.parametrize("sm", sorted(REFERENCE_SMS))
def test_windows_scale_with_the_sm_count(sm):
    """The streaming windows that count CTAs or elements scale with the SM count; the groups
    (what fixes bits) do not move."""
    own = cr.program_windows("fwd", 4096, sm=sm, sms=132)["fwd"]
    big = cr.program_windows("fwd", 4096, sm=sm, sms=264)["fwd"]
    assert [w[2] for w in own] == [w[2] for w in big]
    assert all(b[0] >= 2 * a[0] - 1 for a, b in zip(own[1:], big[1:]))
    for h in (896, 3584, 6144):
        for route in cr.ROUTES:
            a = cr.launch_plan(route, h, 4096, sm=sm, sms=132)["group"]
            b = cr.launch_plan(route, h, 4096, sm=sm, sms=REFERENCE_SMS[sm])["group"]
            assert (a["threads_per_row"], a["vectors_per_thread"]) == (b["threads_per_row"], b["vectors_per_thread"])
