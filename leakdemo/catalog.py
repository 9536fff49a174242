"""The catalog: every protocol, attack and defense with its parameters and valid combinations.

It is the single source for the CLI (`--set` validation, `list`), the dashboard (widgets) and the docs.
Parameter names are flat and shared where they mean the same thing (`iterations`, `lr`, `dp_sigma`...);
a component may give a shared parameter its own default.
"""
from __future__ import annotations

import importlib
import math
from dataclasses import replace

from . import device, settings
from .errors import ParamError
from .params import Component, Param
from .settings import MODEL_HELP, MODELS, SOURCE_HELP, SOURCES, TORCHVISION_SETS
from .words import about, duration, plural, value_text


class Implementation:
    """A function of the engine, named here and imported on its first call. The catalog lists every
    protocol and attack without loading them: the web server, which only validates and describes, never
    imports torch (about 500 MB); the worker processes that run them do."""

    def __init__(self, module: str, name: str):
        self.module, self.name = module, name

    def __call__(self, *args, **kwargs):
        return getattr(importlib.import_module(self.module), self.name)(*args, **kwargs)

    def __repr__(self) -> str:
        return f"{self.module}.{self.name}"


def _attack(module: str, name: str | None = None) -> Implementation:
    return Implementation(f"leakdemo.attacks.{module}", name or module)


def _simulation(protocol_module: str) -> Implementation:
    return Implementation(f"leakdemo.protocols.{protocol_module}", "simulate")


DLG_PAPER = "Zhu, Liu, Han. Deep Leakage from Gradients. NeurIPS 2019"
IDLG_PAPER = "Zhao, Mopuri, Bilen. iDLG: Improved Deep Leakage from Gradients. 2020"
IG_PAPER = "Geiping, Bauermeister, Dröge, Moeller. Inverting Gradients. NeurIPS 2020"
DLM_PAPER = "Zhao, Sun, Gao, Wang, Wang, Wang. Deep Leakage from Model in Federated Learning. 2022"
AGIC_PAPER = "Xu, Hong, Huang, Chen, Decouchant. AGIC: Approximate Gradient Inversion Attack on Federated Learning. SRDS 2022"
CAFE_PAPER = "Jin, Chen, Hsu, Yu, Chen, Wang, Liu. CAFE: Catastrophic Data Leakage in Vertical Federated Learning. NeurIPS 2021"
PLI_PAPER = "Takahashi, Liu, Liu. Breaching FedMD: Image Recovery via Paired-Logits Inversion Attack. CVPR 2023"
TBI_PAPER = "Yang, Zhang, Chang, Liang. Neural Network Inversion in Adversarial Setting via Background Knowledge Alignment. CCS 2019"
FEDMD_PAPER = "Li, Wang. FedMD: Heterogenous Federated Learning via Model Distillation. 2019"
DSFL_PAPER = "Itahara, Nishio, Koda, Morikura, Yamamoto. Distillation-Based Semi-Supervised Federated Learning. IEEE TMC 2021"
FEDGEMS_PAPER = "Cheng, Wu, Xiao, Liu. FedGEMS: Federated Learning of Larger Server Models via Selective Knowledge Fusion. 2021"
FEDAVG_PAPER = "McMahan et al. Communication-Efficient Learning of Deep Networks from Decentralized Data. 2017"

# ---------------------------------------------------------------- parameters used by everything

RUN_PARAMS = (
    Param("seed", "int", 0, "seeds the data choice, the model weights, the defense noise and the attack's start",
          low=0, high=2**31 - 1, group="run"),
    Param("device", "choice", "auto", "where to compute: auto takes CUDA when this machine has it",
          choices=("auto", "cpu", "cuda"), group="run",
          shown=(("auto", "Auto (CUDA when present)"), ("cpu", "CPU"), ("cuda", "CUDA GPU"))),
)

DATA_PARAMS = (
    Param("data", "choice", "samples", "where the client's private images come from: "
          + "; ".join(f"{k} = {v}" for k, v in SOURCE_HELP.items()), choices=SOURCES, group="data", label="Source",
          shown=(("samples", "Photos (scikit-image)"), ("digits", "Digits (scikit-learn)"), ("faces", "Faces (LFW)"),
                 ("folder", "Your image folder"), ("torchvision", "A torchvision dataset on disk"))),
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
          choices=MODELS, group="model",
          shown=(("lenet", "LeNet"), ("mlp", "MLP"), ("convnet", "ConvNet"), ("resnet", "ResNet"))),
    Param("model_init", "choice", "uniform", "weight initialisation: uniform = DLG's U(−0.5, 0.5), "
          "default = PyTorch's", choices=("uniform", "default"), group="model", paper=DLG_PAPER, label="Initialisation",
          shown=(("uniform", "Uniform (DLG's)"), ("default", "PyTorch's default"))),
    Param("model_width", "int", 0, "channels or hidden units (0 = the model's default)", low=0, high=256,
          group="model"),
    Param("model_depth", "int", 1, "blocks per stage (resnet) or hidden layers (mlp)", low=1, high=4, group="model"),
    Param("num_classes", "int", 100, "classes of the classifier (labels are the source's classes modulo this)",
          low=2, high=1000, group="model", label="Classes"),
)

# ---------------------------------------------------------------- protocols

_WARMUP = Param("warmup_steps", "int", 0, "SGD steps the model is trained on other images first (trained models "
                "leak less)", low=0, high=2000, group="protocol", defends=True, label="Warm-up training steps")

PROTOCOLS = {
    "fedsgd": Component(
        "protocol", "fedsgd", "FedSGD — shared gradients",
        "Each client computes the gradient of its loss on one private batch at the current weights and "
        "sends it to the server.",
        params=DATA_PARAMS + MODEL_PARAMS + (
            Param("batch_size", "int", 1, "images in the client's batch (larger batches leak less per image)",
                  low=1, high=64, log=True, group="protocol", defends=True),
            Param("clients", "int", 1, "clients in the round, each sending the gradient of its own batch; the "
                  "server sees each gradient apart (no secure aggregation), and DLG or iDLG attacks them all "
                  "at once, one start per client in one vectorised program", low=1, high=256, group="protocol",
                  label="Clients in the round"),
            Param("secure_aggregation", "bool", False, "the server learns only the average of the round's "
                  "gradients, never one client's (secure aggregation): to the attack the round is one batch of "
                  "clients × batch_size images. Needs clients ≥ 2", group="protocol", defends=True,
                  label="Secure aggregation"),
            _WARMUP,
        ),
        payload="gradients", run=_simulation("fedsgd"), receives=settings.fedsgd_receives, paper=FEDAVG_PAPER,
        check=settings.fedsgd_check,
    ),
    "fedavg": Component(
        "protocol", "fedavg", "FedAvg — shared model updates",
        "Each client trains the server's weights for a few local SGD steps on its private data and sends "
        "the new weights back. Many believe this is safe where gradients are not.",
        params=DATA_PARAMS + MODEL_PARAMS + (
            Param("batch_size", "int", 1, "images in each local mini-batch", low=1, high=64, log=True,
                  group="protocol", defends=True, label="Mini-batch size"),
            Param("local_steps", "int", 1, "local SGD steps per round, each on its own mini-batch (more steps "
                  "blur the update)", low=1, high=32, log=True, group="protocol", defends=True),
            Param("local_lr", "float", 0.01, "the client's learning rate η (larger steps make the update "
                  "less like one gradient)", low=1e-6, high=1.0, log=True, group="protocol", defends=True,
                  label="Local learning rate η"),
            Param("momentum", "float", 0.0, "the client's SGD momentum", low=0.0, high=0.99, group="protocol"),
            Param("rounds_per_epoch", "int", 1, "rounds the client needs to go once over its data; its data "
                  "set is rounds_per_epoch × local_steps × batch_size images", low=1, high=8, group="protocol"),
            Param("epochs", "int", 1, "epochs over the client's data that the server observes (AGIC uses "
                  "them all; the others attack the first)", low=1, high=4, group="protocol", paper=AGIC_PAPER),
            Param("shuffle", "bool", True, "reshuffle the local data between epochs (so later rounds mix "
                  "different images)", group="protocol"),
            _WARMUP,
        ),
        payload="weights", run=_simulation("fedavg"), receives=settings.fedavg_receives, paper=FEDAVG_PAPER,
        check=settings.fedavg_check,
    ),
    "vfl": Component(
        "protocol", "vfl", "Vertical FL — parties hold slices of every sample",
        "Each worker holds one tile of every image and a bottom model on it; the server runs the top model, "
        "chooses which sample indices form each batch and receives the workers' gradients. Many believe "
        "large batches keep the samples safe.",
        params=tuple(replace(p, default="digits") if p.name == "data" else
                     replace(p, default=16, low=4) if p.name == "image_size" else p for p in DATA_PARAMS) + (
            Param("n_samples", "int", 200, "private training samples N (every one is a reconstruction target)",
                  low=2, high=2000, group="protocol", label="Training samples N"),
            Param("worker_model", "choice", "slim", "each worker's bottom model: " + "; ".join(
                f"{k} = {v}" for k, v in settings.WORKER_MODEL_HELP.items()), choices=settings.WORKER_MODELS, group="model",
                paper=CAFE_PAPER, label="Worker model",
                shown=(("slim", "Slim CNN (fast)"), ("cafe", "CAFE's CNN"), ("fc", "Fully connected"))),
            Param("model_width", "int", 32, "conv channels of the slim worker model (more channels: a first-FC "
                  "input that pins the image down better)", low=1, high=256, group="model", label="Conv channels"),
            Param("fc_width", "int", 64, "outputs of each worker's first FC layer (d₂)", low=2, high=1024,
                  group="model", label="First FC width d₂"),
            replace(next(p for p in MODEL_PARAMS if p.name == "num_classes"), default=10),
            Param("workers", "int", 4, "parties holding the features: the image is cut into a grid of this many "
                  "tiles (4 → quadrants, 2 → halves)", low=1, high=16, group="protocol", paper=CAFE_PAPER),
            Param("batch_size", "int", 40, "samples per VFL iteration, chosen by the server (larger batches do "
                  "not protect against CAFE)", low=1, high=2000, log=True, group="protocol", defends=True),
            Param("train_lr", "float", 0.0, "Adam learning rate of the federation while it is attacked (0 = the "
                  "model stays fixed, the strongest attack; larger steps blur the equations)", low=0.0, high=0.1,
                  group="protocol", defends=True, paper=CAFE_PAPER, label="Training learning rate"),
        ),
        payload="gradients", run=_simulation("vfl"), receives=settings.vfl_receives, paper=CAFE_PAPER, check=settings.vfl_check,
    ),
}

