"""The dashboard's run pool: bounded workers, a visible queue, stop, and abandoned runs."""
import time

import pytest

from leakdemo.dashboard import pool as pool_mod
from leakdemo.dashboard.pool import RunPool
from leakdemo.scenario import from_preset


@pytest.fixture(scope="module")
def one_worker():
    p = RunPool(max_running=1)
    deadline = time.time() + 120
    while p.ready() < 1 and time.time() < deadline:
        time.sleep(0.2)
    assert p.ready() == 1
    return p


def wait(handle, timeout=120):
    deadline = time.time() + timeout
    while not (handle.done and (handle.artifacts or handle.status == "failed")) and time.time() < deadline:
        handle.poll()
        time.sleep(0.05)
    assert handle.done, handle.status


def test_second_run_waits_its_turn_then_finishes(one_worker):
    a = one_worker.submit(from_preset("invgrad", {"image_size": 16, "iterations": 400}))
    b = one_worker.submit(from_preset("dlg", {"image_size": 16, "iterations": 3}))
    deadline = time.time() + 30
    while a.status != "running" and time.time() < deadline:
        a.poll(), b.poll(), time.sleep(0.05)
    assert a.status == "running" and b.status == "queued" and one_worker.position(b) == 1
    wait(a)
    wait(b)
    assert a.status == b.status == "finished"
    assert a.finished.metrics["psnr"] > 10 and b.latest is not None
    assert set(b.artifacts) == {"grid.png", "progress.gif", "metrics.csv", "metrics.json", "scenario.json"}


def test_stop_ends_a_running_run_and_keeps_its_result(one_worker):
    h = one_worker.submit(from_preset("invgrad", {"image_size": 16, "iterations": 24000}))
    while h.latest is None:
        h.poll(), time.sleep(0.05)
    h.stop()
    wait(h, timeout=30)
    assert h.status == "stopped" and h.finished.iterations < 24000


def test_an_abandoned_run_stops(one_worker, monkeypatch):
    monkeypatch.setattr(pool_mod, "ABANDON_AFTER", 1.0)
    h = one_worker.submit(from_preset("invgrad", {"image_size": 16, "iterations": 24000}))
    while h.latest is None:
        h.poll(), time.sleep(0.05)
    deadline = time.time() + 30  # no more polls: the tab is "closed"
    while not h.done and time.time() < deadline:
        time.sleep(0.1)
    assert h.status == "stopped"


def test_engine_errors_reach_the_handle(one_worker):
    h = one_worker.submit(from_preset("dlg", {"data": "folder", "folder": "/nonexistent"}))
    wait(h)
    assert h.status == "failed" and h.error.startswith("folder:")
