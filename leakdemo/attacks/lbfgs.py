"""L-BFGS on K independent problems at once: the trial axis of DLG and iDLG.

It follows `torch.optim.LBFGS` without a line search, which DLG uses (same two-loop recursion, curvature
condition, first step min(1, 1/‖g‖₁)·lr, tolerances), for every row of a (K, D) tensor at once. Its one
difference is what makes it batchable: every trial writes its history at the same slot each iteration,
and a trial with nothing to record (curvature condition failed, or paused by a tolerance until the next
step) writes zeros there, which the two-loop recursion passes over exactly (α = β = 0). So every decision
is a mask over trials and the inner loop never asks the host anything — no `.item()`, no branch on a
tensor — which is what keeps a GPU busy. (On the CPU, where asking is free, a step ends early when every
trial has paused, as torch's does.)
"""
from __future__ import annotations

from typing import Callable

import torch

Objective = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]  # z (K, D) -> loss (K,), grad (K, D)


class BatchedLBFGS:
    def __init__(self, objective: Objective, z: torch.Tensor, lr: float = 1.0, history: int = 100,
                 tolerance_grad: float = 1e-7, tolerance_change: float = 1e-9):
        self.objective, self.z, self.lr, self.m = objective, z.detach().clone(), lr, history
        self.tolerance_grad, self.tolerance_change = tolerance_grad, tolerance_change
        k, d = self.z.shape
        self.S = torch.zeros(history, k, d, dtype=z.dtype, device=z.device)  # steps s = t·d, by slot
        self.Y = torch.zeros_like(self.S)  # gradient changes y
        self.rho = torch.zeros(history, k, dtype=z.dtype, device=z.device)  # 1 / yᵀs (0: an empty slot)
        self.slot, self.filled = 0, 0  # the next slot written (the same for every trial), slots in use
        self.fresh = torch.ones(k, dtype=torch.bool, device=z.device)  # no step taken since a (re)start
        self.d = torch.zeros_like(self.z)
        self.t = torch.zeros(k, dtype=z.dtype, device=z.device)
        self.prev_g = torch.zeros_like(self.z)
        self.h_diag = torch.ones(k, dtype=z.dtype, device=z.device)
        # on the CPU a look at the masks costs nothing, and stopping when every trial has paused saves the
        # rest of the step's evaluations; on a GPU it would stall the queue, so all max_iter run
        self.host_checks = z.device.type == "cpu"

    def restart(self, mask: torch.Tensor) -> None:
        """Forget the history of the trials in `mask` (their next step is a first step again)."""
        keep = (~mask).to(self.z.dtype)
        self.S *= keep[None, :, None]
        self.Y *= keep[None, :, None]
        self.rho *= keep[None, :]
        self.fresh |= mask
        self.h_diag = torch.where(mask, torch.ones_like(self.h_diag), self.h_diag)

    def _direction(self, g: torch.Tensor) -> torch.Tensor:
        q = -g
        alphas = []
        for j in range(self.filled):  # newest first
            i = (self.slot - 1 - j) % self.m
            a = self.rho[i] * (self.S[i] * q).sum(1)
            q = q - a[:, None] * self.Y[i]
            alphas.append(a)
        r = q * self.h_diag[:, None]
        for j in reversed(range(self.filled)):  # oldest first
            i = (self.slot - 1 - j) % self.m
            b = self.rho[i] * (self.Y[i] * r).sum(1)
            r = r + self.S[i] * (alphas[j] - b)[:, None]
        return torch.where(self.fresh[:, None], -g, r)

    def step(self, max_iter: int = 20) -> torch.Tensor:
        """Up to `max_iter` evaluations per trial, as one `torch.optim.LBFGS.step`; returns each trial's loss
        at the point it started from (as torch's does)."""
        loss, g = self.objective(self.z)
        first_loss = loss
        active = g.abs().amax(1) > self.tolerance_grad
        for n in range(max_iter):
            # what the last step taught: s = t·d and y = Δg, kept where the curvature condition holds
            y = g - self.prev_g
            s = self.d * self.t[:, None]
            ys = (y * s).sum(1)
            learn = active & ~self.fresh & (ys > 1e-10)
            w = learn.to(self.z.dtype)
            self.S[self.slot] = s * w[:, None]
            self.Y[self.slot] = y * w[:, None]
            self.rho[self.slot] = torch.where(learn, 1.0 / torch.where(learn, ys, torch.ones_like(ys)),
                                              torch.zeros_like(ys))
            self.h_diag = torch.where(learn, ys / (y * y).sum(1).clamp_min(1e-30), self.h_diag)
            self.slot, self.filled = (self.slot + 1) % self.m, min(self.filled + 1, self.m)

            d = self._direction(g)
            t = torch.where(self.fresh, torch.clamp(1.0 / g.abs().sum(1).clamp_min(1e-30), max=1.0) * self.lr,
                            torch.full_like(self.t, self.lr))
            # torch keeps this direction, step and gradient even when it then declines to move
            self.prev_g = torch.where(active[:, None], g, self.prev_g)
            self.d = torch.where(active[:, None], d, self.d)
            self.t = torch.where(active, t, self.t)
            self.fresh = self.fresh & ~active
            active = active & ((g * d).sum(1) <= -self.tolerance_change)  # not a descent direction: pause
            self.z = self.z + (t * active.to(t.dtype))[:, None] * d
            if n == max_iter - 1 or (self.host_checks and not bool(active.any())):
                break
            prev_loss = loss
            loss, g = self.objective(self.z)
            small_step = (d * t[:, None]).abs().amax(1) <= self.tolerance_change
            active = (active & (g.abs().amax(1) > self.tolerance_grad) & ~small_step
                      & ((loss - prev_loss).abs() >= self.tolerance_change))
        return first_loss
