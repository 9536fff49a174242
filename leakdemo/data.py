"""Offline data: the photos scikit-image ships, scikit-learn digits, LFW faces, an image folder,
torchvision datasets already on disk, and user uploads. Nothing is ever downloaded.

Every source yields images as float tensors (C, H, W) in [0, 1], square, resized with anti-aliasing,
always 3 channels (grayscale is repeated) so that any model can take any source.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from . import cancel
from .errors import LeakdemoError, ParamError
from .settings import SOURCES, private_batch
from .words import alike, hint, plural

if TYPE_CHECKING:
    import torch

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".gif", ".tif", ".tiff")
MAX_PIXELS = 40_000_000  # refuse decompression bombs

# skimage.data function -> the file it reads; only those present in the installed package are offered.
_SKIMAGE_FILES = {
    "astronaut": "astronaut.png", "brick": "brick.png", "camera": "camera.png", "cell": "cell.png",
    "chelsea": "chelsea.png", "checkerboard": "chessboard_GRAY.png", "clock": "clock_motion.png",
    "coffee": "coffee.png", "coins": "coins.png", "colorwheel": "color.png", "grass": "grass.png",
    "gravel": "gravel.png", "horse": "horse.png", "hubble_deep_field": "hubble_deep_field.jpg",
    "immunohistochemistry": "ihc.png", "logo": "logo.png", "microaneurysms": "microaneurysms.png",
    "moon": "moon.png", "page": "page.png", "retina": "retina.jpg", "rocket": "rocket.jpg",
    "shepp_logan_phantom": "phantom.png", "text": "text.png",
}


@dataclass
class Batch:
    images: torch.Tensor  # (B, 3, S, S) in [0, 1]
    labels: torch.Tensor  # (B,) long
    names: list[str]
    keys: list[str] | None = None  # the source's own item names (what `images` takes)


def _batch(images: list[np.ndarray], labels, names: list[str], keys: list[str] | None = None) -> Batch:
    """Stacks arrays into a Batch. Torch is imported here, where tensors are made, and nowhere else in this
    module: the web server reads photos and checks uploads with it without loading torch."""
    import torch
    return Batch(torch.from_numpy(np.stack(images)), torch.as_tensor(np.asarray(labels, dtype=np.int64)), names, keys)


# ---------------------------------------------------------------- preprocessing


def to_square_rgb(img: np.ndarray, size: int) -> np.ndarray:
    """Any 2-D image (gray, RGB, RGBA; uint8, bool or float) -> float32 (3, size, size) in [0, 1]."""
    from skimage.transform import resize
    from skimage.util import img_as_float32

    img = np.asarray(img)
    if img.dtype == bool:
        img = img.astype(np.float32)
    img = img_as_float32(img) if img.dtype.kind in "ui" else img.astype(np.float32)
    if img.ndim == 2:
        img = np.stack([img] * 3, axis=-1)
    if img.shape[-1] == 4:  # composite RGBA on white
        alpha = img[..., 3:4]
        img = img[..., :3] * alpha + (1 - alpha)
    img = img[..., :3]
    h, w = img.shape[:2]
    side = min(h, w)
    top, left = (h - side) // 2, (w - side) // 2
    img = img[top:top + side, left:left + side]
    if side != size:
        img = resize(img, (size, size), anti_aliasing=side > size, order=1, preserve_range=True)
    return np.clip(img, 0, 1).astype(np.float32).transpose(2, 0, 1)


# ---------------------------------------------------------------- samples


def available_samples() -> list[str]:
    """The scikit-image photos present in this installation (no network fetch is ever triggered)."""
    import skimage.data._fetchers as fetchers

    return [n for n, f in _SKIMAGE_FILES.items() if os.path.exists(os.path.join(fetchers._LEGACY_DATA_DIR, f))]


@lru_cache(maxsize=64)
def sample_image(name: str, size: int) -> np.ndarray:
    import skimage.data

    if name not in available_samples():
        raise ParamError("images", f"unknown sample {name!r}; available: {', '.join(available_samples())}")
    return to_square_rgb(getattr(skimage.data, name)(), size)


# ---------------------------------------------------------------- digits, faces


@lru_cache(maxsize=1)
def _digits():
    from sklearn.datasets import load_digits

    d = load_digits()
    return (d.images / 16.0).astype(np.float32), d.target.astype(np.int64)


@lru_cache(maxsize=1)
def _faces():
    import skimage.data

    return skimage.data.lfw_subset()[:100].astype(np.float32)  # the first 100 are faces


def _source_size(source: str, p: dict) -> int:
    if source == "digits":
        return len(_digits()[0])
    if source == "faces":
        return len(_faces())
    if source == "folder":
        return len(_folder_files(p["folder"]))
    if source == "torchvision":
        return len(_torchvision_set(p["tv_dataset"], p["data_root"]))
    return len(available_samples())


def item_names(source: str, p: dict) -> list[str]:
    """The names users type in `images` for this source."""
    if source == "samples":
        return available_samples()
    if source == "folder":
        return [rel for rel, _ in _folder_files(p["folder"])]
    return [str(i) for i in range(_source_size(source, p))]


def load_item(source: str, key: str, p: dict) -> tuple[np.ndarray, int, str]:
    """(image (3,S,S), label, display name) for one item of a source."""
    size, classes = p["image_size"], p["num_classes"]
    if source == "samples":
        names = available_samples()
        return sample_image(key, size), names.index(key) % classes, key
    if source == "digits":
        imgs, labels = _digits()
        i = int(key)
        return to_square_rgb(imgs[i], size), int(labels[i]) % classes, f"digit {labels[i]} #{i}"
    if source == "faces":
        i = int(key)
        return to_square_rgb(_faces()[i], size), i % classes, f"face #{i}"
    if source == "folder":
        files = dict(_folder_files(p["folder"]))
        path, label = files[key]
        return to_square_rgb(read_image_file(path), size), label % classes, key
    if source == "torchvision":
        ds = _torchvision_set(p["tv_dataset"], p["data_root"])
        img, label = ds[int(key)]
        return to_square_rgb(np.asarray(img), size), int(label) % classes, f"{p['tv_dataset']} #{key}"
    raise ParamError("data", f"must be one of {', '.join(SOURCES)}")


# ---------------------------------------------------------------- folder, torchvision, files


def read_image_file(path: str) -> np.ndarray:
    """Read an image file safely: bounded pixel count, corrupt files give a clear message; upright and in
    8 bits as an upload is (_upright_rgb8)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            if im.width * im.height > MAX_PIXELS:
                raise LeakdemoError(f"images: {os.path.basename(path)} is {im.width}×{im.height} pixels; "
                                    f"at most {MAX_PIXELS:,} pixels are allowed")
            im.load()
            return _upright_rgb8(im)
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError) as e:
        raise LeakdemoError(f"images: cannot read {os.path.basename(path)!r} as an image ({e.__class__.__name__})") from None


