"""Choosing where to compute: auto | cpu | cuda, with a clear message when CUDA is asked for but absent."""
from __future__ import annotations

import torch

from .errors import ParamError


def cuda_available() -> bool:
    return torch.cuda.is_available()


def describe_hardware() -> str:
    if cuda_available():
        return f"CUDA: {torch.cuda.get_device_name(0)}"
    return f"CPU only ({torch.get_num_threads()} threads)"


def resolve_device(choice: str) -> torch.device:
    if choice == "cuda":
        if not cuda_available():
            raise ParamError("device", "cuda is not available on this machine; allowed here: auto, cpu")
        return torch.device("cuda")
    if choice == "auto":
        return torch.device("cuda" if cuda_available() else "cpu")
    return torch.device("cpu")
