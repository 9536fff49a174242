"""A sweep started from the dashboard: its runs go to the server's shared worker pool (a few at a time,
so Attack Lab runs of other tabs interleave), its events are folded into rows the page polls.

The sweep itself (grid, store, scoring, ε, utility) is leakdemo.sweep's; this only carries it."""
from __future__ import annotations

import sys
import threading
import time
import traceback
from typing import Callable, Iterator

from ..errors import LeakdemoError
from ..sweep import PointDone, RunDone, Sweep, SweepFinished, SweepStarted, failed


def pool_runner(pool, alive: Callable[[], bool] | None, in_flight: int):
    """A Sweep runner that hands each unit (a run, or runs attacked as one program) to `pool` and yields the
    runs' results as they finish."""
    def run(tasks, stop: threading.Event) -> Iterator[dict]:
        pending, active = list(tasks), []
        try:
            while pending or active:
                if stop.is_set():
                    return
                while pending and len(active) < in_flight:
                    active.append(pool.submit_task(pending.pop(0), alive))
                for h in list(active):
                    h.poll()
                    if h.status == "dropped":  # the tab is gone: so is its sweep
                        stop.set()
                        return
                    if h.done:
                        active.remove(h)
                        yield from h.task_result or failed(h.task, h.error or h.status)
                time.sleep(0.1)
        finally:
            for h in active:
                h.stop()
    return run


class SweepJob:
    """The page's view of one running sweep: rows by point, progress, ETA, and how it ended."""

    def __init__(self, sweep: Sweep, on_finished: Callable[[list[dict]], None] | None = None):
        """on_finished(rows): called (on the sweep's thread) once the sweep has finished, not when stopped."""
        self.sweep = sweep
        self.on_finished = on_finished
        self.rows: dict[int, dict] = {}
        self.status, self.error = "starting", None
        self.done_runs = self.total_runs = self.cached = 0
        self.eta: float | None = None
        self.batch = 1  # runs attacked as one program, at most
        self.t0 = time.time()
        self.first_point_s: float | None = None
        self.seconds = 0.0
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._main, daemon=True, name="leakdemo-sweep")
        self.thread.start()

    @property
    def done(self) -> bool:
        return self.status in ("finished", "stopped", "failed")

    def stop(self) -> None:
        self.sweep.stop()

    def since_latest(self) -> float:
        """Seconds since the latest event while the sweep runs: the page's clock and its ETA run on from there,
        as the Lab's do (a slow last point left "done in 89 s, about 64 s left" standing for 80 s)."""
        return 0.0 if self.done else max(0.0, time.time() - self.t0 - self.seconds)

    def snapshot(self) -> list[dict]:
        with self.lock:
            return [self.rows[i] for i in sorted(self.rows)]

    def _main(self) -> None:
        try:
            for ev in self.sweep.events():
                with self.lock:
                    self._apply(ev)
        except LeakdemoError as e:
            self.error, self.status = str(e), "failed"
        except Exception as e:  # noqa: BLE001 — an engine bug still reaches the page as one line
            traceback.print_exc(file=sys.stderr)
            self.error, self.status = f"internal error ({e.__class__.__name__}: {e}); details in the server log", "failed"
        if self.status == "finished" and self.on_finished is not None:
            try:
                self.on_finished(self.snapshot())
            except Exception:  # noqa: BLE001 — what follows a sweep never makes it a failed one
                traceback.print_exc(file=sys.stderr)

    def _apply(self, ev) -> None:
        self.seconds = time.time() - self.t0
        if isinstance(ev, SweepStarted):
            self.status, self.total_runs, self.cached = "running", ev.runs, ev.cached
            self.batch = ev.batch
        elif isinstance(ev, (PointDone, RunDone)):
            self.done_runs, self.eta = ev.done_runs, ev.eta
            row = ev.point if isinstance(ev, PointDone) else ev.row
            if row is not None and row.get("runs"):  # a point shows from its first run on, then firms up
                self.rows[row["index"]] = row
                if self.first_point_s is None:
                    self.first_point_s = self.seconds
        elif isinstance(ev, SweepFinished):
            for r in ev.rows:
                self.rows[r["index"]] = r
            self.status = ev.status
