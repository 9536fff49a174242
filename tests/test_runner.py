import threading
import time

import numpy as np
import pytest
import torch

from leakdemo import catalog
from leakdemo.device import resolve_device
from leakdemo.events import Failed, Finished, Progress, Started
from leakdemo.runner import Run
from leakdemo.scenario import from_preset
from leakdemo.threat import GroundTruth


def test_stream_shape_and_first_frame(tiny):
    events = list(Run(from_preset("dlg", {**tiny, "iterations": 5})).events())
    assert isinstance(events[0], Started) and isinstance(events[-1], Finished)
    assert all(isinstance(e, Progress) for e in events[1:-1]) and len(events) > 2
    first = events[1]
    assert first.images.shape == events[0].originals.shape == (1, 16, 16, 3)
    assert events[0].threat["receives"].startswith("the gradient of the training loss")
    assert any("weights" in k for k in events[0].threat["knows"])
    f = events[-1]
    assert set(f.metrics) >= {"psnr", "ssim", "lpips", "label_accuracy"}
    assert isinstance(f.metrics["lpips"], float) and f.metrics["lpips_note"] is None  # on every fresh machine
    assert f.history["iteration"] and len(f.history["psnr"]) == len(f.history["iteration"])


def test_same_scenario_same_numbers(tiny):
    """Bit for bit on a CPU. Not on a GPU: an H200 ended this run at 37.83 dB once and 36.82 dB the next time,
    L-BFGS amplifying differences in the last bits (README, "Measured on a GPU")."""
    s = from_preset("dlg", {**tiny, "iterations": 8, "images": "", "seed": "4", "device": "cpu"})
    a = list(Run(s).events())[-1]
    b = list(Run(s).events())[-1]
    assert a.metrics["psnr"] == b.metrics["psnr"] and a.metrics["loss"] == b.metrics["loss"]
    assert np.array_equal(a.images, b.images)


def test_a_milestone_is_timed_at_the_step_that_crossed_it(monkeypatch, tiny):
    """Scored every step, and scored only at its first and last steps, the same run (CPU: the same numbers) puts
    20 and 30 dB at the same iteration: the unscored steps are traced back, not rounded up to the next frame."""
    from leakdemo import milestones, runner

    s = from_preset("dlg", {**tiny, "iterations": 40, "device": "cpu"})
    monkeypatch.setattr(runner, "EVAL_INTERVAL", 0.0)
    monkeypatch.setattr(runner, "SCORING_SPACING", 0)  # every step scored, however fast it is against a scoring
    every = list(Run(s).events())[-1].history
    monkeypatch.setattr(runner, "EVAL_INTERVAL", 1e9)
    sparse = list(Run(s).events())[-1].history
    assert every["iteration"] == list(range(41))
    assert len(sparse["psnr"]) <= 5  # iterations 0 and 40, and the crossings
    for db in (milestones.RECOGNISABLE_DB, milestones.RECOVERED_DB):
        first = next(i for i, p in zip(every["iteration"], every["psnr"]) if p >= db)
        assert 0 < first < 40 and milestones.reached(sparse, db)[1] == first
    assert sparse["seconds"] == sorted(sparse["seconds"]) and sparse["iteration"] == sorted(sparse["iteration"])
    assert len({len(v) for v in sparse.values()}) == 1  # every curve has every point


def test_the_crossing_steps_are_found_by_bisection_each_scored_once(monkeypatch):
    from types import SimpleNamespace

    from leakdemo import crossings
    from leakdemo.crossings import Held

    held, x = Held(), torch.zeros(1, 1, 2, 2)
    for i in range(6):
        x.fill_(i)  # an attack moves its estimate in place: each kept step holds its own copy
        held.offer(SimpleNamespace(iteration=i + 1, loss=1.0, images=x, sample_ids=None, aligned=False), 0.1 * i)
    assert [float(k.images.max()) for k in held.items] == [0, 1, 2, 3, 4, 5]
    psnrs, asked = [5, 12, 25, 18, 31, 40], []

    def score_of(kept):
        asked.append(kept.iteration)
        return {"psnr": psnrs[kept.iteration - 1]}
    found = held.crossings([20.0, 30.0], score_of)
    # 12 → 25 and 18 → 31: a step below, then one at or above
    assert [(k.iteration, sc["psnr"]) for k, sc in found] == [(3, 25), (5, 31)]
    assert len(asked) == len(set(asked)) < 6
    assert held.crossings([50.0], lambda kept: {"psnr": psnrs[kept.iteration - 1]}) == []  # the scored frame crossed it
    monkeypatch.setattr(crossings, "MAX_BYTES", 4 * x.numel() * x.element_size())  # room for four steps
    for i in range(6, 9):
        held.offer(SimpleNamespace(iteration=i + 1, loss=1.0, images=x, sample_ids=None, aligned=False), 0.1 * i)
    # 7 steps thinned to 1 3 5 7, then 1 3 5 7 8 to 1 5 8: every other one, counted back from the newest
    assert [k.iteration for k in held.items] == [1, 5, 8, 9] and held.bytes == 4 * x.numel() * x.element_size()


