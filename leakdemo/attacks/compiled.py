"""torch.compile for the gradient-matching objectives of DLG, iDLG, DLM, DLM+ and Inverting Gradients.

One evaluation of these objectives (a forward, a backward with create_graph, a distance, and a backward
through all of that) is a few hundred small kernels; on a CPU most of its time is dispatch overhead, on a
GPU launch overhead. Written with torch.func (racing.py), the whole double backward is one traceable
function, which TorchInductor fuses: on the 2-core CPU one DLG evaluation drops from ~5 ms to ~1.6 ms
(4 racing starts: ~7.5 ms vmapped to ~2.3 ms; Inverting Gradients' 4 starts: ~33 ms looped to ~6.4 ms).

Building it costs ~15–30 s the first time a shape is seen on a machine; Inductor keeps what it built in
leakdemo's cache, so later runs (and other processes) build it in ~2 s. Anything that goes wrong — no C++
compiler, an unsupported operator, a result that disagrees with the eager objective — falls back to the
eager objective, with a note saying why: compiling is a speed-up, never a requirement.
"""
from __future__ import annotations

import logging
import os
import time
from typing import Callable

import torch

from ..settings import cache_dir

Packed = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]  # z (K, ...) -> loss (K,), ∂loss/∂z (K, ...)
# the page's note; measured on 2 cores: LeNet/ConvNet 15–30 s, a ResNet's racing starts 44 s (depth 1) to 112 s (4),
# DLM+'s 4 racing starts 29 s on one local step and 72 s on four (each step is unrolled into the objective)
COMPILING = ("compiling the objective (the first time for this shape on this machine: up to a minute; two for a "
             "deep ResNet, and ~15 s more for each local step of a FedAvg update)")
READY = "compiled the objective with torch.compile (ready from an earlier run)"  # this process built it
AGREEMENT = 1e-3  # the compiled objective's value and gradient must match the eager one this closely (relative)
# Builds one function may hold in a process. The racing objective is one function for DLG, iDLG, DLM and DLM+;
# each shape (image size, batch, model, trials) is a build of it. A dashboard worker or a sweep meets many, and
# torch's default of 8 left the ninth silently eager while the page said "compiled (ready from an earlier run)"
# (measured: dlg, 2 racing starts, image sizes 8 to 18 in one process: from 16 on, no build and that note).
RECOMPILE_LIMIT = 64


# Set by `python -m leakdemo run`, a process that runs one attack and exits: on a GPU the build of one start's
# objective (20–29 s on an H200) costs more than it saves in that one run — dlm-plus took 5.8 s eagerly, 28 s
# with its build, 3.5 s once built — so there `auto` leaves one start eager. The dashboard's workers, sweeps
# and `bench` keep their builds for the runs that follow.
ONE_OFF = False

# Set by the dashboard's workers, which run attack after attack in one process. There `auto` also compiles one
# L-BFGS start on a CPU, but only with a build this process already holds for that objective at that shape (idle
# workers build the dlg and dlm-plus presets' ahead: pool.held_builds): held, it saves half of every evaluation
# (dlg on 2 cores: 15–25 against 11–16 it/s, 30 dB at a median 2.2 s against 3.3 s), while building one for a run
# costs about what it saves. Any other shape runs eagerly at once, as before: nothing is built for it.
HELD_BUILDS = False


def wanted(p: dict, device, starts: int, pays_on_cpu: bool = True, pays_for_one_on_gpu: bool = True,
           held: bool = False) -> bool:
    """p["compile"]: on, off, or auto — on for racing starts (starts > 1: the objective dominates their step)
    and on a GPU (launch-bound) unless the process runs only this one attack (ONE_OFF), off for one start on a
    CPU (building costs about what it saves). Missing: off.
    pays_on_cpu=False: an objective whose compiled form measured slower on a CPU (AGIC's) — auto = GPU only.
    pays_for_one_on_gpu=False: one start of it measured slower compiled on a GPU too (AGIC's on an H200: 79–81
    against 134 it/s eagerly, warm) — auto then compiles only racing starts there.
    held=True: the caller can use a build this process holds for one start on a CPU (only_held, HELD_BUILDS)."""
    choice = p.get("compile", "off")
    if choice == "auto":
        if torch.device(device).type == "cuda":
            return starts > 1 or (pays_for_one_on_gpu and not ONE_OFF)
        return (starts > 1 and pays_on_cpu) or only_held(p, device, starts, held)
    return choice == "on"


