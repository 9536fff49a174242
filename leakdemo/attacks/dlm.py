"""DLM and DLM+ (Zhao et al., Deep Leakage from Model in Federated Learning, 2022).

The client does local SGD, W' = W − η∇W, and the attacker sees W and W' but not η. With ΔW = W − W':
  * DLM  minimises Σ_layers ‖∇W(x̂, ŷ) − k·ΔW‖² over the dummy image, the soft label and a scale k
    (ideally 1/η). Its trap: ∇W(x̂, ŷ) = 0 (ŷ = the model's own prediction) with k = 0 is also a
    perfect fit, and k's start decides which of the two the optimiser finds.
  * DLM+ divides both sides by their norms, ‖∇W/‖∇W‖ − ΔW/‖ΔW‖‖², so η drops out. With one global
    norm this is 2 − 2·cos(∇W, ΔW); the authors' code divides by the mean of the per-layer norms.
Both reuse DLG's L-BFGS loop (robust or original), or its racing starts (`trials`). Several rounds in the first epoch are fitted
together, each with the weights it started from.
"""
from __future__ import annotations

from typing import Iterator

import torch

from ..threat import Knowledge, Observation, Step
from .compiled import wanted
from .dlg import gradient_matching
from .gradients import l2_distance, model_gradients, total_variation
from .racing import functional_gradients, racing_matching, trial_model
from .rounds import first_epoch, prepare_rounds, slots_knowledge


def normalised_distance(a: list[torch.Tensor], b: list[torch.Tensor], norm: str = "global") -> torch.Tensor:
    """‖a/‖a‖ − b/‖b‖‖² with ‖·‖ the global L2 norm or the mean of the per-layer norms."""
    if norm == "global":
        na = torch.sqrt(sum((x * x).sum() for x in a))
        nb = torch.sqrt(sum((y * y).sum() for y in b))
    else:
        na = sum(x.norm() for x in a) / len(a)
        nb = sum(y.norm() for y in b) / len(b)
    na, nb = na + 1e-12, nb + 1e-12
    return sum(((x / na - y / nb) ** 2).sum() for x, y in zip(a, b))


def _fit(obs: Observation, kn: Knowledge, p: dict, device, distance, extras=()) -> Iterator[Step]:
    model = kn.model.to(device)
    model.train()
    rounds = first_epoch(prepare_rounds(obs, kn, device))
    per = kn.batch_size
    guess = [c for r in rounds for c in r.labels]
    tv = p.get("tv_weight", 0.0)

    def objective(x, label, ex):
        loss = 0.0
        for i, r in enumerate(rounds):
            part = slice(i * per, (i + 1) * per)
            grads = model_gradients(model, x[part], label[part], create_graph=True, weights=r.weights)
            loss = loss + distance(grads, r.delta, ex)
        return loss + tv * total_variation(x) if tv else loss

    if p.get("trials", 1) > 1:
        yield from racing_matching(slots_knowledge(kn, rounds), p, device, _trial_loss(model, rounds, per, distance, tv),
                                   guess, fixed_labels=False, extras=extras)
        return
    yield from gradient_matching(slots_knowledge(kn, rounds), p, device, objective, guess, fixed_labels=False,
                                 extras=extras, trial_loss=_trial_loss(model, rounds, per, distance, tv)
                                 if wanted(p, device, 1) else None)


def _trial_loss(model, rounds, per: int, distance, tv: float):
    """The same objective for one racing trial, in torch.func: each round's gradient at its own weights."""
    model, buffers = trial_model(model)
    names = [n for n, _ in model.named_parameters()]
    weights = [{n: w.detach() for n, w in zip(names, r.weights)} for r in rounds]

    def loss(x, label, ex):
        total = 0.0
        for i, (r, w) in enumerate(zip(rounds, weights)):
            part = slice(i * per, (i + 1) * per)
            total = total + distance(functional_gradients(model, w, buffers, x[part], label[part]), r.delta, ex)
        return total + tv * total_variation(x) if tv else total
    return loss


def _distance(p: dict):
    """The attack's distance between a dummy gradient and an update, and its extra variables: DLM fits the
    gradient to k·ΔW with k optimised too (its start is p['k_init']); DLM+ matches the normalised gradient to
    the normalised update, no learning rate anywhere."""
    if p["attack"] == "dlm":
        return (lambda grads, delta, ex: l2_distance(grads, [ex[0] * d for d in delta])), \
            (torch.tensor(float(p["k_init"])),)
    return (lambda grads, delta, ex: normalised_distance(grads, delta, p["norm"])), ()


def dlm(obs: Observation, kn: Knowledge, p: dict, device) -> Iterator[Step]:
    """DLM: fit the gradient to k·ΔW, with k optimised too."""
    distance, extras = _distance(p)
    yield from _fit(obs, kn, p, device, distance, extras)


def dlm_plus(obs: Observation, kn: Knowledge, p: dict, device) -> Iterator[Step]:
    """DLM+: match the normalised gradient to the normalised update."""
    distance, extras = _distance(p)
    yield from _fit(obs, kn, p, device, distance, extras)


def several_runs(runs: list[tuple[Observation, Knowledge]], p: dict, seeds: list[int], device,
                 fixed_labels: bool = False) -> Iterator[Step]:
    """Several runs of one DLM or DLM+ scenario at once (a sweep's seeds, photos and defense strengths), as
    dlg.several_runs: trial i is run i, its case the first epoch's weights and (defended) updates of its own
    client, each round's gradient taken at that round's own weights."""
    distance, extras = _distance(p)
    tv = p.get("tv_weight", 0.0)
    epochs = [first_epoch(prepare_rounds(obs, kn, device)) for obs, kn in runs]
    model, buffers = trial_model(runs[0][1].model.to(device))
    names = [n for n, _ in model.named_parameters()]
    layers, count, per = len(names), len(epochs[0]), runs[0][1].batch_size
    weights = tuple(torch.stack([e[i].weights[j].detach() for e in epochs]) for i in range(count) for j in range(layers))
    deltas = tuple(torch.stack([e[i].delta[j] for e in epochs]) for i in range(count) for j in range(layers))

    def loss(x, label, ex, case):
        total = 0.0
        for i in range(count):
            w = dict(zip(names, case[i * layers:(i + 1) * layers]))
            delta = list(case[(count + i) * layers:(count + i + 1) * layers])
            part = slice(i * per, (i + 1) * per)
            total = total + distance(functional_gradients(model, w, buffers, x[part], label[part]), delta, ex)
        return total + tv * total_variation(x) if tv else total
    guesses = [[c for r in e for c in r.labels] for e in epochs]
    yield from racing_matching(slots_knowledge(runs[0][1], epochs[0]), p, device, loss, [], fixed_labels,
                               extras=extras, clients=guesses, cases=weights + deltas, seeds=seeds, noun="run")