def _folder_files(folder: str) -> tuple[tuple[str, tuple[str, int]], ...]:
    """(relative path, (absolute path, label)); sub-folders are classes, loose files get label by order.
    Hidden files and folders are skipped, as a file browser hides them: a Mac's '._photo.jpg' beside each
    photo copied to a stick is metadata, not an image, and the seed picked it; '.thumbnails' was a class.
    Linked folders are read (a class linked in from a data set elsewhere was a class with no images)."""
    if not folder:
        raise ParamError("folder", "empty; give the path of the image folder to read (data=folder)")
    if not os.path.isdir(folder):
        raise ParamError("folder", f"{folder!r} is not a readable folder")
    classes = sorted(d for d in os.listdir(folder) if os.path.isdir(os.path.join(folder, d)) and d[0] != ".")
    out = []
    walked, seen = [], set()
    for root, dirs, files in os.walk(folder, followlinks=True):  # a class folder linked from elsewhere counts too
        seen.add(os.path.realpath(root))
        # os.walk leaves out what is taken out of dirs: hidden folders, and a link back to a folder already
        # walked (a loop)
        dirs[:] = [d for d in dirs if d[0] != "." and os.path.realpath(os.path.join(root, d)) not in seen]
        walked.append((root, files))
    for root, files in sorted(walked):
        rel_root = os.path.relpath(root, folder)
        cls = rel_root.split(os.sep)[0]
        for f in sorted(files):
            if f.lower().endswith(IMAGE_SUFFIXES) and f[0] != ".":
                rel = f if rel_root == "." else os.path.join(rel_root, f)
                label = classes.index(cls) if cls in classes else len(out)
                out.append((rel, (os.path.join(root, f), label)))
    if not out:
        raise ParamError("folder", f"{folder!r} holds no images ({', '.join(IMAGE_SUFFIXES)})")
    return tuple(out)


