"""A bounded pool of worker processes shared by every browser session of one server.

Attacks are CPU-heavy Python loops; in the page's own process they would fight the web server for the
GIL (measured: 2x slower with a chart being drawn beside them). So each run goes to one of
`MAX_RUNNING` worker processes, started once and warmed up; the rest wait in order and say so. Events
come back through a queue and land in the session's RunHandle, which keeps only the latest frame and
thinned curves, so memory stays flat over long runs.

Every handle ends: finished, stopped, failed, or dropped (a queued run whose tab stopped asking; it is
queued again at its old place if the tab comes back). A stop names its job, never a worker, so a late
Stop cannot reach a stranger's run. A tab is gone when its browser session disconnects (the page hands
in `alive`) or, without that, when nobody polled it for `ABANDON_AFTER` seconds. Runs share the cores
the web server leaves: each worker's torch thread count follows the number of runs active at the time.
"""
from __future__ import annotations

import atexit
import json
import multiprocessing as mp
import os
import queue
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from .. import device
from ..events import Failed, Finished, Progress, Started, Thinned
from ..scenario import Scenario, from_dict
from ..spawn import plain_main

CONFIG_PROBLEMS: list[str] = []  # environment settings that were refused (the Lab's sidebar says so too)


def _env_count(name: str, default: int, high: int) -> int:
    """A count from the environment; a bad one is said in one line (server log and sidebar), the default used."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
        if not 1 <= value <= high:
            raise ValueError
        return value
    except ValueError:
        problem = f"{name}: must be an integer in [1, {high}], got {raw!r}; using {default}"
        CONFIG_PROBLEMS.append(problem)
        print(f"warning: {problem}", file=sys.stderr, flush=True)
        return default


MAX_RUNNING = _env_count("LEAKDEMO_MAX_RUNS", 2, 64)
ABANDON_AFTER = 15.0  # seconds without a poll -> the tab is gone (when no `alive` check is available)
TICK = 0.05  # the dispatcher's period
CORES = os.cpu_count() or 1
# The runs share the cores the web server leaves them: it needs one of its own to draw every tab's frames.
# Measured on 2 cores with the page open: a lone DLG run took 72 s with 2 torch threads (OpenMP threads
# spinning against the server and the browser) and 15 s with 1 (the CLI: 11 s).
RUN_CORES = max(1, CORES - 1)
THREADS_CAP = _env_count("LEAKDEMO_MAX_THREADS", RUN_CORES, 1024)  # torch threads one run may use
# A worker that dies of these went down with the server (the whole process group was told to stop):
# it is not replaced. Any other death (the OS's OOM killer sends SIGKILL) is.
SHUT_DOWN = "the attack workers were shut down before this run ended; please run it again"
SHUTDOWN_SIGNALS = {-signal.SIGTERM, -signal.SIGINT, -signal.SIGHUP}
# Stop means stop now. A run looks for its stop between steps and inside its long loops, but a few calls
# never return to it: torch.compile building an objective took 44–126 s on 2 cores (a ResNet's racing starts)
# while Stop did nothing. A worker still on its job this long after Stop is killed and replaced.
STOP_GRACE = 10.0
STOPPED_HARD = ("stopped inside a step that does not look for Stop (such as torch.compile building the attack's "
                "objective), so its worker was restarted")

CHECKS = ("step1_error", "step2_error",  # CAFE's Step I/II errors (Progress.checks), None elsewhere
          "attack_accuracy", "baseline_attack_accuracy")  # PLI and the TBI baseline beside it
CURVES = ("iteration", "psnr", "ssim", "loss") + CHECKS
DONE = ("finished", "stopped", "failed", "dropped")


@dataclass(eq=False)
class RunHandle:
    scenario: Scenario
    uploads: list | None = None
    alive: Callable[[], bool] | None = None  # is the tab that asked still connected?
    status: str = "queued"  # queued | running | finished | stopped | failed | dropped
    started: Started | None = None
    latest: Progress | None = None
    clock_at: float | None = None  # when the run started, then when `latest` arrived (time.monotonic)
    finished: Finished | None = None
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    matching: dict | None = None  # AGIC's cross-epoch pairing, from the one event that carries it
    last_poll: float = field(default_factory=time.time)
    artifacts: dict = field(default_factory=dict)  # built in the worker, on finish
    curves: dict = field(default_factory=lambda: {k: Thinned(400) for k in CURVES})
    stop_requested: bool = False
    stop_asked_at: float | None = None  # when Stop was first pressed (the pool's patience runs from here)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    seq: int = 0  # place in the queue (kept when a dropped run is queued again)
    stored_id: int | None = None  # the run store's number for the finished run (Compare's "Run #12")
    queued_at: float = field(default_factory=time.monotonic)  # the wait for a worker has a clock too
    job_id: int | None = None
    task: object = None  # a sweep's run or runs (leakdemo.sweep.Task, Batch): computed and scored whole, no frames
    task_result: list | None = None  # ... one result per run
    _pool: "RunPool | None" = field(default=None, repr=False)

    def poll(self) -> "RunHandle":
        self.last_poll = time.time()
        if self.status == "dropped" and self._pool is not None:
            self._pool.requeue(self)  # the tab is back: take its old place in the queue
        return self

    def stop(self) -> None:
        with self.lock:
            self.stop_requested = True
            self.stop_asked_at = self.stop_asked_at or time.time()
            if self.status in ("queued", "dropped"):
                self.status = "stopped"
        if self._pool is not None:
            self._pool.stop_job(self)

    def since_latest(self) -> float:
        """Seconds since the latest progress event arrived (or, before the first, since the run started): the
        page's clock runs on from its time. A 15-s compile, or one long step of many racing starts, sends one
        event at its start, and the page showed "0.0 s" throughout, as if the run had hung; a ten-client PLI
        federation's set-up (~30 s) showed no time at all."""
        return 0.0 if self.clock_at is None else time.monotonic() - self.clock_at

    @property
    def stopping(self) -> bool:
        return self.stop_requested and not self.done

    @property
    def done(self) -> bool:
        return self.status in DONE

    @property
    def complete(self) -> bool:
        """Done, and nothing more will arrive (the downloads follow a finished result)."""
        return self.done and (self.status != "finished" or bool(self.artifacts) or self.task is not None)

    def apply(self, ev) -> None:
        """Fold one event from the worker into what the page shows."""
        with self.lock:
            if isinstance(ev, Started):
                self.started = ev
            elif isinstance(ev, Progress):
                before, self.latest = (self.latest.stage if self.latest else None), ev
                self.clock_at = time.monotonic()
                checks = ev.checks or {}
                for k in self.curves:
                    value = checks.get(k) if k in CHECKS else getattr(ev, k)
                    self.curves[k].offer(value, force=bool(ev.note) or ev.stage != before)
                if ev.note:
                    self.notes.append(ev.note)
                if ev.matching is not None:
                    self.matching = ev.matching
            elif isinstance(ev, Finished):
                self.finished, self.status = ev, ev.status  # show the result now; downloads follow
            elif isinstance(ev, Failed):  # asked to stop before the first step: stopped, not failed
                self.error, self.status = ev.message, "stopped" if self.stop_requested else "failed"
            elif isinstance(ev, dict) and "task_result" in ev:  # a sweep's run, scored in the worker
                self.task_result = ev["task_result"]
                self.status = "stopped" if self.stop_requested else "finished"
            elif isinstance(ev, dict) and "stored_id" in ev:  # where the worker kept the finished run
                self.stored_id = ev["stored_id"]
            elif isinstance(ev, dict):  # the downloads, built in the worker after the result
                self.artifacts = ev


