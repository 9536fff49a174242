"""DLG, iDLG, DLM and DLM+ with K random starts racing: one vectorised program with a leading trial axis.

The sequential robust loop (dlg.py) tries one start at a time and restarts when it stalls. Here K starts
run together: the gradient-matching objective is vmapped over the trial axis (each trial's own double
backward through the model) and `BatchedLBFGS` steps them all at once, so K starts cost one program — on
a GPU nearly the price of one. Each trial keeps the robust loop's per-trial care, as masks: its best
estimate, a return to it when it diverges, and re-scaling when L-BFGS's absolute tolerances would stop
it short. The page shows the leading trial; the answer is the best trial's best estimate.
The host is asked once per step (what to show), never inside L-BFGS's 20 inner evaluations.
"""
from __future__ import annotations

import copy
import math
from typing import Callable, Iterator

import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, grad_and_value, replace_all_batch_norm_modules_, vmap

from ..cuda_graph import said_once
from ..models import patch_convolutions
from ..threat import Knowledge, Observation, Step
from ..words import plural
from .dlg import (DIVERGED, POLISH_BELOW, POLISH_RATIO, _initial_image, _initial_label_logits, crawling, hopeless,
                  stalled)
from .gradients import soft_cross_entropy
from .compiled import COMPILING, compile_objective, wanted
from .lbfgs import BatchedLBFGS

SHOWN = 16  # trials the page may show side by side (the first ones: every trial is scored outside the attack)
HISTORY = 100  # as the sequential loop (measured on the CPU: 50 or 20 converge slower per step)


TrialLoss = Callable[[torch.Tensor, torch.Tensor, tuple], torch.Tensor]


def functional_gradients(model, weights: dict, buffers: dict, x: torch.Tensor, label: torch.Tensor) -> list:
    """∇_W loss(model(x), label) at `weights` with torch.func (vmap-able, differentiable again); label is
    class indices (long) or probabilities (float), as `model_gradients`."""
    def loss(w):
        logits = functional_call(model, (w, buffers), (x,))
        return F.cross_entropy(logits, label) if label.dtype == torch.long else soft_cross_entropy(logits, label)
    return list(grad(loss)(weights).values())


# a trial model's convolutions as matrix products over patches (models.PatchConv2d); False: torch's (to measure)
PATCHES = True


def trial_model(model: torch.nn.Module) -> tuple[torch.nn.Module, dict]:
    """A copy of the model for vmapped trials, and its buffers. BatchNorm keeps its batch statistics per
    trial; its running statistics — which vmap cannot update in place and which do not change a
    training-mode gradient — are dropped on the copy."""
    model = copy.deepcopy(model).train()
    replace_all_batch_norm_modules_(model)
    if PATCHES:
        patch_convolutions(model)
    return model, dict(model.named_buffers())


def shared_gradient_loss(obs: Observation, kn: Knowledge, device) -> TrialLoss:
    """DLG's and iDLG's objective for one trial: the L2 distance to the shared gradient."""
    model, buffers = trial_model(kn.model.to(device))
    weights = {n: w.detach() for n, w in model.named_parameters()}
    target = [t.to(device) for t in obs.payload]

    def loss(x, label, extras):
        g = functional_gradients(model, weights, buffers, x, label)
        return sum(((a - t) ** 2).sum() for a, t in zip(g, target))
    return loss


def client_gradients_loss(obs: Observation, kn: Knowledge, device) -> tuple[TrialLoss, tuple]:
    """DLG's and iDLG's objective when the round had several clients, each sending its own gradient: one
    trial is one client, and its case (vmapped with it) is that client's gradient, stacked over clients."""
    model, buffers = trial_model(kn.model.to(device))
    weights = {n: w.detach() for n, w in model.named_parameters()}
    cases = tuple(torch.stack([sent[i].to(device) for sent in obs.payload]) for i in range(len(obs.payload[0])))

    def loss(x, label, extras, case):
        g = functional_gradients(model, weights, buffers, x, label)
        return sum(((a - t) ** 2).sum() for a, t in zip(g, case))
    return loss, cases


