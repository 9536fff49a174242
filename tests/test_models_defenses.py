import math

import pytest
import torch

from leakdemo import catalog
from leakdemo.defenses import DRAWS_NOISE, apply_defense, clip_by_global_norm, prune_smallest
from leakdemo.models import PATCHES_UP_TO, PatchConv2d, build_model
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


@pytest.mark.parametrize("name", ["lenet", "convnet", "resnet"])
def test_a_trial_models_patch_convolutions_give_torchs_gradients_and_their_gradients(name):
    """Racing trials and clients run their models' convolutions as products over patches (faster vmapped):
    every trial's gradient-matching loss and its gradient with respect to the image are torch's."""
    from leakdemo.attacks import racing
    model = build_model(name, 3, 16, 10, seed=3, init="uniform" if name == "lenet" else "default")
    g = torch.Generator().manual_seed(4)
    x, labels = torch.rand(5, 2, 3, 16, 16, generator=g), torch.randint(0, 10, (5, 2), generator=g)
    results = []
    for patches in (False, True):
        racing.PATCHES = patches
        try:
            fmodel, buffers = racing.trial_model(model)
        finally:
            racing.PATCHES = True
        assert any(isinstance(m, PatchConv2d) for m in fmodel.modules()) == patches
        weights = {n: w.detach() for n, w in fmodel.named_parameters()}
        target = [torch.randn(w.shape, generator=torch.Generator().manual_seed(5)) for w in weights.values()]

        def loss(xx, yy):
            return sum(((a - t) ** 2).sum()
                       for a, t in zip(racing.functional_gradients(fmodel, weights, buffers, xx, yy), target))
        results.append(torch.func.vmap(torch.func.grad_and_value(loss))(x, labels))
    (grad_torch, loss_torch), (grad_patches, loss_patches) = results
    assert torch.allclose(loss_patches, loss_torch, rtol=1e-5)
    assert torch.allclose(grad_patches, grad_torch, rtol=1e-4, atol=1e-6 * float(grad_torch.abs().max()))


def test_a_patch_convolution_too_big_for_patches_is_torchs():
    conv = torch.nn.Conv2d(3, 4, 5, padding=2)
    patched = torch.nn.Conv2d(3, 4, 5, padding=2)
    patched.load_state_dict(conv.state_dict())
    patched.__class__ = PatchConv2d
    small, big = torch.rand(2, 3, 8, 8), torch.rand(1, 3, 1, 1).expand(PATCHES_UP_TO // (75 * 64) + 1, 3, 8, 8)
    assert torch.allclose(patched(small), conv(small), atol=1e-6)
    assert torch.equal(patched(big), conv(big))  # the same kernel: bit for bit


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


@pytest.mark.parametrize("name", sorted(catalog.DEFENSES))
def test_exactly_the_defenses_said_to_draw_noise_advance_the_generator(name):
    """DRAWS_NOISE keeps a federation's step eager on a GPU (a CUDA graph would replay one draw): a defense that
    draws at every call and is missing from it would send the same noise each step; one listed that draws
    nothing would lose its graph for no reason."""
    params = {p.name: p.default for p in catalog.DEFENSES[name].params}
    g = torch.Generator().manual_seed(3)
    before = g.get_state()
    first = apply_defense(name, payload(), params, g)
    assert (not torch.equal(g.get_state(), before)) == (name in DRAWS_NOISE)
    again = apply_defense(name, payload(), params, g)  # what a replayed graph would send the second time
    assert all(torch.equal(a, b) for a, b in zip(first, again)) == (name not in DRAWS_NOISE)


def test_no_defense_is_identity_and_copies():
    p = payload()
    out = apply_defense("none", p, {}, torch.Generator())
    assert torch.equal(out[0], p[0]) and out[0] is not p[0]