def test_stop_from_another_thread_keeps_the_partial_result():
    run = Run(from_preset("invgrad", {"iterations": 20000, "image_size": 16}))
    seen, stop_at = [], {}

    def stopper():
        while len(seen) < 3:
            time.sleep(0.01)
        stop_at["t"] = time.perf_counter()
        run.stop()

    threading.Thread(target=stopper, daemon=True).start()
    for ev in run.events():
        seen.append(ev)
    ended = time.perf_counter()
    final = seen[-1]
    assert isinstance(final, Finished) and final.status == "stopped"
    assert ended - stop_at["t"] < 1.0
    assert final.iterations < 20000 and final.images.shape == (1, 16, 16, 3)


def _stop_after(run, seconds, when):
    def stopper():
        time.sleep(seconds)
        when["t"] = time.perf_counter()
        run.stop()
    threading.Thread(target=stopper, daemon=True).start()


def test_stop_reaches_a_long_set_up():
    # 2000 warm-up steps before the attack's first frame take ~20 s at 16 px on two cores. The device is
    # started first, as the dashboard's workers do at start: a process's first touch of a GPU (~2 s, once)
    # is not the set-up Stop must reach
    torch.zeros(1, device=resolve_device("auto")).sum().item()
    run, when = Run(from_preset("invgrad", {"image_size": 16, "warmup_steps": 2000})), {}
    _stop_after(run, 0.5, when)
    events = list(run.events())
    assert time.perf_counter() - when["t"] < 1.0
    assert len(events) == 1 and isinstance(events[0], Failed) and "set-up" in events[0].message


def test_stop_reaches_inside_one_long_step():
    # 256 racing starts: one L-BFGS step (up to 20 evaluations) takes ~4 s on two cores; Stop ends it mid-step
    run = Run(from_preset("dlg", {"image_size": 16, "trials": 256, "compile": "off", "iterations": 50}))
    seen, when = [], {}
    for ev in run.events():
        seen.append(ev)
        if isinstance(ev, Progress) and not when:
            _stop_after(run, 0.5, when)
            when["armed"] = True
    assert time.perf_counter() - when["t"] < 1.0
    final = seen[-1]
    assert isinstance(final, Finished) and final.status == "stopped" and final.iterations <= 1
    assert final.images.shape == (1, 16, 16, 3)


def test_stop_reaches_the_utility_training_after_the_attack(monkeypatch):
    from leakdemo.protocols import vfl
    monkeypatch.setattr(vfl, "UTILITY_STEPS", 10 ** 6)  # a utility figure that would take hours
    run, when, seen = Run(from_preset("cafe", {"iterations": 3})), {}, []
    for ev in run.events():
        seen.append(ev)
        if isinstance(ev, Progress) and ev.iteration == 3 and not when:
            when["armed"] = True
            _stop_after(run, 0.5, when)
    assert time.perf_counter() - when["t"] < 1.0
    final = seen[-1]
    assert isinstance(final, Finished) and final.status == "stopped" and final.iterations == 3
    assert "utility" not in final.metrics and final.metrics["psnr"] > 0


def test_many_racing_starts_warn_that_they_are_built_for_a_gpu():
    assert any("built for a GPU" in w for w in from_preset("dlg", {"trials": 128, "device": "cpu"}).warnings)
    assert not from_preset("dlg", {"trials": 8, "device": "cpu"}).warnings