# ---------------------------------------------------------------- the worker process side


def build_artifacts(run, started: Started, fin: Finished) -> dict:
    """The run's downloads: `run --out`'s files (its scenario.json naming any uploaded photos it ran on)."""
    from ..artifacts import run_files
    return run_files(json.dumps(run.file_dict(), indent=2), started.originals, fin, run.keyframes.items)


class JobControl:
    """What the Runner checks between steps, in the worker: a stop meant for *this* job (the pool writes
    the job's id into a shared value), and the thread budget (runs share the cores)."""

    def __init__(self, stop_job, threads, job_id: int):
        self.stop_job, self.threads, self.job_id = stop_job, threads, job_id
        self._threads_now = 0

    def set(self) -> None:
        self.stop_job.value = self.job_id

    def is_set(self) -> bool:
        want = max(1, self.threads.value)
        if want != self._threads_now:  # called on the worker's main thread, between two steps
            import torch
            torch.set_num_threads(want)
            self._threads_now = want
        return self.stop_job.value == self.job_id


def warm_runs(cuda: bool) -> list[tuple[str, dict]]:
    """The warm-up runs (preset, settings). On a GPU the presets whose first run in a process builds a compiled
    objective and captures CUDA graphs, at their own shapes: on an H200 the first run of `dlg`, `dlm-plus` and
    `invgrad` in a process took 29, 28 and 25 s, a later one 3.4, 3.5 and 1.0 s whole — the warm-up pays the
    build instead of a class's first run. `invgrad` builds nothing since (one start on a GPU replays its eager
    evaluation as a CUDA graph, faster than compiled), but its first run in a process still took 7.6 s against
    0.8 s: the warm-up pays that too. The CPU compiles nothing for one start here, so a small image warms
    the same code (its builds come after: held_builds)."""
    if cuda:
        return [("dlg", {"iterations": 2}), ("invgrad", {"iterations": 2}), ("dlm-plus", {"iterations": 2})]
    return [("dlg", {"iterations": 2, "image_size": 16})]