def folder_fingerprint(folder: str) -> str | None:
    """What a folder's images are now: each image file's name, size and modification time, hashed (as make
    judges a file; reading every picture for each lookup would not scale). Runs on a folder are stored under
    it, so a picture replaced under the same name is attacked afresh: the store replayed the old picture's
    run. None where the folder cannot be listed (the run itself fails and says why)."""
    import hashlib
    try:
        files = _folder_files(folder)
    except ParamError:
        return None
    h = hashlib.sha256()
    for rel, (path, _) in files:
        try:
            st = os.stat(path)
            h.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        except OSError:
            h.update(f"{rel}\0unreadable\n".encode())
    return h.hexdigest()


def _check_data_root(root: str) -> None:
    """What a torchvision source needs before torch opens it: a root that is a folder."""
    if not root:
        raise ParamError("data_root", "empty; give the folder where the torchvision dataset already lies (it is "
                                      "never downloaded)")
    if not os.path.isdir(root):
        raise ParamError("data_root", f"{root!r} is not a readable folder")


@lru_cache(maxsize=4)
def _torchvision_set(name: str, root: str):
    import torchvision.datasets as tvd

    _check_data_root(root)
    try:
        if name == "SVHN":
            return tvd.SVHN(root, split="test", download=False)
        return getattr(tvd, name)(root, train=False, download=False)
    except Exception as e:  # torchvision raises RuntimeError for missing or corrupt data
        why = str(e).split(" You can use download=True")[0].rstrip(".")  # torchvision's hint is not ours to give
        raise ParamError("data_root", f"no {name} found under {root!r} ({why}); leakdemo never downloads: put it "
                                      f"there as torchvision lays it out") from None


# ---------------------------------------------------------------- batches


def load_batch(p: dict, uploads: list[tuple[str, np.ndarray]] | None = None, count: int | None = None,
               count_name: str = "batch_size") -> Batch:
    """The client's private batch: the named `images` first, the rest picked by `seed` from the source.

    `uploads` (name, array) replace the source entirely (the dashboard's own images). `count` overrides
    the batch size (FedAvg's local data set); `count_name` is what error messages call it.
    """
    size, classes = p["image_size"], p["num_classes"]
    bs = p["batch_size"] if count is None else count
    if uploads:
        if len(uploads) < bs:
            raise ParamError(count_name, f"is {bs} but only {plural(len(uploads), 'image')} {'was' if len(uploads) == 1 else 'were'} uploaded")
        imgs = [to_square_rgb(a, size) for _, a in uploads[:bs]]
        return _batch(imgs, np.arange(bs) % classes, [n for n, _ in uploads[:bs]])
    source = p["data"]
    wanted, picked = batch_keys(p, bs, count_name)
    keys = wanted + picked
    items = [_picked(source, k, p, k in wanted) for k in keys]
    return _batch([i[0] for i in items], [i[1] for i in items], [i[2] for i in items], keys)


def batch_keys(p: dict, count: int, count_name: str = "batch_size") -> tuple[list[str], list[str]]:
    """The items a batch of `count` takes from its source, no image read: the named `images` it starts with,
    and the ones the seed picks for the rest."""
    names = item_names(p["data"], p)
    wanted = _checked_request(p, names, count, count_name)
    rng = np.random.default_rng(p["seed"])
    rest = [n for n in names if n not in wanted]
    return wanted, [rest[i] for i in rng.permutation(len(rest))[: count - len(wanted)]]


def planned_batch(p: dict) -> tuple[list[str], list[str]] | None:
    """What a run of `p` will take as the client's private data, before anything is loaded (the Lab shows it
    under the image picker): (named, picked by the seed). None where the data is not a pick of whole items —
    logit sharing builds its own, a torchvision set is only opened by the run, vertical FL with more samples
    than photos crops them."""
    if p["protocol"] not in ("fedsgd", "fedavg", "vfl") or p.get("data") in (None, "torchvision"):
        return None
    count, count_name = private_batch(p)
    if p["protocol"] == "vfl" and p["data"] == "samples" and count > len(available_samples()):
        return None
    return batch_keys(p, count, count_name)


def _picked(source: str, key: str, p: dict, named: bool) -> tuple[np.ndarray, int, str]:
    """One item of the batch. A file of the user's folder that is no image, picked by the seed rather than
    named, is the folder's fault: the message says so and what to do, not "images:" of a list never typed."""
    try:
        return load_item(source, key, p)
    except LeakdemoError as e:
        if named or source != "folder":
            raise
        reason = str(e).removeprefix("images: ")  # read_image_file speaks of named images
        raise ParamError("folder", f"{reason}; the seed picked {key}: remove it from the folder, or name the "
                                   "images to use (images=…)") from None


