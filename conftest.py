"""Test-run settings that must apply before numpy, scikit-learn or torch are imported (the doctests under ``src``
are collected first, so ``tests/conftest.py`` would be too late).

One OpenMP/BLAS thread per process: the suite runs on 2-core CI machines, where scikit-learn's OpenMP pool (LLVM
libomp) and torch's (GNU libgomp) spin-wait against each other and against the servers the tests start; measured
here, ``tests/test_advisor.py`` with its doctest took 199 s with the default pools under load and 19 s with one
thread. Tests of the thread settings themselves set their own limits (``tests/certified/test_threads.py``). An
explicit setting in the environment wins.
"""

from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")
