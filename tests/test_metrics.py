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
    """Our batched SSIM is scikit-image's, image by image: photos, noise, flat images, gray and colour,
    every window the sizes call for (7, and 5 or 3 below 7 px), out-of-range values clamped first."""
    from skimage.metrics import structural_similarity

    from leakdemo.data import sample_image

    g = torch.Generator().manual_seed(0)
    a = torch.rand(2, 3, 16, 16, generator=g)
    assert metrics.ssim(a, a) == pytest.approx([1.0, 1.0])
    assert (metrics.ssim(a, torch.rand(2, 3, 16, 16, generator=g)) < 0.3).all()
    for side, channels in ((32, 3), (32, 1), (16, 3), (6, 1), (4, 3)):
        photos = torch.stack([torch.from_numpy(sample_image(n, side)[:channels]) for n in ("coffee", "camera", "rocket")])
        x = torch.cat([photos, torch.rand(3, channels, side, side, generator=g), torch.full((1, channels, side, side), 0.5)])
        y = torch.cat([photos.flip(0), photos + 0.2 * torch.randn(photos.shape, generator=g), 1.1 - x[6:]])
        win = 7 if side >= 7 else (5 if side >= 5 else 3)
        want = [structural_similarity(xi.clamp(0, 1).permute(1, 2, 0).numpy(), yi.clamp(0, 1).permute(1, 2, 0).numpy(),
                                      data_range=1.0, channel_axis=-1, win_size=win) for xi, yi in zip(x, y)]
        assert metrics.ssim(x, y) == pytest.approx(want, abs=1e-6), (side, channels)


def test_hungarian_matching_recovers_a_planted_permutation():
    g = torch.Generator().manual_seed(0)
    truth = torch.rand(5, 3, 8, 8, generator=g)
    perm = torch.tensor([3, 0, 4, 1, 2])
    recon = (truth[perm] + 0.01 * torch.randn(5, 3, 8, 8, generator=g)).clamp(0, 1)
    order = metrics.match(recon, truth)
    assert [int(perm[o]) for o in order] == [0, 1, 2, 3, 4]
    s = metrics.score(recon, truth)
    assert s["psnr"] > 35


def test_a_reconstruction_with_nan_pixels_is_scored_as_black_not_a_crash():
    """An optimiser that blew up on a noisy update leaves NaN pixels: SciPy's matching refused the NaN cost and
    the run ended in "internal error (ValueError: matrix contains invalid numeric entries)"."""
    g = torch.Generator().manual_seed(0)
    truth = torch.rand(3, 3, 8, 8, generator=g)
    recon = truth[[2, 0, 1]].clone()
    recon[1, :, :4] = float("nan")
    s = metrics.score(recon, truth)
    assert s["order"] == [1, 2, 0]
    blacked = recon.nan_to_num(0.0)
    assert s["psnr_per_image"] == pytest.approx([float(v) for v in metrics.psnr(blacked[s["order"]], truth)])
    assert s["psnr_per_image"][0] < 15 < min(s["psnr_per_image"][1:])  # the NaN half counts as black
    assert torch.isfinite(metrics.to_unit(recon)).all()


def test_label_accuracy_is_order_free():
    assert metrics.label_accuracy([1, 2, 3], [3, 2, 1]) == 1.0
    assert metrics.label_accuracy([1, 1, 3], [1, 2, 3]) == pytest.approx(2 / 3)


def test_a_tiny_lpips_does_not_read_as_zero():
    """CAFE's faces come back at LPIPS ≈ 0.0004: the Lab's tile and the CLI's summary printed 0.000."""
    from leakdemo.words import small_figure
    assert small_figure(0.00037) == small_figure(5.2e-7) == "< 0.001"
    assert small_figure(0.0048) == "0.0048"
    assert small_figure(0.048) == "0.048" and small_figure(0.5123) == "0.512"
    assert small_figure(0.0) == "0.000"


def test_noise_s_ssim_does_not_read_as_minus_zero():
    """Under strong noise SSIM is about zero and often just below it: the Lab, Compare, the presenter and the
    CLI printed "-0.000" (the Trade-offs grid too); a real negative figure keeps its sign."""
    from leakdemo.words import fixed
    assert fixed(-0.0004) == fixed(0.0) == fixed(-0.0) == "0.000" and fixed(-0.004, 2) == "0.00"
    assert fixed(-0.009) == "-0.009" and fixed(0.99951) == "1.000" and fixed(0.5123, 2) == "0.51"