def _checked_request(p: dict, names: list[str], count: int, count_name: str) -> list[str]:
    """The named `images` the batch starts with, once they are known to exist and to be distinct, with the
    source large enough for the batch; where more are named than it holds, the first ones (the scenario's
    warning names the rest)."""
    source = p["data"]
    wanted = [s.strip() for s in str(p.get("images", "")).split(",") if s.strip()]
    for w in wanted:
        if w not in names:
            shown = ", ".join(names) if len(names) <= 30 else f"0 to {len(names) - 1}"
            # a folder's items are named with their sub-folder (the class): `camera.png` is `dogs/camera.png`
            same_file = [n for n in names if source == "folder" and os.path.basename(n) == w]
            meant = same_file or ([] if w.isdigit() else alike(w, names))  # digit 5000 is not "meant" as 500
            raise ParamError("images", f"unknown {source} item {w!r}{hint(meant)}; "
                                       f"available: {shown}")
    twice = [w for i, w in enumerate(wanted) if w in wanted[:i]]
    if twice:  # which one: a list of twelve digits left the reader to find it
        raise ParamError("images", f"lists {twice[0]!r} twice; name each image once")
    if count > len(names):
        raise ParamError(count_name, f"must be at most {len(names)} for data={source}, got {count}")
    return wanted[:count]


def check_source(p: dict) -> None:
    """What loading the client's private data would refuse, found from the source's item names alone — no
    image is read — so the dashboard can say it before Run is pressed rather than after. Logit-sharing
    protocols build their own identity sets (checked with their parameters); torchvision data sets are
    only opened by the run (opening one imports torch): here only their data_root is checked."""
    protocol, source = p["protocol"], p.get("data")
    if source is None or protocol not in ("fedsgd", "fedavg", "vfl"):
        return
    if source == "torchvision":  # a sweep over data=…,torchvision ran its other points, then failed this one
        _check_data_root(p.get("data_root", ""))
        return
    if protocol == "vfl" and source == "samples" and p["n_samples"] > len(available_samples()):
        _check_sample_names(p)  # the data set becomes crops of the named photos
        return
    count, count_name = private_batch(p)
    _checked_request(p, item_names(source, p), count, count_name)


