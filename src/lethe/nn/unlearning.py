r"""Noisy clipped fine-tuning unlearning for any ``torch.nn.Module`` (Koloskova et al., ICML 2025).

A removal (or a batch of removals) runs, on the *retained* data only,

1. projection of all parameters onto the ball ‖θ‖₂ ≤ C₀ (``model_radius``);
2. T steps :math:`θ ← (1 - ηλ)θ - η\,\bar g + \mathcal N(0, σ^2 I)` with :math:`‖\bar g‖ ≤ C`: ``clipping="per_sample"``
   averages per-sample gradients each clipped to C (computed with ``torch.func.vmap`` over ``torch.func.grad``, exact
   for every layer type vmap supports), ``clipping="batch"`` clips the mini-batch gradient (the paper's choice);
3. optionally ``post_steps`` plain SGD steps on the retained data (post-processing: the same map applied to the
   unlearned and the retrained model cannot increase their divergence).

(σ, T) come from :func:`lethe.nn.accounting.calibrate_finetune`. The guarantee holds for *any* starting model, so the
user may train with their own loop (or :func:`train`), and sequential requests each get the full (ε, δ) against the
model retrained on the data retained at that request and then unlearned the same way. Requirements checked here:
the model has no buffers (BatchNorm running statistics would carry the removed records; use GroupNorm/LayerNorm),
and every parameter is part of θ (frozen parameters are projected and noised like the others).

Floating point: the clipping bound is enforced with a relative margin of 1e-5 (norms in float64); the update itself
runs in the model's dtype, and its rounding (≈ 1e-7 ‖θ‖ in float32) is not accounted for, as in every DP-SGD library.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from lethe._rng import RandomState, check_random_state
from lethe._validation import check_choice, check_nonnegative, check_positive, check_positive_int
from lethe.io import JsonRecord
from lethe.nn.accounting import FineTuneSchedule, ModelClipSchedule

__all__ = [
    "ModelClipCertificate",
    "NNUnlearningCertificate",
    "check_module",
    "clipped_gradient",
    "flat_parameters",
    "per_sample_gradients",
    "project_model",
    "train",
    "unlearn",
    "unlearn_model_clip",
]

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
_CLIP_MARGIN = 1.0 - 1e-5


def _cross_entropy(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(logits, y)


def check_module(model: Any) -> nn.Module:
    """Refuse what noisy fine-tuning cannot certify: not a Module, no parameters, or any buffer.

    Buffers (e.g. BatchNorm's running mean) are state computed from the training data that the noisy steps do not
    touch, so they would carry the removed records past the unlearning.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module. Found {type(model).__name__}.")
    params = list(model.parameters())
    if not params:
        raise ValueError("model must have at least one parameter. Found 0.")
    buffers = [name for name, _ in model.named_buffers()]
    if buffers:
        raise ValueError("model must have no buffers (they hold statistics of the removed records that noisy "
                         f"fine-tuning does not erase; use GroupNorm/LayerNorm instead of BatchNorm). Found {buffers}.")
    for name, p in model.named_parameters():
        if not p.dtype.is_floating_point:
            raise TypeError(f"parameter {name} must be floating point. Found {p.dtype}.")
    return model


def flat_parameters(model: nn.Module) -> np.ndarray:
    """All parameters of ``model`` concatenated (float64 copy), in ``named_parameters`` order."""
    return np.concatenate([p.detach().to(torch.float64).reshape(-1).cpu().numpy() for p in model.parameters()])


def load_flat_parameters(model: nn.Module, theta: np.ndarray) -> None:
    """Inverse of :func:`flat_parameters` (in place)."""
    theta = np.asarray(theta, dtype=np.float64)
    total = sum(p.numel() for p in model.parameters())
    if theta.shape != (total,):
        raise ValueError(f"theta must have shape ({total},). Found {theta.shape}.")
    i = 0
    with torch.no_grad():
        for p in model.parameters():
            k = p.numel()
            p.copy_(torch.from_numpy(theta[i:i + k]).reshape(p.shape).to(p.dtype))
            i += k


def _global_norm(tensors: Sequence[torch.Tensor]) -> float:
    return math.sqrt(math.fsum(float(torch.sum(t.detach().to(torch.float64) ** 2)) for t in tensors))


def project_model(model: nn.Module, radius: float) -> bool:
    """Project all parameters onto the Euclidean ball ‖θ‖₂ ≤ ``radius`` in place; True if they were scaled.

    The scale is radius·(1 − 1e-5)/‖θ‖ so that rounding cannot leave ‖θ‖ above ``radius``.
    """
    r = check_positive("radius", radius)
    params = list(model.parameters())
    norm = _global_norm(params)
    if norm <= r:
        return False
    scale = r * _CLIP_MARGIN / norm
    with torch.no_grad():
        for p in params:
            p.mul_(scale)
    return True


def _as_tensors(X: Any, y: Any) -> tuple[torch.Tensor, torch.Tensor]:
    Xt = X if isinstance(X, torch.Tensor) else torch.as_tensor(np.asarray(X))
    yt = y if isinstance(y, torch.Tensor) else torch.as_tensor(np.asarray(y))
    if Xt.ndim < 1 or yt.ndim < 1 or Xt.shape[0] != yt.shape[0]:
        raise ValueError(f"X and y must have the same number of rows. Found {tuple(Xt.shape)} and {tuple(yt.shape)}.")
    if Xt.shape[0] == 0:
        raise ValueError("the retained data must have at least one row. Found 0.")
    return Xt, yt


def per_sample_gradients(model: nn.Module, X: torch.Tensor, y: torch.Tensor,
                         loss_fn: LossFn = _cross_entropy) -> dict[str, torch.Tensor]:
    """Gradient of ``loss_fn(model(x_i[None]), y_i[None])`` for every row i, each of shape (B, *param.shape).

    Computed with ``torch.func.vmap(torch.func.grad(...))`` over ``functional_call``, so each row goes through the
    module alone (exact for any layer without cross-sample state; BatchNorm is refused by :func:`check_module`).
    """
    params = {k: v.detach() for k, v in model.named_parameters()}

    def one(p: dict[str, torch.Tensor], x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return loss_fn(functional_call(model, p, (x.unsqueeze(0),)), t.unsqueeze(0))

    out: dict[str, torch.Tensor] = vmap(grad(one), in_dims=(None, 0, 0))(params, X, y)
    return out


def clipped_gradient(model: nn.Module, X: torch.Tensor, y: torch.Tensor, clip: float, *,
                     clipping: str = "per_sample", loss_fn: LossFn = _cross_entropy) -> list[torch.Tensor]:
    """A mini-batch gradient of norm ≤ ``clip`` (one tensor per parameter, ``model.parameters()`` order).

    ``"per_sample"``: mean over rows of g_i·min(1, C'/‖g_i‖), C' = C(1 − 1e-5), norms in float64 over all
    parameters; ``"batch"``: the mean-loss gradient scaled to norm ≤ C'.
    """
    c = check_positive("clip", clip) * _CLIP_MARGIN
    mode = check_choice("clipping", clipping, ("per_sample", "batch"))
    names = [k for k, _ in model.named_parameters()]
    if mode == "per_sample":
        g = per_sample_gradients(model, X, y, loss_fn)
        sq = sum(torch.sum(g[k].detach().to(torch.float64).reshape(X.shape[0], -1) ** 2, dim=1) for k in names)
        assert isinstance(sq, torch.Tensor)
        factor = torch.clamp(c / torch.sqrt(sq).clamp_min(1e-300), max=1.0)
        out = []
        for k in names:
            gk = g[k]
            f = factor.to(gk.dtype).reshape((-1,) + (1,) * (gk.ndim - 1))
            out.append(torch.mean(gk * f, dim=0))
        # the mean of vectors of norm ≤ C' has norm ≤ C'; guard the float32 rounding of the mean as well
        norm = _global_norm(out)
        if norm > c:
            out = [t * (c / norm) for t in out]
        return out
    params = list(model.parameters())
    loss = loss_fn(model(X), y)
    grads = list(torch.autograd.grad(loss, params))
    norm = _global_norm(grads)
    if norm > c:
        grads = [t * (c / norm) for t in grads]
    return [t.detach() for t in grads]


def _torch_generator(rng: np.random.Generator) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(int(rng.integers(0, 2**63 - 1)))
    return g


def train(model: nn.Module, X: Any, y: Any, *, epochs: int = 1, lr: float = 0.1, batch_size: int = 64,
          weight_decay: float = 0.0, momentum: float = 0.0, loss_fn: LossFn = _cross_entropy,
          random_state: RandomState = None) -> nn.Module:
    """Ordinary (non-private) mini-batch SGD — our training loop; any other loop works as well.

    Unlearning certifies any starting model, so training needs no noise, clipping or projection.
    """
    check_module(model)
    Xt, yt = _as_tensors(X, y)
    e = check_positive_int("epochs", epochs)
    eta = check_positive("lr", lr)
    b = check_positive_int("batch_size", batch_size)
    rng = check_random_state(random_state)
    opt = torch.optim.SGD(model.parameters(), lr=eta, momentum=check_nonnegative("momentum", momentum),
                          weight_decay=check_nonnegative("weight_decay", weight_decay))
    model.train()
    n = Xt.shape[0]
    for _ in range(e):
        perm = torch.from_numpy(rng.permutation(n))
        for i in range(0, n, b):
            idx = perm[i:i + b]
            opt.zero_grad(set_to_none=True)
            loss_fn(model(Xt[idx]), yt[idx]).backward()
            opt.step()
    model.eval()
    return model


class _RemovalCertificate(JsonRecord):
    """What the two removal certificates below share: the :class:`lethe.protocols.Certificate` protocol's
    ``guarantee`` (the promise of an (ε, δ) removal by ``_method``) and ``observer``, and ``to_dict`` with both."""

    _method: ClassVar[str]
    epsilon: float
    delta: float
    n_removed: int
    theorem: str

    @property
    def guarantee(self) -> str:
        """What is promised, by which theorem (the :class:`lethe.protocols.Certificate` protocol)."""
        return (f"({self.epsilon!r}, {self.delta!r})-unlearning of the {self.n_removed} removed record(s) by "
                f"{self._method}, for every starting model; {self.theorem}")

    @property
    def observer(self) -> str:
        """Whom it covers: one published version, the model after this removal against the model retrained without
        the records and unlearned the same way. Earlier versions were trained with the records: an observer who kept
        one is not covered."""
        return "one published version"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict: the fields plus ``guarantee`` and ``observer``."""
        return {**super().to_dict(), "guarantee": self.guarantee, "observer": self.observer}


@dataclass(frozen=True)
class NNUnlearningCertificate(_RemovalCertificate):
    """What one noisy fine-tuning removal guarantees, by which theorem, with which numbers, and its cost.

    Attributes
    ----------
    operation : str
        ``"unlearn"``.
    theorem : str
        The results the numbers come from.
    epsilon, delta : float
        The promise: the published model is (ε, δ)-indistinguishable from the model retrained without the removed
        records (by any algorithm whose output is then passed through the same unlearning), for every
        starting model — so for every earlier history of requests.
    epsilon_certified : float
        ε the schedule certifies at δ (≤ ε).
    rdp_slope : float
        ε₀ with Rényi divergence ≤ α ε₀ at every order α > 1.
    sigma, steps, lr, grad_clip, model_radius, weight_decay : float / int
        σ, T, η, C, C₀, λ used.
    clipping : str
        ``"per_sample"`` or ``"batch"``.
    batch_size : int
        Rows per noisy step (sampled from the retained data only).
    post_steps : int
        Plain SGD steps on the retained data after the noisy steps (post-processing).
    post_radius : float or None
        Projection radius applied before the post-processing steps (None: none).
    post_momentum : float
        Momentum of the post-processing steps.
    n_retained, n_removed : int
        Sizes of the retained data and of this request.
    gradient_evaluations : int
        Per-example gradients computed ((T + post_steps) × batch size).
    """

    operation: str
    theorem: str
    epsilon: float
    delta: float
    epsilon_certified: float
    rdp_slope: float
    sigma: float
    steps: int
    lr: float
    grad_clip: float
    model_radius: float
    weight_decay: float
    clipping: str
    batch_size: int
    post_steps: int
    post_radius: float | None
    post_momentum: float
    n_retained: int
    n_removed: int
    gradient_evaluations: int

    _method: ClassVar[str] = "noisy clipped fine-tuning"

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> NNUnlearningCertificate:
        """Inverse of :meth:`to_dict`; raises ``ValueError`` on missing or unknown keys, or when ``guarantee`` or
        ``observer`` (derived, optional) disagree with the fields."""
        names = {f.name for f in fields(cls)}
        core = {k: v for k, v in d.items() if k not in ("guarantee", "observer")}
        if set(core) != names:
            raise ValueError(f"certificate keys must be {sorted(names)}. Found {sorted(d)}.")
        cert = cls(**core)
        for k in ("guarantee", "observer"):
            if k in d and d[k] != getattr(cert, k):
                raise ValueError(f"certificate key {k!r} must be {getattr(cert, k)!r} for these fields. "
                                 f"Found {d[k]!r}.")
        return cert



@contextlib.contextmanager
def _restored_on_failure(model: nn.Module) -> Iterator[None]:
    """Put ``model`` in eval mode for an unlearning run, with gradients on; if anything fails, restore its parameters
    and mode. The thread's grad mode is set back to the caller's in every case.

    The run differentiates, so it turns grad mode on itself: a caller's ``torch.no_grad()`` — or one that an
    interrupt left set, since an exception raised as a ``with torch.no_grad():`` block ends can skip its
    ``__exit__`` (a ``KeyboardInterrupt`` entering it, a tracer's fault on the ``with`` line) — must not fail the
    run, and a failed run must not leave the thread without gradients (issue 35: a retry then failed in autograd).
    """
    backup = [p.detach().clone() for p in model.parameters()]
    was_training = model.training
    grad_was = torch.is_grad_enabled()
    try:
        model.eval()
        torch.set_grad_enabled(True)
        yield
    except BaseException:
        torch.set_grad_enabled(False)
        for p, saved in zip(model.parameters(), backup, strict=True):
            p.copy_(saved)
        model.train(was_training)
        raise
    finally:
        torch.set_grad_enabled(grad_was)


@dataclass
class _Run:
    """The checked arguments shared by :func:`unlearn` and :func:`unlearn_model_clip`: retained data, batch size,
    post-processing, and the randomness (a numpy Generator for batches, a torch Generator for noise)."""

    Xt: torch.Tensor
    yt: torch.Tensor
    n: int
    bb: int
    post: int
    plr: float
    prad: float | None
    pmom: float
    removed: int
    rng: np.random.Generator
    gen: torch.Generator

    @classmethod
    def check(cls, X_retained: Any, y_retained: Any, *, lr: float, batch_size: int, post_steps: int,
              post_lr: float | None, post_radius: float | None, post_momentum: float, n_removed: int,
              random_state: RandomState) -> _Run:
        Xt, yt = _as_tensors(X_retained, y_retained)
        b = check_positive_int("batch_size", batch_size)
        post = int(check_nonnegative("post_steps", post_steps))
        if post != post_steps:
            raise ValueError(f"post_steps must be an integer >= 0. Found {post_steps!r}.")
        plr = lr if post_lr is None else check_positive("post_lr", post_lr)
        prad = None if post_radius is None else check_positive("post_radius", post_radius)
        pmom = check_nonnegative("post_momentum", post_momentum)
        removed = int(check_nonnegative("n_removed", n_removed))
        rng = check_random_state(random_state)
        gen = _torch_generator(rng)
        n = int(Xt.shape[0])
        return cls(Xt, yt, n, min(b, n), post, plr, prad, pmom, removed, rng, gen)

    def batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """A mini-batch of the retained rows, drawn without replacement."""
        idx = torch.from_numpy(self.rng.choice(self.n, size=self.bb, replace=False))
        return self.Xt[idx], self.yt[idx]

    def post_process(self, model: nn.Module, params: Sequence[torch.Tensor], loss_fn: LossFn) -> None:
        """The optional projection onto ``post_radius`` and plain (momentum) SGD steps on the retained data."""
        if self.prad is not None:
            project_model(model, self.prad)
        velocity = [torch.zeros_like(p) for p in params]
        for _ in range(self.post):
            Xb, yb = self.batch()
            grads = torch.autograd.grad(loss_fn(model(Xb), yb), params)
            with torch.no_grad():
                for p, gp, v in zip(params, grads, velocity, strict=True):
                    v.mul_(self.pmom).add_(gp)
                    p.add_(v, alpha=-self.plr)


def unlearn(model: nn.Module, X_retained: Any, y_retained: Any, *, schedule: FineTuneSchedule,
            batch_size: int = 64, clipping: str = "per_sample", loss_fn: LossFn = _cross_entropy,
            post_steps: int = 0, post_lr: float | None = None, post_radius: float | None = None,
            post_momentum: float = 0.0, n_removed: int = 0,
            random_state: RandomState = None) -> NNUnlearningCertificate:
    r"""Unlearn by noisy clipped fine-tuning on the retained data, in place (Koloskova et al. 2025).

    Parameters
    ----------
    model : torch.nn.Module
        The current model (trained on anything, e.g. on data that included the removed records). Modified in place.
    X_retained, y_retained : array-like or torch.Tensor
        The data retained after the request — it must not contain the removed records.
    schedule : FineTuneSchedule
        From :func:`lethe.nn.accounting.calibrate_finetune`: σ, T, η, C, C₀, λ.
    batch_size : int, default 64
        Rows per noisy step, drawn without replacement from the retained data (min(batch_size, n)).
    clipping : {"per_sample", "batch"}, default "per_sample"
        How the step's gradient is bounded by C.
    loss_fn : callable, default cross-entropy
        ``loss_fn(outputs, targets)`` → mean loss.
    post_steps : int, default 0
        Plain SGD steps on the retained data afterwards (post-processing; free).
    post_lr : float, optional
        Step size of the post-processing steps (default η).
    post_radius : float, optional
        Project onto ‖θ‖ ≤ ``post_radius`` before the post-processing steps (a data-independent map, so free; the
        noisy phase leaves a model of norm ≈ σ√(dT) that plain SGD recovers from slowly).
    n_removed : int, default 0
        Records this request removed (reported in the certificate only).
    random_state : None, int or numpy.random.Generator
        Batches and noise.

    Returns
    -------
    NNUnlearningCertificate

    Notes
    -----
    If anything fails (bad input, an error inside the module) the model's parameters are restored, so a failed
    removal leaves the model exactly as it was.
    """
    check_module(model)
    if not isinstance(schedule, FineTuneSchedule):
        raise TypeError("schedule must be a FineTuneSchedule (see calibrate_finetune). "
                        f"Found {type(schedule).__name__}.")
    mode = check_choice("clipping", clipping, ("per_sample", "batch"))
    run = _Run.check(X_retained, y_retained, lr=schedule.lr, batch_size=batch_size, post_steps=post_steps,
                     post_lr=post_lr, post_radius=post_radius, post_momentum=post_momentum, n_removed=n_removed,
                     random_state=random_state)
    with _restored_on_failure(model):
        params = list(model.parameters())
        project_model(model, schedule.model_radius)
        decay = 1.0 - schedule.lr * schedule.weight_decay
        for _ in range(schedule.steps):
            Xb, yb = run.batch()
            g = clipped_gradient(model, Xb, yb, schedule.grad_clip, clipping=mode, loss_fn=loss_fn)
            with torch.no_grad():
                for p, gp in zip(params, g, strict=True):
                    noise = torch.randn(p.shape, generator=run.gen, dtype=p.dtype)
                    p.mul_(decay).add_(gp, alpha=-schedule.lr).add_(noise, alpha=schedule.sigma)
        run.post_process(model, params, loss_fn)
    return NNUnlearningCertificate(
        operation="unlearn", **schedule.to_dict(), clipping=mode, batch_size=run.bb, post_steps=run.post,
        post_radius=run.prad, post_momentum=run.pmom, n_retained=run.n, n_removed=run.removed,
        gradient_evaluations=(schedule.steps + run.post) * run.bb)


@dataclass(frozen=True)
class ModelClipCertificate(_RemovalCertificate):
    """What one model-clipping removal (Koloskova et al. 2025, second variant) guarantees, and its cost.

    Attributes
    ----------
    operation : str
        ``"unlearn_model_clip"``.
    theorem : str
        The results the numbers come from.
    epsilon, delta : float
        The promise: (ε, δ)-indistinguishable from the same procedure applied to *any* other starting model (in
        particular one retrained without the removed records), so for every earlier history of requests.
    delta_certified : float
        δ the schedule certifies at ε (≤ δ).
    sigma, steps, model_clip, lr, weight_decay : float / int
        σ, T, C₂, η, λ used.
    batch_size, post_steps, post_momentum, n_retained, n_removed, gradient_evaluations
        As in :class:`NNUnlearningCertificate`.
    post_radius : float or None
        Projection radius before the post-processing steps (None: none).
    """

    operation: str
    theorem: str
    epsilon: float
    delta: float
    delta_certified: float
    sigma: float
    steps: int
    model_clip: float
    lr: float
    weight_decay: float
    batch_size: int
    post_steps: int
    post_radius: float | None
    post_momentum: float
    n_retained: int
    n_removed: int
    gradient_evaluations: int

    _method: ClassVar[str] = "model clipping"


def unlearn_model_clip(model: nn.Module, X_retained: Any, y_retained: Any, *, schedule: ModelClipSchedule,
                       batch_size: int = 64, loss_fn: LossFn = _cross_entropy, post_steps: int = 0,
                       post_lr: float | None = None, post_radius: float | None = None, post_momentum: float = 0.0,
                       n_removed: int = 0, random_state: RandomState = None) -> ModelClipCertificate:
    r"""Unlearn by model clipping (Koloskova et al. 2025), in place.

    T steps :math:`θ ← Π_{C_2}\bigl((1 - ηλ)θ - η\,g(θ)\bigr) + \mathcal N(0, σ^2 I)` on mini-batches of the
    retained data, g the plain (unclipped) mini-batch gradient — the projection onto ‖θ‖ ≤ C₂ alone bounds the step,
    so neither gradient clipping nor an initial projection is needed — then the same optional post-processing as
    :func:`unlearn`. (σ, T, C₂) come from :func:`lethe.nn.accounting.calibrate_model_clip`; the bound is in
    ``docs/nn_unlearning.md`` §2b. Parameters are restored if anything fails.
    """
    check_module(model)
    if not isinstance(schedule, ModelClipSchedule):
        raise TypeError("schedule must be a ModelClipSchedule (see calibrate_model_clip). "
                        f"Found {type(schedule).__name__}.")
    run = _Run.check(X_retained, y_retained, lr=schedule.lr, batch_size=batch_size, post_steps=post_steps,
                     post_lr=post_lr, post_radius=post_radius, post_momentum=post_momentum, n_removed=n_removed,
                     random_state=random_state)
    with _restored_on_failure(model):
        params = list(model.parameters())
        decay = 1.0 - schedule.lr * schedule.weight_decay
        for _ in range(schedule.steps):
            Xb, yb = run.batch()
            grads = torch.autograd.grad(loss_fn(model(Xb), yb), params)
            with torch.no_grad():
                for p, gp in zip(params, grads, strict=True):
                    p.mul_(decay).add_(gp, alpha=-schedule.lr)
            project_model(model, schedule.model_clip)
            with torch.no_grad():
                for p in params:
                    p.add_(torch.randn(p.shape, generator=run.gen, dtype=p.dtype), alpha=schedule.sigma)
        run.post_process(model, params, loss_fn)
    return ModelClipCertificate(
        operation="unlearn_model_clip", **schedule.to_dict(), batch_size=run.bb, post_steps=run.post,
        post_radius=run.prad, post_momentum=run.pmom, n_retained=run.n, n_removed=run.removed,
        gradient_evaluations=(schedule.steps + run.post) * run.bb)
