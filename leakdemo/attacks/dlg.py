"""DLG (Zhu et al., 2019) and iDLG (Zhao et al., 2020): match the shared gradient with L-BFGS.

The published DLG loop starts from N(0, 1) noise and a random label, and on some photo/seed pairs it
diverges to a point L-BFGS never leaves (it sits near 5 dB). Our `robust` loop keeps the objective
(the L2 gradient distance, image and soft label optimised jointly) but
  * starts from mid-gray plus a little noise, and from the label the last layer's gradient gives;
  * watches its own loss: non-finite or stuck far from zero → restart from a new seed, visibly;
  * always keeps the best estimate it has seen (by its own loss), so a late blow-up costs nothing;
  * re-scales the loss when L-BFGS's absolute tolerances stop it short of convergence (polish).
`loop=original` runs the published loop unchanged, for comparison and teaching.
"""
from __future__ import annotations

import math
from typing import Callable, Iterator

import torch
import torch.nn.functional as F

from ..cuda_graph import said_once
from ..threat import Knowledge, Observation, Step
from ..words import three_digits
from .gradients import infer_labels, l2_distance, model_gradients
from .compiled import COMPILING, compile_objective, only_held, wanted
from .lbfgs import BatchedLBFGS
from .notes import BACK_TO_BEST, KEPT_BEST, RESTARTING

STALL_WINDOW = 10  # steps without a 1% improvement of the best loss
STALL_RATIO = 1e-4  # ... while still above this fraction of the starting loss -> restart
HOPELESS_AFTER = 50  # steps: a start still above this fraction of its first loss by then -> restart, even
HOPELESS_RATIO = 0.1  # while it creeps down (a saturated start loses ~1 %/step for hundreds of steps; starts
# that converged were below 1e-4 by step 25, those a defense or DLM+'s 4 steps held up levelled off at 2e-4-3e-2)
POLISH_RATIO = 1e-3  # improvements smaller than this fraction of the loss per step -> re-scale
POLISH_BELOW = 1e-6  # ... but only this close to convergence (earlier, let L-BFGS keep its history)
DIVERGED = 100.0  # a loss this many times the trial's best means L-BFGS jumped away
CRAWL_WINDOW = 50  # steps without halving the best loss, while still above STALL_RATIO of the first -> restart
# (after warm-up, starts sank into shallow valleys at 2e-3-4e-4 of their first loss and crept on well under
# 1 %/step to the end: 4.5-5.5 dB; below STALL_RATIO, starts held up by weak noise or pruning creep towards
# their floor at 23-50 dB: kept)


def stalled(since_improved, best, first):
    """Stuck far from zero: no 1 % gain for STALL_WINDOW steps while above STALL_RATIO of its first loss.
    Numbers or tensors (racing starts ask it of every slot at once)."""
    return (since_improved >= STALL_WINDOW) & (best > STALL_RATIO * first)


def hopeless(steps, best, first):
    """However it creeps, still above HOPELESS_RATIO of its first loss after HOPELESS_AFTER steps."""
    return (steps >= HOPELESS_AFTER) & (best > HOPELESS_RATIO * first)


def crawling(since_halved, best, first):
    """Creeping down a shallow valley far from the answer: no halving of the best loss in CRAWL_WINDOW steps
    while above STALL_RATIO of its first loss."""
    return (since_halved >= CRAWL_WINDOW) & (best > STALL_RATIO * first)


def restart_reason(steps: int, since_improved: int, best: float, first: float, since_halved: int = 0) -> str | None:
    """Why a start should give its place to a fresh one, or None."""
    if stalled(since_improved, best, first):
        return f"stalled at loss {three_digits(best)}"
    if hopeless(steps, best, first):
        return f"still at {best / first:.0%} of its first loss after {steps} steps"
    if crawling(since_halved, best, first):
        return f"crawling at loss {three_digits(best)} (not halved in {since_halved} steps)"
    return None


def _initial_image(shape, g: torch.Generator, loop: str) -> torch.Tensor:
    if loop == "original":
        return torch.randn(shape, generator=g)
    return (0.5 + 0.1 * torch.randn(shape, generator=g)).clamp(0, 1)


def _initial_label_logits(guess: list[int], bs: int, classes: int, g, loop: str, undecided: int = 0) -> torch.Tensor:
    """Soft labels' start: confident in each slot's guess; with `undecided` > 0, the slots in blocks of that
    many start evenly spread over their block's guessed labels — when the guesses say which labels a block
    holds but not which slot holds which (DLM over several local steps)."""
    if loop == "original":
        return torch.randn((bs, classes), generator=g)
    logits = torch.zeros((bs, classes))
    if undecided:
        for at in range(0, len(guess), undecided):
            logits[at:at + undecided, sorted(set(guess[at:at + undecided]))] = 5.0
        return logits
    for i, c in enumerate(guess):
        logits[i, c] = 5.0  # a confident start; the label stays free to move
    return logits


