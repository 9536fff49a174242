"""FedAvg: the client trains the weights it received for a few local SGD steps and sends them back.

Its private data are rounds_per_epoch × local_steps × batch_size images. In every round the client
takes the server's weights W, runs `local_steps` SGD steps over mini-batches of `batch_size`, applies
its defense to the result and uploads W'. An epoch is `rounds_per_epoch` rounds (one pass over the
data); the server watches `epochs` epochs, reshuffled between epochs when `shuffle` is on. With one
client, the server's next weights are simply the client's upload.
"""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

from ..data import load_batch
from ..defenses import apply_defense
from ..settings import LOCAL_DATA, MODEL_HELP, local_images
from ..settings import fedavg_check as check
from ..settings import fedavg_receives as describe
from ..threat import GroundTruth, Knowledge, Observation, Update
from ..words import plural
from .fedsgd import make_model, warm_up

def simulate(p: dict, device: torch.device, uploads=None) -> tuple[Observation, Knowledge, GroundTruth]:
    T, B, R, E = p["local_steps"], p["batch_size"], p["rounds_per_epoch"], p["epochs"]
    check(p)
    n = local_images(p)
    batch = load_batch(p, uploads, count=n, count_name=LOCAL_DATA)
    model = make_model(p).to(device)
    warm_up(model, p, batch.keys or [], device)
    start = copy.deepcopy(model)
    x, y = batch.images.to(device), batch.labels.to(device)
    g_order = torch.Generator().manual_seed(p["seed"] + 5)
    g_noise = torch.Generator().manual_seed(p["seed"] + 3)
    updates, membership = [], []
    order = torch.arange(n)
    for epoch in range(E):
        if epoch > 0 and p["shuffle"]:
            order = torch.randperm(n, generator=g_order)
        for rnd in range(R):
            used = order[rnd * T * B:(rnd + 1) * T * B]
            before = [w.detach().clone() for w in model.parameters()]
            opt = torch.optim.SGD(model.parameters(), lr=p["local_lr"], momentum=p["momentum"])
            model.train()
            for t in range(T):
                mb = used[t * B:(t + 1) * B].to(device)
                opt.zero_grad()
                F.cross_entropy(model(x[mb]), y[mb]).backward()
                opt.step()
            sent = apply_defense(p["defense"], [w.detach() for w in model.parameters()], p, g_noise)
            with torch.no_grad():  # the server's next weights are what it received
                for w, s in zip(model.parameters(), sent):
                    w.copy_(s)
            updates.append(Update(before, sent, epoch, rnd))
            membership.append(used.tolist())

    obs = Observation(kind="weights", payload=updates, description=describe(p),
                      context={"rounds_per_epoch": R, "epochs": E, "images_per_update": T * B})
    facts = [
        f"the model architecture ({MODEL_HELP[p['model']]}) and the weights it sent in every round",
        f"how many images each upload was trained on ({T * B}) and the image size "
        f"({p['image_size']}×{p['image_size']}, 3 channels)",
        f"the number of classes ({p['num_classes']}) and the round schedule ({plural(R, 'round')} per epoch)",
    ]
    if p["warmup_steps"]:
        facts.append(f"that the model was trained for {plural(p['warmup_steps'], 'step')} before (its weights show it)")
    extras = {"local_lr": p["local_lr"], "local_steps": T, "minibatch_size": B, "momentum": p["momentum"]}
    extra_facts = {
        "local_lr": f"the client's local learning rate η = {p['local_lr']:g}",
        "local_steps": f"the number of local steps per round ({T})",
        "minibatch_size": f"the mini-batch size ({B})",
        "momentum": f"the client's SGD momentum ({p['momentum']:g})",
    }
    knowledge = Knowledge(model=start, input_shape=tuple(x.shape[1:]), num_classes=p["num_classes"],
                          batch_size=T * B, facts=facts, extras=extras, extra_facts=extra_facts)
    truth = GroundTruth(batch.images.clone(), batch.labels.clone(), batch.names, membership)
    return obs, knowledge, truth
