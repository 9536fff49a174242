"""Where the dashboard's web server learns the machine's facts: from the OS when it settles them, else from
its workers (it never imports torch itself)."""
import os
import subprocess
import sys

import pytest

from leakdemo import device

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def server_facts(driver_files) -> list[str]:
    """What a web-server process (workers expected, no torch) knows at once, with these driver files."""
    code = ("import sys; from leakdemo import device; device.GPU_DRIVER_FILES = %r; device.expect_report(); "
            "print(device.facts(wait=False)); print('torch' in sys.modules)" % (tuple(driver_files),))
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_the_os_answer_agrees_with_torch():
    """Where the OS settles the facts, they are torch's own (on a GPU machine the OS leaves it to torch)."""
    known = device.settled_without_torch()
    assert known is None or known == device.measure()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the driver files are Linux's")
def test_a_driverless_server_knows_at_once_and_one_with_a_driver_waits_for_its_workers(tmp_path):
    facts, torch_loaded = server_facts([str(tmp_path / "no-such-driver")])
    assert facts == repr({"cuda": False, "hardware": f"CPU only ({os.cpu_count() or 1} cores)"})
    assert torch_loaded == "False"
    facts, torch_loaded = server_facts([str(tmp_path)])  # a driver node exists: only torch can tell
    assert facts == "None" and torch_loaded == "False"


def test_an_attack_computes_in_true_float32_even_where_tf32_was_switched_on():
    """cuDNN's TF32 convolutions (its default on a GPU) stop gradient matching short of a sharp picture: the
    device an attack runs on is resolved with TF32 off, whatever was set before."""
    import torch
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        device.resolve_device("auto")
        assert torch.backends.cudnn.allow_tf32 is False
        assert torch.backends.cuda.matmul.allow_tf32 is False
        assert torch.get_float32_matmul_precision() == "highest"
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False
