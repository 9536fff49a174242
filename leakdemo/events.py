"""Events a run streams to whoever watches (dashboard, CLI, tests). Images travel as numpy arrays
(B, H, W, 3) in [0, 1]; `to_json` leaves them out, so JSONL stays small."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np


@dataclass
class Started:
    scenario: dict
    threat: dict  # receives / knows / defense / warnings, in plain words
    originals: np.ndarray
    names: list[str]
    labels: list[int]
    total: int
    device: str
    lpips: str  # availability, in words
    setup_seconds: float
    event: str = "started"


@dataclass
class Progress:
    iteration: int
    total: int
    seconds: float
    loss: float
    psnr: float | None = None
    ssim: float | None = None
    eta: float | None = None
    labels: list[int] | None = None
    note: str | None = None
    images: np.ndarray | None = None  # matched to the originals' order
    psnr_per_image: list[float] | None = None
    matching: dict | None = None  # AGIC multi-epoch, once: {"rate", "correct": [bool], "views": [(E, H, W, 3)]}
    checks: dict | None = None  # scored by the Runner against the truth: CAFE's {"step1_error", "step2_error"};
    # PLI/TBI's {"attack_accuracy", "ssim_to_mean"} (and "baseline_..." for TBI trained alongside)
    sample_ids: list[int] | None = None  # which private samples `images` show (None: all of them, in order)
    baseline: np.ndarray | None = None  # PLI: the TBI baseline's class reconstructions, trained alongside
    success: list[bool] | None = None  # PLI/TBI: per target class, whether the attack-accuracy test passes
    trials: np.ndarray | None = None  # racing starts: each shown trial's first image (matched), (K, H, W, 3)
    trials_psnr: list[float] | None = None  # ... and each trial's mean PSNR, scored like `psnr`
    stage: str | None = None  # the phase the attack is in (see threat.Step.stage)
    event: str = "progress"


@dataclass
class Finished:
    status: str  # "finished" or "stopped"
    metrics: dict
    images: np.ndarray
    seconds: float
    iterations: int
    history: dict = field(default_factory=dict)
    baseline: np.ndarray | None = None  # PLI: the TBI baseline's final class reconstructions
    event: str = "finished"


@dataclass
class Failed:
    message: str
    event: str = "failed"


def without_views(metrics: dict) -> dict:
    """Metrics ready for JSON: AGIC's matching keeps its verdicts and drops its images."""
    if not metrics.get("matching"):
        return metrics
    return {**metrics, "matching": {k: v for k, v in metrics["matching"].items() if k != "views"}}


def to_json(event) -> dict[str, Any]:
    """A JSON-ready dict without image arrays; Finished flattens its metrics to the top level."""
    d = {k: v for k, v in asdict(event).items() if not isinstance(v, np.ndarray)}
    d = without_views(d)
    if isinstance(event, Finished):
        d["metrics"] = without_views(d["metrics"])
    if isinstance(event, Finished):
        d.pop("history", None)
        metrics = d.pop("metrics")
        d = {"event": "finished", **metrics, **{k: v for k, v in d.items() if k != "event"}}
    return d


class Thinned:
    """A list that keeps at most `cap` items by dropping every other one when full."""

    def __init__(self, cap: int):
        self.cap, self.items, self.stride, self._n = cap, [], 1, 0

    def offer(self, item, force: bool = False) -> None:
        if force or self._n % self.stride == 0:
            self.items.append(item)
            if len(self.items) > self.cap:
                self.items = self.items[::2]
                self.stride *= 2
        self._n += 1
