"""Clients of a logit-sharing federation trained as one program.

K clients with the PLI paper's classifier (conv → ReLU → max-pool → linear) and private sets of one size are
K copies of one network: on a GPU the convolution is grouped by client (copy k's channels see only copy k's
image), the linear layer is a batched matrix product. A step sums the copies' own mean losses, so each
copy's gradient is the one it would get alone, and Adam acts element by element, so one optimiser step is K
clients' steps. Each client keeps its own data order. On a GPU that is one kernel per layer for all K, not
K small ones in turn. On a CPU a grouped convolution measured 3× slower than K plain ones, and ReLU and
pooling over all K at once fall out of cache, so there each copy runs its own slice of the weights up to
the linear layer (two epochs of ten clients on the public set: 0.98 s in turn, 0.95–1.0 s as a cohort).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .. import cancel
from ..device import from_host
from ..training_step import TrainingStep

BATCH = 32
LR = 1e-3


def losses(out: torch.Tensor, t: torch.Tensor, loss: str) -> torch.Tensor:
    """Per-image loss (…, B) of logits (…, B, J) against labels or target logits/probabilities t."""
    if loss == "ce":
        return F.cross_entropy(out.flatten(0, -2), t.flatten(), reduction="none").view(t.shape)
    if loss == "l1":  # FedMD's digest: match the consensus logits
        return (out - t).abs().mean(-1)
    # "soft": cross-entropy to soft targets (DS-FL), = KL up to a constant (FedGEMS)
    return -(t * F.log_softmax(out, -1)).sum(-1)


class Cohort(nn.Module):
    """Copies of `classifier` (distillation.py), given already initialised, as one module; forward maps
    (K, B, 1, S, S) — each copy's own batch — to (K, B, J)."""

    def __init__(self, models: list[nn.Sequential], device, seeds: list[int], grouped: bool | None = None,
                 graph: bool = True):
        super().__init__()
        # one grouped convolution on a GPU; on a CPU, where it measured 3× slower than K plain ones (7.7 vs
        # 2.6 ms forward and backward, ten clients' batch of 32), each copy's own slice of the same weights
        self.grouped = torch.device(device).type != "cpu" if grouped is None else grouped
        convs, linears = [m[0] for m in models], [m[4] for m in models]
        self.copies, self.pool = len(models), models[0][2].kernel_size
        width = convs[0].out_channels
        self.conv = nn.Conv2d(self.copies, self.copies * width, convs[0].kernel_size, groups=self.copies)
        self.weight = nn.Parameter(torch.stack([l.weight.detach() for l in linears]))  # (K, J, F)
        self.bias = nn.Parameter(torch.stack([l.bias.detach() for l in linears])[:, None])  # (K, 1, J)
        with torch.no_grad():
            self.conv.weight.copy_(torch.cat([c.weight for c in convs]))
            self.conv.bias.copy_(torch.cat([c.bias for c in convs]))
        self.to(device)
        self.opt = torch.optim.Adam(self.parameters(), lr=LR)
        self.generators = [torch.Generator().manual_seed(s) for s in seeds]  # one data order per client
        self.step = TrainingStep(self._loss, self.parameters(), self.opt, device, "the clients' training steps",
                                 graph)  # each batch's forward and backward a replayed CUDA graph on a GPU

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.grouped:
            h = self.conv(x.squeeze(2).transpose(0, 1).contiguous())  # (B, K·W, S', S')
            h = F.max_pool2d(F.relu(h), self.pool).unflatten(1, (self.copies, -1)).transpose(0, 1).flatten(2)
        else:
            w, b = self.conv.weight.chunk(self.copies), self.conv.bias.chunk(self.copies)
            h = torch.stack([F.max_pool2d(F.relu(F.conv2d(x[k], w[k], b[k])), self.pool).flatten(1)
                             for k in range(self.copies)])  # (K, B, W·s·s): each copy's features
        return torch.baddbmm(self.bias, h, self.weight.transpose(1, 2))

    def fit(self, x: torch.Tensor, target: torch.Tensor, loss: str, epochs: int, shared: bool) -> None:
        """x (N, …) and target (N, …) shared by every client (the public set), or (K, N, …) each client's own
        (its private set) when not `shared`."""
        self.train()
        n, copy = x.shape[0] if shared else x.shape[1], torch.arange(self.copies, device=x.device)[:, None]
        for _ in range(epochs):
            order = from_host(torch.stack([torch.randperm(n, generator=g) for g in self.generators]), x.device)
            for i in range(0, n, BATCH):
                cancel.check()  # a federation's rounds run before the attack's first frame
                idx = order[:, i:i + BATCH]  # (K, B): each client's own batch
                self.step(x[idx] if shared else x[copy, idx], target[idx] if shared else target[copy, idx],
                          setting=(loss,))

    def _loss(self, loss: str, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """Each copy's mean loss on its own batch (K,): their sum's gradient is, for each copy, its own mean's."""
        return losses(self(x), t, loss).mean(1)

    @torch.no_grad()
    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """Every client's logits on shared images x (N, …): (K, N, J)."""
        self.eval()
        return torch.cat([self(part.expand(self.copies, *part.shape)) for part in x.split(256)], 1)

    def accuracy(self, x: torch.Tensor, y: torch.Tensor) -> list[float]:
        return (self.logits(x).argmax(-1) == y).float().mean(1).tolist()
