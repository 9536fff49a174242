"""Formal privacy, where it exists: (ε, δ) from Opacus's RDP accountant for what the attacker observed.

Only Gaussian noise on a clipped payload is a differentially private mechanism here. What it protects:
any one private image of the client. Changing it moves the clipped payload (a norm-C ball) by at most
2C, so the noise multiplier is σ / 2C; in vertical FL a sample's features sit with every worker, each
clipping its own upload, so the bound is 2C·√M over M workers. The server observed the payload a
number of times (FedSGD once, FedAvg once per round, CAFE once per attacked iteration), on batches it
knows or chooses — no sampling amplification (sample rate 1). Everything else has no formal guarantee,
and we say so rather than invent an ε.
"""
from __future__ import annotations

import importlib.util
import math
import os
import sys
import warnings
from functools import lru_cache

from .words import plural, three_digits

DEFAULT_DELTA = 1e-5


def releases(p: dict) -> int:
    """How many noisy payloads of the client the attacker saw."""
    if p["protocol"] == "fedavg":
        return p["rounds_per_epoch"] * p["epochs"]
    if p["protocol"] == "vfl":
        return p["iterations"] if p["attack"] == "cafe" else 1  # DLG on VFL queries one batch once
    return 1


def _named(defense: str) -> str:
    """The catalog's name ("magnitude pruning", not "prune") as mid-sentence has it: it follows "this defense"."""
    from .catalog import defense_name, in_sentence
    return in_sentence(defense_name(defense))


def guarantee(p: dict) -> dict:
    """{"epsilon": float | None, "delta", "noise_multiplier", "releases", "note"}: None means no formal
    guarantee (the note says why); inf means a mechanism without noise."""
    delta = p.get("dp_delta", DEFAULT_DELTA)
    defense = p["defense"]
    out = {"epsilon": None, "delta": delta, "noise_multiplier": None, "releases": None}
    if defense == "none":
        return {**out, "epsilon": math.inf, "note": "no defense: nothing bounds what the payload reveals"}
    if defense not in ("dp-gaussian", "dp-laplace"):
        return {**out, "note": f"no formal guarantee: this defense ({_named(defense)}) is not a differentially "
                               "private mechanism"}
    if p["dp_clip"] <= 0:  # said first: Laplace noise with no clip was "calibrated to an L2 clip" there was none of
        return {**out, "note": "no formal guarantee: without clipping (dp_clip = 0) one image can move the "
                               "payload without bound, so no amount of noise gives an ε"}
    if defense == "dp-laplace":
        return {**out, "note": "no formal guarantee: Laplace noise calibrated to an L2 clip has no standard (ε, δ) "
                               "bound"}
    workers = p["workers"] if p["protocol"] == "vfl" else 1
    sensitivity = 2 * p["dp_clip"] * math.sqrt(workers)
    z = p["dp_sigma"] / sensitivity
    n = releases(p)
    if z <= 0:
        return {**out, "epsilon": math.inf, "noise_multiplier": 0.0, "releases": n,
                "note": "clipping without noise: ε = ∞"}
    eps = epsilon(z, n, delta)
    return {**out, "epsilon": eps, "noise_multiplier": z, "releases": n,
            "note": f"(ε, δ)-DP for any one private image (Opacus RDP accountant): noise multiplier "
                    f"σ/{'2C' if workers == 1 else f'(2C·√{workers})'} = {z:.3g}, {plural(n, 'release')}, sample rate 1"}


def epsilon(noise_multiplier: float, steps: int, delta: float) -> float:
    """ε of `steps` Gaussian mechanisms with this noise multiplier, composed by Opacus's RDP accountant
    (exactly what `RDPAccountant.get_epsilon` computes for a history of one entry, sample rate 1)."""
    rdp = _opacus_rdp()
    # the default orders reach 63; tiny ε at huge noise wants smaller orders, huge ε larger ones
    orders = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)) + [128, 256, 512, 1024, 4096, 16384]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "optimal order is the smallest/largest alpha": the bound still holds
        curve = rdp.compute_rdp(q=1.0, noise_multiplier=noise_multiplier, steps=steps, orders=orders)
        eps, _ = rdp.get_privacy_spent(orders=orders, rdp=curve, delta=delta)
    return float(eps)


@lru_cache(maxsize=1)
def _opacus_rdp():
    """Opacus's RDP analysis module (`opacus.accountants.analysis.rdp`, numpy and scipy only), the code
    behind its RDPAccountant. Loaded from its file: `import opacus…` first runs `opacus/__init__`, which
    imports torch — 500 MB that the web server (it draws the Trade-offs page and its ε) never needs."""
    name = "opacus.accountants.analysis.rdp"
    if name in sys.modules:  # opacus is loaded here already (a worker, the CLI)
        return sys.modules[name]
    spec = importlib.util.find_spec("opacus")  # locates the package without running it
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("opacus is not installed (it computes ε): run make run or make test to set up")
    path = os.path.join(spec.submodule_search_locations[0], "accountants", "analysis", "rdp.py")
    module_spec = importlib.util.spec_from_file_location("leakdemo_opacus_rdp", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def line(metrics: dict) -> str | None:
    """A finished run's guarantee in one line (the CLI's summary, the Lab under its figures): 'ε = 3.2 (δ = 1e-05)
    — (ε, δ)-DP for …'; a note that already says its phrase stands alone ('no formal guarantee: without clipping
    …', not 'no formal guarantee — no formal guarantee: …'). None for an undefended run."""
    phrase, note = metrics.get("privacy"), metrics.get("privacy_note") or ""
    if not phrase:
        return None
    return note if phrase in note else f"{phrase} — {note}"


def describe(g: dict) -> str:
    """One short phrase for tables: 'ε = 3.2 (δ = 1e-5)', 'ε = 2.53e8 (…)', 'ε = ∞', or 'no formal guarantee'
    ("3.52e+07 (δ = 1e-05)" ran over the Trade-offs table's edge)."""
    if g["epsilon"] is None:
        return "no formal guarantee"
    if math.isinf(g["epsilon"]):
        return "ε = ∞"
    return f"ε = {three_digits(g['epsilon'])} (δ = {three_digits(g['delta'])})"
