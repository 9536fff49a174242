"""A training loop's step whose forward and backward replay as CUDA graphs on a GPU.

Small networks trained in batches of 16 or 32 (PLI's inversion networks, the clients and server of a
logit-sharing federation) run a few hundred tiny kernels per step; on a GPU the host issuing them sets the
pace, not the GPU. `TrainingStep` computes a batch's loss and gradients through `cuda_graph.Replayed`, one
graph per batch shape (a full batch, an epoch's shorter last one) and per setting the caller names, then
hands the gradients to the optimiser, whose step stays eager: a foreach optimiser takes one kernel per
operation for all weights, and its numbers stay those of a CPU. Elsewhere, and with `graph=False`, the same
function runs eagerly: the gradients are those `loss.backward()` gives.
"""
from __future__ import annotations

import functools
from typing import Callable

import torch

from .cuda_graph import Replayed


def _shape(arg) -> tuple | None:
    return None if arg is None else (tuple(arg.shape), arg.dtype) if isinstance(arg, torch.Tensor) else type(arg)


class TrainingStep:
    """`loss(*setting, *batch)` → a loss tensor whose sum is minimised (a loss per copy, for copies trained as
    one); calling the step takes one optimiser step and returns the loss, detached (on the device)."""

    def __init__(self, loss: Callable[..., torch.Tensor], params, opt: torch.optim.Optimizer, device, what: str,
                 graph: bool = True):
        self.loss, self.params, self.opt, self.what = loss, list(params), opt, what
        self.device = torch.device(device)
        self.graphs: dict | None = {} if graph and self.device.type == "cuda" else None
        self.note: str | None = None  # a capture that failed twice (those steps then run eagerly), until read
        self._told = False  # said once per training loop, whichever of its graphs failed first

    def _loss_and_grads(self, *args):
        loss = self.loss(*args)
        return loss.detach(), torch.autograd.grad(loss.sum(), self.params)

    def __call__(self, *batch, setting: tuple = ()) -> torch.Tensor:
        """One step on `batch` (tensors, None, Python floats); `setting` (hashable: a loss's name) picks the
        graph too."""
        compute = functools.partial(self._loss_and_grads, *setting)
        if self.graphs is not None:
            key = (setting, *map(_shape, batch))
            if key not in self.graphs:
                self.graphs[key] = Replayed(compute, self.device, self.what, own_outputs=True)
            compute = self.graphs[key]
        loss, grads = compute(*batch)
        for w, g in zip(self.params, grads):
            w.grad = g  # when replayed, the graph's own tensors: the step below reads them before the next replay
        self.opt.step()
        if isinstance(compute, Replayed) and compute.note is not None and not self._told:
            self.note, self._told = compute.note, True
        return loss
