"""BLAS threads for lethe's kernels, chosen deliberately instead of inherited.

NumPy and SciPy each load their own OpenBLAS, and each starts one thread per core. lethe's kernels are either
memory-bound passes over the data (X v, Xᵀ g) or small d × d products (a removal), which gain nothing from a second
thread and lose to the two pools' contention: on the 2-core development machine a ``pcg`` removal on MNIST 3 vs 8
took 23–25 ms with the inherited pools and 8.7–9.1 ms with one thread (issue 15), and one ``Xᵀg`` pass 8.9 ms with
two threads against 4.3 ms with one. So :meth:`~lethe.certified.mechanism.CertifiedRemoval.train`, ``remove`` and
``prime`` run with ``LETHE_BLAS_THREADS`` BLAS threads (default 1) in both pools, and restore the caller's setting
afterwards; ``LETHE_BLAS_THREADS=inherit`` leaves the threads alone (e.g. under an outer
``threadpoolctl.threadpool_limits``). Switching costs ~10 µs (one controller, created once); when the pools already
have that many threads nothing is called.
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from threadpoolctl import ThreadpoolController

_ENV = "LETHE_BLAS_THREADS"
_controller: ThreadpoolController | None = None


def blas_thread_count() -> int | None:
    """The configured BLAS thread count (``None``: inherit). Raises ``ValueError`` for a malformed setting."""
    raw = os.environ.get(_ENV, "1").strip()
    if raw == "inherit":
        return None
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"{_ENV} must be a positive integer or 'inherit'. Found {raw!r}.")
    return n


def blas_threads() -> AbstractContextManager[Any]:
    """A context in which the BLAS libraries loaded by NumPy and SciPy use the configured number of threads."""
    global _controller
    n = blas_thread_count()
    if n is None:
        return nullcontext()
    if _controller is None:
        _controller = ThreadpoolController().select(user_api="blas")
    if all(lib.num_threads == n for lib in _controller.lib_controllers):
        return nullcontext()  # already so: no call into the BLAS libraries at all
    return _controller.limit(limits=n)
