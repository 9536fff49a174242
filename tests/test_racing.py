"""The trial axis: K starts of DLG/iDLG as one vectorised program (issue 14's CPU-verifiable part)."""
import pytest
import torch

from leakdemo import catalog
from leakdemo.attacks.lbfgs import BatchedLBFGS
from leakdemo.attacks.racing import _objective
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
    shape = (1, *kn.input_shape)
    objective = _objective(kn, [t.double() for t in obs.payload], None, shape, kn.num_classes)
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
    ({"model": "resnet"}, "BatchNorm"),
])
def test_racing_starts_refuse_what_they_cannot_do(extra, says):
    with pytest.raises(ParamError) as e:
        from_preset("dlg", {"trials": 4, **extra})
    assert e.value.name == "trials" and says in str(e.value)