def runs_loss(runs: list[tuple[Observation, Knowledge]], device) -> tuple[TrialLoss, tuple]:
    """DLG's and iDLG's objective for several runs at once (a sweep's seeds, photos and defense strengths): one
    trial is one run, and its case is that run's shared gradient and its model's weights (a seed draws its own
    model; a run's weights are its own even where they happen to agree)."""
    model, buffers = trial_model(runs[0][1].model.to(device))
    names = [n for n, _ in model.named_parameters()]
    weights = tuple(torch.stack([dict(kn.model.named_parameters())[n].detach().to(device) for _, kn in runs])
                    for n in names)
    targets = tuple(torch.stack([obs.payload[i].to(device) for obs, _ in runs]) for i in range(len(names)))

    def loss(x, label, extras, case):
        g = functional_gradients(model, dict(zip(names, case[:len(names)])), buffers, x, label)
        return sum(((a - t) ** 2).sum() for a, t in zip(g, case[len(names):]))
    return loss, weights + targets


def _objective(loss: TrialLoss, hard: torch.Tensor | None, shape, classes: int, extras: tuple,
               cases: tuple | None = None):
    """z (K, D) -> (loss (K,), ∂loss/∂z (K, D)): one trial's loss vmapped over the trials. z holds each
    trial's image, then (soft labels) its label logits, then the extras (DLM's scale k).
    cases: per-trial data vmapped with z (each client's gradient), passed to loss as its fourth argument;
    then hard labels, if any, are one row per trial too."""
    n_x = math.prod(shape)
    n_y = 0 if hard is not None else shape[0] * classes
    sizes = [e.numel() for e in extras]

    def unpack(z):  # one trial's z -> image, label logits, extras
        x = z[:n_x].view(shape)
        y = z[n_x:n_x + n_y].view(shape[0], classes) if n_y else None  # fixed labels (iDLG): none to optimise
        ex, at = [], n_x + n_y
        for e, n in zip(extras, sizes):
            ex.append(z[at:at + n].view(e.shape))
            at += n
        return x, y, tuple(ex)

    if cases is None:
        def one(z):
            x, y, ex = unpack(z)
            return loss(x, hard if hard is not None else F.softmax(y, dim=-1), ex)

        per_trial = vmap(grad_and_value(one))

        def f(z):
            gz, value = per_trial(z)
            return value, gz
        return f

    def one_case(z, h, case):
        x, y, ex = unpack(z)
        return loss(x, h if h is not None else F.softmax(y, dim=-1), ex, case)

    per_case = vmap(grad_and_value(one_case), in_dims=(0, None if hard is None else 0, 0))

    def f_cases(z):
        gz, value = per_case(z, hard, cases)
        return value, gz
    return f_cases


