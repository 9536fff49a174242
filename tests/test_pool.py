"""The dashboard's run pool: bounded workers, a visible queue, stop, and every handle ends.

Each promise a classroom relies on has a test: a dropped queued run comes back at its place, a Stop
reaches only its own run, a closed tab frees its worker, a crashed worker is replaced and its run
reported, and a closing server starts no new workers."""
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from leakdemo.attacks import compiled
from leakdemo.attacks.compiled import wanted
from leakdemo.dashboard import pool as pool_mod
from leakdemo.dashboard.pool import RunPool
from leakdemo.dashboard.shared import queue_line
from leakdemo.scenario import from_preset

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LONG = {"image_size": 16, "iterations": 24000}


def warm(p: RunPool, n: int = 1) -> RunPool:
    deadline = time.time() + 120
    while p.ready() < n and time.time() < deadline:
        time.sleep(0.2)
    assert p.ready() == n
    return p


@pytest.fixture(scope="module")
def one_worker():
    p = warm(RunPool(max_running=1))
    yield p
    p.close()


def wait(handle, timeout=120, also=()):
    """Poll `handle` until it ends — and `also` meanwhile, as a tab polls every run it shows (a queued run that
    nobody asks about for ABANDON_AFTER seconds is dropped)."""
    deadline = time.time() + timeout
    while not handle.complete and time.time() < deadline:
        for h in (handle, *also):
            h.poll()
        time.sleep(0.05)
    assert handle.done, handle.status


def until(cond, timeout=30, poll=()):
    deadline = time.time() + timeout
    while not cond() and time.time() < deadline:
        for h in poll:
            h.poll()
        time.sleep(0.05)
    return cond()


def test_a_fresh_pool_says_its_workers_are_starting_and_runs_before_warming_up():
    p = RunPool(max_running=1)
    try:
        h = p.submit(from_preset("dlg", {"image_size": 16, "iterations": 3}))
        assert p.ready() == 0 and p.position(h) == 1
        assert queue_line(p, h).startswith("Starting the attack workers")
        wait(h)
        assert h.status == "finished"
        assert until(lambda: p.warm() == 1)  # the worker says when no warm-up is left to do
    finally:
        p.close()


def test_the_run_s_clock_runs_on_between_its_events(monkeypatch):
    """A compile or one long step sends one event at its start: the page's time must not stand still."""
    from leakdemo.events import Progress
    clock = [100.0]
    monkeypatch.setattr(pool_mod.time, "monotonic", lambda: clock[0])
    h = pool_mod.RunHandle(from_preset("dlg"))
    assert h.since_latest() == 0.0  # nothing yet
    h.clock_at = clock[0]  # the pool starts it (RunPool._start)
    clock[0] += 30.0  # a ten-client federation's set-up: no event for half a minute
    assert h.since_latest() == 30.0
    h.apply(Progress(0, 300, 0.0, float("nan"), stage="compiling the objective"))
    clock[0] += 12.5
    assert h.since_latest() == 12.5
    h.apply(Progress(1, 300, 13.0, 1.0))
    assert h.since_latest() == 0.0


def test_a_waiting_run_says_how_many_runs_are_ahead_of_it(one_worker):
    a = one_worker.submit(from_preset("invgrad", LONG))
    b = one_worker.submit(from_preset("dlg", {"image_size": 16, "iterations": 3}))
    c = one_worker.submit(from_preset("dlg", {"image_size": 16, "iterations": 3}))
    try:
        assert until(lambda: a.status == "running", poll=(a, b, c))
        b.queued_at = c.queued_at = time.monotonic()  # just queued: no clock yet
        assert queue_line(one_worker, b) == "Waiting for a free worker — next in line (1 run at a time on this server)."
        assert queue_line(one_worker, c) == ("Waiting for a free worker — 1 run ahead of this one "
                                             "(1 run at a time on this server).")
        b.queued_at -= 12.3  # the wait has a clock, as the set-up's has
        assert queue_line(one_worker, b).startswith("Waiting for a free worker for 12 s — next in line")
    finally:
        a.stop()
        for h in (a, b, c):
            wait(h)


