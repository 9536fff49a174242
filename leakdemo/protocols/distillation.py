"""Logit sharing — FedMD, DS-FL and FedGEMS: clients never send gradients or weights, only their
logits on a public data set (Appendix B of the PLI paper gives the three loops we follow).

- fedmd: labelled public set; clients learn it, then their private data; each round they send logits,
  the server averages them (consensus), clients digest the consensus (L1 on logits) and revisit their
  private data. The server also trains its own model f₀ on the public set (the PLI server does).
- ds-fl: unlabelled public set; clients train on private data, the server sharpens the averaged
  predictions (entropy-reduction aggregation, temperature 0.1) and everyone distils on them.
- fedgems: a larger server model learns from the public labels and from the clients' logits where they
  are right and confident (selective knowledge fusion, ε = 0.75); its logits are the global knowledge.

The observation is every round's client logits (after the client's defense) and the server's own
model's logits on the same public images — the server trained that model itself.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .. import cancel, identities, metrics, settings
from ..defenses import apply_defense
from ..device import from_host
from ..settings import logits_receives as describe
from ..threat import GroundTruth, Knowledge, Observation
from ..training_step import TrainingStep
from .cohort import BATCH, LR, Cohort, losses

SCHEMES = ("fedmd", "ds-fl", "fedgems")
ERA_TEMPERATURE = 0.1  # DS-FL's entropy-reduction aggregation
FEDGEMS_EPSILON = 0.75  # FedGEMS: a client's prediction counts when right with at least this confidence


@dataclass
class LogitRound:
    """What the server holds after one communication round."""
    round: int
    clients: list[torch.Tensor]  # per client: logits on the public set (N_p, J), as sent (after the defense)
    server: torch.Tensor  # its own model f₀'s logits on the public set at that time


def classifier(classes: int, size: int, width: int, g: torch.Generator) -> nn.Module:
    """The PLI paper's client/server model (Code 1): one conv layer, ReLU, 3×3 max-pool, a linear layer."""
    side = (size - 2) // 3
    m = nn.Sequential(nn.Conv2d(1, width, 3), nn.ReLU(), nn.MaxPool2d(3), nn.Flatten(),
                      nn.Linear(width * side * side, classes))
    _init(m, g)
    return m


