"""The plan of every shipped architecture as committed text: `python -m cake_rmsnorm windows`
for a fixed set of widths and token counts, one file an architecture (tests/golden/). A change
to the dispatch layer that moves a plan shows here as a diff of the file, to be read and then
regenerated on purpose:

    python tests/test_golden_plans.py --update
"""

import os
import sys

import pytest

import cake_rmsnorm as cr
from cake_rmsnorm.__main__ import REFERENCE_SMS, plans_text, windows_text

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden")
SMS = REFERENCE_SMS  # each architecture at its reference device's SM count
# Real model widths, the BENCH matrix's, narrow exact rows and widths that are not powers of two.
WIDTHS = [64, 128, 256, 512, 520, 768, 896, 1000, 1024, 1536, 2048, 2560, 3072, 3584, 4096, 5120, 6144,
          7168, 8192, 8200, 12288, 16384]
TOKENS = [1, 2, 3, 16, 64, 256, 777, 1024, 4096, 5000, 12345, 16384, 20000, 50000, 65536, 131072]
FP32_W_WIDTHS = [512, 1024, 2048, 4096, 6144]
FP32_X_WIDTHS = [512, 1024, 2048, 4096, 8192]
FP32_X_TOKENS = [1, 256, 4096, 65536]


def golden_text(sm):
    sms = SMS[sm]
    parts = [windows_text(WIDTHS, sm, sms=sms),
             plans_text(WIDTHS, TOKENS, sm, sms),
             "# FP32 w", plans_text(FP32_W_WIDTHS, TOKENS, sm, sms, ["fwd", "bwd"], weight_fp32=True),
             "# FP32 x", plans_text(FP32_X_WIDTHS, FP32_X_TOKENS, sm, sms, dtype="fp32")]
    return "\n".join(parts) + "\n"


def path_of(sm):
    return os.path.join(GOLDEN, f"plans_sm{sm}a.txt")


def test_every_shipped_arch_has_a_golden_file():
    assert sorted(SMS) == sorted(cr.SHIPPED_ARCHS)


@pytest.mark.parametrize("sm", sorted(SMS))
def test_plans_match_golden(sm):
    with open(path_of(sm)) as f:
        want = f.read().splitlines()
    got = golden_text(sm).splitlines()
    moved = [f"- {a}\n+ {b}" for a, b in zip(want, got) if a != b]
    assert len(got) == len(want) and not moved, (
        f"{len(moved)} plan lines moved on sm_{sm}a ({len(want)} -> {len(got)} lines); first:\n"
        + "\n".join(moved[:5]) + "\nread the diff, then: python tests/test_golden_plans.py --update")


if __name__ == "__main__":
    if sys.argv[1:] != ["--update"]:
        sys.exit("usage: python tests/test_golden_plans.py --update")
    os.makedirs(GOLDEN, exist_ok=True)
    for sm in sorted(SMS):
        with open(path_of(sm), "w") as f:
            f.write(golden_text(sm))
        print(path_of(sm))
