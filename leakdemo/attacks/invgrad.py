"""Inverting Gradients (Geiping et al., 2020): cosine gradient distance + total variation, Adam on
signed gradients with a step schedule, a [0, 1] box, and restarts chosen by the attack's own loss.

The restarts race: all starts run together as one batch with a leading trial axis and one Adam, which is
K independent Adams since Adam works element by element. Each trial needs its own gradient of the model
(a double backward): on a GPU they are vmapped into one program; on a CPU, which is compute-bound here
(measured: vmapped is up to 1.5x slower there), a loop over the trials computes them — unless the objective is
compiled (`compile`, on by default for racing starts), which only the vmapped form can be, and which makes four
starts cost about what one does on the CPU. The page shows the leading start live and, side by side, the others."""
from __future__ import annotations

from typing import Callable, Iterator

import torch
from torch.func import grad_and_value, vmap

from ..cuda_graph import Replayed, said_once
from ..threat import Knowledge, Observation, Step
from .compiled import COMPILING, compile_objective, wanted
from .gradients import cosine_distance, infer_labels, model_gradients, total_variation
from .racing import SHOWN, functional_gradients, trial_model

ValueAndGrad = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def signed_adam_trials(value_and_grad: ValueAndGrad, x: torch.Tensor, iterations: int,
                       lr: float) -> Iterator[torch.Tensor]:
    """Inverting Gradients' optimiser: Adam fed the sign of the gradient, the learning rate divided by
    10 at 3/8, 5/8 and 7/8 of the steps, the image boxed to [0, 1]. `value_and_grad` maps x to (losses,
    ∂loss/∂x); x may hold K trials. Updates x in place; yields each step's losses as a tensor (no host sync)."""
    opt = torch.optim.Adam([x], lr=lr)
    milestones = [int(iterations * f) for f in (3 / 8, 5 / 8, 7 / 8)]
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=milestones, gamma=0.1)
    for _ in range(iterations):
        loss, g = value_and_grad(x.detach())
        x.grad = g.sign()
        opt.step()
        sched.step()
        with torch.no_grad():
            x.clamp_(0, 1)
        yield loss


def scalar_objective(objective: Callable[[torch.Tensor], torch.Tensor]) -> ValueAndGrad:
    """x -> (loss, ∂loss/∂x) for one scalar objective, with autograd (signed_adam_trials then yields the
    losses as 0-dim tensors, still on the device: a Step carries them as they are)."""
    def value_and_grad(v):
        v = v.detach().requires_grad_(True)
        loss = objective(v)
        return loss.detach(), torch.autograd.grad(loss, [v])[0]
    return value_and_grad


def graphed_on_gpu(value_and_grad: ValueAndGrad, device) -> ValueAndGrad:
    """An eager objective's evaluation replayed as one CUDA graph on a GPU (cuda_graph.Replayed), the
    same function: eagerly each evaluation is hundreds of small launches the host issues one by one. On an
    H200, Inverting Gradients ran 92 it/s eagerly (1071 compiled) and the FedAvg simulation 55 it/s, where two
    CPU cores ran 124 and 42. A compiled objective captures its own graphs and a CPU needs none: both are
    returned as they are. A capture that fails leaves the objective eager, with `graph_note` saying why."""
    device = torch.device(device)
    return Replayed(value_and_grad, device, "the objective's evaluations") if device.type == "cuda" else value_and_grad


def fastest(value_and_grad: ValueAndGrad, x: torch.Tensor, compiling: bool, device) -> tuple[ValueAndGrad, str | None]:
    """The objective as the attack runs it, with the note a compile leaves: compiled when `compiling`
    (compiled.py; on a GPU it captures its own graphs), else replayed as a CUDA graph on a GPU (graphed_on_gpu)."""
    if compiling:
        return compile_objective(value_and_grad, x)
    return graphed_on_gpu(value_and_grad, device), None


def graph_note(value_and_grad: ValueAndGrad) -> str | None:
    """Why the objective runs eagerly on a GPU after all (see graphed_on_gpu), once: at the step whose
    evaluation gave up capturing it."""
    return said_once(value_and_grad)


