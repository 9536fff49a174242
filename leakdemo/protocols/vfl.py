"""Vertical FL: every party holds a slice of every sample's features; the server picks the batches.

The N private images are cut into a grid of tiles, one tile position per worker (quadrants for 4
workers). Each worker has a bottom model on its tiles; the server's top model combines the workers'
outputs. Every iteration the server chooses `batch_size` sample indices (data index alignment — the
step CAFE exploits), the workers compute on their slices, each uploads the gradient of the batch loss
for its own bottom model (after its defense), and the server computes its top model's gradient
itself. With `train_lr` > 0 the federation keeps training (Adam) while it is attacked.

The attacker receives a `VerticalSession`: it may call `query(indices)` — exactly what a real VFL
server does each iteration — and nothing else of the workers' side.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .. import cancel
from ..cuda_graph import Replayed
from ..data import load_dataset
from ..defenses import DRAWS_NOISE, apply_defense
from ..device import from_host
from ..models import initialise
from ..settings import WORKER_MODEL_HELP, tile_grid, tiles
from ..settings import vfl_check as check
from ..settings import vfl_receives as describe
from ..threat import GroundTruth, Knowledge, Observation

UTILITY_STEPS = 200  # SGD steps of the training-loss check (the CAFE paper's fake-gradients experiment: lr 0.1)
UTILITY_LR = 0.1


class WorkerNet(nn.Module):
    """A worker's bottom model. `features(x)` is h, the input of the first FC layer (`fc1`)."""

    def __init__(self, kind: str, channels: int, tile: tuple[int, int], classes: int, width: int, fc_width: int):
        super().__init__()
        th, tw = tile
        if kind == "fc":
            self.body = nn.Flatten()
            d1 = channels * th * tw
        elif kind == "slim":
            self.body = nn.Sequential(nn.Conv2d(channels, width, 3, padding=1), nn.ReLU(), nn.AvgPool2d(2), nn.Flatten())
            d1 = width * (th // 2) * (tw // 2)
        else:  # the CAFE authors' worker
            self.body = nn.Sequential(nn.Conv2d(channels, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2, ceil_mode=True),
                                      nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2, ceil_mode=True),
                                      nn.Flatten())
            d1 = 128 * math.ceil(math.ceil(th / 2) / 2) * math.ceil(math.ceil(tw / 2) / 2)
        self.fc1 = nn.Linear(d1, fc_width)
        tail = [nn.ReLU(), nn.Linear(fc_width, 64), nn.ReLU(), nn.Linear(64, classes)] if kind == "cafe" else \
            [nn.ReLU(), nn.Linear(fc_width, classes)]
        self.head = nn.Sequential(*tail)

    def features(self, x):
        return self.body(x)

    def forward(self, x):
        return self.head(self.fc1(self.body(x)))


