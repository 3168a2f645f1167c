"""Declared label classes: what a model served to model-readers publishes about its labels (issue 36).

A model's label classes learned from its rows (``np.unique(y)``) are a function of the records: a class held only
by a deleted record would name it to every model-reader, whatever the release mechanism covers. So a model served
to model-readers (a released mechanism, or an operator's ``--serve-unreleased``) needs its dataset's label classes
DECLARED, from public knowledge, not read from the rows:

* a dataset registered with a schema (``lethe dataset add --schema``): the schema's ``label: {name, classes}``;
* any other dataset: ``lethe dataset add ... --label-classes A,B`` (:func:`parse_label_classes`); every row's label
  must be one of them (checked at registration: :func:`check_labels`).

At training the model's classes must be exactly the declared ones (:func:`check_model_classes`); what is served
(``GET /v1/models/{m}``: ``classes``) is the declared values, in the order the model uses them
(:func:`served_classes`) — never a value read from the rows.

Everything else a model-reader downloads is declared too: feature names (a schema's, or the file's column names —
never ``col=value`` names learned from rows: such datasets are refused,
:func:`lethe.curator.serving.learned_from_rows`),
the normalisation (``none`` or ``rows``: a fixed map), the schema (public), the mechanism and the release number; the
weights are the release (docs/release_privacy.md §3, "Declared label classes").
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from lethe.curator.errors import InvalidInputError, UnreleasedModelError

__all__ = ["check_labels", "check_model_classes", "declare_label_classes", "declared_classes", "parse_label_classes",
           "served_classes", "undeclared_refusal"]


def _plain(v: Any) -> Any:
    return v.item() if hasattr(v, "item") else v


def parse_label_classes(value: Any) -> list[Any] | None:
    """The declared classes of ``--label-classes`` (``"A,B"`` or a list): numbers where every item is one, else
    strings; at least 2 distinct. None stays None."""
    if value is None:
        return None
    items = [s.strip() for s in value.split(",")] if isinstance(value, str) else list(value)
    if len(items) < 2 or any((isinstance(i, str) and not i) or isinstance(i, bool) for i in items):
        raise InvalidInputError(f"label_classes (--label-classes) must list at least 2 non-empty classes. "
                                f"Found {value!r}.")
    nums: list[Any] = []
    for i in items:
        try:
            f = float(i)
        except (TypeError, ValueError):
            nums = []
            break
        if not math.isfinite(f):
            raise InvalidInputError(f"label_classes (--label-classes) must be finite numbers or names. Found {i!r}.")
        nums.append(int(f) if f.is_integer() else f)
    out = nums if nums else [str(i) for i in items]
    if len({str(v) for v in out}) != len(out):
        raise InvalidInputError(f"label_classes (--label-classes) must be distinct. Found {value!r}.")
    return out


def check_labels(declared: list[Any], y: np.ndarray, text_classes: list[str] | None) -> None:
    """Every row's label is one of the ``declared`` classes (text labels: ``text_classes`` are the values seen, the
    table holds codes into them). :class:`InvalidInputError` naming the rule (no value of a row is echoed)."""
    if text_classes is not None:
        ok = {str(c) for c in declared}
        if any(str(c) not in ok for c in text_classes):
            raise InvalidInputError(f"label_classes (--label-classes): every label must be one of the declared "
                                    f"classes {declared}; the file holds another.")
        return
    try:
        vals = np.asarray(declared, dtype=np.float64)
    except (TypeError, ValueError):
        raise InvalidInputError(f"label_classes (--label-classes): the labels are numbers; declare numbers. "
                                f"Found {declared!r}.") from None
    if not np.all(np.isin(np.asarray(y, dtype=np.float64), vals)):
        raise InvalidInputError(f"label_classes (--label-classes): every label must be one of the declared classes "
                                f"{declared}; the file holds another.")


def declared_classes(feature_names: dict[str, Any] | None) -> list[Any] | None:
    """A dataset's declared label classes (its schema's, or ``--label-classes``), None if undeclared."""
    fn = feature_names or {}
    schema = fn.get("schema")
    if isinstance(schema, dict) and isinstance(schema.get("label"), dict):
        return list(schema["label"].get("classes") or []) or None
    dc = fn.get("declared_classes")
    return list(dc) if dc else None


def undeclared_refusal(dataset: str, mechanism: str, serve_unreleased: bool) -> InvalidInputError:
    """The refusal of a model served to model-readers on a dataset whose label classes are not declared."""
    how = " with --serve-unreleased" if serve_unreleased else ""
    return InvalidInputError(
        f"dataset {dataset!r} has no declared label classes: a model served to model-readers ({mechanism!r}{how}) "
        f"would publish the classes learned from its rows, and a class held by one record reveals that record even "
        f"after its deletion. Declare them: register the data with a schema whose label lists its classes (lethe "
        f"dataset add --schema, label: {{name, classes}}) or with --label-classes A,B (lethe dataset add ... "
        f"--label-classes 0,1). Found no declaration.")


def _index(declared: list[Any], c: Any) -> int | None:
    c = _plain(c)
    for i, d in enumerate(declared):
        if d == c or str(d) == str(c):
            return i
        if isinstance(d, int | float) and isinstance(c, int | float) and float(d) == float(c):
            return i
    return None


def check_model_classes(declared: list[Any], model_classes: Any, what: str) -> None:
    """The trained model's classes are exactly the declared ones (:class:`InvalidInputError` otherwise: a declared
    class no row holds, or a binary mechanism given more than 2 classes); counts only, no row value echoed."""
    got = [] if model_classes is None else list(model_classes)
    idx = [_index(declared, c) for c in got]
    if None in idx or sorted(i for i in idx if i is not None) != list(range(len(declared))):
        raise InvalidInputError(f"{what}: the model's label classes must be exactly the {len(declared)} declared "
                                f"classes {declared}; it learned {len(got)} from the rows (a declared class no row "
                                f"holds, or a binary mechanism on more than 2 classes). Declare the classes the "
                                f"model predicts. Nothing was changed.")


def served_classes(declared: list[Any] | None, model_classes: Any) -> list[Any] | None:
    """What a model-reader is told a model's classes are: the DECLARED values, in the order the model uses them (its
    i-th class is ``declared[j]``); None without a model class list (a regression). A model whose classes are not
    the declared ones, or without a declaration (both trained before the rule), is refused
    (:class:`UnreleasedModelError`: a 403, like any model not served)."""
    if model_classes is None:
        return None
    if declared is None:  # trained before the rule (a model opted in on an undeclared dataset)
        raise UnreleasedModelError("The model's dataset has no declared label classes, and its classes were learned "
                                   "from the rows: it is not served to model-readers. Register the data with "
                                   "--schema or --label-classes and train the model on it.")
    out = []
    for c in model_classes:
        j = _index(declared, c)
        if j is None:  # trained before the rule: never a row's value
            raise UnreleasedModelError("The model's label classes are not its dataset's declared classes (trained "
                                       "before they were checked): it is not served until an operator retrains it.")
        out.append(declared[j])
    return out


def declare_label_classes(store: Any, lock: Any, datasets: Any, dataset: str, classes: Any) -> dict[str, Any]:
    """Declare the label classes of a dataset registered without them (``lethe dataset declare D --label-classes
    A,B``; an upgraded store's datasets): every present record's label must be one of them. Refused for a schema
    dataset (its schema declares them) and for one already declared (a declaration is not changed under the models
    that publish it). Under the processing lock, with a ledger event."""
    from lethe.curator.store import add_event

    declared = parse_label_classes(classes)
    if declared is None:
        raise InvalidInputError("label_classes (--label-classes) must list the classes. Found None.")
    with lock.hold(), store.write() as s, s.begin():
        ds = datasets.find(s, dataset)
        fn = dict(ds.feature_names or {})
        if fn.get("schema") is not None:
            raise InvalidInputError(f"dataset {dataset!r} was registered with a schema: its label classes are the "
                                    "schema's (label: {name, classes}). Found a schema.")
        if fn.get("declared_classes"):
            raise InvalidInputError(f"dataset {dataset!r} already declares its label classes "
                                    f"{fn['declared_classes']}. Found {declared}.")
        _ids, _X, y = datasets.current_data(s, ds.id, ds.n_features)
        y = np.asarray(y)
        check_labels(declared, y, sorted({str(v) for v in y.tolist()}) if y.dtype.kind not in "iufb" else None)
        ds.feature_names = {**fn, "declared_classes": list(declared)}
        add_event(s, "label_classes_declared", {"dataset": ds.name, "classes": list(declared)})
    return datasets.info(dataset)  # type: ignore[no-any-return]
