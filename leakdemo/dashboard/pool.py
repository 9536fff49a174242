"""A bounded pool of worker processes shared by every browser session of one server.

Attacks are CPU-heavy Python loops; in the page's own process they would fight the web server for the
GIL (measured: 2x slower with a chart being drawn beside them). So each run goes to one of
`MAX_RUNNING` worker processes, started once and warmed up; the rest wait in order and say so. Events
come back through a queue and land in the session's RunHandle, which keeps only the latest frame and
thinned curves, so memory stays flat over long runs. A handle nobody has polled for `ABANDON_AFTER`
seconds (its tab was closed) stops its run.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import queue
import threading
import time
from dataclasses import dataclass, field

from ..events import Failed, Finished, Progress, Started
from ..runner import Thinned
from ..scenario import Scenario, from_dict

MAX_RUNNING = int(os.environ.get("LEAKDEMO_MAX_RUNS", "2"))
ABANDON_AFTER = 15.0  # seconds without a poll -> the tab is gone, stop the run


CHECKS = ("step1_error", "step2_error",  # CAFE's Step I/II errors (Progress.checks), None elsewhere
          "attack_accuracy", "baseline_attack_accuracy")  # PLI and the TBI baseline beside it
CURVES = ("iteration", "psnr", "ssim", "loss") + CHECKS


@dataclass
class RunHandle:
    scenario: Scenario
    uploads: list | None = None
    status: str = "queued"  # queued | running | finished | stopped | failed
    started: Started | None = None
    latest: Progress | None = None
    finished: Finished | None = None
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    matching: dict | None = None  # AGIC's cross-epoch pairing, from the one event that carries it
    last_poll: float = field(default_factory=time.time)
    artifacts: dict = field(default_factory=dict)  # built in the worker, on finish
    curves: dict = field(default_factory=lambda: {k: Thinned(400) for k in CURVES})
    stop_requested: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _worker: "_Worker | None" = field(default=None, repr=False)

    def poll(self) -> "RunHandle":
        self.last_poll = time.time()
        return self

    def stop(self) -> None:
        with self.lock:
            self.stop_requested = True
            if self.status == "queued":
                self.status = "stopped"
            worker = self._worker
        if worker is not None:
            worker.stop_flag.set()

    @property
    def stopping(self) -> bool:
        return self.stop_requested and not self.done

    @property
    def done(self) -> bool:
        return self.status in ("finished", "stopped", "failed")

    def apply(self, ev) -> None:
        """Fold one event from the worker into what the page shows."""
        with self.lock:
            if isinstance(ev, Started):
                self.started = ev
            elif isinstance(ev, Progress):
                self.latest = ev
                checks = ev.checks or {}
                for k in self.curves:
                    value = checks.get(k) if k in CHECKS else getattr(ev, k)
                    self.curves[k].offer(value, force=bool(ev.note))
                if ev.note:
                    self.notes.append(ev.note)
                if ev.matching is not None:
                    self.matching = ev.matching
            elif isinstance(ev, Finished):
                self.finished, self.status = ev, ev.status  # show the result now; downloads follow
            elif isinstance(ev, Failed):
                self.error, self.status = ev.message, "failed"
            elif isinstance(ev, dict):  # the downloads, built in the worker after the result
                self.artifacts = ev


# ---------------------------------------------------------------- the worker process side


def build_artifacts(scenario: Scenario, started: Started, fin: Finished, keyframes) -> dict:
    from ..artifacts import gif_bytes, matching_png, metrics_csv, metrics_json, pair_grid, png_bytes, shown_originals
    originals = shown_originals(started.originals, fin.metrics)
    out = {
        "grid.png": png_bytes(pair_grid(originals, fin.images, psnr=fin.metrics["psnr_per_image"],
                                        baseline=fin.baseline)),
        "progress.gif": gif_bytes(originals, keyframes),
        "metrics.csv": metrics_csv(fin.history).encode(),
        "metrics.json": metrics_json(fin),
        "scenario.json": scenario.to_json().encode(),
    }
    if fin.metrics.get("matching"):
        out["matching.png"] = matching_png(fin.metrics["matching"])
    return out


def _worker_main(jobs, results, stop_flag) -> None:
    """Runs in a worker process: take a job, stream its events back, repeat."""
    import torch

    from ..data import available_samples, sample_image
    from ..runner import Run
    # split the cores between the workers: oversubscribed OpenMP threads slow every run down
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // MAX_RUNNING))
    from ..scenario import from_preset
    # warm every code path once (imports, torch's optimizer machinery, the photos) so that the first
    # real run shows its first frame at once
    for _ in Run(from_preset("dlg", {"iterations": 2, "image_size": 16})).events():
        pass
    for name in available_samples():
        sample_image(name, 32)
    results.put(("ready", None))
    while True:
        job = jobs.get()
        if job is None:
            return
        job_id, scenario_dict, uploads = job
        scenario = from_dict(scenario_dict)
        run = Run(scenario, uploads, stop_event=stop_flag)
        started = None
        for ev in run.events():
            if isinstance(ev, Started):
                started = ev
            results.put((job_id, ev))
            if isinstance(ev, Finished):
                try:
                    results.put((job_id, build_artifacts(scenario, started, ev, run.keyframes.items)))
                except Exception as e:  # downloads are a convenience: never lose the result over them
                    results.put((job_id, {"error": f"downloads unavailable ({e.__class__.__name__})"}))
            if isinstance(ev, Failed):
                results.put((job_id, {}))
        results.put((job_id, "done"))


class _Worker:
    def __init__(self, ctx):
        self.ctx = ctx
        self.handle: RunHandle | None = None
        self.start()

    def start(self) -> None:
        self.ready = False
        self.jobs, self.results, self.stop_flag = self.ctx.Queue(), self.ctx.Queue(), self.ctx.Event()
        self.process = self.ctx.Process(target=_worker_main, args=(self.jobs, self.results, self.stop_flag),
                                        daemon=True, name="leakdemo-worker")
        self.process.start()


class RunPool:
    def __init__(self, max_running: int = MAX_RUNNING):
        self.max_running = max_running
        self._ctx = mp.get_context("spawn")
        self._lock = threading.Lock()
        self._waiting: list[RunHandle] = []
        self._workers = [_Worker(self._ctx) for _ in range(max_running)]
        self._next_id = 0
        for w in self._workers:
            threading.Thread(target=self._pump, args=(w,), daemon=True, name="leakdemo-pump").start()
        threading.Thread(target=self._dispatch, daemon=True, name="leakdemo-dispatch").start()

    def submit(self, scenario: Scenario, uploads=None) -> RunHandle:
        handle = RunHandle(scenario, uploads)
        with self._lock:
            self._waiting.append(handle)
        return handle

    def position(self, handle: RunHandle) -> int:
        """How many runs are ahead of a queued one (1 = next); 0 when it is not waiting."""
        with self._lock:
            return self._waiting.index(handle) + 1 if handle in self._waiting else 0

    def ready(self) -> int:
        """Workers that have finished warming up."""
        return sum(w.ready for w in self._workers)

    def _dispatch(self) -> None:
        while True:
            time.sleep(0.05)
            with self._lock:
                self._waiting = [h for h in self._waiting if h.status == "queued"
                                 and time.time() - h.last_poll < ABANDON_AFTER]
                for w in self._workers:
                    if w.handle is None and w.ready and self._waiting:
                        h = self._waiting.pop(0)
                        self._next_id += 1
                        w.stop_flag.clear()
                        with h.lock:
                            h.status, h._worker = "running", w
                        w.handle = h
                        w.jobs.put((self._next_id, h.scenario.to_dict(), h.uploads))
                        w.job_id = self._next_id
                    elif w.handle is not None and time.time() - w.handle.last_poll > ABANDON_AFTER:
                        w.stop_flag.set()  # the tab is gone

    def _pump(self, w: _Worker) -> None:
        while True:
            try:
                job_id, item = w.results.get(timeout=1.0)
            except queue.Empty:
                if not w.process.is_alive():
                    self._worker_died(w)
                continue
            with self._lock:
                h = w.handle if getattr(w, "job_id", None) == job_id else None
            if job_id == "ready":
                w.ready = True
                continue
            if h is None:
                continue
            if item == "done":
                with self._lock:
                    w.handle = None
                continue
            h.apply(item)

    def _worker_died(self, w: _Worker) -> None:
        with self._lock:
            h, w.handle = w.handle, None
        if h is not None:
            h.apply(Failed("the worker process stopped unexpectedly (out of memory?); please run again"))
        w.start()