def test_second_run_waits_its_turn_then_finishes(one_worker):
    a = one_worker.submit(from_preset("invgrad", {"image_size": 16, "iterations": 400}))
    b = one_worker.submit(from_preset("dlg", {"image_size": 16, "iterations": 3}))
    assert until(lambda: a.status == "running", poll=(a, b))
    assert b.status == "queued" and one_worker.position(b) == 1
    wait(a, also=(b,))  # on a GPU the first run compiles its objective: longer than ABANDON_AFTER
    wait(b)
    assert a.status == b.status == "finished"
    assert a.finished.metrics["psnr"] > 10 and b.latest is not None
    assert set(b.artifacts) == {"grid.png", "progress.gif", "history.csv", "metrics.json", "scenario.json"}


def test_a_sweep_s_runs_attacked_together_come_back_run_by_run(one_worker):
    """The Trade-offs page hands its sweep to the pool: runs sharing one program go to one worker as a batch,
    and each comes back to its point."""
    from leakdemo.dashboard.sweep_job import pool_runner
    from leakdemo.sweep import Sweep, parse_axis
    base = from_preset("dlg", {"image_size": 16, "iterations": 20, "defense": "dp-gaussian", "compile": "off"})
    sweep = Sweep(base, [parse_axis("dp_sigma=1e-4,1", base)], seeds=2, batch=3)
    sweep.runner = pool_runner(one_worker, None, in_flight=1)
    import threading
    events = []
    swept = threading.Thread(target=lambda: events.extend(sweep.events()))
    swept.start()
    # a Lab run queued behind the sweep's batch says what holds the worker (a minute's wait was unexplained)
    assert until(lambda: one_worker.on_sweeps() == 1, timeout=60)
    lab = one_worker.submit(from_preset("dlg", {"image_size": 16, "iterations": 3}))
    assert queue_line(one_worker, lab) == ("Waiting for a free worker — next in line (1 run at a time on this "
                                           "server); the worker is on a sweep's runs (Trade-offs, or Compare's "
                                           "defenses form).")
    wait(lab, timeout=300)
    swept.join(300)
    rows = events[-1].rows
    assert [(r["label"], r["runs"], r["failed"]) for r in rows] == [("no defense", 2, 0), ("dp_sigma=0.0001", 2, 0),
                                                                   ("dp_sigma=1", 2, 0)]
    assert rows[0]["psnr"] >= 30 and rows[2]["psnr"] <= 10


def test_a_run_alone_gets_every_core_the_server_leaves(one_worker):
    h = one_worker.submit(from_preset("invgrad", LONG))
    assert until(lambda: h.latest is not None, poll=(h,))
    assert one_worker._workers[0].threads.value == max(1, (os.cpu_count() or 1) - 1)
    h.stop()
    wait(h)


def test_stop_ends_a_running_run_and_keeps_its_result(one_worker):
    h = one_worker.submit(from_preset("invgrad", LONG))
    assert until(lambda: h.latest is not None, poll=(h,))
    h.stop()
    wait(h, timeout=30)
    assert h.status == "stopped" and h.finished.iterations < 24000


def test_stop_during_the_set_up_ends_the_run_as_stopped(one_worker):
    # 2000 warm-up steps take the worker tens of seconds before the attack's first frame
    h = one_worker.submit(from_preset("invgrad", {**LONG, "warmup_steps": 2000}))
    assert until(lambda: h.status == "running", poll=(h,))
    time.sleep(1.0)
    assert h.latest is None  # still setting up
    t0 = time.time()
    h.stop()
    wait(h, timeout=30)
    assert time.time() - t0 < 5.0
    assert h.status == "stopped" and h.finished is None and "set-up" in h.error


def test_a_late_stop_never_reaches_the_next_run(one_worker):
    a = one_worker.submit(from_preset("dlg", {"image_size": 16, "iterations": 3}))
    wait(a)
    b = one_worker.submit(from_preset("invgrad", LONG))
    assert until(lambda: b.latest is not None, poll=(b,))
    a.stop()  # the first tab presses Stop after its run ended, while the worker runs someone else's
    seen = b.latest.iteration
    assert until(lambda: b.latest.iteration > seen + 20, timeout=20, poll=(b,))
    assert b.status == "running"
    b.stop()
    wait(b)
    assert b.status == "stopped"


