"""DLM and DLM+ (Zhao et al., Deep Leakage from Model in Federated Learning, 2022).

The client does local SGD, W' = W − η∇W, and the attacker sees W and W' but not η. With ΔW = W − W':
  * DLM  minimises Σ_layers ‖∇W(x̂, ŷ) − k·ΔW‖² over the dummy image, the soft label and a scale k
    (ideally 1/η). Its trap: ∇W(x̂, ŷ) = 0 (ŷ = the model's own prediction) with k = 0 is also a
    perfect fit, and k's start decides which of the two the optimiser finds.
  * DLM+ divides both sides by their norms, ‖∇W/‖∇W‖ − ΔW/‖ΔW‖‖², so η drops out. With one global
    norm this is 2 − 2·cos(∇W, ΔW); the authors' code divides by the mean of the per-layer norms.
Both reuse DLG's L-BFGS loop (robust or original), or its racing starts (`trials`). Several rounds in the first epoch are fitted
together, each with the weights it started from.

With several local steps per round (each on its own mini-batch) the update is not one gradient: the steps
after the first are taken at weights the earlier steps moved. Matching ΔW to one gradient of all the images
caps the attack (DLM+ at two steps of η = 0.01: 24.7 dB). Our addition: the objective replays the steps
(`replayed_steps`) at the rate η̂ the observation itself implies — the first-order update's norm against
‖ΔW‖ — so DLM+ still needs no learning rate; with one step nothing changes. The labels read off ΔW's
last layer say which labels a round held, not which step saw which, and the replay makes that matter: each
dummy image's soft label starts undecided among its round's labels (`undecided_labels`), and the fit settles it.
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


def _norm(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.sqrt(sum((t * t).sum() for t in tensors))


def local_schedule(kn: Knowledge) -> tuple[int, int, float]:
    """(local steps, mini-batch size, momentum) of each round, as the knowledge states them (one step over
    all of a round's images where it does not)."""
    ex = kn.extras
    return ex.get("local_steps", 1), ex.get("minibatch_size", kn.batch_size), ex.get("momentum", 0.0)


def replayed_steps(grad_at, weights: list[torch.Tensor], x: torch.Tensor, label: torch.Tensor, delta: list[torch.Tensor],
                   schedule: tuple[int, int, float]) -> list[torch.Tensor]:
    """The round's local steps replayed from `weights` on the dummy mini-batches (step t on images t·B …),
    as the sum of their SGD (momentum) directions: the update divided by the learning rate. The rate is not
    known: η̂ makes the first-order update — each step's gradient at `weights`, weighted as momentum weighs
    it — as long as the observed ΔW; it is held constant (detached) within an evaluation. grad_at(weights,
    x, label, graph) is ∇W at those weights, differentiable when graph is True. One step: the gradient."""
    steps, batch, momentum = schedule
    if steps == 1:
        return grad_at(weights, x, label, True)
    parts = [slice(t * batch, (t + 1) * batch) for t in range(steps)]
    first_grad = grad_at(weights, x[parts[0]], label[parts[0]], True)
    first_order = None
    for t, part in enumerate(parts):
        g = first_grad if t == 0 else grad_at(weights, x[part], label[part], False)
        weight = sum(momentum ** j for j in range(steps - t))  # how much of step t's gradient the update holds
        first_order = [weight * a.detach() for a in g] if first_order is None else \
            [f + weight * a.detach() for f, a in zip(first_order, g)]
    eta = (_norm(delta) / _norm(first_order).clamp_min(1e-30)).detach()
    current, buffer, total = list(weights), None, None
    for t, part in enumerate(parts):
        g = first_grad if t == 0 else grad_at(current, x[part], label[part], True)
        buffer = g if buffer is None or not momentum else [momentum * b + a for b, a in zip(buffer, g)]
        total = buffer if total is None else [u + b for u, b in zip(total, buffer)]
        if t < steps - 1:
            current = [w - eta * b for w, b in zip(current, buffer)]
    return total


def undecided_labels(kn: Knowledge) -> int:
    """How many slots (a round's images) start with their soft labels undecided among the round's labels: all
    of them when the round took several local steps — a start confident in the order read stalls where
    another order is the truth (16 px, four steps: 17–20 dB as read, 18–41 undecided over seeds 0–3) — and
    none for one step, whose gradient does not depend on which slot holds which label."""
    return kn.batch_size if local_schedule(kn)[0] > 1 else 0


def _fit(obs: Observation, kn: Knowledge, p: dict, device, distance, extras=()) -> Iterator[Step]:
    model = kn.model.to(device)
    model.train()
    rounds = first_epoch(prepare_rounds(obs, kn, device))
    per, schedule = kn.batch_size, local_schedule(kn)
    guess = [c for r in rounds for c in r.labels]
    tv = p.get("tv_weight", 0.0)

    def grad_at(weights, x, label, graph):
        return model_gradients(model, x, label, create_graph=graph, weights=weights)

    def objective(x, label, ex):
        loss = 0.0
        for i, r in enumerate(rounds):
            part = slice(i * per, (i + 1) * per)
            grads = replayed_steps(grad_at, r.weights, x[part], label[part], r.delta, schedule)
            loss = loss + distance(grads, r.delta, ex)
        return loss + tv * total_variation(x) if tv else loss

    trial_loss = _trial_loss(model, rounds, per, distance, tv, schedule)
    if p.get("trials", 1) > 1:
        yield from racing_matching(slots_knowledge(kn, rounds), p, device, trial_loss, guess, fixed_labels=False,
                                   extras=extras, undecided=undecided_labels(kn))
        return
    yield from gradient_matching(slots_knowledge(kn, rounds), p, device, objective, guess, fixed_labels=False,
                                 extras=extras, trial_loss=trial_loss if wanted(p, device, 1, held=True) else None,
                                 undecided=undecided_labels(kn))


def _functional_grad_at(model, names: list[str], buffers: dict):
    def grad_at(weights, x, label, graph):  # torch.func's gradient is always differentiable again
        return functional_gradients(model, dict(zip(names, weights)), buffers, x, label)
    return grad_at


def _trial_loss(model, rounds, per: int, distance, tv: float, schedule: tuple[int, int, float]):
    """The same objective for one racing trial, in torch.func: each round's local steps replayed from its
    own weights."""
    model, buffers = trial_model(model)
    names = [n for n, _ in model.named_parameters()]
    weights = [[w.detach() for w in r.weights] for r in rounds]
    grad_at = _functional_grad_at(model, names, buffers)

    def loss(x, label, ex):
        total = 0.0
        for i, (r, w) in enumerate(zip(rounds, weights)):
            part = slice(i * per, (i + 1) * per)
            total = total + distance(replayed_steps(grad_at, w, x[part], label[part], r.delta, schedule), r.delta, ex)
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
    schedule, grad_at = local_schedule(runs[0][1]), _functional_grad_at(model, names, buffers)
    weights = tuple(torch.stack([e[i].weights[j].detach() for e in epochs]) for i in range(count) for j in range(layers))
    deltas = tuple(torch.stack([e[i].delta[j] for e in epochs]) for i in range(count) for j in range(layers))

    def loss(x, label, ex, case):
        total = 0.0
        for i in range(count):
            w = list(case[i * layers:(i + 1) * layers])
            delta = list(case[(count + i) * layers:(count + i + 1) * layers])
            part = slice(i * per, (i + 1) * per)
            total = total + distance(replayed_steps(grad_at, w, x[part], label[part], delta, schedule), delta, ex)
        return total + tv * total_variation(x) if tv else total
    guesses = [[c for r in e for c in r.labels] for e in epochs]
    yield from racing_matching(slots_knowledge(runs[0][1], epochs[0]), p, device, loss, [], fixed_labels,
                               extras=extras, clients=guesses, cases=weights + deltas, seeds=seeds, noun="run",
                               undecided=undecided_labels(runs[0][1]))
