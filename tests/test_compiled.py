"""The compiled objective (torch.compile) and the compact L-BFGS direction: faster, and the same numbers."""
import pytest
import torch

from leakdemo import catalog
from leakdemo.attacks import compiled
from leakdemo.attacks.dlg import _PackedLBFGS
from leakdemo.attacks.racing import _objective, shared_gradient_loss
from leakdemo.errors import ParamError
from leakdemo.events import Progress
from leakdemo.runner import Run
from leakdemo.scenario import from_preset


def _dlg_objective(size=16):
    sc = from_preset("dlg", {"image_size": size, "seed": 1})
    obs, kn, _ = catalog.PROTOCOLS["fedsgd"].run(dict(sc.params), torch.device("cpu"))
    shape = (1, *kn.input_shape)
    f = _objective(shared_gradient_loss(obs, kn, torch.device("cpu")), None, shape, kn.num_classes, ())
    z = torch.cat([0.5 + 0.1 * torch.randn(2, 3 * size * size, generator=torch.Generator().manual_seed(0)),
                   torch.zeros(2, kn.num_classes)], 1)
    return f, z


def test_the_compiled_objective_gives_the_eager_objectives_value_and_gradient():
    f, z = _dlg_objective()
    fast, note = compiled.compile_objective(f, z)
    assert note.startswith("compiled the objective"), note
    for zz in (z, z + 0.05 * torch.randn(z.shape, generator=torch.Generator().manual_seed(1))):
        value, grad = fast(zz)
        ref_value, ref_grad = f(zz)
        assert torch.allclose(value, ref_value, rtol=1e-4), (value, ref_value)
        assert (grad - ref_grad).abs().max() <= 1e-4 * ref_grad.abs().max()


def test_when_torch_compile_fails_the_attack_runs_eagerly_and_says_so(monkeypatch):
    def broken(*a, **k):
        raise RuntimeError("InductorError: no working C++ compiler found\nmore detail")
    monkeypatch.setattr(torch, "compile", broken)
    f, z = _dlg_objective()
    same, note = compiled.compile_objective(f, z)
    assert same is f and "no working C++ compiler" in note and "runs eagerly" in note
    events = list(Run(from_preset("dlg", {"image_size": 16, "iterations": 40, "compile": "on",
                                          "images": "coffee"})).events())
    notes = [e.note for e in events if isinstance(e, Progress) and e.note]
    assert any("runs eagerly" in n for n in notes), notes
    assert events[-1].status == "finished" and events[-1].metrics["psnr"] > 30, events[-1].metrics["psnr"]


def test_a_process_builds_the_objective_for_many_shapes_and_says_when_it_can_build_no_more(monkeypatch):
    """A dashboard worker or a sweep meets many shapes of one objective; torch's default limit (8 builds per
    function) left the next ones eager while the page said "compiled". Here torch's limit is set to 2 and ours
    to 3: three shapes are built, the fourth runs eagerly and the note says why."""
    monkeypatch.setattr(compiled, "RECOMPILE_LIMIT", 3)

    def f(z):
        return (z ** 2).sum(1), 2 * z
    with torch._dynamo.config.patch(recompile_limit=2):  # restored after (monkeypatch would delete the setting)
        for width in (3, 4, 5):
            fast, note = compiled.compile_objective(f, torch.ones(2, width))
            assert fast is not f and note.startswith("compiled the objective"), (width, note)
        same, note = compiled.compile_objective(f, torch.ones(2, 6))
    assert same is f and "3 shapes" in note and "runs eagerly" in note, note


def test_compile_auto_means_racing_starts_and_gpus_only():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert not compiled.wanted({"compile": "auto"}, cpu, 1)
    assert compiled.wanted({"compile": "auto"}, cpu, 4)
    assert compiled.wanted({"compile": "auto"}, cuda, 1)
    assert compiled.wanted({"compile": "on"}, cpu, 1)
    assert not compiled.wanted({"compile": "off"}, cuda, 8)
    assert not compiled.wanted({}, cuda, 8)  # parameters without it (e.g. CAFE's DLG baseline): off
    # AGIC's compiled objective is slower than its autograd loop on a CPU: auto compiles it on a GPU only
    assert not compiled.wanted({"compile": "auto"}, cpu, 4, pays_on_cpu=False)
    assert compiled.wanted({"compile": "auto"}, cuda, 1, pays_on_cpu=False)
    assert compiled.wanted({"compile": "on"}, cpu, 4, pays_on_cpu=False)
    # ... and one start of it on a GPU too (H200): there auto compiles racing starts only
    agic = {"pays_on_cpu": False, "pays_for_one_on_gpu": False}
    assert not compiled.wanted({"compile": "auto"}, cuda, 1, **agic)
    assert compiled.wanted({"compile": "auto"}, cuda, 4, **agic)
    assert not compiled.wanted({"compile": "auto"}, cpu, 4, **agic)
    assert compiled.wanted({"compile": "on"}, cuda, 1, **agic)
    with pytest.raises(ParamError) as e:
        from_preset("dlg", {"compile": "yes"})
    assert e.value.name == "compile"