def test_a_closed_tab_frees_its_worker(one_worker):
    connected = {"yes": True}
    h = one_worker.submit(from_preset("invgrad", LONG), alive=lambda: connected["yes"])
    assert until(lambda: h.latest is not None, poll=(h,))
    connected["yes"] = False  # the tab's websocket closed
    t0 = time.time()
    assert until(lambda: h.done, timeout=30)
    print(f"\nworker freed {time.time() - t0:.2f} s after the tab closed")
    assert h.status == "stopped"


def test_an_unpolled_run_stops(one_worker, monkeypatch):
    monkeypatch.setattr(pool_mod, "ABANDON_AFTER", 1.0)
    h = one_worker.submit(from_preset("invgrad", LONG))
    assert until(lambda: h.latest is not None, poll=(h,))
    assert until(lambda: h.done, timeout=30)  # no more polls: the tab is "closed"
    assert h.status == "stopped"


def test_a_dropped_queued_run_is_told_and_requeued_at_its_place(one_worker):
    busy = one_worker.submit(from_preset("invgrad", LONG))
    assert until(lambda: busy.status == "running", poll=(busy,))
    away = {"gone": True}
    q1 = one_worker.submit(from_preset("dlg", {"image_size": 16, "iterations": 3}), alive=lambda: not away["gone"])
    q2 = one_worker.submit(from_preset("dlg", {"image_size": 16, "iterations": 3, "seed": 2}))
    assert until(lambda: q1.status == "dropped", poll=(busy, q2))
    assert q1.done and "stopped asking" in q1.error and one_worker.position(q2) == 1
    away["gone"] = False
    q1.poll()  # the tab is back
    assert q1.status == "queued" and one_worker.position(q1) == 1 and one_worker.position(q2) == 2
    busy.stop()
    wait(q1)
    wait(q2)
    assert q1.status == q2.status == "finished" and busy.status == "stopped"


def test_engine_errors_reach_the_handle(one_worker):
    h = one_worker.submit(from_preset("dlg", {"data": "folder", "folder": "/nonexistent"}))
    wait(h)
    assert h.status == "failed" and h.error.startswith("folder:")


def test_a_crashed_worker_is_replaced_and_its_run_reported(one_worker):
    h = one_worker.submit(from_preset("invgrad", LONG))
    assert until(lambda: h.latest is not None, poll=(h,))
    os.kill(one_worker._workers[0].process.pid, signal.SIGKILL)  # as the OOM killer would
    assert until(lambda: h.done, timeout=30, poll=(h,))
    assert h.status == "failed" and "stopped unexpectedly" in h.error
    warm(one_worker)
    again = one_worker.submit(from_preset("dlg", {"image_size": 16, "iterations": 3}))
    wait(again)
    assert again.status == "finished"


def test_stop_reaches_a_step_that_never_looks_for_it(monkeypatch, tmp_path):
    """torch.compile building a ResNet's racing objective is one call of tens of seconds that never looks for
    Stop (44–126 s on 2 cores): Stop did nothing until it returned. Now the worker is killed and replaced."""
    monkeypatch.setattr(pool_mod, "STOP_GRACE", 2.0)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))  # a cold build, whatever ran before
    p = warm(RunPool(max_running=1))
    try:
        h = p.submit(from_preset("invgrad", {"model": "resnet", "restarts": 3, "compile": "on", "image_size": 16}))
        assert until(lambda: h.latest is not None, timeout=60, poll=(h,))
        assert "compiling" in h.latest.stage
        t0 = time.time()
        h.stop()
        assert until(lambda: h.done, timeout=30, poll=(h,))
        assert time.time() - t0 < 8
        assert h.status == "stopped" and "worker was restarted" in h.error
        warm(p)
        again = p.submit(from_preset("dlg", {"image_size": 16, "iterations": 3}))
        wait(again)
        assert again.status == "finished"
    finally:
        p.close()


