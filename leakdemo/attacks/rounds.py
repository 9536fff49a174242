"""What the attacks on FedAvg uploads share: the observed rounds, set up on the attack's device.

Every attack reconstructs the client's whole local data set: the rounds of the first epoch together
used each private image once, so their images are the "slots" the attack fills. Attacks that use
later epochs (AGIC) map those epochs' images onto the same slots.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from ..threat import Knowledge, Observation
from .gradients import infer_labels


@dataclass(eq=False)  # holds tensors: compare by identity
class Round:
    index: int  # position in the observation
    epoch: int
    weights: list[torch.Tensor]  # the weights the server sent (leaves that require grad)
    delta: list[torch.Tensor]  # before − after: η·Σ∇W for plain SGD
    labels: list[int]  # inferred from the last layer's part of delta


def prepare_rounds(obs: Observation, kn: Knowledge, device) -> list[Round]:
    rounds = []
    for i, u in enumerate(obs.payload):
        delta = u.delta  # on the CPU, where label inference runs
        rounds.append(Round(i, u.epoch, [w.detach().to(device).requires_grad_(True) for w in u.before],
                            [d.to(device) for d in delta], infer_labels(kn.model, delta, kn.batch_size)))
    return rounds


def first_epoch(rounds: list[Round]) -> list[Round]:
    return [r for r in rounds if r.epoch == 0]


def slots_knowledge(kn: Knowledge, rounds: list[Round]) -> Knowledge:
    """The knowledge with batch_size = every image of the first epoch (what the attack reconstructs)."""
    return replace(kn, batch_size=kn.batch_size * len(first_epoch(rounds)))