def test_a_one_off_run_leaves_one_start_eager_on_a_gpu(monkeypatch, capsys):
    """`python -m leakdemo run` runs one attack and exits: on a GPU the build of one start's objective (20–29 s on
    an H200) would cost more than it saves, so auto leaves it eager there; racing starts still compile, and a
    process that keeps its builds (the dashboard's workers, sweeps, bench) compiles one start too."""
    from leakdemo import cli
    cuda = torch.device("cuda")
    monkeypatch.setattr(compiled, "ONE_OFF", False)  # restored after the test
    monkeypatch.setenv("LEAKDEMO_STORE", "off")
    assert compiled.wanted({"compile": "auto"}, cuda, 1)
    assert cli.main(["run", "dlg", "--set", "iterations=2", "--set", "image_size=16"]) == 0
    assert capsys.readouterr().out.startswith("Finished: PSNR")
    assert not compiled.wanted({"compile": "auto"}, cuda, 1)
    assert compiled.wanted({"compile": "auto"}, cuda, 4)
    assert compiled.wanted({"compile": "on"}, cuda, 1)
    assert not compiled.wanted({"compile": "auto"}, torch.device("cpu"), 1)


def test_dlg_with_the_compiled_objective_recovers_the_image():
    events = list(Run(from_preset("dlg", {"image_size": 16, "iterations": 40, "compile": "on",
                                          "images": "coffee"})).events())
    notes = [e.note for e in events if isinstance(e, Progress) and e.note]
    assert any(n.startswith("compiled the objective") for n in notes), notes
    assert events[-1].status == "finished" and events[-1].metrics["psnr"] > 30, events[-1].metrics["psnr"]


def test_a_worker_runs_one_cpu_start_compiled_only_with_a_build_it_holds(monkeypatch):
    """The dashboard's workers (HELD_BUILDS) run one CPU start compiled where they already hold the build —
    their warm-up builds the dlg preset's — and eagerly elsewhere, building nothing and saying nothing: a build
    there (16–20 s the first time on a machine) would cost about what the run saves."""
    from torch._dynamo.utils import counters
    cpu = torch.device("cpu")
    assert not compiled.only_held({"compile": "auto"}, cpu, 1)  # only a process that keeps its builds
    monkeypatch.setattr(compiled, "HELD_BUILDS", True)
    assert compiled.wanted({"compile": "auto"}, cpu, 1, held=True) and compiled.only_held({"compile": "auto"}, cpu, 1)
    assert not compiled.wanted({"compile": "auto"}, cpu, 1)  # an attack that cannot use one (Inverting Gradients)
    assert not compiled.only_held({"compile": "on"}, cpu, 1) and not compiled.only_held({"compile": "auto"}, cpu, 4)
    assert not compiled.only_held({"compile": "auto"}, torch.device("cuda"), 1)

    def run(**settings):
        events = list(Run(from_preset("dlg", {"iterations": 40, "device": "cpu", **settings})).events())
        notes = [e.note for e in events if isinstance(e, Progress) and e.note]
        stages = [e.stage for e in events if isinstance(e, Progress) and e.stage]
        return events[-1], notes, stages

    built = counters["stats"]["unique_graphs"]
    fin, notes, stages = run(image_size=12, images="coffee")  # a shape nothing here has built
    assert counters["stats"]["unique_graphs"] == built and not stages, stages
    assert not any("compile" in n for n in notes), notes
    assert fin.status == "finished" and fin.metrics["psnr"] > 30, fin.metrics["psnr"]
    run(image_size=16, iterations=2, compile="on")  # what the warm-up does (no build if an earlier test made it)
    built = counters["stats"]["unique_graphs"]
    fin, notes, stages = run(image_size=16, images="rocket", seed=2)
    assert counters["stats"]["unique_graphs"] == built and not stages, stages
    assert compiled.READY in notes, notes
    assert fin.status == "finished" and fin.metrics["psnr"] > 30, fin.metrics["psnr"]
    f, z = _dlg_objective(size=12)
    assert compiled.compile_objective(f, z[:1], held_only=True) == (None, None)  # the eager step stays


