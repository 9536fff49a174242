import math

import pytest
import torch

from leakdemo.defenses import apply_defense, clip_by_global_norm, prune_smallest
from leakdemo.models import build_model
from leakdemo.settings import MODELS


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("size", [16, 32])
def test_models_take_any_size_and_init_is_seeded(name, size):
    m = build_model(name, 3, size, 7, seed=1)
    assert m(torch.rand(2, 3, size, size)).shape == (2, 7)
    m2 = build_model(name, 3, size, 7, seed=1)
    assert all(torch.equal(a, b) for a, b in zip(m.parameters(), m2.parameters()))


def test_dlg_uniform_init():
    m = build_model("lenet", 3, 32, 10, seed=0, init="uniform")
    w = torch.cat([p.flatten() for p in m.parameters()])
    assert -0.5 <= w.min() < -0.45 and 0.45 < w.max() <= 0.5


def payload():
    g = torch.Generator().manual_seed(0)
    return [torch.randn(50, 40, generator=g), torch.randn(40, generator=g)]


def test_clipping_bounds_the_global_norm():
    clipped = clip_by_global_norm(payload(), 1.0)
    assert math.isclose(math.sqrt(sum((t ** 2).sum() for t in clipped)), 1.0, rel_tol=1e-5)
    assert torch.equal(clip_by_global_norm(payload(), 0)[0], payload()[0])


@pytest.mark.parametrize("name,std", [("dp-gaussian", 0.3), ("dp-laplace", 0.3 * math.sqrt(2))])
def test_noise_has_the_stated_scale(name, std):
    g = torch.Generator().manual_seed(1)
    base = [torch.zeros(200, 100)]
    out = apply_defense(name, base, {"dp_sigma": 0.3, "dp_clip": 0.0}, g)
    assert abs(out[0].std().item() - std) < 0.02 * std
    assert abs(out[0].mean().item()) < 0.01


def test_prune_zeroes_the_stated_fraction_of_smallest_entries():
    out = prune_smallest(payload(), 0.7)
    assert (out[0] == 0).float().mean().item() == pytest.approx(0.7, abs=1e-3)
    kept = out[0][out[0] != 0].abs().min()
    dropped = payload()[0][out[0] == 0].abs().max()
    assert kept > dropped


def test_no_defense_is_identity_and_copies():
    p = payload()
    out = apply_defense("none", p, {}, torch.Generator())
    assert torch.equal(out[0], p[0]) and out[0] is not p[0]
