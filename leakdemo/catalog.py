"""The catalog: every protocol, attack and defense with its parameters and valid combinations.

It is the single source for the CLI (`--set` validation, `list`), the dashboard (widgets) and the docs.
Parameter names are flat and shared where they mean the same thing (`iterations`, `lr`, `dp_sigma`...);
a component may give a shared parameter its own default.
"""
from __future__ import annotations

from .attacks.dlg import dlg, idlg
from .attacks.invgrad import invgrad
from .data import SOURCE_HELP, SOURCES, TORCHVISION_SETS
from .models import MODEL_HELP, MODELS
from .params import Component, Param
from .protocols import fedsgd

DLG_PAPER = "Zhu, Liu, Han. Deep Leakage from Gradients. NeurIPS 2019"
IDLG_PAPER = "Zhao, Mopuri, Bilen. iDLG: Improved Deep Leakage from Gradients. 2020"
IG_PAPER = "Geiping, Bauermeister, Dröge, Moeller. Inverting Gradients. NeurIPS 2020"

# ---------------------------------------------------------------- parameters used by everything

RUN_PARAMS = (
    Param("seed", "int", 0, "seeds the data choice, the model weights, the defense noise and the attack's start",
          low=0, high=2**31 - 1, group="run"),
    Param("device", "choice", "auto", "where to compute: auto takes CUDA when this machine has it",
          choices=("auto", "cpu", "cuda"), group="run"),
)

DATA_PARAMS = (
    Param("data", "choice", "samples", "where the client's private images come from: "
          + "; ".join(f"{k} = {v}" for k, v in SOURCE_HELP.items()), choices=SOURCES, group="data", label="Source"),
    Param("images", "text", "", "comma-separated items of the source (sample names, or indices); "
          "the rest of the batch is picked by the seed", group="data"),
    Param("folder", "text", "", "the image folder when data=folder", group="data"),
    Param("tv_dataset", "choice", "CIFAR10", "the torchvision dataset when data=torchvision",
          choices=TORCHVISION_SETS, group="data", label="Dataset"),
    Param("data_root", "text", "", "where the torchvision dataset already lies (never downloaded)", group="data", label="Data root"),
    Param("image_size", "int", 32, "side of the square images the model takes", low=8, high=128, unit="px",
          group="data"),
)

MODEL_PARAMS = (
    Param("model", "choice", "lenet", "the client's model: " + "; ".join(f"{k} = {v}" for k, v in MODEL_HELP.items()),
          choices=MODELS, group="model"),
    Param("model_init", "choice", "uniform", "weight initialisation: uniform = DLG's U(−0.5, 0.5), "
          "default = PyTorch's", choices=("uniform", "default"), group="model", paper=DLG_PAPER, label="Initialisation"),
    Param("model_width", "int", 0, "channels or hidden units (0 = the model's default)", low=0, high=256,
          group="model"),
    Param("model_depth", "int", 1, "blocks per stage (resnet) or hidden layers (mlp)", low=1, high=4, group="model"),
    Param("num_classes", "int", 100, "classes of the classifier (labels are the source's classes modulo this)",
          low=2, high=1000, group="model", label="Classes"),
)

# ---------------------------------------------------------------- protocols

PROTOCOLS = {
    "fedsgd": Component(
        "protocol", "fedsgd", "FedSGD — shared gradients",
        "Each client computes the gradient of its loss on one private batch at the current weights and "
        "sends it to the server.",
        params=DATA_PARAMS + MODEL_PARAMS + (
            Param("batch_size", "int", 1, "images in the client's batch (larger batches leak less per image)",
                  low=1, high=64, group="protocol", defends=True),
            Param("warmup_steps", "int", 0, "SGD steps the model is trained on other images first "
                  "(trained models leak less)", low=0, high=2000, group="protocol", defends=True, label="Warm-up training steps"),
        ),
        payload="gradients", run=fedsgd.simulate,
        paper="McMahan et al. Communication-Efficient Learning of Deep Networks from Decentralized Data. 2017",
    ),
}