def held_builds(cuda: bool) -> list[tuple[str, dict]]:
    """The runs a warm worker builds ahead, when idle, one worker at a time. On a CPU one start runs compiled
    only with a build its worker holds (compiled.HELD_BUILDS), and builds pay most for DLG and DLM+ (2 cores,
    30 dB: 3.3 → 2.2 s; 3.3 → 1.9 s; iDLG gains little, 12.5 → 14–16 it/s): those two presets' objectives at their
    own shapes (16–20 s each the first time on a machine, ~3 s from Inductor's cache after that). A GPU's are
    built in its warm-up (warm_runs)."""
    if cuda:
        return []
    return [("dlg", {"iterations": 2, "compile": "on"}), ("dlm-plus", {"iterations": 2, "compile": "on"})]


BUILD_WAIT_S = 300  # how long a worker waits for its turn to build before it gives up, for now
QUIET_S = 5.0  # ... and how long no run must have gone on before it builds
WAITS_FOR_BUILD = ("this worker was building DLG's and DLM+'s compiled objectives ahead, for faster runs; the run "
                   "starts when that step ends (a few seconds; up to 20 s the first time on a machine)")


def _worker_main(jobs, results, stop_job, threads, build_lock, busy) -> None:
    """Runs in a worker process: take a job, stream its events back, repeat; when idle, build ahead."""
    import torch

    from ..data import available_samples, sample_image
    from ..runner import Run
    from ..spawn import exit_with_parent
    exit_with_parent()  # a server killed outright takes its workers with it, mid-run too
    # the machine, for the server (which never imports torch): first, so that it waits seconds, not the warm-up
    machine = device.measure()
    results.put(("facts", machine))
    from ..attacks import compiled
    compiled.HELD_BUILDS = True  # attack after attack in this process: one CPU start uses a build it holds
    torch.set_num_threads(max(1, threads.value))
    from ..scenario import from_preset
    store = _open_store()
    # Ready once the engine is imported: a run asked for now does not wait for the warm-up below, which only
    # pays ahead what a first run pays anyway (on a cold start of the 2-core machine both workers were ready
    # after 7.8 s with the warm-up first, 3.6 s now).
    results.put(("ready", None))

    def warm_run():  # torch's optimizer machinery, then (at its end) LPIPS; on a GPU the compiled objectives
        for name, settings in warm_runs(machine["cuda"]):
            for _ in Run(from_preset(name, settings)).events():
                if not jobs.empty():
                    return

    def warm_photos():
        for name in available_samples():
            sample_image(name, 32)

    builds = held_builds(machine["cuda"])

    def build_ahead() -> bool:
        """The held builds, once no worker has run anything for QUIET_S (busy: on 2 cores a build beside a run
        slowed the run by a third to a half, and a class's runs come in bursts) — one worker at a time
        (build_lock), so that while one builds (16–20 s a build the first time on a machine, ~3 s after) the
        others stay free to take a run at once, and build after it from Inductor's cache. Says "building"
        meanwhile: the pool gives a run to another worker first. True once every build is done."""
        deadline = quiet_since = time.monotonic()
        deadline += BUILD_WAIT_S
        while True:
            if not jobs.empty() or time.monotonic() > deadline:
                return False
            if busy.value:
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since >= QUIET_S and build_lock.acquire(timeout=0.25):
                break
            time.sleep(0.25)
        try:
            results.put(("building", None))
            while builds and jobs.empty() and not busy.value:
                name, settings = builds[0]
                for _ in Run(from_preset(name, settings)).events():
                    if not jobs.empty():
                        break  # before the build or after it: its step ends either way
                else:
                    builds.pop(0)
        finally:
            build_lock.release()
            results.put(("warm", None))
            if not builds:
                results.put(("built", None))
        return not builds

    # while no job waits, warm every code path once, so that a later first run shows its first frame at once
    for warm in (warm_run, warm_photos):
        if not jobs.empty():
            break  # a job waits: its run pays these first-time costs itself
        warm()
    results.put(("warm", None))
    while True:
        try:  # a server gone meanwhile ends this process (exit_with_parent)
            job = jobs.get(timeout=1.0) if builds else jobs.get()
        except queue.Empty:
            build_ahead()
            continue
        if job is None:
            return
        job_id, scenario_dict, uploads = job
        control = JobControl(stop_job, threads, job_id)
        control.is_set()  # takes this moment's share of the cores before the set-up
        if not isinstance(scenario_dict, dict):  # a sweep's run: one scored result, no frames
            results.put((job_id, {"task_result": _sweep_task(scenario_dict, control)}))
            results.put((job_id, "done"))
            continue
        scenario = from_dict(scenario_dict)
        # the Lab is for watching a run happen: always computed live (fresh), then kept in the run store — but
        # for a run on uploaded photos, which are never written to disk (the store is the server's, and its runs
        # are every browser's to replay on Compare: a classroom's students saw each other's photos there)
        run = Run(scenario, uploads, stop_event=control, store=None if uploads else store, fresh=True,
                  source="dashboard")
        started = None
        for ev in run.events():
            if isinstance(ev, Started):
                started = ev
            results.put((job_id, ev))
            if isinstance(ev, Finished):
                if run.stored_id is not None:  # before the downloads: the page offers Compare once both are in
                    results.put((job_id, {"stored_id": run.stored_id}))
                try:
                    results.put((job_id, build_artifacts(run, started, ev)))
                except Exception as e:  # downloads are a convenience: never lose the result over them
                    results.put((job_id, {"error": f"downloads unavailable ({e.__class__.__name__})"}))
        results.put((job_id, "done"))


