"""Client-side defenses: transforms of the payload (a list of tensors) before it leaves the client.

They are written for any list of tensors, so the same names serve gradients (FedSGD), weight updates
(FedAvg), the workers' gradients (vertical FL) and logits on the public set (FedMD and its variants). Randomness comes from an explicit generator for reproducibility.
"""
from __future__ import annotations

import math
from functools import lru_cache

import torch

from .device import from_host

Payload = list[torch.Tensor]

# the defenses that draw fresh noise from the host's generator at every call (σ = 0 included): a CUDA graph
# would replay one draw forever, so a step that applies them stays eager. The others (pruning, fake gradients
# — whose candidates are drawn once per layer shape and kept —, the logit transforms) are functions of the
# payload alone. Tested against the generator: exactly these advance it.
DRAWS_NOISE = frozenset({"dp-gaussian", "dp-laplace", "logit-noise"})


def clip_by_global_norm(payload: Payload, clip: float) -> Payload:
    """Scale the whole payload so its L2 norm (all tensors together) is at most `clip` (0: no clipping)."""
    if clip <= 0:
        return [t.clone() for t in payload]
    norm = torch.sqrt(sum((t.double() ** 2).sum() for t in payload))
    scale = torch.where(norm > 0, clip / norm, 1.0).clamp(max=1.0)  # a tensor: read on the host it would sync a GPU
    return [t * scale.to(t.dtype) for t in payload]


def gaussian_noise(payload: Payload, sigma: float, g: torch.Generator) -> Payload:
    return [t + sigma * from_host(torch.randn(t.shape, generator=g, dtype=t.dtype), t.device) for t in payload]


def laplace_noise(payload: Payload, scale: float, g: torch.Generator) -> Payload:
    """Laplace(0, scale) by inverse CDF, so it can draw from an explicit generator."""
    out = []
    for t in payload:
        u = torch.rand(t.shape, generator=g, dtype=torch.float64) - 0.5
        noise = -scale * torch.sign(u) * torch.log1p(-2 * u.abs().clamp(max=0.5 - 1e-12))
        out.append(t + from_host(noise.to(t.dtype), t.device))
    return out


def prune_smallest(payload: Payload, ratio: float) -> Payload:
    """Zero the fraction `ratio` of smallest-magnitude entries of each tensor (layer-wise, as in DLG)."""
    out = []
    for t in payload:
        k = int(round(ratio * t.numel()))
        if k <= 0:
            out.append(t.clone())
            continue
        if k >= t.numel():
            out.append(torch.zeros_like(t))
            continue
        threshold = t.abs().flatten().kthvalue(k).values
        out.append(torch.where(t.abs() > threshold, t, torch.zeros_like(t)))
    return out


MAX_CANDIDATE_NUMBERS = 4_000_000  # per layer shape: ν is lowered for big layers (memory, time); the
# candidates are sorted draws of one distribution, so a few hundred are as good as a thousand


