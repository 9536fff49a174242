"""Honest image metrics, computed outside the attack: PSNR (peak 1), SSIM, LPIPS, label accuracy.

Batch reconstructions come back in arbitrary order, so they are paired with the originals by the
Hungarian algorithm on MSE before anything is scored.
"""
from __future__ import annotations

from collections import Counter
from functools import lru_cache

import numpy as np
import torch
from scipy.ndimage import uniform_filter
from scipy.optimize import linear_sum_assignment

from . import lpips_weights
from .settings import LPIPS_MIN_SIDE

PSNR_CAP = 100.0  # identical images: report 100 dB rather than infinity (JSON has no inf)


def to_unit(images: torch.Tensor) -> torch.Tensor:
    """Images as scored and shown: detached, on the CPU, float32, in [0, 1]. A pixel an attack could not
    compute (NaN, after its optimiser blew up on a noisy update) counts as black: never credited to the attack,
    and never a crash in the matching (SciPy refuses a NaN cost)."""
    return torch.nan_to_num(images.detach().float().cpu(), nan=0.0, posinf=1.0, neginf=0.0).clamp(0, 1)


def psnr(a: torch.Tensor, b: torch.Tensor) -> np.ndarray:
    """Per-image PSNR in dB with peak 1 for batches a, b of shape (B, C, H, W)."""
    mse = ((to_unit(a) - to_unit(b)) ** 2).flatten(1).mean(1).double()
    mse = mse.clamp(min=10 ** (-PSNR_CAP / 10))
    return (-10 * torch.log10(mse)).numpy()


def ssim(a: torch.Tensor, b: torch.Tensor) -> np.ndarray:
    """Per-image SSIM, data_range 1: scikit-image's `structural_similarity` (7×7 uniform window, sample
    covariance, each channel scored alone, then averaged), computed for the whole batch at once.

    Its steps are scikit-image's, with the same scipy filter run over (batch, channel, H, W) instead of
    one image per call: the result is the same to float32 rounding (tested against it), but PLI's ten
    clients score thousands of 32×32 pairs per frame, and one call per pair cost 0.2 ms of overhead
    each — 110 s of a 360-s `pli-10-clients` run."""
    x, y = to_unit(a).numpy(), to_unit(b).numpy()
    side = min(x.shape[-2:])
    win = max(min(7, side if side % 2 else side - 1), 3)
    size = (1,) * (x.ndim - 2) + (win, win)  # the window covers H and W only
    ux, uy = uniform_filter(x, size), uniform_filter(y, size)
    uxx, uyy, uxy = uniform_filter(x * x, size), uniform_filter(y * y, size), uniform_filter(x * y, size)
    cov_norm = win * win / (win * win - 1)
    vx, vy, vxy = cov_norm * (uxx - ux * ux), cov_norm * (uyy - uy * uy), cov_norm * (uxy - ux * uy)
    c1, c2 = 0.01 ** 2, 0.03 ** 2
    s = (2 * ux * uy + c1) * (2 * vxy + c2) / ((ux ** 2 + uy ** 2 + c1) * (vx + vy + c2))
    pad = (win - 1) // 2
    h, w = x.shape[-2:]
    per_channel = s[..., pad:h - pad, pad:w - pad].mean(axis=(-2, -1), dtype=np.float64).astype(np.float32)
    return per_channel.mean(-1).astype(np.float64)


def match(recon: torch.Tensor, truth: torch.Tensor) -> np.ndarray:
    """order[i] = index of the reconstruction paired with original i (Hungarian on MSE)."""
    r, t = to_unit(recon).flatten(1), to_unit(truth).flatten(1)
    if len(r) == 1:
        return np.zeros(1, dtype=int)
    cost = torch.cdist(t.double(), r.double()).numpy() ** 2
    rows, cols = linear_sum_assignment(cost)
    order = np.empty(len(t), dtype=int)
    order[rows] = cols
    return order


def label_accuracy(predicted, truth) -> float:
    """Share of true labels recovered, as multisets (batch order is unknown to the attacker)."""
    want = Counter(int(x) for x in truth)
    got = Counter(int(x) for x in predicted)
    return sum((want & got).values()) / max(1, len(truth))


# ---------------------------------------------------------------- LPIPS

