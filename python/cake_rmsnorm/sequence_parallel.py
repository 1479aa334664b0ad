"""Sequence parallel with a weight gradient bitwise equal to the single-process one.

dw's reduction tree is a function of (T, H) alone: rows cut into ``backward_chunks(T, H)``
chunks, each summed in row order with compensation, the chunk partials then summed in chunk
order. Where the ranks hold equal, consecutive slices of T and their count divides the chunk
count, every rank boundary is a chunk boundary, and a rank's rows cut into ``chunks / ranks``
chunks are exactly the global chunks it holds. So each rank writes its chunks' FP32 partials
(:func:`backward_partials`), an all-gather puts every rank's in rank order, and one finalize
over all of them (:func:`dw_from_partials`) gives the unsharded dw bitwise. The all-gather
moves ``chunks x H`` FP32 values where the usual all-reduce of each rank's dw moves ``H``:
:func:`sequence_parallel_backward` is an option for when those bits matter
(docs/distributed.md has the measured cost).

These calls go through the C API directly (ctypes): they are eager-only helpers, not ops
torch.compile traces.
"""

import contextlib
import ctypes
from typing import Optional, Tuple

import torch

from . import _checks as C
from ._cabi import DTYPE_CODES as _DTYPE
from ._cabi import MAX_GIVEN_CHUNKS as _MAX_CHUNKS
from ._cabi import BwdArgs as _BwdArgs
from ._lib import _c

__all__ = ["chunks_per_rank", "backward_partials", "dw_from_partials", "sequence_parallel_backward"]


def _raise(status: int, what: str) -> None:
    if status != 0:
        raise RuntimeError(f"{what}: {_c.cake_rmsnorm_status_string(status).decode()}")


def _dense(t: torch.Tensor) -> torch.Tensor:
    """Contiguous and, on CUDA, 16-byte aligned (a view at an odd offset is copied)."""
    t = t.contiguous()
    return t.clone() if t.is_cuda and t.data_ptr() % 16 else t


def _stream(t: torch.Tensor):
    return ctypes.c_void_p(torch.cuda.current_stream(t.device).cuda_stream) if t.is_cuda else None


