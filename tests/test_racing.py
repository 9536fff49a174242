"""The trial axis: K starts of DLG/iDLG/DLM/DLM+ (batched L-BFGS) and of Inverting Gradients and AGIC (batched
signed Adam) as one program (issue 14's CPU-verifiable part)."""
import math

import pytest
import torch

from leakdemo import catalog
from leakdemo.attacks.dlm import _trial_loss, local_schedule, normalised_distance, replayed_steps
from leakdemo.attacks.gradients import infer_labels, l2_distance, model_gradients
from leakdemo.attacks.agic import _Problem
from leakdemo.attacks.invgrad import signed_adam_trials, trial_objective, trials_objective
from leakdemo.attacks.lbfgs import BatchedLBFGS
from leakdemo.attacks.racing import _objective, client_gradients_loss, shared_gradient_loss
from leakdemo.attacks.rounds import first_epoch, prepare_rounds
from leakdemo.errors import ParamError
from leakdemo.events import Progress
from leakdemo.runner import Run
from leakdemo.scenario import from_preset


def _bumpy(z):
    """Rosenbrock plus a quadratic: curved enough that L-BFGS's history matters."""
    a = torch.linspace(0.1, 1.0, z.shape[1], dtype=z.dtype)
    return ((1 - z[:, :-1]) ** 2).sum(1) + 10 * ((z[:, 1:] - z[:, :-1] ** 2) ** 2).sum(1) + 0.1 * (a * z * z).sum(1)


def _with_grad(f):
    def objective(z):
        z = z.detach().requires_grad_(True)
        loss = f(z)
        return loss.detach(), torch.autograd.grad(loss.sum(), z)[0]
    return objective


