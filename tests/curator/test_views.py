"""Operators' and requesters' views: request listing with filters and pagination, version history, public model."""

from __future__ import annotations

import pytest

from lethe.curator import Curator
from lethe.curator.errors import InvalidInputError, NotFoundError
from lethe.curator.service import Principal

ALICE, BOB = Principal("alice", "requester"), Principal("bob", "requester")


def test_list_requests_filters_and_pages(curator: Curator) -> None:
    ids = {"alice": [], "bob": []}
    for i in range(7):
        who = ALICE if i % 3 else BOB
        view, _ = curator.submit_deletion("people", f"user-{i:04d}", principal=who, client_request_id=f"r{i}")
        ids[who.name].append(view["id"])
    curator.process_pending(force=True, max_batches=1)  # the first 4 are done, 3 pending
    seen, cursor = [], None
    while True:
        page = curator.list_requests(ALICE, limit=2, cursor=cursor)
        seen += [r["id"] for r in page["items"]]
        assert all(r["requester"] == "alice" for r in page["items"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted(ids["alice"]) and len(set(seen)) == len(seen)
    # a requester cannot widen its view with the requester filter
    assert {r["requester"] for r in curator.list_requests(ALICE, requester="bob")["items"]} == {"alice"}
    everything = curator.list_requests(limit=500)["items"]
    assert len(everything) == 7
    submitted = [r["submitted_at"] for r in everything]
    assert submitted == sorted(submitted, reverse=True)
    done = curator.list_requests(status="done")["items"]
    pending = curator.list_requests(status="pending")["items"]
    assert len(done) == 4 and len(pending) == 3
    assert [r["request_id"] for r in curator.list_requests(request_id="r1")["items"]] == ["r1"]
    assert curator.list_requests(BOB, request_id="r1")["items"] == []  # r1 is alice's
    assert len(curator.list_requests(requester="bob")["items"]) == len(ids["bob"])
    with pytest.raises(InvalidInputError, match="status must be one of"):
        curator.list_requests(status="gone")
    with pytest.raises(InvalidInputError, match="limit"):
        curator.list_requests(limit=0)
    with pytest.raises(InvalidInputError, match="cursor"):
        curator.list_requests(cursor="not-a-cursor")
    with pytest.raises(NotFoundError, match="Unknown dataset"):
        curator.list_requests(dataset="nope")


def test_version_history_and_public_model(curator: Curator) -> None:
    for i in range(3):
        curator.submit_deletion("people", f"user-{i:04d}")
    curator.process_pending(force=True)
    hist = curator.model_versions("clf")
    assert [v["version"] for v in hist] == [1, 2]
    assert [v["status"] for v in hist] == ["destroyed", "published"]
    assert hist[0]["kind"] == "train" and hist[1]["kind"] == "removal" and hist[1]["n_requests"] == 3
    assert hist[1]["certificate"]["n_removed"] == 3 and "removed_indices" not in hist[1]["certificate"]
    assert hist[1]["budget"]["residual_bound"] == curator.budget("clf")["residual_bound"]
    pub = curator.public_model("clf")
    assert pub["version"] == 2 and set(pub["arrays"]) == {"w"} and len(pub["arrays"]["w"]) == 10
    with pytest.raises(NotFoundError):
        curator.model_versions("other")


def test_metrics_in_prometheus_format(curator: Curator) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from lethe.curator.api import render_metrics

    for i in range(5):
        curator.submit_deletion("people", f"user-{i:04d}")
    curator.process_pending(force=True)  # batch size 4: batches of 4 and 1
    curator.submit_deletion("people", "user-0100")
    families = {f.name: f for f in text_string_to_metric_families(render_metrics(curator.metrics()))}
    req = {s.labels["status"]: s.value for s in families["lethe_requests"].samples}
    assert req == {"pending": 1.0, "done": 5.0, "failed": 0.0}
    batch = {s.name: s.value for s in families["lethe_batch_size"].samples if not s.labels.get("le")}
    assert batch["lethe_batch_size_count"] == 2 and batch["lethe_batch_size_sum"] == 5
    pub = [s for s in families["lethe_request_publication_seconds"].samples if s.name.endswith("_count")]
    assert pub[0].value == 5
    ratio = [s.value for s in families["lethe_model_budget_used_ratio"].samples]
    budget = curator.budget("clf")
    assert ratio == [pytest.approx(budget["residual_bound"] / budget["budget"])]
    assert [s.value for s in families["lethe_model_version"].samples] == [3.0]
    assert [s.value for s in families["lethe_artifact_faults"].samples] == [0.0]


def test_drop_model_destroys_its_artifacts(curator: Curator) -> None:
    view, _ = curator.submit_deletion("people", "user-0001")
    curator.process_pending(force=True)
    files = curator.artifacts.all_files()
    assert len(files) == 1
    out = curator.drop_model("clf")
    assert out["dropped"] and curator.artifacts.all_files() == []
    assert not (curator.data_dir / files[0]).exists()
    with pytest.raises(NotFoundError):
        curator.budget("clf")
    # issued certificates stay readable; later deletions get a raw-deletion receipt
    assert curator.request_certificates(view["id"])[0]["model"] is None
    later, _ = curator.submit_deletion("people", "user-0002")
    curator.process_pending(force=True)
    assert curator.request_certificates(later["id"])[0]["kind"] == "deletion"
    assert curator.status()["healthy"]


def test_drop_dataset(curator: Curator, data: object) -> None:
    from lethe.curator.errors import ConflictError

    pending, _ = curator.submit_deletion("people", "user-0001", principal=ALICE)
    with pytest.raises(ConflictError, match="lethe model drop"):
        curator.drop_dataset("people")
    curator.drop_model("clf")
    out = curator.drop_dataset("people")
    assert out == {"dataset": "people", "dropped": True, "records_deleted": 200, "requests_done": 1,
                   "erasures_kept": 1}
    view = curator.request_status(pending["id"], principal=ALICE)
    assert view["status"] == "done" and view["dataset"] is None
    assert curator.request_certificates(pending["id"], principal=ALICE)[0]["kind"] == "deletion"
    assert curator.status()["datasets"] == [] and not curator.status()["purge_pending"]
    with pytest.raises(NotFoundError):
        curator.dataset_info("people")
    with pytest.raises(InvalidInputError, match="must not start"):
        curator.register_dataset("~dropped~1", data.csv, key="user_id", label="label")  # type: ignore[attr-defined]
    curator.register_dataset("people", data.csv, key="user_id", label="label")  # type: ignore[attr-defined]
    assert curator.dataset_info("people")["n_records"] == 199  # user-0001, erased on request, not re-ingested