def trials_objective(loss: Callable[[torch.Tensor], torch.Tensor], func_loss: Callable[[torch.Tensor], torch.Tensor],
                     vectorised: bool) -> ValueAndGrad:
    """x (K, ...) -> (losses (K,), ∂loss/∂x): one trial's loss for every trial. vectorised: `func_loss` (the
    same loss written with torch.func, see `racing.trial_model`) vmapped into one program, for a GPU;
    otherwise a loop of `loss` with plain autograd, which is faster on a CPU (measured: 5.6 against 8.3 ms
    per trial for Inverting Gradients at batch 1)."""
    if vectorised:
        both = vmap(grad_and_value(func_loss))

        def vmapped(x):
            g, value = both(x)
            return value, g
        return vmapped

    return looped_trials(lambda k: loss)


def looped_trials(loss_of: Callable[[int], Callable[[torch.Tensor], torch.Tensor]]) -> ValueAndGrad:
    """x (K, ...) -> (losses (K,), ∂loss/∂x): trial k's loss `loss_of(k)`, one trial after another with autograd."""
    def looped(x):
        losses, grads = [], []
        for k, xk in enumerate(x.detach()):
            xk.requires_grad_(True)
            value = loss_of(k)(xk)
            grads.append(torch.autograd.grad(value, [xk])[0])
            losses.append(value.detach())
        return torch.stack(losses), torch.stack(grads)
    return looped


def trial_objective(model: torch.nn.Module, target: list[torch.Tensor], y: torch.Tensor, tv: float,
                    vectorised: bool) -> ValueAndGrad:
    """Inverting Gradients' objective for K trials: each trial's cosine gradient distance + TV."""
    fmodel, buffers = trial_model(model)
    weights = {n: w.detach() for n, w in fmodel.named_parameters()}

    def loss(x):
        return cosine_distance(model_gradients(model, x, y, create_graph=True), target) + tv * total_variation(x)

    def func_loss(x):
        return cosine_distance(functional_gradients(fmodel, weights, buffers, x, y), target) + tv * total_variation(x)
    return trials_objective(loss, func_loss, vectorised)


def racing_signed_adam(value_and_grad: ValueAndGrad, x: torch.Tensor, iterations: int, lr: float, labels,
                       done: int = 0, total: int | None = None, matching: dict | None = None,
                       note: str | None = None) -> Iterator[Step]:
    """Signed Adam on K starts x (K, B, C, H, W) as a stream of Steps: the leading start live (with K > 1 the
    first SHOWN side by side), then the start with the lowest objective — the attack's own loss — as the answer.
    No host sync per step: the leading start is picked on the device, and its loss stays there until the
    Runner scores that frame."""
    k, total = len(x), total or iterations
    for i, loss in enumerate(signed_adam_trials(value_and_grad, x, iterations, lr), 1):
        lead = torch.argmin(torch.nan_to_num(loss, nan=float("inf"))).view(1)
        yield Step(done + i, total, loss.detach().index_select(0, lead)[0], x.detach().index_select(0, lead)[0],
                   labels, note if i == 1 else graph_note(value_and_grad),
                   trials=x.detach()[:SHOWN] if k > 1 else None)
    final, _ = value_and_grad(x.detach())
    best = int(torch.argmin(torch.nan_to_num(final.detach(), nan=float("inf"))))
    yield Step(done + iterations, total, float(final[best]), x[best].detach().clone(), labels,
               f"kept the best of {k} racing starts (start {best + 1}), by its own objective" if k > 1 else None,
               final=True, matching=matching)


def invgrad(obs: Observation, kn: Knowledge, p: dict, device) -> Iterator[Step]:
    model = kn.model.to(device)
    model.train()
    target = [t.to(device) for t in obs.payload]
    labels = infer_labels(kn.model, obs.payload, kn.batch_size)
    y = torch.tensor(labels, device=device)
    shape = (kn.batch_size, *kn.input_shape)
    k = p["restarts"] + 1
    # the vmapped torch.func objective compiles; the autograd loop cannot. One start on a GPU stays eager, its
    # evaluation replayed as a CUDA graph (graphed_on_gpu): on an H200 1349 it/s and 0.8 s whole, against 784
    # it/s compiled (1.3 s) after a 15 s build; invgrad-batch 1.9 s whole in a fresh process against 19 s
    compiling = wanted(p, device, k, pays_for_one_on_gpu=False)
    value_and_grad = trial_objective(model, target, y, p["tv_weight"],
                                     vectorised=compiling or (k > 1 and torch.device(device).type == "cuda"))
    starts = [torch.rand(shape, generator=torch.Generator().manual_seed(p["seed"] * 1000 + 29 + j)) for j in range(k)]
    x = torch.stack(starts).to(device)
    yield Step(0, p["iterations"], float("nan"), x[0].detach(), labels, f"{k} random starts racing" if k > 1 else None,
               stage=COMPILING if compiling else None)
    value_and_grad, note = fastest(value_and_grad, x, compiling, device)
    yield from racing_signed_adam(value_and_grad, x, p["iterations"], p["lr"], labels, note=note)


