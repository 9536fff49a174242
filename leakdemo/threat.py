"""What crosses the wire (Observation), what the attacker knows (Knowledge), and what it must never see.

The Runner hands an attack only an Observation and a Knowledge. The GroundTruth stays with the Runner,
which uses it for scoring alone.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn


@dataclass
class Observation:
    """The payload a client sent, after its defense, plus the context a real server has."""
    kind: str  # "gradients" (FedSGD); later "weights", "vfl-gradients", "logits"
    payload: list[torch.Tensor]
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
    extras: dict[str, Any] = field(default_factory=dict)


@dataclass
class GroundTruth:
    """The client's private batch. Only the Runner holds it."""
    images: torch.Tensor  # (B, C, H, W) in [0, 1]
    labels: torch.Tensor  # (B,)
    names: list[str]


@dataclass
class Step:
    """One streamed step of an attack: its current estimate and its own loss (never a score)."""
    iteration: int  # iterations completed so far, over all restarts
    total: int  # planned iterations, for the progress bar and the ETA
    loss: float
    images: torch.Tensor  # current estimate, (B, C, H, W), the model's input space ([0, 1])
    labels: list[int] | None = None
    note: str | None = None  # something a person should see, e.g. "stalled: restarting with seed 2"
    final: bool = False  # the attack's chosen answer
