"""Built-in sweeps: named sweep settings (a base preset, its overrides, the swept axes, seeds) in
assets/sweeps/*.json, each chosen to finish in a few minutes on a laptop CPU and show a clear knee."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import lru_cache

SWEEP_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "assets", "sweeps")


@dataclass(frozen=True)
class SweepSpec:
    name: str
    title: str
    description: str
    base: str  # a run preset
    set: dict
    vary: list[str]
    seeds: int = 1
    images: str | None = None


@lru_cache(maxsize=1)
def sweeps() -> dict[str, SweepSpec]:
    out = {}
    for f in sorted(os.listdir(SWEEP_DIR)):
        if f.endswith(".json"):
            with open(os.path.join(SWEEP_DIR, f), encoding="utf-8") as fh:
                d = json.load(fh)
            out[d["name"]] = SweepSpec(d["name"], d["title"], d["description"], d["base"], d.get("set", {}),
                                       list(d["vary"]), d.get("seeds", 1), d.get("images"))
    return out


def meant_sweeps(name: str) -> list[str]:
    """The built-in sweeps a shortened or mistyped name was likely meant as: the few that hold it as whole
    words, in any order (`dp`: sweep-dp-dlg, sweep-dp-dlm-plus; `dlg-dp`; `prune`; `top-k`: sweep-topk-pli),
    else the alike ones."""
    from .words import alike
    said = str(name).strip().lower()
    asked = (set(said.split("-")), {said.replace("-", "")})
    holding = [s for s in sweeps() if any(words <= set(s.split("-")) for words in asked)]
    return holding if 0 < len(holding) <= 3 else alike(name, sweeps())


def load(name: str) -> SweepSpec | None:
    """The built-in sweep of this name, or None (then the name is a run preset or a scenario file)."""
    return sweeps().get(name)