# ---------------------------------------------------------------- attacks

_LBFGS_PARAMS = (
    Param("iterations", "int", 300, "L-BFGS steps (each up to 20 function evaluations)", low=1, high=5000),
    Param("lr", "float", 1.0, "L-BFGS learning rate", low=1e-4, high=10.0, log=True, label="Learning rate"),
    Param("restarts", "int", 3, "fresh random starts the attack may use when its loss stalls or diverges",
          low=0, high=10),
    Param("loop", "choice", "robust", "robust = leakdemo's loop (mid-gray start, label from the gradient, "
          "stall/divergence recovery); original = the published loop, unchanged", choices=("robust", "original"), label="Loop"),
)

_GRADIENT_KNOWLEDGE = (
    "the model architecture and the current weights (the server sent them)",
    "the shared gradient, exactly as the client sent it (after any defense)",
    "the batch size and the image size",
)

ATTACKS = {
    "dlg": Component(
        "attack", "dlg", "DLG — Deep Leakage from Gradients",
        "Optimises a dummy image and a soft label until their gradient matches the shared one (L2, L-BFGS).",
        params=_LBFGS_PARAMS, paper=DLG_PAPER, protocols=("fedsgd",), knowledge=_GRADIENT_KNOWLEDGE,
        run=dlg,
    ),
    "idlg": Component(
        "attack", "idlg", "iDLG — improved DLG",
        "Reads the label off the last layer's gradient (exact for one image), then matches the image only.",
        params=_LBFGS_PARAMS, paper=IDLG_PAPER, protocols=("fedsgd",),
        knowledge=_GRADIENT_KNOWLEDGE + ("that the loss is cross-entropy (its sign pattern reveals the label)",),
        run=idlg,
    ),
    "invgrad": Component(
        "attack", "invgrad", "Inverting Gradients",
        "Matches the gradient's direction (cosine distance) with a total-variation prior, Adam on signed "
        "gradients, images boxed to [0, 1]; works on ReLU networks and small batches.",
        params=(
            Param("iterations", "int", 2000, "Adam steps per start", low=1, high=24000),
            Param("lr", "float", 0.1, "Adam learning rate (divided by 10 at 3/8, 5/8 and 7/8 of the steps)",
                  low=1e-4, high=1.0, log=True, paper=IG_PAPER, label="Learning rate"),
            Param("tv_weight", "float", 1e-2, "weight of the total-variation prior", low=0.0, high=10.0,
                  paper=IG_PAPER, label="Total-variation weight"),
            Param("restarts", "int", 0, "extra random starts; the one with the lowest objective is kept",
                  low=0, high=8, paper=IG_PAPER),
        ),
        paper=IG_PAPER, protocols=("fedsgd",),
        knowledge=_GRADIENT_KNOWLEDGE + ("the labels, inferred from the last layer's gradient",),
        run=invgrad,
    ),
}

# ---------------------------------------------------------------- defenses

_DP_CLIP = Param("dp_clip", "float", 0.0, "clip the payload's L2 norm to this before adding noise (0 = no clipping)",
                 low=0.0, high=1e4, group="defense", label="Clip norm (0 = off)")

