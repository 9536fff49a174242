"""The capture policy of cuda_graph.Replayed, on any machine: torch's CUDA stream and graph calls are stood in
for, so these check what Replayed decides (warm up, capture, retry once, give up with one note), not CUDA."""
from contextlib import nullcontext

import pytest
import torch

from leakdemo import cuda_graph
from leakdemo.cuda_graph import Replayed, said_once


class _Stream:
    def wait_stream(self, other):
        pass


@pytest.fixture
def captures(monkeypatch):
    """How the next captures end: each item True (captured) or False (failed), in order."""
    outcomes = []

    class Graph:
        def replay(self):
            pass

    def graph(g, capture_error_mode=None):
        if outcomes.pop(0):
            return nullcontext()
        raise RuntimeError("operation not permitted when stream is capturing\nmore detail")

    monkeypatch.setattr(torch.cuda, "Stream", lambda *a, **k: _Stream())
    monkeypatch.setattr(torch.cuda, "stream", lambda s: nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a, **k: _Stream())
    monkeypatch.setattr(torch.cuda, "CUDAGraph", Graph)
    monkeypatch.setattr(torch.cuda, "graph", graph)
    return outcomes


def _counting():
    calls = []

    def fn(x):
        calls.append(float(x))
        return x * 2
    return fn, calls


def test_a_capture_that_fails_once_is_tried_again_after_another_warm_up(captures):
    captures += [False, True]
    fn, calls = _counting()
    r = Replayed(fn, torch.device("cpu"), "the steps")
    for i in range(6):
        r(torch.tensor(float(i)))
    # call 0 warms up, 1 fails to capture and runs eagerly, 2 warms up again, 3 is captured, 4 and 5 replay
    assert calls == [0.0, 1.0, 2.0, 3.0] and not captures
    assert r.graph is not None and not r.eager and r.failures == 1 and said_once(r) is None


def test_a_capture_that_fails_twice_leaves_the_calls_eager_and_says_so_once(captures):
    captures += [False, False]
    fn, calls = _counting()
    r = Replayed(fn, torch.device("cpu"), "the steps")
    notes = []
    for i in range(6):
        assert torch.equal(r(torch.tensor(float(i))), torch.tensor(2.0 * i))  # every call computed, eagerly
        notes.append(said_once(r))
    assert r.eager and r.graph is None and not captures
    assert calls == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert notes[:3] == [None] * 3 and notes[4:] == [None] * 2  # said at the second failed capture only
    assert notes[3] == ("the steps run eagerly: capturing a CUDA graph failed twice "
                        "(operation not permitted when stream is capturing)")
    assert cuda_graph.CAPTURE_TRIES == 2
