"""Every token count fills the machine, on every shipped architecture at its own SM count: the
backward's persistent grid (dispatch/plan.h, plan_backward) holds every CTA the device keeps
resident, the same number on every SM, and no more CTAs than there are chunks to take.
CUDA-free: the plan query with the launch bounds' residency (cake_rmsnorm.launch_plan)."""

import math

import pytest

import cake_rmsnorm as cr
from cake_rmsnorm.__main__ import REFERENCE_SMS

WIDTHS = [896, 2048, 3584, 4096, 6144, 8192]
SWEEP = range(1024, 65537, 257)  # the held-out fine sweep's token counts


def plan_and_units(hidden, tokens, sm, sms, route):
    """(the plan, the chunks a CTA takes at a time), or None for the one launch."""
    p = cr.launch_plan(route, hidden, tokens, sm=sm, sms=sms)
    if p.get("one_launch"):
        return None
    launch = p["launch"]
    return p, launch["block"] // 32 if p.get("warp_chunks") else \
        p["group"]["groups_per_cta"] // (2 if launch["instance"]["pair"] else 1)


def grid_and_wanted(hidden, tokens, sm, sms, route="bwd"):
    """(the persistent grid, the CTAs its chunks want), or None for the one launch. A CTA takes
    `units` chunks at a time, so ceil(chunks / units) CTAs would each take one turn."""
    got = plan_and_units(hidden, tokens, sm, sms, route)
    if got is None:
        return None
    p, units = got
    return p["launch"]["grid"], math.ceil(p["chunks"] / units)


@pytest.mark.parametrize("sm", sorted(REFERENCE_SMS))
def test_every_token_count_fills_the_machine(sm):
    sms = REFERENCE_SMS[sm]
    capped = 0
    for route in ("bwd", "bwd_residual"):
        for h in WIDTHS:
            for t in SWEEP:
                got = grid_and_wanted(h, t, sm, sms, route)
                if got is None:
                    continue
                grid, wanted = got
                assert grid <= wanted, f"sm_{sm}a {route} H {h} T {t}: {grid} CTAs for {wanted} turns"
                if grid < wanted:  # capped at the resident CTAs: whole waves, every SM alike
                    capped += 1
                    assert grid >= sms and grid % sms == 0, f"sm_{sm}a {route} H {h} T {t}: grid {grid}"
                else:  # every chunk has a CTA: none waits while an SM could run it
                    assert grid == wanted
    assert capped > 100, (sm, capped)


def test_the_grid_follows_the_sm_count():
    """The same call on a device of more SMs gets a grid of more CTAs where its chunks outnumber
    the resident CTAs (H 3584 at T 20000: 512 chunks; two CTAs an SM of this instance)."""
    grids = {sms: cr.launch_plan("bwd", 3584, 20000, sm=90, sms=sms)["launch"]["grid"] for sms in (66, 132, 148)}
    assert grids == {66: 132, 132: 264, 148: 296}, grids
    assert cr.launch_plan("bwd", 3584, 20000, sm=90, sms=132)["program"].endswith("_s2")


def sm_rows_a_token(hidden, tokens, sm, sms, route):
    """The rows the busiest SM carries, over T: ceil(turns / SMs) turns of `units` chunks of
    T / chunks rows (a persistent grid of whole waves, or one turn a CTA, spreads turns over SMs
    alike). Past a few rows a chunk an SM's share of the bandwidth, not one CTA's, sets the time."""
    got = plan_and_units(hidden, tokens, sm, sms, route)
    if got is None:
        return None
    p, units = got
    turns = math.ceil(p["chunks"] / units)
    return math.ceil(turns / sms) * units / p["chunks"]


@pytest.mark.parametrize("sm", sorted(REFERENCE_SMS))
def test_no_cliff_in_the_rows_an_sm_carries(sm):
    """The fine sweep's cliff criterion (benchmarks/heldout.py cliffs: a row's cost more than 5 %
    over the best at a smaller T) on the model above, from T 4108 where every count holds chunks
    of several rows: dw's chunk count (a function of T and H alone) never leaves a few chunks past
    a wave on any shipped architecture at its SM count. A count that grew by one chunk per 32 rows
    failed this 832 times on 132 SMs (H 3584 T 8477: 265 chunks on 132 SMs' 264 turns)."""
    sms = REFERENCE_SMS[sm]
    cliffs = []
    for route in ("bwd", "bwd_residual"):
        for h in (512, 896, 1024, 1536, 2048, 2560, 3072, 3584, 4096, 5120, 6144, 8192):
            best = None
            for t in range(4108, 65537, 257):
                cost = sm_rows_a_token(h, t, sm, sms, route)
                if cost is None:
                    continue
                if best is not None and cost > 1.05 * best[1]:
                    cliffs.append(f"{route} H {h}: T {t} {cost / best[1]:.2f}x T {best[0]}'s")
                if best is None or cost < best[1]:
                    best = (t, cost)
    assert not cliffs, cliffs[:5]


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
