"""AGIC (Xu et al., Approximate Gradient Inversion Attack on Federated Learning, SRDS 2022).

* One-batch approximation: T local steps on mini-batches X₁..X_T with learning rate μ are treated as
  one step on their union, so ∇W ≈ (W − W')/μ. The union is reconstructed with gradient inversion —
  one forward/backward per iteration however many local steps there were (no simulation).
* Layer-weighted cosine: 1 − Σαᵢ⟨g'ᵢ,gᵢ⟩ / (√Σαᵢ‖g'ᵢ‖² √Σαᵢ‖gᵢ‖²) + ζ·TV, with αᵢ = lᵢ·zᵢ for conv
  layer i: lᵢ = 1 + (β−1)(i−1)/(N_conv−1) grows with depth, zᵢ = 1/(1−pᵢ) undoes the zeros ReLU puts
  in the received gradient (pᵢ = their share); fully connected layers get the mean of the lᵢ.
* Several epochs: pre-reconstruct every round, pair the images of consecutive epochs greedily by MSE
  after 2×2 average pooling (only images with the same inferred label), then reconstruct jointly:
  Σₖ γₖ(1 − cosₖ), γ = 1 for the first epoch and `epoch_weight` after.
The optimiser is Inverting Gradients' (Adam on signed gradients, lr 0.1, [0, 1] box; the joint reconstruction,
which starts from the first epoch's pre-reconstructions, at a tenth of lr); with one epoch observed, `restarts`
race as Inverting Gradients' do (one batch of starts, the lowest objective kept).
"""
from __future__ import annotations

from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import grad_and_value, vmap

from ..threat import Knowledge, Observation, Step
from .compiled import COMPILING, wanted
from .gradients import cosine_distance, model_gradients, total_variation
from .invgrad import (fastest, graph_note, graphed_on_gpu, racing_signed_adam, scalar_objective,
                      signed_adam_trials, trials_objective)
from .racing import functional_gradients, trial_model
from .rounds import Round, first_epoch, prepare_rounds


def layer_weights(model: nn.Module, gradients: list[torch.Tensor], beta: float, relu_modifier: bool) -> list[float]:
    """AGIC's α for every parameter tensor (in model.parameters() order), from the received gradient.

    Conv layers in order get lᵢ (times zᵢ on ReLU networks); linear layers the mean of the lᵢ; other
    parameters (BatchNorm) the weight of the conv layer they follow.
    """
    index = {id(w): i for i, w in enumerate(model.parameters())}
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    n = len(convs)
    line = [1 + (beta - 1) * i / (n - 1) if n > 1 else 1.0 for i in range(n)]
    fc = sum(line) / n if n else 1.0
    relu = relu_modifier and getattr(model, "activation", "") == "relu"
    alpha = [fc] * len(gradients)
    current = None
    for m in model.modules():
        own = list(m.parameters(recurse=False))
        if isinstance(m, nn.Conv2d):
            i = convs.index(m)
            z = 1.0
            if relu:
                zeros = float((gradients[index[id(m.weight)]] == 0).float().mean())
                z = 1.0 / (1.0 - zeros) if zeros < 1 else 1.0
            current = line[i] * z
            for w in own:
                alpha[index[id(w)]] = current
        elif not isinstance(m, nn.Linear) and current is not None:
            for w in own:
                alpha[index[id(w)]] = current
    return alpha