Objective = Callable[[torch.Tensor, torch.Tensor, list[torch.Tensor]], torch.Tensor]


def gradient_matching(kn: Knowledge, p: dict, device, objective: Objective, label_guess: list[int],
                      fixed_labels: bool, extras: tuple[torch.Tensor, ...] = (), trial_loss=None,
                      undecided: int = 0) -> Iterator[Step]:
    """The L-BFGS loop shared by DLG, iDLG (fixed labels), DLM and DLM+.

    objective(x, label, extras) -> loss, where label is the class indices (fixed_labels) or the soft
    label's probabilities; extras are further variables optimised jointly (DLM's scale k).
    trial_loss is the same objective in torch.func (racing.py); when p["compile"] asks for it the loop
    evaluates that, compiled (compiled.py), on the variables packed into one vector — the same L-BFGS, each
    evaluation about 3× faster on a CPU.
    undecided: soft labels start undecided within blocks of this many slots (`_initial_label_logits`).
    """
    bs, shape = kn.batch_size, (kn.batch_size, *kn.input_shape)
    loop, total, max_restarts = p["loop"], p["iterations"], p["restarts"]
    hard = torch.tensor(label_guess, device=device) if fixed_labels else None
    fixed_list = list(label_guess) if fixed_labels else None

    best_loss, best_x, best_labels = math.inf, None, None
    done, trial = 0, 0
    compiling = trial_loss is not None and wanted(p, device, 1, held=True)
    held = only_held(p, device, 1)  # a build this worker holds, or none: never a wait for one
    packed, compile_note = None, None
    final_note = KEPT_BEST
    while done < total:
        g = torch.Generator().manual_seed(p["seed"] * 1000 + 17 + trial)
        x = _initial_image(shape, g, loop).to(device).requires_grad_(True)
        variables = [x]
        if hard is None:
            y = _initial_label_logits(label_guess, bs, kn.num_classes, g, loop, undecided).to(device).requires_grad_(True)
            variables.append(y)
        ex = [e.detach().clone().to(device).requires_grad_(True) for e in extras]
        variables += ex
        scale = 1.0  # the loss's re-scaling, on the host; scale_t the same on the device (a CUDA graph reads it)
        scale_t = torch.ones((), dtype=x.dtype, device=device)

        # restarts add a strong-Wolfe line search: slower per step, but it cannot jump into saturation
        search = "strong_wolfe" if (trial > 0 and loop != "original") else None

        def make_optimizer():
            if search is None and loop != "original":  # the same L-BFGS, its direction in a few products
                return _PackedLBFGS(variables, p["lr"])
            return torch.optim.LBFGS(variables, lr=p["lr"], max_iter=20, history_size=100, line_search_fn=search)

        def renewed(old):
            """A fresh optimiser at the variables' values: the packed one forgets its history in place (its
            CUDA graph stays valid), torch's is made anew."""
            if isinstance(old, _PackedLBFGS):
                old.reset()
                return old
            return make_optimizer()

        opt = make_optimizer()
        if done == 0:  # frame 0: the starting point, shown before the first (slowest) step
            # an undecided start has no argmax yet (an even spread reads as its lowest label): show the guess read
            shown = fixed_list if hard is not None else list(label_guess) if undecided else y.argmax(-1).tolist()
            yield Step(0, total, math.nan, x.detach(), shown, stage=COMPILING if compiling and not held else None)
            if compiling:
                from .racing import _objective  # racing imports this module
                packed, compile_note = compile_objective(  # L-BFGS captures whole steps: no graphs of its own
                    _objective(trial_loss, hard, shape, kn.num_classes, tuple(extras)), _pack(variables),
                    cuda_graphs=False, held_only=held)

        def closure():
            if packed is not None:  # the compiled objective: value and gradient of the packed variables
                value, grad = packed(_pack(variables))
                at = 0
                for v in variables:
                    v.grad = (grad[0, at:at + v.numel()] * scale_t).view_as(v)
                    at += v.numel()
                return (value[0] * scale_t).detach()
            label = hard if hard is not None else F.softmax(y, dim=-1)
            loss = objective(x, label, ex)
            # differentiate w.r.t. the estimates only (not the model weights): saves a third of the work
            scaled = loss * scale_t
            for v, grad in zip(variables, torch.autograd.grad(scaled, variables)):
                v.grad = grad
            return scaled.detach()  # L-BFGS's tolerances must see the scaled loss

        first, trial_best, since_improved, prev, steps = None, math.inf, 0, None, 0
        halved_from, since_halved = math.inf, 0  # the best loss when it last halved, and the steps since
        trial_min, trial_vars = math.inf, None
        reason = "budget"
        while done < total:
            before = [v.detach().clone() for v in variables]
            loss = float(opt.step(closure)) / scale  # L-BFGS returns the loss at `before`
            done, steps = done + 1, steps + 1
            finite = math.isfinite(loss)
            if finite and loss < trial_min:
                trial_min, trial_vars = loss, before
            if finite and loss < best_loss:
                best_loss, best_x = loss, before[0]
                best_labels = hard.tolist() if hard is not None else before[1].argmax(-1).tolist()
            first = loss if first is None else first
            if finite and loss < trial_best * 0.99:
                trial_best, since_improved = loss, 0
            else:
                since_improved += 1
            if finite and loss <= 0.5 * halved_from:
                halved_from, since_halved = loss, 0
            else:
                since_halved += 1
            labels = (hard if hard is not None else y.argmax(-1)).tolist()
            graph_note = said_once(opt.opt, "graph_note") if isinstance(opt, _PackedLBFGS) else None
            yield Step(done, total, loss, x.detach(), labels, compile_note if done == 1 else graph_note)
            if loop == "original":
                continue
            if (not finite or loss > DIVERGED * trial_min) and trial_vars is not None:
                # L-BFGS jumped away from a good estimate: go back to the best one and carry on.
                with torch.no_grad():
                    for v, b in zip(variables, trial_vars):
                        v.copy_(b)
                scale, prev = 1.0 / max(trial_min, 1e-30), None
                scale_t.fill_(scale)
                opt = renewed(opt)
                yield Step(done, total, trial_min, x.detach(), labels, BACK_TO_BEST)
                continue
            if not finite:
                reason = "the loss became non-finite"
                break
            why = restart_reason(steps, since_improved, trial_best, first, since_halved)
            if why is not None:
                reason = why
                break
            stuck = prev is not None and prev == loss  # L-BFGS did not move at all: under its tolerances
            if stuck or (loss < POLISH_BELOW * first and prev is not None and 0 <= prev - loss < POLISH_RATIO * loss):
                # L-BFGS stops on absolute tolerances; re-scaling the loss lets it continue to converge.
                scale = 1.0 / max(loss, 1e-30)
                scale_t.fill_(scale)
                opt = renewed(opt)
            prev = loss
        if reason == "budget":
            break
        if trial >= max_restarts:
            final_note = f"gave up after {trial + 1} starts ({reason}); kept the best estimate"
            break
        trial += 1
        yield Step(done, total, best_loss, (best_x if best_x is not None else x.detach()), best_labels,
                   f"{reason} — {RESTARTING} ({trial}/{max_restarts})")
    if trial and final_note == KEPT_BEST:  # the restarts' notes pass with the run; the summary keeps their count
        final_note += f" (over {trial + 1} starts)"
    if best_x is None:  # every step was non-finite: report the last estimate honestly
        best_x, best_labels = x.detach(), None
    yield Step(done, total, best_loss, best_x.clamp(0, 1), best_labels, final_note, final=True)


