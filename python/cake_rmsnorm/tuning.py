"""Program sweeps: run this thread's CUDA launches with a given program shape instead of the
window table's, to measure candidates for the tables (csrc/dispatch). Not for training code:
the tables hold the measured choices, and within a table window a row's outputs do not depend
on T, which an override can break."""

import contextlib

from ._lib import set_exact_groups, set_one_launch, set_program_override, set_warp_chunks

__all__ = ["program_override", "exact_groups", "one_launch", "warp_chunks", "FORWARD", "BACKWARD"]

FORWARD, BACKWARD = 0, 1


@contextlib.contextmanager
def program_override(direction: int, tpr: int, cta: int, vpt: int, ctas_per_sm: int = 0, stages: int = 2,
                     rows: int = 1):
    """``with program_override(FORWARD, tpr=64, cta=256, vpt=2, stages=3):`` launches in the
    block use that shape (threads a row, threads a CTA, ring vectors a thread, CTAs a SM, ring
    depth in rows; stages 0: the streaming forward, whose row groups take ``rows`` rows each,
    1 or 4, where an exact narrow group's instance is compiled). Raises ValueError for a shape
    the kernels can never run; a call the shape cannot serve (its ring over the shared-memory
    limit) fails with the C API's invalid-argument status."""
    if direction not in (FORWARD, BACKWARD):
        raise ValueError(f"direction must be FORWARD (0) or BACKWARD (1), got {direction!r}")
    if set_program_override(direction, tpr, cta, vpt, ctas_per_sm, stages, rows) != 0:
        raise ValueError(f"program (tpr={tpr}, cta={cta}, vpt={vpt}, ctas_per_sm={ctas_per_sm}, stages={stages}, "
                         f"rows={rows}) cannot run")
    try:
        yield
    finally:
        set_program_override(direction, 0, 0, 0, 0, 0)


@contextlib.contextmanager
def exact_groups(enabled: bool):
    """``with exact_groups(False):`` this thread's CUDA launches in the block run the
    runtime-width kernels where a program's row group also has an exact, compile-time-width
    kernel (groups of at most a warp whose vectors cover the row: the forward's streaming
    groups at H 256..1024, the backward's at H 256, 512 and 768). The same bits either way;
    for paired A/B measurements and the tests that hold the two to the same bits."""
    set_exact_groups(bool(enabled))
    try:
        yield
    finally:
        set_exact_groups(True)


@contextlib.contextmanager
def one_launch(max_chunks: int):
    """``with one_launch(0):`` the CUDA backward calls in the block (of every thread: autograd
    runs backward on its own threads) run the main
    kernel and its dw finalize at every T; ``one_launch(n)`` runs the one-launch kernel (dx by
    rows, dw by columns, one grid) wherever dw has at most n chunks (0..1023). The same bits
    either way; for paired A/B measurements and the tests that hold the two to the same bits."""
    if isinstance(max_chunks, bool) or not isinstance(max_chunks, int):
        raise TypeError(f"max_chunks must be an int, got {type(max_chunks).__name__}")
    if set_one_launch(max_chunks) != 0 or max_chunks < 0:
        set_one_launch(-1)
        raise ValueError(f"max_chunks must be in 0..1023, got {max_chunks}")
    try:
        yield
    finally:
        set_one_launch(-1)


@contextlib.contextmanager
def warp_chunks(min_chunk_rows: int):
    """``with warp_chunks(0):`` the CUDA backward calls in the block (every thread's) give each
    dw chunk to one row group at every T; ``warp_chunks(n)`` gives each chunk a warp (its groups
    a row each) for the narrow programs that have that kernel (H 64, 96, 128, 192) where a
    chunk holds at least n rows. The same bits either way; for A/B measurements and tests."""
    if isinstance(min_chunk_rows, bool) or not isinstance(min_chunk_rows, int):
        raise TypeError(f"min_chunk_rows must be an int, got {type(min_chunk_rows).__name__}")
    if min_chunk_rows < 0 or set_warp_chunks(min_chunk_rows) != 0:
        raise ValueError(f"min_chunk_rows must be >= 0, got {min_chunk_rows}")
    try:
        yield
    finally:
        set_warp_chunks(-1)
