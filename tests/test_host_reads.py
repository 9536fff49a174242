"""Issue 14: an attack's step on a GPU must not wait for the host. A CPU cannot show a wait, but it can show
its cause: leakdemo code reading a tensor's value (float, int, bool, item, tolist) inside a step. The guard
below turns every such read from leakdemo's own files into an error while the attack steps; torch's own
bookkeeping is let through (its optimisers keep their step counts on the host, where reading them is free).
Racing L-BFGS (DLG/DLM) is not here: it reads which start leads and which stalled once per L-BFGS step of
~20 evaluations, by design (see attacks/racing.py)."""
import contextlib
import os
import sys

import pytest
import torch

from leakdemo import catalog
from leakdemo.scenario import from_preset

LEAKDEMO = os.path.dirname(os.path.abspath(catalog.__file__))
READS = ("__float__", "__int__", "__bool__", "__index__", "item", "tolist")


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
        yield
    finally:
        for name, original in saved.items():
            setattr(torch.Tensor, name, original)


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
