"""A sweep's DLG, iDLG, Inverting Gradients, DLM and DLM+ runs that differ only in seed, photo and defense strength are attacked as
one vectorised program (issue 14's trials over a sweep's points): each run comes back as if it had run alone."""
import os
import subprocess
import sys
import threading

import pytest

from leakdemo.device import device_name
from leakdemo.errors import ParamError
from leakdemo.scenario import from_preset
from leakdemo.store import RunStore, scenario_key
from leakdemo.sweep import Batch, Sweep, SweepFinished, Task, batched, parse_axis, run_task, run_unit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = {"image_size": 16, "iterations": 40, "defense": "dp-gaussian", "compile": "off"}


def _same(a: float, b: float) -> bool:
    """Two PSNRs of one reconstruction reached along float-rounding-different paths (above 35 dB both are
    exact to the eye). L-BFGS amplifies rounding: DLM+ over two local steps, seed 1, ended at 40.9 together
    and 40.1 alone with torch's convolutions, 38.0 together with the trial model's patch convolutions."""
    return abs(a - b) <= 1.0 or min(a, b) >= 35


def _task(i, attack="dlg", **over):
    sc = from_preset(attack, {**SMALL, **over})
    return Task(i, sc["seed"], None, dict(sc.params), sc.preset, with_utility=False)


@pytest.mark.parametrize("attack", ["dlg", "idlg"])
def test_runs_attacked_together_each_come_back_as_the_run_alone(attack):
    """Other seeds (so other models and starts), another photo and other noise in one program: each run's
    reconstruction is the one it reaches alone, to tolerance, and it is recorded under its own scenario."""
    tasks = [_task(0, attack, seed=1, dp_sigma=1e-4), _task(1, attack, seed=2, dp_sigma=1e-4),
             _task(2, attack, seed=1, dp_sigma=1e-4, images="astronaut"), _task(3, attack, seed=1, dp_sigma=1.0)]
    together = run_unit(Batch(tuple(tasks)))
    alone = [run_task(t) for t in tasks]
    assert [r["point"] for r in together] == [0, 1, 2, 3]
    for t, a, b in zip(tasks, together, alone):
        assert "error" not in a["run"], a["run"]
        assert _same(a["run"]["psnr"], b["run"]["psnr"]), (t.params["seed"], a["run"]["psnr"], b["run"]["psnr"])
        assert a["record"]["key"] == scenario_key(t.params, device_name(t.params["device"]))  # the suite's device
        assert a["record"]["scenario"]["params"]["seed"] == t.params["seed"]
    assert min(r["run"]["psnr"] for r in together[:3]) >= 30  # recovered, each its own photo
    assert together[3]["run"]["psnr"] <= 10  # σ = 1 hides the photo here too
    finished = together[0]["record"]["finished"]
    assert "each of the 4 runs" in finished.metrics["note"]
    shared = sum(r["run"]["seconds"] for r in together)  # each run's share: the program's time counted once
    assert 0.8 * finished.seconds <= shared <= 1.2 * finished.seconds


@pytest.mark.parametrize("attack,steps", [("dlm-plus", 1), ("dlm", 1), ("dlm-plus", 2)])
def test_dlm_runs_attacked_together_each_come_back_as_the_run_alone(attack, steps):
    """FedAvg: each run's case is its own client's first-epoch weights and (noisy) updates; with two local
    steps each case's rounds are replayed."""
    tasks = [_task(0, attack, seed=1, dp_sigma=1e-6, local_steps=steps),
             _task(1, attack, seed=2, dp_sigma=1e-6, local_steps=steps),
             _task(2, attack, seed=1, dp_sigma=1e-2, local_steps=steps)]
    together = run_unit(Batch(tuple(tasks)))
    alone = [run_task(t) for t in tasks]
    for a, b in zip(together, alone):
        assert "error" not in a["run"], a["run"]
        assert _same(a["run"]["psnr"], b["run"]["psnr"]), (a["run"]["psnr"], b["run"]["psnr"])
    if attack == "dlm-plus" and steps == 1:  # DLM's k needs more steps than these to leave its trap
        assert min(r["run"]["psnr"] for r in together[:2]) >= 30 and together[2]["run"]["psnr"] <= 10


