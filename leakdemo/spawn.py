"""Starting worker processes safely from anywhere, Streamlit included.

A spawned child re-imports its parent's __main__ module before it runs its target. Under `streamlit run`
(and AppTest) __main__ is the page script being executed, so every worker would run the whole page again
on start-up — importing the dashboard, drawing into nowhere, holding its memory. Children are started with
a neutral __main__ instead: they import only what their target needs."""
from __future__ import annotations

import os
import sys
import threading
import time
import types
from contextlib import contextmanager

_lock = threading.Lock()


@contextmanager
def plain_main():
    """While children are started: an empty __main__ (nothing to re-import), restored afterwards."""
    with _lock:
        main = sys.modules.get("__main__")
        sys.modules["__main__"] = types.ModuleType("__main__")
        try:
            yield
        finally:
            if main is not None:
                sys.modules["__main__"] = main


def exit_with_parent(every: float = 1.0) -> None:
    """In a worker: end this process within `every` seconds of the process that started it (killed outright,
    a closed terminal, `timeout`). Otherwise it would finish the runs queued for nobody and then wait forever
    on its queue, holding its memory (measured: a killed CLI sweep's two workers computed on for ~8 minutes,
    then sat idle with 1 GB each)."""
    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(every)
        os._exit(1)
    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()
