"""Offline data with a domain gap, for logit-sharing federations (FedMD and its variants).

Each class is an identity. The clients hold clean views of the *target* identities (private); the
public set holds clean views of the other identities (D₀) and "insensitive" versions — blurred or
masked — of every identity (D_a), as in the PLI paper's masked-LFW and blurred-FaceScrub sets.

- faces: each of scikit-image's 100 `lfw_subset` faces is an identity; its views are synthesised
  (small rotation, scale and shift, brightness and contrast, pixel noise).
- digits: scikit-learn's digits, the ten digits as classes, real samples as views.

Everything is deterministic per seed. Images are (N, 1, S, S) float tensors in [0, 1].
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from skimage import filters, transform

from .data import _digits, _faces
from .settings import logits_check as check

BLUR_SIGMA = 0.06  # of the image side: the blur of D_a (the attacker's prior estimate assumes it)
MASK_FROM = 0.55  # masks cover the image below this fraction of its height (a face mask over mouth and chin)
MASK_VALUE = 0.5


@dataclass
class IdentitySet:
    classes: int  # J: all identities
    targets: list[int]  # the private identities (the attack's target labels L)
    private: list[tuple[torch.Tensor, torch.Tensor]]  # per client: images, labels
    public_clean: tuple[torch.Tensor, torch.Tensor]  # D₀: clean views of the non-target identities
    public_insensitive: tuple[torch.Tensor, torch.Tensor]  # D_a: blurred/masked views of every identity
    test: tuple[torch.Tensor, torch.Tensor]  # held-out clean views of every identity (client accuracy)
    owner: dict[int, int]  # target label -> the client that holds it
    gap: str  # "blur" or "mask"

    @property
    def public(self) -> tuple[torch.Tensor, torch.Tensor]:
        """D_p = D₀ ∪ D_a, in that order."""
        return (torch.cat([self.public_clean[0], self.public_insensitive[0]]),
                torch.cat([self.public_clean[1], self.public_insensitive[1]]))

    def private_mean(self, label: int) -> torch.Tensor:
        x, y = self.private[self.owner[label]]
        return x[y == label].mean(0)


def insensitive(img: np.ndarray, gap: str) -> np.ndarray:
    """The insensitive version of a view: blurred (Gaussian) or masked (lower part flat gray)."""
    if gap == "blur":
        return filters.gaussian(img, sigma=BLUR_SIGMA * img.shape[-1], preserve_range=True).astype(np.float32)
    out = img.copy()
    out[int(MASK_FROM * img.shape[0]):, :] = MASK_VALUE
    return out


def mask_region(size: int) -> np.ndarray:
    """Where `insensitive(..., "mask")` covers the image (the attacker sees the masks: it knows this)."""
    m = np.zeros((size, size), dtype=bool)
    m[int(MASK_FROM * size):, :] = True
    return m


def _view(face: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """One synthesised view of a face: a small similarity transform, brightness/contrast, noise."""
    img = transform.resize(face, (size, size), anti_aliasing=True)
    c = (size - 1) / 2
    tf = (transform.AffineTransform(translation=(-c, -c))
          + transform.AffineTransform(rotation=np.deg2rad(rng.uniform(-6, 6)), scale=rng.uniform(0.95, 1.05))
          + transform.AffineTransform(translation=(c + rng.uniform(-1, 1), c + rng.uniform(-1, 1))))
    img = transform.warp(img, tf.inverse, mode="edge")
    img = (img - 0.5) * rng.uniform(0.9, 1.1) + 0.5 + rng.uniform(-0.06, 0.06)
    img = img + rng.normal(0, 0.02, img.shape)
    return np.clip(img, 0, 1).astype(np.float32)


def _views(p: dict, rng: np.random.Generator) -> tuple[list[list[np.ndarray]], int]:
    """Views per identity (a list per class) and the class count J."""
    size, n = p["image_size"], p["views"]
    if p["data"] == "digits":
        images, labels = _digits()
        out = []
        for c in range(10):
            idx = rng.permutation(np.flatnonzero(labels == c))[:n]
            out.append([transform.resize(images[i], (size, size), order=1, anti_aliasing=False).astype(np.float32)
                        for i in idx])
        return out, 10
    faces = _faces()
    chosen = rng.permutation(len(faces))[: p["num_classes"]]
    return [[_view(faces[i], size, rng) for _ in range(n)] for i in chosen], p["num_classes"]


def build(p: dict) -> IdentitySet:
    """The federation's data for parameters p (data, image_size, views, num_classes, target_classes,
    clients, domain_gap, seed)."""
    check(p)
    rng = np.random.default_rng(p["seed"] + 303)
    views, classes = _views(p, rng)
    targets = sorted(rng.permutation(classes)[: p["target_classes"]].tolist())
    k = p["clients"]
    owner = {t: i % k for i, t in enumerate(targets)}
    n_test = n_gap = max(1, len(views[0]) // 4)  # each identity's views: test | insensitive source | train
    private = [([], []) for _ in range(k)]
    clean, gapped, test = ([], []), ([], []), ([], [])

    def add(pair, img, label):
        pair[0].append(img)
        pair[1].append(label)

    for c, vs in enumerate(views):
        for v in vs[:n_test]:
            add(test, v, c)
        for v in vs[n_test:n_test + n_gap]:  # D_a comes from other photos than anything private or in D₀
            add(gapped, insensitive(v, p["domain_gap"]), c)
        for v in vs[n_test + n_gap:]:
            add(private[owner[c]] if c in owner else clean, v, c)

    def tensors(pair):
        return torch.from_numpy(np.stack(pair[0]))[:, None].float(), torch.tensor(pair[1], dtype=torch.long)

    return IdentitySet(classes, targets, [tensors(pr) for pr in private], tensors(clean), tensors(gapped),
                       tensors(test), owner, p["domain_gap"])