_LOGIT_PARAMS = (
    Param("data", "choice", "faces", "faces = identities synthesised from scikit-image's LFW faces (views with "
          "small pose, light and noise changes); digits = scikit-learn's ten digits", choices=("faces", "digits"),
          group="data", label="Source", shown=(("faces", "Faces (LFW identities)"), ("digits", "Digits (scikit-learn)"))),
    Param("image_size", "int", 32, "side of the square images (8, 16, 32 or 64: the inversion network doubles "
          "a 4×4 seed; 16 or more on FedGEMS, whose server model pools twice)", low=8, high=64, unit="px",
          group="data"),
    Param("views", "int", 16, "images per class: a quarter are held out for testing, a quarter become the "
          "public insensitive versions, the rest are the owners' private (or public clean) images", low=4,
          high=64, group="data", label="Images per class"),
    Param("num_classes", "int", 40, "identities in the federation (faces; digits always have 10)", low=3,
          high=100, group="data", label="Classes J"),
    Param("target_classes", "int", 10, "private target classes: only clients hold clean images of them; the "
          "public set has only their insensitive versions", low=1, high=99, group="data", paper=PLI_PAPER,
          label="Private target classes"),
    Param("domain_gap", "choice", "mask", "how the public set's insensitive versions D_a differ: mask = the "
          "lower face covered (as in masked LFW); blur = Gaussian blur (easy to undo: the prior alone then "
          "finds most classes)", choices=("mask", "blur"), group="data", paper=PLI_PAPER,
          label="Insensitive domain", shown=(("mask", "Mask (lower face covered)"), ("blur", "Gaussian blur"))),
    Param("clients", "int", 1, "clients K; the target classes are dealt among them (more clients: each "
          "holds fewer, and the server must tell whose reconstruction is right)", low=1, high=20,
          group="protocol", defends=True, paper=PLI_PAPER),
    Param("rounds", "int", 5, "communication rounds (each brings new logits)", low=1, high=20, group="protocol"),
    Param("local_epochs", "int", 5, "epochs of the initial local training (public set, then private data); each round then digests and revisits for the epochs its paper uses (FedMD 1, DS-FL and FedGEMS 2)", low=1,
          high=50, group="protocol"),
    Param("model_width", "int", 16, "conv channels of the clients' (and the server's) classifier", low=1,
          high=128, group="model", label="Conv channels"),
)


def _logit_protocol(name: str, title: str, summary: str, paper: str) -> Component:
    return Component("protocol", name, title, summary, params=_LOGIT_PARAMS, payload="logits",
                     run=_simulation("distillation"), receives=settings.logits_receives, paper=paper,
                     check=settings.logits_check)


PROTOCOLS.update({
    "fedmd": _logit_protocol(
        "fedmd", "FedMD — shared logits on a public set",
        "Clients learn a labelled public set and their private data, and share only their logits on the "
        "public images; the server averages them and clients digest the consensus. No gradients, no "
        "weights — sold as the safe way to federate.", FEDMD_PAPER),
    "ds-fl": _logit_protocol(
        "ds-fl", "DS-FL — distillation on an unlabelled public set",
        "Like FedMD, but the public set has no labels: the server sharpens the averaged predictions "
        "(entropy-reduction aggregation) and clients distil on them.", DSFL_PAPER),
    "fedgems": _logit_protocol(
        "fedgems", "FedGEMS — a larger server model",
        "The server trains a larger model on the public set and on the clients' logits where they are right "
        "and confident; its logits are sent back as the global knowledge.", FEDGEMS_PAPER),
})

LOGIT_PROTOCOLS = ("fedmd", "ds-fl", "fedgems")

# ---------------------------------------------------------------- attacks

_COMPILE = Param("compile", "choice", "auto", "evaluate the objective compiled by torch.compile: with racing "
          "starts on a CPU ~2× (DLG) to 5× (Inverting Gradients) faster per step, but building it takes 1–4 s per "
          "run (up to a minute the first time a shape is seen on a machine; two for a deep ResNet, ~15 s more per "
          "local step of a FedAvg update; Stop ends it), "
          "about what one CPU start saves; auto = on for racing starts and on a GPU (but not for one start of a "
          "one-off `python -m leakdemo run`, whose build, 20–29 s on an H200, costs more than it saves); for one "
          "start on a CPU, on in the dashboard where its worker already holds the build (idle workers build the "
          "dlg and dlm-plus presets' ahead: 30 dB about a third sooner), off otherwise. Falls back to eager, with a "
          "note, where it cannot be built",
          choices=("auto", "on", "off"), label="Compile the objective")
_COMPILE_GPU = Param("compile", "choice", "auto", "evaluate the objective compiled by torch.compile (captured in CUDA "
                     "graphs on a GPU); auto = for racing starts on a GPU only: AGIC's compiled objective is slower "
                     "than its autograd loop on a CPU (~1.4×) and, for one start, on a GPU (H200: 79–81 against 134 "
                     "it/s). Falls back to eager, with a note, where it cannot be built", choices=("auto", "on", "off"),
                     label="Compile the objective")
_COMPILE_IG = Param("compile", "choice", "auto", "evaluate the objective compiled by torch.compile: with racing starts "
                    "on a CPU ~5× faster per step, but building it takes 1–4 s per run (up to a minute the first time a "
                    "shape is seen on a machine; Stop ends it); auto = on for racing starts only: one start on a GPU "
                    "replays its uncompiled evaluation as a CUDA graph, faster with nothing to build (H200: 1330 "
                    "against 784 it/s), and on a CPU its build costs about what it saves. Falls back to eager, with a "
                    "note, where it cannot be built", choices=("auto", "on", "off"), label="Compile the objective")

LBFGS_EVALUATIONS = 20  # per L-BFGS step at most (attacks/lbfgs.py); large models use them all
_LBFGS_PARAMS = (
    Param("iterations", "int", 300, f"L-BFGS steps (each up to {LBFGS_EVALUATIONS} function evaluations)", low=1, high=5000),
    Param("lr", "float", 1.0, "L-BFGS learning rate", low=1e-4, high=10.0, log=True, label="Learning rate"),
    Param("restarts", "int", 3, "fresh random starts the attack may use when a start stalls, creeps down too "
          "slowly to converge, or its loss becomes non-finite (the best estimate of every start is kept)",
          low=0, high=10),
    Param("loop", "choice", "robust", "robust = leakdemo's loop (mid-gray start, label from the gradient, "
          "stall, crawl and divergence recovery); original = the published loop, unchanged", choices=("robust", "original"), label="Loop",
          shown=(("robust", "Robust (leakdemo's)"), ("original", "Original (as published)"))),
    _COMPILE,
)

_TRIALS = Param("trials", "int", 1, "random starts optimised together as one batch (K starts racing, "
               "one vectorised program: on a GPU nearly the price of one); the leading start is shown, the best "
               "is kept. 1 = the sequential loop, which restarts when it stalls", low=1, high=1024,
               label="Racing starts")


def trials_check(p) -> None:
    if p["trials"] == 1:
        return
    if p["loop"] != "robust":
        raise ParamError("trials", f"racing starts need loop=robust (the published loop has one start); got "
                         f"trials={p['trials']}")
    if p["protocol"] not in ("fedsgd", "fedavg"):
        raise ParamError("trials", f"racing starts work on FedSGD gradients and FedAvg updates; got "
                         f"trials={p['trials']} with protocol={p['protocol']}")


