"""PLI — Paired-Logits Inversion (Takahashi, Liu, Liu, CVPR 2023) — and its baseline TBI.

A malicious FedMD server sees only logits on the public set. It trains, per client k, an inversion
network G_k that maps the *pair* (server softmax, client softmax) at temperature τ back to the image,
on the clean public images D₀ only (Eq. 3, with a prior term γ). For a private target class j it then
feeds the pair that maximises Q = p_j^k + p_j^0 + α·H(p^0) (Eq. 6, closed form): the client certain of
j, the server unsure — the confidence gap a client shows on data only it has seen. G_k is also pulled
towards a prior image of j (Eq. 10), and of the K clients' reconstructions the most distinct and
cleanest is kept (Eq. 11: low SSIM to the others + β·TV).

TBI (training-based inversion) trains one network on client logits alone, over the whole public set,
and asks it for the one-hot of j: it learns what the public — blurred or masked — images of j look like.

Both use the observation only: public images, the logits of every round, and the server's own model.
"""
from __future__ import annotations

from typing import Iterator

import numpy as np
import torch
import torch.nn.functional as F
from skimage import restoration
from torch import nn

from .. import identities
from ..cuda_graph import said_once
from ..device import from_host
from ..metrics import ssim
from ..threat import Knowledge, Observation, Step
from ..training_step import TrainingStep

BATCH = 16
WEIGHT_DECAY = 1e-4  # the paper's
RESTORE_ITERATIONS = 30


