"""The capture policy of cuda_graph.Replayed, and of the training loops built on it (training_step), on any
machine: torch's CUDA stream and graph calls are stood in for, so these check what Replayed decides (warm up,
capture, retry once, give up with one note), not CUDA."""
from contextlib import nullcontext

import pytest
import torch

from leakdemo import cuda_graph
from leakdemo.cuda_graph import Replayed, said_once
from leakdemo.training_step import TrainingStep


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


def _training(graph_device: str):
    """A small net, its Adam and a TrainingStep whose loss scales with its setting; batches of 8 and a short 3."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))
    opt = torch.optim.Adam(net.parameters(), lr=0.1, foreach=True)

    def loss(scale, x):
        return net(x).pow(2).mean(1) * {"once": 1.0, "twice": 2.0}[scale]
    return net, opt, TrainingStep(loss, net.parameters(), opt, torch.device(graph_device), "the steps")


BATCHES = [torch.rand(n, 4, generator=torch.Generator().manual_seed(n)) for n in (8, 8, 8, 8, 3, 3, 3, 3, 8)]


def test_a_training_step_takes_the_step_that_backward_takes():
    """Eagerly (a CPU), a TrainingStep's step is `loss.sum().backward(); opt.step()` to the bit, its setting
    passed to the loss."""
    net, opt, step = _training("cpu")
    ref, ref_opt, _ = _training("cpu")
    for i, x in enumerate(BATCHES):
        scale = "twice" if i % 2 else "once"
        got = step(x, setting=(scale,))
        ref_opt.zero_grad()
        want = ref(x).pow(2).mean(1) * (2.0 if i % 2 else 1.0)
        want.sum().backward()
        ref_opt.step()
        assert torch.equal(got, want.detach())
    assert step.graphs is None
    assert all(torch.equal(a, b) for a, b in zip(net.parameters(), ref.parameters()))


def test_a_training_loop_whose_captures_fail_trains_eagerly_as_before_and_says_so_once(captures):
    """On a GPU each batch shape (and setting) has its own graph; if each fails to capture twice, every step
    is still computed, as eagerly, and the loop says so once, not once per graph."""
    captures += [False] * 4
    net, opt, step = _training("cuda")  # the graphs' policy only: the stand-ins above run no CUDA
    ref, _, eager = _training("cpu")
    notes = []
    for x in BATCHES:
        assert torch.equal(step(x, setting=("once",)), eager(x, setting=("once",)))
        notes.append(said_once(step))
    assert len(step.graphs) == 2 and all(r.eager for r in step.graphs.values()) and not captures
    assert notes[3] == "the steps run eagerly: capturing a CUDA graph failed twice " \
                       "(operation not permitted when stream is capturing)"
    assert notes[:3] + notes[4:] == [None] * 8
    assert all(torch.equal(a, b) for a, b in zip(net.parameters(), ref.parameters()))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("model", ["lenet", "resnet"])
def test_on_a_gpu_the_models_warm_up_replays_cuda_graphs_equal_to_eager_steps(model, monkeypatch):
    """FedSGD's and FedAvg's warm-up (SGD with momentum on other images; BatchNorm's statistics too with a
    ResNet) trains on a GPU through replayed graphs to the weights eager steps reach; none failed to capture."""
    from leakdemo import training_step
    from leakdemo.protocols.fedsgd import make_model, warm_up
    from leakdemo.scenario import from_preset

    p = dict(from_preset("dlg", {"warmup_steps": 40, "model": model, "image_size": 16}).params)
    made, init = [], training_step.TrainingStep.__init__

    def recorded(self, *args, **kwargs):
        init(self, *args, **kwargs)
        made.append(self)
    monkeypatch.setattr(training_step.TrainingStep, "__init__", recorded)
    graphed = make_model(p).cuda()
    warm_up(graphed, p, [], torch.device("cuda"))
    assert made[0].graphs and all(r.graph is not None for r in made[0].graphs.values()) and made[0].note is None
    monkeypatch.setattr(training_step.TrainingStep, "__init__",
                        lambda self, *args, **kwargs: (init(self, *args, **kwargs), setattr(self, "graphs", None))[0])
    eager = make_model(p).cuda()
    warm_up(eager, p, [], torch.device("cuda"))
    state = eager.state_dict()
    assert all(torch.allclose(v.float(), state[k].float(), atol=1e-5) for k, v in graphed.state_dict().items())