def agic_check(p) -> None:
    if p["restarts"] > 0 and p["epochs"] > 1:
        raise ParamError("restarts", f"AGIC's racing starts need epochs=1 (with several epochs each start would "
                         f"need its own cross-epoch pairing); got restarts={p['restarts']} with epochs={p['epochs']}")


def cafe_check(p) -> None:
    if p["cafe_loop"] == "nested" and 2 * p["phase_iterations"] >= p["iterations"]:
        raise ParamError("phase_iterations", f"the nested loop needs 2 × phase_iterations < iterations "
                         f"({p['iterations']}) so Step III gets a turn; got {p['phase_iterations']}")
    terms = ("internal_weight", "gradient_weight", "span_weight", "tv_weight")
    if all(p[t] == 0 for t in terms):  # Step III had nothing to minimise: "internal error (… does not require grad)"
        raise ParamError("internal_weight", "Step III needs a term to minimise: set one of internal_weight (γ), "
                         "gradient_weight (α), span_weight (ρ) or tv_weight (β) above 0; all are 0")
    if p["span_weight"] > 0 and p["fc_width"] < p["batch_size"]:
        raise ParamError("span_weight", f"the row-space term needs fc_width ≥ batch_size (the first FC layer's "
                         f"gradient has rank ≤ fc_width, so only then do its rows span every sample of a batch); "
                         f"got fc_width {p['fc_width']} < batch_size {p['batch_size']}")


def pli_check(p) -> None:
    if p["protocol"] == "ds-fl" and p.get("prior") == "restored":
        raise ParamError("prior", "restored needs the public labels, which ds-fl does not have: choose auto "
                         "or mean")


_INVERSION_PARAMS = (
    Param("inversion_epochs", "int", 10, "epochs the inversion network trains on each round's logits",
          low=1, high=500, paper=PLI_PAPER, label="Inversion epochs per round"),
    Param("lr", "float", 1e-3, "Adam learning rate of the inversion network (weight decay 1e-4)", low=1e-5,
          high=0.1, log=True, paper=PLI_PAPER, label="Learning rate"),
    Param("temperature", "float", 3.0, "τ: softmax temperature applied to the logits (higher: more of the "
          "non-top classes survive — accuracy up, image quality down)", low=0.05, high=50.0, log=True,
          paper=PLI_PAPER, label="Temperature τ"),
    Param("inversion_width", "int", 32, "channels of the inversion network's last layer (×2, ×4 before)",
          low=4, high=256, label="Inversion network width"),
)


def _adam_lr(paper: str, note: str = "") -> Param:
    return Param("lr", "float", 0.1, f"Adam learning rate (divided by 10 at 3/8, 5/8 and 7/8 of the steps){note}",
                 low=1e-4, high=1.0, log=True, paper=paper, label="Learning rate")


def _tv_weight(default: float, paper: str, symbol: str = "", note: str = "") -> Param:
    return Param("tv_weight", "float", default, f"weight of the total-variation prior{symbol}{note}", low=0.0,
                 high=10.0, paper=paper, label=f"Total-variation weight{symbol}")


_GRADIENT_KNOWLEDGE = (
    "the model architecture and the current weights (the server sent them)",
    "the shared gradient, exactly as the client sent it (after any defense)",
    "the batch size and the image size",
)

# what DLM and DLM+ are told of the client's schedule to replay several local steps (never η: see attacks/dlm.py)
LOCAL_SCHEDULE = ("local_steps", "minibatch_size", "momentum")
_WEIGHT_KNOWLEDGE = (
    "the model architecture and the weights it sent in every round",
    "the weights the client uploaded after every round (after any defense)",
    "how many images each upload used, and the image size",
)
_DLM_LABELS = ("a first guess at the soft labels, read off the last layer's part of each update (over several local "
               "steps it says which labels a round held, not which step saw which: each image starts undecided "
               "among its round's)")

