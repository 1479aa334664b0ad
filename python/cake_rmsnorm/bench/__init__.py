"""`python -m cake_rmsnorm bench`: the benchmark protocol of docs/perf (BENCH protocol)."""

from .run import main

__all__ = ["main"]
