"""The stream of edit requests of Algorithm 1: edit requests, the data curator that answers them, requesters.

Chourasia & Shah 2023, §2.2, §5. Mechanism layer: explicit, serialisable state.

Which "curator"? The paper calls the pair of algorithms (A, Ā) that learns and then answers a stream of edit
requests the *data curator*; :class:`NoisyGDCurator` here is that mathematical object, in memory, for one model.
The *deletion service* — a store of keyed records, a worker, an HTTP API, a ledger, published model versions — is
:mod:`lethe.curator` (``lethe curator …``); it runs a :class:`NoisyGDCurator` through its ``noisy-gd`` adapter.
Use this module to study or embed Alg. 1; use :mod:`lethe.curator` to serve deletion requests.

* :class:`EditRequest` (Def. 2.4) and :class:`Database` — the data the curator edits, defined in
  :mod:`lethe.noisygd.database` and re-exported here.
* :class:`NoisyGDCurator` — the curator (A, Ā, f_pub) of Def. 5.1: A(D) = Noisy-GD(D, Θ ~ ρ, K_A),
  Ā(D, u, Θ) = Noisy-GD(D ∘ u, Θ, K_Ā), f_pub(θ) = θ by default. Its state is exactly the current database
  D_i, the current model Θ̂_i, a data-independent random-generator state and the certificates; nothing derived
  from a replaced record survives an edit (§3–4). :meth:`NoisyGDCurator.state_arrays` lists every array the
  state holds, so this can be checked.
* :class:`NonAdaptiveRequester`, :class:`AdaptiveRequester` and :func:`interact` — Def. 2.5 and the loop of
  Algorithm 1 (the requesters are defined in :mod:`lethe.noisygd.requesters` and re-exported here).
* :class:`CuratorConfig` — the curator's hyperparameters, defined in :mod:`lethe.noisygd.config` and re-exported here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lethe._rng import RandomState, check_random_state, copy_generator
from lethe.exceptions import NotFittedError
from lethe.io import ModelFileError, open_model_file, save_model_file
from lethe.model_origin import reports_model_origin, set_origin
from lethe.noisygd.algorithm import noisy_gd
from lethe.noisygd.certificate import NoisyGDCertificate
from lethe.noisygd.config import CuratorConfig
from lethe.noisygd.database import Database, EditRequest, EditRequestError, Replacement
from lethe.noisygd.guarantees import (
    exposure_deletion_epsilon,
    noisy_gd_rdp,
    noisy_gd_rdp_convex,
)
from lethe.noisygd.models import BoundedMLPModel, LogisticModel, MLPModel, model_from_dict
from lethe.noisygd.requesters import AdaptiveRequester, NonAdaptiveRequester
from lethe.noisygd.schedule import (
    convex_deletion_epsilon,
    nonconvex_deletion_epsilon,
)

__all__ = [
    "AdaptiveRequester",
    "CuratorConfig",
    "Database",
    "EditRequest",
    "EditRequestError",
    "NoisyGDCurator",
    "NonAdaptiveRequester",
    "Replacement",
    "Transcript",
    "identity_publish",
    "interact",
]

Model = LogisticModel | MLPModel | BoundedMLPModel
# The file-format identifier of a saved NoisyGDCurator; it predates the module's name (edit_stream, formerly
# curator) and stays as it is so that files saved before the rename still load.
_STATE_KIND = "lethe.noisygd.curator"


def identity_publish(theta: np.ndarray) -> np.ndarray:
    """f_pub(θ) = θ (Def. 5.1): publish a copy of the model."""
    return np.array(theta, copy=True)



def _rng_state(rng: np.random.Generator) -> dict[str, Any]:
    return {"bit_generator": type(rng.bit_generator).__name__, "state": rng.bit_generator.state}


def _rng_from_state(d: dict[str, Any]) -> np.random.Generator:
    name = d["bit_generator"]
    if name not in ("PCG64", "PCG64DXSM", "Philox", "SFC64", "MT19937"):
        raise ValueError(f"Unknown bit generator {name!r}.")
    bg = getattr(np.random, name)()
    bg.state = d["state"]
    return np.random.Generator(bg)


@reports_model_origin
class NoisyGDCurator:
    """The data curator (A_Noisy-GD, Ā_Noisy-GD, f_pub) of Def. 5.1 / Algorithm 1.

    Parameters
    ----------
    model : LogisticModel or MLPModel
        The model θ parameterises (its ``mean_gradient`` is the data kernel).
    config : CuratorConfig
        η, σ², λ, K_A, K_Ā, ρ and the constants behind the certificates.
    random_state : None, int or numpy.random.Generator
        Source of Θ₀ and of the Gaussian noise.
    publish : callable, optional
        f_pub; default :func:`identity_publish`.

    Examples
    --------
    >>> from lethe.noisygd.schedule import convex_schedule
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 3)); X /= np.linalg.norm(X, axis=1, keepdims=True)
    >>> y = np.where(X[:, 0] > 0, 1.0, -1.0)
    >>> s = convex_schedule(lipschitz=1.0, smoothness=0.25, lam=0.1, n=200, d=3, r=1, q=2.0,
    ...                     epsilon_dp=1.0, epsilon_dd=0.5)
    >>> cur = NoisyGDCurator(LogisticModel(3), CuratorConfig.from_convex_schedule(s), random_state=0)
    >>> cert0 = cur.learn(Database(X, y))
    >>> cert1 = cur.unlearn(EditRequest.deletion([5], n_features=3))
    >>> cert1.epsilon_dd <= 0.5, cert1.steps == s.k_unlearn, cur.database.X[5].tolist()
    (True, True, [0.0, 0.0, 0.0])
    """

    def __init__(
        self,
        model: Model,
        config: CuratorConfig,
        *,
        random_state: RandomState = None,
        publish: Callable[[np.ndarray], Any] | None = None,
    ) -> None:
        if not isinstance(model, LogisticModel | MLPModel | BoundedMLPModel):
            raise TypeError(
                f"model must be a LogisticModel, MLPModel or BoundedMLPModel. Found {type(model).__name__}."
            )
        if not isinstance(config, CuratorConfig):
            raise TypeError(f"config must be a CuratorConfig. Found {type(config).__name__}.")
        if config.guarantee == "convex" and not model.convex:
            raise ValueError(f"guarantee='convex' needs a convex model. Found {type(model).__name__}.")
        if config.guarantee == "nonconvex":
            self._check_nonconvex_model(model, config)
        self.model = model
        self.config = config
        self._rng = check_random_state(random_state)
        self._publish = publish if publish is not None else identity_publish
        self._database: Database | None = None
        self._theta: np.ndarray | None = None
        self._step = 0
        self._total_steps = 0
        self._certificates: list[NoisyGDCertificate] = []

    # ------------------------------------------------------------------ construction helpers
    @staticmethod
    def _check_nonconvex_model(model: Model, config: CuratorConfig) -> None:
        """Thm 5.2's assumptions, from the model's proven constants: bounded, Lipschitz, smooth over all θ."""
        if not isinstance(model, BoundedMLPModel):
            raise ValueError(
                "guarantee='nonconvex' needs a model whose loss is bounded, Lipschitz and smooth over all theta "
                f"(BoundedMLPModel). Found {type(model).__name__}."
            )
        assert config.B is not None and config.smoothness is not None
        tol = 1.0 + 1e-12
        bound = config.sigma2 * math.log(config.B) / 4.0
        if model.loss_half_range() > bound * tol:
            raise ValueError(
                f"Thm 5.2 needs the loss to be sigma2*log(B)/4 = {bound!r}-bounded. The model's loss half-range is "
                f"{model.loss_half_range()!r}: increase B (see nonconvex_schedule_for_loss)."
            )
        if not config.clip and model.lipschitz(config.row_bound) > config.lipschitz * tol:
            raise ValueError(
                f"lipschitz = {config.lipschitz!r} is below the model's L = {model.lipschitz(config.row_bound)!r} "
                f"for rows of norm <= {config.row_bound!r}."
            )
        if model.smoothness(config.row_bound) > config.smoothness * tol:
            raise ValueError(
                f"smoothness = {config.smoothness!r} is below the model's beta = "
                f"{model.smoothness(config.row_bound)!r} for rows of norm <= {config.row_bound!r}."
            )

    @staticmethod
    def _theorem(config: CuratorConfig) -> str:
        if config.guarantee == "convex":
            return "Chourasia & Shah 2023: DP Thm G.7/G.9 (min), deletion Thm G.15 Eq. 114, adaptive Thm 4.3"
        if config.guarantee == "nonconvex":
            return ("Chourasia & Shah 2023: DP Thm G.7, deletion Thm 5.2 (G.22 + G.23, for the K_A, K_Abar run), "
                    "adaptive Thm 4.3")
        return "Chourasia & Shah 2023: DP Thm G.7, deletion Thm G.7 over the record's exposure, adaptive Thm 4.3"

    def _assumptions(self) -> tuple[str, ...]:
        c = self.config
        out = [f"every record has L2 norm <= {c.row_bound!r} (checked)"]
        if c.clip:
            out.append(f"per-example gradients clipped to L = {c.lipschitz!r} (Remark 5.3)")
        else:
            out.append(f"loss is L = {c.lipschitz!r}-Lipschitz on such records")
        if c.guarantee == "convex":
            out.append(f"loss convex and beta = {c.smoothness!r}-smooth; rho = N(0, {c.init_std**2!r} I)")
        if c.guarantee == "nonconvex":
            assert c.B is not None
            out.append(
                f"loss (sigma2 log B/4 = {c.sigma2 * math.log(c.B) / 4.0!r})-bounded, L-Lipschitz and "
                f"beta = {c.smoothness!r}-smooth over all theta (model's proven constants, checked); "
                f"rho = N(0, {c.init_std**2!r} I); edits of at most r = {c.max_edit_size} records"
            )
        return tuple(out)

    # ------------------------------------------------------------------ accessors
    def _require_learned(self) -> tuple[Database, np.ndarray]:
        if self._database is None or self._theta is None:
            raise NotFittedError("The curator has not learned yet: call learn(database) first.")
        return self._database, self._theta

    @property
    def database(self) -> Database:
        """D_i."""
        return self._require_learned()[0]

    @property
    def theta(self) -> np.ndarray:
        """A copy of the secret current model Θ̂_i."""
        return self._require_learned()[1].copy()

    @property
    def step(self) -> int:
        """i, the number of edits processed."""
        return self._step

    @property
    def certificates(self) -> tuple[NoisyGDCertificate, ...]:
        """Certificates of every operation so far."""
        return tuple(self._certificates)

    def publish(self) -> Any:
        """φ_i = f_pub(Θ̂_i)."""
        return self._publish(self._require_learned()[1])

    # ------------------------------------------------------------------ guarantees
    def _epsilon_dp(self, n: int, steps: int) -> float:
        """RDP of a model after ``steps`` Noisy-GD iterations of the (extended) run, w.r.t. one record.

        G.7 composes over every step; G.9 holds for the extended run too (its proof, like phase I of Thm G.15,
        only needs neighbouring databases at every step), so the convex mode certifies min(G.7, G.9).
        """
        c = self.config
        eps = noisy_gd_rdp(c.q, lipschitz=c.lipschitz, sigma2=c.sigma2, eta=c.eta, n=n, n_steps=steps)
        if c.guarantee == "convex":
            assert c.smoothness is not None
            eps = min(
                eps,
                noisy_gd_rdp_convex(
                    c.q, lipschitz=c.lipschitz, smoothness=c.smoothness, lam=c.lam, sigma2=c.sigma2, eta=c.eta,
                    n=n, n_steps=steps,
                ),
            )
        return eps

    def _adaptive_term(self, n: int, steps_before: int, p: int) -> float:
        """The p·ε_dp of Thm 4.3: RDP of the (at most p) releases a p-adaptive requester saw before the edit.

        Every observed release is a post-processing of the trajectory before the edit, so G.7 over those steps
        always bounds it. In the convex mode each observed release, given the previous one, is an extended
        Noisy-GD run from a common start, (q, 4qL²/(λσ²n²))-RDP by G.9 for any length; composing gives p times
        that. The smaller valid bound is used.
        """
        if p == 0:
            return 0.0
        c = self.config
        whole = noisy_gd_rdp(c.q, lipschitz=c.lipschitz, sigma2=c.sigma2, eta=c.eta, n=n, n_steps=steps_before)
        if c.guarantee == "convex":
            sup_g9 = 4.0 * c.q * c.lipschitz**2 / (c.lam * c.sigma2 * n**2)
            return min(whole, p * sup_g9)
        return whole

    def _epsilon_dd(self, n: int, exposed_steps: int) -> float:
        c = self.config
        if c.guarantee == "nonconvex":
            assert c.smoothness is not None and c.B is not None and c.max_edit_size is not None
            return nonconvex_deletion_epsilon(
                c.k_learn, c.k_unlearn, q=c.q, B=c.B, eta=c.eta, lam=c.lam, smoothness=c.smoothness,
                d=self.model.n_params, r=min(c.max_edit_size, n), n=n,
            )
        if c.guarantee == "convex":
            assert c.smoothness is not None
            return convex_deletion_epsilon(
                c.k_unlearn, q=c.q, lipschitz=c.lipschitz, smoothness=c.smoothness, lam=c.lam, sigma2=c.sigma2,
                eta=c.eta, n=n,
            )
        return exposure_deletion_epsilon(
            c.q, lipschitz=c.lipschitz, sigma2=c.sigma2, eta=c.eta, n=n, exposed_steps=exposed_steps
        )

    # ------------------------------------------------------------------ checks
    def _check_rows(self, X: np.ndarray, where: str) -> None:
        norms = np.linalg.norm(X, axis=1)
        bad = np.flatnonzero(norms > self.config.row_bound * (1.0 + 1e-9))
        if bad.size:
            raise EditRequestError(
                f"{where}: every record must have L2 norm <= row_bound = {self.config.row_bound!r}. "
                f"Found norm {norms[bad[0]]!r} at row {int(bad[0])}."
            )

    def _check_labels(self, y: np.ndarray, where: str) -> None:
        if self.model.n_classes == 2:
            ok = np.isin(y, (-1.0, 1.0, 0.0))
            rule = "in {-1, +1} (0 for dummy records)"
        else:
            ok = (y == np.round(y)) & (y >= 0) & (y < self.model.n_classes)
            rule = f"a class index in [0, {self.model.n_classes})"
        if not np.all(ok):
            i = int(np.flatnonzero(~ok)[0])
            raise EditRequestError(f"{where}: every label must be {rule}. Found {y[i]!r} at row {i}.")

    def _grad(self, database: Database) -> Callable[[np.ndarray], np.ndarray]:
        clip = self.config.lipschitz if self.config.clip else None
        X, y, model = database.X, database.y, self.model
        return lambda theta: model.mean_gradient(theta, X, y, clip)

    # ------------------------------------------------------------------ A and Ā
    def learn(self, database: Database) -> NoisyGDCertificate:
        """Θ̂₀ = A(D₀) = Noisy-GD(D₀, Θ ~ ρ, K_A) (Eq. 16); Algorithm 1, line 1. Resets the curator."""
        if not isinstance(database, Database):
            raise TypeError(f"database must be a Database. Found {type(database).__name__}.")
        if database.n_features != self.model.n_features:
            raise ValueError(
                f"database must have {self.model.n_features} features for this model. Found {database.n_features}."
            )
        self._check_rows(database.X, "learn")
        self._check_labels(database.y, "learn")
        c = self.config
        saved = self._rng.bit_generator.state
        try:
            theta0 = c.init_std * self._rng.standard_normal(self.model.n_params)
            res = noisy_gd(
                self._grad(database), theta0, c.k_learn, eta=c.eta, sigma2=c.sigma2, lam=c.lam, n_records=database.n,
                random_state=self._rng,
            )
        except BaseException:
            self._rng.bit_generator.state = saved
            raise
        cert = NoisyGDCertificate(
            operation="learn", step=0, theorem=self._theorem(c), q=c.q,
            epsilon_dp=self._epsilon_dp(database.n, c.k_learn), epsilon_dd=None, p=c.p, epsilon_dd_adaptive=None,
            steps=res.n_steps, gradient_evaluations=res.gradient_evaluations, n=database.n, r=0,
            assumptions=self._assumptions(),
        )
        self._database, self._theta = database, res.theta
        self._step, self._total_steps = 0, res.n_steps
        self._certificates = [cert]
        return cert

    def unlearn(self, request: EditRequest, *, p: int | None = None) -> NoisyGDCertificate:
        """Θ̂_i = Ā(D_{i−1}, u_i, Θ̂_{i−1}) = Noisy-GD(D_{i−1} ∘ u_i, Θ̂_{i−1}, K_Ā) (Eq. 17); then D_i = D_{i−1} ∘ u_i.

        Validates first; on any error nothing changes (database, model, generator, certificates).

        Parameters
        ----------
        request : EditRequest
            u_i.
        p : int, optional
            Adaptivity of the requester for Thm 4.3 (default ``config.p``).
        """
        database, theta = self._require_learned()
        if p is not None and (isinstance(p, bool) or not isinstance(p, int | np.integer) or p < 0):
            raise ValueError(f"p must be an integer >= 0. Found {p!r}.")
        database.validate(request)
        c = self.config
        if c.guarantee == "nonconvex" and c.max_edit_size is not None and request.r > c.max_edit_size:
            raise EditRequestError(
                f"this curator's Thm 5.2 certificate covers edits of at most max_edit_size = {c.max_edit_size} "
                f"records. Found {request.r}."
            )
        new_db = database.apply(request)
        idx = list(request.indices)
        self._check_rows(new_db.X[idx], "edit")
        self._check_labels(new_db.y[idx], "edit")
        c = self.config
        p_used = c.p if p is None else int(p)
        saved = self._rng.bit_generator.state
        step0 = self._step
        try:
            res = noisy_gd(
                self._grad(new_db), theta, c.k_unlearn, eta=c.eta, sigma2=c.sigma2, lam=c.lam, n_records=new_db.n,
                random_state=self._rng,
            )
            eps_dd = self._epsilon_dd(new_db.n, self._total_steps)
            # Thm 4.3: ε_dd + (RDP of the releases a p-adaptive requester saw), see _adaptive_term.
            eps_adaptive = eps_dd + self._adaptive_term(new_db.n, self._total_steps, p_used)
            cert = NoisyGDCertificate(
                operation="edit", step=self._step + 1, theorem=self._theorem(c), q=c.q,
                epsilon_dp=self._epsilon_dp(new_db.n, self._total_steps + res.n_steps), epsilon_dd=eps_dd, p=p_used,
                epsilon_dd_adaptive=eps_adaptive, steps=res.n_steps,
                gradient_evaluations=res.gradient_evaluations, n=new_db.n, r=request.r,
                assumptions=self._assumptions(),
            )
            # Commit, in one statement (an interrupt lands before or after it, never inside): the old database and
            # model are dropped; nothing derived from replaced records is kept. ε_dp counts every step run.
            self.__dict__.update(_database=new_db, _theta=res.theta, _step=step0 + 1,
                                 _total_steps=self._total_steps + res.n_steps,
                                 _certificates=[*self._certificates, cert])
        except BaseException:
            if self._step == step0:  # not committed: the noise drawn is returned to the generator
                self._rng.bit_generator.state = saved
            raise
        return cert

    def unlearned(self, request: EditRequest, *, p: int | None = None) -> tuple[NoisyGDCurator, NoisyGDCertificate]:
        """:meth:`unlearn` on a copy of this curator: (the curator after the edit, its certificate). This curator is
        left unchanged, so a caller that keeps state beside it (the estimators' row mask and keys) adopts both in
        one step, and an exception anywhere leaves both as they were."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.__dict__.update(_rng=copy_generator(self._rng), _certificates=list(self._certificates))
        cert = new.unlearn(request, p=p)
        return new, cert

    # ------------------------------------------------------------------ state
    def state_arrays(self) -> dict[str, np.ndarray]:
        """Every array in the curator's state: the database D_i (``X``, ``y``) and the model Θ̂_i (``theta``).

        Nothing else is kept: no gradients, no noise, no previous models or databases. A deleted record can
        therefore only influence the state through Θ̂_i, which is what Def. 4.1 certifies.
        """
        database, theta = self._require_learned()
        return {"X": database.X.copy(), "y": database.y.copy(), "theta": theta.copy()}

    def state_meta(self) -> dict[str, Any]:
        """The JSON part of the state: configuration, counters, generator state, certificates (no data)."""
        return {
            "kind": _STATE_KIND,
            "model": self.model.to_dict(),
            "config": self.config.to_dict(),
            "step": self._step,
            "total_steps": self._total_steps,
            "rng": _rng_state(self._rng),
            "certificates": [c.to_dict() for c in self._certificates],
        }

    def save(self, path: str | Path, *, key: bytes | str | None = None) -> Path:
        """Write the state to one ``.npz`` file (no pickle; owner-only, atomic). The publish function is not saved.

        The file holds SECRET state: the model Θ̂_i (secret whenever f_pub is not the identity) and the generator
        state (whoever knows it knows the noise of every later run). It carries an HMAC-SHA256 tag of every array
        and the metadata, which :meth:`load` checks, under the key ``key`` (bytes or hexadecimal str), else
        ``$LETHE_MODEL_KEY``, else the key file (``$LETHE_MODEL_KEY_FILE``, else ``~/.config/lethe/model.key``),
        created on the first save where none exists (:func:`lethe.io.save_model_file`)."""
        return save_model_file(path, self.state_arrays(), self.state_meta(), key=key, model=self)

    @classmethod
    def load(cls, path: str | Path, *, key: bytes | str | None = None,
             publish: Callable[[np.ndarray], Any] | None = None,
             trust_unauthenticated: bool = False) -> NoisyGDCurator:
        """Inverse of :meth:`save`, after authenticating and checking the file.

        Authentication follows :func:`lethe.io.open_model_file`: the file needs a tag that matches under the key;
        one without (never keyed, or stripped), or under another key, is refused unless
        ``trust_unauthenticated=True``, which every later certificate then states. Then, always,
        :meth:`from_state`'s invariant checks. Any failure raises :class:`lethe.io.ModelFileError` (a
        ``ValueError``); nothing is loaded."""
        opened = open_model_file(path, key=key, trust_unauthenticated=trust_unauthenticated)
        cur = cls.from_state(opened.arrays, opened.meta, where=str(path), publish=publish)
        return set_origin(cur, opened.origin)

    @classmethod
    def from_state(cls, arrays: dict[str, np.ndarray], meta: dict[str, Any], *, where: str = "state",
                   publish: Callable[[np.ndarray], Any] | None = None) -> NoisyGDCurator:
        """A curator from :meth:`state_arrays` and :meth:`state_meta`, after checking that they describe a state
        whose certificates hold:

        * structure: the arrays X (n × p), y (n,), θ (the model's parameter count), float64 and finite; the model
          and configuration valid (their own checks, e.g. Thm G.15's ρ and η for the convex mode);
        * data: every row within ``row_bound`` and every label valid for the model (as :meth:`learn` checks);
        * counters: i = ``step`` ≥ 0 edits and ``total_steps`` = K_A + i·K_Ā (every run is K_A or K_Ā steps);
        * the accountant: exactly i + 1 certificates (learning, then edits 1..i), each equal — every number, the
          theorem and the assumptions — to the certificate this configuration issues for that operation on a
          database of n records (recomputed here; the adaptivity p is the certificate's own);
        * the generator state names a known bit generator.

        Raises :class:`lethe.io.ModelFileError` naming the first failure."""

        def fail(msg: str) -> ModelFileError:
            return ModelFileError(f"{where}: {msg} The file was edited or corrupted; it is refused.")

        if meta.get("kind") != _STATE_KIND:
            raise ModelFileError(f"{where} does not hold a Noisy-GD curator. Found kind {meta.get('kind')!r}.")
        if set(arrays) != {"X", "y", "theta"}:
            raise fail(f"expected arrays X, y, theta. Found {sorted(arrays)}.")
        try:
            cur = cls(model_from_dict(meta["model"]), CuratorConfig(**meta["config"]), publish=publish)
            cur._rng = _rng_from_state(meta["rng"])
        except (TypeError, ValueError, KeyError) as e:
            raise fail(f"its model, configuration or generator state is not valid: {e}") from None
        step, total = cur._restore(arrays["X"], arrays["y"], arrays["theta"], meta.get("step"),
                                   meta.get("total_steps"), fail)
        n = cur.database.n
        raw = meta.get("certificates")
        if not isinstance(raw, list) or len(raw) != step + 1:
            raise fail(f"expected {step + 1} certificates (learning and {step} edits). "
                       f"Found {len(raw) if isinstance(raw, list) else type(raw).__name__}.")
        try:
            certs = [NoisyGDCertificate.from_dict(d) for d in raw]
        except (TypeError, ValueError, KeyError) as e:
            raise fail(f"a certificate is not valid: {e}") from None
        for i, cert in enumerate(certs):
            if cert != cur._expected_certificate(i, n, cert.p, cert.r):
                raise fail(f"certificate {i} is not the one this configuration issues for operation {i} on {n} "
                           "records (its numbers, theorem or assumptions were changed).")
        cur._certificates = certs
        return cur

    @classmethod
    def resume(cls, model: Model, config: CuratorConfig, X: np.ndarray, y: np.ndarray, theta: np.ndarray, *,
               step: int, total_steps: int, random_state: RandomState = None,
               publish: Callable[[np.ndarray], Any] | None = None, where: str = "state") -> NoisyGDCurator:
        """A curator that continues a run whose state is held elsewhere — a service's model versions keep the
        database, θ and the counters, and the certificate history in their own ledger — after the checks
        :meth:`from_state` makes on them (finite float64 arrays of the model's shapes, every row within
        ``row_bound``, valid labels, ``total_steps`` = K_A + ``step``·K_Ā). :attr:`certificates` then holds the
        operations made after resuming only. The one public way to restore a curator without a file (the service's
        Noisy-GD adapter uses it; no caller writes the curator's attributes). Raises
        :class:`lethe.io.ModelFileError` (a ``ValueError``) naming the first failure."""

        def fail(msg: str) -> ModelFileError:
            return ModelFileError(f"{where}: {msg} The state was edited or corrupted; it is refused.")

        cur = cls(model, config, random_state=random_state, publish=publish)
        cur._restore(X, y, theta, step, total_steps, fail)
        return cur

    def _restore(self, X: np.ndarray, y: np.ndarray, theta: np.ndarray, step_raw: Any, total_raw: Any,
                 fail: Callable[[str], ModelFileError]) -> tuple[int, int]:
        """Check (X, y, θ, step, total_steps) as a state of this curator's model and configuration and adopt it;
        returns (step, total_steps). ``fail`` makes the error to raise from a message."""
        p = self.model.n_features
        for name, arr, shape in (("X", X, (X.shape[0] if X.ndim == 2 else -1, p)), ("y", y, (X.shape[0],)),
                                 ("theta", theta, (self.model.n_params,))):
            if arr.dtype != np.float64 or arr.shape != shape or not np.all(np.isfinite(arr)):
                raise fail(f"{name} must be finite float64 of shape {shape}. Found {arr.dtype} {arr.shape}.")
        if int(X.shape[0]) < 1:
            raise fail("the database has no record.")
        try:
            self._check_rows(X, "load")
            self._check_labels(y, "load")
        except EditRequestError as e:
            raise fail(str(e)) from None
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (step_raw, total_raw)):
            raise fail(f"step and total_steps must be integers >= 0. Found {step_raw!r}, {total_raw!r}.")
        step, total = int(step_raw), int(total_raw)
        c = self.config
        if total != c.k_learn + step * c.k_unlearn:
            raise fail(f"total_steps must be K_A + step*K_Abar = {c.k_learn + step * c.k_unlearn}. Found {total}.")
        self._database = Database(X, y)
        self._theta = np.array(theta, dtype=np.float64)
        self._step, self._total_steps = step, total
        return step, total

    def _expected_certificate(self, i: int, n: int, p: int, r: int) -> NoisyGDCertificate:
        """The certificate :meth:`learn` (i = 0) or the i-th :meth:`unlearn` issues on a database of n records, for
        a requester of adaptivity p and an edit of r records (the same formulas, recomputed)."""
        c = self.config
        if i == 0:
            return NoisyGDCertificate(
                operation="learn", step=0, theorem=self._theorem(c), q=c.q,
                epsilon_dp=self._epsilon_dp(n, c.k_learn), epsilon_dd=None, p=c.p, epsilon_dd_adaptive=None,
                steps=c.k_learn, gradient_evaluations=n * c.k_learn, n=n, r=0, assumptions=self._assumptions())
        before = c.k_learn + (i - 1) * c.k_unlearn
        eps_dd = self._epsilon_dd(n, before)
        return NoisyGDCertificate(
            operation="edit", step=i, theorem=self._theorem(c), q=c.q,
            epsilon_dp=self._epsilon_dp(n, before + c.k_unlearn), epsilon_dd=eps_dd, p=p,
            epsilon_dd_adaptive=eps_dd + self._adaptive_term(n, before, p), steps=c.k_unlearn,
            gradient_evaluations=n * c.k_unlearn, n=n, r=r, assumptions=self._assumptions())

    # -- no pickle of a curator that holds a secret ----------------------------------------------------------------
    def __getstate__(self) -> Any:
        if self._theta is not None:
            raise TypeError(
                "A NoisyGDCurator that has learned cannot be pickled: it holds the SECRET model state and generator "
                "state (whoever knows the generator knows every later noise draw) and the database, which pickle "
                "would write with the default file mode, and loading a pickle runs code. Use curator.save(path) and "
                "NoisyGDCurator.load(path) (no pickle, owner-only, optionally authenticated).")
        return self.__dict__.copy()


