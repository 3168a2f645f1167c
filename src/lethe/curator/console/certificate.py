"""A certificate in words a non-specialist can read, from a fixed list of public fields.

Only the fields named in :data:`PUBLIC_FIELDS` are ever shown: a certificate dict may carry fields that identify
records (row positions such as ``removed_indices``, an edit's replaced rows) and those are never read here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from lethe.curator.public import REQUESTER_CERTIFICATE_FIELDS
from lethe.families import Capability, FamilyWords, family_of_mechanism

# Shown in the "technical details" table, in this order, with a plain label. Nothing else is shown.
PUBLIC_FIELDS: tuple[tuple[str, str], ...] = (
    ("operation", "operation"),
    ("guarantee", "guarantee"),
    ("theorem", "theorem"),
    ("epsilon", "ε (privacy loss bound)"),
    ("delta", "δ (failure probability)"),
    ("noise", "noise distribution"),
    ("bound", "bound used"),
    ("step_bound", "gradient residual added by this removal"),
    ("residual_bound", "accumulated gradient residual β"),
    ("budget", "budget ε′ (largest β the guarantee allows)"),
    ("budget_left", "budget left"),
    ("epsilon_spent", "ε spent by the accumulated residual"),
    ("retrained", "retrained"),
    ("n_removed", "records removed in this batch"),
    ("n_remaining", "records remaining"),
    ("bound_mode", "bound mode"),
    ("calibration", "calibration"),
    ("solver", "solver"),
    ("q", "Rényi order q"),
    ("epsilon_dp", "ε_dp (Rényi, publication)"),
    ("epsilon_dd", "ε_dd (Rényi, deletion)"),
    ("epsilon_dd_adaptive", "ε_dd against adaptive requesters"),
    ("edit_requests", "edit requests"),
    ("schedule_reveals", "what the release schedule reveals"),
    ("published", "published in a release"),
    ("withdrawn", "model withdrawn"),
    ("lifetime_epsilon", "lifetime ε of the dataset (every release of every model)"),
    ("lifetime_budget", "lifetime budget ε"),
    ("lifetime_epsilon_committed", "lifetime ε committed (open streams at their whole horizon)"),
    ("lifetime_delta", "δ of the lifetime figures"),
    ("observer", "who the guarantee covers"),
    ("horizon", "horizon (releases the budget covers)"),
    ("horizon_spent", "horizon spent"),
    ("releases", "releases published"),
    ("cadence", "a release every … removals"),
    ("cadence_seconds", "a release every … seconds"),
    ("schedule", "release schedule"),
    ("noise_source", "source of the release noise"),
    ("sigma", "noise σ"),
    ("noise_mechanism", "release noise (fresh per release, or tree-aggregated)"),
    ("mu", "μ-GDP of the whole horizon"),
    ("mu_spent", "μ-GDP of the releases so far"),
    ("sigma_first", "noise σ of the first release (tree)"),
    ("sigma_node", "noise σ of each tree node"),
    ("worst_release_std", "largest release noise σ over the horizon (tree)"),
    ("gram_cap", "public cap on the rows' Gram matrix (tree premise)"),
    ("rows_per_release", "rows removed per release at most (tree premise)"),
    ("worst_case_bound", "data-independent worst-case bound"),
    ("n", "records"),
    ("n_retained", "records retained"),
    ("n_shards", "shards"),
    ("step", "step"),
    ("steps", "steps"),
    ("p", "earlier releases a requester may have seen (p)"),
    ("r", "records per edit (r)"),
    ("epsilon_certified", "ε certified"),
    ("rdp_slope", "Rényi slope"),
    ("lr", "learning rate η"),
    ("grad_clip", "gradient clip C"),
    ("model_radius", "model radius C₀"),
    ("weight_decay", "weight decay λ"),
    ("clipping", "clipping"),
    ("batch_size", "batch size"),
    ("post_steps", "post-processing steps"),
    ("post_radius", "post-processing radius"),
    ("post_momentum", "post-processing momentum"),
    ("assumptions", "assumptions"),
)
_PUBLIC = {k for k, _ in PUBLIC_FIELDS}

#: What a requester (and the downloadable certificate sent to the data subject) shows: nothing that depends on the
#: other records of the batch or on any record's values — the guarantee, its parameters and whether the model was
#: retrained; not the batch's size, residuals, budget used or left (the rule of issue 13,
#: ``lethe.curator.public.REQUESTER_CERTIFICATE_FIELDS``).
REQUESTER_FIELDS: frozenset[str] = REQUESTER_CERTIFICATE_FIELDS  # one list, the curator's (issue 34)


def num(x: Any, digits: int = 3) -> str:
    """A number for people: ``1``, ``0.0001``, ``2.5e-07``; booleans as yes/no; None as an em dash."""
    if x is None:
        return "—"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        if not math.isfinite(x):
            return "∞" if x > 0 else ("−∞" if x < 0 else "not a number")
        if x == 0:
            return "0"
        if abs(x) < 1e4:
            return f"{x:.{digits}g}"  # 0.0001, 0.228, 2.5e-07
        if abs(x) < 1e12:
            return f"{x:,.0f}"
        return f"{x:.{digits - 1}e}"
    return str(x)


def percent(part: Any, whole: Any) -> str:
    try:
        p, w = float(part), float(whole)
    except (TypeError, ValueError):
        return "—"
    if not (math.isfinite(p) and math.isfinite(w)) or w <= 0:
        return "—"
    v = 100.0 * p / w
    return f"{v:.2g} %" if 0 < v < 1 else f"{v:.1f} %"


@dataclass
class Explained:
    """One certificate, explained: a headline, sentences, and the public technical fields."""

    id: str
    model: str | None
    headline: str
    sentences: list[tuple[str, str]] = field(default_factory=list)  # (term, explanation)
    details: list[tuple[str, str]] = field(default_factory=list)  # (label, value)
    issued_at: str | None = None
    retrained: bool | None = None


def explain(cert_view: dict[str, Any], *, operator: bool = False) -> Explained:
    """Explain one certificate view from :func:`lethe.curator.console.queries.certificates_of`.

    ``operator=False`` (a requester, or the certificate sent to the data subject) keeps only
    :data:`REQUESTER_FIELDS`: no batch size, residual or budget figure.
    """
    raw = cert_view.get("certificate") or {}
    c = {k: v for k, v in raw.items() if operator or k in REQUESTER_FIELDS}
    model = cert_view.get("model")
    kind = cert_view.get("kind")
    details = [(label, num(c[k])) for k, label in PUBLIC_FIELDS if k in c]
    ex = Explained(id=str(cert_view.get("id")), model=model, headline="", details=details,
                   issued_at=cert_view.get("issued_at"))
    if kind == "deletion":
        ex.headline = "The record was deleted. No model had been trained on this dataset, so none had to forget it."
        ex.sentences.append(("Guarantee", "Exact: the record is gone from the database (ε = 0, δ = 0)."))
        return ex
    old, new = cert_view.get("old_version"), cert_view.get("new_version")
    n_removed = c.get("n_removed")
    batch = (f" It was removed together with {num(int(n_removed) - 1)} other record(s) in the same batch."
             if isinstance(n_removed, int) and n_removed > 1 else "")
    released = raw.get("observer") == "every published release"
    if released:
        ex.headline = _released_headline(model, c, operator=operator, old=old, new=new) + batch
    elif operator:
        ex.headline = (f"Model “{model}” no longer contains the record: version {new} replaced version {old}, "
                       f"which was destroyed.{batch}")
    else:  # no version numbers: they count every removal step, other people's included (issue 36)
        ex.headline = (f"Model “{model}” no longer contains the record: a new version replaced the one that held "
                       f"it, which was destroyed.{batch}")
    eps, delta = c.get("epsilon"), c.get("delta")
    words = _words(cert_view.get("mechanism"))
    theorem = c.get("theorem") or c.get("guarantee")
    if released and eps is not None:
        ex.sentences.append(("Guarantee", (
            f"(ε = {num(eps)}, δ = {num(delta)})-differential privacy of every release the model will publish: no "
            "one who sees all of them can tell whether the record was ever in the data, beyond a factor of "
            f"e^ε = {num(math.exp(float(eps)))} in probability or with probability δ — given the release schedule, "
            f"which is public and reveals {c.get('schedule_reveals') or 'when releases happen'}.")))
        if c.get("lifetime_epsilon") is not None:
            ex.sentences.append(("Lifetime", (
                f"Over every release of every model trained on this dataset so far, a record held throughout is "
                f"covered at ε = {num(c.get('lifetime_epsilon'))} (δ = {num(c.get('lifetime_delta'))}); the "
                f"operator's lifetime budget is ε = {num(c.get('lifetime_budget'))}.")))
    elif (own := _own_guarantee(words, c)) is not None:  # the family states its guarantee in its own words
        ex.sentences.append(("Guarantee", own))
    elif eps is not None:
        exact = float(eps) == 0.0 and not delta
        if exact:
            ex.sentences.append(("Guarantee", "Exact removal: the new model is the one that training without the "
                                              "record would have produced (ε = 0, δ = 0)."))
        else:
            ex.sentences.append(("Guarantee", (
                f"(ε = {num(eps)}, δ = {num(delta)})-certified removal: no one who looks at the new model can tell "
                f"whether it was trained with or without the record, except by a factor of at most "
                f"e^ε = {num(math.exp(float(eps)))} in probability, or with probability at most δ = {num(delta)}.")))
    if theorem:
        ex.sentences.append(("Proof", f"{theorem}."))
    budget = c.get("budget")
    retrained = c.get("retrained")
    if released:  # no removal budget: the stream's horizon and the lifetime budget are stated above
        pass
    elif not operator and kind == "removal" and _budgeted(cert_view.get("mechanism")):
        ex.sentences.append(("Budget", "The share of the model's removal budget that a removal uses depends on "
                                       "the other records removed with it, so it is shown to the operator only."))
    elif budget is not None and c.get("step_bound") is not None:
        used_now = percent(c.get("step_bound"), budget)
        used_total = percent(c.get("residual_bound"), budget)
        left = percent(c.get("budget_left"), budget)
        if retrained is True:
            ex.sentences.append(("Budget", (
                f"An update in place would have needed {used_now} of the model's removal budget, more than was "
                f"left. After retraining, {used_total} is used and {left} remains.")))
        else:
            ex.sentences.append(("Budget", (
                f"This removal used {used_now} of the model's removal budget; {used_total} is used in all since "
                f"the last training and {left} remains.")))
    ex.retrained = bool(retrained) if retrained is not None else None
    if retrained is True:
        ex.sentences.append(("Retraining", words.retrained if words else _GENERIC_RETRAINED))
    elif retrained is False or (retrained is None and words is not None):
        ex.sentences.append(("Retraining", words.updated_in_place if words else _GENERIC_UPDATED))
    if words is not None:
        ex.sentences.append(("Who it covers", words.observer))
        ex.sentences.append(("Not covered", words.not_covered))
    return ex


_GENERIC_RETRAINED = "Yes. The model was trained again on the remaining records."
_GENERIC_UPDATED = "No. The model was updated by its unlearning mechanism (see the proof)."


def _own_guarantee(words: FamilyWords | None, c: dict[str, Any]) -> str | None:
    """The family's own guarantee sentence (:attr:`FamilyWords.guarantee`) filled with the certificate's shown
    fields, or None (no template, or it names a field this certificate does not show)."""
    if words is None or not words.guarantee:
        return None
    try:
        return words.guarantee.format_map({k: num(v) for k, v in c.items()})
    except (KeyError, IndexError, ValueError):
        return None


def _budgeted(mechanism: Any) -> bool:
    """Whether ``mechanism``'s family spends a removal budget (budgeted Newton steps, the registry's
    :attr:`~lethe.families.Capability.NEWTON_STEP`): only then does a requester's page speak of one."""
    try:
        return isinstance(mechanism, str) and family_of_mechanism(mechanism).has(Capability.NEWTON_STEP)
    except ValueError:  # a mechanism no registered family runs any more
        return False