def test_inverting_gradients_runs_attacked_together_each_come_back_as_the_run_alone():
    """Inverting Gradients' signed Adam on every run's image at once: each run its own model, gradient,
    inferred label and seeded start — the reconstruction it reaches alone."""
    tasks = [_task(0, "invgrad", seed=1, dp_sigma=1e-4, iterations=150),
             _task(1, "invgrad", seed=2, dp_sigma=1e-4, iterations=150),
             _task(2, "invgrad", seed=1, dp_sigma=1.0, iterations=150)]
    together = run_unit(Batch(tuple(tasks)))
    alone = [run_task(t) for t in tasks]
    for a, b in zip(together, alone):
        assert "error" not in a["run"], a["run"]
        assert _same(a["run"]["psnr"], b["run"]["psnr"]), (a["run"]["psnr"], b["run"]["psnr"])
    assert min(r["run"]["psnr"] for r in together[:2]) >= 28 and together[2]["run"]["psnr"] <= 10
    assert "each of the 3 runs" in together[0]["record"]["finished"].metrics["note"]


def test_inverting_gradients_runs_vmapped_compute_what_each_run_computes():
    """The vmapped program (a GPU's, or the compiled one) and the loop over the runs' own models agree: each
    run's loss and gradient with its own weights, shared gradient and labels."""
    import torch
    from leakdemo import catalog
    from leakdemo.attacks.invgrad import runs_objective
    runs, labels = [], []
    for seed, sigma in ((1, 1e-4), (2, 1e-4), (1, 0.1)):
        sc = from_preset("invgrad", {**SMALL, "seed": seed, "dp_sigma": sigma})
        obs, kn, _ = catalog.PROTOCOLS["fedsgd"].run(dict(sc.params), "cpu", None)
        runs.append((obs, kn))
        labels.append([seed + 2])  # any labels will do: both sides are given the same
    labels = torch.tensor(labels)
    x = torch.rand(3, 1, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    v_loop, g_loop = runs_objective(runs, labels, 0.01, vectorised=False, device="cpu")(x)
    v_vmap, g_vmap = runs_objective(runs, labels, 0.01, vectorised=True, device="cpu")(x)
    assert torch.allclose(v_loop, v_vmap, rtol=1e-4, atol=1e-6), (v_loop, v_vmap)
    assert torch.allclose(g_loop, g_vmap, rtol=1e-3, atol=1e-6), (g_loop - g_vmap).abs().max()
    assert not torch.allclose(g_loop[0], g_loop[1])  # other runs, other gradients


def test_only_runs_that_share_one_program_are_batched():
    base = from_preset("dlg", SMALL)
    sweep = Sweep(base, [parse_axis("dp_sigma=1e-4..1:5", base)], seeds=2)
    tasks = sweep.tasks()
    units = batched(tasks, 4)
    assert [len(u.tasks) if isinstance(u, Batch) else 1 for u in units] == [4, 4, 4]  # 12 runs, the undefended too
    assert [t for u in units for t in u.tasks] == tasks  # each run once, in order
    assert batched(tasks, 1) == tasks
    lr = Sweep(base, [parse_axis("lr=0.5,1", base)], seeds=2).tasks()  # another learning rate: another program
    assert [[t.params["lr"] for t in u.tasks] for u in batched(lr, 8)] == [[1.0] * 4, [0.5] * 2]  # undefended: lr 1
    plus = from_preset("dlm-plus", {"image_size": 16, "defense": "dp-gaussian"})
    units = batched(Sweep(plus, [parse_axis("dp_sigma=1e-6,1e-2", plus)], seeds=2).tasks(), 8)
    assert [len(u.tasks) for u in units] == [6]  # FedAvg's DLM+ too
    ig = from_preset("invgrad", {"image_size": 16, "defense": "dp-gaussian"})
    assert [len(u.tasks) for u in batched(Sweep(ig, [parse_axis("dp_sigma=1e-4,1", ig)], seeds=2).tasks(), 8)] == [6]
    ig_cpu = from_preset("invgrad", {"image_size": 16, "defense": "dp-gaussian", "device": "cpu"})
    assert Sweep(ig_cpu, [parse_axis("dp_sigma=1e-4..1:8", ig_cpu)], seeds=3, workers=2).batch_size(27) == 1  # pays not
    racing = from_preset("invgrad", {"image_size": 16, "defense": "dp-gaussian", "restarts": 1})  # its own race
    assert all(isinstance(u, Task) for u in batched(Sweep(racing, [parse_axis("dp_sigma=1e-4,1", racing)],
                                                          seeds=2).tasks(), 8))
    assert Sweep(base, [parse_axis("dp_sigma=1e-4..1:8", base)], seeds=3, workers=2).batch_size(27) == 5  # 3 reports each
    on_cpu = from_preset("dlg", {**SMALL, "device": "cpu"})  # the CPU's cap (a GPU's is larger)
    assert Sweep(on_cpu, [parse_axis("dp_sigma=1e-4..1:8", on_cpu)], seeds=16, workers=1).batch_size(144) == 8


def test_a_batched_sweep_scores_every_point_and_records_each_run(tmp_path):
    base = from_preset("dlg", {**SMALL, "iterations": 25})
    axes = [parse_axis("dp_sigma=1e-4,1", base)]
    store = RunStore(str(tmp_path / "runs.sqlite"))
    events = list(Sweep(base, axes, seeds=2, store=store, workers=1, batch=6).events())
    assert (events[0].runs, events[0].programs, events[0].batch) == (6, 1, 6)  # six runs, one program
    rows = {r["label"]: r for r in events[-1].rows}
    assert [r["runs"] for r in rows.values()] == [2, 2, 2]
    assert rows["no defense"]["psnr"] >= 30 and rows["dp_sigma=1"]["psnr"] <= 10
    assert rows["dp_sigma=0.0001"]["test_accuracy"] >= 0.85 >= rows["dp_sigma=1"]["test_accuracy"]
    assert len(store.runs()) == 6
    again = list(Sweep(base, axes, seeds=2, store=store, workers=1, batch=6).events())
    assert again[0].cached == 6  # found again run by run
    assert [r["psnr"] for r in again[-1].rows] == [r["psnr"] for r in events[-1].rows]


def test_stopping_a_batch_ends_every_run_of_it():
    tasks = tuple(_task(i, seed=1 + i, dp_sigma=1e-4, iterations=5000) for i in range(3))
    stop = threading.Event()
    threading.Timer(3.0, stop.set).start()
    results = run_unit(Batch(tasks), stop_event=stop)
    assert [r["run"]["status"] for r in results] == ["stopped"] * 3


def test_a_bad_batch_size_is_one_line():
    base = from_preset("dlg", SMALL)
    with pytest.raises(ParamError) as e:
        Sweep(base, [parse_axis("dp_sigma=1e-4,1", base)], batch=0)
    assert str(e.value) == "batch: must be an integer in [1, 256], got 0"
    r = subprocess.run([sys.executable, "-m", "leakdemo", "sweep", "dlg", "--vary", "dp_sigma=1e-4,1",
                        "--set", "defense=dp-gaussian", "--batch", "300"], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2 and r.stderr.strip() == "error: --batch: must be an integer in [1, 256], got 300"


def test_grouping_a_sweep_s_runs_never_loads_torch():
    """The web server groups a Trade-offs sweep's runs (Sweep.events runs in its process), and it never imports
    torch (~500 MB): its workers do."""
    code = ("import sys; from leakdemo.scenario import from_preset; from leakdemo.sweep import Sweep, batched, "
            "parse_axis; b = from_preset('dlg', {'defense': 'dp-gaussian'}); "
            "s = Sweep(b, [parse_axis('dp_sigma=1e-4,1', b)], seeds=4, workers=1); "
            "units = batched(s.tasks(), s.batch_size(12)); print(len(units), 'torch' in sys.modules)")
    env = {**os.environ, "LEAKDEMO_DEVICE": "cpu"}  # the server learns the device from its workers, without torch
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["3", "False"]  # 12 runs in batches of 4, and no torch