def test_a_closing_server_starts_no_workers():
    p = warm(RunPool(max_running=1))
    first = p._workers[0].process
    h = p.submit(from_preset("invgrad", LONG))
    assert until(lambda: h.status == "running", poll=(h,))
    os.kill(first.pid, signal.SIGTERM)  # the server and its workers are told to stop together
    time.sleep(3)
    assert p._workers[0].process is first and not first.is_alive() and p.closing
    assert h.done
    p.close()
    q = RunPool(max_running=1)
    q.close()
    time.sleep(1)
    assert all(not w.process.is_alive() for w in q._workers)


def test_runs_of_a_closed_pool_end_saying_so_instead_of_waiting_forever():
    p = warm(RunPool(max_running=1))
    running = p.submit(from_preset("invgrad", LONG))
    assert until(lambda: running.status == "running", poll=(running,))
    queued = p.submit(from_preset("dlg", {"image_size": 16, "iterations": 3}))
    p.close()
    late = p.submit(from_preset("dlg", {"image_size": 16, "iterations": 3}))
    for h in (running, queued, late):
        assert h.status == "failed" and h.error == pool_mod.SHUT_DOWN


def test_the_server_never_hands_out_a_closed_pool():
    """Pages get the pool from st.cache_resource: once it is closed (tests, an embedding app), the next page
    must get a pool that runs, not one whose queue nobody serves."""
    from leakdemo.dashboard.shared import run_pool
    first = run_pool()
    assert run_pool() is first
    first.close()
    second = run_pool()
    try:
        assert second is not first and not second.closing
        h = second.submit(from_preset("dlg", {"image_size": 16, "iterations": 3}))
        wait(h)
        assert h.status == "finished"
    finally:
        second.close()


