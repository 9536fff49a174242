"""Client-side defenses: transforms of the payload (a list of tensors) before it leaves the client.

They are written for any list of tensors, so the same names serve gradients (FedSGD) and, later,
weight updates (FedAvg). Randomness comes from an explicit generator for reproducibility.
"""
from __future__ import annotations

import torch

Payload = list[torch.Tensor]


def clip_by_global_norm(payload: Payload, clip: float) -> Payload:
    """Scale the whole payload so its L2 norm (all tensors together) is at most `clip` (0: no clipping)."""
    if clip <= 0:
        return [t.clone() for t in payload]
    norm = torch.sqrt(sum((t.double() ** 2).sum() for t in payload)).item()
    scale = min(1.0, clip / norm) if norm > 0 else 1.0
    return [t * scale for t in payload]


def gaussian_noise(payload: Payload, sigma: float, g: torch.Generator) -> Payload:
    return [t + sigma * torch.randn(t.shape, generator=g, dtype=t.dtype).to(t.device) for t in payload]


def laplace_noise(payload: Payload, scale: float, g: torch.Generator) -> Payload:
    """Laplace(0, scale) by inverse CDF, so it can draw from an explicit generator."""
    out = []
    for t in payload:
        u = torch.rand(t.shape, generator=g, dtype=torch.float64) - 0.5
        noise = -scale * torch.sign(u) * torch.log1p(-2 * u.abs().clamp(max=0.5 - 1e-12))
        out.append(t + noise.to(dtype=t.dtype, device=t.device))
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


def apply_defense(name: str, payload: Payload, params: dict, g: torch.Generator) -> Payload:
    """Apply defense `name` with its parameters (already validated by the catalog)."""
    payload = [t.detach() for t in payload]
    if name == "none":
        return [t.clone() for t in payload]
    if name == "dp-gaussian":
        return gaussian_noise(clip_by_global_norm(payload, params["dp_clip"]), params["dp_sigma"], g)
    if name == "dp-laplace":
        return laplace_noise(clip_by_global_norm(payload, params["dp_clip"]), params["dp_sigma"], g)
    if name == "prune":
        return prune_smallest(payload, params["prune_ratio"])
    raise ValueError(f"defense: unknown defense {name!r}")
