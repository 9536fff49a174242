"""The victim models, sized by input shape and class count, initialised from an explicit seed.

Every model takes images in [0, 1] directly, so reconstructions live in the space we score.
Initialisation uses a private torch.Generator (never the global RNG) so that concurrent runs in the
dashboard stay reproducible.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from .settings import MODEL_WIDTHS, MODELS

class LeNet(nn.Module):
    """The LeNet variant of Deep Leakage from Gradients (Zhu et al., 2019)."""
    activation = "sigmoid"

    def __init__(self, channels: int, size: int, classes: int, width: int):
        super().__init__()
        act = nn.Sigmoid
        self.body = nn.Sequential(
            nn.Conv2d(channels, width, 5, padding=2, stride=2), act(),
            nn.Conv2d(width, width, 5, padding=2, stride=2), act(),
            nn.Conv2d(width, width, 5, padding=2, stride=1), act(),
        )
        side = math.ceil(math.ceil(size / 2) / 2)
        self.fc = nn.Linear(width * side * side, classes)

    def forward(self, x):
        return self.fc(self.body(x).flatten(1))


class MLP(nn.Module):
    activation = "sigmoid"

    def __init__(self, channels: int, size: int, classes: int, width: int, depth: int = 2):
        super().__init__()
        layers, d = [nn.Flatten()], channels * size * size
        for _ in range(depth):
            layers += [nn.Linear(d, width), nn.Sigmoid()]
            d = width
        layers.append(nn.Linear(d, classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


class ConvNet(nn.Module):
    activation = "relu"

    def __init__(self, channels: int, size: int, classes: int, width: int):
        super().__init__()
        w = width
        self.body = nn.Sequential(
            nn.Conv2d(channels, w, 3, padding=1), nn.ReLU(),
            nn.Conv2d(w, 2 * w, 3, padding=1, stride=2), nn.ReLU(),
            nn.Conv2d(2 * w, 4 * w, 3, padding=1, stride=2), nn.ReLU(),
            nn.AdaptiveAvgPool2d(4),
        )
        self.fc = nn.Linear(4 * w * 16, classes)

    def forward(self, x):
        return self.fc(self.body(x).flatten(1))


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.skip = nn.Sequential()
        if stride != 1 or cin != cout:
            self.skip = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + self.skip(x))


class ResNet(nn.Module):
    """A CIFAR-style ResNet: three stages of `depth` BasicBlocks with widths w, 2w, 4w."""
    activation = "relu"

    def __init__(self, channels: int, size: int, classes: int, width: int, depth: int = 1):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(channels, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        blocks, cin = [], width
        for stage, cout in enumerate((width, 2 * width, 4 * width)):
            for i in range(depth):
                blocks.append(BasicBlock(cin, cout, 2 if (stage > 0 and i == 0) else 1))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        h = self.blocks(self.stem(x))
        return self.fc(h.mean(dim=(2, 3)))


def build_model(name: str, channels: int, size: int, classes: int, seed: int,
                width: int = 0, depth: int = 1, init: str = "default") -> nn.Module:
    """Build model `name` and initialise it from `seed`.

    width 0 means the model's own default width (settings.MODEL_WIDTHS). init "uniform" is DLG's U(-0.5, 0.5)
    for every weight and bias, which makes the sigmoid LeNet leak far more.
    """
    kw = {"width": width or MODEL_WIDTHS.get(name)}
    if name == "lenet":
        model = LeNet(channels, size, classes, **kw)
    elif name == "mlp":
        model = MLP(channels, size, classes, depth=max(1, depth), **kw)
    elif name == "convnet":
        model = ConvNet(channels, size, classes, **kw)
    elif name == "resnet":
        model = ResNet(channels, size, classes, depth=max(1, depth), **kw)
    else:  # validated earlier by the catalog; this guards direct callers
        raise ValueError(f"model: must be one of {', '.join(MODELS)}, got {name!r}")
    initialise(model, seed, init)
    return model


@torch.no_grad()
def initialise(model: nn.Module, seed: int, init: str = "default") -> None:
    """PyTorch's default init (Kaiming-uniform, a=√5) or DLG's U(-0.5, 0.5), from a private generator."""
    g = torch.Generator().manual_seed(int(seed))
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            if init == "uniform":
                m.weight.uniform_(-0.5, 0.5, generator=g)
                if m.bias is not None:
                    m.bias.uniform_(-0.5, 0.5, generator=g)
            else:
                nn.init.kaiming_uniform_(m.weight, a=math.sqrt(5), generator=g)
                if m.bias is not None:
                    fan_in = m.weight[0].numel()
                    bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
                    m.bias.uniform_(-bound, bound, generator=g)
        elif isinstance(m, nn.BatchNorm2d):
            m.reset_parameters()


PATCHES_UP_TO = 1 << 22  # numbers in one layer's unfolded patches (per trial) above which torch's convolution runs


class PatchConv2d(nn.Conv2d):
    """The same convolution as a matrix product over unfolded patches (im2col), with the same parameters.

    Why: vmapped over racing trials or clients, each trial's weight gradient of a convolution becomes a
    grouped convolution with one group per trial, and its double backward more of them; as patches they are
    batched matrix products. `racing.trial_model` swaps a trial model's layers. Measured (H200, DLG's LeNet,
    warm): 256 clients' 300 steps 24.5 → 13.5 s, one start 3.4 → 2.6 s; racing starts on the 2-core CPU ~1.3×
    the steps per second. The patches hold kernel-area times the input's numbers: a layer whose patches would
    exceed PATCHES_UP_TO (large images and batches) keeps torch's convolution."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        (kh, kw), (ph, pw), (sh, sw), (dh, dw) = self.kernel_size, self.padding, self.stride, self.dilation
        ho, wo = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
        if b * c * kh * kw * ho * wo > PATCHES_UP_TO:
            return super().forward(x)
        cols = nn.functional.unfold(x, self.kernel_size, self.dilation, self.padding, self.stride)
        out = self.weight.flatten(1) @ cols  # (B, out channels, patches)
        if self.bias is not None:
            out = out + self.bias[:, None]
        return out.view(b, -1, ho, wo)


def patch_convolutions(model: nn.Module) -> int:
    """Turn the model's plain convolutions (zero padding, one group, numeric padding) into PatchConv2d in
    place — same parameters, same names, same function; returns how many."""
    n = 0
    for m in model.modules():
        if (type(m) is nn.Conv2d and m.groups == 1 and m.padding_mode == "zeros"
                and not isinstance(m.padding, str)):
            m.__class__ = PatchConv2d
            n += 1
    return n