def test_swept_values_read_as_people_write_them():
    """A DP sweep's strip and header said "1e-06" (C's exponent), its thousands "2e+03"."""
    from leakdemo.words import value_text
    assert [value_text(v) for v in (1e-6, 1.5e-7, 0.0001, 0.333, 2000.0, 3e9, 16, "coffee")] == \
        ["1e-6", "1.5e-7", "0.0001", "0.333", "2000", "3e9", "16", "coffee"]


def test_a_typo_gets_the_name_meant():
    """`run dgl` listed all 18 presets and left the user to spot dlg in them; two letters swapped come first
    (difflib scores dlm as near as dlg), and a word like no option gets no guess."""
    from leakdemo.scenario import presets
    from leakdemo.words import alike, hint
    assert alike("dgl", presets()) == ["dlg", "dlm"] and hint(alike("dgl", presets())) == " (did you mean dlg or dlm?)"
    assert alike("dp-gausian", ["none", "dp-gaussian", "dp-laplace"]) == ["dp-gaussian"]
    assert alike("zzz", presets()) == [] and hint([]) == ""
    assert alike("DLG", presets()) == ["dlg"] and alike("DP_SIGMA", ["dp_sigma", "dp_clip"]) == ["dp_sigma"]  # caps lock


def test_a_run_says_when_its_picture_came_back():
    """The first scored point at 20 dB and at 30 dB, from the run's history (a recorded run's too); a run that
    never got there says so, a stopped one says 'not yet', and logit sharing (judged by attack accuracy) says
    nothing about PSNR."""
    from leakdemo import milestones
    h = {"iteration": [0, 10, 20, 30, 40, 50], "seconds": [0.0, 0.5, 1.0, 1.5, 2.0, 2.5],
         "psnr": [6.0, 12.0, 21.0, 28.0, 31.5, 35.0]}
    assert milestones.reached(h, 20) == (1.0, 20) and milestones.reached(h, 30) == (2.0, 40)
    assert milestones.sentence(h, {}, True) == \
        "Recognisable (20 dB) after 1.0 s, recovered (30 dB) after 2.0 s (iteration 40)."
    assert milestones.recovered_after(h, {}) == "2.0 s"
    half = {k: v[:4] for k, v in h.items()}
    assert milestones.sentence(half, {}, True) == "Recognisable (20 dB) after 1.0 s, never recovered (30 dB)."
    assert milestones.sentence(half, {}, False) == \
        "Recognisable (20 dB) after 1.0 s, not yet recovered (30 dB) when it stopped."
    noise = {k: v[:2] for k, v in h.items()}
    assert milestones.sentence(noise, {}, True) == "It never became recognisable: the PSNR stayed below 20 dB."
    assert milestones.sentence(noise, {}, False).startswith("Not yet recognisable")
    assert milestones.recovered_after(noise, {}) == "never"
    assert milestones.recovered_after(half, {"status": "stopped"}) == "not yet"  # Compare's cell, as the sentence
    # a batch: the history is its mean PSNR, and a photo or two plainly back must not read as 'never'
    two_back = {"psnr_per_image": [23.8, 22.3, 16.0, 14.8]}
    assert milestones.sentence(noise, two_back, True) == \
        "2 of 4 images ended recognisable (20 dB), but the batch's mean PSNR stayed below 20 dB."
    assert milestones.sentence(noise, two_back, False) == \
        "2 of 4 images had become recognisable (20 dB), but the batch's mean PSNR was below 20 dB when it stopped."
    one_recovered = {"psnr_per_image": [31.0, 25.0]}
    assert milestones.sentence(half, one_recovered, True) == \
        "Recognisable (20 dB) after 1.0 s, never recovered (30 dB) on the batch's mean, though 1 of 2 images did."
    assert milestones.sentence(half, one_recovered, False) == ("Recognisable (20 dB) after 1.0 s, not yet recovered "
                                                              "(30 dB) on the batch's mean when it stopped, though 1 "
                                                              "of 2 images had.")
    assert milestones.sentence(noise, {"psnr_per_image": [12.0, 14.0]}, True).startswith("It never became")
    assert milestones.sentence(noise, {"psnr_per_image": [24.0]}, True).startswith("It never became")  # one image
    assert milestones.sentence(h, {"attack_accuracy": 0.9}, True) is None
    assert milestones.recovered_after(h, {"attack_accuracy": 0.9}) is None
    assert milestones.sentence({}, {}, True) is None  # nothing was scored (a run stopped in its first step)
    # metrics.json's figures, under bench --json's names
    assert milestones.figures(h, {}) == {"to_20db_s": 1.0, "to_30db_s": 2.0}
    assert milestones.figures(noise, {}) == {"to_20db_s": None, "to_30db_s": None}
    assert milestones.figures(h, {"attack_accuracy": 0.9}) == {}