@lru_cache(maxsize=4)
def _lpips_model(source: str):
    import contextlib
    import io
    import warnings

    import lpips as lpips_package  # heavy: loaded on first use

    state, _ = lpips_weights.backbone()
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():  # lpips' chatter, torchvision's
        warnings.simplefilter("ignore", UserWarning)  # notes on its old `pretrained` argument
        # pnet_rand: build AlexNet without asking torchvision for weights; ours replace them below.
        model = lpips_package.LPIPS(net="alex", version="0.1", pnet_rand=True, verbose=False)
    missing = model.load_state_dict(state, strict=False).missing_keys
    if any(k.startswith("net.") for k in missing):  # every backbone weight must come from the file
        raise lpips_weights.WeightsUnavailable(f"LPIPS unavailable: the backbone lacks {missing[0]}")
    return model.eval()


def lpips_status() -> tuple[bool, str]:
    """(available, reason in one line). Never downloads, never raises."""
    try:
        return True, lpips_weights.backbone()[1]
    except lpips_weights.WeightsUnavailable as e:
        return False, str(e)


def lpips(a: torch.Tensor, b: torch.Tensor) -> np.ndarray | None:
    """Per-image LPIPS distance (AlexNet, v0.1), or None when the backbone is unavailable."""
    ok, source = lpips_status()
    if not ok:
        return None
    model = _lpips_model(source)
    x, y = to_unit(a), to_unit(b)
    if x.shape[1] == 1:
        x, y = x.repeat(1, 3, 1, 1), y.repeat(1, 3, 1, 1)
    if min(x.shape[-2:]) < LPIPS_MIN_SIDE:
        x = torch.nn.functional.interpolate(x, size=LPIPS_MIN_SIDE, mode="bilinear", align_corners=False)
        y = torch.nn.functional.interpolate(y, size=LPIPS_MIN_SIDE, mode="bilinear", align_corners=False)
    with torch.no_grad():
        d = model(x * 2 - 1, y * 2 - 1)
    return d.flatten().numpy()


def score(recon: torch.Tensor, truth: torch.Tensor, with_lpips: bool = False, aligned: bool = False) -> dict:
    """Match, then score: mean PSNR/SSIM (and LPIPS), per-image PSNR and the matching order.

    aligned: the attack knows which sample each reconstruction is (CAFE: the server chose the
    indices), so reconstruction i is scored against original i, with no pairing in its favour."""
    order = np.arange(len(truth)) if aligned else match(recon, truth)
    paired = to_unit(recon)[torch.as_tensor(order)]
    p = psnr(paired, truth)
    s = ssim(paired, truth)
    out = {"psnr": float(p.mean()), "ssim": float(s.mean()), "psnr_per_image": [float(v) for v in p],
           "order": [int(i) for i in order]}
    if with_lpips:
        d = lpips(paired, truth)
        out["lpips"] = None if d is None else float(d.mean())
    return out


def matching_check(views: torch.Tensor, where: list, truth: torch.Tensor, membership: list[list[int]]) -> list[bool]:
    """Did AGIC pair the right images across epochs? One answer per slot (all its epochs agree).

    views[s, e] is the pre-reconstruction AGIC put in slot s for epoch e; where[s][e] = (round, position)
    it came from. Which private image a pre-reconstruction shows is decided within its round, by the
    same Hungarian pairing used for scoring, against the images that round really used.
    """
    by_round: dict[int, list[tuple[int, int]]] = {}
    for s, row in enumerate(where):
        for e, (k, _) in enumerate(row):
            by_round.setdefault(k, []).append((s, e))
    identity = {}
    for k, items in by_round.items():
        recon = torch.stack([views[s, e] for s, e in items])
        used = membership[k]
        order = match(recon, truth[torch.as_tensor(used)])
        for i, r in enumerate(order):
            identity[items[r]] = used[i]
    return [all(identity[(s, e)] == identity[(s, 0)] for e in range(len(row))) for s, row in enumerate(where)]


def attack_accuracy(recon: torch.Tensor, private_means: torch.Tensor, public_means: list[torch.Tensor]) -> dict:
    """The PLI paper's attack accuracy. Target class j succeeds when its reconstruction is more similar
    (SSIM) to j's mean private image than to every other target's mean private image and to every mean
    public image (each class's clean and insensitive public means). Returns the share of successes,
    the per-class verdicts and the mean SSIM to the own class mean."""
    recon = to_unit(recon)
    refs = torch.cat([private_means.float(), torch.stack(public_means).float()]) if public_means else private_means
    n = len(recon)
    sims = np.stack([ssim(recon, refs[r].expand_as(recon)) for r in range(len(refs))], 1)  # (n, refs)
    own = sims[np.arange(n), np.arange(n)]
    others = sims.copy()
    others[np.arange(n), np.arange(n)] = -np.inf
    success = own > others.max(1)
    return {"attack_accuracy": float(success.mean()), "ssim_to_mean": float(own.mean()),
            "success": success.tolist()}
