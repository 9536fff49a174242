"""CAFE (Jin et al., NeurIPS 2021): catastrophic data leakage in vertical FL, sample by sample.

The server picks the batch indices, so every aggregated gradient is a known sum over known samples.
Per worker m (its first FC layer u = Θ₁ᵀh + b₁):
  Step I   fit V (∂L/∂u for every sample):   Σ_{n∈batch} v_n ≈ ∇b₁          (linear in V)
  Step II  fit Ĥ (the FC layer's inputs):    Σ_{n∈batch} ĥ_n v_nᵀ ≈ ∇Θ₁      (linear in Ĥ given V)
  Step III fit the data: α‖∇Θ(x̂) − ∇Θ‖² + β·TV_ξ(x̂) + γ·Σ‖ĥ_n − h(x̂_n)‖²   (Adam on the batch's rows)
           [+ ρ·Σ‖(I − P)h(x̂_n)‖²/‖h(x̂_n)‖², our addition for a training model: see `row_space`]
Single loop (Algorithm 4): one update of each step per iteration. Nested loops (Algorithm 3): Step I
alone, then Step II alone, then Step III.

Steps I and II are linear least-squares problems. `solver=least-squares` (default) solves them
exactly over every equation received so far — recursive least squares for Step I (N iterations make V
exact on a fixed model), a damped minimum-norm projection onto each batch's equations for Step II
(`min_norm`: directions of V's batch below ~1e-3 of its largest singular value are damped, so a rough early
V cannot throw Ĥ far off; an exact pseudo-inverse measured up to 10 dB worse, 8 dB on `cafe`) — which
reaches the unique minimiser the paper's SGD converges to (its Theorems 1-2) in far fewer iterations
than the paper's 20 000. `solver=sgd` takes the paper's gradient steps instead, with a normalised size
(`lr_step1` = 1 projects onto the batch's sums, like Kaczmarz; `lr_step2` is relative to the batch's
curvature ‖V_batch‖²), since the raw gradients' scale depends on the model. When the model keeps
training, old equations go stale, so Step I then projects onto each new batch's sums instead.

On a training model V drifts faster than N batch equations arrive, so Ĥ goes wrong (error ≈ 1) and the
γ term misleads. What stays exact is the current batch's own equation ∇Θ₁ = Σ v_n h_nᵀ: whatever V is,
its rows lie in the span of the batch's true h_n (all of it when d₂ ≥ K). The ρ term holds each h(x̂_n)
in that span at the current weights; gradient matching (α) does the rest (preset `cafe-training`).

The attacker only calls `session.query(indices)`, as a real VFL server does each iteration.
"""
from __future__ import annotations

from typing import Iterator

import torch
import torch.nn.functional as F

from ..cuda_graph import Replayed, said_once
from ..protocols.vfl import VerticalModel, fc1_index, tiles
from ..threat import Knowledge, Observation, Step
from .gradients import model_gradients


def batches(n: int, k: int, g: torch.Generator) -> Iterator[torch.Tensor]:
    """Batches of k indices; each epoch a fresh permutation of all n (every sample is revisited evenly)."""
    while True:
        order = torch.randperm(n, generator=g)
        for i in range(0, n - k + 1, k):
            yield order[i:i + k]
        if n % k:  # the rest of this epoch plus the start of a fresh one: every batch has k distinct samples
            rest = order[n - n % k:]
            more = torch.randperm(n, generator=g)
            more = more[~torch.isin(more, rest)][: k - len(rest)]
            yield torch.cat([rest, more])


def truncated_tv(x: torch.Tensor, xi: float) -> torch.Tensor:
    """TV_ξ: each image's total variation (mean absolute neighbour difference, pixels in [0, 1]),
    counted only where it exceeds ξ — so smooth images are left alone and only noise is penalised.
    (The paper's ξ = 25 is in units its text does not give; ours are these.)"""
    tv = (x[..., 1:, :] - x[..., :-1, :]).abs().flatten(1).mean(1) + (x[..., :, 1:] - x[..., :, :-1]).abs().flatten(1).mean(1)
    return (tv * (tv > xi)).sum()


