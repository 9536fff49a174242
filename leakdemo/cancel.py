"""Stop means stop now. A run checks its stop event between the attack's steps; the long loops that run
*inside* one step or before the first — a client's warm-up training, a federation's rounds, one L-BFGS step
of a thousand racing starts — call `check()`, which raises `Cancelled` once the run's stop event is set.

The Runner names the event around each call into the engine (`watching`), on the thread making it, so
two runs driven alternately from one thread never see each other's event. Outside a run, `check()` does
nothing. It reads a flag: no host sync on a GPU.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Iterator

_local = threading.local()


class Cancelled(Exception):
    """The run's stop event was set while the engine was inside a long loop."""


@contextmanager
def watching(event: Any) -> Iterator[None]:
    """Within the block, `check()` on this thread raises once `event.is_set()`."""
    before = getattr(_local, "event", None)
    _local.event = event
    try:
        yield
    finally:
        _local.event = before


def check() -> None:
    event = getattr(_local, "event", None)
    if event is not None and event.is_set():
        raise Cancelled