def runs_objective(runs: list[tuple[Observation, Knowledge]], labels: torch.Tensor, tv: float,
                   vectorised: bool, device) -> ValueAndGrad:
    """Inverting Gradients' objective for several runs at once (a sweep's seeds, photos and defense strengths):
    trial k is run k, with its own model weights, shared gradient and inferred labels (k, B). vectorised: one
    vmapped torch.func program, each run's weights, gradient and labels vmapped with its image (for a GPU, or
    compiled); otherwise a loop over the runs' own models with autograd — each trial then computes exactly
    what the run alone computes."""
    models = [kn.model.to(device).train() for _, kn in runs]
    targets = [[t.to(device) for t in obs.payload] for obs, _ in runs]

    def loss_of(k: int) -> Callable[[torch.Tensor], torch.Tensor]:
        def loss(x):
            return (cosine_distance(model_gradients(models[k], x, labels[k], create_graph=True), targets[k])
                    + tv * total_variation(x))
        return loss

    if not vectorised:
        return looped_trials(loss_of)

    fmodel, buffers = trial_model(models[0])
    names = [n for n, _ in fmodel.named_parameters()]
    weights = tuple(torch.stack([dict(m.named_parameters())[n].detach() for m in models]) for n in names)
    gradients = tuple(torch.stack([t[i] for t in targets]) for i in range(len(names)))

    def func_loss(x, case, y):
        w, target = dict(zip(names, case[:len(names)])), case[len(names):]
        return cosine_distance(functional_gradients(fmodel, w, buffers, x, y), list(target)) + tv * total_variation(x)

    both = vmap(grad_and_value(func_loss))
    cases = weights + gradients

    def vmapped(x):
        g, value = both(x, cases, labels)
        return value, g
    return vmapped


def several_runs(runs: list[tuple[Observation, Knowledge]], p: dict, seeds: list[int], device) -> Iterator[Step]:
    """Several runs of one Inverting Gradients scenario at once — a sweep's seeds, photos and defense
    strengths: trial k is run k, with its own model, shared gradient, inferred labels and seeded start (the one
    it draws alone), one signed Adam on the whole batch (Adam works element by element: K independent Adams).
    Each step carries every run's images and loss; leakdemo.together deals it back to its run."""
    k = len(runs)
    guesses = [infer_labels(kn.model, obs.payload, kn.batch_size) for obs, kn in runs]
    labels = torch.tensor(guesses, device=device)
    flat = [c for g in guesses for c in g]
    kn0 = runs[0][1]
    shape = (kn0.batch_size, *kn0.input_shape)
    x = torch.stack([torch.rand(shape, generator=torch.Generator().manual_seed(s * 1000 + 29)) for s in seeds]).to(device)
    compiling = wanted(p, device, k)
    value_and_grad = runs_objective(runs, labels, p["tv_weight"], compiling or torch.device(device).type == "cuda",
                                    device)
    yield Step(0, p["iterations"], float("nan"), x.detach().flatten(0, 1).clone(), flat,
               f"{k} runs attacked at once, one start each", stage=COMPILING if compiling else None,
               losses=torch.full((k,), float("nan")))
    value_and_grad, note = fastest(value_and_grad, x, compiling, device)
    for i, loss in enumerate(signed_adam_trials(value_and_grad, x, p["iterations"], p["lr"]), 1):
        # copies: x moves on while the runs that have not taken a step yet wait
        yield Step(i, p["iterations"], loss[0], x.detach().flatten(0, 1).clone(), flat,
                   note if i == 1 else graph_note(value_and_grad), losses=loss)
    final, _ = value_and_grad(x.detach())
    yield Step(p["iterations"], p["iterations"], final[0], x.detach().flatten(0, 1).clone(), flat,
               f"each of the {k} runs kept its last estimate", final=True, losses=final.detach())