DEFENSES = {
    "none": Component("defense", "none", "No defense", "The client sends its payload as computed.",
                      protocols=("fedsgd",), payload="gradients"),
    "dp-gaussian": Component(
        "defense", "dp-gaussian", "Gaussian noise (DP-style)",
        "Clip the payload's norm, then add Gaussian noise to every entry.",
        params=(Param("dp_sigma", "float", 0.01, "standard deviation of the Gaussian noise", low=0.0, high=10.0,
                      log=True, group="defense", label="Noise σ"), _DP_CLIP),
        protocols=("fedsgd",), payload="gradients", paper="Abadi et al. Deep Learning with Differential Privacy. 2016"),
    "dp-laplace": Component(
        "defense", "dp-laplace", "Laplace noise (DP-style)",
        "Clip the payload's norm, then add Laplace noise to every entry.",
        params=(Param("dp_sigma", "float", 0.01, "scale b of the Laplace noise", low=0.0, high=10.0, log=True,
                      group="defense", label="Noise scale b"), _DP_CLIP),
        protocols=("fedsgd",), payload="gradients", paper=DLG_PAPER),
    "prune": Component(
        "defense", "prune", "Gradient pruning",
        "Zero the smallest-magnitude entries of each layer's payload (sparsification).",
        params=(Param("prune_ratio", "float", 0.5, "fraction of entries set to zero in each layer", low=0.0,
                      high=0.999, group="defense", label="Pruned fraction"),),
        protocols=("fedsgd",), payload="gradients", paper=DLG_PAPER),
}

CHOICE_PARAMS = (
    Param("protocol", "choice", "fedsgd", "what the client sends", choices=tuple(PROTOCOLS), group="scenario"),
    Param("attack", "choice", "dlg", "how the server reconstructs the data", choices=tuple(ATTACKS), group="scenario"),
    Param("defense", "choice", "none", "what the client does to its payload before sending it",
          choices=tuple(DEFENSES), group="scenario"),
)

# Known pairs that do not work, shown as warnings (the UI and the CLI print them; they do not block).
KNOWN_BAD = {
    ("invgrad", "lenet"): "Inverting Gradients stalls on the sigmoid LeNet (about 13 dB); use convnet or resnet.",
    ("dlg", "resnet"): "DLG's L2 objective rarely converges on ReLU/BatchNorm nets; try invgrad.",
    ("idlg", "resnet"): "iDLG's L2 objective rarely converges on ReLU/BatchNorm nets; try invgrad.",
}


def components(protocol: str, attack: str, defense: str) -> tuple[Component, Component, Component]:
    return PROTOCOLS[protocol], ATTACKS[attack], DEFENSES[defense]


def attacks_for(protocol: str) -> list[str]:
    return [n for n, a in ATTACKS.items() if protocol in a.protocols]


def defenses_for(protocol: str) -> list[str]:
    return [n for n, d in DEFENSES.items() if protocol in d.protocols]


def params_for(protocol: str, attack: str, defense: str) -> dict[str, Param]:
    """Every parameter that applies to this combination, by name (component defaults win in order)."""
    out = {p.name: p for p in CHOICE_PARAMS + RUN_PARAMS}
    for comp in components(protocol, attack, defense):
        for p in comp.params:
            out[p.name] = p
    return out


def owners(name: str) -> list[str]:
    """Which components declare parameter `name` (for messages like 'applies to dp-gaussian, dp-laplace')."""
    found = []
    for table in (PROTOCOLS, ATTACKS, DEFENSES):
        found += [c.name for c in table.values() if c.param(name)]
    return found


def all_param_names() -> set[str]:
    names = {p.name for p in CHOICE_PARAMS + RUN_PARAMS}
    for table in (PROTOCOLS, ATTACKS, DEFENSES):
        for c in table.values():
            names |= {p.name for p in c.params}
    return names


def describe() -> dict:
    """The whole catalog as plain data (for `list --json`, docs and tests)."""
    def comp(c: Component) -> dict:
        d = {"name": c.name, "title": c.title, "summary": c.summary, "params": [p.describe() for p in c.params]}
        if c.paper:
            d["paper"] = c.paper
        if c.kind != "protocol":
            d["protocols"] = list(c.protocols)
        if c.knowledge:
            d["knowledge"] = list(c.knowledge)
        return d
    return {
        "protocols": [comp(c) for c in PROTOCOLS.values()],
        "attacks": [comp(c) for c in ATTACKS.values()],
        "defenses": [comp(c) for c in DEFENSES.values()],
        "run": [p.describe() for p in RUN_PARAMS],
    }
