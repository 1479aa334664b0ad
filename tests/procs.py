"""Helpers of the multi-process CPU tests (gloo ranks through torch.multiprocessing.spawn)."""

import os
import socket
import sys
import traceback


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_rank(rank, body, *args):
    """spawn's target: body(rank, *args), then os._exit (1 if it raised, the traceback printed).
    Interpreter teardown after gloo (its background threads) has been seen to abort or hang a
    finished rank now and then, which says nothing about the kernels."""
    code = 1
    try:
        body(rank, *args)
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
