"""FedSGD: the client sends the gradient of its loss on one private batch at the current weights."""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

from .. import cancel
from ..data import load_batch, training_pool
from ..defenses import apply_defense
from ..device import from_host
from ..models import build_model
from ..settings import MODEL_HELP, round_images
from ..settings import fedsgd_receives as describe
from ..threat import GroundTruth, Knowledge, Observation
from ..training_step import TrainingStep
from ..words import plural


def make_model(p: dict):
    return build_model(p["model"], 3, p["image_size"], p["num_classes"], p["seed"],
                       width=p["model_width"], depth=p["model_depth"], init=p["model_init"])


def warm_up(model, p: dict, exclude: list[str], device) -> None:
    """A few SGD steps on other images (never the private batch): trained models leak less."""
    steps = p["warmup_steps"]
    if steps <= 0:
        return
    pool = training_pool(p, exclude, n=64)
    images, labels = pool.images.to(device), pool.labels.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    # each step's forward and backward a replayed CUDA graph on a GPU, its batch drawn on the host and queued
    step = TrainingStep(lambda x, y: F.cross_entropy(model(x), y), model.parameters(), opt, device,
                        "the warm-up's steps")
    g = torch.Generator().manual_seed(p["seed"] + 2)
    model.train()
    for _ in range(steps):
        cancel.check()  # up to 2000 steps before the attack's first frame: Stop must reach them
        idx = from_host(torch.randint(len(labels), (min(16, len(labels)),), generator=g), images.device)
        step(images[idx], labels[idx])
    opt.zero_grad()  # the last step's gradients are no weights' business (and on a GPU, a graph's memory)


def simulate(p: dict, device: torch.device, uploads=None) -> tuple[Observation, Knowledge, GroundTruth]:
    """One round. With `clients` > 1 each client sends the gradient of its own batch (the next `batch_size`
    images) and the server sees each gradient apart, as plain FedSGD does — or, under secure aggregation, only
    their average."""
    bs, k = p["batch_size"], p["clients"]
    batch = load_batch(p, uploads, *round_images(p))
    model = make_model(p).to(device)
    warm_up(model, p, batch.keys or [], device)
    model.train()  # the client computes its update in training mode
    x, y = batch.images.to(device), batch.labels.to(device)
    g = torch.Generator().manual_seed(p["seed"] + 3)  # the defenses' noise, client after client
    sent = []
    for i in range(k):
        loss = F.cross_entropy(model(x[i * bs:(i + 1) * bs]), y[i * bs:(i + 1) * bs])
        grads = torch.autograd.grad(loss, list(model.parameters()))
        sent.append(apply_defense(p["defense"], list(grads), p, g))

    facts = [f"the model architecture ({MODEL_HELP[p['model']]}) and its current weights — the server sent them"]
    if k > 1 and p["secure_aggregation"]:
        # the server learns the average alone: the gradient of one batch of k × bs images (the mean loss)
        payload = [torch.stack(ts).mean(0) for ts in zip(*sent)]
        bs, context = k * bs, {"batch_size": k * bs}
        facts.append(f"only the average of the round's {k} gradients (secure aggregation): a batch of {bs} images "
                     "as far as it can tell")
    else:
        payload, context = (sent[0], {"batch_size": bs}) if k == 1 else (sent, {"batch_size": bs, "clients": k})
    obs = Observation(kind="gradients", payload=payload, description=describe(p), context=context)
    facts += [
        f"the batch size ({bs}) and the image size ({p['image_size']}×{p['image_size']}, 3 channels)",
        f"the number of classes ({p['num_classes']})",
    ]
    if k > 1 and not p["secure_aggregation"]:
        facts.append(f"which of the round's {k} clients sent each gradient (they arrive apart: no secure aggregation)")
    if p["warmup_steps"]:
        facts.append(f"the weights after the model's {plural(p['warmup_steps'], 'warm-up training step')} (they are the current weights)")
    knowledge = Knowledge(model=copy.deepcopy(model), input_shape=tuple(x.shape[1:]), num_classes=p["num_classes"],
                          batch_size=bs, facts=facts)
    return obs, knowledge, GroundTruth(batch.images.clone(), batch.labels.clone(), batch.names)
