"""What the settings mean, without the engine: the names of models and data sources, the checks that a
protocol's parameters fit together, and the sentence saying what its server receives.

Torch-free on purpose. The web server validates every scenario, draws every widget and describes every
threat, but computes nothing: with this module (and the catalog built on it) it never imports PyTorch,
which alone costs about 500 MB per process. The simulations that use these facts import them from here.
"""
from __future__ import annotations

import math
import os

from .errors import ParamError
from .words import plural

def cache_dir() -> str:
    """leakdemo's cache (run store, LPIPS weights): $LEAKDEMO_CACHE, else $XDG_CACHE_HOME/leakdemo, else
    ~/.cache/leakdemo."""
    if os.environ.get("LEAKDEMO_CACHE"):
        return os.environ["LEAKDEMO_CACHE"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "leakdemo")


# ---------------------------------------------------------------- data sources

SOURCES = ("samples", "digits", "faces", "folder", "torchvision")
SOURCE_HELP = {
    "samples": "the photos scikit-image ships (astronaut, coffee, rocket, ...), by name",
    "digits": "scikit-learn's 8×8 handwritten digits, upsampled (an MNIST stand-in), by index",
    "faces": "the 100 face crops of scikit-image's lfw_subset, by index",
    "folder": "your own image folder on disk (sub-folders are classes), by file name",
    "torchvision": "a torchvision dataset already on disk under data_root (never downloaded), by index",
}
TORCHVISION_SETS = ("CIFAR10", "CIFAR100", "MNIST", "FashionMNIST", "SVHN")

# ---------------------------------------------------------------- models

MODEL_HELP = {
    "lenet": "DLG's LeNet: 3 sigmoid conv layers (12 channels, 5×5, strides 2/2/1) and one linear layer",
    "mlp": "a multilayer perceptron with sigmoid hidden layers",
    "convnet": "a small ReLU ConvNet (3 conv layers, widths w, 2w, 4w) — where Inverting Gradients works",
    "resnet": "a small ResNet (BasicBlocks, configurable depth and width, BatchNorm)",
}
MODELS = tuple(MODEL_HELP)
MODEL_WIDTHS = {"lenet": 12, "mlp": 256, "convnet": 32, "resnet": 16}  # what model_width = 0 builds (models.py)
MODEL_NAMES = {"lenet": "LeNet", "mlp": "an MLP", "convnet": "a ConvNet", "resnet": "a ResNet"}  # in a sentence

WORKER_MODEL_HELP = {  # vertical FL: each worker's bottom model
    "slim": "one 3×3 conv layer (model_width channels), ReLU, 2×2 average pooling, then FC (fc_width) → ReLU → FC "
            "— fast enough for a live CPU demo",
    "cafe": "the CAFE authors' worker net: conv(64)-pool-conv(128)-pool-FC(fc_width)-FC(64)-FC (about 10× slower)",
    "fc": "fully connected only: FC (fc_width) → ReLU → FC; the first FC layer sees the raw tile, so Steps I–II "
          "alone give the data back",
}
WORKER_MODELS = tuple(WORKER_MODEL_HELP)

# ---------------------------------------------------------------- metrics

LPIPS_MIN_SIDE = 32  # AlexNet's strided stem needs room: smaller images are upsampled (bilinear) to this
LPIPS_HELP = ("LPIPS (AlexNet, v0.1): learned perceptual distance, 0 = identical, lower is more similar. "
              f"Computed once on the final images at their own resolution (below {LPIPS_MIN_SIDE} px upsampled "
              f"to {LPIPS_MIN_SIDE}), grayscale repeated to 3 channels. At 32 px AlexNet sees a few coarse cells, so "
              "LPIPS weighs layout and colour far more than pixel noise (a photo under 16-dB noise: 0.08 at 32 px, "
              "0.76 at 256 px) — read it beside PSNR and SSIM.")