def _words(mechanism: Any) -> FamilyWords | None:
    """The registered family's words for ``mechanism`` (the registry, never a name written here), or None."""
    if not isinstance(mechanism, str):
        return None
    try:
        return family_of_mechanism(mechanism).words
    except ValueError:
        return None


def _released_headline(model: Any, c: dict[str, Any], *, operator: bool, old: Any, new: Any) -> str:
    """A released model's headline follows ``published`` (issue 36): only a release with fresh noise takes the record
    out of what model-readers see; a withdrawn model is not served at all. Operators also see the version numbers."""
    versions = f" (version {new} replaced version {old})" if operator and new is not None else ""
    if c.get("published") is True:
        return (f"Model “{model}” no longer contains the record: a new private release, computed without it, "
                f"replaced the published one{versions}.")
    if c.get("withdrawn") is True or c.get("horizon_spent") is True:
        return (f"The record was removed from model “{model}”'s secret state, but the model can publish no more "
                f"releases: its last release, computed while the record was held, is withdrawn — no one is served "
                f"it — until the operator retrains the model{versions}.")
    return (f"The record was removed from model “{model}”'s secret state; the published release was computed while "
            f"it was held and still is until the next release, which will not contain it{versions}.")


__all__ = ["PUBLIC_FIELDS", "REQUESTER_FIELDS", "Explained", "explain", "num", "percent"]