def only_held(p: dict, device, starts: int, held: bool = True) -> bool:
    """Whether `auto` compiles here only with a build the process already holds (HELD_BUILDS): one start on a
    CPU. compile_objective(held_only=True) then uses it, or builds nothing and leaves the caller's eager step."""
    return (held and HELD_BUILDS and starts == 1 and p.get("compile", "off") == "auto"
            and torch.device(device).type == "cpu")


def _held(objective: Packed, z: torch.Tensor) -> tuple[Packed | None, str | None]:
    fast = torch.compile(objective, dynamic=False)
    state = {"fast": True}

    def held(zz: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if state["fast"]:
            try:
                with torch.compiler.set_stance("fail_on_recompile"):
                    return fast(zz)
            except RuntimeError as e:  # a guard failed mid-run after all: eager from here on, nothing built
                if "fail_on_recompile" not in str(e):
                    raise
                state["fast"] = False
        return objective(zz)

    try:
        with torch.compiler.set_stance("fail_on_recompile"):
            value, grad = fast(z)
    except RuntimeError as e:
        if "fail_on_recompile" not in str(e):
            raise
        return None, None
    ref_value, ref_grad = objective(z)
    if not max(_relative_error(value, ref_value), _relative_error(grad, ref_grad)) <= AGREEMENT:
        return None, None
    return held, READY


def _relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def compile_objective(objective: Packed, z: torch.Tensor, cuda_graphs: bool = True,
                      held_only: bool = False) -> tuple[Packed | None, str | None]:
    """The compiled objective, built and checked at z, and a note for the page; or the eager objective and
    the reason it is used. On a GPU the compiled step is captured in CUDA graphs (mode reduce-overhead) —
    unless the caller captures a larger graph around it (cuda_graphs=False: L-BFGS captures whole steps).
    held_only: use a build this process holds for this objective and shape; else build nothing and return
    (None, None), the caller keeping its own eager step (torch's `fail_on_recompile` stance refuses any build,
    a first one too)."""
    if held_only:
        return _held(objective, z)
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(cache_dir(), "inductor"))
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)  # "No CUDA runtime is found" on CPUs
    cuda = z.device.type == "cuda" and cuda_graphs
    dynamo = torch._dynamo.config
    dynamo.recompile_limit = max(dynamo.recompile_limit, RECOMPILE_LIMIT)
    t0 = time.perf_counter()
    try:
        fast = torch.compile(objective, dynamic=False, mode="reduce-overhead" if cuda else None)
        with dynamo.patch(fail_on_recompile_limit_hit=True):  # past the limit torch runs it eagerly, unsaid
            value, grad = fast(z)
        ref_value, ref_grad = objective(z)
        error = max(_relative_error(value, ref_value), _relative_error(grad, ref_grad))
    except torch._dynamo.exc.FailOnRecompileLimitHit:
        return objective, (f"this process already holds builds of the objective for {dynamo.recompile_limit} "
                           "shapes, torch's limit; it runs eagerly")
    except Exception as e:  # noqa: BLE001 — any failure to build means: run eagerly
        first = str(e).strip().splitlines()[0][:160] if str(e).strip() else e.__class__.__name__
        return objective, f"torch.compile unavailable here ({first}); the objective runs eagerly"
    if not error <= AGREEMENT:
        return objective, (f"the compiled objective disagreed with the eager one (relative error {error:.1e}); "
                           "it runs eagerly")

    def safe(zz: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        value, grad = fast(zz)
        # CUDA graphs reuse their output memory on the next call; callers keep the previous loss
        return (value.clone(), grad.clone()) if cuda else (value, grad)
    seconds = time.perf_counter() - t0
    if seconds < 0.1:  # torch.compile's cache: this worker compiled the same objective for an earlier run
        return safe, READY  # not "in 0.0 s"
    return safe, f"compiled the objective with torch.compile in {seconds:.1f} s"