def _after_defense(p: dict, who: str) -> str:
    """', after the client's defense: Gaussian noise (noise σ = 0.01, clip norm off)' — by name, with its strength."""
    if p["defense"] == "none":
        return ""
    from .catalog import defense_phrase  # the catalog is built from this module
    return f", {who} defense: {defense_phrase(p)}"


# ---------------------------------------------------------------- FedSGD

def fedsgd_receives(p: dict) -> str:
    """What the server receives, in one sentence (threat card, CLI)."""
    k = p.get("clients", 1)
    if k > 1 and p.get("secure_aggregation"):
        return (f"only the average of {k} clients' gradients (secure aggregation), each of the training loss on its "
                f"own private batch of {plural(p['batch_size'], 'image')}" + _after_defense(p, "after each client's"))
    if k > 1:
        return (f"from each of {k} clients, apart, the gradient of the training loss on its own private batch of "
                f"{plural(p['batch_size'], 'image')}" + _after_defense(p, "after each client's"))
    return (f"the gradient of the training loss on one private batch of {plural(p['batch_size'], 'image')}"
            + _after_defense(p, "after the client's"))


def round_images(p: dict) -> tuple[int, str]:
    """The private images of a FedSGD round, and what an error message calls that count."""
    k = p.get("clients", 1)
    return k * p["batch_size"], ("clients × batch_size" if k > 1 else "batch_size")


CLIENT_ATTACKS = ("dlg", "idlg")  # the attacks that take every client of a FedSGD round at once


def round_clients(p: dict) -> int:
    """The clients of a FedSGD round (1 for other protocols, whose `clients` — logit sharing's — is another
    setting, and for runs recorded before rounds had several)."""
    return p.get("clients", 1) if p.get("protocol", "fedsgd") == "fedsgd" else 1


def clients_apart(p: dict) -> int:
    """How many clients' gradients a FedSGD server sees one by one: clients, or 1 under secure aggregation
    (then it sees one average, as one batch)."""
    return 1 if p.get("secure_aggregation") else round_clients(p)


def fedsgd_check(p: dict) -> None:
    """Several clients in a round: DLG and iDLG attack them all at once (one start each, racing.py); under
    secure aggregation any FedSGD attack takes their average as one batch."""
    k = p.get("clients", 1)
    if p.get("secure_aggregation") and k == 1:
        raise ParamError("secure_aggregation", "needs clients ≥ 2: the average of one client's gradient is that "
                         "gradient (got clients=1)")
    if clients_apart(p) == 1:
        return
    if p["attack"] not in CLIENT_ATTACKS:
        raise ParamError("clients", f"only DLG and iDLG attack every client of a round at once; use clients=1 with "
                         f"attack={p['attack']}, or secure_aggregation=true, under which it attacks their average "
                         f"as one batch (got clients={k})")
    if p.get("loop") != "robust":
        raise ParamError("clients", f"attacking every client at once needs loop=robust (the published loop has "
                         f"one start), or secure_aggregation=true, under which it attacks their average as one "
                         f"batch; got clients={k}")
    if p.get("trials", 1) > 1:
        raise ParamError("clients", f"each client gets one start of its own: use trials=1 with clients={k} "
                         f"(got trials={p['trials']})")


# ---------------------------------------------------------------- what a LeNet's gradient can pin down


