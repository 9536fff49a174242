"""Choosing where to compute: auto | cpu | cuda, with a clear message when CUDA is asked for but absent.

The machine's facts (is there CUDA, what to call the hardware) come from torch. The web server never
imports torch (about 500 MB): its worker processes do, and report the facts when they are ready
(`expect_report` / `learn`) — unless the operating system settles them first: a Linux machine without a GPU
driver's device files has no CUDA for torch to find, so a fresh server's first page need not wait seconds
for its workers to say "CPU only". Everything else (CLI, workers, tests) asks torch directly.
"""
from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

from .errors import ParamError

REPORT_TIMEOUT = 180.0  # seconds to wait for the workers' report before asking torch here after all

_learned: dict | None = None
_reported = threading.Event()
_expecting = False
# What torch's CUDA needs on Linux before it can see a GPU: NVIDIA's driver nodes, ROCm's (torch.cuda there
# too), or WSL2's GPU bridge. None of them present: torch.cuda.is_available() is False.
GPU_DRIVER_FILES = ("/dev/nvidiactl", "/dev/nvidia0", "/proc/driver/nvidia", "/dev/kfd", "/dev/dxg")


def expect_report() -> None:
    """This process's workers will report the facts (the dashboard's pool): wait for them, not for torch."""
    global _expecting
    _expecting = True


def learn(facts: dict) -> None:
    global _learned
    if _learned is None:
        _learned = dict(facts)
        _reported.set()


def measure() -> dict:
    """{"cuda": bool, "hardware": str}, asked of torch in this process."""
    import torch
    cuda = torch.cuda.is_available()
    hardware = f"CUDA: {torch.cuda.get_device_name(0)}" if cuda else f"CPU only ({os.cpu_count() or 1} cores)"
    return {"cuda": cuda, "hardware": hardware}


def settled_without_torch() -> dict | None:
    """measure()'s answer where the OS alone gives it (no GPU driver on Linux, or macOS, whose torch has no
    CUDA); None where only torch can tell."""
    if sys.platform == "darwin" or (sys.platform.startswith("linux")
                                    and not any(Path(f).exists() for f in GPU_DRIVER_FILES)):
        return {"cuda": False, "hardware": f"CPU only ({os.cpu_count() or 1} cores)"}
    return None


def facts(wait: bool = True) -> dict | None:
    """The machine's facts; None when they are still awaited from the workers and `wait` is False."""
    if _learned is not None:
        return _learned
    if _expecting and "torch" not in sys.modules:
        known = settled_without_torch()
        if known is not None:
            learn(known)
            return _learned
        if not wait:
            return None
        if _reported.wait(REPORT_TIMEOUT):
            return _learned
    return _learn_here()


def _learn_here() -> dict:
    learn(measure())
    return _learned


def cuda_known() -> bool | None:
    """Whether this machine has CUDA, where that is known without importing torch here: the workers' report, the
    OS's answer, or torch already loaded in this process; None while only the workers can tell."""
    if _learned is not None:
        return _learned["cuda"]
    if "torch" in sys.modules:
        return _learn_here()["cuda"]
    settled = settled_without_torch()
    return None if settled is None else settled["cuda"]


def runs_on_gpu(choice: str) -> bool | None:
    """Whether a run with this device choice computes on a GPU (auto as $LEAKDEMO_DEVICE says, else as the
    machine has CUDA), where that is known without importing torch here; None while only the workers can tell."""
    if choice == "auto":
        choice = os.environ.get("LEAKDEMO_DEVICE", "auto")
    return choice == "cuda" if choice in ("cpu", "cuda") else cuda_known()


def cuda_available() -> bool:
    return facts()["cuda"]


def device_name(choice: str) -> str:
    """'cpu' or 'cuda' for a device choice (what the run store keys on), without importing torch.
    $LEAKDEMO_DEVICE (cpu or cuda) says what `auto` means on this machine (the test suite's device switch)."""
    if choice == "auto" and os.environ.get("LEAKDEMO_DEVICE", "auto") != "auto":
        choice = os.environ["LEAKDEMO_DEVICE"]
        if choice not in ("cpu", "cuda"):
            raise ParamError("LEAKDEMO_DEVICE", f"must be auto, cpu or cuda; got {choice!r}")
    if choice == "cuda":
        if not cuda_available():
            raise ParamError("device", "cuda is not available on this machine; allowed here: auto, cpu"
                             + (" (LEAKDEMO_DEVICE asks for cuda)" if os.environ.get("LEAKDEMO_DEVICE") == "cuda" else ""))
        return "cuda"
    if choice == "auto":
        return "cuda" if cuda_available() else "cpu"
    return "cpu"


def resolve_device(choice: str):
    """The torch.device to compute on (in the processes that compute), with float32 kept exact there."""
    import torch
    exact_float32()
    return torch.device(device_name(choice))


def exact_float32() -> None:
    """Compute in true float32 on a GPU. cuDNN's convolutions default to TF32 (a 10-bit mantissa) on Ampere
    and later: gradient matching then cannot drive its loss below TF32's rounding, and DLG on an H200 stalled
    at 24 dB where the CPU reaches 53 dB (TF32 off: 55–58 dB). Matrix products are asked for full
    float32 too (torch's default, kept whatever another library set)."""
    import torch
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def from_host(t, device):
    """`t` (made on the host, e.g. noise from a seeded CPU generator) on `device` without the GPU waiting.

    A plain copy from ordinary host memory makes torch wait for the GPU to finish everything queued before it
    (a host sync per tensor: a defense adds one for every layer it noises, every round). From pinned memory
    the copy is queued like a kernel; torch keeps the pinned block until the copy is done."""
    if t.device == device or device.type != "cuda":
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)
