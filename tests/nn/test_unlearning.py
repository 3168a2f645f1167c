"""Noisy clipped fine-tuning on torch modules: per-sample gradients vs a per-sample loop for every layer type used,
clipping and projection bounds, refusal of buffers, failure atomicity, certificates, and the noise actually added."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from torch import nn

from lethe.nn.accounting import FineTuneSchedule, calibrate_finetune
from lethe.nn.unlearning import (
    NNUnlearningCertificate,
    check_module,
    clipped_gradient,
    flat_parameters,
    load_flat_parameters,
    per_sample_gradients,
    project_model,
    train,
    unlearn,
)

torch.set_num_threads(1)


class _EmbedBag(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(11, 4)
        self.lin = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(self.emb(x).mean(dim=1))


def _models():
    torch.manual_seed(0)
    return {
        "mlp": (nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3)), torch.randn(6, 5)),
        "cnn2d_groupnorm": (nn.Sequential(nn.Conv2d(1, 4, 3), nn.GroupNorm(2, 4), nn.ReLU(), nn.AvgPool2d(2),
                                          nn.Flatten(), nn.Linear(4 * 3 * 3, 3)), torch.randn(6, 1, 8, 8)),
        "cnn1d_layernorm": (nn.Sequential(nn.Conv1d(2, 3, 3), nn.Flatten(), nn.LayerNorm(3 * 6), nn.ReLU(),
                                          nn.Linear(18, 3)), torch.randn(6, 2, 8)),
        "embedding": (_EmbedBag(), torch.randint(0, 11, (6, 5))),
        "dropout_eval": (nn.Sequential(nn.Linear(5, 8), nn.Dropout(0.5), nn.ReLU(), nn.Linear(8, 3)).eval(),
                         torch.randn(6, 5)),
    }


@pytest.mark.parametrize("name", list(_models()))
def test_per_sample_gradients_match_a_loop(name):
    model, X = _models()[name]
    y = torch.arange(X.shape[0]) % 3
    g = per_sample_gradients(model, X, y)
    for i in range(X.shape[0]):
        model.zero_grad()
        nn.functional.cross_entropy(model(X[i:i + 1]), y[i:i + 1]).backward()
        for k, p in model.named_parameters():
            assert g[k].shape == (X.shape[0], *p.shape)
            torch.testing.assert_close(g[k][i], p.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", list(_models()))
@pytest.mark.parametrize("clip", [1e-3, 0.1, 1e6])
def test_clipped_gradient_bound_and_value(name, clip):
    model, X = _models()[name]
    y = torch.arange(X.shape[0]) % 3
    for mode in ("per_sample", "batch"):
        g = clipped_gradient(model, X, y, clip, clipping=mode)
        norm = float(np.sqrt(sum(float((t.double() ** 2).sum()) for t in g)))
        assert norm <= clip
    # reference: per-sample loop, clip each, average
    per = []
    for i in range(X.shape[0]):
        model.zero_grad()
        nn.functional.cross_entropy(model(X[i:i + 1]), y[i:i + 1]).backward()
        v = torch.cat([p.grad.reshape(-1) for p in model.parameters()]).double()
        per.append(v * min(1.0, clip * (1 - 1e-5) / float(v.norm())))
    ref = torch.stack(per).mean(0)
    got = torch.cat([t.reshape(-1) for t in clipped_gradient(model, X, y, clip)]).double()
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-7 * clip)


def test_projection_and_flat_roundtrip():
    model, _ = _models()["mlp"]
    theta = flat_parameters(model)
    assert project_model(model, 0.5) is True
    assert np.linalg.norm(flat_parameters(model)) <= 0.5
    assert project_model(model, 0.5) is False
    load_flat_parameters(model, theta)
    np.testing.assert_allclose(flat_parameters(model), theta, rtol=1e-6)
    with pytest.raises(ValueError, match=r"theta must have shape"):
        load_flat_parameters(model, theta[:-1])


def test_check_module_refuses_buffers_and_non_modules():
    with pytest.raises(ValueError, match=r"no buffers.*running_mean"):
        check_module(nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3)))
    with pytest.raises(TypeError, match=r"torch.nn.Module. Found list"):
        check_module([1])
    with pytest.raises(ValueError, match=r"at least one parameter"):
        check_module(nn.ReLU())


def _schedule(**kw):
    base = dict(model_radius=2.0, grad_clip=1.0, lr=0.1, steps=5)
    base.update(kw)
    return calibrate_finetune(1.0, 1e-5, **base)


def test_unlearn_certificate_reproducible_and_frozen():
    X, y = torch.randn(30, 5), torch.arange(30) % 3
    out = []
    for _ in range(2):
        model, _ = _models()["mlp"]
        cert = unlearn(model, X, y, schedule=_schedule(), batch_size=8, post_steps=3, post_radius=1.5,
                       post_momentum=0.5, n_removed=2, random_state=7)
        out.append(flat_parameters(model))
    np.testing.assert_array_equal(out[0], out[1])
    assert isinstance(cert, NNUnlearningCertificate)
    assert cert.steps == 5 and cert.post_steps == 3 and cert.batch_size == 8 and cert.n_retained == 30
    assert cert.gradient_evaluations == 8 * 8 and cert.n_removed == 2 and cert.epsilon_certified <= 1.0
    assert cert.post_radius == 1.5 and cert.post_momentum == 0.5
    assert NNUnlearningCertificate.from_dict(cert.to_dict()) == cert
    with pytest.raises(dataclasses.FrozenInstanceError):
        cert.sigma = 0.0
    with pytest.raises(ValueError, match="certificate keys"):
        NNUnlearningCertificate.from_dict({"sigma": 1.0})


def test_unlearn_failure_leaves_model_unchanged():
    model, _ = _models()["mlp"]
    before = flat_parameters(model)
    with pytest.raises(RuntimeError):  # wrong feature count: the module itself fails mid-way
        unlearn(model, torch.randn(10, 4), torch.zeros(10, dtype=torch.long), schedule=_schedule(), random_state=0)
    np.testing.assert_array_equal(flat_parameters(model), before)
    for bad, match in [({"batch_size": 0}, "batch_size"), ({"clipping": "layer"}, "clipping"),
                       ({"post_steps": -1}, "post_steps"), ({"schedule": {"sigma": 1}}, "FineTuneSchedule"),
                       ({"post_radius": 0.0}, "post_radius"), ({"post_momentum": -1.0}, "post_momentum")]:
        kw = {"schedule": _schedule(), **bad}
        with pytest.raises((ValueError, TypeError), match=match):
            unlearn(model, torch.randn(10, 5), torch.zeros(10, dtype=torch.long), **kw)
        np.testing.assert_array_equal(flat_parameters(model), before)


def test_noise_is_added_at_the_calibrated_scale():
    # with a negligible step size the T steps add N(0, T σ² I) to the projected model: check the variance
    d_in, n = 40, 50
    model = nn.Linear(d_in, 25)
    nn.init.zeros_(model.weight)
    nn.init.zeros_(model.bias)
    s = _schedule()
    s = FineTuneSchedule(**{**s.to_dict(), "lr": 1e-12, "steps": 20, "sigma": 0.3})
    unlearn(model, torch.randn(n, d_in), torch.arange(n) % 25, schedule=s, random_state=3)
    theta = flat_parameters(model)
    # 1025 coordinates: sample variance of N(0, 20·0.09) within 4 standard errors (seeded)
    var = float(np.var(theta))
    se = 1.8 * np.sqrt(2.0 / theta.size)
    assert abs(var - 1.8) < 4 * se


def test_unlearn_projects_before_stepping():
    model = nn.Linear(3, 2)
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(10.0)
    s = FineTuneSchedule(**{**_schedule().to_dict(), "sigma": 1e-12, "steps": 1, "lr": 1e-12})
    unlearn(model, torch.randn(4, 3), torch.zeros(4, dtype=torch.long), schedule=s, random_state=0)
    assert np.linalg.norm(flat_parameters(model)) <= 2.0 + 1e-6


def test_train_then_unlearn_keeps_learning_signal_with_large_budget():
    # a toy separable task: after training, a loose certificate (ε = 50) with post-processing keeps accuracy
    g = torch.Generator().manual_seed(0)
    X = torch.randn(200, 2, generator=g)
    y = (X[:, 0] > 0).long()
    model = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 2))
    torch.manual_seed(0)
    train(model, X, y, epochs=20, lr=0.5, batch_size=32, random_state=0)
    acc = float((model(X).argmax(1) == y).float().mean())
    assert acc > 0.95
    s = calibrate_finetune(50.0, 1e-5, model_radius=5.0, grad_clip=1.0, lr=0.5)
    unlearn(model, X[10:], y[10:], schedule=s, batch_size=32, post_steps=100, random_state=0)
    assert float((model(X).argmax(1) == y).float().mean()) > 0.9