def chunks_per_rank(tokens: int, hidden: int, world_size: int) -> int:
    """The chunks of each rank's partials: ``backward_chunks(tokens, hidden) / world_size``,
    where ``tokens`` (the whole sequence's rows) splits evenly into ``world_size`` slices and
    the count divides; else ValueError (take the all-reduce of each rank's dw instead)."""
    for name, v in (("tokens", tokens), ("hidden", hidden), ("world_size", world_size)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    C.check_width(hidden)
    chunks = int(_c.cake_rmsnorm_backward_chunks(tokens, hidden))
    if tokens % world_size or chunks % world_size:
        raise ValueError(f"a bitwise sequence-parallel dw needs tokens ({tokens}) and their dw chunk count "
                         f"({chunks} at hidden {hidden}) divisible by world_size ({world_size})")
    return chunks // world_size


def backward_partials(g: torch.Tensor, x: torch.Tensor, w: torch.Tensor, rstd: torch.Tensor, chunks: int, *,
                      g_residual: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """dx (as :func:`cake_rmsnorm_train_backward`) and, in place of dw, the FP32 partials of
    ``chunks`` row chunks, ``[chunks, H]``: chunk c sums rows ``floor(c*T/chunks)`` up to the
    next chunk's first, in row order with compensation. Inputs are read as contiguous
    ``[T, H]`` (copied if they are not)."""
    C.check_activation(x)
    C.check_grad_like(g, x, "g")
    C.check_weight(w, x)
    C.check_rstd(rstd, x)
    if g_residual is not None:
        C.check_like(g_residual, x, "g_residual")
    hidden = x.shape[-1]
    rows = x.numel() // hidden
    if isinstance(chunks, bool) or not isinstance(chunks, int) or not 1 <= chunks <= min(rows, _MAX_CHUNKS):
        raise ValueError(f"chunks must be an int in [1, min(rows, {_MAX_CHUNKS})] = [1, {min(rows, _MAX_CHUNKS)}], "
                         f"got {chunks!r}")
    x2, g2, w1, r1 = (_dense(t) for t in (x.reshape(rows, hidden), g.reshape(rows, hidden), w, rstd.reshape(rows)))
    gr2 = _dense(g_residual.reshape(rows, hidden)) if g_residual is not None else None
    dx = torch.empty_like(x2)
    partials = torch.empty(chunks, hidden, dtype=torch.float32, device=x.device)
    a = _BwdArgs(device=1 if x.is_cuda else 0, x_dtype=_DTYPE[x.dtype], w_dtype=_DTYPE[w.dtype], rows=rows,
                 hidden=hidden, g=g2.data_ptr(), g_row_stride=hidden, x=x2.data_ptr(), x_row_stride=hidden,
                 w=w1.data_ptr(), rstd=r1.data_ptr(), g_residual=gr2.data_ptr() if gr2 is not None else None,
                 g_residual_row_stride=hidden, dx=dx.data_ptr(), dx_row_stride=hidden, dw=None,
                 workspace=partials.data_ptr(), workspace_bytes=partials.numel() * 4, max_ctas=0, accumulate_dw=0,
                 dw_in_w_dtype=0, g_dtype_set=1, g_dtype=_DTYPE[g.dtype])
    with torch.cuda.device(x.device) if x.is_cuda else contextlib.nullcontext():
        _raise(_c.cake_rmsnorm_backward_partials(ctypes.byref(a), chunks, _stream(x)), "backward_partials")
    return dx.view(x.shape), partials


def dw_from_partials(partials: torch.Tensor, *, dtype: torch.dtype = torch.float32, out: Optional[torch.Tensor] = None,
                     accumulate: bool = False) -> torch.Tensor:
    """dw from ``[chunks, H]`` FP32 partials summed in chunk order (the backward's finalize):
    FP32, or ``dtype`` BF16/FP16 rounded once from the FP32 sum; ``accumulate`` adds into
    ``out`` (FP32 only)."""
    C.require_tensor(partials, "partials")
    C.check_built_for(partials)
    if partials.dtype != torch.float32 or partials.dim() != 2:
        raise TypeError(f"partials must be a 2-D FP32 tensor [chunks, H], got {partials.dtype} {tuple(partials.shape)}")
    chunks, hidden = partials.shape
    C.check_width(hidden, "partials.shape[1]")
    if not 1 <= chunks <= _MAX_CHUNKS:
        raise ValueError(f"partials must hold 1..{_MAX_CHUNKS} chunks, got {chunks}")
    if dtype not in _DTYPE:
        raise TypeError(f"dtype must be torch.bfloat16, torch.float16 or torch.float32, got {dtype}")
    C.check_bool(accumulate, "accumulate")
    if accumulate and (out is None or dtype != torch.float32):
        raise ValueError("accumulate needs out, an FP32 dw to add into")
    if out is not None:
        C.require_tensor(out, "out")
        if out.shape != (hidden,) or out.dtype != dtype or out.device != partials.device or not out.is_contiguous():
            raise ValueError(f"out must be a contiguous [{hidden}] {dtype} tensor on {partials.device}")
    p = _dense(partials)
    dw = out if out is not None else torch.empty(hidden, dtype=dtype, device=partials.device)
    with torch.cuda.device(p.device) if p.is_cuda else contextlib.nullcontext():
        _raise(_c.cake_rmsnorm_dw_finalize(1 if p.is_cuda else 0, p.data_ptr(), chunks, hidden, dw.data_ptr(),
                                           _DTYPE[dtype], int(accumulate), _stream(p)), "dw_from_partials")
    return dw


def sequence_parallel_backward(g: torch.Tensor, x: torch.Tensor, w: torch.Tensor, rstd: torch.Tensor, group=None, *,
                               g_residual: Optional[torch.Tensor] = None,
                               dw_dtype: torch.dtype = torch.float32) -> Tuple[torch.Tensor, torch.Tensor]:
    """The backward of this rank's slice of the sequence with the dw of the whole sequence,
    bitwise the single-process one: each rank's chunk partials, an all-gather over ``group``
    in rank order, and the finalize over all of them. ``x`` (and g, rstd, g_residual) are this
    rank's rows as ``[T / R, H]``: rank r holds rows ``r*T/R`` up to the next rank's of the
    sequence's ``[T, H]`` (shard the flattened rows, not a middle dimension). Returns (this
    rank's dx, the whole dw in ``dw_dtype``), the same dw on every rank; every rank raises the
    same ValueError where the ranks' row counts differ or do not divide the chunk count."""
    import torch.distributed as dist
    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        raise ValueError("x must be this rank's rows as a 2-D [T / world_size, H] tensor, ranks holding "
                         f"consecutive slices of the sequence's rows; got {getattr(x, 'shape', type(x))}")
    world = dist.get_world_size(group)
    rows, hidden = x.shape
    # Every rank learns the smallest and largest row count, so all raise or none does.
    counts = torch.tensor([rows, -rows], dtype=torch.int64, device=x.device)
    dist.all_reduce(counts, op=dist.ReduceOp.MAX, group=group)
    if int(counts[0]) != -int(counts[1]):
        raise ValueError(f"every rank must hold the same number of rows; they hold {-int(counts[1])} to "
                         f"{int(counts[0])}")
    chunks = chunks_per_rank(rows * world, hidden, world)
    dx, part = backward_partials(g, x, w, rstd, chunks, g_residual=g_residual)
    gathered = torch.empty(world * chunks, hidden, dtype=torch.float32, device=part.device)
    # all_gather_single where torch has it (all_gather_into_tensor warns of its deprecation there).
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    gather(gathered, part, group=group)
    return dx, dw_from_partials(gathered, dtype=dw_dtype)
