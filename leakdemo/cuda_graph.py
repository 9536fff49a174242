"""A function of tensors replayed as one CUDA graph: for loops the host, not the GPU, would set the pace.

Eagerly every small operation is a kernel launch the host must issue (~10 µs each); a step of a few hundred
of them keeps a GPU idle most of the time. `Replayed(fn)` runs `fn` eagerly on its first call, on a side
stream (the warm-up torch requires before a capture), captures it on the second call and replays it from
then on: the call's arguments are copied into fixed tensors the graph reads, so `fn` must change its state
in place (`x -= …`, `x[idx] = …`, never `self.x = x - …`) and ask the host nothing (no `.item()`, no
branch on a tensor's value). The arguments must keep their shapes, and `fn` its branches, from call to
call. A capture that fails is tried once more, after another eager warm-up (a first use of something inside
a capture can fail where its second succeeds: on an H200 one run of a preset failed to capture where the same
run on another photo had not); one that fails again leaves `fn` eager, and `note` says why (once; the caller
shows it).

The outputs of a replay are the graph's own tensors, overwritten by the next replay: `Replayed` returns
clones unless `own_outputs` is set, for a caller that copies or uses them before calling again.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

CAPTURE_TRIES = 2  # a capture that fails is tried once more before the calls stay eager


def _fixed(arg, device: torch.device):
    """The tensor (or list of them) a graph reads in place of `arg`; a Python number becomes a 0-dim tensor,
    refilled each call (kept as a number, the graph would replay the value it was captured with)."""
    if isinstance(arg, torch.Tensor):
        return arg.detach().clone()
    if isinstance(arg, (list, tuple)):
        return [_fixed(a, device) for a in arg]
    if isinstance(arg, float):
        return torch.full((), arg, device=device)
    if arg is None:
        return None
    raise TypeError(f"Replayed: cannot hold a {type(arg).__name__} argument")


def _refill(fixed, arg) -> None:
    if isinstance(fixed, torch.Tensor):
        if fixed.ndim == 0 and not isinstance(arg, torch.Tensor):
            fixed.fill_(arg)  # a Python number: one small kernel, no copy from the host's memory
        else:
            fixed.copy_(arg)
    elif isinstance(fixed, list):
        if len(fixed) != len(arg):
            raise ValueError("Replayed: an argument changed its length between calls")
        for f, a in zip(fixed, arg):
            _refill(f, a)


def _clone(out):
    if isinstance(out, torch.Tensor):
        return out.clone()
    if isinstance(out, (list, tuple)):
        return type(out)(_clone(o) for o in out)
    return out


def capture_failed(e: Exception) -> str:
    """The note's words for a capture that failed: the error's first line."""
    first = str(e).strip().splitlines()[0][:160] if str(e).strip() else e.__class__.__name__
    return f"capturing a CUDA graph failed twice ({first})"


def said_once(holder, attr: str = "note") -> str | None:
    """`holder`'s note on a capture that failed, cleared as it is read: a run shows it once, at the step it
    appeared (the second, or the fourth after a retry)."""
    note = getattr(holder, attr, None)
    if note is not None:
        setattr(holder, attr, None)
    return note


class Replayed:
    def __init__(self, fn: Callable[..., Any], device: torch.device, what: str, own_outputs: bool = False):
        self.fn, self.device, self.what, self.own_outputs = fn, device, what, own_outputs
        self.graph, self.fixed, self.out = None, None, None
        self.warmed, self.eager, self.note = False, False, None
        self.failures = 0

    def __call__(self, *args):
        if self.eager:
            return self.fn(*args)
        if not self.warmed:  # torch's rule: run the work once on a side stream before capturing it
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                out = self.fn(*args)
            torch.cuda.current_stream(self.device).wait_stream(side)
            self.warmed = True
            return out
        if self.graph is None:
            self.fixed = [_fixed(a, self.device) for a in args]
            try:
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                    self.out = self.fn(*self.fixed)
            except Exception as e:  # noqa: BLE001 — a graph is a speed-up, never a requirement
                self.failures += 1
                if self.failures < CAPTURE_TRIES:
                    self.warmed = False  # this call runs eagerly, the next warms up again, the one after captures
                else:
                    self.eager = True
                    self.note = f"{self.what} run eagerly: {capture_failed(e)}"
                return self.fn(*args)
            self.graph = graph
        else:
            for fixed, arg in zip(self.fixed, args):
                _refill(fixed, arg)
        self.graph.replay()
        return self.out if self.own_outputs else _clone(self.out)
