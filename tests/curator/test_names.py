"""Issue 35: model names are validated as dataset names are (no path, quote or space), a download's
``Content-Disposition`` stays one well-formed header whatever an older store's name holds, and the API serves no
``/docs`` page from a CDN."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from lethe.curator import Curator
from lethe.curator.api import create_app
from lethe.curator.errors import InvalidInputError
from lethe.curator.store import Model

from .conftest import PARAMS, Data

BAD = ["../../x", "a/b", 'q"uote', "it's", "sp ace", ".hidden", "..", "semi;colon", "back\\slash"]


@pytest.mark.parametrize("name", BAD)
def test_bad_model_and_dataset_names_are_refused(curator: Curator, data: Data, name: str) -> None:
    with pytest.raises(InvalidInputError, match="letters, digits"):
        curator.train("people", name, params=PARAMS, random_state=0)
    with pytest.raises(InvalidInputError, match="letters, digits"):
        curator.register_dataset(name, data.csv, key="user_id", label="label")
    assert [m["name"] for m in curator.status()["models"]] == ["clf"]


def test_download_header_is_safe_for_an_older_stores_name(curator: Curator, tmp_path: Path) -> None:
    legacy = 'we"ird;\\name'
    with curator.store.write() as s, s.begin():  # a name accepted before names were validated
        s.execute(update(Model).where(Model.name == "clf").values(name=legacy))
    admin = curator.create_token("ops", "admin")
    with TestClient(create_app(curator, run_worker="none"), base_url="http://127.0.0.1") as cl:
        page = cl.get("/console/login")
        csrf = page.text.split('name="csrf" value="')[1].split('"')[0]
        cl.post("/console/login", data={"token": admin, "csrf": csrf}, follow_redirects=False)
        from urllib.parse import quote

        r = cl.get(f"/console/models/{quote(legacy, safe='')}/public.npz")
        assert r.status_code == 200
        cd = r.headers["content-disposition"]
        plain = cd.split('filename="')[1].split('"')[0]
        assert plain == "we_ird__name-v1-public.npz" and cd.count('"') == 2
        assert "filename*=UTF-8''we%22ird%3B%5Cname-v1-public.npz" in cd


def test_no_docs_page_from_a_cdn(curator: Curator) -> None:
    with TestClient(create_app(curator, run_worker="none"), base_url="http://127.0.0.1") as cl:
        assert cl.get("/docs").status_code == 404 and cl.get("/redoc").status_code == 404
        assert cl.get("/openapi.json").status_code == 200