def training_pool(p: dict, exclude: list[str], n: int) -> Batch:
    """Images for warming the model up (never the private batch): other items, or random crops of them."""
    source = p["data"]
    rng = np.random.default_rng(p["seed"] + 1)
    if source == "samples":
        names = [s for s in available_samples() if s not in exclude] or available_samples()
        big = 2 * p["image_size"]
        imgs, labels = [], []
        for _ in range(n):
            name = names[rng.integers(len(names))]
            cancel.check()  # a process's first pool resizes every photo (~2.4 s on 2 cores): Stop must reach it
            full = sample_image(name, big)
            y, x = rng.integers(0, big // 2 + 1, size=2)
            crop = full[:, y:y + big // 2, x:x + big // 2]
            imgs.append(crop if rng.random() < 0.5 else crop[:, :, ::-1].copy())
            labels.append(available_samples().index(name) % p["num_classes"])
        return _batch(imgs, labels, [])
    names = [k for k in item_names(source, p) if k not in exclude]
    keys = [names[i] for i in rng.choice(len(names), size=min(n, len(names)), replace=False)]
    items = [_picked(source, k, p, False) for k in keys]
    return _batch([i[0] for i in items], [i[1] for i in items], [])


def _check_sample_names(p: dict) -> list[str]:
    wanted = [s.strip() for s in str(p.get("images", "")).split(",") if s.strip()]
    names = available_samples()
    for w in wanted:
        if w not in names:
            raise ParamError("images", f"unknown sample {w!r}; available: {', '.join(names)}")
    return wanted


def load_dataset(p: dict, n: int, uploads=None, count_name: str = "n_samples") -> Batch:
    """A data set of n images (vertical FL): like load_batch, but the sample photos, of which there are
    only a dozen, become deterministic crops of those photos (label = the photo they come from)."""
    if uploads or p["data"] != "samples" or n <= len(available_samples()):
        return load_batch(p, uploads, count=n, count_name=count_name)
    wanted, names = _check_sample_names(p), available_samples()
    photos = wanted or names
    size, rng = p["image_size"], np.random.default_rng(p["seed"])
    imgs, labels, titles = [], [], []
    for i in range(n):
        name = photos[i % len(photos)]
        big = int(size * rng.uniform(1.5, 4.0))
        full = sample_image(name, big)
        y, x = rng.integers(0, big - size + 1, size=2)
        imgs.append(full[:, y:y + size, x:x + size])
        labels.append(names.index(name) % p["num_classes"])
        titles.append(f"{name} crop {i // len(photos)}")
    return _batch(imgs, labels, titles)


# ---------------------------------------------------------------- uploads

MAX_UPLOAD_BYTES = 10 * 1024 * 1024
MAX_UPLOAD_SIDE = 4096
MAX_UPLOAD_FILES = 64  # the largest batch any protocol takes from uploads
UPLOAD_FORMATS = {"PNG", "JPEG", "WEBP"}


def decode_upload(name: str, data: bytes) -> np.ndarray:
    """A user's uploaded file -> RGB array in uint8, or a one-line refusal that names the file.

    Refused: empty files, non-images (also when renamed .png), other formats, truncated files, images
    over 4096 px a side or any decompression bomb (the size is read from the header, before decoding),
    animations. Turned upright and scaled to 8 bits (_upright_rgb8)."""
    import io

    from PIL import Image, UnidentifiedImageError

    if not data:
        raise LeakdemoError(f"{name}: the file is empty")
    if len(data) > MAX_UPLOAD_BYTES:
        raise LeakdemoError(f"{name}: {len(data) / 2**20:.1f} MB is over the 10 MB limit")
    try:
        with Image.open(io.BytesIO(data)) as im:
            if im.format not in UPLOAD_FORMATS:
                raise LeakdemoError(f"{name}: only PNG, JPEG and WebP images are accepted (this is {im.format})")
            if max(im.size) > MAX_UPLOAD_SIDE:
                raise LeakdemoError(f"{name}: {im.width}×{im.height} pixels is too large "
                                    f"(at most {MAX_UPLOAD_SIDE} pixels a side)")
            if getattr(im, "n_frames", 1) > 1:
                raise LeakdemoError(f"{name}: animated images are not accepted; upload a single frame")
            im.load()
            return _upright_rgb8(im)
    except LeakdemoError:
        raise
    except Image.DecompressionBombError:
        raise LeakdemoError(f"{name}: too large to decode safely (at most {MAX_UPLOAD_SIDE} pixels a side)") from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, EOFError):
        raise LeakdemoError(f"{name}: not a readable image (corrupt or not PNG/JPEG/WebP)") from None


def _upright_rgb8(im) -> np.ndarray:
    """The picture as it is meant to be seen, RGB uint8: a phone stores a portrait photo as a landscape
    one with an EXIF orientation tag, which viewers obey and raw pixels do not (it was cropped and shown
    lying on its side); 16-bit or float grayscale is scaled by its range (PIL would clip it to white). A
    damaged EXIF block says nothing about orientation, and the pixels are still good: they are kept as
    stored (Pillow raised struct.error on one)."""
    import warnings

    from PIL import ImageOps

    try:
        with warnings.catch_warnings():  # "Corrupt EXIF data", once per damaged file, in the server's log
            warnings.simplefilter("ignore")
            im = ImageOps.exif_transpose(im)
    except Exception:  # noqa: BLE001 — whatever a damaged tag makes Pillow raise, the picture stands as stored
        pass
    return _to_rgb8(im)


def _to_rgb8(im) -> np.ndarray:
    """RGB uint8; 16-bit or float grayscale is scaled by its range (PIL would clip it to 255). A transparent
    background is laid on white, as the page shows it (to_square_rgb does the same for RGBA arrays):
    Pillow's convert("RGB") drops the alpha and keeps whatever colour the transparent pixels store —
    black, mostly — so a dark logo on a transparent PNG became a black square."""
    from PIL import Image

    if im.mode in ("I;16", "I;16B", "I;16L", "I", "F"):
        a = np.asarray(im, dtype=np.float64)
        top = 65535.0 if im.mode.startswith("I;16") or a.max() > 255 else 255.0
        g = (np.clip(a / top, 0, 1) * 255).round().astype(np.uint8)
        return np.repeat(g[..., None], 3, axis=2)
    if im.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in im.info:
        white = Image.new("RGBA", im.size, (255, 255, 255, 255))
        return np.asarray(Image.alpha_composite(white, im.convert("RGBA")).convert("RGB"))
    return np.asarray(im.convert("RGB"))
