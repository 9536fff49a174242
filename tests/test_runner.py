import threading
import time

import numpy as np

from leakdemo import catalog
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
    s = from_preset("dlg", {**tiny, "iterations": 8, "images": "", "seed": "4"})
    a = list(Run(s).events())[-1]
    b = list(Run(s).events())[-1]
    assert a.metrics["psnr"] == b.metrics["psnr"] and a.metrics["loss"] == b.metrics["loss"]
    assert np.array_equal(a.images, b.images)


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


def test_engine_errors_become_failed_events():
    ev = list(Run(from_preset("dlg", {"data": "folder", "folder": "/nonexistent"})).events())
    assert len(ev) == 1 and isinstance(ev[0], Failed) and ev[0].message.startswith("folder:")


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
