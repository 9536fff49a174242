import os
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
# No test reads or writes the user's run store; the store's own tests point LEAKDEMO_STORE at a temp file.
os.environ["LEAKDEMO_STORE"] = "off"


@pytest.fixture
def tiny():
    """Parameters for fast attack tests: 16×16 images, the DLG LeNet."""
    return {"image_size": 16, "iterations": 60, "seed": 0}


@pytest.fixture
def store_path(tmp_path, monkeypatch):
    """A fresh run store for this test (and the processes it starts)."""
    path = tmp_path / "runs.sqlite"
    monkeypatch.setenv("LEAKDEMO_STORE", str(path))
    return path


@pytest.fixture
def empty_torch_home(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    return tmp_path / "torch"