def test_the_packed_lbfgs_takes_torch_lbfgs_steps():
    """The sequential loop's L-BFGS (no line search) through BatchedLBFGS: every iterate equals
    torch.optim.LBFGS's, on a curved problem, in double precision."""
    a = torch.linspace(0.1, 1.0, 7, dtype=torch.float64)

    def run(make):
        x = (torch.arange(7, dtype=torch.float64) / 7 - 0.3).requires_grad_(True)
        opt = make([x])
        path = []

        def closure():
            loss = ((1 - x[:-1]) ** 2).sum() + 10 * ((x[1:] - x[:-1] ** 2) ** 2).sum() + 0.1 * (a * x * x).sum()
            x.grad = torch.autograd.grad(loss, x)[0]
            return loss.detach()
        for _ in range(5):
            path.append(float(opt.step(closure)))
            path += x.detach().tolist()
        return torch.tensor(path, dtype=torch.float64)
    ours = run(lambda v: _PackedLBFGS(v, 0.5))
    torch_s = run(lambda v: torch.optim.LBFGS(v, lr=0.5, max_iter=20, history_size=100))
    assert torch.allclose(ours, torch_s, atol=1e-10, rtol=0), (ours - torch_s).abs().max()


def test_a_reset_packed_lbfgs_steps_as_a_new_one():
    """When the loop re-scales its loss or goes back to its best estimate it resets its L-BFGS in place (so a
    GPU keeps the step's CUDA graph) instead of making a new one: every later iterate is the new one's."""
    a = torch.linspace(0.1, 1.0, 7, dtype=torch.float64)

    def run(renew):
        x = (torch.arange(7, dtype=torch.float64) / 7 - 0.3).requires_grad_(True)
        opt, path = _PackedLBFGS([x], 0.5), []

        def closure():
            loss = ((1 - x[:-1]) ** 2).sum() + 10 * ((x[1:] - x[:-1] ** 2) ** 2).sum() + 0.1 * (a * x * x).sum()
            x.grad = torch.autograd.grad(loss, x)[0]
            return loss.detach()
        for i in range(6):
            if i in (2, 4):
                with torch.no_grad():
                    x.mul_(0.9)  # the loop moved the variables (back to a best estimate, say)
                opt = renew(opt, [x])
            path.append(float(opt.step(closure)))
            path += x.detach().tolist()
        return torch.tensor(path, dtype=torch.float64)

    def reset(opt, v):
        opt.reset()
        return opt
    renewed = run(lambda opt, v: _PackedLBFGS(v, 0.5))
    assert torch.allclose(run(reset), renewed, atol=1e-12, rtol=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_a_captured_lbfgs_step_is_the_eager_step():
    """On a GPU every L-BFGS step after the first replays one captured CUDA graph: its iterates are the eager
    optimiser's, also across a restart and a move of z from outside (what the racing loop does)."""
    from leakdemo.attacks.lbfgs import BatchedLBFGS
    cuda = torch.device("cuda")
    a = torch.linspace(0.1, 1.0, 6, dtype=torch.float64, device=cuda)

    def objective(z):
        z = z.detach().requires_grad_(True)
        loss = ((1 - z[:, :-1]) ** 2).sum(1) + 10 * ((z[:, 1:] - z[:, :-1] ** 2) ** 2).sum(1) + 0.1 * (a * z * z).sum(1)
        return loss.detach(), torch.autograd.grad(loss.sum(), z)[0]
    starts = torch.randn(5, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(0)).to(cuda)
    graphed, eager = BatchedLBFGS(objective, starts, lr=0.5), BatchedLBFGS(objective, starts, lr=0.5, graph=False)
    for i in range(8):
        if i == 5:
            for opt in (graphed, eager):
                opt.z.copy_(opt.z * 0.9)
                opt.restart(torch.tensor([True, False, True, False, False], device=cuda))
        assert torch.allclose(graphed.step(), eager.step(), atol=1e-10, rtol=0), i
        assert torch.allclose(graphed.z, eager.z, atol=1e-10, rtol=0), i
    assert graphed.graph_note is None and graphed._graph is not None  # it was captured, and replayed


def test_idlg_races_its_starts_with_the_label_fixed():
    fin = list(Run(from_preset("idlg", {"image_size": 16, "iterations": 40, "trials": 2,
                                        "images": "coffee"})).events())[-1]
    assert fin.status == "finished", fin
    assert fin.metrics["label_accuracy"] == 1.0 and fin.metrics["psnr"] > 25, fin.metrics