class StepOne:
    """Step I as recursive least squares: V minimises Σ_t ‖Σ_{n∈s_t} v_n − ∇b₁(t)‖² over all t so far.

    Every worker and every one of its d2 coordinates shares the same design (the batch indicators), so one
    N×N matrix P serves them all; each batch is a rank-one update (Sherman-Morrison), O(N²) per iteration
    however many workers there are.
    """

    def __init__(self, n: int, device):
        self.P = torch.eye(n, dtype=torch.float64, device=device) * 1e6  # a weak prior: V starts at 0

    def update(self, V: torch.Tensor, idx: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """One batch's equations for every worker (V: M × N × d2, target: M × d2); returns their squared
        residual before the update (0-dim, on the device)."""
        r = target.double() - V[:, idx].double().sum(1)
        ps = self.P[:, idx].sum(1)
        gain = ps / (1.0 + ps[idx].sum())
        V += (gain[None, :, None] * r[:, None, :]).to(V.dtype)
        self.P -= gain[:, None] * ps[None, :]  # in place: a CUDA graph replays it (cuda_graph.py)
        return r.pow(2).sum()


def damped_cholesky(gram: torch.Tensor, rtol: float) -> torch.Tensor:
    """L with L Lᵀ = G + λI, λ = rtol²·trace(G) (+ the smallest float64, so a zero G still factors).

    Why not an SVD or pinv: on a GPU each of those waits for the host (cuSOLVER checks its convergence there),
    several times per CAFE iteration; cholesky_ex and triangular solves with their checks off never wait.
    Damping by λ filters each direction by σ²/(σ² + λ): whole far above rtol × the largest singular value,
    dropped far below it — a soft version of pinv's cut-off at rtol. G + λI is positive definite in float64
    (rounding moves G's eigenvalues by ~1e-16·trace, far below λ), so the factor needs no check."""
    lam = rtol ** 2 * gram.diagonal(dim1=-2, dim2=-1).sum(-1) + torch.finfo(torch.float64).tiny
    eye = torch.eye(gram.shape[-1], dtype=gram.dtype, device=gram.device)
    return torch.linalg.cholesky_ex(gram + lam[..., None, None] * eye).L


def min_norm(a: torch.Tensor, r: torch.Tensor, rtol: float) -> torch.Tensor:
    """≈ pinv(a) @ r in float64: the smallest x with a x ≈ r (damped as in `damped_cholesky`).

    (aᵀa + λ)⁻¹aᵀr = aᵀ(aaᵀ + λ)⁻¹r: whichever Gram matrix is smaller is factored."""
    a, r = a.double(), r.double()
    solve = torch.linalg.solve_triangular
    if a.shape[-2] >= a.shape[-1]:
        low = damped_cholesky(a.mT @ a, rtol)
        return solve(low.mT, solve(low, a.mT @ r, upper=False), upper=True)
    low = damped_cholesky(a @ a.mT, rtol)
    return a.mT @ solve(low.mT, solve(low, r, upper=False), upper=True)


def spectral_norm_squared(a: torch.Tensor, squarings: int = 8) -> torch.Tensor:
    """‖a‖₂² (or one per matrix of a stack): the largest eigenvalue of the smaller Gram matrix G, in float64.

    Why not `matrix_norm(a, ord=2)`: it is an SVD, which waits for the host on a GPU. Squaring G s times
    (normalised each time) leaves a multiple of the projector onto its top eigenvectors, up to (λ₂/λ₁)^(2^s);
    its largest column is such an eigenvector, and G's Rayleigh quotient there is λ₁ to the square of that
    error. A zero matrix gives 0."""
    a = a.double()
    gram = a @ a.mT if a.shape[-2] <= a.shape[-1] else a.mT @ a
    tiny = torch.finfo(torch.float64).tiny
    b = gram
    for _ in range(squarings):
        b = b @ b
        b = b / b.norm(dim=(-2, -1), keepdim=True).clamp(min=tiny)
    col = b.norm(dim=-2).argmax(-1)  # the largest column: never (nearly) orthogonal to the top eigenvectors
    v = b.gather(-1, col[..., None, None].expand(*b.shape[:-1], 1))
    return ((v.mT @ gram @ v) / (v.mT @ v).clamp(min=tiny))[..., 0, 0]


def row_space(grad_w: torch.Tensor, rtol: float = 1e-4) -> torch.Tensor:
    """A basis (d₁ × d₂ columns) of the row space of ∇Θ₁ (d₂ × d₁; or one per worker, stacked): B Bᵀ projects onto it.

    ∇Θ₁ = Σ_n v_n h_nᵀ, so its rows span the batch's first-FC inputs h_n when d₂ ≥ K and V is full rank.
    B = Wᵀ L⁻ᵀ with L Lᵀ = W Wᵀ + λI: B Bᵀ = Wᵀ(WWᵀ + λI)⁻¹W, the projector onto W's rows with directions
    below ~rtol × the largest singular value damped away (B's columns are orthonormal for the strong
    directions and shrink to 0 for the weak ones). The shape never depends on the data, nothing waits for
    the host."""
    w = grad_w.double()
    low = damped_cholesky(w @ w.mT, rtol)
    return torch.linalg.solve_triangular(low, w, upper=False).mT.to(grad_w.dtype)


def off_span(h: torch.Tensor, basis: torch.Tensor) -> torch.Tensor:
    """Σ_n ‖(I − P)h_n‖² / ‖h_n‖²: how far each row of h lies outside the basis' span (scale-free; h and
    basis may carry a leading worker axis)."""
    r = h - (h @ basis) @ basis.mT
    return (r.pow(2).sum(-1) / h.pow(2).sum(-1).clamp(min=1e-12)).sum()


class RowAdam:
    """Adam that updates only the rows it is given (a sample's state advances only when it is in a batch)."""

    def __init__(self, shape, device, lr: float, betas=(0.9, 0.999), eps=1e-8):
        self.m = torch.zeros(shape, device=device)
        self.v = torch.zeros(shape, device=device)
        self.t = torch.zeros(shape[0], device=device)
        self.lr, self.b1, self.b2, self.eps = lr, betas[0], betas[1], eps

    def step(self, param: torch.Tensor, idx: torch.Tensor, grad: torch.Tensor) -> None:
        self.t[idx] += 1
        m = self.m[idx] * self.b1 + (1 - self.b1) * grad
        v = self.v[idx] * self.b2 + (1 - self.b2) * grad * grad
        self.m[idx], self.v[idx] = m, v
        shape = (-1,) + (1,) * (grad.ndim - 1)
        mhat = m / (1 - self.b1 ** self.t[idx]).view(shape)
        vhat = v / (1 - self.b2 ** self.t[idx]).view(shape)
        param[idx] -= self.lr * mhat / (vhat.sqrt() + self.eps)


def graphable(p: dict) -> bool:
    """Whether an iteration replays as one CUDA graph on a GPU: the single loop (the nested one changes its
    Steps with the phase). With gradient matching (α) and the row-space term (ρ, preset `cafe-training`, whose
    federation trains meanwhile) too: on an H200 that iteration captured and replayed at 159 against 37 it/s
    eagerly, the same images (a capture of it on 11-27 had failed, for a reason not seen since; one that fails
    twice still leaves the run eager, and says so: cuda_graph.py)."""
    return p["cafe_loop"] == "single"


def cafe(obs: Observation, kn: Knowledge, p: dict, device, graph: bool = True) -> Iterator[Step]:
    """`graph`: on a GPU, replay the single loop's iteration as one CUDA graph. Eagerly an iteration is ~600
    kernel launches: on an H200 it took 11 ms, as long as two CPU cores take to compute it (the host set the
    pace; the GPU computed 6 % of the time)."""
    session, model = obs.payload, kn.model
    assert isinstance(model, VerticalModel)
    n, k, grid = obs.context["n_samples"], obs.context["batch_size"], obs.context["grid"]
    total, single = p["iterations"], p["cafe_loop"] == "single"
    phase = p["phase_iterations"]
    alpha, beta, gamma, xi = p["gradient_weight"], p["tv_weight"], p["internal_weight"], p["tv_threshold"]
    rho, decay = p["span_weight"], p["lr_decay"]
    g = torch.Generator().manual_seed(p["seed"] * 1000 + 41)

    workers = list(model.workers)
    # the workers' nets have one shape, so Steps I and II run for all of them at once on a leading worker
    # axis (one set of kernels per iteration instead of one per worker)
    wi, bi = fc1_index(workers[0])
    d1, d2 = workers[0].fc1.in_features, workers[0].fc1.out_features
    assert all(fc1_index(w) == (wi, bi) and w.fc1.weight.shape == (d2, d1) for w in workers)
    V = torch.zeros(len(workers), n, d2, device=device)  # Step I's estimate of ∂L/∂u per worker and sample
    H = torch.zeros(len(workers), n, d1, device=device)  # Step II's estimate of h per worker and sample
    X = torch.rand((n, *kn.input_shape), generator=g).to(device)  # Step III: uniform start, as in the paper
    Y = torch.zeros(n, kn.num_classes, device=device)  # fake labels (logits)
    opt_x, opt_y = RowAdam(X.shape, device, p["lr"]), RowAdam(Y.shape, device, p["lr"])
    def labels():  # the fake labels are fitted only through the gradient-matching term (a tensor: see Step)
        return Y.argmax(1) if alpha > 0 else None

    exact = p["solver"] == "least-squares"
    # a training model makes old equations stale: Step I then projects onto each batch's sums (the
    # paper's SGD at its Kaczmarz step), which follows the drift; Step II's projection already does
    exact_one = exact and p.get("train_lr", 0) <= 0
    step_one = StepOne(n, device) if exact_one else None

    def update(idx, grad_b, grad_w, real, lr, do1=True, do2=True, do3=True) -> torch.Tensor:
        """One iteration's Steps on the batch `idx`, every state tensor changed in place (a CUDA graph
        replays exactly this: cuda_graph.py); returns its loss (0-dim, on the device)."""
        fit = torch.zeros((), dtype=torch.float64, device=device)  # summed on the device: no sync per step
        with torch.no_grad():
            if do1:  # Step I: Σ_batch v_n = ∇b₁
                if exact_one:
                    fit += step_one.update(V, idx, grad_b)
                else:
                    r = V[:, idx].sum(1) - grad_b
                    V[:, idx] -= ((p["lr_step1"] if not exact else 1.0) / k) * r[:, None, :]
                    fit += r.pow(2).sum()
            if do2:  # Step II: Σ_batch v_n ĥ_nᵀ = ∇Θ₁ (torch stores Θ₁ as d2 × d1)
                vs = V[:, idx]  # M × K × d2
                r = vs.mT @ H[:, idx] - grad_w
                if exact:  # the smallest change of the batch's rows that satisfies its equations
                    H[:, idx] -= p["lr_step2"] * min_norm(vs.mT, r, rtol=1e-3).to(vs.dtype)
                else:
                    curvature = spectral_norm_squared(vs).to(vs.dtype)
                    step = torch.where(curvature > 0, p["lr_step2"] / curvature, torch.zeros_like(curvature))
                    H[:, idx] -= step[:, None, None] * (vs @ r)
                fit += r.pow(2).sum()
        if not do3:
            return fit
        xs = X[idx].clone().requires_grad_(True)
        ys = Y[idx].clone().requires_grad_(True)
        objective = torch.zeros((), device=device)
        if gamma > 0 or rho > 0:
            h = torch.stack([w.features(t) for w, t in zip(workers, tiles(xs, grid))])  # M × K × d1
            if gamma > 0:
                objective = objective + gamma * (H[:, idx] - h).pow(2).sum()
            if rho > 0:
                objective = objective + rho * off_span(h, row_space(grad_w))
        if alpha > 0:
            fake = model_gradients(model, xs, F.softmax(ys, -1), create_graph=True)
            scale = sum(b.pow(2).sum() for b in real).clamp(min=1e-30)  # relative: free of the model's scale
            objective = objective + alpha * sum((a - b).pow(2).sum() for a, b in zip(fake, real)) / scale
        if beta > 0:
            objective = objective + beta * truncated_tv(xs, xi)
        gx, gy = torch.autograd.grad(objective, [xs, ys], allow_unused=True)
        with torch.no_grad():
            opt_x.lr = lr
            opt_x.step(X, idx, gx)
            X[idx] = X[idx].clamp(0, 1)
            if gy is not None:
                opt_y.step(Y, idx, gy)
        return objective.detach()

    graphed = Replayed(update, device, "CAFE's iterations") if graph and graphable(p) and device.type == "cuda" else None
    version = -1
    stream = batches(n, k, g)
    for it in range(1, total + 1):
        chosen = next(stream)
        q = session.query(chosen)  # checked on the host, where the server chose them
        if q.version != version:  # the model trained since the last query: attack the current weights
            with torch.no_grad():
                for w, new in zip(model.parameters(), q.weights):
                    w.copy_(new)
            version = q.version
        do1 = single or it <= phase
        do2 = single or phase < it <= 2 * phase
        do3 = single or it > 2 * phase
        note = None
        if it == 1 and p.get("train_lr", 0) > 0 and gamma > 0 and rho == 0:
            note = ("the model keeps training: Steps I–II will go stale and the γ term with them — gradient "
                    "matching (α) and the row-space term (ρ) stay exact at the current weights (preset cafe-training)")
        stage = (None if single else "Step I: recovering each sample's gradient at the first FC layer" if do1
                 else "Step II: recovering the first FC layer's inputs" if do2 else "Step III: recovering the images")
        grad_b = torch.stack([u[bi] for u in q.workers]) if do1 else None  # M × d2
        grad_w = torch.stack([u[wi] for u in q.workers]) if (do2 or (do3 and rho > 0)) else None  # M × d2 × d1
        real = [t for u in q.workers for t in u] + list(q.top) if (do3 and alpha > 0) else []
        lr = p["lr"] * decay ** (it / total)  # exponential: from lr down to lr × lr_decay
        if graphed is not None:
            loss = graphed(q.indices, grad_b, grad_w, real, lr)
            if note is None:
                note = said_once(graphed)  # the iterations run eagerly from here
        else:
            loss = update(q.indices, grad_b, grad_w, real, lr, do1, do2, do3)
        yield Step(it, total, loss, X.detach().clone(), labels(), note=note, stage=stage, internals={"V": list(V), "H": list(H)}, aligned=True)
    yield Step(total, total, loss, X.detach().clone(), labels(), final=True, internals={"V": list(V), "H": list(H)}, aligned=True)
