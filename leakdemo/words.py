"""Numbers put in words a class reads: a count with its noun in the right number (never "1 image(s)"), a small
figure that does not read as zero."""
from __future__ import annotations


def plural(n: int, noun: str, many: str | None = None) -> str:
    """plural(1, "image") = "1 image", plural(3, "image") = "3 images", plural(5, "class", "classes")."""
    return f"{n} {noun if n == 1 else many or noun + 's'}"


def small_figure(v: float) -> str:
    """Three decimals, or two significant digits below 0.01 — an LPIPS of 0.00037 (a near-perfect
    reconstruction) must not read "0.000", as if identical or broken: small_figure(0.048) = "0.048",
    small_figure(0.00037) = "0.00037", small_figure(0) = "0.000"."""
    return f"{v:.2g}" if 0 < abs(v) < 0.01 else f"{v:.3f}"
