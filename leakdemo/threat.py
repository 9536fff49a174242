"""What crosses the wire (Observation), what the attacker knows (Knowledge), and what it must never see.

The Runner hands an attack only an Observation and a Knowledge. The GroundTruth stays with the Runner,
which uses it for scoring alone.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn


@dataclass
class Observation:
    """The payload a client sent, after its defense, plus the context a real server has."""
    kind: str  # "gradients" (FedSGD: a list of tensors), "weights" (FedAvg: a list of Update),
    # "vfl" (vertical FL: a session the server queries with the batch indices it chooses),
    # "logits" (FedMD and variants: a list of LogitRound, the clients' logits on the public set)
    payload: Any
    description: str  # one sentence for the threat-model card
    context: dict[str, Any] = field(default_factory=dict)


@dataclass
class Knowledge:
    """The attacker's assumed knowledge, as objects (for the attack) and as sentences (for people)."""
    model: nn.Module  # the architecture with the weights the server sent (a private copy)
    input_shape: tuple[int, int, int]  # (channels, height, width)
    num_classes: int
    batch_size: int
    facts: list[str]
    extras: dict[str, Any] = field(default_factory=dict)  # e.g. the client's local_lr, when known
    extra_facts: dict[str, str] = field(default_factory=dict)  # one sentence per extras key

    def restricted(self, keys) -> "Knowledge":
        """The same knowledge without the extras an attack is not assumed to know (e.g. DLM and η)."""
        keep = [k for k in self.extras if k in set(keys)]
        return Knowledge(self.model, self.input_shape, self.num_classes, self.batch_size,
                         self.facts + [self.extra_facts[k] for k in keep if k in self.extra_facts],
                         {k: self.extras[k] for k in keep}, {k: self.extra_facts[k] for k in keep if k in self.extra_facts})


@dataclass(eq=False)  # holds tensors: compare by identity
class Update:
    """One FedAvg upload: the weights the server sent (before) and what the client returned (after)."""
    before: list[torch.Tensor]
    after: list[torch.Tensor]
    epoch: int  # 0-based epoch over the client's local data
    round: int  # 0-based round within that epoch

    @property
    def delta(self) -> list[torch.Tensor]:
        """before − after: for one plain SGD step this is η·∇W, the direction of the gradient."""
        return [b - a for b, a in zip(self.before, self.after)]


@dataclass
class GroundTruth:
    """The client's private batch. Only the Runner holds it."""
    images: torch.Tensor  # (B, C, H, W) in [0, 1]
    labels: torch.Tensor  # (B,)
    names: list[str]
    membership: list[list[int]] | None = None  # FedAvg: which private images each update used, in order
    # Vertical FL: scores an attack's intermediate estimates (Step.internals) against the truth, e.g.
    # CAFE's Step I/II errors, and measures what the defense costs training. Both run in the Runner only.
    checks: Callable[[dict], dict[str, float]] | None = field(default=None, repr=False)
    utility: Callable[[], dict] | None = field(default=None, repr=False)
    # Logit sharing: the images are each target class's mean private image, and `judge` scores a set of
    # class reconstructions by the PLI paper's attack accuracy (it needs the other classes' means too).
    judge: Callable[[torch.Tensor], dict] | None = field(default=None, repr=False)


@dataclass
class Step:
    """One streamed step of an attack: its current estimate and its own loss (never a score)."""
    iteration: int  # iterations completed so far, over all restarts
    total: int  # planned iterations, for the progress bar and the ETA
    loss: float | torch.Tensor  # a 0-dim tensor may stay on the device: the Runner reads it only for the
    # frames it scores, so an attack's step never waits for the GPU just to report its loss
    images: torch.Tensor  # current estimate, (B, C, H, W), the model's input space ([0, 1])
    labels: list[int] | torch.Tensor | None = None  # a tensor likewise (read when the frame is scored)
    note: str | None = None  # something a person should see, e.g. "stalled: restarting with seed 2"
    stage: str | None = None  # the phase the attack is in (PLI's communication round, CAFE's step, a compile
    # before the first step): shown beside the progress while it runs, gone once it ends (it would be stale)
    final: bool = False  # the attack's chosen answer
    matching: dict | None = None  # AGIC multi-epoch: which pre-reconstructions it paired (see attacks/agic.py)
    internals: dict | None = None  # intermediate estimates the Runner can check (CAFE: V and H per worker;
    # PLI: "baseline", the TBI reconstructions trained alongside, judged like the main ones)
    sample_ids: list[int] | None = None  # which private samples `images` stand for (default: all, in order)
    aligned: bool = False  # True: images[i] is sample_ids[i] (the attacker knows which); False: any order
    trials: torch.Tensor | None = None  # racing starts: each shown trial's current estimate, (K, B, C, H, W)
    losses: torch.Tensor | None = None  # several clients or runs attacked at once: each one's own loss, (K,)
