"""L-BFGS on K independent problems at once: the trial axis of DLG, iDLG, DLM and DLM+ (and, with K = 1,
the sequential loop's steps without a line search).

It follows `torch.optim.LBFGS` without a line search, which DLG uses (same inverse-Hessian approximation,
curvature condition, first step min(1, 1/‖g‖₁)·lr, tolerances), for every row of a (K, D) tensor at once. Its one
difference is what makes it batchable: every trial writes its history at the same slot each iteration,
and a trial with nothing to record (curvature condition failed, or paused by a tolerance until the next
step) writes zeros there, which the direction leaves out exactly (below). So every decision
is a mask over trials and the inner loop never asks the host anything — no `.item()`, no branch on a
tensor — which is what keeps a GPU busy. (On the CPU, where asking is free, a step ends early when every
trial has paused, as torch's does.)

The direction H·g is computed in the compact form of Byrd, Nocedal and Schnabel (1994; Nocedal & Wright
eq. 7.24) instead of the two-loop recursion: the same matrix, but a handful of batched products and two
small triangular solves in place of 4 × history tiny operations — with 100 pairs the recursion's ~800
kernel calls cost ~2 ms per evaluation on the 2-core CPU (a fifth of a step of 4 DLG starts; measured 278 →
232 ms per 20 evaluations) and, on a GPU, 800 launches. The Gram matrices SᵀY and YᵀY are kept
up to date one slot at a time. An empty slot (zeros) is given a unit diagonal in R, which leaves it out
exactly, as α = β = 0 did in the recursion — so every step works on all `history` slots, written or not,
and every tensor keeps its shape from the first step to the last.

That is what lets a GPU run a whole step — its up to 20 evaluations of the objective and the directions
between them — as one CUDA graph: the state lives in tensors updated in place, the slot pointer is a
tensor, and nothing asks the host. Eagerly, on an H200, one step of DLG (compiled objective, 0.24 ms per
evaluation) took 49 ms, almost all of it the launches of the ~60 small operations between evaluations.
The first step runs eagerly (the warm-up the capture needs), the second is captured and every later one
replays it; a capture that fails leaves the optimiser eager, with the reason in `graph_note`.
"""
from __future__ import annotations

from typing import Callable

import torch

from .. import cancel
from ..cuda_graph import CAPTURE_TRIES, capture_failed

Objective = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]  # z (K, D) -> loss (K,), grad (K, D)