ATTACKS = {
    "dlg": Component(
        "attack", "dlg", "DLG — Deep Leakage from Gradients",
        "Optimises a dummy image and a soft label until their gradient matches the shared one (L2, L-BFGS).",
        params=_LBFGS_PARAMS + (_TRIALS,), check=trials_check, paper=DLG_PAPER, protocols=("fedsgd", "vfl"), knowledge=_GRADIENT_KNOWLEDGE,
        run=_attack("dlg"),
    ),
    "idlg": Component(
        "attack", "idlg", "iDLG — improved DLG",
        "Reads the label off the last layer's gradient (exact for one image), then matches the image only.",
        params=_LBFGS_PARAMS + (_TRIALS,), check=trials_check, paper=IDLG_PAPER, protocols=("fedsgd",),
        knowledge=_GRADIENT_KNOWLEDGE + ("that the loss is cross-entropy (its sign pattern reveals the label)",),
        run=_attack("dlg", "idlg"),
    ),
    "invgrad": Component(
        "attack", "invgrad", "Inverting Gradients",
        "Matches the gradient's direction (cosine distance) with a total-variation prior, Adam on signed "
        "gradients, images boxed to [0, 1]; works on ReLU networks and small batches.",
        params=(
            Param("iterations", "int", 2000, "Adam steps per start", low=1, high=24000),
            _adam_lr(IG_PAPER),
            _tv_weight(1e-2, IG_PAPER),
            Param("restarts", "int", 0, "extra random starts, run together as one batch (racing; the page can "
                  "show them all); the one with the lowest objective is kept", low=0, high=8, paper=IG_PAPER),
            _COMPILE_IG,
        ),
        paper=IG_PAPER, protocols=("fedsgd",),
        knowledge=_GRADIENT_KNOWLEDGE + ("the labels, inferred from the last layer's gradient",),
        run=_attack("invgrad"),
    ),
    "dlm": Component(
        "attack", "dlm", "DLM — Deep Leakage from Model",
        "Treats the weight change as an unknown multiple of the gradient: fits a dummy image, a soft label "
        "and the scale k (ideally 1/η) jointly. Its start k₀ decides whether it finds the data or the "
        "trivial fit ∇W = 0, k = 0 — the learning-rate trap.",
        params=_LBFGS_PARAMS + (
            Param("k_init", "float", 1.0, "the scale k's starting value (ideally 1/η, which the attacker does "
                  "not know)", low=1e-3, high=1e6, log=True, paper=DLM_PAPER, label="Start of k (≈ 1/η)"),
            _TRIALS,
        ),
        check=trials_check, paper=DLM_PAPER, protocols=("fedavg",), needs=LOCAL_SCHEDULE,
        knowledge=_WEIGHT_KNOWLEDGE + (_DLM_LABELS, "not the learning rate η: the scale k stands in for 1/η",),
        run=_attack("dlm"),
    ),
    "dlm-plus": Component(
        "attack", "dlm-plus", "DLM+ — normalised model leakage",
        "Divides the dummy gradient and the weight change by their norms, so the learning rate drops out "
        "(with one global norm this is a cosine attack); image and soft label fitted with L-BFGS.",
        params=_LBFGS_PARAMS + (
            Param("norm", "choice", "global", "global = one L2 norm over all layers (= 2 − 2·cos); layer-mean = "
                  "the mean of per-layer norms, as in the authors' code", choices=("global", "layer-mean"),
                  paper=DLM_PAPER, label="Normalisation",
                  shown=(("global", "Global L2 norm"), ("layer-mean", "Mean of per-layer norms"))),
            _tv_weight(0.0, DLM_PAPER, note=" (helps batches)"),
            _TRIALS,
        ),
        check=trials_check, paper=DLM_PAPER, protocols=("fedavg",), needs=LOCAL_SCHEDULE,
        knowledge=_WEIGHT_KNOWLEDGE + (_DLM_LABELS, "not the learning rate η: the normalisation removes it",),
        run=_attack("dlm", "dlm_plus"),
    ),
    "agic": Component(
        "attack", "agic", "AGIC — approximate gradient inversion",
        "Treats all local steps of a round as one step on their union (∇W ≈ ΔW/η), so one gradient "
        "evaluation per iteration however many steps there were; layer-weighted cosine (deeper conv layers "
        "count more, ReLU zeros compensated) + TV. With several epochs observed it pairs the images across "
        "epochs and reconstructs them jointly.",
        params=(
            Param("iterations", "int", 1000, "Adam steps of the (joint) reconstruction", low=1, high=24000),
            _adam_lr(AGIC_PAPER, "; with several epochs the joint reconstruction, which starts from the "
                     "pre-reconstructions, starts at a tenth of it"),
            _tv_weight(1e-2, AGIC_PAPER, " ζ"),
            Param("beta", "float", 50.0, "ratio β of the last conv layer's weight to the first's (50 untrained, "
                  "2 trained; 1 = equal weights)", low=1.0, high=200.0, paper=AGIC_PAPER, label="Layer-weight ratio β"),
            Param("relu_modifier", "bool", True, "multiply each conv layer's weight by 1/(1 − its share of zero "
                  "gradient entries), on ReLU networks", paper=AGIC_PAPER, label="ReLU zero modifier"),
            Param("pre_iterations", "int", 300, "Adam steps of each epoch's pre-reconstruction (only when "
                  "several epochs are observed)", low=1, high=10000, paper=AGIC_PAPER),
            Param("epoch_weight", "float", 0.1, "weight γ of the rounds after the first epoch in the joint "
                  "reconstruction (the first epoch has 1)", low=0.0, high=1.0, paper=AGIC_PAPER, label="Later-epoch weight γ"),
            Param("match_labels", "bool", True, "pair images across epochs only when their inferred labels "
                  "agree (while such pairs remain)", paper=AGIC_PAPER, label="Match by label"),
            Param("restarts", "int", 0, "extra random starts, run together as one batch (racing; the page can "
                  "show them all); the one with the lowest objective is kept. One observed epoch only",
                  low=0, high=8),
            _COMPILE_GPU,
        ),
        check=agic_check, paper=AGIC_PAPER, protocols=("fedavg",), needs=("local_lr", "local_steps", "minibatch_size"),
        knowledge=_WEIGHT_KNOWLEDGE + ("the labels, inferred from the last layer's part of each update",),
        run=_attack("agic"),
    ),
    "invgrad-fedavg": Component(
        "attack", "invgrad-fedavg", "Simulation (Inverting Gradients on FedAvg)",
        "The baseline: replays the client's local SGD steps on dummy mini-batches and matches the simulated "
        "weight change to the observed one (cosine + TV). Each iteration differentiates through every local "
        "step, so it slows down as steps are added.",
        params=(
            Param("iterations", "int", 1000, "Adam steps", low=1, high=24000),
            _adam_lr(IG_PAPER),
            _tv_weight(1e-2, IG_PAPER),
        ),
        paper=IG_PAPER, protocols=("fedavg",), needs=("local_lr", "local_steps", "minibatch_size", "momentum"),
        knowledge=_WEIGHT_KNOWLEDGE + ("the labels, inferred from the last layer's part of each update "
                                       "(dealt to the local steps in sorted order)",),
        run=_attack("simulation", "invgrad_fedavg"),
    ),
    "cafe": Component(
        "attack", "cafe", "CAFE — catastrophic data leakage in vertical FL",
        "Uses the batch indices the server chooses to untangle the aggregated gradients sample by sample: "
        "Step I recovers each sample's gradient at the first FC layer, Step II that layer's input, Step III "
        "the images (internal-representation match + truncated TV, optionally gradient matching; on a model "
        "that keeps training, gradient matching + a row-space term: preset cafe-training). Every sample of the "
        "training set comes back, however large the batch.",
        params=(
            Param("iterations", "int", 2000, "VFL iterations attacked (one batch each)", low=1, high=100000),
            Param("cafe_loop", "choice", "single", "single = one update of Steps I, II and III per iteration "
                  "(Algorithm 4, faster); nested = Step I alone, then Step II, then Step III (Algorithm 3)",
                  choices=("single", "nested"), paper=CAFE_PAPER, label="Loop",
                  shown=(("single", "Single (Algorithm 4)"), ("nested", "Nested (Algorithm 3)"))),
            Param("phase_iterations", "int", 300, "nested loop: iterations of Step I alone, then of Step II alone",
                  low=1, high=50000, paper=CAFE_PAPER),
            Param("solver", "choice", "least-squares", "Steps I–II: least-squares = solve exactly over all "
                  "equations received so far (fast; on a training model Step I projects onto each new batch "
                  "instead); sgd = the paper's gradient steps", choices=("least-squares", "sgd"),
                  label="Step I–II solver", shown=(("least-squares", "Least squares"), ("sgd", "SGD (the paper's)"))),
            Param("lr_step1", "float", 1.0, "Step I step size (sgd: 1 = project onto the batch's sums)", low=0.0,
                  high=2.0, paper=CAFE_PAPER, label="Step I step size"),
            Param("lr_step2", "float", 1.0, "Step II step size (least-squares: 1 = project onto the batch's "
                  "equations; sgd: relative to the batch's curvature)", low=0.0, high=2.0, paper=CAFE_PAPER,
                  label="Step II step size"),
            Param("lr", "float", 1.0, "Step III Adam learning rate (each sample's pixels move only when its batch "
                  "comes round; images are boxed to [0, 1])", low=1e-4, high=2.0, log=True, paper=CAFE_PAPER, label="Step III learning rate"),
            Param("internal_weight", "float", 1.0, "γ: weight of the internal-representation term Σ‖ĥ − h(x̂)‖² "
                  "(0 = the paper's ablation, which collapses)", low=0.0, high=100.0, paper=CAFE_PAPER,
                  label="Internal-representation weight γ"),
            Param("gradient_weight", "float", 0.0, "α: weight of gradient matching, relative (‖∇ − ∇̂‖²/‖∇‖²); "
                  "costs a second backward pass", low=0.0, high=100.0, paper=CAFE_PAPER, label="Gradient-matching weight α"),
            Param("span_weight", "float", 0.0, "ρ: holds each recovered sample's first-FC input in the span of the "
                  "current batch's first-FC weight gradient (exact at the current weights, so it survives "
                  "training, where Steps I–II go stale; our addition, needs fc_width ≥ batch_size)", low=0.0,
                  high=100.0, label="Row-space weight ρ"),
            Param("lr_decay", "float", 1.0, "Step III learning rate at the last iteration, as a fraction of `lr` "
                  "(exponential decay; 1 = constant, as in the paper)", low=1e-3, high=1.0, log=True,
                  label="Step III learning-rate decay"),
            _tv_weight(1e-3, CAFE_PAPER, " β", " (counted only above ξ)"),
            Param("tv_threshold", "float", 0.05, "ξ: an image's TV (mean absolute neighbour difference) below "
                  "this is not penalised, so edges are not blurred", low=0.0, high=2.0, paper=CAFE_PAPER,
                  label="TV threshold ξ"),
        ),
        paper=CAFE_PAPER, protocols=("vfl",),
        knowledge=("the whole model and its weights (it runs the top model; the workers' gradients update theirs)",
                   "the workers' gradients for every batch (after any defense)",
                   "which sample indices each batch holds — it chooses them (data index alignment)"),
        run=_attack("cafe"), check=cafe_check,
    ),
    "pli": Component(
        "attack", "pli", "PLI — paired-logits inversion",
        "Trains an inversion network per client on pairs (server softmax, client softmax) of the clean public "
        "images, then asks it for the pair a private class should give: the client certain, the server unsure "
        "(the confidence gap, closed form). A prior from the public insensitive images regularises it; of "
        "several clients the most distinct, cleanest reconstruction wins.",
        params=_INVERSION_PARAMS + (
            Param("prior_weight", "float", 0.03, "γ: pull towards the prior image of each class (higher: cleaner "
                  "images, fewer distinctive features)", low=0.0, high=10.0, paper=PLI_PAPER, label="Prior weight γ"),
            Param("prior", "choice", "auto", "the prior x̄: restored = per class, the mean of its insensitive "
                  "public images deblurred (Richardson–Lucy) or inpainted (needs labels); mean = the mean clean "
                  "public image; auto = restored when the public set is labelled", choices=("auto", "restored", "mean"),
                  paper=PLI_PAPER, label="Prior",
                  shown=(("restored", "Restored per class"), ("mean", "Mean public image"))),
            Param("alpha", "float", 5.0, "α: weight of the server's entropy in Q (sets how unsure the optimal "
                  "server output is)", low=0.1, high=100.0, log=True, paper=PLI_PAPER, label="Entropy weight α"),
            Param("beta", "float", 0.1, "β: TV weight when choosing the best client's reconstruction", low=0.0,
                  high=10.0, paper=PLI_PAPER, label="Client-choice TV weight β"),
            Param("compare_tbi", "bool", True, "also train the TBI baseline alongside and show it beside PLI",
                  label="Show the TBI baseline"),
        ),
        paper=PLI_PAPER, protocols=LOGIT_PROTOCOLS, check=pli_check,
        knowledge=("every client's logits on the public images, every round (after any defense)",
                   "the public images, and which classes are the private targets",
                   "its own model's logits on the public images"),
        run=_attack("pli"),
    ),
    "tbi": Component(
        "attack", "tbi", "TBI — training-based inversion (baseline)",
        "Trains one inversion network from the clients' logits to the image over the whole public set, then "
        "asks it for each private class's one-hot output. It learns what the public (blurred or masked) "
        "images of a class look like.",
        params=_INVERSION_PARAMS, paper=TBI_PAPER, protocols=LOGIT_PROTOCOLS,
        knowledge=("every client's logits on the public images, every round (after any defense)",
                   "the public images, and which classes are the private targets"),
        run=_attack("pli", "tbi"),
    ),
}

# ---------------------------------------------------------------- defenses

_DP_CLIP = Param("dp_clip", "float", 0.0, "clip the payload's L2 norm to this before adding noise (0 = no clipping)",
                 low=0.0, high=1e4, group="defense", label="Clip norm (0 = off)")

