"""A bounded pool of background runs shared by every browser session of one server.

A class opening the same link must not start 40 attacks at once: at most `MAX_RUNNING` run together,
the rest wait in order and say so. Each session polls its RunHandle; a handle that nobody has polled
for `ABANDON_AFTER` seconds (the tab was closed) stops its run. A handle keeps only the latest frame,
thinned curves and a bounded set of keyframes, so memory stays flat over long runs.
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

from ..events import Failed, Finished, Progress, Started
from ..runner import Run, _Thinned
from ..scenario import Scenario

MAX_RUNNING = int(os.environ.get("LEAKDEMO_MAX_RUNS", "2"))
ABANDON_AFTER = 15.0  # seconds without a poll -> the tab is gone, stop the run


@dataclass
class RunHandle:
    scenario: Scenario
    run: Run
    status: str = "queued"  # queued | running | finished | stopped | failed
    started: Started | None = None
    latest: Progress | None = None
    finished: Finished | None = None
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    submitted_at: float = field(default_factory=time.time)
    started_at: float | None = None
    first_frame_at: float | None = None
    last_poll: float = field(default_factory=time.time)
    artifacts: dict = field(default_factory=dict)  # computed once, on finish
    curves: dict = field(default_factory=lambda: {k: _Thinned(2000) for k in ("iteration", "psnr", "ssim", "loss")})
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def poll(self) -> "RunHandle":
        self.last_poll = time.time()
        return self

    def stop(self) -> None:
        self.run.stop()
        with self.lock:
            if self.status == "queued":
                self.status = "stopped"

    @property
    def done(self) -> bool:
        return self.status in ("finished", "stopped", "failed")


def build_artifacts(scenario: Scenario, started: Started, fin: Finished, keyframes) -> dict:
    import json

    from ..artifacts import gif_bytes, grid, metrics_csv, png_bytes
    metrics = {**fin.metrics, "seconds": fin.seconds, "iterations": fin.iterations}
    return {
        "grid.png": png_bytes(grid([list(started.originals), list(fin.images)])),
        "progress.gif": gif_bytes(started.originals, keyframes),
        "metrics.csv": metrics_csv(fin.history).encode(),
        "metrics.json": json.dumps(metrics, indent=2).encode(),
        "scenario.json": scenario.to_json().encode(),
    }


class RunPool:
    def __init__(self, max_running: int = MAX_RUNNING):
        self.max_running = max_running
        self._slots = threading.Semaphore(max_running)
        self._lock = threading.Lock()
        self._queue: list[RunHandle] = []

    def submit(self, scenario: Scenario, uploads=None) -> RunHandle:
        handle = RunHandle(scenario, Run(scenario, uploads))
        with self._lock:
            self._queue.append(handle)
        threading.Thread(target=self._work, args=(handle,), daemon=True, name="leakdemo-run").start()
        return handle

    def position(self, handle: RunHandle) -> int:
        """0 when running or done; otherwise how many runs are ahead of it."""
        with self._lock:
            waiting = [h for h in self._queue if h.status == "queued"]
        return waiting.index(handle) + 1 if handle in waiting else 0

    def running(self) -> int:
        with self._lock:
            return sum(h.status == "running" for h in self._queue)

    def _work(self, handle: RunHandle) -> None:
        while not self._slots.acquire(timeout=0.5):
            if handle.status == "stopped" or time.time() - handle.last_poll > ABANDON_AFTER:
                self._forget(handle, "stopped")
                return
        try:
            with handle.lock:
                if handle.status == "stopped":
                    return
                handle.status, handle.started_at = "running", time.time()
            for ev in handle.run.events():
                if time.time() - handle.last_poll > ABANDON_AFTER:
                    handle.run.stop()
                with handle.lock:
                    if isinstance(ev, Started):
                        handle.started = ev
                    elif isinstance(ev, Progress):
                        if handle.first_frame_at is None:
                            handle.first_frame_at = time.time()
                        handle.latest = ev
                        for k in handle.curves:
                            handle.curves[k].offer(getattr(ev, k), force=bool(ev.note))
                        if ev.note:
                            handle.notes.append(ev.note)
                    elif isinstance(ev, Finished):
                        handle.finished = ev
                    elif isinstance(ev, Failed):
                        handle.error, handle.status = ev.message, "failed"
                if isinstance(ev, Finished):  # build the downloads here, off the page's thread
                    arts = build_artifacts(handle.scenario, handle.started, ev, handle.run.keyframes.items)
                    with handle.lock:
                        handle.artifacts, handle.status = arts, ev.status
        finally:
            self._slots.release()
            self._forget(handle, None)

    def _forget(self, handle: RunHandle, status: str | None) -> None:
        with handle.lock:
            if status:
                handle.status = status
            if not handle.done:
                handle.status = "failed"
                handle.error = handle.error or "the run ended without a result"
        with self._lock:
            if handle in self._queue:
                self._queue.remove(handle)