class BatchedLBFGS:
    def __init__(self, objective: Objective, z: torch.Tensor, lr: float = 1.0, history: int = 100,
                 tolerance_grad: float = 1e-7, tolerance_change: float = 1e-9, graph: bool = True):
        self.objective, self.z, self.lr, self.m = objective, z.detach().clone(), lr, history
        self.tolerance_grad, self.tolerance_change = tolerance_grad, tolerance_change
        k, d = self.z.shape
        # the history, one row per slot: the steps s = t·d, then the gradient changes y (one array, so a
        # single pass over memory gives every product a step needs)
        self.W = torch.zeros(k, 2 * history, d, dtype=z.dtype, device=z.device)
        self.S, self.Y = self.W[:, :history], self.W[:, history:]
        self.rho = torch.zeros(k, history, dtype=z.dtype, device=z.device)  # 1 / yᵀs (0: an empty slot)
        self.SY = torch.zeros(k, history, history, dtype=z.dtype, device=z.device)  # [k, i, j] = s_iᵀ y_j
        self.YY = torch.zeros_like(self.SY)  # y_iᵀ y_j
        self._slots = torch.arange(history, device=z.device)
        self.slot = torch.zeros(1, dtype=torch.long, device=z.device)  # the next slot written, the same for all
        self.fresh = torch.ones(k, dtype=torch.bool, device=z.device)  # no step taken since a (re)start
        self.d = torch.zeros_like(self.z)
        self.t = torch.zeros(k, dtype=z.dtype, device=z.device)
        self.prev_g = torch.zeros_like(self.z)
        self.h_diag = torch.ones(k, dtype=z.dtype, device=z.device)
        self.first_loss = torch.zeros(k, dtype=z.dtype, device=z.device)
        # on the CPU a look at the masks costs nothing, and stopping when every trial has paused saves the
        # rest of the step's evaluations; on a GPU it would stall the queue, so all max_iter run
        self.host_checks = z.device.type == "cpu"
        self.graphed = graph and z.device.type == "cuda"  # whole steps as one CUDA graph (see the module)
        self.graph_note = None  # why a step is not a graph, when capturing failed
        self._graph, self._graph_iters, self._warmed = None, None, False
        self._capture_failures = 0

    def restart(self, mask: torch.Tensor) -> None:
        """Forget the history of the trials in `mask` (their next step is a first step again)."""
        keep = (~mask).to(self.z.dtype)
        self.W *= keep[:, None, None]
        self.rho *= keep[:, None]
        self.SY *= keep[:, None, None]
        self.YY *= keep[:, None, None]
        self.fresh |= mask
        self.h_diag.copy_(torch.where(mask, torch.ones_like(self.h_diag), self.h_diag))

    def _learn_and_direction(self, s: torch.Tensor, y: torch.Tensor, rho: torch.Tensor,
                             g: torch.Tensor) -> torch.Tensor:
        """Write the pair (s, y) — zeros for a trial with nothing to learn — at the current slot, then return
        −H·g for every trial, H the L-BFGS inverse Hessian of its pairs (compact form)."""
        i, m = self.slot, self.m
        self.S.index_copy_(1, i, s[:, None])
        self.Y.index_copy_(1, i, y[:, None])
        self.rho.index_copy_(1, i, rho[:, None])
        # s, y and g against every history vector, (K, 3, 2m): three rows times the history transposed (a view),
        # where the history times three columns, (K, 2m, D) @ (K, D, 3), took 5× as long on the CPU (4 trials)
        prods = torch.stack([s, y, g], 1) @ self.W.transpose(1, 2)
        self.SY.index_copy_(1, i, prods[:, 0:1, m:])  # s_i·y_j
        self.SY.index_copy_(2, i, prods[:, 1, :m, None])  # s_j·y_i
        self.YY.index_copy_(1, i, prods[:, 1:2, m:])
        self.YY.index_copy_(2, i, prods[:, 1, m:, None])
        self.slot.copy_((self.slot + 1) % m)
        gamma = self.h_diag[:, None]
        order = (self._slots + self.slot) % m  # every slot, oldest first (empty ones are zeros: left out)
        # the Gram matrices in that order: one gather of (row, column) pairs from the flattened matrix, where
        # indexing rows then columns took 3× as long on the CPU (109 → 33 µs for 4 trials, 100 pairs)
        pairs = (order[:, None] * m + order).view(-1)
        k = g.shape[0]
        sy = self.SY.view(k, m * m).index_select(1, pairs).view(k, m, m)
        yy = self.YY.view(k, m * m).index_select(1, pairs).view(k, m, m)
        empty = (self.rho.index_select(1, order) == 0).to(g.dtype)  # (K, m)
        r = torch.triu(sy) + torch.diag_embed(empty)
        diag = torch.diagonal(sy, dim1=1, dim2=2)
        sg, yg = prods[:, 2, :m].index_select(1, order), prods[:, 2, m:].index_select(1, order)
        u = torch.linalg.solve_triangular(r, sg[..., None], upper=True)  # R⁻¹ Sᵀg
        inner = diag[..., None] * u + gamma[..., None] * (yy @ u) - gamma[..., None] * yg[..., None]
        w = torch.linalg.solve_triangular(r.transpose(1, 2), inner, upper=False)  # R⁻ᵀ((D + γYᵀY)R⁻¹Sᵀg − γYᵀg)
        coef = torch.zeros(k, 2 * m, dtype=g.dtype, device=g.device)
        coef.index_copy_(1, order, w[..., 0])
        coef.index_copy_(1, order + m, -gamma * u[..., 0])
        hg = gamma * g + (coef[:, None] @ self.W)[:, 0]  # γg + S·w − γY·u
        return torch.where(self.fresh[:, None], -g, -hg)

    def step(self, max_iter: int = 20) -> torch.Tensor:
        """Up to `max_iter` evaluations per trial, as one `torch.optim.LBFGS.step`; returns each trial's loss
        at the point it started from (as torch's does)."""
        if not self.graphed:
            return self._iterate(max_iter).clone()
        if self._graph is None or self._graph_iters != max_iter:
            if not self._warmed:  # torch's rule: run the work once on a side stream before capturing it
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    self._iterate(max_iter)
                torch.cuda.current_stream().wait_stream(side)
                self._warmed = True
                return self.first_loss.clone()
            try:
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                    self._iterate(max_iter, capturing=True)
            except Exception as e:  # noqa: BLE001 — a graph is a speed-up, never a requirement
                self._capture_failures += 1
                if self._capture_failures < CAPTURE_TRIES:
                    self._warmed = False  # warm up again at the next step, then capture once more (cuda_graph.py)
                else:
                    self.graphed = False
                    self.graph_note = f"L-BFGS steps run eagerly: {capture_failed(e)}"
                return self._iterate(max_iter).clone()
            self._graph, self._graph_iters = graph, max_iter
        cancel.check()
        self._graph.replay()
        return self.first_loss.clone()

    def _iterate(self, max_iter: int, capturing: bool = False) -> torch.Tensor:
        """One step's evaluations and moves, every state tensor updated in place (a graph replays them)."""
        loss, g = self.objective(self.z)
        self.first_loss.copy_(loss)
        active = g.abs().amax(1) > self.tolerance_grad
        for n in range(max_iter):
            # what the last step taught: s = t·d and y = Δg, kept where the curvature condition holds
            y = g - self.prev_g
            s = self.d * self.t[:, None]
            ys = (y * s).sum(1)
            learn = active & ~self.fresh & (ys > 1e-10)
            w = learn.to(self.z.dtype)
            self.h_diag.copy_(torch.where(learn, ys / (y * y).sum(1).clamp_min(1e-30), self.h_diag))
            rho = torch.where(learn, 1.0 / torch.where(learn, ys, torch.ones_like(ys)), torch.zeros_like(ys))
            d = self._learn_and_direction(s * w[:, None], y * w[:, None], rho, g)
            t = torch.where(self.fresh, torch.clamp(1.0 / g.abs().sum(1).clamp_min(1e-30), max=1.0) * self.lr,
                            torch.full_like(self.t, self.lr))
            # torch keeps this direction, step and gradient even when it then declines to move
            self.prev_g.copy_(torch.where(active[:, None], g, self.prev_g))
            self.d.copy_(torch.where(active[:, None], d, self.d))
            self.t.copy_(torch.where(active, t, self.t))
            self.fresh &= ~active
            active = active & ((g * d).sum(1) <= -self.tolerance_change)  # not a descent direction: pause
            self.z.add_((t * active.to(t.dtype))[:, None] * d)
            if n == max_iter - 1 or (self.host_checks and not bool(active.any())):
                break
            prev_loss = loss
            if not capturing:
                cancel.check()  # a thousand racing starts on a CPU take seconds per evaluation: Stop must not wait
            loss, g = self.objective(self.z)
            small_step = (d * t[:, None]).abs().amax(1) <= self.tolerance_change
            active = (active & (g.abs().amax(1) > self.tolerance_grad) & ~small_step
                      & ((loss - prev_loss).abs() >= self.tolerance_change))
        return self.first_loss
