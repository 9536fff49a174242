"""Inverting Gradients (Geiping et al., 2020): cosine gradient distance + total variation, Adam on
signed gradients with a step schedule, a [0, 1] box, and restarts chosen by the attack's own loss."""
from __future__ import annotations

from typing import Callable, Iterator

import torch

from ..threat import Knowledge, Observation, Step
from .gradients import cosine_distance, infer_labels, model_gradients, total_variation


def signed_adam(objective: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, iterations: int,
                lr: float) -> Iterator[float]:
    """Inverting Gradients' optimiser: Adam fed the sign of the gradient, the learning rate divided by
    10 at 3/8, 5/8 and 7/8 of the steps, the image boxed to [0, 1]. Updates x in place; yields losses."""
    opt = torch.optim.Adam([x], lr=lr)
    milestones = [int(iterations * f) for f in (3 / 8, 5 / 8, 7 / 8)]
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=milestones, gamma=0.1)
    for _ in range(iterations):
        loss = objective(x)
        (grad,) = torch.autograd.grad(loss, [x])
        x.grad = grad.sign()
        opt.step()
        sched.step()
        with torch.no_grad():
            x.clamp_(0, 1)
        yield float(loss.detach())


def invgrad(obs: Observation, kn: Knowledge, p: dict, device) -> Iterator[Step]:
    model = kn.model.to(device)
    model.train()
    target = [t.to(device) for t in obs.payload]
    labels = infer_labels(kn.model, obs.payload, kn.batch_size)
    y = torch.tensor(labels, device=device)
    shape = (kn.batch_size, *kn.input_shape)
    its, trials, tv = p["iterations"], p["restarts"] + 1, p["tv_weight"]
    total = its * trials

    def objective(x):
        return cosine_distance(model_gradients(model, x, y, create_graph=True), target) + tv * total_variation(x)

    best_loss, best_x, done = float("inf"), None, 0
    for trial in range(trials):
        g = torch.Generator().manual_seed(p["seed"] * 1000 + 29 + trial)
        x = torch.rand(shape, generator=g).to(device).requires_grad_(True)
        note = f"restart {trial + 1} of {trials}" if trial else None
        if done == 0:  # frame 0: the starting point
            yield Step(0, total, float("nan"), x.detach(), labels)
        for loss in signed_adam(objective, x, its, p["lr"]):
            done += 1
            yield Step(done, total, loss, x.detach(), labels, note)
            note = None
        final = float(objective(x).detach())
        if final < best_loss:
            best_loss, best_x = final, x.detach().clone()
    yield Step(done, total, best_loss, best_x, labels,
               "kept the restart with the lowest objective" if trials > 1 else None, final=True)
