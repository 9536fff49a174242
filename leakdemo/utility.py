"""Utility: what a defense costs the federation's own learning, measured on held-out data no attack sees.

The federation trains the scenario's victim model (same architecture, initialisation and class count)
on scikit-learn's handwritten digits, resized to the model's image size: a quarter of the 1,797 digits
is held out for testing; the rest are dealt to ten clients. Every round each client computes its upload
— a gradient on a mini-batch (FedSGD), or its weights after a few local SGD steps (FedAvg) — applies
the scenario's defense to it with the scenario's settings, and the server averages the uploads. The
figure is the test accuracy after a fixed budget of rounds, beside the same training without defense.

The training runs on the CPU (the attacks have the GPU). The clients of a round are computed together
(torch.func.vmap over the client axis) for LeNet and the MLP, one after another for the convolutional nets:
vmapped, their per-client weight gradients become grouped convolutions, slower there (measured, one round
of ten clients × 32 digits at 32 px, one thread / two: ConvNet 0.37 / 0.21 s looped against 0.68 / 0.39 s
vmapped, ResNet 0.58 / 0.34 against 0.97 / 0.52; LeNet 0.063 / 0.044 against 0.073 / 0.040, and at 16 px
0.032 / 0.029 against 0.023 / 0.014). With oneDNN on for the training (see `_train`), a LeNet federation at
16 px trains in about 3 s on one thread (7 s before), a ConvNet one in about 46 s (about 120 s vmapped without
oneDNN, before). Results are kept in the run store's cache, once per (protocol, model, defense and its
strength, seed). Torch is imported where the training happens: the web
server reads and writes this cache (keys, cached, store_result) without loading it.
"""
from __future__ import annotations

import hashlib
import json
from functools import lru_cache

from typing import TYPE_CHECKING

import numpy as np

from . import catalog

if TYPE_CHECKING:
    import torch

CLIENTS = 10
ROUNDS = 120  # communication rounds: enough for an undefended LeNet to learn the digits well
BATCH = 32  # each client's mini-batch per gradient
LOCAL_STEPS_CAP = 5  # FedAvg: local steps per round, as the scenario says, at most this many
# the learning rates of the federation's own training (the scenario's client lr is the attack's setting,
# e.g. DLM's η = 0.01 for one step; with it no model learns the digits in a budget a sweep can afford)
SERVER_LR = {"lenet": 1.0, "mlp": 0.5, "convnet": 0.05, "resnet": 0.05}
LOOPED_MODELS = {"convnet", "resnet"}  # clients one after another (see above); the others vmapped


def applies(p: dict) -> bool:
    return p["protocol"] in ("fedsgd", "fedavg")