def lenet_equations(p: dict, width: int | None = None, images: int | None = None) -> tuple[int, int, int] | None:
    """About how many numbers one gradient (FedSGD) or one round's weight update (FedAvg) of DLG's LeNet carries
    about the images it was computed on, how many unknown pixel values those images have, and how many images that is —
    None for other models and protocols. Each conv weight and bias is one number; the linear layer's gradient,
    a sum of one outer product (output error × input) per image, carries input + output numbers per image, at
    most its own size. Fewer numbers than unknowns: many images give the same gradient, so matching it cannot
    single out the private one (DLG at 64 px: 11 308 for 12 288, 12 dB; at model_width=24, 58.6 dB)."""
    if p.get("model") != "lenet" or p.get("protocol") not in ("fedsgd", "fedavg"):
        return None
    w = width or p.get("model_width") or MODEL_WIDTHS["lenet"]
    side = math.ceil(math.ceil(p["image_size"] / 2) / 2)  # two stride-2 convs, as models.LeNet
    fc_in, classes = w * side * side, p["num_classes"]
    conv = 3 * w * 25 + w + 2 * (w * w * 25 + w)  # 5×5 kernels; 3 channels, as every source is loaded
    if p["protocol"] == "fedsgd":
        n = round_images(p)[0] // clients_apart(p)  # one client's batch, or the round's average
    else:  # one round's update: local_steps steps on mini-batches of batch_size
        n = p["local_steps"] * p["batch_size"]
    n = images or n
    numbers = conv + min(fc_in * classes + classes, n * (fc_in + classes))
    return numbers, n * 3 * p["image_size"] ** 2, n


def equations_per_unknown(p: dict, width: int | None = None, images: int | None = None) -> float | None:
    """`lenet_equations`' numbers per unknown pixel value (below 1 many images give the same gradient), or None."""
    found = lenet_equations(p, width, images)
    return None if found is None else found[0] / found[1]


# ---------------------------------------------------------------- what one pass through the model costs

def _conv(cin: int, cout: int, side: int, k: int, stride: int = 1) -> tuple[int, int]:
    """Multiply-adds of a k×k convolution padded by k // 2 on a square input of `side` px, and its output side."""
    out = (side - 1) // stride + 1
    return cin * cout * k * k * out * out, out


def forward_macs(p: dict) -> int | None:
    """Multiply-adds of one forward pass of one image through the client's model (models.py, 3 channels as every
    source is loaded), counted without torch — None where the protocol's model is not `model` (VFL, logits).
    tests/test_params.py checks the count against torch's FlopCounterMode for every model."""
    if p.get("protocol") not in ("fedsgd", "fedavg"):
        return None
    name, side, classes = p["model"], p["image_size"], p["num_classes"]
    w, depth = p.get("model_width") or MODEL_WIDTHS[name], max(1, p.get("model_depth", 1))
    if name == "mlp":
        d = 3 * side * side
        return d * w + (depth - 1) * w * w + w * classes
    if name == "lenet":
        a, s = _conv(3, w, side, 5, 2)
        b, s = _conv(w, w, s, 5, 2)
        c, s = _conv(w, w, s, 5)
        return a + b + c + w * s * s * classes
    if name == "convnet":
        a, s = _conv(3, w, side, 3)
        b, s = _conv(w, 2 * w, s, 3, 2)
        c, s = _conv(2 * w, 4 * w, s, 3, 2)
        return a + b + c + 4 * w * 16 * classes
    total, s = _conv(3, w, side, 3)  # resnet: a stem, then three stages of BasicBlocks (widths w, 2w, 4w)
    cin = w
    for stage, cout in enumerate((w, 2 * w, 4 * w)):
        for i in range(depth):
            stride = 2 if stage > 0 and i == 0 else 1
            first, out = _conv(cin, cout, s, 3, stride)
            second, _ = _conv(cout, cout, out, 3)
            skip = _conv(cin, cout, s, 1, stride)[0] if stride != 1 or cin != cout else 0
            total, s, cin = total + first + second + skip, out, cout
    return total + cin * classes


# ---------------------------------------------------------------- FedAvg

MAX_LOCAL_IMAGES = 64  # the private data set: enough for a demo, small enough to reconstruct live
LOCAL_DATA = "rounds_per_epoch × local_steps × batch_size"


