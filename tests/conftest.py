import os
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


@pytest.fixture
def tiny():
    """Parameters for fast attack tests: 16×16 images, the DLG LeNet."""
    return {"image_size": 16, "iterations": 60, "seed": 0}


@pytest.fixture
def empty_torch_home(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    return tmp_path / "torch"
