import pytest
import torch

from leakdemo import metrics


def test_psnr_peak_one_and_cap():
    a = torch.zeros(1, 3, 8, 8)
    b = torch.full((1, 3, 8, 8), 0.1)
    assert metrics.psnr(a, b)[0] == pytest.approx(20.0, abs=1e-4)  # mse 0.01
    assert metrics.psnr(a, a)[0] == metrics.PSNR_CAP
    assert metrics.psnr(a - 5, b)[0] == pytest.approx(20.0, abs=1e-4)  # clamped to [0, 1] first


def test_ssim_matches_scikit_image():
    g = torch.Generator().manual_seed(0)
    a = torch.rand(2, 3, 16, 16, generator=g)
    assert metrics.ssim(a, a) == pytest.approx([1.0, 1.0])
    assert (metrics.ssim(a, torch.rand(2, 3, 16, 16, generator=g)) < 0.3).all()


def test_hungarian_matching_recovers_a_planted_permutation():
    g = torch.Generator().manual_seed(0)
    truth = torch.rand(5, 3, 8, 8, generator=g)
    perm = torch.tensor([3, 0, 4, 1, 2])
    recon = (truth[perm] + 0.01 * torch.randn(5, 3, 8, 8, generator=g)).clamp(0, 1)
    order = metrics.match(recon, truth)
    assert [int(perm[o]) for o in order] == [0, 1, 2, 3, 4]
    s = metrics.score(recon, truth)
    assert s["psnr"] > 35


def test_label_accuracy_is_order_free():
    assert metrics.label_accuracy([1, 2, 3], [3, 2, 1]) == 1.0
    assert metrics.label_accuracy([1, 1, 3], [1, 2, 3]) == pytest.approx(2 / 3)