def large_classifier(classes: int, size: int, width: int, g: torch.Generator) -> nn.Module:
    """FedGEMS's larger server model: two conv blocks and a hidden layer."""
    side = ((size - 2) // 2 - 2) // 2
    m = nn.Sequential(nn.Conv2d(1, 2 * width, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(2 * width, 2 * width, 3),
                      nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(2 * width * side * side, 128), nn.ReLU(),
                      nn.Linear(128, classes))
    _init(m, g)
    return m


def _init(m: nn.Module, g: torch.Generator) -> None:
    with torch.no_grad():
        for p in m.parameters():
            bound = 1 / max(1, p.shape[1:].numel() if p.dim() > 1 else p.numel()) ** 0.5
            p.copy_(torch.empty(p.shape).uniform_(-bound, bound, generator=g))


class Learner:
    """A server's model with its own Adam optimiser and data order (so every party is reproducible); the
    clients train together as a Cohort."""

    def __init__(self, model: nn.Module, device, seed: int, graph: bool = True):
        self.model = model.to(device)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=LR)
        self.g = torch.Generator().manual_seed(seed)
        self.step = TrainingStep(self._loss, self.model.parameters(), self.opt, device, "the server's training steps",
                                 graph)  # each batch's forward and backward a replayed CUDA graph on a GPU

    def fit(self, x: torch.Tensor, target: torch.Tensor, loss: str, epochs: int) -> None:
        self.model.train()
        for _ in range(epochs):
            order = from_host(torch.randperm(len(x), generator=self.g), x.device)
            for i in range(0, len(x), BATCH):
                cancel.check()  # a federation's rounds run before the attack's first frame
                idx = order[i:i + BATCH]
                self.step(x[idx], target[idx], setting=(loss,))

    def _loss(self, loss: str, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return losses(self.model(x), t, loss).mean()

    @torch.no_grad()
    def logits(self, x: torch.Tensor) -> torch.Tensor:
        self.model.eval()
        return torch.cat([self.model(x[i:i + 256]) for i in range(0, len(x), 256)])


class Clients:
    """The federation's K clients, in cohorts of equal private-set size (one cohort when the identities
    deal evenly, as in every preset): each cohort trains as one program, each client as it would alone."""

    def __init__(self, models: list[nn.Module], private: list[tuple[torch.Tensor, torch.Tensor]], device,
                 seeds: list[int]):
        sizes = [len(y) for _, y in private]
        self.groups = [[i for i, n in enumerate(sizes) if n == size] for size in dict.fromkeys(sizes)]
        self.cohorts = [Cohort([models[i] for i in g], device, [seeds[i] for i in g]) for g in self.groups]
        self.private = [(torch.stack([private[i][0] for i in g]).to(device),
                         torch.stack([private[i][1] for i in g]).to(device)) for g in self.groups]

    def fit_private(self, epochs: int) -> None:
        for cohort, (x, y) in zip(self.cohorts, self.private):
            cohort.fit(x, y, "ce", epochs, shared=False)

    def fit_public(self, x: torch.Tensor, target: torch.Tensor, loss: str, epochs: int) -> None:
        for cohort in self.cohorts:
            cohort.fit(x, target, loss, epochs, shared=True)

    def _in_order(self, per_cohort: list) -> list:
        out = [None] * sum(map(len, self.groups))
        for g, values in zip(self.groups, per_cohort):
            for i, v in zip(g, values):
                out[i] = v
        return out

    def logits(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Client by client, its logits on x."""
        return self._in_order([list(c.logits(x)) for c in self.cohorts])

    def accuracy(self, x: torch.Tensor, y: torch.Tensor) -> list[float]:
        return self._in_order([c.accuracy(x, y) for c in self.cohorts])


def _fedgems_targets(server_logits, client_logits, labels) -> torch.Tensor:
    """Selective knowledge fusion: per public image, the mean prediction of the clients that are right and
    confident (≥ ε); the label itself where none is."""
    probs = torch.stack([F.softmax(l, 1) for l in client_logits])  # (K, N, J)
    conf, pred = probs.max(2)
    good = (pred == labels[None]) & (conf >= FEDGEMS_EPSILON)
    mean = (probs * good[..., None]).sum(0) / good.sum(0).clamp(min=1)[:, None]
    onehot = F.one_hot(labels, server_logits.shape[1]).float()
    return torch.where(good.any(0)[:, None], mean, onehot)


def label_space(p: dict, data: identities.IdentitySet) -> tuple[int, torch.Tensor]:
    """The classifiers' classes and each identity's index among them. FedMD and FedGEMS learn every identity
    (the public labels name the non-target ones); DS-FL's public set has no labels, so its models know only the
    private identities (the paper: "the total number of classes in DS-FL equals the number of classes in the
    local dataset"); the others map to −1 and are never a training label."""
    if p["protocol"] != "ds-fl":
        return data.classes, torch.arange(data.classes)
    index = torch.full((data.classes,), -1, dtype=torch.long)
    index[torch.tensor(data.targets)] = torch.arange(len(data.targets))
    return len(data.targets), index


def federate(p: dict, data: identities.IdentitySet, device, defense: str):
    """Run the scheme; returns the rounds the server saw and the clients' final learners."""
    scheme, k, size, width = p["protocol"], p["clients"], p["image_size"], p["model_width"]
    g = torch.Generator().manual_seed(p["seed"] + 7)
    xp, yp = (t.to(device) for t in data.public)
    classes, index = label_space(p, data)
    private = [(x.to(device), index[y].to(device)) for x, y in data.private]
    models = [classifier(classes, size, width, g) for _ in range(k)]
    clients = Clients(models, private, device, [p["seed"] + 100 + i for i in range(k)])
    make_server = large_classifier if scheme == "fedgems" else classifier
    server = Learner(make_server(classes, size, width, g), device, p["seed"] + 99)
    g_def = torch.Generator().manual_seed(p["seed"] + 8)
    e, r_e = p["local_epochs"], settings.ROUND_EPOCHS[scheme]

    def send() -> list[torch.Tensor]:
        return [apply_defense(defense, [l], p, g_def)[0] for l in clients.logits(xp)]

    if scheme == "fedmd":
        clients.fit_public(xp, yp, "ce", e)  # transfer learning on the public set
        clients.fit_private(e)
        server.fit(xp, yp, "ce", e)
    else:
        clients.fit_private(e)
        if scheme == "fedgems":
            server.fit(xp, yp, "ce", e)
    rounds, sent = [], None
    for t in range(p["rounds"]):
        if scheme == "fedmd":
            sent = send()
            rounds.append(LogitRound(t, sent, server.logits(xp)))
            clients.fit_public(xp, torch.stack(sent).mean(0), "l1", r_e)  # digest the consensus
            clients.fit_private(r_e)  # revisit
            server.fit(xp, yp, "ce", 1)
        elif scheme == "ds-fl":
            if t > 0:
                clients.fit_private(r_e)
            sent = send()
            rounds.append(LogitRound(t, sent, server.logits(xp)))
            mean = torch.stack([F.softmax(s, 1) for s in sent]).mean(0)
            era = F.softmax(mean / ERA_TEMPERATURE, 1)
            clients.fit_public(xp, era, "soft", r_e)
            server.fit(xp, era, "soft", 1)
        else:  # fedgems
            if sent is not None:
                server.fit(xp, _fedgems_targets(server.logits(xp), sent, yp), "soft", 1)
            glob = F.softmax(server.logits(xp), 1)
            clients.fit_public(xp, glob, "soft", r_e)
            clients.fit_private(r_e)
            sent = send()
            rounds.append(LogitRound(t, sent, server.logits(xp)))
    return rounds, clients, server


def simulate(p: dict, device: torch.device, uploads=None) -> tuple[Observation, Knowledge, GroundTruth]:
    data = identities.build(p)
    rounds, clients, server = federate(p, data, device, p["defense"])
    xp, yp = data.public
    n_clean = len(data.public_clean[1])
    labelled = p["protocol"] != "ds-fl"
    classes, index = label_space(p, data)
    targets = index[torch.tensor(data.targets)]  # the private identities in the models' label space
    obs = Observation(kind="logits", payload=rounds, description=describe(p), context={
        "public_images": xp.clone(), "public_labels": yp.clone() if labelled else None,
        "clean": slice(0, n_clean), "insensitive": slice(n_clean, len(yp)),
        "targets": targets.tolist(), "classes": classes, "gap": data.gap, "clients": p["clients"]})
    unit = "digit" if p["data"] == "digits" else "identity"
    facts = [
        f"the public set it shares: {n_clean} clean images of the {data.classes - len(data.targets)} non-target "
        f"{unit} classes (D₀) and {len(yp) - n_clean} {'blurred' if data.gap == 'blur' else 'masked'} images of "
        f"all {data.classes} (D_a)" + ("" if labelled else ", without labels"),
        f"which {len(data.targets)} classes are private targets (they have no clean public images)" if labelled else
        f"that the models' {classes} classes are the private identities (the clients' own labels)",
        "its own model f₀, trained on the public set, and its logits",
    ]
    kn = Knowledge(model=copy.deepcopy(server.model), input_shape=tuple(xp.shape[1:]), num_classes=classes,
                   batch_size=len(data.targets), facts=facts)
    means = torch.stack([data.private_mean(j) for j in data.targets])
    public_means = _class_means(*data.public_clean) + _class_means(*data.public_insensitive)

    def judge(images: torch.Tensor) -> dict:
        return metrics.attack_accuracy(images, means, public_means)

    def utility() -> dict:
        """Each client's accuracy on held-out clean images of the private classes (what it federates for)."""
        xt, yt = data.test
        keep = torch.isin(yt, torch.tensor(data.targets))
        xt, yt = xt[keep].to(device), index[yt[keep]].to(device)
        out = {"defended": clients.accuracy(xt, yt)}
        if p["defense"] != "none":
            _, clean_clients, _ = federate(p, data, device, "none")
            out["clean"] = clean_clients.accuracy(xt, yt)
        return out

    names = [f"{unit} {j} (client {data.owner[j] + 1})" for j in data.targets]
    truth = GroundTruth(means, targets, names, utility=utility, judge=judge)
    return obs, kn, truth


def _class_means(x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    return [x[y == c].mean(0) for c in torch.unique(y).tolist()]