@lru_cache(maxsize=4)
def _digits(size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    import torch
    from skimage.transform import resize
    from sklearn.datasets import load_digits
    d = load_digits()
    images = (d.images / 16.0).astype(np.float32)
    if size != 8:
        images = np.stack([resize(im, (size, size), order=1, anti_aliasing=False) for im in images])
    x = torch.from_numpy(np.repeat(images[:, None], 3, axis=1).astype(np.float32))
    y = torch.from_numpy(d.target.astype(np.int64))
    held = torch.arange(len(y)) % 4 == 0
    return x[~held], y[~held], x[held], y[held]


def _key(p: dict, defended: bool) -> str:
    names = ["protocol", "model", "model_init", "model_width", "model_depth", "num_classes", "image_size", "seed"]
    if p["protocol"] == "fedavg":
        names += ["local_steps", "momentum"]
    spec = {k: p[k] for k in names}
    if defended and p["defense"] != "none":
        spec["defense"] = p["defense"]
        spec.update({q.name: p[q.name] for q in catalog.DEFENSES[p["defense"]].params})
    spec["recipe"] = [CLIENTS, ROUNDS, BATCH, SERVER_LR]
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()


_memo: dict[str, float] = {}  # this process's trainings (a sweep's worker meets the clean one often)


def test_accuracy(p: dict, defended: bool = True, store=None) -> float:
    """Held-out accuracy of the federation trained with (or without) the scenario's defense."""
    key = _key(p, defended)
    if key in _memo:
        return _memo[key]
    hit = None if store is None else store.cached("utility", key)
    acc = float(hit) if hit is not None else _train(p, defended)
    _memo[key] = acc
    if store is not None and hit is None:
        store.keep("utility", key, acc)
    return acc


def measure(p: dict, store=None) -> dict | None:
    """{"test_accuracy", "clean_test_accuracy"} for FedSGD/FedAvg scenarios; None where it does not apply."""
    if not applies(p):
        return None
    clean = test_accuracy(p, defended=False, store=store)
    mine = clean if p["defense"] == "none" else test_accuracy(p, defended=True, store=store)
    return {"test_accuracy": round(mine, 4), "clean_test_accuracy": round(clean, 4)}


def keys(p: dict) -> dict:
    """The cache keys of `measure`'s two figures."""
    return {"test_accuracy": _key(p, True), "clean_test_accuracy": _key(p, False)}


def cached(p: dict, store) -> dict | None:
    """`measure`'s result when the store holds both figures, else None (nothing is trained)."""
    values = {name: store.cached("utility", key) for name, key in keys(p).items()}
    if any(v is None for v in values.values()):
        return None
    return {name: round(float(v), 4) for name, v in values.items()}


def store_result(store, result_keys: dict, value: dict) -> None:
    for name, key in result_keys.items():
        store.keep("utility", key, value[name])


def of_run(metrics: dict) -> tuple[str, float, float | None] | None:
    """A finished run's own utility figure, (name, with its defense, without it or None): the final training loss
    (the mean of the last ten steps) for vertical FL, the clients' test accuracy (mean over the clients) for logit
    sharing, each measured inside the run; None for FedSGD and FedAvg, whose utility is the separate training
    above (`measure`)."""
    u = metrics.get("utility")
    if not u or not u.get("defended"):
        return None
    if "steps" in u:
        def final(curve):
            return sum(curve[-10:]) / len(curve[-10:])
        return "training_loss", final(u["defended"]), final(u["clean"]) if u.get("clean") else None
    def mean(v):
        return sum(v) / len(v)
    return "client_accuracy", mean(u["defended"]), mean(u["clean"]) if u.get("clean") else None


LEARNS = 0.1  # the share of its first loss that the undefended vertical-FL training must shed for a cost to show


def barely_learns(u: dict, p: dict) -> str | None:
    """Why a vertical-FL run's training-loss chart cannot show what a defense costs, or None where it can: the
    undefended federation's loss hardly falls in its steps. On cafe-faces it went 2.306 → 2.199 (digits: 2.312
    → 0.390), so any defense looked free: the faces carry no identity labels (face i is class i mod the
    class count), and nothing in a face predicts that."""
    clean = u.get("clean") or u.get("defended")
    if not clean or "steps" not in u:
        return None
    end = sum(clean[-10:]) / len(clean[-10:])
    if end < (1 - LEARNS) * clean[0]:
        return None
    why = (f": the faces carry no identity labels (face i is class i mod {p.get('num_classes')}), so nothing in "
           "a face predicts its class" if p.get("data") == "faces" else "")
    digits = "" if p.get("data") == "digits" else " (on the digits it can)"
    return (f"Without a defense the federation's training loss barely falls in {u['steps']} steps ({clean[0]:.3f} → "
            f"{end:.3f}){why}; the loss cannot show what a defense costs here{digits}.")


def learning_rate(p: dict) -> float:
    """The federation's step size. The sigmoid LeNet's last layer grows with the image (12·⌈s/4⌉² inputs):
    its step shrinks with that fan-in (measured: 1.0 learns the 16 px digits to 0.97, but oscillates at
    32 px, where 0.25 learns them to 0.93)."""
    lr = SERVER_LR.get(p["model"], 0.1)
    if p["model"] == "lenet":
        lr = min(lr, lr * (16 / p["image_size"]) ** 2)
    return lr


def client_gradients(gradient, params, xb, yb, shared: bool, looped: bool) -> list[torch.Tensor]:
    """Every client's gradient on its mini-batch (xb, yb: stacked over the clients), stacked over the clients.
    gradient(params, x, y): one client's; params: the server's weights (shared) or each client's own (stacked).
    looped: one client after another, else vmapped into one program."""
    import torch
    from torch.func import vmap
    if not looped:
        return vmap(gradient, in_dims=(None if shared else 0, 0, 0))(params, xb, yb)
    each = [gradient(params if shared else [w[c] for w in params], xb[c], yb[c]) for c in range(len(xb))]
    return [torch.stack(t) for t in zip(*each)]


def _train(p: dict, defended: bool) -> float:
    """With oneDNN, which the attack's processes turn off (runner.py: slower for an attack's tiny double
    backward) but which trains a federation's 32-image batches faster: measured, one round on one thread,
    ConvNet 0.36 against 0.61–0.87 s, LeNet at 16 px 0.025 against 0.038 s."""
    import torch
    was, torch.backends.mkldnn.enabled = torch.backends.mkldnn.enabled, True  # (its `flags` context warns of TF32)
    try:
        return _federation(p, defended)
    finally:
        torch.backends.mkldnn.enabled = was


def _federation(p: dict, defended: bool) -> float:
    import torch
    import torch.nn.functional as F
    from torch.func import functional_call, grad

    from .defenses import apply_defense
    from .protocols.fedsgd import make_model
    torch.manual_seed(p["seed"])
    xtr, ytr, xte, yte = _digits(p["image_size"])
    ytr, yte = ytr % p["num_classes"], yte % p["num_classes"]
    model = make_model(p)
    torch.func.replace_all_batch_norm_modules_(model)  # BatchNorm without running statistics: vmap-able
    model.train()
    names = [n for n, _ in model.named_parameters()]
    buffers = {n: b for n, b in model.named_buffers()}
    weights = [w.detach().clone() for w in model.parameters()]
    g = torch.Generator().manual_seed(p["seed"] * 7919 + 11)
    g_def = torch.Generator().manual_seed(p["seed"] * 7919 + 13)
    shards = torch.randperm(len(ytr), generator=g)
    shards = [shards[c::CLIENTS] for c in range(CLIENTS)]
    defense = p["defense"] if defended else "none"
    lr = learning_rate(p)

    def loss_of(params, x, y):
        out = functional_call(model, ({n: w for n, w in zip(names, params)}, buffers), (x,))
        return F.cross_entropy(out, y)

    gradient, looped = grad(loss_of), p["model"] in LOOPED_MODELS

    def batches():
        idx = torch.stack([s[torch.randint(len(s), (BATCH,), generator=g)] for s in shards])
        return xtr[idx], ytr[idx]

    steps = 1 if p["protocol"] == "fedsgd" else min(p["local_steps"], LOCAL_STEPS_CAP)
    for _ in range(ROUNDS):
        if p["protocol"] == "fedsgd":
            xb, yb = batches()
            grads = client_gradients(gradient, weights, xb, yb, True, looped)
            sent = [apply_defense(defense, [t[c] for t in grads], p, g_def) for c in range(CLIENTS)]
            weights = [w - lr * torch.stack([s[i] for s in sent]).mean(0) for i, w in enumerate(weights)]
        else:  # FedAvg: local steps from the server's weights, then the (defended) weights are averaged
            local = [w.unsqueeze(0).repeat(CLIENTS, *([1] * w.dim())) for w in weights]
            for _ in range(steps):
                xb, yb = batches()
                grads = client_gradients(gradient, local, xb, yb, False, looped)
                local = [w - lr * gr for w, gr in zip(local, grads)]
            sent = [apply_defense(defense, [t[c] for t in local], p, g_def) for c in range(CLIENTS)]
            weights = [torch.stack([s[i] for s in sent]).mean(0) for i in range(len(weights))]
    with torch.no_grad():
        model.eval()
        out = functional_call(model, ({n: w for n, w in zip(names, weights)}, buffers), (xte,))
        return float((out.argmax(1) == yte).float().mean())
