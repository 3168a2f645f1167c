"""Issue 14: a dataset kept in a Zarr store, computed on a Dask cluster given by its address (a LocalCluster with
2 worker processes here); removed rows are erased byte for byte in their Zarr chunks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")
pytest.importorskip("zarr")

from lethe.certified.data import backend_of  # noqa: E402
from lethe.curator import Curator, Settings, dask_plane  # noqa: E402
from lethe.curator.dataplane import DataPlane  # noqa: E402

from .conftest import PARAMS, Data  # noqa: E402
from .test_purge import patterns, scan  # noqa: E402
from .test_warm import _published_state  # noqa: E402


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    cl = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None, memory_limit="1GB")
    dask_plane.configure(cl.scheduler_address)
    try:
        yield cl.scheduler_address
    finally:
        dask_plane.configure(None)
        cl.close()


def test_zarr_dataset_trains_and_removes_on_the_cluster_and_erases_the_bytes(tmp_path: Path, data: Data,
                                                                              cluster: str) -> None:
    c = Curator(tmp_path / "d", settings=Settings(batch_size=4))
    c.register_dataset("people", data.csv, key="user_id", label="label", store="zarr")
    with c.store.read() as s:
        plane = s.get(DataPlane, 1)
    assert plane.features_path.endswith(".zarr")
    X, _y = c.matrices.open(plane)
    assert backend_of(X).name == "dask"  # computed on the cluster, not read into memory
    assert dask_plane.client().scheduler.address == cluster
    np.testing.assert_array_equal(X.compute(), data.X)
    c.train("people", "clf", params={**PARAMS, "solver": "anchor"}, random_state=0)
    gone = [5, 6, 150]
    pats = {f"{i}:{k}": v for i in gone for k, v in patterns(data.keys[i], list(data.X[i])).items()
            if not k.endswith("text") and k != "key"}
    store = c.matrices.resolve(plane.features_path)
    assert scan(store, pats)  # the values are in the chunks before
    views = [c.submit_deletion("people", data.keys[i])[0] for i in gone]
    c.process_pending(force=True)
    assert all(c.request_status(v["id"])["status"] == "done" for v in views)
    # no byte of a removed row's values remains in the Zarr store (nor anywhere in the data directory)
    assert scan(store, pats) == {}
    assert scan(tmp_path / "d", pats) == {}
    keep = np.setdiff1d(np.arange(len(data.keys)), gone)
    M = c.matrices.open(plane)[0].compute()
    assert np.all(M[gone] == 0.0)
    np.testing.assert_array_equal(M[keep], data.X[keep])
    # the published certificate holds for the records that remain
    _adapter, states, _v = _published_state(c)
    st = states[0]
    from lethe.losses import get_loss

    z = data.X[keep] @ st.w
    t = np.where(data.y[keep] > 0.5, 1.0, -1.0)
    g = data.X[keep].T @ get_loss("logistic").d1(z, t) + PARAMS["lam"] * keep.size * st.w + st.b
    assert float(np.linalg.norm(g)) <= st.residual_bound
    c.close()


def test_erase_rows_refuses_a_store_it_cannot_locate_bytes_in(tmp_path: Path) -> None:
    import zarr

    z = zarr.create_array(str(tmp_path / "x.zarr"), shape=(10, 3), chunks=(4, 3), dtype="f8")  # compressed
    z[:] = 1.0
    with pytest.raises(ValueError, match="plain layout"):
        dask_plane.erase_rows(tmp_path / "x.zarr", np.array([2]))
    assert np.all(z[:] == 1.0)  # nothing changed
    with pytest.raises(ValueError, match="scheduler URL"):
        dask_plane.configure("localhost")
