"""Gradient-matching building blocks shared by DLG, iDLG and Inverting Gradients and the attacks on FedAvg updates."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call


def soft_cross_entropy(logits: torch.Tensor, target_probs: torch.Tensor) -> torch.Tensor:
    """Cross-entropy against a probability vector (DLG's soft label)."""
    return torch.mean(torch.sum(-target_probs * F.log_softmax(logits, dim=-1), dim=-1))


def model_gradients(model: nn.Module, x: torch.Tensor, target: torch.Tensor, create_graph: bool,
                    weights: list[torch.Tensor] | None = None) -> list[torch.Tensor]:
    """∇_W loss(model(x), target); target is class indices (long) or probabilities (float).

    `weights` (tensors that require grad, in model.parameters() order) evaluate the model at other
    weights than its own — FedAvg's attacks need the weights each observed round started from.
    """
    if weights is None:
        weights = list(model.parameters())
        logits = model(x)
    else:
        names = [n for n, _ in model.named_parameters()]
        logits = functional_call(model, dict(zip(names, weights)), (x,))
    loss = F.cross_entropy(logits, target) if target.dtype == torch.long else soft_cross_entropy(logits, target)
    return list(torch.autograd.grad(loss, weights, create_graph=create_graph))


def l2_distance(a: list[torch.Tensor], b: list[torch.Tensor]) -> torch.Tensor:
    """DLG's objective: Σ over layers of ‖a − b‖²."""
    return sum(((x - y) ** 2).sum() for x, y in zip(a, b))


def cosine_distance(a: list[torch.Tensor], b: list[torch.Tensor], weights=None) -> torch.Tensor:
    """1 − cos(a, b) over all layers flattened together (Inverting Gradients), optionally layer-weighted."""
    weights = weights or [1.0] * len(a)
    dot = sum(w * (x * y).sum() for w, x, y in zip(weights, a, b))
    na = sum(w * (x * x).sum() for w, x in zip(weights, a))
    nb = sum(w * (y * y).sum() for w, y in zip(weights, b))
    return 1 - dot / (na.sqrt() * nb.sqrt() + 1e-12)


def total_variation(x: torch.Tensor) -> torch.Tensor:
    """Anisotropic TV: mean absolute difference between neighbouring pixels."""
    return (x[..., 1:, :] - x[..., :-1, :]).abs().mean() + (x[..., :, 1:] - x[..., :, :-1]).abs().mean()


def last_linear(model: nn.Module) -> tuple[int, int | None]:
    """Indices (weight, bias) in model.parameters() of the last linear layer (the classifier)."""
    index = {id(p): i for i, p in enumerate(model.parameters())}
    last = [m for m in model.modules() if isinstance(m, nn.Linear)]
    if not last:
        raise ValueError("the model has no linear classifier layer")
    fc = last[-1]
    return index[id(fc.weight)], (index[id(fc.bias)] if fc.bias is not None else None)


def classifier_signal(model: nn.Module, gradients: list[torch.Tensor]) -> torch.Tensor:
    """Per-class signal from the last layer: the bias gradient, or the weight gradient's row sums.

    With cross-entropy, ∂L/∂b_c = Σ_batch (p_c − y_c)/B: negative only for classes in the batch.
    Row sums of ∂L/∂W have the same sign when the layer's inputs are non-negative (sigmoid/ReLU).
    """
    w_idx, b_idx = last_linear(model)
    if b_idx is not None:
        return gradients[b_idx].detach().double()
    return gradients[w_idx].detach().double().sum(dim=1)


def infer_labels(model: nn.Module, gradients: list[torch.Tensor], batch_size: int) -> list[int]:
    """Labels from last-layer gradients (iDLG for one sample; a count estimate for batches).

    Batch 1: the single negative entry (iDLG, exact for cross-entropy). Batches: every class with a
    negative entry is present; the remaining slots go to the classes with the largest estimated
    extra count, −g_c·B (the classes whose signal is most negative), following the iDLG/LLG idea.
    """
    g = classifier_signal(model, gradients)
    if batch_size == 1:
        return [int(torch.argmin(g))]
    order = torch.argsort(g)  # most negative first
    labels = [int(c) for c in order if g[c] < 0][:batch_size]
    if not labels:
        labels = [int(order[0])]
    # distribute the remaining slots by the size of each negative signal (a class seen k times has a
    # signal roughly k times as negative); ties go to the most negative class.
    neg = (-g).clamp(min=0)
    share = neg / neg.sum().clamp(min=1e-12) * batch_size
    while len(labels) < batch_size:
        counts = torch.bincount(torch.tensor(labels, device=g.device), minlength=len(g)).double()
        c = int(torch.argmax(share - counts))
        labels.append(c)
    return sorted(labels)