class VerticalModel(nn.Module):
    """All bottom models and the server's top model as one module taking whole images.

    forward(x) cuts x into tiles, runs worker m's net on tile m and the top model on the concatenated
    worker outputs; its parameters are the workers' (in worker order) then the top model's.
    """

    def __init__(self, p: dict, channels: int = 3):
        super().__init__()
        self.grid = tile_grid(p["workers"])
        tile = (p["image_size"] // self.grid[0], p["image_size"] // self.grid[1])
        classes = p["num_classes"]
        self.workers = nn.ModuleList(WorkerNet(p["worker_model"], channels, tile, classes, p["model_width"] or 16,
                                               p["fc_width"]) for _ in range(p["workers"]))
        self.top = nn.Linear(p["workers"] * classes, classes)

    def forward(self, x):
        return self.top(torch.cat([w(t) for w, t in zip(self.workers, tiles(x, self.grid))], dim=1))

    def worker_slices(self) -> list[slice]:
        """Where each worker's parameters sit in list(self.parameters())."""
        out, start = [], 0
        for w in self.workers:
            n = len(list(w.parameters()))
            out.append(slice(start, start + n))
            start += n
        return out


FC1_WEIGHT, FC1_BIAS = "fc1.weight", "fc1.bias"


def fc1_index(worker: WorkerNet) -> tuple[int, int]:
    """Positions of the first FC layer's weight and bias in list(worker.parameters())."""
    names = [n for n, _ in worker.named_parameters()]
    return names.index(FC1_WEIGHT), names.index(FC1_BIAS)


@dataclass
class Query:
    """What the server holds after one VFL iteration."""
    indices: torch.Tensor  # the batch it chose
    workers: list[list[torch.Tensor]]  # each worker's upload: gradients of its bottom model (after its defense)
    top: list[torch.Tensor]  # the top model's gradients (the server computes them itself)
    weights: list[torch.Tensor]  # the model weights these gradients were computed at
    version: int  # changes whenever the weights change (attack while training)


class VerticalSession:
    """The workers' side of a VFL federation. The attacker may only call `query` and read `model`."""

    def __init__(self, p: dict, model: VerticalModel, images: torch.Tensor, labels: torch.Tensor, device):
        self._p, self._x, self._y = p, images.to(device), labels.to(device)
        self._model = model
        self._g = torch.Generator().manual_seed(p["seed"] + 3)
        self._opt = torch.optim.Adam(model.parameters(), lr=p["train_lr"]) if p["train_lr"] > 0 else None
        self.version = 0
        self._snapshot: tuple[int, list[torch.Tensor]] = (-1, [])  # (version, the weights at that version)
        self.train_losses: list[torch.Tensor] = []  # the federation's own batch losses, per query (utility)
        # on a GPU the federation's step (forward, backward, uploads) replays one CUDA graph: eagerly its ~250
        # launches took 3 ms on an H200. Not under a defense that draws noise on the host (DRAWS_NOISE: a graph
        # would replay the same draw); fake gradients and pruning draw nothing and are graphed with the step.
        # The optimiser's step, when the model trains, stays eager (it changes the weights in place, which the
        # graph reads)
        self._step = (Replayed(self._compute, torch.device(device), "the federation's steps", own_outputs=True)
                      if torch.device(device).type == "cuda" and p["defense"] not in DRAWS_NOISE else self._compute)

    @property
    def n_samples(self) -> int:
        return len(self._y)

    def _compute(self, idx: torch.Tensor):
        """The federation's step on the batch `idx`: its loss, each worker's (defended) upload, the top
        model's gradients."""
        model = self._model
        loss = F.cross_entropy(model(self._x[idx]), self._y[idx])
        grads = torch.autograd.grad(loss, list(model.parameters()))
        uploads = [apply_defense(self._p["defense"], list(grads[s]), self._p, self._g) for s in model.worker_slices()]
        top = [g.detach() for g in grads[model.worker_slices()[-1].stop:]]
        return loss.detach(), uploads, top

    def query(self, indices) -> Query:
        """The batch the server chose, as a list or a tensor. Checked where it is given (the server picks
        indices on the host: checking them there costs a GPU no wait), then moved to the model's device.
        On a GPU the query's tensors are the session's own, overwritten by the next query: copy what you keep."""
        idx = torch.as_tensor(indices, dtype=torch.long).cpu()
        host = idx.numpy()
        if host.ndim != 1 or len(host) == 0 or host.min() < 0 or host.max() >= self.n_samples:
            raise ValueError("query: indices must be a non-empty list of sample indices")
        idx = from_host(idx, self._x.device)  # a plain copy would wait for the GPU every query
        model = self._model
        if self._snapshot[0] != self.version:  # a copy per version of the weights, not per query
            self._snapshot = (self.version, [w.detach().clone() for w in model.parameters()])
        weights = self._snapshot[1]
        loss, uploads, top = self._step(idx)
        self.train_losses.append(loss.clone())  # 0-dim tensors, read once by the utility
        q = Query(idx, uploads, top, weights, self.version)
        if self._opt is not None:  # the federation trains on what it received
            for w, g in zip(model.parameters(), [g for u in uploads for g in u] + top):
                w.grad = g.clone()
            self._opt.step()
            self.version += 1
        return q


def make_model(p: dict, device) -> VerticalModel:
    model = VerticalModel(p)
    initialise(model, p["seed"], "default")
    return model.to(device)


def true_internals(model: VerticalModel, x: torch.Tensor, y: torch.Tensor, batch_size: int) -> dict:
    """Per sample and worker: h (the first FC layer's input) and v = ∂(batch-mean loss)/∂u at batch size K.

    What Steps I and II try to recover; the Runner compares the attack's estimates with these.
    """
    hs, us = [], []
    outs = []
    for w, t in zip(model.workers, tiles(x, model.grid)):
        h = w.features(t).detach()
        u = w.fc1(h)
        hs.append(h)
        us.append(u)
        outs.append(w.head(u))
    loss = F.cross_entropy(model.top(torch.cat(outs, 1)), y, reduction="sum") / batch_size
    vs = torch.autograd.grad(loss, us)
    return {"H": hs, "V": [v.detach() for v in vs]}


def utility_curve(p: dict, model: VerticalModel, x: torch.Tensor, y: torch.Tensor, defense: str) -> list[float]:
    """Training loss of a copy of the VFL model trained with SGD on defended uploads: what a defense costs."""
    m = copy.deepcopy(model)
    g_data = torch.Generator().manual_seed(p["seed"] + 11)
    g_def = torch.Generator().manual_seed(p["seed"] + 12)
    opt = torch.optim.SGD(m.parameters(), lr=UTILITY_LR)
    losses = []
    for _ in range(UTILITY_STEPS):
        cancel.check()  # at 128 px these steps take tens of seconds after the attack: Stop must reach them
        idx = from_host(torch.randperm(len(y), generator=g_data)[: p["batch_size"]], x.device)
        loss = F.cross_entropy(m(x[idx]), y[idx])
        grads = torch.autograd.grad(loss, list(m.parameters()))
        sent = [g for s in m.worker_slices() for g in apply_defense(defense, list(grads[s]), p, g_def)]
        sent += list(grads[m.worker_slices()[-1].stop:])
        for w, gr in zip(m.parameters(), sent):
            w.grad = gr
        opt.step()
        losses.append(loss.detach())  # read once at the end: no host sync per step on a GPU
    return torch.stack(losses).tolist()


def simulate(p: dict, device: torch.device, uploads=None) -> tuple[Observation, Knowledge, GroundTruth]:
    check(p)
    data = load_dataset(p, p["n_samples"], uploads, count_name="n_samples")
    model = make_model(p, device)
    x, y = data.images.to(device), data.labels.to(device)
    session = VerticalSession(p, model, data.images, data.labels, device)
    grid = tile_grid(p["workers"])
    obs = Observation(kind="vfl", payload=session, description=describe(p),
                      context={"n_samples": len(y), "batch_size": p["batch_size"], "grid": grid})
    facts = [
        f"the whole model — {p['workers']} bottom models ({WORKER_MODEL_HELP[p['worker_model']]}) and its own top "
        "model — and its current weights",
        f"the sample indices of every batch (it chooses them: data index alignment), N = {len(y)}",
        f"how the {p['image_size']}×{p['image_size']} images are split: a {grid[0]}×{grid[1]} grid of tiles",
    ]
    if p["train_lr"] > 0:
        facts.append(f"the weights after every training step (the model keeps training, Adam {p['train_lr']:g})")
    kn = Knowledge(model=copy.deepcopy(model), input_shape=tuple(x.shape[1:]), num_classes=p["num_classes"],
                   batch_size=p["batch_size"], facts=facts)
    start = copy.deepcopy(model)

    def checks(internals: dict) -> dict:
        """Relative errors of the attack's Step I/II estimates against the truth at the current weights."""
        truth = true_internals(session._model, x, y, p["batch_size"])
        out = {}
        for key, name in (("V", "step1_error"), ("H", "step2_error")):
            if key in internals:
                est, ref = torch.cat(internals[key], 1), torch.cat(truth[key], 1)
                out[name] = float((est - ref).norm() / ref.norm().clamp(min=1e-30))
        return out

    def utility() -> dict:
        out = {"steps": UTILITY_STEPS, "lr": UTILITY_LR, "defended": utility_curve(p, start, x, y, p["defense"])}
        if p["defense"] != "none":
            out["clean"] = utility_curve(p, start, x, y, "none")
        if session.train_losses and p["train_lr"] > 0:
            losses = torch.stack(session.train_losses).tolist()
            out["while_attacked"] = _thin(losses, 400)  # the federation's own batch losses
            out["attacked_iterations"], out["train_lr"] = len(session.train_losses), p["train_lr"]
        return out

    truth = GroundTruth(data.images.clone(), data.labels.clone(), data.names, checks=checks, utility=utility)
    return obs, kn, truth


def _thin(values: list[float], cap: int) -> list[float]:
    step = max(1, math.ceil(len(values) / cap))
    return [float(np.mean(values[i:i + step])) for i in range(0, len(values), step)]
