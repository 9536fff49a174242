import os
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
# LEAKDEMO_TEST_DEVICE=cuda make test: every engine test computes on that device (`device=auto` means it),
# and the browser tests are left out (they check the page, not the device).
TEST_DEVICE = os.environ.get("LEAKDEMO_TEST_DEVICE", "")
collect_ignore = ["test_browser.py"] if TEST_DEVICE else []
if TEST_DEVICE:
    os.environ["LEAKDEMO_DEVICE"] = TEST_DEVICE


def pytest_configure(config):
    if TEST_DEVICE and TEST_DEVICE not in ("cpu", "cuda"):
        raise pytest.UsageError(f"LEAKDEMO_TEST_DEVICE must be cpu or cuda, got {TEST_DEVICE!r}")
    if TEST_DEVICE == "cuda" and not torch.cuda.is_available():
        raise pytest.UsageError("LEAKDEMO_TEST_DEVICE=cuda, but torch sees no CUDA device on this machine")


def pytest_report_header(config):
    if TEST_DEVICE:
        return f"leakdemo: engine tests on {TEST_DEVICE} (LEAKDEMO_TEST_DEVICE); browser tests left out"
# No test reads or writes the user's run store; the store's own tests point LEAKDEMO_STORE at a temp file.
os.environ["LEAKDEMO_STORE"] = "off"


@pytest.fixture(scope="module", autouse=True)
def no_workers_left_behind():
    """A page under AppTest starts the server's worker pool; close it after the module so its workers do not
    compete with later tests (the next page that asks gets a new pool)."""
    yield
    if "leakdemo.dashboard.pool" in sys.modules:
        sys.modules["leakdemo.dashboard.pool"].close_all()


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