def test_a_bad_pool_setting_in_the_environment_is_one_line_and_the_default():
    code = "from leakdemo.dashboard import pool; print(pool.MAX_RUNNING, pool.CONFIG_PROBLEMS)"
    env = {**os.environ, "LEAKDEMO_MAX_RUNS": "many", "LEAKDEMO_MAX_THREADS": "0"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "Traceback" not in out.stderr
    assert out.stdout.startswith("2 [\"LEAKDEMO_MAX_RUNS: must be an integer in [1, 64], got 'many'; using 2\"")
    assert out.stderr.splitlines()[0] == "warning: LEAKDEMO_MAX_RUNS: must be an integer in [1, 64], got 'many'; using 2"
    assert "LEAKDEMO_MAX_THREADS: must be an integer in [1, 1024], got '0'" in out.stderr


def test_runs_split_the_cores_between_them(monkeypatch):
    """Two runs at once on 8 cores: 3 threads each (one core stays with the web server); one alone: 7."""
    p = RunPool.__new__(RunPool)
    p._workers = [type("W", (), {"handle": None, "threads": type("V", (), {"value": 1})()})() for _ in range(2)]
    p._busy = type("V", (), {"value": 0})()
    monkeypatch.setattr(pool_mod, "RUN_CORES", 7)
    monkeypatch.setattr(pool_mod, "THREADS_CAP", 7)
    p._workers[0].handle = object()
    p._share_cores()
    assert [w.threads.value for w in p._workers] == [7, 7]
    assert p._busy.value == 1  # what an idle worker reads before it builds ahead: not while a run goes on
    p._workers[1].handle = object()
    p._share_cores()
    assert [w.threads.value for w in p._workers] == [3, 3]


def test_a_worker_warms_up_every_preset_that_builds_a_compiled_objective():
    """On a GPU a preset's first run in a process builds its compiled objective (25–29 s on an H200): the
    warm-up runs each such preset at its own shape, so a class's first run finds it built. A warm-up setting
    that no longer resolves would leave the worker cold, so each is resolved here."""
    gpu = pool_mod.warm_runs(cuda=True)
    assert [name for name, _ in gpu] == ["dlg", "invgrad", "dlm-plus"]
    for name, settings in gpu:
        scenario = from_preset(name, settings)
        assert scenario["iterations"] == 2 and scenario["image_size"] == from_preset(name)["image_size"]
        assert wanted(scenario, torch.device("cuda"), 1)  # its one start compiles on a GPU: the warm-up builds it
    (name, settings), = pool_mod.warm_runs(cuda=False)  # the CPU: a small image of the default preset
    assert from_preset(name, settings)["image_size"] == 16
    # ... and later, idle, it builds the objectives of DLG's and DLM+'s one start, at their presets' shapes: its
    # workers run one start compiled only with a build they hold (compiled.HELD_BUILDS)
    assert pool_mod.held_builds(cuda=True) == []
    cpu = pool_mod.held_builds(cuda=False)
    assert [name for name, _ in cpu] == ["dlg", "dlm-plus"]
    for name, settings in cpu:
        scenario = from_preset(name, settings)
        assert scenario["iterations"] == 2 and scenario["image_size"] == from_preset(name)["image_size"]
        assert scenario["compile"] == "on"


def test_an_idle_worker_builds_ahead_when_no_other_is_building_and_its_runs_use_the_builds():
    """On a CPU a warm worker builds the dlg and dlm-plus presets' objectives (held_builds) once no run has gone
    on for a few seconds, holding the pool's build lock, so that one worker at a time builds while the others stay
    free to take a run at once; its later runs of those shapes run compiled. While another worker holds the lock
    it builds nothing."""
    p = warm(RunPool(max_running=1))
    lock = p._workers[0].builds[0]
    try:
        assert lock.acquire(timeout=10)  # as if another worker were building
        assert until(lambda: p.warm() == 1, timeout=120)

        def run_dlg() -> list[str]:
            h = p.submit(from_preset("dlg", {"iterations": 3}))
            wait(h, timeout=300)
            assert h.status == "finished", h.status
            return h.notes
        assert compiled.READY not in run_dlg()  # nothing was built meanwhile: this run went eagerly
        time.sleep(pool_mod.QUIET_S + 2)  # idle: the worker tries the lock again, and waits
        assert compiled.READY not in run_dlg()
        lock.release()
        lock = None
        # a run that only this worker can take while it builds waits for the build's step, and the page says so
        assert until(lambda: p.building() == 1, timeout=120)
        h = p.submit(from_preset("dlg", {"iterations": 3}))
        wait(h, timeout=300)
        assert h.status == "finished" and pool_mod.WAITS_FOR_BUILD in h.notes
        assert p.building() == 0
        # idle between runs, as a class is: once no run has gone on for QUIET_S the worker builds (~3 s each from
        # Inductor's cache, 16–20 s the first time on a machine)
        assert until(lambda: time.sleep(pool_mod.QUIET_S + 2) or compiled.READY in run_dlg(), timeout=300)
    finally:
        if lock is not None:
            lock.release()
        p.close()


def test_a_run_goes_to_a_warm_worker_before_one_still_warming_up():
    """A worker still warming up takes a run only after the step it is in — on a GPU a build of 25 s — so a free
    worker past its warm-up is chosen first; busy and not-yet-ready workers are not chosen at all."""
    from types import SimpleNamespace as W
    warming = W(handle=None, ready=True, warm=False, name="warming")
    warm = W(handle=None, ready=True, warm=True, name="warm")
    busy = W(handle=object(), ready=True, warm=True, name="busy")
    loading = W(handle=None, ready=False, warm=False, name="loading")
    assert [w.name for w in pool_mod.free_workers([warming, busy, loading, warm])] == ["warm", "warming"]
    assert pool_mod.free_workers([busy, loading]) == []
    # a warm worker that holds its builds ahead (a dlg run steps twice as fast there on a CPU) before one without;
    # one building them says so and counts as still warming up
    built = W(handle=None, ready=True, warm=True, built=True, name="built")
    building = W(handle=None, ready=True, warm=False, built=False, name="building")
    assert [w.name for w in pool_mod.free_workers([building, warm, built])] == ["built", "warm", "building"]