@lru_cache(maxsize=32)
def _sorted_candidates(numel: int, count: int, seed: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Fake-gradient candidates: `count` vectors of |N(0, 1)| entries, each sorted in descending order,
    and their squared norms. Drawn once per layer shape (Algorithm 5, lines 1-2) from a seeded CPU generator
    (the same on every device), moved once to the device that uses them and reused."""
    count = max(1, min(count, MAX_CANDIDATE_NUMBERS // max(numel, 1)))
    g = torch.Generator().manual_seed(seed)
    psi = torch.randn((count, numel), generator=g).abs().sort(dim=1, descending=True).values.to(device)
    return psi, psi.pow(2).sum(1)


def fake_gradients(payload: Payload, sigma: float, candidates: int, g: torch.Generator) -> Payload:
    """CAFE's fake gradients (appendix, Algorithm 5), magnitude version, layer by layer.

    Rank the true entries by magnitude; among the candidate vectors of sorted |N(0, σ²)| magnitudes,
    take the one nearest (L2) to the sorted true magnitudes; the entry of rank ℓ becomes
    clamp(g, −ψ_ℓ, ψ_ℓ). Signs and the magnitude ranking survive; the magnitudes above the fake
    profile do not. σ is in units of the layer's own gradient RMS, so one setting serves every layer.
    The literal text clamps with signed ψ (negative for the lower half, which flips small entries to
    large negative values) and never gives its resampling threshold τ: we use |ψ| and no resampling.
    Everything after the draw stays on the payload's device (no value is read on the host: no GPU waits).
    """
    seed = int(g.initial_seed() % (2**31 - 1))  # the same candidates for the whole run
    out = []
    for t in payload:
        flat = t.detach().flatten()
        if flat.numel() == 0:
            out.append(t.clone())
            continue
        scale = sigma * flat.pow(2).mean().sqrt()  # an all-zero layer gets bound 0 and stays zero
        magnitude, order = flat.abs().sort(descending=True)
        psi, norms = _sorted_candidates(flat.numel(), candidates, seed + flat.numel(), flat.device)
        # ‖sψ − m‖² = s²‖ψ‖² − 2s ψ·m + ‖m‖²: the nearest candidate without materialising differences
        best = (scale * norms - 2 * (psi @ magnitude)).argmin()
        bound = torch.empty_like(flat)
        bound[order] = psi.index_select(0, best.view(1))[0] * scale  # psi[best] would read `best` on the host
        out.append(torch.maximum(torch.minimum(flat, bound), -bound).view_as(t))
    return out


def round_logits(payload: Payload, step: float) -> Payload:
    """Quantise every logit to a multiple of `step` (coarser numbers carry less of the confidence gap)."""
    return [torch.round(t / step) * step for t in payload]


def top_k_only(payload: Payload, k: int) -> Payload:
    """Share only each row's k largest logits; the other classes share one even logit, the log-mean-exp of
    theirs, so the softmax still gives them their total mass, spread evenly. The k kept logits are sent as they
    are: k at or above the class count sends the logits unchanged, and a scheme that digests raw logits (FedMD's
    L1 to the consensus) meets no shift the defense did not make (log-probabilities were sent before: k = J then
    moved FedMD's clients' accuracy by 10 points)."""
    out = []
    for t in payload:
        j = t.shape[-1]
        if k >= j:
            out.append(t.clone())
            continue
        top, idx = t.topk(k, -1)
        others = torch.logsumexp(t.scatter(-1, idx, float("-inf")), -1, keepdim=True) - math.log(j - k)
        shared = others.expand_as(t).clone()
        shared.scatter_(-1, idx, top)
        out.append(shared)
    return out


def apply_defense(name: str, payload: Payload, params: dict, g: torch.Generator) -> Payload:
    """Apply defense `name` with its parameters (already validated by the catalog)."""
    payload = [t.detach() for t in payload]
    if name == "none":
        return [t.clone() for t in payload]
    if name == "dp-gaussian":
        return gaussian_noise(clip_by_global_norm(payload, params["dp_clip"]), params["dp_sigma"], g)
    if name == "dp-laplace":
        return laplace_noise(clip_by_global_norm(payload, params["dp_clip"]), params["dp_sigma"], g)
    if name == "fake-gradients":
        return fake_gradients(payload, params["fake_sigma"], params["fake_candidates"], g)
    if name == "prune":
        return prune_smallest(payload, params["prune_ratio"])
    if name == "logit-noise":
        return gaussian_noise(payload, params["logit_sigma"], g)
    if name == "logit-rounding":
        return round_logits(payload, params["logit_step"])
    if name == "top-k":
        return top_k_only(payload, params["top_k"])
    if name == "logit-temperature":
        return [t / params["send_temperature"] for t in payload]
    raise ValueError(f"defense: unknown defense {name!r}")