DEFENSES = {
    "none": Component("defense", "none", "No defense", "The client sends its payload as computed.",
                      protocols=("fedsgd", "fedavg", "vfl") + LOGIT_PROTOCOLS, payload="any"),
    "dp-gaussian": Component(
        "defense", "dp-gaussian", "Gaussian noise (DP-style)",
        "Clip the payload's norm (the gradient, or the uploaded weights), then add Gaussian noise to every entry.",
        params=(Param("dp_sigma", "float", 0.01, "standard deviation of the Gaussian noise", low=0.0, high=10.0,
                      log=True, group="defense", label="Noise σ"), _DP_CLIP,
                Param("dp_delta", "float", 1e-5, "δ of the (ε, δ) guarantee reported when the payload is clipped "
                      "(the chance the bound fails; keep it below 1/N)", low=1e-12, high=0.1, log=True,
                      group="defense", label="δ")),
        protocols=("fedsgd", "fedavg", "vfl"), payload="any", paper="Abadi et al. Deep Learning with Differential Privacy. 2016"),
    "dp-laplace": Component(
        "defense", "dp-laplace", "Laplace noise (DP-style)",
        "Clip the payload's norm (the gradient, or the uploaded weights), then add Laplace noise to every entry.",
        params=(Param("dp_sigma", "float", 0.01, "scale b of the Laplace noise", low=0.0, high=10.0, log=True,
                      group="defense", label="Noise scale b"), _DP_CLIP),
        protocols=("fedsgd", "fedavg", "vfl"), payload="any", paper=DLG_PAPER),
    "prune": Component(
        "defense", "prune", "Magnitude pruning",
        "Zero the smallest-magnitude entries of each layer of the payload — the gradient (FedSGD) or the "
        "uploaded weights (FedAvg) — before sending it (sparsification).",
        params=(Param("prune_ratio", "float", 0.5, "fraction of entries set to zero in each layer", low=0.0,
                      high=0.999, group="defense", label="Pruned fraction"),),
        protocols=("fedsgd", "fedavg", "vfl"), payload="any", paper=DLG_PAPER),
    "fake-gradients": Component(
        "defense", "fake-gradients", "Fake gradients (CAFE's defense)",
        "Each worker uploads a fake gradient that keeps the true one's signs and magnitude ranking but takes "
        "its magnitudes from sorted Gaussian noise where they are larger (appendix Algorithm 5, magnitude "
        "version): the attacker's equations no longer hold, while training still descends.",
        params=(Param("fake_sigma", "float", 1.05, "σ of the fake magnitudes, in units of each layer's gradient "
                      "RMS (the paper's σ² = 1.1; smaller: more entries replaced)", low=1e-3, high=10.0, log=True, group="defense",
                      paper=CAFE_PAPER, label="Fake σ"),
                Param("fake_candidates", "int", 1000, "ν: sorted noise vectors to pick the nearest from",
                      low=1, high=10000, group="defense", paper=CAFE_PAPER, label="Candidates ν")),
        protocols=("vfl",), payload="any", paper=CAFE_PAPER),
    "logit-noise": Component(
        "defense", "logit-noise", "Noise on logits",
        "Each client adds Gaussian noise to every logit it shares.",
        params=(Param("logit_sigma", "float", 1.0, "standard deviation of the noise, in logit units", low=0.0,
                      high=100.0, log=True, group="defense", label="Noise σ"),),
        protocols=LOGIT_PROTOCOLS, payload="logits"),
    "logit-rounding": Component(
        "defense", "logit-rounding", "Rounded logits",
        "Each client quantises its logits to multiples of a step before sharing them.",
        params=(Param("logit_step", "float", 1.0, "the quantisation step, in logit units", low=1e-3, high=100.0,
                      log=True, group="defense", label="Step"),),
        protocols=LOGIT_PROTOCOLS, payload="logits"),
    "top-k": Component(
        "defense", "top-k", "Top-k only",
        "Each client shares only its k most likely classes' logits; the other classes share one even logit that "
        "keeps their total probability, spread evenly over them.",
        params=(Param("top_k", "int", 1, "classes shared per image", low=1, high=1000, group="defense",
                      label="k"),),
        protocols=LOGIT_PROTOCOLS, payload="logits"),
    "logit-temperature": Component(
        "defense", "logit-temperature", "Flattened logits (temperature)",
        "Each client divides its logits by a temperature before sharing them (flatter, less confident outputs).",
        # below 1 the logits would grow sharper, the opposite of this defense (clients' accuracy fell from 0.60
        # to 0.20 on pli-digits at 0.1 and 0.5): not offered
        params=(Param("send_temperature", "float", 10.0, "the divisor (1 = the logits as they are; larger: flatter)",
                      low=1.0, high=1000.0, log=True,
                      group="defense", label="Temperature"),),
        protocols=LOGIT_PROTOCOLS, payload="logits"),
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


def short_of_the_paper(p) -> str | None:
    """Said before a run whose setting our offline data cannot bring to its paper's figure (README, "Fidelity"),
    with the closest setting that does better — a class switching to DS-FL saw PLI tie TBI and nothing more."""
    if (p.get("attack") == "pli" and p.get("protocol") == "ds-fl" and p.get("data") == "faces"
            and p.get("target_classes", 0) * 5 > p.get("num_classes", 0)):
        return ("PLI on DS-FL does not beat TBI on our offline faces (seeds 1–3: PLI 0.40 / 0.20 / 0.20, TBI 0.30 / "
                "0.30 / 0.40), where the paper reports 99.5 % against 73.5 % on 1,000 LFW identities with many photos "
                "each: DS-FL's models know only the private identities, and PLI's inversion network, trained on the "
                "clean photos of the few other identities we have, draws a lookalike among them. Closest to the "
                "paper, 1 private identity in 5 (num_classes=100, target_classes=20; about 1.5 min on 2 cores): PLI "
                "0.75 / 0.55 / 0.80 against TBI 0.65 / 0.60 / 0.65.")
    return None


ENOUGH_EQUATIONS = 2  # numbers per unknown a LeNet gradient needed for DLG to recover its images (measured, below)


def too_few_equations(p) -> str | None:
    """Said before a run whose gradient holds fewer than twice as many numbers as its images have pixel values —
    DLG's LeNet at 64 px, or on a batch of 2 or more at 32 px. Below 1× many images give the same gradient, so an
    attack that only matches it cannot single out the private ones; between 1× and 2× our runs half-recover them.
    Measured on 2 cores, 300 steps (DLG unless named; numbers per unknown → PSNR): 0.81 (DLM+, 5 local steps)
    11.7 dB, 0.90 (width 6) 11.9, 0.92 (64 px; iDLG 12.8, DLM+ 12.2) 12.2, 0.94 (batch 4) 11.4; 1.17 (batch 3)
    16.4, 1.44 (width 8) 15.1, 1.48 (64 px, width 16) 16.8, 1.61 (batch 2) 21.4, 1.70 (16 px, batch 8) 20.7; 2.03
    (batch 2, width 14) 36.4, 2.18 (64 px, width 20) 40.2, 2.93 (the preset) 50+, 3.00 (64 px, width 24) 58.6,
    3.03 (16 px, batch 4) 47.7. A FedAvg update over several local steps needs more than its count — DLM+ on 5
    steps stayed at 13.3 dB with 2.00 per unknown (width 21) — so there only the count below 1× is said, and
    only fewer images per update is offered. Only the LeNet's count is worked out (settings.lenet_equations);
    AGIC, which pairs several rounds, is left out."""
    found = None if p.get("attack") == "agic" else settings.lenet_equations(p)
    if not found or found[0] >= ENOUGH_EQUATIONS * found[1]:
        return None
    numbers, unknowns, n = found
    ratio, steps = numbers / unknowns, p["protocol"] == "fedavg" and n > 1
    if steps and ratio >= 1:
        return None
    what = "update" if p["protocol"] == "fedavg" else "gradient"
    def enough(**change) -> bool:
        return settings.equations_per_unknown(p, **change) >= ENOUGH_EQUATIONS
    width = None if steps else next((w for w in range(1, 257) if enough(width=w)), None)
    averaged = settings.clients_apart(p) < settings.round_clients(p)  # secure aggregation: 2 clients at least
    knob = "local_steps × batch_size" if p["protocol"] == "fedavg" else "clients × batch_size" if averaged else "batch_size"
    fewer = max((k for k in range(1 + averaged, n) if enough(images=k)), default=0)
    remedies = ([f"model_width={width} or more"] if width else []) + (
        [f"at most {plural(fewer, 'image')} per {what} ({knob})"] if fewer else [])
    lead = (f"Fewer equations than unknowns ({ratio:.2f} per unknown): many "
            f"{'images' if n == 1 else 'batches'} give the same {what}, so an attack that only matches it cannot single "
            f"out the private {'one' if n == 1 else 'ones'}" if ratio < 1 else
            f"Few equations for the unknowns ({ratio:.2f} per unknown)")
    measured = ("an update over several local steps needs more than its count: DLM+ on 5 steps stayed at 13 dB "
                "with 2.00 per unknown" if steps else
                "in our runs (DLG, iDLG, DLM+, 16–64 px, 1–8 images) attacks reached about 12 dB below one number per "
                "unknown, 15–21 dB below two, and 36 dB or more from two")
    return (f"{lead}. One {what} of the LeNet holds about {numbers:,} numbers for the {unknowns:,} pixel values of "
            f"{'its image' if n == 1 else f'its {n} images'}; {measured}"
            + (f". Two per unknown: {' or '.join(remedies)}" if remedies else ""))


MANY_TRIALS = 64
MANY_CLIENTS = 16
CLIENT_STEP_S = 0.04  # a step's cost per client on the 2-core CPU at 32 px (measured: bench dlg --set clients=10, 38 ms)


SLOW_RUN_S = 600  # a run the class would wait more than 10 minutes for, at the fastest we measured
GMAC_SECONDS = (0.14, 0.47)  # one evaluation of a gradient-matching objective, per image and 10⁹ multiply-adds of the
# model's forward pass, 2 cores (Inverting Gradients' steps, 64–128 px: ConvNet w256 0.14, LeNet w256 0.17, ResNet
# w32/w64 0.45–0.47; DLG's L-BFGS step on the ResNet w32 at 64 px took 20 evaluations' time, 1.84 s)


def model_cost(p) -> str | None:
    """Said before a run of an image attack whose model is so large that, on 2 CPU cores, it would take more than
    SLOW_RUN_S even at the fastest rate measured — a ResNet at model_width=256 and 128 px showed 'Iteration 0 /
    300' for minutes: ~50 G multiply-adds a pass, ~12–39 h for DLG's 300 steps. Offers the largest model_width
    and image_size that run within it (settings.forward_macs counts without torch)."""
    cost = _objective_cost(p)
    if cost is None or cost[0] * GMAC_SECONDS[0] * cost[1] < SLOW_RUN_S:
        return None
    gmacs, evaluations, lbfgs, passes = cost

    def fits(**change) -> bool:
        smaller = _objective_cost({**p, **change})
        return smaller[0] * GMAC_SECONDS[0] * evaluations < SLOW_RUN_S
    width = p.get("model_width") or settings.MODEL_WIDTHS[p["model"]]
    narrower = max((w for w in range(1, width) if fits(model_width=w)), default=None)
    smaller = max((s for s in range(8, p["image_size"]) if fits(image_size=s)), default=None)
    remedies = ([f"model_width ≤ {narrower}"] if narrower else []) + ([f"image_size ≤ {smaller}"] if smaller else [])
    low, high = (gmacs * g for g in GMAC_SECONDS)
    steps = (f"{p['iterations']} L-BFGS steps of up to {LBFGS_EVALUATIONS} evaluations" if lbfgs else
             plural(p['iterations'], 'step'))
    shape = ", ".join([f"model_width={p['model_width']}"] * bool(p.get("model_width"))
                      + [f"model_depth={p['model_depth']}"] * (p.get("model_depth", 1) > 1))
    return (f"A large model for a CPU: one pass of {settings.MODEL_NAMES[p['model']]}"
            f"{f' ({shape})' if shape else ''} over a {p['image_size']} px image takes {gmacs / passes:.1f} G "
            f"multiply-adds, so on 2 CPU cores each evaluation of the attack's objective"
            f"{f' ({passes} such passes)' if passes > 1 else ''} takes ~{_span(low, high)} and {steps} "
            f"~{_span(low * evaluations, high * evaluations)}. Built for a GPU; under {SLOW_RUN_S // 60} minutes on "
            "a CPU: " + (" or ".join(remedies) if remedies else "a smaller model_width and image_size"))


# one CAFE iteration on 2 CPU cores: VFL_STEP_S + seconds per 10⁹ multiply-adds of its batch's forward pass (measured,
# batch 40 unless named: slim 16 px 0.021 s, 64 px 0.194, 96 px 0.50, 128 px 0.78, width 128 0.047, batch 1000 0.26;
# CAFE's net 16 px 0.062, 64 px 0.54; fc 128 px 0.21). A defense on every upload costs half as much again (prune,
# 128 px: 1.19 s), and the training-loss check after the attack as much as VFL_CHECK_ITERATIONS more iterations
# (128 px: 50 s; 124 s with a defense, whose check trains twice)
VFL_STEP_S = 0.009
VFL_GMAC_SECONDS = {"slim": 0.87, "cafe": 0.16, "fc": 1.7}
VFL_CHECK_ITERATIONS = (60, 100)  # undefended, defended


def vfl_cost(p) -> str | None:
    """Said before a CAFE run that would take more than SLOW_RUN_S on 2 CPU cores — image_size=128 showed its
    frames at 0.8 s each and finished after about 27 minutes, with no word before — with the largest image_size
    and the most iterations that fit (settings.vfl_forward_macs counts without torch)."""
    if p.get("protocol") != "vfl" or p.get("attack") != "cafe":
        return None
    defended = p.get("defense", "none") != "none"

    def cost(**change) -> tuple[float, float]:
        q = {**p, **change}
        step = (VFL_STEP_S + VFL_GMAC_SECONDS[q["worker_model"]] * settings.vfl_forward_macs(q) * q["batch_size"]
                / 1e9) * (1.5 if defended else 1)
        return step, step * (q["iterations"] + VFL_CHECK_ITERATIONS[defended])
    step, total = cost()
    if total < SLOW_RUN_S:
        return None
    rows, cols = settings.tile_grid(p["workers"])
    smaller = max((s for s in range(4, p["image_size"]) if s % rows == 0 and s % cols == 0 and s // max(rows, cols) >= 2
                   and cost(image_size=s)[1] < SLOW_RUN_S), default=None)
    fewer = _two_digits_down(int(SLOW_RUN_S / step) - VFL_CHECK_ITERATIONS[defended])  # 690, not 696
    remedies = ([f"image_size ≤ {smaller}"] if smaller else []) + ([f"iterations ≤ {fewer}"] if fewer >= 1 else []) + (
        ["worker_model=slim"] if p["worker_model"] != "slim" and cost(worker_model="slim")[1] < SLOW_RUN_S else [])
    each = f"{step * 1000:.0f} ms" if step < 0.1 else f"{step:.1f} s"
    return (f"A slow setting for a CPU: each CAFE iteration, on a batch of {plural(p['batch_size'], 'image')} of "
            f"{p['image_size']} px, takes about {each} on 2 CPU cores, so "
            f"{plural(p['iterations'], 'iteration')} and the training-loss check after them take about "
            f"{about(total)}. Built for a GPU; under {SLOW_RUN_S // 60} minutes on a CPU: "
            + (" or ".join(remedies) if remedies else "a smaller image_size, batch_size and iterations"))


# what PLI's and TBI's runs cost on 2 CPU cores, fitted to 26 whole runs (seed 0; each logit-sharing knob at its
# preset's value and at its largest, 2–150 s each) and within 25 % on 9 of 11 more (16 px runs: up to 1.8× high):
# a fixed start, per training step of an inversion network (a batch of 16, all its copies), per 10⁹ multiply-adds
# of those steps (forward and backward), per SSIM that Eq. 11 compares each epoch (32 px), per 10⁹ multiply-adds
# of the federation's training
LOGIT_START_S = 1.1
INVERSION_STEP_S = 0.0051
INVERSION_GMAC_S = 0.015
CHOICE_SSIM_S = 0.00055
FEDERATION_GMAC_S = 0.19


def logit_run_seconds(p) -> tuple[float, float]:
    """A PLI or TBI run's seconds on 2 CPU cores: the inversion networks' training (every round's epochs, TBI's
    alongside where shown, Eq. 11's choice among several clients after each epoch), and the rest (the federation's
    training before and between rounds, the start)."""
    split, classes, k = settings.identity_split(p), settings.logit_classes(p), p["clients"]
    size, width, epochs = p["image_size"], p["inversion_width"], p["rounds"] * p["inversion_epochs"]
    paired, baseline = p["attack"] == "pli", p["attack"] == "tbi" or p.get("compare_tbi", False)
    steps = (math.ceil(split["clean"] / 16) if paired else 0) + (math.ceil(split["public"] / 16) if baseline else 0)
    macs = 3 * ((split["clean"] * k * settings.inverter_macs(2 * classes, size, width) if paired else 0)
                + (split["public"] * settings.inverter_macs(classes, size, width) if baseline else 0))
    choices = p["target_classes"] * k * (k - 1) / 2 * (size / 32) ** 2 if paired else 0
    epoch = steps * INVERSION_STEP_S + macs / 1e9 * INVERSION_GMAC_S + choices * CHOICE_SSIM_S
    client_epochs = p["local_epochs"] + p["rounds"] * settings.ROUND_EPOCHS[p["protocol"]]
    trained = (client_epochs * (split["public"] + split["private"]) * k  # the clients' images, then the server's
               + (p["local_epochs"] + p["rounds"]) * split["public"])
    rest = LOGIT_START_S + 3 * trained * settings.logit_classifier_macs(p) / 1e9 * FEDERATION_GMAC_S
    return epochs * epoch, rest


def logit_cost(p) -> str | None:
    """Said before a PLI or TBI run that would take more than SLOW_RUN_S on 2 CPU cores — inversion_epochs=500
    trained for about 15 minutes, with no word before — with the most epochs, the widest network and the largest
    image that fit."""
    if p.get("attack") not in ("pli", "tbi") or p.get("protocol") not in settings.ROUND_EPOCHS:
        return None
    attack, rest = logit_run_seconds(p)
    if attack + rest < SLOW_RUN_S:
        return None

    def fits(**change) -> bool:
        return sum(logit_run_seconds({**p, **change})) < SLOW_RUN_S
    epochs = max((e for e in range(1, p["inversion_epochs"]) if fits(inversion_epochs=e)), default=None)
    width = max((w for w in range(4, p["inversion_width"]) if fits(inversion_width=w)), default=None)
    size = max((s for s in (8, 16, 32) if s < p["image_size"] and fits(image_size=s)), default=None)
    remedies = ([f"inversion_epochs ≤ {_two_digits_down(epochs)}"] if epochs else []) + (
        ["compare_tbi=false"] if p["attack"] == "pli" and p.get("compare_tbi") and fits(compare_tbi=False) else []) + (
        [f"inversion_width ≤ {width}"] if width else []) + ([f"image_size={size}"] if size else [])
    k = p["clients"]
    nets = ("TBI's inversion network" if p["attack"] == "tbi" else
            f"PLI's {f'{k} inversion networks' if k > 1 else 'inversion network'}"
            + (" and TBI's" if p.get("compare_tbi") else ""))
    one = p["attack"] == "tbi" or (k == 1 and not p.get("compare_tbi"))
    return (f"A slow setting for a CPU: {nets} train{'s' * one} for {plural(p['rounds'], 'round')} × "
            f"{plural(p['inversion_epochs'], 'epoch')} "
            f"on the public images of {p['image_size']} px, about {about(attack)} on 2 CPU cores, and the federation "
            f"about {about(rest)}. Built for a GPU; under {SLOW_RUN_S // 60} minutes on a CPU: "
            + (" or ".join(remedies) if remedies else "fewer rounds, clients and classes"))


def _two_digits_down(n: int) -> int:
    """n rounded down to two significant digits: 28027 → 28000, 696 → 690, 45 → 45."""
    unit = 10 ** max(0, len(str(max(n, 1))) - 2)
    return n // unit * unit


def _objective_cost(p) -> tuple[float, int, bool, int] | None:
    """One evaluation of an image attack's objective in 10⁹ multiply-adds of the model's forward passes, the
    evaluations in the run, whether it is L-BFGS's (up to LBFGS_EVALUATIONS a step) and the passes an evaluation
    makes (images × racing starts); None where the protocol's model is not `model`."""
    macs = settings.forward_macs(p)
    if macs is None:
        return None
    images = settings.local_images(p) * p["epochs"] if p["protocol"] == "fedavg" else settings.round_images(p)[0]
    lbfgs = _LBFGS_PARAMS[0] in ATTACKS[p["attack"]].params
    passes = images * (p.get("trials", 1) if lbfgs else 1 + p.get("restarts", 0))
    return macs / 1e9 * passes, p["iterations"] * (LBFGS_EVALUATIONS if lbfgs else 1), lbfgs, passes


def _span(low: float, high: float) -> str:
    """'7–23 s', '11–37 min', '55 s–3 min': a range of waits, each in the unit a person reads it in."""
    (a, unit_a), (b, unit_b) = duration(low), duration(high)
    return f"{a}–{b} {unit_b}" if unit_a == unit_b else f"{a} {unit_a}–{b} {unit_b}"


def cost_warnings(p) -> list[str]:
    """Settings that work but are slow without a GPU: not said where the run goes to one (device=cuda, or auto on
    a machine known to have CUDA: the web server learns it from its workers, the CLI from torch), said while
    that is not yet known (a GPU server's first page, before its workers report)."""
    if device.runs_on_gpu(p.get("device", "auto")):
        return []
    large = model_cost(p) or vfl_cost(p) or logit_cost(p)
    if large:
        return [large]
    k = p.get("trials", 1)
    if k > MANY_TRIALS:
        return [f"trials={k}: racing starts are built for a GPU. On a CPU each start adds about 3 ms to every "
                f"evaluation of the objective (2 cores, 32 px), so {k} starts take ~{k * 3 / 1000:.1f} s per evaluation "
                "and up to 20 evaluations per step; compiling for them takes a minute or more (Stop waits for it)"]
    c = settings.clients_apart(p)
    if c > MANY_CLIENTS:
        seconds = c * CLIENT_STEP_S * p.get("iterations", 0)  # "5 steps take ~0 min" said nothing
        took = f"~{seconds / 60:.0f} min" if seconds >= 90 else f"~{seconds:.0f} s"
        return [f"clients={c}: attacking every client at once is built for a GPU. On a CPU each client adds about "
                f"{CLIENT_STEP_S * 1000:.0f} ms to every step (2 cores, 32 px), so {plural(p.get('iterations', 0), 'step')} "
                f"take{'s' * (p.get('iterations', 0) == 1)} {took}"]
    return []


def headline(params: dict) -> str:
    """'DLM+ on FedAvg' for a run's parameters — the names a page sets above a run (codes it does not know,
    from an older store, are shown as they are)."""
    attack, protocol = str(params.get("attack", "")), str(params.get("protocol", ""))
    clients = settings.round_clients(params)  # a round of several: 'DLG on FedSGD, 8 clients'
    several = isinstance(clients, int) and clients > 1
    return (f"{ATTACKS[attack].short if attack in ATTACKS else attack} on "
            f"{PROTOCOLS[protocol].short if protocol in PROTOCOLS else protocol}"
            + (f", {clients} clients" if several else "")
            + (", secure aggregation" if several and params.get("secure_aggregation") else ""))


NAMED_AFTER_PEOPLE = ("Gaussian", "Laplace")  # a title's first word that keeps its capital in mid-sentence


def in_sentence(title: str) -> str:
    """A title as the middle of a sentence has it: 'magnitude pruning', but 'Gaussian noise', 'DP-SGD'."""
    first = title.split(" ")[0]
    if first in NAMED_AFTER_PEOPLE or first[1:2].isupper():
        return title
    return title[:1].lower() + title[1:]


def sweep_title(params: dict, axis: str, preset: str | None = None, swept: tuple[str, ...] = ()) -> str:
    """What a sweep of `axis` (and `swept`, its other axes) over this scenario is called (the Trade-offs page's
    heading, the CLI's tradeoff.png): 'iDLG against magnitude pruning · preset idlg' where the defense's strength
    is swept, 'DLG against batch size' for a protocol knob that defends, 'DLG, varying iterations' else —
    and a defense held at one strength throughout says so ('DLG under Gaussian noise (noise σ = 0.01,
    clip norm off), varying learning rate'): without it the title read as an undefended sweep."""
    attack = ATTACKS[params["attack"]].short if params.get("attack") in ATTACKS else str(params.get("attack"))
    defense = DEFENSES.get(params.get("defense", "none"))
    defended = defense is not None and params.get("defense") != "none"
    knob = _param(params, axis)
    if defended and defense.param(axis):
        return f"{attack} against {in_sentence(defense.title)}" + (f" · preset {preset}" if preset else "")
    held = f" under {in_sentence(defense_phrase(params))}" \
        if defended and not any(defense.param(n) for n in swept) else ""
    if knob is not None and knob.defends:
        head = f"{attack} against {in_sentence(knob.title.split(' (')[0])}{held}"
    else:
        head = f"{attack}{held}, varying {param_label(params, axis)}"
    return head + (f" · preset {preset}" if preset else "")


def defense_name(defense: str) -> str:
    """'no defense', 'Gaussian noise', … for a defense's code (one an older store knows and we do not: as it is)."""
    if defense == "none":
        return "no defense"
    return DEFENSES[defense].short if defense in DEFENSES else str(defense)


def strengths(defense: str) -> set[str]:
    """The parameters that set a defense's strength (dp_sigma, dp_clip, …); none for no defense, or a code this
    version does not know."""
    return {q.name for q in DEFENSES[defense].params} if defense in DEFENSES else set()


def defense_does_nothing(p: dict) -> bool:
    """Whether the defense, at this strength, sends the payload as it is, bit for bit: pruning 0 %, a sending
    temperature of 1, the top k of k or fewer classes — the undefended scenario under another name, which a
    sweep need not run twice. Noise of σ = 0 is not counted: the payload is the same, but the defense still draws
    from its generator."""
    d = p.get("defense")
    classes = logit_classes(p)
    return ((d == "prune" and p.get("prune_ratio") == 0)
            or (d == "logit-temperature" and p.get("send_temperature") == 1)
            or (d == "top-k" and classes is not None and p.get("top_k", 0) >= classes))


def idle_defense(p: dict) -> str | None:
    """Said before a run whose defense, at its strength, sends the payload as it is (defense_does_nothing): its
    figures are the undefended run's, though its title names a defense (top_k=50 of FedMD's 40 classes)."""
    if not defense_does_nothing(p):
        return None
    d = p["defense"]
    why = {"prune": "it zeroes no entry", "logit-temperature": "it divides the logits by 1",
           "top-k": f"the top {p.get('top_k')} of the logits' {logit_classes(p)} classes are all of them"}[d]
    what = "the logits as they are" if DEFENSES[d].payload == "logits" else "the payload as it is"
    return f"{defense_phrase(p)} leaves {what} ({why}): this run is the undefended one"


def logit_classes(p: dict) -> int | None:
    """The classes of a logit-sharing scenario's logits: every identity on FedMD and FedGEMS (the digits are
    always ten), only the private ones on DS-FL, whose unlabelled public set names no other (distillation's
    label_space); None for the other protocols."""
    if p.get("protocol") not in LOGIT_PROTOCOLS:
        return None
    if p["protocol"] == "ds-fl":
        return p.get("target_classes")
    return 10 if p.get("data") == "digits" else p.get("num_classes")


def defense_phrase(p: dict) -> str:
    """The defense in words, with its strength: 'Gaussian noise (noise σ = 0.01, clip norm off)', 'Magnitude
    pruning (pruned fraction = 0.5)', 'no defense' — what the threat card, the Lab's scenario line and Compare say."""
    d = p.get("defense", "none")
    if d == "none" or d not in DEFENSES:
        return defense_name(d)
    # δ belongs to the ε the page reports, not to the defense
    parts = [setting_words(p, q.name, p.get(q.name)) for q in DEFENSES[d].params
             if q.name != "dp_delta" and p.get(q.name) is not None]
    return f"{DEFENSES[d].short} ({', '.join(parts)})" if parts else DEFENSES[d].short


def _param(p: dict, name: str) -> Param | None:
    try:
        return params_for(p["protocol"], p["attack"], p["defense"]).get(name)
    except KeyError:  # not a scenario's parameters, or codes this version does not know
        return None


def param_label(p: dict, name: str) -> str:
    """A parameter as a sentence names it — the sidebar's label without its note: 'noise σ' (dp_sigma under
    Gaussian noise; 'noise scale b' under Laplace), 'clip norm', 'k'. The code where the scenario has no such
    parameter (a row from an older store)."""
    q = _param(p, name)
    if q is None:
        return name
    label = q.title.split(" (")[0]
    return label[0].lower() + label[1:] if label[1:2].islower() else label  # "noise σ", but "TV threshold ξ"


def setting_words(p: dict, name: str, value) -> str:
    """'noise σ = 0.01', 'clip norm off' (a label that says "0 = off", at 0), 'default model width'
    (its help's "0 = the model's default", at 0: Compare's DLG beside PLI read "model width = 0"), 'k = 1': one
    setting in words."""
    q = _param(p, name)
    label = param_label(p, name)
    if q is not None and "0 = off" in q.title and not value:
        return f"{label} off"
    if q is not None and "(0 = the model's default)" in q.help and value == 0:
        return f"default {label}"
    return f"{label} = {value_text(value)}"  # three significant digits, as the strips and axes write it


def components(protocol: str, attack: str, defense: str) -> tuple[Component, Component, Component]:
    return PROTOCOLS[protocol], ATTACKS[attack], DEFENSES[defense]


# parameters read only under another's value: `run dlg --set tv_dataset=SVHN` ran the photos as before without a
# word, and a sweep over it ran every point alike (the Lab shows the data and model widgets only where they are
# read). name: (the parameter it depends on, whether that value reads it, the condition in words)
_SEVERAL_EPOCHS = ("epochs", lambda v: v > 1, "epochs > 1, where AGIC pairs the rounds of several observed epochs")
READ_ONLY_WHEN = {
    "tv_dataset": ("data", lambda v: v == "torchvision", "data=torchvision"),
    "data_root": ("data", lambda v: v == "torchvision", "data=torchvision"),
    "folder": ("data", lambda v: v == "folder", "data=folder"),
    "model_depth": ("model", lambda v: v in ("resnet", "mlp"), "model=resnet or model=mlp"),
    "pre_iterations": _SEVERAL_EPOCHS, "epoch_weight": _SEVERAL_EPOCHS, "match_labels": _SEVERAL_EPOCHS,
    "shuffle": ("epochs", lambda v: v > 1, "epochs > 1, as it reshuffles the data between epochs"),
    "lr_step1": ("solver", lambda v: v == "sgd", "solver=sgd, as least squares solves Step I exactly"),
    "secure_aggregation": ("clients", lambda v: v > 1, "clients ≥ 2, as one client's average is its own gradient"),
}
# the same for a parameter that only some protocols leave unread: a logit federation's identities J are the faces'
# (digits have 10): Classes J stood at 40 beside PLI on digits, as if it counted
READ_ONLY_WHEN_ON = {("num_classes", p): ("data", lambda v: v == "faces", "data=faces, as digits always have 10 "
                                          "classes") for p in LOGIT_PROTOCOLS}


def without_effect(p, name: str) -> str | None:
    """Why parameter `name` changes nothing in scenario `p`, or None where it is read."""
    rule = READ_ONLY_WHEN.get(name) or READ_ONLY_WHEN_ON.get((name, p.get("protocol")))
    if rule is None:
        return None
    on, reads, words = rule
    value = p.get(on)
    if value is None or reads(value):
        return None
    return f"it is read only when {words} (here {on}={value})"


def no_label_guess(p: dict) -> str:
    """Why a run of scenario `p` has no label accuracy: "n/a" alone left a class guessing. CAFE guesses the
    labels only through its gradient-matching term (its preset's α is 0)."""
    if p.get("attack") == "cafe":
        return ("CAFE guesses the labels only through its gradient-matching term, which is off in this run "
                f"(gradient_weight α = {p.get('gradient_weight', 0):g})")
    return "this run's attack made no guess at the labels"


def step_noun(p: dict) -> str:
    """What one step of the attack is called where it is counted: PLI and TBI train their inversion networks
    epoch by epoch ("inversion epoch", the accuracy chart's axis), every other attack takes iterations."""
    return "inversion epoch" if p.get("protocol") in LOGIT_PROTOCOLS else "iteration"


def steps_taken(p: dict, n: int) -> str:
    """'300 iterations'; for PLI and TBI, which train on each round's logits in turn, a whole run's count says
    how it came about: 'Finished after 500 inversion epochs' read as a mistake under a sidebar saying 100 (the
    epochs on each of the 5 rounds)."""
    each, rounds = p.get("inversion_epochs"), p.get("rounds", 1)
    said = plural(n, step_noun(p))
    if step_noun(p) == "inversion epoch" and rounds > 1 and each and n == each * rounds:
        said += f" ({each} on each of the {rounds} rounds' logits)"
    return said


def private_images(p) -> int:
    """How many private images a scenario's client holds (what the attack must rebuild)."""
    return p["target_classes"] if p["protocol"] in LOGIT_PROTOCOLS else settings.private_batch(p)[0]


def private_images_name(p) -> str:
    """What a message calls that count (image protocols): see settings.private_batch."""
    return settings.private_batch(p)[1]


def attacks_for(protocol: str) -> list[str]:
    return [n for n, a in ATTACKS.items() if protocol in a.protocols]


def defenses_for(protocol: str) -> list[str]:
    return [n for n, d in DEFENSES.items() if protocol in d.protocols]


def defending_knobs(protocol: str) -> list[Param]:
    """The protocol's numeric settings that also defend (batch size, local steps, clients …): what a sweep
    without a defense varies."""
    return [p for p in PROTOCOLS[protocol].params if p.defends and p.kind in ("int", "float")]


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


# one role, a name per component: a name set where it does not apply is pointed at the one it goes by there
SAME_ROLE = (("iterations", "inversion_epochs"),  # the attack's length: PLI and TBI count inversion epochs
             ("dp_sigma", "logit_sigma", "fake_sigma"))  # the noise's σ, on gradients, logits or fake gradients


def instead(name: str, protocol: str, attack: str, defense: str) -> tuple[str, str] | None:
    """(component, parameter) meant by a name this scenario does not take: the name itself under a defense
    the protocol takes (`dp_sigma` on an undefended FedSGD run: dp-gaussian's), else the name its role goes
    by here (`iterations` under PLI: pli's inversion_epochs; `dp_sigma` on FedMD: logit-noise's
    logit_sigma). None where nothing fits: `--set defense=dp-gaussian` on FedMD only led to a second error."""
    role = next((g for g in SAME_ROLE if name in g), (name,))
    alike = [name] + [n for n in role if n != name]
    here = (protocol, attack, defense)
    for n in alike[1:]:
        if (c := next((c for c in owners(n) if c in here), None)) is not None:
            return c, n
    for n in alike:
        if (c := next((c for c in owners(n) if c in DEFENSES and protocol in DEFENSES[c].protocols), None)):
            return c, n
    return None


def instead_note(name: str, protocol: str, attack: str, defense: str, how: str = "set defense={} with it") -> str:
    """`instead` in the words that follow 'it belongs to: …': '; pli's counterpart is inversion_epochs',
    '; set defense=dp-gaussian with it', '; on fedmd its counterpart is logit_sigma: set defense=logit-noise
    with it' (`how`: the command line's words for setting the defense), or '' where nothing fits."""
    c, meant = instead(name, protocol, attack, defense) or (None, None)
    if c is None:
        return ""
    if c in (protocol, attack, defense):
        return f"; {c}'s counterpart is {meant}"
    return f"; {how.format(c)}" if meant == name else f"; on {protocol} its counterpart is {meant}: {how.format(c)}"


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
