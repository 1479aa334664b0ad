"""Distances in units in the last place, for measuring what moves across a window edge."""

import torch


def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise distance in ulps of two same-dtype float tensors (FP32, BF16 or FP16): their
    bit patterns mapped onto one ordered integer line, so adjacent values are 1 apart and +0 and
    -0 are 0 apart."""
    it = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}[a.dtype]
    sign = torch.iinfo(it).min

    def ordered(t):
        v = t.contiguous().view(it).long()
        return torch.where(v >= 0, v, sign - v)

    return (ordered(a) - ordered(b)).abs()
