"""Private releases of a model that forgets: every published version is covered, not just one (issue 26).

:class:`ReleasedLogisticRegression` is a scikit-learn estimator whose only outputs are *releases*: after ``fit``
(release 0) and after every ``cadence`` removals it publishes ŵ_t = w̃_t + N(0, σ² I) with fresh noise, where w̃_t is
the unperturbed regularised minimiser on the current data (b = 0, Guo et al. 2020's objective), maintained by the
certified Newton removal of :class:`~lethe.certified.mechanism.CertifiedRemoval` with ``residual_cap`` (certified
‖∇L_0(w̃_t)‖ ≤ β_cap, re-solved when the bound would pass it). The whole sequence of releases is (ε, δ)-DP for
every record — deleted, pending or kept — against an observer of every release (docs/release_privacy.md):
σ = √T σ_BW(ε, δ) Δ with Δ = (1 + min(1, √(2λ log 2)) + 2β_cap)/(λ n_floor)
(:func:`lethe.certified.bounds.release_sensitivity`, :func:`lethe.privacy.release.release_sigma`), accounted by
:class:`lethe.privacy.release.ReleaseAccountant`.

Predictions (``coef_``, ``decision_function``, ``predict``, ``predict_proba``) use ONLY the latest release. The
centre w̃ and the remaining rows are secret: no public attribute holds them, the model refuses ``copy``,
``deepcopy`` and ``pickle`` once fitted, and ``save`` writes them owner-only without pickle (:mod:`lethe.io`).
This front end holds no math: it calls the mechanism, the bound, the calibration and the accountant.

Opt-in (issue 39): ``noise_mechanism="tree"`` publishes through tree aggregation over the removal stream instead of
fresh noise (:mod:`lethe.release.tree_stream`, docs/release_drift.md §7), and ``"auto"`` chooses between the two from
the public parameters.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
from scipy.special import expit
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from lethe._locking import SerialisedModel, serialised
from lethe._rng import check_random_state
from lethe._validation import check_unit_rows, normalize_rows, store_init_args
from lethe.certified.mechanism import CertifiedRemoval, ModelState, NewtonCache
from lethe.certified.rows import (
    INTERCEPT_SCALE,  # features and constant column scaled by 1/√2 (fit_intercept)
    set_rows,
)
from lethe.certified.transaction import begin as begin_undo
from lethe.certified.transaction import resume
from lethe.estimator_data import check_sample_ids
from lethe.exceptions import BudgetExceededError, SecretStateError
from lethe.keymap import key_rows
from lethe.model_origin import reports_model_origin
from lethe.privacy.drift import check_gram_cap
from lethe.privacy.mechanisms import OSRandomSource
from lethe.privacy.release import (
    RELEASE_OBSERVER,
    ReleaseAccountant,
    ReleaseCertificate,
    auto_n_floor,
)
from lethe.privacy.tree import TreeRelease
from lethe.release.certificate import GUARANTEE, SCHEDULE_REVEALS, SEEDED_GUARANTEE, Release
from lethe.release.checks import stream_sensitivity
from lethe.release.model_file import load_stream, save_stream
from lethe.release.stream_state import restore_stream, stream_state
from lethe.release.tree_stream import (
    TREE_GUARANTEE,
    TreeReleaseCertificate,
    TreeStreamAccountant,
    check_noise_params,
    stream_accountant,
)

__all__ = ["ReleasedLogisticRegression", "release_noise"]


def release_noise(d: int) -> np.ndarray:
    """d standard normal variates from the operating system's CSPRNG (:class:`lethe.privacy.mechanisms.OSRandomSource`:
    no state, no seed): the noise of every unseeded fresh-noise release, the library's and the service's (the service
    refuses seeds for this family: a seed would let whoever knows it subtract the noise)."""
    return OSRandomSource().standard_normal((int(d),))


@reports_model_origin
class ReleasedLogisticRegression(SerialisedModel, ClassifierMixin, BaseEstimator):
    """Binary logistic regression whose every published version is private, with removal of training rows.

    Parameters
    ----------
    lam : float, default=1e-3
        λ of L_0(w; D) = Σ ℓ(wᵀxᵢ, yᵢ) + (λ|D|/2)‖w‖². The sensitivity is ∝ 1/(λ n_floor).
    epsilon, delta : float, default=1.0, 1e-5
        The guarantee of the whole sequence of ``horizon`` releases.
    horizon : int, default=1000
        T: the number of releases the budget covers, release 0 (at ``fit``) included. ``remove`` refuses
        (``BudgetExceededError``, nothing changes) a removal that could no longer be published.
    cadence : int, default=1
        K: a release after every K removals (calls of ``remove``); a larger K covers K times more removals with
        the same noise.
    fit_intercept : bool, default=False
        Learn an intercept (rows [x/√2, 1/√2], regularised like the weights).
    residual_cap : float, default=0.01
        β_cap: the certified gradient residual of the unperturbed centre (a public parameter; it enters the
        sensitivity as (1 + min(1, √(2λ log 2)) + 2β_cap)/(λ n_floor)).
    n_floor : int or "auto", default="auto"
        A PUBLIC lower bound on the rows other than any one target, at every release. ``"auto"``: 15n/16 at ``fit``
        rounded down to 4 significant bits (:func:`lethe.privacy.release.auto_n_floor`: assumes the data set's size
        to within ≈ 12 % is public). Removals that would leave fewer rows are refused.
    normalize_rows : bool, default=False
        Scale rows outside the unit ball onto it (else such rows raise ``ValueError``).
    solver : str, default="auto"
        Newton solver of the removals (:class:`~lethe.certified.mechanism.CertifiedRemoval`).
    tol : float or None, default=None
        Training tolerance on ‖∇L_0‖ (default 10⁻³ β_cap).
    max_iter : int, default=2000
    random_state : None, int or numpy Generator
        None (the default): the release noise is drawn from the operating system's CSPRNG
        (:class:`lethe.privacy.mechanisms.OSRandomSource`). A seed makes the stream reproducible for tests and
        benchmarks and NOT private — whoever knows the seed subtracts the noise — and every certificate of the stream
        says so (``private: False``, ``noise_source: "seeded"``, guarantee "NOT PRIVATE ..."); the curator refuses
        seeds for released models.
    noise_mechanism : {"fresh", "tree", "auto"}, default="fresh"
        How the releases' noise is drawn. ``"fresh"``: independent N(0, σ²I) per release (the calibration above).
        ``"tree"``: tree aggregation over the removal stream (:mod:`lethe.release.tree_stream`,
        docs/release_drift.md): correlated noise whose whole sequence is μ-GDP with μ = 1/σ_BW(ε, δ), under the
        premises ``rows_per_release`` (enforced by ``remove``) and, if given, ``gram_cap`` (checked at ``fit``); its
        certificates say so (:class:`~lethe.release.tree_stream.TreeReleaseCertificate`). ``"auto"``: the one
        whose accountant gives the smaller worst-release noise standard deviation at the configured horizon —
        computed from the public parameters only (ε, δ, horizon, λ, n_floor, residual_cap, gram_cap,
        rows_per_release), never from the data. ``noise_mechanism_`` says which was chosen.
    gram_cap : float or None, default=None
        A PUBLIC upper bound Λ on the largest eigenvalue of Σ xᵢxᵢᵀ over the rows as the model sees them (with the
        intercept column if ``fit_intercept``), used by the tree's drift bound where it is smaller than the
        self-concordance form (docs/release_drift.md §2, steps 3 and 3′: only when λ_max ≲ λ n_floor/(4γ), rows
        spread over many directions). ``fit`` refuses rows above it (removals only shrink the Gram matrix, so one
        check covers the stream). None (the default): no Gram premise; the tree uses the self-concordance form of
        the bound alone, which holds for every data set.
    rows_per_release : int or None, default=None
        The tree's PUBLIC cap k on the rows removed between two releases (None: ``cadence``, one row per
        ``remove`` call); with the tree, ``remove`` refuses a batch that would pass it (nothing changes).

    Attributes
    ----------
    releases_ : list of Release
        Every published version, in order.
    release_ : Release
        The latest one; ``coef_``, ``intercept_`` and the predictions use only it.
    classes_ : ndarray of shape (2,)
    n_floor_ : int
    sigma_ : float
        The noise of every release (the tree: the worst release's standard deviation over the horizon).
    noise_mechanism_ : str
        "fresh" or "tree": the mechanism the stream uses.
    sensitivity_ : float
        Δ.
    horizon_spent_ : bool
        A release was due when none was left (``remove(at_horizon="withhold")``; False with the default refusal).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(4000, 5)); X /= np.linalg.norm(X, axis=1, keepdims=True)
    >>> y = np.where(X[:, 0] > 0, 1, -1)
    >>> m = ReleasedLogisticRegression(lam=1e-2, horizon=11, random_state=0).fit(X, y)
    >>> cert = m.remove([3])
    >>> cert.version, cert.observer, cert.published, m.privacy_spent()["releases"]
    (1, 'every published release', True, 2)
    """

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False  # binary: the release's sensitivity is that of one weight vector
        # every release carries Gaussian noise calibrated to the whole horizon: on the checks' ~100 rows the noise
        # outweighs the weights (the sensitivity is ∝ 1/(λ n_floor)), so accuracy there says nothing of the model
        tags.classifier_tags.poor_score = True
        return tags

    #: Records cannot be added to a release stream (lethe.protocols.Unlearner): a new record would need its own
    #: accounting from its first release; fit a new model instead.
    supports_add: bool = False

    def __init__(self, lam: float = 1e-3, epsilon: float = 1.0, delta: float = 1e-5, horizon: int = 1000,
                 cadence: int = 1, fit_intercept: bool = False, residual_cap: float = 0.01,
                 n_floor: int | str = "auto", normalize_rows: bool = False, solver: str = "auto",
                 tol: float | None = None, max_iter: int = 2000, random_state: Any = None,
                 noise_mechanism: str = "fresh", gram_cap: float | None = None,
                 rows_per_release: int | None = None) -> None:
        store_init_args(self, locals())

    # -- parameters -------------------------------------------------------------------------------------------------
    def _check_params(self) -> None:
        for name in ("lam", "epsilon", "residual_cap"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not (v > 0 and math.isfinite(v)):
                raise ValueError(f"{name} must be a finite number > 0. Found {v!r}.")
        if isinstance(self.delta, bool) or not isinstance(self.delta, int | float) or not 0 < self.delta < 1:
            raise ValueError(f"delta must be in (0, 1). Found {self.delta!r}.")
        for name in ("horizon", "cadence"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1. Found {v!r}.")
        nf = self.n_floor
        if nf != "auto" and (isinstance(nf, bool) or not isinstance(nf, int | np.integer) or nf < 1):
            raise ValueError(f"n_floor must be 'auto' or an integer >= 1. Found {nf!r}.")
        check_noise_params(self.noise_mechanism, self.gram_cap, self.rows_per_release)

    def _validate_rows(self, X: Any, y: Any = None, *, reset: bool) -> Any:
        if y is not None:
            X, y = validate_data(self, X, y, reset=reset, dtype=np.float64)
        else:
            X = validate_data(self, X, reset=reset, dtype=np.float64)
        X = np.array(X, dtype=np.float64, order="C", copy=True)
        if y is not None:
            X = check_unit_rows(X, normalize=bool(self._trained["normalize_rows"] if not reset
                                                  else self.normalize_rows))
        elif (self._trained["normalize_rows"] if hasattr(self, "_trained") else self.normalize_rows):
            X = normalize_rows(X)
        if (self.fit_intercept if reset else self._trained["fit_intercept"]):
            X = np.column_stack([X * INTERCEPT_SCALE, np.full(X.shape[0], INTERCEPT_SCALE)])
        return X if y is None else (X, y)

    # -- fit --------------------------------------------------------------------------------------------------------
    @serialised
    def fit(self, X: Any, y: Any, sample_ids: Any = None) -> ReleasedLogisticRegression:
        """Train the centre (b = 0, certified residual ≤ β_cap) and publish release 0 (private too).

        ``sample_ids`` names the records (keys for ``remove(keys=...)``)."""
        self._check_params()
        if y is None:
            raise ValueError("y: ReleasedLogisticRegression requires y to be passed, but the target y is None.")
        X, y = self._validate_rows(X, y, reset=True)
        check_classification_targets(y)
        classes, codes = np.unique(y, return_inverse=True)
        if classes.size != 2:
            raise ValueError(f"y must hold exactly 2 classes (binary logistic regression: Only binary classification "
                             f"is supported.). Found {classes.size} class(es).")
        keys = check_sample_ids(sample_ids, X.shape[0]) if sample_ids is not None else None
        n = X.shape[0]
        n_floor = auto_n_floor(n) if self.n_floor == "auto" else int(self.n_floor)
        if n <= n_floor:
            raise ValueError(f"X has {n} rows, fewer than n_floor + 1 = {n_floor + 1}: the sensitivity bound "
                             "assumes at least n_floor rows besides any one target, so n must exceed n_floor.")
        # ℓ ≥ 0 with ℓ(0, ±1) = log 2: λ‖w*‖ ≤ √(2λ log 2) (the bound's step i); rounded up
        sensitivity = stream_sensitivity(float(self.lam), n_floor, float(self.residual_cap))
        accountant = self._stream_accountant(n_floor, sensitivity)
        if isinstance(accountant, TreeStreamAccountant) and accountant.gram_cap is not None:  # the tree's premise,
            check_gram_cap(X, float(accountant.gram_cap))  # refused before anything is built (None: no Gram premise)
        mech = CertifiedRemoval(loss="logistic", lam=float(self.lam), residual_cap=float(self.residual_cap),
                                tol=self.tol, max_iter=int(self.max_iter), solver=self.solver, bound="tight",
                                calibration="analytic").resolved(X)
        Y = np.where(codes == 1, 1.0, -1.0)
        cache = NewtonCache()
        state, _ = mech.train(X, Y, cache=cache, defer_setup=True, check_input=bool(self.fit_intercept))
        rng = check_random_state(self.random_state)
        # release noise: the operating system's CSPRNG (lethe.privacy.mechanisms.OSRandomSource); a seed makes the
        # stream reproducible and NOT private (its certificates say so: SEEDED_GUARANTEE)
        self._seeded_rng = rng if self.random_state is not None else None
        self.classes_ = classes
        self.n_floor_ = n_floor
        self.sensitivity_ = sensitivity
        self.sigma_ = accountant.sigma
        self._trained = {"fit_intercept": bool(self.fit_intercept), "normalize_rows": bool(self.normalize_rows)}
        self._X, self._Y, self._active, self._keys = X, Y, np.ones(n, dtype=bool), keys
        self._mech, self._state, self._cache, self._rng = mech, state, cache, rng
        self._accountant = accountant
        self.noise_mechanism_ = "tree" if isinstance(accountant, TreeStreamAccountant) else "fresh"
        self._tree = (TreeRelease(accountant.tree, random_state=rng if self.random_state is not None else None)
                      if isinstance(accountant, TreeStreamAccountant) else None)
        self._rows_pending = 0
        self._pending = 0
        self.n_removed_ = 0
        self.horizon_spent_ = False  # a due release withheld at the horizon (remove(at_horizon="withhold"))
        self.n_iter_ = int(state.train_iterations)  # the centre's training iterations (scikit-learn's n_iter_)
        self.releases_: list[Release] = []
        self._publish()
        return self

    def _stream_accountant(self, n_floor: int, sensitivity: float) -> ReleaseAccountant | TreeStreamAccountant:
        """The stream's ledger for ``noise_mechanism`` (public parameters only: :mod:`lethe.release.tree_stream`)."""
        k = int(self.cadence) if self.rows_per_release is None else int(self.rows_per_release)
        return stream_accountant(self.noise_mechanism, epsilon=float(self.epsilon), delta=float(self.delta),
                                 horizon=int(self.horizon), sensitivity=sensitivity, lam=float(self.lam),
                                 n_floor=n_floor, residual_cap=float(self.residual_cap),
                                 gram_cap=None if self.gram_cap is None else float(self.gram_cap),
                                 rows_per_release=k)

    # -- releases ---------------------------------------------------------------------------------------------------
    def _publish(self) -> Release:
        """Record one release in the accountant (refused past the horizon, nothing changed), then draw fresh noise."""
        accountant = self._accountant.record()
        seeded_rng = self.__dict__.get("_seeded_rng")
        seeded = seeded_rng is not None or bool(self.releases_ and not self.releases_[-1].certificate.private)
        if isinstance(accountant, TreeStreamAccountant):
            return self._publish_tree(accountant, seeded)
        d = self._state.w.shape[0]
        noise = seeded_rng.normal(0.0, 1.0, size=d) if seeded_rng is not None else release_noise(d)
        version = accountant.releases - 1  # len(releases_) when fitted or loaded (a restored stream holds its last)
        release = self._as_release(self._state.w + accountant.sigma * noise, version,
                                   self._release_certificate(accountant, version, seeded))
        self._accountant = accountant
        self.releases_.append(release)
        return release

    def _publish_tree(self, accountant: TreeStreamAccountant, seeded: bool) -> Release:
        """The tree's release: published on a copy of the tree, kept (with the accountant) only at the end."""
        assert self._tree is not None  # a tree stream holds its tree from fit (or load)
        tree = self._tree.copy()
        version = accountant.releases - 1
        release = self._as_release(tree.publish(self._state.w), version,
                                   self._release_certificate(accountant, version, seeded))
        self._accountant, self._tree = accountant, tree
        self.releases_.append(release)
        return release

    def _as_release(self, w: np.ndarray, version: int, cert: ReleaseCertificate) -> Release:
        """Release ``version`` of the released vector ``w`` (weights, then the scaled intercept if fitted)."""
        if self._trained["fit_intercept"]:
            coef, intercept = w[:-1] * INTERCEPT_SCALE, float(w[-1] * INTERCEPT_SCALE)
        else:
            coef, intercept = w, 0.0
        coef = np.array(coef, dtype=np.float64, copy=True)
        coef.setflags(write=False)
        return Release(version=version, coef=coef, intercept=intercept, certificate=cert)

    def _release_certificate(self, accountant: ReleaseAccountant | TreeStreamAccountant, version: int,
                             seeded: bool) -> ReleaseCertificate:
        """The certificate of release ``version``, published with ``accountant`` (which counts it)."""
        if not isinstance(accountant, TreeStreamAccountant):
            return ReleaseCertificate(
                observer=RELEASE_OBSERVER, guarantee=SEEDED_GUARANTEE if seeded else GUARANTEE, version=version,
                releases=accountant.releases, horizon=accountant.horizon, epsilon=accountant.epsilon_spent(),
                delta=accountant.delta, epsilon_budget=accountant.epsilon, sigma=accountant.sigma,
                sensitivity=accountant.sensitivity, noise_multiplier=accountant.sigma / accountant.sensitivity,
                n_floor=int(self.n_floor_), residual_cap=float(self.residual_cap), lam=float(self.lam),
                cadence=int(self.cadence), schedule_reveals=SCHEDULE_REVEALS,
                noise_source="seeded" if seeded else "os-csprng", private=not seeded)
        std = accountant.release_std(version)
        t = accountant.tree
        return TreeReleaseCertificate(
            observer=RELEASE_OBSERVER, guarantee=SEEDED_GUARANTEE if seeded else TREE_GUARANTEE, version=version,
            releases=accountant.releases, horizon=accountant.horizon, epsilon=accountant.epsilon_spent(),
            delta=accountant.delta, epsilon_budget=accountant.epsilon, sigma=std,
            sensitivity=accountant.sensitivity, noise_multiplier=std / accountant.sensitivity,
            n_floor=int(self.n_floor_), residual_cap=float(self.residual_cap), lam=float(self.lam),
            cadence=int(self.cadence), schedule_reveals=SCHEDULE_REVEALS,
            noise_source="seeded" if seeded else "os-csprng", private=not seeded,
            mu=accountant.mu, mu_spent=accountant.mu_spent(), sigma_first=t.sigma_first, sigma_node=t.sigma,
            worst_release_std=accountant.sigma,
            gram_cap=None if accountant.gram_cap is None else float(accountant.gram_cap),
            rows_per_release=int(accountant.rows_per_release))

    @property
    def accountant_(self) -> ReleaseAccountant | TreeStreamAccountant:
        """The release stream's ledger (immutable): releases published of the horizon, σ, Δ, ε spent."""
        check_is_fitted(self, "releases_")
        return self._accountant

    @property
    def state_(self) -> ModelState:
        """The SECRET centre's state (w̃, its certified residual bound β ≤ β_cap, n, counters; b = 0). Never
        publish ``state_.w``: only releases are private."""
        check_is_fitted(self, "releases_")
        return self._state

    @property
    def mechanism_(self) -> CertifiedRemoval:
        """The centre's mechanism (``residual_cap``: b = 0; its concrete solver)."""
        check_is_fitted(self, "releases_")
        return self._mech

    @property
    def active_(self) -> np.ndarray:
        """Which of the fitted rows are still held (a read-only copy of the n-row mask; False once removed), as
        ``active_`` of the other families."""
        check_is_fitted(self, "releases_")
        out = self._active.copy()
        out.flags.writeable = False
        return out

    @property
    def release_(self) -> Release:
        """The latest release."""
        check_is_fitted(self, "releases_")
        return self.releases_[-1]

    @property
    def certificate_(self) -> ReleaseCertificate | None:
        """The certificate of the latest release (lethe.protocols.Unlearner): what the whole sequence so far spent;
        None before ``fit``."""
        releases = self.__dict__.get("releases_")
        if not releases:
            return None
        last = self.__dict__.get("_last_certificate")  # (release, certificate) of the last removal
        if last is not None and last[0] is releases[-1]:
            return last[1]  # that removal's, published or not (a later release or fit supersedes it)
        return releases[-1].certificate

    def add(self, X: Any, y: Any, sample_ids: Any = None) -> Any:
        """Not supported (``supports_add = False``); raises ``NotImplementedError`` and changes nothing."""
        raise NotImplementedError(
            f"{type(self).__name__} cannot add records (supports_add = False): the release stream's accounting "
            "starts at fit for every record; fit a new model on the enlarged data (a new stream, its own budget).")

    @serialised
    def privacy_spent(self) -> dict[str, Any]:
        """``{"epsilon", "delta", "releases", "horizon"}``: ε spent at δ by the releases so far."""
        check_is_fitted(self, "releases_")
        acc = self._accountant
        return {"epsilon": acc.epsilon_spent(), "delta": acc.delta, "releases": acc.releases,
                "horizon": acc.horizon}

    # -- removal ----------------------------------------------------------------------------------------------------
    def _rows(self, indices: Any, keys: Any) -> np.ndarray:
        if (indices is None) == (keys is None):
            raise ValueError("Give exactly one of indices (training-row positions) and keys (record keys). "
                             f"Found indices={'None' if indices is None else '...'}, "
                             f"keys={'None' if keys is None else '...'}.")
        if keys is not None:
            if self._keys is None:
                raise ValueError("keys: this model was fitted without sample_ids; remove by row index.")
            ks = np.asarray(keys)
            ks = ks.reshape(1) if ks.ndim == 0 else ks
            if ks.ndim != 1 or ks.size == 0:
                raise ValueError(f"keys must be a non-empty 1-D sequence of record keys. Found shape {ks.shape}.")
            rows, missing = key_rows(self, ks, self._keys, self._active)  # O(1) amortised per key (lethe.keymap)
            if missing is not None:  # the key is not echoed: it may name someone
                raise ValueError("A key is not a record of this model (unknown, or already removed).")
            return rows
        idx = np.asarray(indices)
        idx = idx.reshape(1) if idx.ndim == 0 else idx
        if idx.ndim != 1 or idx.size == 0:
            raise ValueError(f"indices must be a non-empty 1-D sequence of training-row indices. Found shape "
                             f"{idx.shape}.")
        if not np.issubdtype(idx.dtype, np.integer):
            raise TypeError(f"indices must be integers. Found dtype {idx.dtype}.")
        n = self._active.shape[0]
        bad = np.flatnonzero((idx < 0) | (idx >= n))
        if bad.size:
            raise ValueError(f"indices must be training-row indices in [0, {n}). Found {int(idx[bad[0]])}.")
        if np.unique(idx).size != idx.size:
            raise ValueError("indices must be distinct.")
        if not np.all(self._active[idx]):
            raise ValueError("A training row given was already removed.")
        return idx.astype(np.int64)

    @serialised
    def remove(self, indices: Any = None, *, keys: Any = None, publish: bool | None = None,
               at_horizon: str = "refuse") -> ReleaseCertificate:
        """Remove training rows (ORIGINAL positions in ``fit``'s X, or record keys) as one batch.

        Returns the certificate of the removal (:class:`lethe.protocols.Certificate`, also ``certificate_``): the
        certificate of the new release (``release_``) if this removal completed a cadence (every ``cadence``
        removals), else the latest release's figures with ``published=False`` — the removal is published by a
        later release, and until then model-readers still see a release computed with the rows. Raises
        ``BudgetExceededError`` if the removal could not be published within the horizon, ``ValueError`` if it would
        leave fewer than ``n_floor + 1`` rows (n_floor others besides any one record still held); on any error
        nothing changes (an exception anywhere in the call, ``KeyboardInterrupt`` included, leaves the centre, its
        cache, the rows, the accountant and the releases as they were, or — once committed — the removal done in
        full: :mod:`lethe.certified.transaction`).

        ``publish``: None (the default) follows ``cadence``; True publishes a release with this removal, False
        leaves it pending (a caller with its own schedule — the service's time rule and clock schedule — decides).
        ``at_horizon``: what a removal does once no release is left. ``"refuse"`` (the default, as above).
        ``"withhold"`` (the curator service's choice, documented there and in docs/release_privacy.md §3): the removal
        is carried out on the secret centre and no release is drawn; the certificate says ``published=False`` and,
        if a release was due, ``horizon_spent_`` becomes True. The latest release was computed with the removed rows,
        so whoever serves it must withdraw it (the service does); fit a new model to publish again. The n_floor and
        ``rows_per_release`` rules apply either way.
        """
        check_is_fitted(self, "releases_")
        if at_horizon not in ("refuse", "withhold"):
            raise ValueError(f"at_horizon must be 'refuse' or 'withhold'. Found {at_horizon!r}.")
        if publish is not None and not isinstance(publish, bool):
            raise TypeError(f"publish must be None, True or False. Found {type(publish).__name__}.")
        if self._X.shape[0] == 0:  # a fitted stream holds more than n_floor >= 1 rows
            raise ValueError("This stream was restored without its records (restore(state) with X=None: it can only "
                             "publish); restore it with X and y to remove records.")
        resume(self)  # an interrupted call's rollback completed first
        idx = self._rows(indices, keys)
        acc = self._accountant
        publishes = self._pending + 1 >= int(self.cadence) if publish is None else publish
        withheld = False
        if acc.remaining == 0 and at_horizon == "withhold":
            withheld, publishes = publishes, False  # a due release that can never be drawn
        elif acc.remaining == 0:
            raise BudgetExceededError(
                f"The horizon of {acc.horizon} releases is spent: a removal now could never be published within "
                f"(epsilon, delta) = ({acc.epsilon}, {acc.delta}). Nothing was removed; fit a new model (a new "
                "stream with its own budget) to go on.")
        acc_k = getattr(acc, "rows_per_release", None)
        rows_pending = int(self.__dict__.get("_rows_pending", 0))
        if acc_k is not None and rows_pending + idx.size > acc_k:
            raise ValueError(f"rows_per_release = {acc_k} (the tree's premise): removing {idx.size} rows would make "
                             f"{rows_pending + idx.size} rows removed since the last release. Nothing was removed; "
                             "remove fewer rows per release (or call release() first), or use a larger "
                             "rows_per_release (at least cadence x the rows of a removal).")
        n_after = int(np.count_nonzero(self._active)) - idx.size
        if n_after <= self.n_floor_:  # as fit and the service: n_floor rows besides any one target still held
            raise ValueError(f"Removing {idx.size} rows would leave {n_after}, fewer than n_floor + 1 = "
                             f"{self.n_floor_ + 1}: the released models' sensitivity bound needs n_floor rows besides "
                             "any one record still held. Nothing was removed.")
        # one transaction (lethe.certified.transaction): the centre's step, the erasure of the rows and the release
        # are undone together if anything raises before the commit (an error, KeyboardInterrupt, a signal handler)
        undo = begin_undo(self, idx, self._rng, [self._cache], owner="_X")
        undo.mask = self._active
        try:
            state, _ = self._mech.remove(self._state, self._X, self._Y, idx, active=self._active, cache=self._cache,
                                         check_input=False)
            set_rows(self._active, idx, False)
            undo.erase(self._X, self._Y, self._keys, idx)
            undo.save_attrs("_state", "_pending", "n_removed_", "_accountant")
            self.__dict__.setdefault("_tree", None)
            self.__dict__.setdefault("_rows_pending", 0)
            self.__dict__.setdefault("horizon_spent_", False)
            undo.save_attrs("_tree", "_rows_pending", "horizon_spent_")
            undo.save_list(self.releases_)
            self._state, self.n_removed_, self._pending = state, self.n_removed_ + idx.size, self._pending + 1
            self._rows_pending = rows_pending + idx.size
            self.horizon_spent_ = bool(self.horizon_spent_ or withheld)
            release = None
            if publishes:
                self._pending = 0
                self._rows_pending = 0
                release = self._publish()  # from the new centre (recorded in the accountant, appended)
            latest = self.releases_[-1]
            cert = (latest.certificate if release is not None
                    else dataclasses.replace(latest.certificate, published=False))
            self.__dict__.setdefault("_last_certificate", None)
            undo.save_attrs("_last_certificate")
            self._last_certificate = (latest, cert)
            undo.done = True  # the commit point
            undo.finish()
        except BaseException:
            undo.rollback()  # a no-op beyond finishing once committed
            raise
        return cert

    @serialised
    def release(self) -> Release:
        """Publish a release now, without a removal: the current centre (every removal so far) plus fresh noise,
        counted once in the accountant; pending removals are published by it.

        This is how a library user gets a **data-independent schedule** (docs/release_privacy.md §3): with
        ``cadence`` larger than the number of removals the model will see (no removal then publishes), call
        ``release()`` on a clock — every T seconds, whatever happened. When releases happen, and how many, then
        depend on the clock alone, not on whether a request found a record to remove; with ``cadence=1`` the
        number of releases counts the removals. Raises ``BudgetExceededError`` past the horizon (nothing changes).
        """
        check_is_fitted(self, "releases_")
        acc = self._accountant
        if acc.remaining == 0:
            raise BudgetExceededError(
                f"The horizon of {acc.horizon} releases is spent; releases left must be > 0. Found 0. Nothing was "
                "released; fit a new model (a new stream with its own budget) to publish again.")
        release = self._publish()
        self._pending = 0
        self._rows_pending = 0
        return release

    # -- predictions from the latest release only -------------------------------------------------------------------
    @property
    def coef_(self) -> np.ndarray:
        """The latest release's weights, shape (1, d)."""
        return np.array(self.release_.coef, copy=True)[None, :]

    @property
    def intercept_(self) -> np.ndarray:
        """The latest release's intercept, shape (1,)."""
        return np.array([self.release_.intercept])

    @serialised
    def decision_function(self, X: Any) -> np.ndarray:
        """Margins of the latest release."""
        rel = self.release_
        X = validate_data(self, X, reset=False, dtype=np.float64)
        if self._trained["normalize_rows"]:
            X = normalize_rows(np.array(X, dtype=np.float64))
        return np.asarray(X @ rel.coef + rel.intercept, dtype=np.float64)

    def predict_proba(self, X: Any) -> np.ndarray:
        """σ(margin) of the latest release, shape (n, 2)."""
        p = expit(self.decision_function(X))
        return np.column_stack([1.0 - p, p])

    def predict(self, X: Any) -> np.ndarray:
        """Labels from the latest release."""
        margins = self.decision_function(X)  # first: NotFittedError before fit (classes_ is set by fit)
        return self.classes_[(margins > 0).astype(int)]

    # -- no copies of secret state: lethe._locking.SerialisedModel refuses pickles and copies of a fitted model -----
    _fitted_attribute, _refusal_error = "releases_", SecretStateError
    _secret_state = "the secret unperturbed centre and the remaining training rows"
    _copy_reason = ("a copy would be a second stream drawing its own noise around the same centre (spending the "
                    "budget twice). Publish its releases (model.releases_) or save it with model.save(path) "
                    "(owner-only file, no pickle).")

    # -- persistence ------------------------------------------------------------------------------------------------
    @serialised
    def save(self, path: str | Path, *, key: bytes | str | None = None) -> Path:
        """Save the model (secret centre, remaining rows, the accountant and every release) without pickle, owner-only.

        The stream goes on from the file: the accountant's state is in it, so a loaded model can never publish more
        than the horizon. The file is tagged under the model key (created on the first save where none is
        configured; :func:`lethe.io.save_model_file`) and records the stream's random id and its counts (releases,
        removals), which are also recorded beside the key (:mod:`lethe.model_keys`): :meth:`load` refuses an older
        file of the same stream, so a kept copy cannot restart the ledger from an earlier point on this machine."""
        return save_stream(self, path, key=key)

    @classmethod
    def load(cls, path: str | Path, *, key: bytes | str | None = None,
             trust_unauthenticated: bool = False) -> ReleasedLogisticRegression:
        """Load a model written by :meth:`save` (never unpickles); later releases draw fresh OS randomness.

        The file is authenticated as the estimators' files are (``key=``, ``$LETHE_MODEL_KEY`` or the key file;
        refused without a valid tag unless ``trust_unauthenticated=True``, which every later certificate then
        states; docs/estimators.md "Model files"), refused when its release stream has been saved or loaded here
        with more releases or removals (:func:`lethe.model_keys.check_counts`, trusted or not), and, always,
        checked before anything is built from it (:func:`lethe.release.model_file.check_release_file`): shapes
        and finiteness, the rows' invariants, the accountant's σ against the sensitivity recomputed from the
        parameters, and the centre's residual ‖∇L_0(w)‖ re-measured
        from the saved rows — a centre farther from the minimiser than β_cap would break the sensitivity bound
        every release rests on, so such a file is refused."""
        return load_stream(cls, path, key=key, trust_unauthenticated=trust_unauthenticated)

    @classmethod
    def restore(cls, params: dict[str, Any], state: dict[str, Any], X: Any = None, y: Any = None, *,
                classes: Any) -> ReleasedLogisticRegression:
        """A fitted stream from its state as the curator service keeps it (:meth:`stream_state`) and the records
        (X, y) it is for — the service's adapter restores every version this way and calls :meth:`remove` and
        :meth:`release` (:mod:`lethe.release.stream_state`).

        ``params``: the constructor's parameters (``random_state`` must be None: later releases draw the operating
        system's CSPRNG); ``classes``: the 2 labels seen at training (``classes_``). The state is checked as a
        loaded file is (:func:`lethe.release.model_file.check_release_file`: the sensitivity recomputed from the
        parameters, β ≤ β_cap, the centre's residual re-measured from X; :func:`~lethe.release.model_file.
        check_tree_file`), ``ValueError`` naming the first rule that fails. Without X and y the stream can only
        publish (``release``; ``remove`` refuses). A restored stream holds only its latest release in ``releases_``,
        so ``save`` refuses it."""
        return restore_stream(cls, params, state, X, y, classes=classes)

    @serialised
    def stream_state(self) -> dict[str, Any]:
        """The SECRET state :meth:`restore` takes: the centre and its state, the accountant, n_floor, the solver, the
        pending removals, ``horizon_spent``, the latest release and the tree's state (None for fresh noise)."""
        check_is_fitted(self, "releases_")
        return stream_state(self)