def _sweep_task(unit, control) -> list[dict]:
    from ..sweep import failed, run_unit
    try:
        return run_unit(unit, stop_event=control)
    except Exception as e:  # noqa: BLE001 — one point's runs fail, the sweep goes on
        return failed(unit, f"internal error ({e.__class__.__name__}: {e})")


def _open_store():
    """The run store for this worker, or None (turned off, or unusable: said once in the server log)."""
    from ..errors import LeakdemoError
    from ..store import open_store
    try:
        return open_store()
    except LeakdemoError as e:
        print(f"warning: dashboard runs are not recorded: {e}", flush=True)
        return None


class _Worker:
    def __init__(self, ctx, builds):
        self.ctx, self.builds = ctx, builds
        self.handle: RunHandle | None = None
        self.job_id: int | None = None
        self.stop_job = ctx.Value("q", 0, lock=False)
        self.threads = ctx.Value("i", 1, lock=False)
        self.start()

    def start(self) -> None:
        self.ready = self.warm = self.built = self.building = False
        self.jobs, self.results = self.ctx.Queue(), self.ctx.Queue()
        self.process = self.ctx.Process(target=_worker_main, daemon=True, name="leakdemo-worker",
                                        args=(self.jobs, self.results, self.stop_job, self.threads, *self.builds))
        with plain_main():  # never the page script: a worker imports only the engine
            self.process.start()


def free_workers(workers: list) -> list:
    """Workers that can take a run now, those past their warm-up first: one still warming up finishes the step
    it is in before it takes the run, and that step can be the build of a compiled objective (a GPU's 25 s; a
    CPU's 16–20 s the first time on a machine, ~3 s later). Among warm ones, one that holds its builds ahead
    (held_builds) first: a dlg or dlm-plus run there reaches 30 dB about a third sooner on a CPU."""
    return sorted((w for w in workers if w.handle is None and w.ready),
                  key=lambda w: (not w.warm, not getattr(w, "built", False)))