def test_what_a_cpu_would_take_is_not_said_where_the_run_goes_to_a_gpu(monkeypatch):
    """On a GPU server the large-model, many-starts and many-clients notes told every class "built for a GPU"
    about the GPU it was on. device=cuda, or auto where CUDA is known (the web server learns it from its
    workers), says nothing of a CPU; device=cpu on the same machine still does, as does auto on a CPU."""
    from leakdemo import device

    def cpu_notes(over: dict) -> list[str]:
        return [w for w in from_preset("dlg", over).warnings if "for a GPU" in w or "for a CPU" in w]
    big = {"model": "resnet", "model_width": 256, "image_size": 128}
    monkeypatch.delenv("LEAKDEMO_DEVICE", raising=False)  # as a server's: auto goes where the machine allows
    monkeypatch.setattr(device, "_learned", {"cuda": True, "hardware": "CUDA: a GPU"})
    for over in (big, {"trials": 128}, {"clients": 64}):
        assert not cpu_notes(over) and not cpu_notes({**over, "device": "cuda"}), over
        assert cpu_notes({**over, "device": "cpu"}), over
    monkeypatch.setenv("LEAKDEMO_DEVICE", "cpu")  # auto pinned to the CPU on that machine: said
    assert cpu_notes(big)[0].startswith("A large model for a CPU")
    monkeypatch.delenv("LEAKDEMO_DEVICE")
    monkeypatch.setattr(device, "_learned", {"cuda": False, "hardware": "CPU only (2 cores)"})
    assert cpu_notes(big)[0].startswith("A large model for a CPU")


def test_engine_errors_become_failed_events():
    ev = list(Run(from_preset("dlg", {"data": "folder", "folder": "/nonexistent"})).events())
    assert len(ev) == 1 and isinstance(ev[0], Failed) and ev[0].message.startswith("folder:")


def test_a_run_whose_optimiser_blows_up_still_finishes():
    """Found by random valid settings: DLM on a ConvNet, three images, a tiny local rate and strong Laplace noise
    drive L-BFGS to NaN within ten steps; the run failed with an internal error instead of showing what it had."""
    s = from_preset("dlm", {"model": "convnet", "local_lr": 1.7e-6, "rounds_per_epoch": 3, "iterations": 10,
                            "defense": "dp-laplace", "dp_sigma": 9.5})
    ev = list(Run(s).events())
    assert not any(isinstance(e, Failed) for e in ev) and isinstance(ev[-1], Finished)
    assert np.isfinite(ev[-1].metrics["psnr"])


def test_attack_sees_only_observation_and_knowledge(monkeypatch, tiny):
    """The attack is called with (Observation, Knowledge, params, device) and nothing holds the truth."""
    seen = {}
    real = catalog.ATTACKS["dlg"].run

    def spy(obs, kn, p, device):
        seen["args"] = (obs, kn, p)
        yield from real(obs, kn, p, device)

    monkeypatch.setitem(catalog.ATTACKS, "dlg", catalog.ATTACKS["dlg"].__class__(
        **{**catalog.ATTACKS["dlg"].__dict__, "run": spy}))
    events = list(Run(from_preset("dlg", {**tiny, "iterations": 2})).events())
    obs, kn, p = seen["args"]
    truth = events[0].originals
    for thing in (obs, kn):
        assert not any(isinstance(v, GroundTruth) for v in vars(thing).values())
    for t in obs.payload:
        assert t.shape != truth.shape
    assert "images" not in vars(obs) and "labels" not in vars(kn)


def test_each_run_sets_onednn_for_its_attack():
    """oneDNN slows the gradient-matching attacks' double backward and speeds PLI's and CAFE's trainings: a
    run turns it on or off for its own attack, whatever ran before it in the process."""
    seen = {}
    for preset, over in (("pli-digits", {"inversion_epochs": 1}), ("dlg", {"iterations": 2}), ("cafe", {"iterations": 2})):
        for ev in Run(from_preset(preset, over)).events():
            seen.setdefault(preset, torch.backends.mkldnn.enabled)  # while the attack runs
            assert not isinstance(ev, Failed), ev
    assert seen == {"pli-digits": True, "dlg": False, "cafe": True}


def test_the_eta_runs_at_the_attacks_pace_not_its_set_up():
    """DLG on a round of 8 clients compiles for ~16 s before its first step: at iteration 4 of 300 the Lab said
    "about 1292 s left" for a run of about 3 minutes. The rate starts at the first step."""
    from types import SimpleNamespace

    from leakdemo.runner import _eta
    at = SimpleNamespace(iteration=4, total=300)
    assert _eta(at, (1, 16.0), 16.6) == pytest.approx(296 * 0.2)  # 0.2 s a step since the first one
    assert _eta(SimpleNamespace(iteration=1, total=300), (1, 16.0), 16.0) is None  # one step: no pace yet
    assert _eta(at, None, 16.6) is None
    assert _eta(SimpleNamespace(iteration=300, total=300), (1, 16.0), 76.0) == 0
