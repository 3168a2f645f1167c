"""The conformance suite: the whole promise, checked for every registered family (issue 34, item 3).

Every estimator of every family in :func:`lethe.families.families` — built-ins and entry-point families alike — is
fitted small and must keep the protocols of :mod:`lethe.protocols`:

* ``remove`` returns a :class:`~lethe.protocols.Certificate` (by original position and by key), and
  ``certificate_`` is that certificate;
* an unknown key and an already removed key are answered alike (same exception, same words): the answer does not
  tell that a removed key was once held;
* a failed call changes nothing;
* ``save``/``load`` keeps the model and its ``certificate_``;
* nothing of a removed record stays in the model's memory or in its saved file (its features, its key);
* the words the console uses for a family are true of it: no "Newton step" unless the family declares one;
* every service adapter belongs to exactly one family, and every family's adapter answers to its mechanism names.

Exceptions injected at every line of ``remove``/``add`` are checked in ``test_exceptions.py`` beside this file.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from lethe.families import BUILTIN_FAMILIES, Capability, Family, FamilyWords, families, family_of_mechanism
from lethe.protocols import Certificate, Unlearner

from ._factories import ADAPTERS, FACTORIES

ESTIMATORS = [(fam.name, path) for fam in families() for path in fam.estimators]
IDS = [path.rpartition(":")[2] for _, path in ESTIMATORS]


def _fit(path: str, keys: bool = True) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray | None]:
    make, data = FACTORIES[path]
    X, y = data()
    ids = np.array([f"r{i}" for i in range(X.shape[0])]) if keys else None
    return make().fit(X, y, sample_ids=ids), X, y, ids


def test_every_registered_estimator_has_a_factory():
    missing = [path for _, path in ESTIMATORS if path not in FACTORIES]
    assert not missing, f"families' estimators without a conformance factory: {missing}"


def test_the_registry_lists_each_family_once_and_builtins_first():
    fams = families()
    assert [f.name for f in fams[:len(BUILTIN_FAMILIES)]] == [f.name for f in BUILTIN_FAMILIES]
    names = [m for f in fams for m in (f.name, *f.mechanisms) if m != f.name or f.name not in f.mechanisms]
    assert len(names) == len(set(names))
    with pytest.raises(ValueError, match="mechanism must be one of"):
        family_of_mechanism("no-such-mechanism")


def test_every_service_adapter_belongs_to_one_family():
    pytest.importorskip("sqlalchemy")
    from lethe.curator import available_mechanisms

    for mech in available_mechanisms():
        fam = family_of_mechanism(mech)
        assert fam.adapter is not None
        assert fam.adapter_class().name in fam.mechanisms  # type: ignore[union-attr]
    for fam in families():
        if fam.adapter is not None:
            cls = fam.adapter_class()
            assert cls.name in available_mechanisms()  # type: ignore[union-attr]
            # the adapter's declared capabilities are the family's (the curator reads the adapter's, never sniffs)
            assert cls.supports_warm == fam.has(Capability.WARM), fam.name  # type: ignore[union-attr]
            assert cls.uses_record_keys == fam.has(Capability.RECORD_KEYS), fam.name  # type: ignore[union-attr]
            assert cls.keeps_schedule == fam.has(Capability.RELEASE_SCHEDULE), fam.name  # type: ignore[union-attr]
            # its own artifact check (issue 34: a family without one had its states loaded unchecked)
            assert "check_artifact" in vars(cls), f"{fam.name}: the adapter has no check_artifact of its own"


def test_a_family_whose_words_claim_a_newton_step_it_does_not_declare_is_refused():
    words = FamilyWords(title="t", updated_in_place="A certified Newton step.", retrained="r", observer="o",
                        not_covered="n")
    with pytest.raises(ValueError, match="declares no Newton step"):
        Family(name="toy", mechanisms=("toy",), estimators=(), adapter=None, capabilities=frozenset(), words=words,
               paper="p")


@pytest.mark.parametrize("family", families(), ids=lambda f: f.name)
def test_the_console_words_are_true_of_the_family(family):
    """The data subject's page never says "a certified Newton step" for a family that takes none (issue 34: the
    console said it of sharded removals and unpublished releases)."""
    pytest.importorskip("jinja2")
    from lethe.curator.console.certificate import explain

    for retrained in (False, None, True):
        view = {"id": "c1", "kind": "removal", "model": "m", "mechanism": family.mechanisms[0], "old_version": 1,
                "new_version": 2, "certificate": {"retrained": retrained, "epsilon": 0.0, "delta": 0.0}}
        text = " ".join(f"{t} {s}" for t, s in explain(view).sentences)
        says_newton = "newton" in text.lower()
        assert says_newton == (family.has(Capability.NEWTON_STEP) and retrained is not True), (family.name, text)
        # a removal budget is spoken of only to families that spend one (the page told sharded data subjects so)
        assert ("removal budget" in text) == family.has(Capability.NEWTON_STEP), (family.name, text)
        assert family.words.observer in text


def test_the_generic_curator_and_console_name_no_family():
    """The curator, its API and the console (migrations and the deprecated adapter-path shims aside) never name a
    built-in family or mechanism, not even in a docstring: they ask the registry (issue 34: 0 names)."""
    import re
    from pathlib import Path

    import lethe.curator

    root = Path(lethe.curator.__file__).parent
    names = {n for f in BUILTIN_FAMILIES for n in (f.name, *f.mechanisms)}
    pattern = re.compile(r"(?<![\w-])(" + "|".join(re.escape(n) for n in sorted(names)) + r")(?![\w-])", re.I)
    found = []
    for path in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".html", ".js", ".css")):
        rel = path.relative_to(root)
        if rel.parts[0] == "migrations" or rel.parts[0].startswith("adapters_"):
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if m := pattern.search(line):
                found.append(f"{rel}:{i}: {m.group(0)}")
    assert not found, found


@pytest.mark.parametrize("family", families(), ids=lambda f: f.name)
def test_the_guarantee_sentence_comes_from_the_family(family):
    """A family whose guarantee is not an (ε, δ) pair states it in its own words (``FamilyWords.guarantee``, filled
    with the certificate's fields); the console never picks a family's sentence by sniffing a field's name."""
    pytest.importorskip("jinja2")
    import string

    from lethe.curator.console.certificate import explain

    template = family.words.guarantee
    fields = [f for _, f, _, _ in string.Formatter().parse(template or "") if f]
    cert = {f: 0.25 for f in fields} | {"retrained": False}
    view = {"id": "c1", "kind": "removal", "model": "m", "mechanism": family.mechanisms[0], "old_version": 1,
            "new_version": 2, "certificate": cert}
    guarantee = [s for t, s in explain(view, operator=True).sentences if t == "Guarantee"]
    if template is None:
        assert not any("Rényi" in s for s in guarantee), (family.name, guarantee)
    else:
        assert guarantee == [template.format_map({f: "0.25" for f in fields})], (family.name, guarantee)
    # another family's field in the certificate does not borrow that family's words
    view["certificate"] = {"epsilon_dd": 0.5, "q": 2.0, "retrained": False}
    text = " ".join(s for t, s in explain(view, operator=True).sentences if t == "Guarantee")
    assert ("Rényi" in text) == ("Rényi" in (template or "")), (family.name, text)


@pytest.mark.parametrize(("family", "path"), ESTIMATORS, ids=IDS)
def test_remove_returns_a_certificate_by_position_and_by_key(family, path):
    est, X, y, ids = _fit(path)
    assert isinstance(est, Unlearner)
    c1 = est.remove([0])
    assert isinstance(c1, Certificate), f"{path}.remove returned {type(c1).__name__}, not a Certificate"
    assert est.certificate_ is c1
    c2 = est.remove(keys=["r7"])
    assert isinstance(c2, Certificate) and est.certificate_ is c2
    d = c2.to_dict()
    assert {"guarantee", "observer", "epsilon", "delta"} <= set(d)


@pytest.mark.parametrize(("family", "path"), ESTIMATORS, ids=IDS)
def test_unknown_and_removed_keys_are_answered_alike(family, path):
    est, X, y, ids = _fit(path)
    est.remove(keys=["r5"])
    before = est.certificate_
    answers = []
    for key in ("r5", "zz-never-held"):
        with pytest.raises(Exception) as info:
            est.remove(keys=[key])
        answers.append((type(info.value), re.sub(re.escape(key), "KEY", str(info.value))))
    assert answers[0] == answers[1], answers
    assert est.certificate_ is before  # the failed calls changed nothing


def _byte_patterns(values: np.ndarray, key: str) -> list[bytes]:
    pats = [key.encode("utf-8"), key.encode("utf-32-le")]
    for dt in (np.float64, np.float32):
        v = np.asarray(values, dtype=dt)
        if np.count_nonzero(v) >= 2:
            pats.append(v.tobytes())
    return pats


def _arrays_in(obj: Any, seen: set[int], depth: int = 0) -> list[np.ndarray]:
    """Every numpy array and string reachable from ``obj``'s attributes (bounded depth; torch tensors as numpy)."""
    if id(obj) in seen or depth > 6:
        return []
    seen.add(id(obj))
    out: list[Any] = []
    if isinstance(obj, np.ndarray):
        return [obj]
    if isinstance(obj, str | bytes):
        return [np.frombuffer(obj.encode("utf-32-le") if isinstance(obj, str) else obj, dtype=np.uint8)]
    if type(obj).__module__.startswith("torch") and hasattr(obj, "detach"):
        return [obj.detach().cpu().numpy()]
    if isinstance(obj, dict):
        items: Any = list(obj.values())
    elif isinstance(obj, list | tuple | set | frozenset):
        items = list(obj)
    elif hasattr(obj, "__dict__") and type(obj).__module__.split(".")[0] in ("lethe", "sklearn", "numpy"):
        items = list(vars(obj).values())
    else:
        return []
    for it in items:
        out.extend(_arrays_in(it, seen, depth + 1))
    return out


@pytest.mark.parametrize(("family", "path"), ESTIMATORS, ids=IDS)
def test_nothing_of_a_removed_record_stays_in_memory_or_in_the_saved_file(family, path, tmp_path):
    """After ``remove(keys=[k])`` neither the model's attributes nor its saved file hold the record's feature
    vector (float64 or float32 bytes) or its key (issue 35: a sharded removal kept X_, y_ and keys_)."""
    est, X, y, ids = _fit(path)
    target = 11
    key = f"r{target}-secret"
    ids = ids.copy() if ids is not None else None
    # refit with a distinctive key for the target so that its bytes are findable
    make, data = FACTORIES[path]
    ids = np.array([f"r{i}" if i != target else key for i in range(X.shape[0])])
    est = make().fit(X, y, sample_ids=ids)
    est.remove(keys=[key])
    pats = _byte_patterns(X[target], key)
    blob = b"".join(np.ascontiguousarray(a).tobytes() for a in _arrays_in(est, set()))
    kept = [p for p in pats if p in blob]
    assert not kept, f"{path}: the removed record is still in memory ({len(kept)} of {len(pats)} patterns)"
    saved = est.save(tmp_path / "m.npz", key=b"s" * 32)
    import zipfile
    with zipfile.ZipFile(saved) as z:
        raw = b"".join(z.read(n) for n in z.namelist())
    kept = [p for p in pats if p in raw]
    assert not kept, f"{path}: the removed record is in the saved file ({len(kept)} of {len(pats)} patterns)"


@pytest.mark.parametrize(("family", "path"), ESTIMATORS, ids=IDS)
def test_save_and_load_keep_the_model_and_its_certificate(family, path, tmp_path):
    est, X, y, ids = _fit(path)
    cert = est.remove([3])
    saved = est.save(tmp_path / "m.npz", key=b"s" * 32)
    again = type(est).load(saved, key=b"s" * 32)
    assert isinstance(again, Unlearner)
    np.testing.assert_array_equal(again.predict(X), est.predict(X))
    assert again.certificate_ is not None, f"{path}: load dropped certificate_"
    assert again.certificate_.to_dict() == cert.to_dict()


@pytest.mark.parametrize("family", [f for f in families() if f.adapter is not None], ids=lambda f: f.name)
def test_every_certificate_field_an_adapter_writes_is_published_or_declared_withheld(family):
    """A field the curator's allow-list does not name is dropped when the certificate is stored (issue 34: silently);
    every field a family's adapter writes is either allow-listed — and then has a label in the console — or listed
    in the family's ``withheld`` set, on purpose."""
    pytest.importorskip("sqlalchemy")
    from lethe.curator.adapters import get_adapter
    from lethe.curator.console.certificate import PUBLIC_FIELDS
    from lethe.curator.public import CERTIFICATE_FIELDS

    assert CERTIFICATE_FIELDS <= {k for k, _ in PUBLIC_FIELDS}  # every stored field has the console's words
    (mech,) = family.mechanisms[:1]
    params, needs_keys = ADAPTERS[mech]
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 4))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    y = (X[:, 0] > 0).astype(float)
    adapter = get_adapter(mech, params)
    kw = {"keys": [f"k{i}" for i in range(400)]} if needs_keys else {}
    art, c_train = adapter.train(X, y, rng, **kw)
    _, c_remove = adapter.remove(art, X, y, np.array([3]), rng)
    written = set(c_train) | set(c_remove)
    undeclared = sorted(written - CERTIFICATE_FIELDS - family.withheld)
    assert not undeclared, f"{family.name}: fields neither published nor declared withheld: {undeclared}"