def _deaf_to_stop(w: _Worker, now: float) -> bool:
    """The worker has held a stopped job for STOP_GRACE seconds: it is inside a call that never looks."""
    h = w.handle
    return (h is not None and w.job_id == h.job_id and h.stop_asked_at is not None and not h.done
            and now - h.stop_asked_at > STOP_GRACE and w.process.is_alive())


_POOLS: "list[RunPool]" = []


def close_all() -> None:
    """Close every pool this process started (tests, and anything embedding the dashboard)."""
    for p in list(_POOLS):
        p.close()


class RunPool:
    def __init__(self, max_running: int = MAX_RUNNING):
        self.max_running = max_running
        self._ctx = mp.get_context("spawn")
        device.expect_report()
        self._lock = threading.Lock()
        self._waiting: list[RunHandle] = []
        self._next_id = 0
        self._next_seq = 0
        self.closing = False
        # the workers' builds ahead (_worker_main): one at a time, and only while no run goes on
        self._busy = self._ctx.Value("i", 0, lock=False)
        builds = (self._ctx.Lock(), self._busy)
        self._workers = [_Worker(self._ctx, builds) for _ in range(max_running)]
        for w in self._workers:
            threading.Thread(target=self._pump, args=(w,), daemon=True, name="leakdemo-pump").start()
        threading.Thread(target=self._dispatch, daemon=True, name="leakdemo-dispatch").start()
        atexit.register(self.close)
        _POOLS.append(self)

    # ------------------------------------------------------------ what pages call

    def submit(self, scenario: Scenario, uploads=None, alive: Callable[[], bool] | None = None) -> RunHandle:
        with self._lock:
            self._next_seq += 1
            handle = RunHandle(scenario, uploads, alive, seq=self._next_seq, _pool=self)
            self._queue(handle)
        return handle

    def submit_task(self, task, alive: Callable[[], bool] | None = None) -> RunHandle:
        """A sweep's run, or runs attacked as one program (leakdemo.sweep.Task, Batch): queued like any run,
        answered with their scored results."""
        with self._lock:
            self._next_seq += 1
            handle = RunHandle(Scenario(task.params, task.preset), None, alive, seq=self._next_seq, task=task,
                               _pool=self)
            self._queue(handle)
        return handle

    def _queue(self, handle: RunHandle) -> None:
        if self.closing:  # under self._lock
            handle.status, handle.error = "failed", SHUT_DOWN
        else:
            self._waiting.append(handle)

    def position(self, handle: RunHandle) -> int:
        """How many runs are ahead of a queued one, itself included (1 = next); 0 when it is not waiting."""
        with self._lock:
            return self._waiting.index(handle) + 1 if handle in self._waiting else 0

    def ready(self) -> int:
        """Workers that can take a run (the engine imported)."""
        return sum(w.ready for w in self._workers)

    def warm(self) -> int:
        """Workers past their warm-up: a run they take shows its first frame at once."""
        return sum(w.warm for w in self._workers)

    def building(self) -> int:
        """Workers building their objectives ahead (held_builds): a run they take waits for the build's step."""
        return sum(w.building for w in self._workers)

    def running(self) -> int:
        return sum(w.handle is not None for w in self._workers)

    def on_sweeps(self) -> int:
        """Workers on runs computed whole (a sweep's, or Compare's defenses form's): a Lab run queued behind
        them waits for a whole batch, with no frames to show meanwhile."""
        return sum(w.handle is not None and w.handle.task is not None for w in self._workers)

    def requeue(self, handle: RunHandle) -> None:
        """A dropped run whose tab came back: queued again at the place it had."""
        with self._lock, handle.lock:
            if handle.status != "dropped" or self.closing:
                return
            handle.status = "queued"
            handle.notes.append("this tab was away, so its place was released; queued again at the same place")
            self._waiting.append(handle)
            self._waiting.sort(key=lambda h: h.seq)

    def stop_job(self, handle: RunHandle) -> None:
        """Stop the handle's own job, if a worker is running it right now; nothing else."""
        with self._lock:
            self._waiting = [h for h in self._waiting if h is not handle]
            for w in self._workers:
                if w.handle is handle and w.job_id == handle.job_id:
                    w.stop_job.value = handle.job_id

    def close(self) -> None:
        """Stop every worker and start none (the server is shutting down)."""
        with self._lock:
            if self in _POOLS:
                _POOLS.remove(self)
            if self.closing:
                return
            self.closing = True
            workers = list(self._workers)
            orphans, self._waiting = self._waiting + [w.handle for w in workers if w.handle is not None], []
        for h in orphans:  # nobody will serve them now: their pages say so instead of waiting forever
            if not h.done:
                h.apply(Failed(SHUT_DOWN))
        for w in workers:
            try:
                w.jobs.put_nowait(None)
            except Exception:
                pass
            if w.job_id is not None:
                w.stop_job.value = w.job_id
        for w in workers:
            w.process.join(timeout=2)
            if w.process.is_alive():
                w.process.kill()
                w.process.join(timeout=2)

    # ------------------------------------------------------------ threads

    def _gone(self, h: RunHandle, now: float) -> bool:
        if h.alive is not None:
            try:
                return not h.alive()
            except Exception:
                return False
        return now - h.last_poll > ABANDON_AFTER

    def _dispatch(self) -> None:
        while not self.closing:
            time.sleep(TICK)
            now = time.time()
            with self._lock:
                if self.closing:
                    return
                keep = []
                for h in self._waiting:
                    if h.status != "queued":
                        continue
                    if self._gone(h, now):
                        with h.lock:
                            h.status = "dropped"
                            h.error = "dropped: the tab stopped asking"
                        continue
                    keep.append(h)
                self._waiting = keep
                for w in free_workers(self._workers):
                    if not self._waiting:
                        break
                    self._start(w, self._waiting.pop(0))
                for w in self._workers:
                    if w.handle is not None and w.job_id is not None and self._gone(w.handle, now):
                        w.stop_job.value = w.job_id  # the tab is gone: free the worker
                    if _deaf_to_stop(w, now):
                        w.process.kill()  # _pump sees it die: the run ends as stopped, a new worker starts
                self._share_cores()

    def _start(self, w: _Worker, h: RunHandle) -> None:
        self._next_id += 1
        with h.lock:
            h.status, h.job_id, h.clock_at = "running", self._next_id, time.monotonic()
        w.handle, w.job_id = h, self._next_id
        if w.building:  # only when no other worker was free: the page says why the first frame is late
            h.notes.append(WAITS_FOR_BUILD)
        self._share_cores()
        w.jobs.put((self._next_id, h.task if h.task is not None else h.scenario.to_dict(), h.uploads))

    def _share_cores(self) -> None:
        """A run alone gets every core the server leaves; several split them (oversubscribed OpenMP slows
        every run down)."""
        per_run = max(1, min(THREADS_CAP, RUN_CORES // max(1, self.running())))
        self._busy.value = self.running()  # an idle worker builds ahead only while this is 0
        for w in self._workers:
            if w.threads.value != per_run:
                w.threads.value = per_run

    def _pump(self, w: _Worker) -> None:
        while not self.closing:
            try:
                job_id, item = w.results.get(timeout=0.5)
            except queue.Empty:
                if not w.process.is_alive() and not self.closing:
                    self._worker_died(w)
                continue
            except (EOFError, OSError):  # the queue broke with its process
                time.sleep(0.1)
                continue
            if job_id == "facts":
                device.learn(item)  # the server knows the machine from its workers, without torch
                continue
            if job_id in ("ready", "warm", "building"):  # building: taken as not warm, so a run goes elsewhere first
                w.ready, w.warm = True, job_id == "warm" or (job_id == "ready" and w.warm)
                w.building = job_id == "building"
                continue
            if job_id == "built":  # it holds its builds ahead: a run of those shapes runs compiled there
                w.built = True
                continue
            with self._lock:
                h = w.handle if w.job_id == job_id else None
            if h is None:
                continue
            if item == "done":
                with self._lock:
                    w.handle, w.job_id = None, None
                    self._share_cores()
                continue
            h.apply(item)

    def _worker_died(self, w: _Worker) -> None:
        code = w.process.exitcode
        with self._lock:
            h, w.handle, w.job_id = w.handle, None, None
            w.ready = w.warm = w.built = w.building = False
            replace = not self.closing and code not in SHUTDOWN_SIGNALS
        if h is not None and not h.done:
            h.apply(Failed(STOPPED_HARD if h.stop_requested else "the worker running this attack stopped "
                           f"unexpectedly (exit code {code}; out of memory?); please run it again"))
        if replace:
            w.start()
        else:  # the server is going down with its workers: start nothing more, end what the others run
            threading.Thread(target=self.close, daemon=True, name="leakdemo-close").start()