def optimal_pair(j: int, classes: int, alpha: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. 6: the (server, client) softmax outputs that maximise Q for target class j. The client is
    one-hot at j; the server puts e^{1/α} / (J − 1 + e^{1/α}) on j and 1 / (J − 1 + e^{1/α}) elsewhere
    (each row sums to 1 — the authors' code does not, the paper does)."""
    e = float(np.exp(1.0 / alpha))
    server = torch.full((classes,), 1.0 / (classes - 1 + e))
    server[j] = e / (classes - 1 + e)
    return server, F.one_hot(torch.tensor(j), classes).float()


def q_value(server: torch.Tensor, client: torch.Tensor, j: int, alpha: float) -> float:
    """Eq. 4: Q = p_j^k + p_j^0 + α·H(p^0)."""
    entropy = -(server * server.clamp(min=1e-30).log()).sum()
    return float(client[j] + server[j] + alpha * entropy)


class Inverter(nn.Module):
    """TBI's inversion network (the paper's Code 2), narrower: transposed convolutions from a 4×4 seed
    doubling to the image side, BatchNorm + tanh, output in [0, 1].

    `copies` independent networks in one: every convolution is grouped (copy i's channels see only copy i's),
    and BatchNorm's statistics are per channel, so each copy computes exactly what a network of its own would.
    PLI trains one network per client; as one module that is one kernel per layer for all K instead of K
    (on a GPU, where ten small networks in turn leave it idle), and one optimiser step instead of K."""

    def __init__(self, inputs: int, size: int, width: int, copies: int = 1):
        super().__init__()
        self.copies = copies
        ups = int(np.log2(size // 4))
        chans = [width * 2 ** (ups - 1 - i) for i in range(ups)]  # e.g. 4w, 2w, w for 32 px
        layers = [nn.ConvTranspose2d(copies * inputs, copies * chans[0], 4, groups=copies),
                  nn.BatchNorm2d(copies * chans[0]), nn.Tanh()]
        for a, b in zip(chans, chans[1:] + [1]):
            layers += [nn.ConvTranspose2d(copies * a, copies * b, 4, stride=2, padding=1, groups=copies)]
            layers += [nn.BatchNorm2d(copies * b), nn.Tanh()] if b != 1 else [nn.Tanh()]
        self.net = nn.Sequential(*layers)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """z: (B, copies, inputs), each copy's own inputs → (B, copies, 1, S, S), each copy's image."""
        out = self.net(z.flatten(1)[:, :, None, None])
        return (out.unflatten(1, (self.copies, -1)) + 1) / 2


def total_variation(x: torch.Tensor) -> torch.Tensor:
    """Mean absolute difference of neighbouring pixels, per image."""
    return ((x[..., 1:, :] - x[..., :-1, :]).abs().flatten(1).mean(1)
            + (x[..., :, 1:] - x[..., :, :-1]).abs().flatten(1).mean(1))


def restore(img: np.ndarray, gap: str) -> np.ndarray:
    """The attacker's translation A_φ from the insensitive domain back to the clean one, with
    scikit-image instead of a GAN: Richardson–Lucy deconvolution of the known blur, or biharmonic
    inpainting of the mask."""
    if gap == "mask":
        return restoration.inpaint_biharmonic(img, identities.mask_region(img.shape[0]))
    size = img.shape[0]
    r = max(1, int(np.ceil(3 * identities.BLUR_SIGMA * size)))
    ax = np.arange(-r, r + 1)
    psf = np.exp(-(ax[:, None] ** 2 + ax[None] ** 2) / (2 * (identities.BLUR_SIGMA * size) ** 2))
    padded = np.pad(img, 2 * r, mode="edge")  # deconvolving without padding rings at the borders
    sharp = restoration.richardson_lucy(padded, psf / psf.sum(), num_iter=RESTORE_ITERATIONS)
    return np.clip(sharp[2 * r:-2 * r, 2 * r:-2 * r], 0, 1)


def priors(obs: Observation, mode: str) -> torch.Tensor:
    """x̄ per class (J, 1, S, S): Eq. 8 (the mean clean public image, for every class) or Eq. 9 (per class,
    the mean of its restored insensitive images; needs public labels)."""
    ctx = obs.context
    x = ctx["public_images"]
    mean = x[ctx["clean"]].mean(0)
    out = mean.expand(ctx["classes"], *mean.shape).clone()
    if mode == "auto":
        mode = "restored" if ctx["public_labels"] is not None else "mean"
    if mode == "restored":
        xa, ya = x[ctx["insensitive"]], ctx["public_labels"][ctx["insensitive"]]
        for c in torch.unique(ya).tolist():
            imgs = [restore(im[0].numpy().astype(np.float64), ctx["gap"]) for im in xa[ya == c]]
            out[c] = torch.from_numpy(np.mean(imgs, 0)).float()[None]
    return out


class InversionTrainer:
    """One inversion network per seed — trained together as one grouped Inverter, with one optimiser — each
    initialised, shuffled and stepped exactly as it would be alone (Adam and weight decay act element by
    element, and each copy's loss reaches only its own weights)."""

    def __init__(self, inputs: int, size: int, width: int, lr: float, seeds: list[int], device, graph: bool = True):
        self.copies = len(seeds)
        self.net = Inverter(inputs, size, width, copies=self.copies)
        with torch.no_grad():
            for i, seed in enumerate(seeds):  # copy i drawn from its own seed, layer by layer, as if alone
                g = torch.Generator().manual_seed(seed)  # never the global RNG: concurrent runs stay reproducible
                for layer in self.net.net:
                    if isinstance(layer, nn.ConvTranspose2d):
                        w, b = layer.weight.chunk(self.copies)[i], layer.bias.chunk(self.copies)[i]
                        bound = 1 / w[0].numel() ** 0.5
                        w.copy_(torch.empty(w.shape).uniform_(-bound, bound, generator=g))
                        b.copy_(torch.empty(b.shape).uniform_(-bound, bound, generator=g))
        self.net = self.net.to(device)
        # foreach: one kernel per step for all tensors; on a CPU 1.1 ms per step instead of the loop's 3.3
        # (a fifth of each training step), and the same numbers to the bit (fused would not be)
        self.opt = torch.optim.Adam(self.net.parameters(), lr=lr, weight_decay=WEIGHT_DECAY, foreach=True)
        self.generators = [torch.Generator().manual_seed(seed) for seed in seeds]  # each copy's shuffle
        # each batch's forward and backward (~270 operations) a replayed CUDA graph on a GPU
        self.step = TrainingStep(self._loss, self.net.parameters(), self.opt, device, "PLI's training steps", graph)

    def epoch(self, z, x, prior, gamma, z_target=None, prior_target=None) -> torch.Tensor:
        """One pass of every copy over its (z → x) — z (copies, N, inputs), x and prior (N, 1, S, S): MSE to the
        image + γ·MSE to its prior (Eq. 3), in batches each copy draws in its own order; then, when given, one
        step on γ·MSE of the target classes' reconstructions to their priors (Eq. 10, Algorithm 1 line 8),
        z_target (T, inputs) being the same for every copy. Returns each copy's mean loss over the epoch,
        (copies,), on the device."""
        self.net.train()
        n = z.shape[1]
        orders = from_host(torch.stack([torch.randperm(n, generator=g) for g in self.generators]), z.device)
        copy = torch.arange(self.copies, device=z.device)[:, None]
        total = torch.zeros(self.copies, dtype=torch.float64, device=z.device)  # on the device: no sync per batch
        for i in range(0, n, BATCH):
            idx = orders[:, i:i + BATCH]  # (copies, b): each copy's own batch
            if idx.shape[1] < 2:  # BatchNorm needs two
                continue
            loss = self.step(z[copy, idx].transpose(0, 1), x[idx].transpose(0, 1),  # (b, copies, …)
                             prior[idx].transpose(0, 1) if gamma > 0 else None, float(gamma))
            total += loss.double() * idx.shape[1]
        if gamma > 0 and z_target is not None and len(z_target) > 1:
            loss = gamma * self._per_copy(self.net(self._same(z_target)), prior_target[:, None])
            self.opt.zero_grad()
            loss.sum().backward()
            self.opt.step()
        return total / n

    def _loss(self, z, x, prior, gamma):
        """A batch's loss per copy: MSE to the images, + γ·MSE to their priors when given."""
        out = self.net(z)  # (b, copies, 1, S, S)
        loss = self._per_copy(out, x)
        return loss + gamma * self._per_copy(out, prior) if prior is not None else loss

    @staticmethod
    def _per_copy(out: torch.Tensor, want: torch.Tensor) -> torch.Tensor:
        """Each copy's MSE (as F.mse_loss over its own images): (copies,)."""
        return ((out - want) ** 2).transpose(0, 1).flatten(1).mean(1)

    def _same(self, z: torch.Tensor) -> torch.Tensor:
        """(B, inputs) → (B, copies, inputs): one input for every copy."""
        return z[:, None].expand(-1, self.copies, -1)

    @torch.no_grad()
    def __call__(self, z: torch.Tensor) -> torch.Tensor:
        """Every copy's reconstruction of the same inputs z (B, inputs): (B, copies, 1, S, S)."""
        self.net.eval()
        return self.net(self._same(z))


def pick_best(candidates: torch.Tensor, beta: float) -> torch.Tensor:
    """Eq. 11 for every target class at once: of the K clients' reconstructions of each class
    (T, K, C, H, W), the index of the one least similar to the others (sum of SSIM) plus β·TV. SSIM is
    symmetric, so each of the K(K−1)/2 pairs is scored once, all classes in one batch."""
    t, k = candidates.shape[:2]
    if k == 1:
        return torch.zeros(t, dtype=torch.long)
    i, j = torch.triu_indices(k, k, 1)
    pairs = torch.from_numpy(ssim(candidates[:, i].flatten(0, 1), candidates[:, j].flatten(0, 1))).view(t, -1)
    sim = torch.zeros(t, k, k, dtype=torch.float64)
    sim[:, i, j], sim[:, j, i] = pairs, pairs
    tv = total_variation(candidates.flatten(0, 1)).view(t, k).double().cpu()
    return (sim.sum(2) + beta * tv).argmin(1)


def _softmax(logits: torch.Tensor, tau: float) -> torch.Tensor:
    return F.softmax(logits / tau, 1)


def _run(obs: Observation, kn: Knowledge, p: dict, device, paired: bool, baseline: bool) -> Iterator[Step]:
    ctx, rounds = obs.context, obs.payload
    targets, classes, tau = ctx["targets"], ctx["classes"], p["temperature"]
    gamma = p["prior_weight"] if paired else 0.0  # TBI as published: no prior
    x = ctx["public_images"].to(device)
    size, width, m = x.shape[-1], p["inversion_width"], p["inversion_epochs"]
    clean = ctx["clean"]
    prior = priors(obs, p["prior"]).to(device) if gamma > 0 else torch.zeros(classes, *x.shape[1:], device=device)
    labels = ctx["public_labels"]
    # x̄ for each public image: its class's prior (labelled), else the shared one
    prior_x = prior[labels.to(device)] if labels is not None else prior[0].expand_as(x)
    pairs = [optimal_pair(j, classes, p.get("alpha", 5.0)) for j in targets]
    z_target = torch.stack([torch.cat(pr) for pr in pairs]).to(device)
    onehots = torch.stack([pr[1] for pr in pairs]).to(device)
    prior_target = prior[torch.tensor(targets, device=device)]
    k = ctx["clients"]
    nets = InversionTrainer(2 * classes, size, width, p["lr"], [p["seed"] + 500 + i for i in range(k)], device) \
        if paired else None  # G_k for every client k, trained as one
    tbi = InversionTrainer(classes, size, width, p["lr"], [p["seed"] + 499], device) if (baseline or not paired) \
        else None
    total = len(rounds) * m

    def reconstruct():
        if not paired:
            return tbi(onehots)[:, 0]
        cands = nets(z_target)  # (T, K, C, H, W)
        return cands[torch.arange(len(targets), device=device), pick_best(cands, p["beta"]).to(device)]

    start = torch.full((len(targets), *x.shape[1:]), 0.5, device=device)

    def stage(r: int) -> str:  # shown beside the progress while the attack runs
        return (f"round 1 of {len(rounds)}: training the inversion network{'s' if k > 1 and paired else ''} on the "
                "public images' logits" if r == 1 else f"round {r} of {len(rounds)}: new logits arrived, training on them")

    yield Step(0, total, float("nan"), start, aligned=True, stage=stage(1))
    it = 0
    for r in rounds:
        server = _softmax(r.server.to(device), tau)
        probs = torch.stack([_softmax(c.to(device), tau) for c in r.clients])  # (K, N, J): the round's, every epoch's
        paired_z = torch.cat([server.expand_as(probs), probs], 2)[:, clean]  # each client's pairs (server, client k)
        for e in range(m):
            loss = 0.0
            if paired:  # G_k on client k's pairs, every k at once
                loss = nets.epoch(paired_z, x[clean], prior_x[clean], gamma, z_target, prior_target).mean()
            if tbi is not None:  # TBI: client logits only, the whole public set, no prior (as published);
                # with several clients each epoch takes every public image once, with a random client's logits
                who = torch.randint(k, (len(x),), generator=tbi.generators[0]).to(device)
                z = probs[who, torch.arange(len(x), device=device)]
                tbi_loss = tbi.epoch(z[None], x, None, 0.0)[0]
                if not paired:
                    loss = tbi_loss
            it += 1
            # the last epoch of a round is its last frame: from here the next round's logits are in
            now = r.round + 2 if e == m - 1 and r.round + 1 < len(rounds) else r.round + 1
            internals = {"baseline": tbi(onehots)[:, 0]} if (paired and tbi is not None) else None
            # a capture that failed twice: said once, at the epoch it happened
            note = next((said_once(t.step) for t in (nets, tbi) if t is not None and t.step.note), None)
            yield Step(it, total, loss, reconstruct(), aligned=True, internals=internals, stage=stage(now),
                       note=note, final=False)
    internals = {"baseline": tbi(onehots)[:, 0]} if (paired and tbi is not None) else None
    yield Step(it, total, loss, reconstruct(), aligned=True, internals=internals, final=True)


def pli(obs: Observation, kn: Knowledge, p: dict, device) -> Iterator[Step]:
    yield from _run(obs, kn, p, device, paired=True, baseline=p["compare_tbi"])


def tbi(obs: Observation, kn: Knowledge, p: dict, device) -> Iterator[Step]:
    yield from _run(obs, kn, p, device, paired=False, baseline=False)