@dataclass(frozen=True)
class Transcript:
    """The interaction transcript of Algorithm 1: φ₀, φ₁, … and u₁, u₂, … and the certificates."""

    published: tuple[Any, ...]
    requests: tuple[EditRequest, ...]
    certificates: tuple[NoisyGDCertificate, ...]


def interact(
    curator: NoisyGDCurator,
    database: Database,
    requester: NonAdaptiveRequester | AdaptiveRequester,
    n_edits: int,
) -> Transcript:
    """Algorithm 1: learn on D₀, publish φ₀, then for i = 1..n_edits get u_i from the requester, unlearn, publish.

    The requester sees only the published objects at its observable indices (Def. 2.5); certificates use its p.

    Examples
    --------
    >>> from lethe.noisygd.schedule import convex_schedule
    >>> X = np.eye(4)[:, :2] * 0.5; y = np.array([1.0, -1.0, 1.0, -1.0])
    >>> s = convex_schedule(lipschitz=1.0, smoothness=0.25, lam=1.0, n=4, d=2, r=1, q=2.0,
    ...                     epsilon_dp=1.0, epsilon_dd=0.5)
    >>> cur = NoisyGDCurator(LogisticModel(2), CuratorConfig.from_convex_schedule(s), random_state=0)
    >>> req = NonAdaptiveRequester([EditRequest.deletion([0], 2), EditRequest.deletion([1], 2)])
    >>> t = interact(cur, Database(X, y), req, 2)
    >>> len(t.published), [c.operation for c in t.certificates]
    (3, ['learn', 'edit', 'edit'])
    """
    n_edits = int(n_edits)
    if n_edits < 0:
        raise ValueError(f"n_edits must be >= 0. Found {n_edits}.")
    published: dict[int, Any] = {}
    requests: list[EditRequest] = []
    certs = [curator.learn(database)]
    published[0] = curator.publish()
    for i in range(1, n_edits + 1):
        u = requester(published, tuple(requests))
        certs.append(curator.unlearn(u, p=requester.p))
        published[i] = curator.publish()
        requests.append(u)
    return Transcript(
        published=tuple(published[i] for i in range(n_edits + 1)), requests=tuple(requests), certificates=tuple(certs)
    )