def racing_matching(kn: Knowledge, p: dict, device, loss: TrialLoss, label_guess: list[int], fixed_labels: bool,
                    extras: tuple[torch.Tensor, ...] = (), clients: list[list[int]] | None = None,
                    cases: tuple | None = None, seeds: list[int] | None = None, noun: str = "client",
                    undecided: int = 0) -> Iterator[Step]:
    """K starts of `gradient_matching` (dlg.py) racing: loss(x, label, extras) is one trial's objective,
    written with torch.func (see `shared_gradient_loss`); extras are further variables (DLM's k).

    clients: one label guess per client of the round, when each client sent its own gradient (`cases`, see
    `client_gradients_loss`): then trial i is client i's attack — one start each, a stalled start replaced by
    that client's next — and the answer is every client's best estimate, not the best trial. Client i's
    trial takes exactly the steps a race of one start takes on its gradient alone (tested).
    seeds: each slot's own seed for its starts (several runs at once, `runs_loss`; default p["seed"] for all);
    noun: what one slot is, in the notes ("client", "run").
    undecided: soft labels start undecided within blocks of this many slots (`dlg._initial_label_logits`)."""
    each = clients is not None
    k, total = (len(clients) if each else p["trials"]), p["iterations"]
    bs, shape, classes = kn.batch_size, (kn.batch_size, *kn.input_shape), kn.num_classes
    guesses = clients if each else [label_guess] * k
    hard = None
    if fixed_labels:
        hard = torch.tensor(guesses, device=device) if each else torch.tensor(label_guess, device=device)
    n_y = 0 if hard is not None else bs * classes

    def start(slot: int, j: int) -> torch.Tensor:  # start j is where the sequential loop's j-th start would be
        g = torch.Generator().manual_seed((p["seed"] if seeds is None else seeds[slot]) * 1000 + 17 + j)
        parts = [_initial_image(shape, g, "robust").flatten()]
        if hard is None:
            parts.append(_initial_label_logits(guesses[slot], bs, classes, g, "robust", undecided).flatten())
        parts += [e.detach().float().flatten() for e in extras]
        return torch.cat(parts).to(device)

    z = torch.stack([start(j, 0 if each else j) for j in range(k)])
    attempts = [1] * k  # each client's starts so far (its next start's number)
    started = k  # racing: starts handed out so far, a stalled trial takes the next one
    n_x = math.prod(shape)
    objective = _objective(loss, hard, shape, classes, extras, cases)
    scale = torch.ones(k, device=device)

    def scaled(z):
        loss, gz = objective(z)
        return loss * scale, gz * scale[:, None]

    opt = BatchedLBFGS(scaled, z, lr=p["lr"], history=HISTORY)

    def labels_of(zk: torch.Tensor) -> list[int]:
        return list(label_guess) if hard is not None else zk[n_x:n_x + n_y].view(bs, classes).argmax(-1).tolist()

    def all_labels(zs: torch.Tensor) -> torch.Tensor:  # every client's labels, in client order (read when scored)
        return hard.flatten() if hard is not None else zs[:, n_x:n_x + n_y].reshape(k, bs, classes).argmax(-1).flatten()

    def all_images(zs: torch.Tensor) -> torch.Tensor:
        return zs[:, :n_x].reshape(k * bs, *shape[1:])

    compiling = wanted(p, device, k)
    nan_k = torch.full((k,), math.nan, device=device)
    # an undecided start has no argmax yet (an even spread reads as its lowest label): while a frame shows the
    # starts (frame 0, and step 1, which shows where it began), the labels read off the update, as dlg.py's frame 0
    read = undecided and hard is None
    if each:
        start_labels = torch.tensor(guesses).flatten() if read else all_labels(z)
        yield Step(0, total, math.nan, all_images(z), start_labels,
                   f"{plural(k, noun)} attacked at once, one start each", stage=COMPILING if compiling else None,
                   aligned=bs == 1, losses=nan_k)
    else:
        yield Step(0, total, math.nan, z[0, :n_x].view(shape), list(label_guess) if read else labels_of(z[0]),
                   f"{k} random starts racing", stage=COMPILING if compiling else None)
    note = None
    if compiling:  # without CUDA graphs of its own: each L-BFGS step is captured whole (lbfgs.py)
        objective, note = compile_objective(objective, z, cuda_graphs=False)
    inf = torch.full((k,), math.inf, device=device)
    nan = torch.full_like(inf, math.nan)
    best_loss, best_z, first, prev = inf.clone(), z.clone(), nan.clone(), nan.clone()
    answer_loss, answer_z = inf.clone(), z.clone()  # each slot's best over every start it ran
    since = torch.zeros(k, dtype=torch.long, device=device)  # steps without a 1 % improvement
    age = torch.zeros(k, dtype=torch.long, device=device)  # steps since the slot's start
    halved_from, since_halved = inf.clone(), torch.zeros_like(since)  # the best when it last halved; steps since
    for done in range(1, total + 1):
        before = opt.z.clone()  # the optimiser's tensors change in place (a CUDA graph replays into them)
        loss = opt.step() / scale  # each trial's loss at `before`
        finite = torch.isfinite(loss)
        better = finite & (loss < best_loss)
        since = torch.where(finite & (loss < 0.99 * best_loss), torch.zeros_like(since), since + 1)
        age += 1
        halved = finite & (loss <= 0.5 * halved_from)
        halved_from = torch.where(halved, loss, halved_from)
        since_halved = torch.where(halved, torch.zeros_like(since_halved), since_halved + 1)
        best_loss = torch.where(better, loss, best_loss)
        best_z = torch.where(better[:, None], before, best_z)
        kept = best_loss < answer_loss
        answer_loss = torch.where(kept, best_loss, answer_loss)
        answer_z = torch.where(kept[:, None], best_z, answer_z)
        first = torch.where(torch.isnan(first), loss, first)
        # a trial that jumped away from its best estimate goes back to it (the sequential loop's rule)
        diverged = (~finite | (loss > DIVERGED * best_loss)) & torch.isfinite(best_loss)
        # L-BFGS's absolute tolerances stop a converging trial short: re-scale its loss
        polish = ~diverged & finite & ((prev == loss) | ((loss < POLISH_BELOW * first) & (prev - loss >= 0)
                                                         & (prev - loss < POLISH_RATIO * loss)))
        opt.z.copy_(torch.where(diverged[:, None], best_z, opt.z))
        scale.copy_(torch.where(diverged, 1.0 / best_loss.clamp_min(1e-30),
                                torch.where(polish, 1.0 / loss.clamp_min(1e-30), scale)))
        opt.restart(diverged | polish)
        prev = torch.where(diverged, nan, loss)
        # a start stuck far from zero (sigmoid saturation, typically) gives its slot to a fresh start, as the
        # sequential loop restarts; its best stays on record
        given_up = (stalled(since, best_loss, first) | hopeless(age, best_loss, first)  # the sequential loop's rules
                    | crawling(since_halved, best_loss, first))
        # the host syncs of the step: which slots stalled, and which trial leads, for the page
        redo = given_up.nonzero().flatten().tolist()
        if redo:
            if each:
                fresh = torch.stack([start(s, attempts[s]) for s in redo])
                for s in redo:
                    attempts[s] += 1
            else:
                fresh = torch.stack([start(s, started + i) for i, s in enumerate(redo)])
            started += len(redo)
            opt.z.index_copy_(0, torch.tensor(redo, device=device), fresh)
            opt.restart(given_up)
            scale.copy_(torch.where(given_up, torch.ones_like(scale), scale))
            best_loss, first, prev, halved_from = (torch.where(given_up, v, x) for v, x in (
                (inf, best_loss), (nan, first), (nan, prev), (inf, halved_from)))
            since, age, since_halved = (torch.where(given_up, torch.zeros_like(t), t) for t in (since, age, since_halved))
        if each:  # every client's current estimate; the loss is their sum (a tensor: read only when scored)
            yield Step(done, total, torch.where(finite, loss, torch.zeros_like(loss)).sum(), all_images(before),
                       start_labels if read and done == 1 else all_labels(before),
                       note if done == 1 else said_once(opt, "graph_note"),
                       aligned=bs == 1, losses=loss)
            continue
        shown = torch.where(finite, loss, inf)
        lead = int(torch.argmin(shown))
        yield Step(done, total, float(shown[lead]), before[lead, :n_x].view(shape),
                   list(label_guess) if read and done == 1 else labels_of(before[lead]),
                   note if done == 1 else said_once(opt, "graph_note"),
                   trials=before[:SHOWN, :n_x].view(-1, *shape))
    fresh_note = f" ({plural(started - k, 'stalled start')} replaced)" if started > k else ""
    if each:
        lost = int((~torch.isfinite(answer_loss)).sum())
        yield Step(total, total, torch.where(torch.isfinite(answer_loss), answer_loss, 0.0).sum(),
                   all_images(answer_z).clamp(0, 1), all_labels(answer_z),
                   f"kept each of the {k} {noun}s' estimates at its lowest gradient distance{fresh_note}"
                   + (f"; {plural(lost, noun)} diverged at every step" if lost else ""), final=True, aligned=bs == 1,
                   losses=answer_loss)
        return
    winner = int(torch.argmin(answer_loss))
    if not math.isfinite(float(answer_loss[winner])):  # every step of every trial was non-finite
        yield Step(total, total, math.inf, opt.z[0, :n_x].view(shape).clamp(0, 1), None,
                   f"all {k} starts diverged", final=True)
        return
    yield Step(total, total, float(answer_loss[winner]), answer_z[winner, :n_x].view(shape).clamp(0, 1),
               labels_of(answer_z[winner]), f"kept the best of {k} racing starts (start {winner + 1}), at its lowest "
               f"gradient distance{fresh_note}", final=True)