def _pack(variables: list[torch.Tensor]) -> torch.Tensor:
    """The loop's variables (image, label logits, extras) as one row: the racing objective's z, K = 1."""
    return torch.cat([v.detach().flatten() for v in variables])[None]


def _unpack(variables: list[torch.Tensor], z: torch.Tensor) -> None:
    at = 0
    with torch.no_grad():
        for v in variables:
            v.copy_(z[at:at + v.numel()].view_as(v))
            at += v.numel()


class _PackedLBFGS:
    """`torch.optim.LBFGS(...).step(closure)` without a line search, run by `BatchedLBFGS` with one trial:
    the same algorithm and tolerances (tested equal), but its direction costs a few matrix products where
    torch's two-loop recursion makes ~800 tiny calls per evaluation with 100 pairs, and on a GPU it never
    waits for the device (torch's branches on tensor values: a host sync several times per evaluation)."""

    def __init__(self, variables: list[torch.Tensor], lr: float):
        self.variables, self.closure = variables, None
        self.opt = BatchedLBFGS(self._objective, _pack(variables), lr=lr, history=100)

    def _objective(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        _unpack(self.variables, z[0])
        loss = self.closure()
        return loss.detach().reshape(1), torch.cat([v.grad.flatten() for v in self.variables])[None]

    def step(self, closure) -> torch.Tensor:
        self.closure = closure
        loss = self.opt.step(max_iter=20)
        _unpack(self.variables, self.opt.z[0])
        return loss[0]

    def reset(self) -> None:
        """As a new optimiser at the variables' current values (tested equal): no history, a first step next."""
        self.opt.z.copy_(_pack(self.variables))
        self.opt.restart(torch.ones_like(self.opt.fresh))


def _l2_to_shared_gradient(obs: Observation, kn: Knowledge, device) -> Objective:
    model = kn.model.to(device)
    model.train()
    target = [t.to(device) for t in obs.payload]
    return lambda x, label, extras: l2_distance(model_gradients(model, x, label, create_graph=True), target)


def _functional(obs: Observation, kn: Knowledge, device, p: dict):
    """The torch.func form of the objective, when it is to be compiled (built only then: it copies the model)."""
    if not wanted(p, device, 1, held=True):
        return None
    from .racing import shared_gradient_loss
    return shared_gradient_loss(obs, kn, device)


def dlg(obs: Observation, kn: Knowledge, p: dict, device) -> Iterator[Step]:
    """Deep Leakage from Gradients: image and soft label optimised jointly."""
    if obs.kind == "vfl":
        yield from _dlg_on_one_batch(obs, kn, p, device)
        return
    if obs.context.get("clients", 1) > 1:
        yield from _every_client(obs, kn, p, device, fixed_labels=False)
        return
    guess = infer_labels(kn.model, obs.payload, kn.batch_size)  # the robust loop's starting label
    if p.get("trials", 1) > 1:
        from .racing import racing_matching, shared_gradient_loss
        yield from racing_matching(kn, p, device, shared_gradient_loss(obs, kn, device), guess, fixed_labels=False)
        return
    yield from gradient_matching(kn, p, device, _l2_to_shared_gradient(obs, kn, device), guess, fixed_labels=False,
                                 trial_loss=_functional(obs, kn, device, p))


def idlg(obs: Observation, kn: Knowledge, p: dict, device) -> Iterator[Step]:
    """iDLG: the label from the last layer's gradient (exact at batch 1), then match the image only."""
    if obs.context.get("clients", 1) > 1:
        yield from _every_client(obs, kn, p, device, fixed_labels=True)
        return
    labels = infer_labels(kn.model, obs.payload, kn.batch_size)
    if p.get("trials", 1) > 1:
        from .racing import racing_matching, shared_gradient_loss
        yield from racing_matching(kn, p, device, shared_gradient_loss(obs, kn, device), labels, fixed_labels=True)
        return
    yield from gradient_matching(kn, p, device, _l2_to_shared_gradient(obs, kn, device), labels, fixed_labels=True,
                                 trial_loss=_functional(obs, kn, device, p))


def _every_client(obs: Observation, kn: Knowledge, p: dict, device, fixed_labels: bool) -> Iterator[Step]:
    """A round of several clients, each gradient seen apart (no secure aggregation): the server attacks them
    all at once, one start per client in one vectorised program (racing.py), each label read off its own
    client's gradient."""
    from .racing import client_gradients_loss, racing_matching
    guesses = [infer_labels(kn.model, sent, kn.batch_size) for sent in obs.payload]
    loss, cases = client_gradients_loss(obs, kn, device)
    yield from racing_matching(kn, p, device, loss, [], fixed_labels, clients=guesses, cases=cases)


def several_runs(runs: list[tuple[Observation, Knowledge]], p: dict, seeds: list[int], device,
                 fixed_labels: bool) -> Iterator[Step]:
    """Several runs of one DLG or iDLG scenario at once — a sweep's seeds, photos and defense strengths: trial i
    is run i, with its own shared gradient, model weights, label guess and seed, one start each in one
    vectorised program (racing.py); leakdemo.together deals each step back to its run."""
    from .racing import racing_matching, runs_loss
    guesses = [infer_labels(kn.model, obs.payload, kn.batch_size) for obs, kn in runs]
    loss, cases = runs_loss(runs, device)
    yield from racing_matching(runs[0][1], p, device, loss, [], fixed_labels, clients=guesses, cases=cases,
                               seeds=seeds, noun="run")


def _dlg_on_one_batch(obs: Observation, kn: Knowledge, p: dict, device) -> Iterator[Step]:
    """The baseline CAFE is compared with: DLG on one aggregated VFL batch gradient, the whole model.

    The server asks for the batch it likes (the first `batch_size` indices of a seeded permutation) and
    treats workers + top model as one network; DLG cannot tell the batch's samples apart, so its images
    are scored against that batch in the best order (Hungarian), not against all N samples.
    """
    n, k = obs.context["n_samples"], obs.context["batch_size"]
    ids = torch.randperm(n, generator=torch.Generator().manual_seed(p["seed"] * 1000 + 43))[:k].tolist()
    q = obs.payload.query(ids)
    with torch.no_grad():
        for w, new in zip(kn.model.parameters(), q.weights):
            w.copy_(new)
    grads = [t for u in q.workers for t in u] + list(q.top)
    one = Observation("gradients", grads, obs.description, {"batch_size": k})
    for step in dlg(one, kn, p, device):
        step.sample_ids = ids
        yield step
