"""Issue 27: a schema dataset kept in Zarr trains with the service's defaults (no intercept: the estimator cannot
rewrite a read-only store's rows), and an explicit ``fit_intercept=true`` is refused with the fix, changing nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("distributed")
pytest.importorskip("zarr")

from lethe.curator import Curator, dask_plane  # noqa: E402
from lethe.curator.errors import InvalidInputError  # noqa: E402

from .test_dask_plane import cluster  # noqa: E402,F401  (the module's LocalCluster fixture)
from .test_schema_service import SCHEMA, write_table  # noqa: E402


def _register(tmp_path: Path, store: str) -> Curator:
    (tmp_path / "schema.json").write_text(json.dumps(SCHEMA))
    write_table(tmp_path / "train.csv", 200, seed=0)
    write_table(tmp_path / "test.csv", 100, seed=1, prefix="test", rare=False)
    c = Curator(tmp_path / f"d-{store}")
    c.register_dataset("shop", tmp_path / "train.csv", schema=tmp_path / "schema.json", store=store)
    c.register_dataset("shop-test", tmp_path / "test.csv", schema=tmp_path / "schema.json", store=store)
    return c


def test_explicit_intercept_on_zarr_is_refused_with_the_fix_and_changes_nothing(tmp_path: Path) -> None:
    c = _register(tmp_path, "zarr")
    for params in ({"fit_intercept": True}, {"normalize_rows": True, "fit_intercept": False}):
        with pytest.raises(InvalidInputError, match=r"must be false for a dataset kept in Zarr .* Found \w+=true\. "
                                                    r"Train with --param \w+=false"):
            c.train("shop", "m", params={"lam": 1e-3, **params}, random_state=0)
    assert c.status()["models"] == []
    c.close()


def test_row_options_drop_the_tabular_default_only() -> None:
    assert dask_plane.row_options({"fit_intercept": True}, {"lam": 1e-3}) == {"lam": 1e-3}
    assert dask_plane.row_options({"fit_intercept": True}, {"fit_intercept": False}) == {"fit_intercept": False}
    with pytest.raises(ValueError, match="add a column holding 1 to the table"):
        dask_plane.row_options({}, {"fit_intercept": True})


def test_schema_dataset_in_zarr_trains_with_the_defaults(tmp_path: Path, cluster: str) -> None:  # noqa: F811
    c = _register(tmp_path, "zarr")
    out = c.train("shop", "m", params={"lam": 1e-3, "sigma": 1.0}, random_state=0, heldout="shop-test")
    assert out["heldout"]["n"] == 100 and out["heldout"]["accuracy"] > 0.6
    versions = c.model_versions("m")
    assert len(versions) == 1
    assert c.budget("m")["params"].get("fit_intercept", False) is False  # no tabular intercept on Zarr
    # the same table in files gets the intercept (the default is chosen by backend, not dropped everywhere)
    f = _register(tmp_path, "files")
    f.train("shop", "m", params={"lam": 1e-3, "sigma": 1.0}, random_state=0)
    assert f.budget("m")["params"]["fit_intercept"] is True
    c.close()
    f.close()