def test_batched_lbfgs_is_torch_lbfgs_on_every_trial():
    starts = torch.randn(5, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    alone = []
    for k in range(len(starts)):
        x = starts[k:k + 1].clone().requires_grad_(True)
        opt = torch.optim.LBFGS([x], lr=0.5, max_iter=20, history_size=100)

        def closure():
            opt.zero_grad()
            loss = _bumpy(x).sum()
            loss.backward()
            return loss
        for _ in range(6):
            opt.step(closure)
        alone.append(x.detach()[0])
    batched = BatchedLBFGS(_with_grad(_bumpy), starts, lr=0.5, history=100)
    for _ in range(6):
        batched.step()
    assert torch.allclose(batched.z, torch.stack(alone), atol=1e-10, rtol=0)
    assert (_bumpy(batched.z) < _bumpy(starts)).all()


def test_each_dlg_trial_of_a_batch_matches_that_trial_run_alone():
    sc = from_preset("dlg", {"image_size": 16, "seed": 2})
    obs, kn, _ = catalog.PROTOCOLS["fedsgd"].run(dict(sc.params), torch.device("cpu"))
    # in double precision: L-BFGS on DLG's objective amplifies float32's different summation orders (a batch
    # of 3 vs 1 picks other conv kernels) to 3e-2 within 60 evaluations; what must agree is the arithmetic
    kn.model.double()
    obs.payload = [t.double() for t in obs.payload]
    shape = (1, *kn.input_shape)
    objective = _objective(shared_gradient_loss(obs, kn, torch.device("cpu")), None, shape, kn.num_classes, ())
    starts = torch.cat([0.5 + 0.1 * torch.randn(3, 3 * 16 * 16, generator=torch.Generator().manual_seed(1)),
                        torch.zeros(3, kn.num_classes)], dim=1).double()
    together = BatchedLBFGS(objective, starts, lr=1.0)
    for _ in range(3):
        together.step()
    for k in range(3):
        alone = BatchedLBFGS(objective, starts[k:k + 1], lr=1.0)
        for _ in range(3):
            alone.step()
        assert torch.allclose(alone.z[0], together.z[k], atol=1e-8), (k, (alone.z[0] - together.z[k]).abs().max())
    assert not torch.allclose(together.z[0], together.z[1])  # different starts went different ways


def _products_per_trial(objective, z) -> float:
    """What torch's FLOP counter sees of one evaluation (its matrix products and convolutions), per trial."""
    from torch.utils.flop_counter import FlopCounterMode
    with FlopCounterMode(display=False) as counter:
        objective(z)
    return counter.get_total_flops() / z.shape[0]


def test_a_trial_of_a_batch_costs_one_trials_arithmetic():
    """K trials vmapped into one program do each trial's products and no more — no trial pays for the others
    (a K × K product, a per-trial layout that costs more): the batch's extra cost on a GPU is then only how
    well the kernels run, which the README's GPU section measures. torch's own convolutions, vmapped, fail
    this (5 trials: 4.1 MFLOP each, one alone 2.7); the trial model's products over patches pass it."""
    cpu = torch.device("cpu")
    sc = from_preset("dlg", {"image_size": 16, "seed": 1})
    obs, kn, _ = catalog.PROTOCOLS["fedsgd"].run(dict(sc.params), cpu)
    shape = (1, *kn.input_shape)
    width = math.prod(shape) + kn.num_classes
    starts = _objective(shared_gradient_loss(obs, kn, cpu), None, shape, kn.num_classes, ())
    alone = _products_per_trial(starts, torch.rand(1, width))
    assert alone > 1e6  # the double backward through LeNet: about 2.5 MFLOP at 16 px
    assert _products_per_trial(starts, torch.rand(5, width)) == alone
    sc = from_preset("dlg", {"image_size": 16, "seed": 1, "clients": 5, "data": "digits"})
    obs, kn, _ = catalog.PROTOCOLS["fedsgd"].run(dict(sc.params), cpu)
    loss, cases = client_gradients_loss(obs, kn, cpu)
    clients = _objective(loss, None, shape, kn.num_classes, (), cases)
    assert _products_per_trial(clients, torch.rand(5, width)) == alone


def test_dlg_with_racing_starts_recovers_the_image():
    run = Run(from_preset("dlg", {"image_size": 16, "iterations": 40, "trials": 4, "images": "coffee"}))
    events = list(run.events())
    fin = events[-1]
    assert fin.status == "finished" and fin.metrics["psnr"] > 30, fin.metrics["psnr"]
    assert "the best of 4 racing starts" in fin.metrics["note"]
    # every start is scored outside the attack, for the page's mosaic; the best frame's lead is among them
    last = [e for e in events if isinstance(e, Progress)][-1]
    assert last.trials.shape == (4, 16, 16, 3) and len(last.trials_psnr) == 4
    assert max(last.trials_psnr) >= last.psnr - 1e-6


@pytest.mark.parametrize("extra, says", [
    ({"loop": "original"}, "loop=robust"),
    ({"protocol": "vfl", "attack": "dlg"}, "FedSGD gradients and FedAvg updates"),
])
def test_racing_starts_refuse_what_they_cannot_do(extra, says):
    with pytest.raises(ParamError) as e:
        from_preset("dlg", {"trials": 4, **extra})
    assert e.value.name == "trials" and says in str(e.value)


def _invgrad_case(preset, **over):
    sc = from_preset(preset, {"image_size": 16, "seed": 3, **over})
    obs, kn, _ = catalog.PROTOCOLS["fedsgd"].run(dict(sc.params), torch.device("cpu"))
    kn.model.double().train()
    target = [t.double() for t in obs.payload]
    y = torch.tensor(infer_labels(kn.model, obs.payload, kn.batch_size))
    return kn, target, y


@pytest.mark.parametrize("preset, model", [("invgrad-batch", "convnet"), ("invgrad", "resnet")])
def test_each_invgrad_start_of_a_race_matches_that_start_run_alone(preset, model):
    """The GPU's vmapped objective, run here on the CPU: every start of the batch takes the steps it takes
    alone (plain autograd, as the published loop), BatchNorm's batch statistics included."""
    kn, target, y = _invgrad_case(preset, model=model)
    vmapped = trial_objective(kn.model, target, y, 1e-2, vectorised=True)
    looped = trial_objective(kn.model, target, y, 1e-2, vectorised=False)
    starts = torch.rand(3, kn.batch_size, *kn.input_shape, generator=torch.Generator().manual_seed(4)).double()
    losses, grads = vmapped(starts)
    alone = [looped(starts[k:k + 1]) for k in range(3)]
    assert torch.allclose(losses, torch.cat([a[0] for a in alone]), atol=1e-10, rtol=0)
    assert torch.allclose(grads, torch.cat([a[1] for a in alone]), atol=1e-10, rtol=0)
    together = starts.clone()
    for _ in signed_adam_trials(vmapped, together, 8, 0.1):
        pass
    for k in range(3):
        x = starts[k:k + 1].clone()
        for _ in signed_adam_trials(looped, x, 8, 0.1):
            pass
        assert torch.allclose(x[0], together[k], atol=1e-10), (k, (x[0] - together[k]).abs().max())
    assert not torch.allclose(together[0], together[1])


def test_invgrad_restarts_race_and_the_best_start_is_kept():
    run = Run(from_preset("invgrad", {"image_size": 16, "iterations": 250, "images": "coffee", "restarts": 2}))
    events = list(run.events())
    fin = events[-1]
    assert fin.status == "finished" and fin.metrics["psnr"] > 17, fin.metrics["psnr"]
    assert "the best of 3 racing starts" in fin.metrics["note"]
    progress = [e for e in events if isinstance(e, Progress)]
    assert progress[-1].total == 250  # the starts run together, not one after another
    assert progress[-1].trials.shape == (3, 16, 16, 3) and len(progress[-1].trials_psnr) == 3


@pytest.mark.parametrize("attack,steps", [("dlm", 1), ("dlm-plus", 1), ("dlm", 2), ("dlm-plus", 2)])
def test_a_racing_dlm_trial_has_the_sequential_loops_objective(attack, steps):
    """DLM/DLM+ racing: the vmapped objective of each trial (torch.func, each round at its own weights, the
    scale k packed after the soft label; with two local steps, each round replayed) equals the sequential
    loop's autograd objective, value and gradient."""
    sc = from_preset(attack, {"image_size": 16, "seed": 2, "rounds_per_epoch": 2, "batch_size": 1,
                              "local_steps": steps})
    p = dict(sc.params)
    obs, kn, _ = catalog.PROTOCOLS["fedavg"].run(p, torch.device("cpu"))
    kn.model.double()
    for u in obs.payload:
        u.before, u.after = [w.double() for w in u.before], [w.double() for w in u.after]
    rounds = first_epoch(prepare_rounds(obs, kn, torch.device("cpu")))
    per, classes = kn.batch_size, kn.num_classes
    shape = (per * len(rounds), *kn.input_shape)
    if attack == "dlm":
        def distance(grads, delta, ex):
            return l2_distance(grads, [ex[0] * d for d in delta])
        extras = (torch.tensor(3.0, dtype=torch.float64),)
    else:
        def distance(grads, delta, ex):
            return normalised_distance(grads, delta, "global")
        extras = ()
    schedule = local_schedule(kn)
    assert schedule == (steps, 1, 0.0)
    vmapped = _objective(_trial_loss(kn.model, rounds, per, distance, 0.0, schedule), None, shape, classes, extras)

    def grad_at(w, x, label, graph):
        return model_gradients(kn.model, x, label, create_graph=graph, weights=w)
    g = torch.Generator().manual_seed(5)
    n_x, n_y = math.prod(shape), shape[0] * classes
    z = torch.cat([torch.rand(3, n_x, generator=g), torch.randn(3, n_y, generator=g),
                   2 + torch.rand(3, len(extras), generator=g)], 1).double()
    values, grads = vmapped(z)
    for k in range(3):
        x = z[k, :n_x].view(shape).clone().requires_grad_(True)
        y = z[k, n_x:n_x + n_y].view(shape[0], classes).clone().requires_grad_(True)
        ex = [z[k, n_x + n_y:].reshape(()).clone().requires_grad_(True)] if extras else []
        total = sum(distance(replayed_steps(grad_at, r.weights, x[i * per:(i + 1) * per],
                                            torch.softmax(y, -1)[i * per:(i + 1) * per], r.delta, schedule), r.delta, ex)
                    for i, r in enumerate(rounds))
        if steps == 1:  # the gradient itself, as before the replay
            assert torch.isclose(total, sum(distance(model_gradients(
                kn.model, x[i * per:(i + 1) * per], torch.softmax(y, -1)[i * per:(i + 1) * per], create_graph=True,
                weights=r.weights), r.delta, ex) for i, r in enumerate(rounds)), rtol=0, atol=0)
        alone = torch.cat([t.flatten() for t in torch.autograd.grad(total, [x, y, *ex])])
        assert torch.isclose(values[k], total.detach(), rtol=1e-10, atol=0)
        assert torch.allclose(grads[k], alone, rtol=1e-8, atol=1e-12), (k, (grads[k] - alone).abs().max())


def test_dlm_plus_with_racing_starts_recovers_the_image():
    fin = list(Run(from_preset("dlm-plus", {"image_size": 16, "iterations": 60, "trials": 4})).events())[-1]
    assert fin.status == "finished" and fin.metrics["psnr"] > 30, fin.metrics["psnr"]
    assert "the best of 4 racing starts" in fin.metrics["note"]


def test_a_racing_dlg_trial_on_a_batchnorm_model_has_the_sequential_loops_objective():
    """ResNet's BatchNorm under vmap: each trial still normalises with its own batch's statistics, so its
    objective equals the sequential loop's autograd objective, value and gradient."""
    sc = from_preset("dlg", {"image_size": 16, "seed": 1, "model": "resnet", "batch_size": 2,
                             "images": "coffee,rocket"})
    obs, kn, _ = catalog.PROTOCOLS["fedsgd"].run(dict(sc.params), torch.device("cpu"))
    kn.model.double()
    obs.payload = [t.double() for t in obs.payload]
    shape, classes = (2, *kn.input_shape), kn.num_classes
    vmapped = _objective(shared_gradient_loss(obs, kn, torch.device("cpu")), None, shape, classes, ())
    n_x, n_y = math.prod(shape), 2 * classes
    g = torch.Generator().manual_seed(6)
    z = torch.cat([torch.rand(3, n_x, generator=g), torch.randn(3, n_y, generator=g)], 1).double()
    values, grads = vmapped(z)
    for k in range(3):
        x = z[k, :n_x].view(shape).clone().requires_grad_(True)
        y = z[k, n_x:].view(2, classes).clone().requires_grad_(True)
        total = l2_distance(model_gradients(kn.model, x, torch.softmax(y, -1), create_graph=True), obs.payload)
        alone = torch.cat([t.flatten() for t in torch.autograd.grad(total, [x, y])])
        assert torch.isclose(values[k], total.detach(), rtol=1e-10, atol=0)
        assert torch.allclose(grads[k], alone, rtol=1e-8, atol=1e-12), (k, (grads[k] - alone).abs().max())


def test_agics_objective_written_for_vmapped_starts_is_its_objective():
    """AGIC's loss in torch.func — the rounds vmapped into one program, for several rounds and for starts
    vmapped on a GPU — equals its autograd loop over the rounds, value and gradient, over several rounds at
    their own weights and γ, each filling its own slots (two rounds per epoch, two epochs)."""
    sc = from_preset("agic-multiround", {"image_size": 16, "rounds_per_epoch": 2, "relu_modifier": True, "beta": 5.0})
    p = dict(sc.params)
    obs, kn, _ = catalog.PROTOCOLS["fedavg"].run(p, torch.device("cpu"))
    kn.model.double()
    for u in obs.payload:
        u.before, u.after = [w.double() for w in u.before], [w.double() for w in u.after]
    rounds = prepare_rounds(obs, kn, torch.device("cpu"))
    prob = _Problem(kn.model, rounds, kn.extras["local_lr"], p)
    members = [torch.tensor([i % 2]) for i in range(len(rounds))]
    labels = torch.tensor([c for r in rounds[:2] for c in r.labels])
    gammas = [1.0, 1.0, 0.5, 0.5]
    starts = torch.rand(3, 2, *kn.input_shape, generator=torch.Generator().manual_seed(7)).double()
    every = list(range(len(rounds)))
    vmapped = trials_objective(lambda v: prob.loss(v, labels, members, gammas, every),
                               lambda v: prob.loss(v, labels, members, gammas, every, functional=True), vectorised=True)
    looped = trials_objective(lambda v: prob.loss(v, labels, members, gammas, every),
                              lambda v: prob.loss(v, labels, members, gammas, every, functional=True), vectorised=False)
    (va, ga), (vb, gb) = vmapped(starts), looped(starts)
    assert torch.allclose(va, vb, rtol=1e-10, atol=0) and torch.allclose(ga, gb, rtol=1e-8, atol=1e-12)
    assert not torch.allclose(va[0], va[1])


@pytest.mark.parametrize("compile_", ["off", "on"])
def test_agic_restarts_race_and_refuse_several_epochs(compile_):
    events = list(Run(from_preset("agic", {"image_size": 16, "local_steps": 2, "iterations": 300,
                                           "restarts": 2, "compile": compile_})).events())
    fin = events[-1]
    assert fin.status == "finished" and fin.metrics["psnr"] > 20, fin.metrics["psnr"]
    assert "the best of 3 racing starts" in fin.metrics["note"]
    notes = " ".join(getattr(e, "note", None) or "" for e in events)
    assert ("compiled the objective with torch.compile" in notes) == (compile_ == "on"), notes
    with pytest.raises(ParamError) as e:
        from_preset("agic-multiround", {"restarts": 2})
    assert e.value.name == "restarts" and "epochs=1" in str(e.value)
