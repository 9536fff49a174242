"""Issue 14: an attack's step on a GPU must not wait for the host. A CPU cannot show a wait, but it can show
its cause: leakdemo code reading a tensor's value (float, int, bool, item, tolist) inside a step. The guard
below turns every such read from leakdemo's own files into an error while the attack steps; torch's own
bookkeeping is let through (its optimisers keep their step counts on the host, where reading them is free).
Racing L-BFGS (DLG/DLM) is not here: it reads which start leads and which stalled once per L-BFGS step of
~20 evaluations, by design (see attacks/racing.py).

A GPU also waits inside some of torch's own operations, whoever calls them: an SVD, pinv or eigh (cuSOLVER
checks convergence on the host), a linalg call that checks its errors, a boolean mask's nonzero. The second
guard sees every operation torch dispatches and turns those into errors too."""
import contextlib
import os
import sys

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from leakdemo import catalog
from leakdemo.scenario import from_preset

LEAKDEMO = os.path.dirname(os.path.abspath(catalog.__file__))
READS = ("__float__", "__int__", "__bool__", "__index__", "item", "tolist")


WAITING_OPS = ("_linalg_svd", "linalg_svd", "linalg_pinv", "_linalg_eigh", "linalg_eigh", "linalg_eig",
               "_linalg_check_errors", "linalg_lstsq", "linalg_matrix_rank", "nonzero", "masked_select",
               "_unique2", "unique_dim", "unique_consecutive")


TORCH = os.path.dirname(os.path.abspath(torch.__file__))
DISPATCH = tuple(os.path.join(TORCH, d) for d in ("_dynamo", "_compile.py", "_ops.py", "utils/_python_dispatch.py"))


def _caller() -> str:
    """file:line of the code that ran the operation, past torch's dispatch machinery."""
    f = sys._getframe(2)
    while f is not None and os.path.abspath(f.f_code.co_filename).startswith(DISPATCH):
        f = f.f_back
    return f"{os.path.abspath(f.f_code.co_filename)}:{f.f_lineno}" if f else "?"


class NoWaitingOps(TorchDispatchMode):
    """Every operation torch runs passes here: those that make a GPU wait for the host are refused."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        indices = args[1] if name in ("index", "index_put_", "index_put") else ()
        masked = any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices)
        counted = (name == "repeat_interleave" and func._overloadname != "self_int"  # repeats given as a tensor
                   and (kwargs or {}).get("output_size") is None)  # are summed on the host unless sized
        if name == "_local_scalar_dense":  # a value read on the host, e.g. rows[i] with i a 0-dim tensor: refused
            caller = _caller()  # where leakdemo's own code asks for it (torch's optimisers read their step
            if caller.startswith(LEAKDEMO):  # counts, which they keep on the host: free)
                raise AssertionError(f"aten._local_scalar_dense (a host read) at {caller}")
        if name in WAITING_OPS or masked or counted:
            raise AssertionError(f"aten.{name}{' with a boolean mask' if masked else ''} waits for the host on a GPU")
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def no_host_reads():
    saved = {name: getattr(torch.Tensor, name) for name in READS}

    def guarded(name):
        original = saved[name]

        def read(self, *args, **kwargs):
            frame = sys._getframe(1)
            if os.path.abspath(frame.f_code.co_filename).startswith(LEAKDEMO):
                raise AssertionError(f"tensor.{name} at {frame.f_code.co_filename}:{frame.f_lineno}")
            return original(self, *args, **kwargs)
        return read
    for name in READS:
        setattr(torch.Tensor, name, guarded(name))
    try:
        with NoWaitingOps():
            yield
    finally:
        for name, original in saved.items():
            setattr(torch.Tensor, name, original)


def test_the_guard_sees_an_operation_that_waits():
    with no_host_reads():
        torch.ones(3).add(1)  # an ordinary operation passes
        with pytest.raises(AssertionError, match="linalg_pinv"):
            torch.linalg.pinv(torch.eye(3))
        with pytest.raises(AssertionError, match="_linalg_svd"):
            torch.linalg.svd(torch.eye(3))
        with pytest.raises(AssertionError, match="boolean mask"):
            torch.ones(3)[torch.ones(3) > 0]
        torch.linalg.cholesky_ex(torch.eye(3))  # the unchecked variants do not wait


def test_the_guard_sees_a_read():
    from leakdemo.runner import _finite

    t = torch.ones(())
    with no_host_reads():
        assert float(t) == 1.0  # a read from outside leakdemo (here, a test) is let through
        with pytest.raises(AssertionError, match=r"tensor.__float__ at .*leakdemo/runner.py"):
            _finite(t)  # one from leakdemo's code is not
    assert _finite(t) == 1.0  # and everything is restored


@pytest.mark.parametrize("preset,over", [
    ("invgrad", {"restarts": 2, "compile": "off"}),  # Inverting Gradients, racing starts
    ("invgrad", {"restarts": 0}),
    ("agic", {"restarts": 1, "compile": "off"}),  # AGIC, racing starts
    ("agic-multiround", {}),  # AGIC's per-epoch pre-reconstructions
    ("invgrad-fedavg", {}),  # the simulation baseline
    ("cafe", {"n_samples": 40, "batch_size": 8}),  # CAFE, Steps I–III in one loop
    ("cafe-training", {"n_samples": 40, "batch_size": 8}),  # … with the row-space term, the federation training
    ("cafe-fake-gradients", {"n_samples": 40, "batch_size": 8}),  # … its uploads through CAFE's defense
    ("cafe", {"n_samples": 40, "batch_size": 8, "defense": "dp-gaussian"}),  # … through clipping and noise
    ("cafe", {"n_samples": 40, "batch_size": 8, "solver": "sgd"}),  # … with the paper's gradient steps
    ("pli", {"data": "digits", "image_size": 16, "target_classes": 3, "views": 24, "rounds": 1,
             "local_epochs": 2, "inversion_epochs": 3, "model_width": 16}),  # PLI's inversion networks' epochs
])
def test_an_attacks_steps_never_read_a_tensor(preset, over):
    """Past its first steps (set-up, label inference, a compile), every step an attack yields runs without
    leakdemo reading any tensor: losses and labels travel as tensors, which the Runner reads only for the
    frames it scores."""
    short = {} if preset == "pli" else {"iterations": 40}  # PLI counts epochs, not iterations
    sc = from_preset(preset, {"image_size": 16, **short, **over})
    p = dict(sc.params)
    device = torch.device("cpu")
    obs, kn, _ = catalog.PROTOCOLS[p["protocol"]].run(p, device)
    steps = catalog.ATTACKS[p["attack"]].run(obs, kn, p, device)
    for _ in range(3):
        next(steps)
    with no_host_reads():
        taken = 0
        for step in steps:
            taken += 1
            if step.final or taken >= 20:
                break
    assert taken > 0