def vfl_forward_macs(p: dict) -> int:
    """Multiply-adds of one image's forward pass through every worker's bottom model and the server's top model
    (protocols/vfl.py), counted without torch; tests/test_params.py checks it against torch's FlopCounterMode."""
    rows, cols = tile_grid(p["workers"])
    th, tw = p["image_size"] // rows, p["image_size"] // cols
    width, fc, classes, kind = p["model_width"] or 16, p["fc_width"], p["num_classes"], p["worker_model"]
    if kind == "fc":
        one = 3 * th * tw * fc
    elif kind == "slim":  # conv 3×3, 2×2 average pooling, then the first FC layer
        one = 3 * width * 9 * th * tw + width * (th // 2) * (tw // 2) * fc
    else:  # the CAFE authors' net: conv(64), pool, conv(128), pool (ceil mode), FC, FC(64)
        h2, w2 = math.ceil(th / 2), math.ceil(tw / 2)
        one = 3 * 64 * 9 * th * tw + 64 * 128 * 9 * h2 * w2 + 128 * math.ceil(h2 / 2) * math.ceil(w2 / 2) * fc + fc * 64
    head = 64 * classes if kind == "cafe" else fc * classes
    return p["workers"] * (one + head) + p["workers"] * classes * classes


def local_images(p: dict) -> int:
    return p["rounds_per_epoch"] * p["local_steps"] * p["batch_size"]


def private_batch(p: dict) -> tuple[int, str]:
    """How many private images an image protocol's client holds (what the attack must rebuild), and what a
    message calls that count: 'batch_size', 'clients × batch_size', 'n_samples', … (the settings that make
    it, by their codes)."""
    if p["protocol"] == "fedavg":
        return local_images(p), LOCAL_DATA
    return (p["n_samples"], "n_samples") if p["protocol"] == "vfl" else round_images(p)


def fedavg_receives(p: dict) -> str:
    rounds = p["rounds_per_epoch"] * p["epochs"]
    steps = "one SGD step" if p["local_steps"] == 1 else f"{p['local_steps']} SGD steps"
    each = "its one round" if rounds == 1 else f"each of its {rounds} rounds"
    return (f"the model weights before and after {each} of local training ({steps} on "
            f"mini-batches of {plural(p['batch_size'], 'image')}, {plural(local_images(p), 'private image')} in all)"
            + _after_defense(p, "each upload after the client's"))


def fedavg_check(p: dict) -> None:
    """The client's data set must stay small enough to reconstruct live (checked when resolving)."""
    n = local_images(p)
    if n > MAX_LOCAL_IMAGES:
        raise ParamError("local_steps", f"{LOCAL_DATA} must be at most {MAX_LOCAL_IMAGES} images, got {n}")


# ---------------------------------------------------------------- vertical FL

def tile_grid(workers: int) -> tuple[int, int]:
    """rows × cols of tiles for this many workers, as square as possible (4 → 2×2, 2 → 1×2 strips)."""
    rows = int(math.isqrt(workers))
    while workers % rows:
        rows -= 1
    return rows, workers // rows


def tiles(x, grid: tuple[int, int]) -> list:
    """Worker m's slice of a batch (B, C, H, W), a tensor or an array: tile (m // cols, m % cols) of every
    image."""
    rows, cols = grid
    h, w = x.shape[-2] // rows, x.shape[-1] // cols
    return [x[..., r * h:(r + 1) * h, c * w:(c + 1) * w] for r in range(rows) for c in range(cols)]


def vfl_receives(p: dict) -> str:
    rows, cols = tile_grid(p["workers"])
    who = ("the one worker's bottom model (it holds every image whole)" if p["workers"] == 1 else
           f"the {p['workers']} workers' bottom models (each worker holds a {rows}×{cols} tile of every image)")
    return (f"each iteration, for a batch of {plural(p['batch_size'], 'sample index', 'sample indices')} it "
            f"chooses itself out of {p['n_samples']}, the gradients of {who}"
            + _after_defense(p, "each after the worker's"))


def vfl_check(p: dict) -> None:
    """Constraints between parameters, checked when the scenario is resolved (CLI and sidebar)."""
    rows, cols = tile_grid(p["workers"])
    size = p["image_size"]
    for parts in {rows, cols}:
        if size % parts or size // parts < 2:
            raise ParamError("workers", f"{p['workers']} workers cut the image into a {rows}×{cols} grid of tiles, "
                                        f"so image_size must be divisible by {parts} with tiles of at least 2 px; "
                                        f"got image_size={size}")
    if p["batch_size"] > p["n_samples"]:
        raise ParamError("batch_size", f"must be at most n_samples ({p['n_samples']}), got {p['batch_size']}")


# ---------------------------------------------------------------- logit sharing (FedMD, DS-FL, FedGEMS)

def logits_receives(p: dict) -> str:
    when = "in its one round" if p["rounds"] == 1 else f"in each of {p['rounds']} rounds"
    return (f"{when}, the logits of {plural(p['clients'], 'client')} on every public image "
            f"({'labelled' if p['protocol'] != 'ds-fl' else 'unlabelled'} public set)"
            + _after_defense(p, "each after the client's") + "; nothing else")


# epochs per round of each phase, from the PLI paper's Appendix C (local_epochs sets the initial training):
# FedMD digests and revisits for 1 epoch, DS-FL and FedGEMS clients train 2 on each set, servers 1
ROUND_EPOCHS = {"fedmd": 1, "ds-fl": 2, "fedgems": 2}


def inverter_macs(inputs: int, size: int, width: int) -> int:
    """Multiply-adds of one forward pass through PLI's and TBI's inversion network (attacks/pli.py's Inverter: a
    transposed 4×4 convolution to a 4×4 seed, then one per doubling to `size` px), counted without torch;
    tests/test_params.py checks it against torch's FlopCounterMode."""
    ups = int(math.log2(size // 4))
    chans = [width * 2 ** (ups - 1 - i) for i in range(ups)]
    macs, side = inputs * chans[0] * 16, 4
    for a, b in zip(chans, chans[1:] + [1]):
        side *= 2
        macs += a * b * side * side * 4  # stride 2: each output pixel takes 2 × 2 of the kernel's 4 × 4 taps
    return macs


def logit_classifier_macs(p: dict) -> int:
    """Multiply-adds of one image's forward pass through a client's classifier (protocols/distillation.py)."""
    size, width = p["image_size"], p["model_width"]
    side = (size - 2) // 3
    return width * 9 * (size - 2) ** 2 + width * side * side * logit_classes(p)


def logit_classes(p: dict) -> int:
    return 10 if p["data"] == "digits" else p["num_classes"]


def identity_split(p: dict) -> dict:
    """How many images each part of a logit-sharing federation holds (identities.build deals them): `clean`, the
    public clean views of the non-target classes (what PLI trains on); `public`, those and every class's
    insensitive views (what TBI and the clients train on); `private`, the most one client holds."""
    kept = max(1, p["views"] // 4)  # a class's views: test | insensitive source | train (digits have 174+ each)
    train = p["views"] - 2 * kept
    classes, targets = logit_classes(p), p["target_classes"]
    clean = (classes - targets) * train
    return {"clean": clean, "public": clean + classes * kept, "private": math.ceil(targets / p["clients"]) * train}


def logits_check(p: dict) -> None:
    if p["image_size"] not in (8, 16, 32, 64):
        raise ParamError("image_size", f"must be 8, 16, 32 or 64 here (the inversion network doubles a 4×4 "
                         f"seed); got {p['image_size']}")
    if p["protocol"] == "fedgems" and p["image_size"] < 16:  # (8 − 2) // 2 − 2 = 1 px left for the second pool
        raise ParamError("image_size", f"must be 16, 32 or 64 on FedGEMS (its larger server model has two conv "
                         f"and pooling blocks, which leave nothing of 8 px); got {p['image_size']}")
    classes = logit_classes(p)
    if p["target_classes"] >= classes:
        raise ParamError("target_classes", f"must be below the number of classes ({classes}) so the public set "
                         f"keeps clean identities to learn from; got {p['target_classes']}")
    if p["clients"] > p["target_classes"]:
        raise ParamError("clients", f"each client holds at least one target class: at most target_classes "
                         f"({p['target_classes']}); got {p['clients']}")