def pooled_distances(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """MSE between every image of a and every image of b after 2×2 average pooling (noise-robust)."""
    pa, pb = F.avg_pool2d(a, 2, 2).flatten(1), F.avg_pool2d(b, 2, 2).flatten(1)
    return torch.cdist(pa, pb) ** 2 / pa.shape[1]


def greedy_match(cost: torch.Tensor, allowed: torch.Tensor) -> list[int]:
    """One-to-one pairing, most similar pairs first; pairs with different labels only once no
    same-label pair is left. Returns partner[i] = the column paired with row i."""
    n = cost.shape[0]
    partner, taken = [-1] * n, set()
    for pass_allowed in (allowed, torch.ones_like(allowed)):
        masked = torch.where(pass_allowed, cost, torch.full_like(cost, float("inf")))
        for flat in torch.argsort(masked.flatten()).tolist():
            i, j = divmod(flat, n)
            if partner[i] >= 0 or j in taken or not torch.isfinite(masked[i, j]):
                continue
            partner[i] = j
            taken.add(j)
    return partner


class _Problem:
    """The rounds and how each round's images map onto the slots (the private images)."""

    def __init__(self, model, rounds: list[Round], mu: float, p: dict):
        self.model, self.rounds = model, rounds
        self.targets = [[d / mu for d in r.delta] for r in rounds]  # ∇W ≈ (W − W')/μ
        self.alphas = [layer_weights(model, t, p["beta"], p["relu_modifier"]) for t in self.targets]
        self.tv = p["tv_weight"]

    def loss(self, x: torch.Tensor, labels: torch.Tensor, members: list[torch.Tensor], gammas: list[float],
             which: list[int], functional: bool = False) -> torch.Tensor:
        """Σ over the rounds in `which` of γₖ(1 − cosₖ), + ζ·TV. functional: written with torch.func, the rounds
        vmapped into one program (each with its own weights, target gradient and α) — vmappable again over
        racing starts; otherwise a loop over the rounds with plain autograd."""
        if functional:
            return self._rounds_loss(x, labels, members, gammas, which)
        total = 0.0
        for k in which:
            xs, ys = x[members[k]], labels[members[k]]
            grads = model_gradients(self.model, xs, ys, True, self.rounds[k].weights)
            total = total + gammas[k] * cosine_distance(grads, self.targets[k], self.alphas[k])
        return total + self.tv * total_variation(x)

    def stacked(self, which: list[int], gammas: list[float], like: torch.Tensor) -> tuple:
        """The rounds' own weights, target gradients, α and γ stacked along a leading round axis, made once
        per set of rounds (before any compile traces the loss; a tensor made from host numbers at every step
        would make a GPU wait)."""
        if not hasattr(self, "_fmodel"):
            self._fmodel, self._buffers = trial_model(self.model)
            self._names = [n for n, _ in self._fmodel.named_parameters()]
            self._stacked = {}
        key = tuple((k, gammas[k]) for k in which)
        if key not in self._stacked:
            weights = {n: torch.stack([self.rounds[k].weights[i].detach() for k in which])
                       for i, n in enumerate(self._names)}
            targets = [torch.stack([self.targets[k][i] for k in which]) for i in range(len(self._names))]
            alphas = torch.tensor([self.alphas[k] for k in which], dtype=like.dtype, device=like.device)
            gamma = torch.tensor([gammas[k] for k in which], dtype=like.dtype, device=like.device)
            self._stacked[key] = weights, targets, alphas, gamma
        return self._stacked[key]

    def _rounds_loss(self, x, labels, members, gammas, which) -> torch.Tensor:
        weights, targets, alphas, gamma = self.stacked(which, gammas, x)
        slots = torch.stack([members[k] for k in which])  # (rounds, images per round)

        def one_round(w, target, alpha, xs, ys):
            grads = functional_gradients(self._fmodel, w, self._buffers, xs, ys)
            return cosine_distance(grads, list(target), list(alpha.unbind()))
        distances = vmap(one_round)(weights, targets, alphas, x[slots], labels[slots])
        return (gamma * distances).sum() + self.tv * total_variation(x)


def agic(obs: Observation, kn: Knowledge, p: dict, device) -> Iterator[Step]:
    model = kn.model.to(device)
    model.train()
    rounds = prepare_rounds(obs, kn, device)
    per, epochs = kn.batch_size, max(r.epoch for r in rounds) + 1
    n = per * len(first_epoch(rounds))
    prob = _Problem(model, rounds, kn.extras["local_lr"], p)
    shape = (n, *kn.input_shape)
    g = torch.Generator().manual_seed(p["seed"] * 1000 + 31)  # the same start as the simulation baseline
    # members[k]: the slots round k's images fill. In each epoch, rounds fill the slots in turn.
    by_epoch = [[r.index for r in rounds if r.epoch == e] for e in range(epochs)]
    own_slots = {}
    for e, ks in enumerate(by_epoch):
        for pos, k in enumerate(ks):
            own_slots[k] = torch.arange(pos * per, (pos + 1) * per, device=device)
    own_labels = [torch.tensor([c for k in ks for c in rounds[k].labels], device=device) for ks in by_epoch]
    gammas = [1.0 if r.epoch == 0 else p["epoch_weight"] for r in rounds]
    pre = p["pre_iterations"] if epochs > 1 else 0
    total = pre * epochs + p["iterations"]
    done = 0

    x = torch.rand(shape, generator=g).to(device).requires_grad_(True)
    yield Step(0, total, float("nan"), x.detach(), own_labels[0].tolist())
    matching = None
    members = [own_slots[k] for k in range(len(rounds))]
    labels = own_labels[0]
    if epochs > 1:
        pre_images = []
        for e in range(epochs):  # 1. pre-reconstruct each epoch on its own
            xe = x if e == 0 else torch.rand(shape, generator=g).to(device).requires_grad_(True)
            note = f"pre-reconstructing epoch {e + 1} of {epochs} (its rounds alone)"
            shown = own_labels[e].tolist()  # read once: the steps below never wait for the device
            if len(by_epoch[e]) > 1:  # the epoch's rounds vmapped into one program (measured faster: below)
                prob.stacked(by_epoch[e], gammas, xe)
                def value_and_grad(v, e=e):  # of v detached: x requires grad, and the outer autograd would
                    # record every step's graph too (torch warned at each step's float(loss))
                    g_v, value = grad_and_value(lambda u: prob.loss(u, own_labels[e], members, gammas, by_epoch[e],
                                                                    functional=True))(v.detach())
                    return value, g_v
            else:
                value_and_grad = scalar_objective(lambda v: prob.loss(v, own_labels[e], members, gammas, by_epoch[e]))
            value_and_grad = graphed_on_gpu(value_and_grad, device)
            for i, loss in enumerate(signed_adam_trials(value_and_grad, xe, pre, p["lr"]), 1):
                done += 1
                yield Step(done, total, loss, xe.detach(), shown, note or graph_note(value_and_grad))
                note = None
            pre_images.append(xe.detach().clone())
        # 2. match every epoch's images to the slots, through the epoch before it
        slot_of = [list(range(n))]  # slot_of[e][i]: the slot of epoch e's image i
        for e in range(1, epochs):
            same = own_labels[e - 1][:, None] == own_labels[e][None, :]
            partner = greedy_match(pooled_distances(pre_images[e - 1], pre_images[e]),
                                   same if p["match_labels"] else torch.ones_like(same))
            row = [0] * n
            for i, j in enumerate(partner):
                row[j] = slot_of[e - 1][i]
            slot_of.append(row)
        for e, ks in enumerate(by_epoch):
            for pos, k in enumerate(ks):
                members[k] = torch.tensor(slot_of[e][pos * per:(pos + 1) * per], device=device)
        matching = _matching_report(pre_images, slot_of, by_epoch, per)
        with torch.no_grad():  # 3. joint reconstruction starts from the first epoch's images
            x.copy_(pre_images[0])
        yield Step(done, total, float("nan"), x.detach(), labels.tolist(),
                   f"matched the images of {epochs} epochs; reconstructing jointly from all {len(rounds)} rounds",
                   matching=matching)
    every = list(range(len(rounds)))
    # restarts race (one epoch only): start 0 is the start above, the others fresh, all under one signed Adam
    starts = [x.detach()] + [torch.rand(shape, generator=g).to(device) for _ in range(p["restarts"])]
    # only the vmapped torch.func objective compiles; on a CPU it is slower than the autograd loop for AGIC's
    # batch of a round's images (measured, 2 cores: 17 vs 12 ms one start, 67 vs 47 ms four), and so is one start
    # on a GPU (H200, warm: 79–81 against 134 it/s), so auto compiles racing starts on a GPU only
    compiling = wanted(p, device, len(starts), pays_on_cpu=False, pays_for_one_on_gpu=False)
    if len(starts) > 1 or compiling:
        yield Step(done, total, float("nan"), x.detach(), labels.tolist(),
                   f"{len(starts)} random starts racing" if len(starts) > 1 else None,
                   stage=COMPILING if compiling else None)
    # several rounds (epochs, or rounds per epoch): their gradients as one vmapped program, not a loop of
    # autograd calls — on the 2-core CPU agic-multiround's 1600 steps 74.4 → 40.2 s (22 → 42 it/s)
    several = len(rounds) > 1
    if several:
        prob.stacked(every, gammas, x)
    value_and_grad = trials_objective(lambda v: prob.loss(v, labels, members, gammas, every),
                                      lambda v: prob.loss(v, labels, members, gammas, every, functional=True),
                                      vectorised=compiling or several
                                      or (len(starts) > 1 and torch.device(device).type == "cuda"))
    xs = torch.stack(starts)
    value_and_grad, note = fastest(value_and_grad, xs, compiling, device)
    # the joint phase refines the pre-reconstructions it starts from: at the full rate signed Adam moves every
    # pixel by ~lr a step and its first steps erased what they had found (agic-multiround: 27.9 → 17.9 dB in 4
    # steps, 25.5 after 100; 32 px, seed 0). At a tenth — the rate the pre-reconstruction's own schedule reached
    # at 3/8 — 28.7 dB after 20 steps and 31.1 after 100, and after 1000 the same as before (32.4 / 31.6 / 31.9
    # dB, seeds 0–2, against 32.8 / 31.2 / 31.9)
    lr = p["lr"] / 10 if epochs > 1 else p["lr"]
    yield from racing_signed_adam(value_and_grad, xs, p["iterations"], lr, labels.tolist(),
                                  done, total, matching, note)


def _matching_report(pre_images, slot_of, by_epoch, per) -> dict:
    """For people (and the Runner's check): every slot's pre-reconstruction in each epoch, and which
    round and position it came from."""
    epochs, n = len(pre_images), len(slot_of[0])
    views = torch.zeros((n, epochs, *pre_images[0].shape[1:]))
    where = [[None] * epochs for _ in range(n)]
    for e in range(epochs):
        for i, s in enumerate(slot_of[e]):
            views[s, e] = pre_images[e][i].cpu()
            k = by_epoch[e][i // per]
            where[s][e] = (k, i % per)
    return {"views": views, "where": where}
