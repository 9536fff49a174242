"""The simulation baseline on FedAvg (Inverting Gradients' FedAvg reconstructor, Geiping et al. 2020).

It replays the client's local training on dummy data: T SGD steps (learning rate μ, momentum if any)
on dummy mini-batches, then compares the simulated weight change with the observed one (cosine
distance + TV, Adam on signed gradients). Every iteration differentiates through all T steps, so its
cost grows with T — the cost AGIC's one-batch approximation avoids. Labels: the inferred multiset is
dealt to the mini-batches in sorted order (the attacker cannot tell which step saw which label).
"""
from __future__ import annotations

from typing import Iterator

import torch

from ..threat import Knowledge, Observation, Step
from .gradients import cosine_distance, model_gradients, total_variation
from .invgrad import graph_note, graphed_on_gpu, scalar_objective, signed_adam_trials
from .rounds import first_epoch, prepare_rounds, slots_knowledge


def simulated_update(model, weights: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor, steps: int,
                     batch: int, lr: float, momentum: float) -> list[torch.Tensor]:
    """before − after for `steps` SGD steps from `weights` on the mini-batches of (x, y), differentiable."""
    current, buffer = list(weights), None
    for t in range(steps):
        part = slice(t * batch, (t + 1) * batch)
        grads = model_gradients(model, x[part], y[part], create_graph=True, weights=current)
        if momentum:
            buffer = grads if buffer is None else [momentum * b + g for b, g in zip(buffer, grads)]
            grads = buffer
        current = [w - lr * g for w, g in zip(current, grads)]
    return [w0 - w for w0, w in zip(weights, current)]


def invgrad_fedavg(obs: Observation, kn: Knowledge, p: dict, device) -> Iterator[Step]:
    model = kn.model.to(device)
    model.train()
    rounds = first_epoch(prepare_rounds(obs, kn, device))
    ex, per = kn.extras, kn.batch_size
    slots = slots_knowledge(kn, rounds)
    labels = torch.tensor([c for r in rounds for c in sorted(r.labels)], device=device)
    g = torch.Generator().manual_seed(p["seed"] * 1000 + 31)  # the same start as AGIC: comparisons isolate the method
    x = torch.rand((slots.batch_size, *kn.input_shape), generator=g).to(device)

    def objective(v):
        loss = 0.0
        for i, r in enumerate(rounds):
            part = slice(i * per, (i + 1) * per)
            sim = simulated_update(model, r.weights, v[part], labels[part], ex["local_steps"], ex["minibatch_size"],
                                   ex["local_lr"], ex["momentum"])
            loss = loss + cosine_distance(sim, r.delta)
        return loss + p["tv_weight"] * total_variation(v)

    total, shown = p["iterations"], labels.tolist()  # read once: the steps below never wait for the device
    yield Step(0, total, float("nan"), x.detach(), shown)
    # every evaluation differentiates through all T local steps, one small launch after another: a GPU replays it
    value_and_grad = graphed_on_gpu(scalar_objective(objective), device)
    done = 0
    for done, loss in enumerate(signed_adam_trials(value_and_grad, x, total, p["lr"]), 1):
        yield Step(done, total, loss, x.detach(), shown, graph_note(value_and_grad))
    yield Step(done, total, float(value_and_grad(x)[0]), x.detach(), shown, final=True)
