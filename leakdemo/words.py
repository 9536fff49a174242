"""A count with its noun in the right number: what a class reads should not say "1 image(s)"."""
from __future__ import annotations


def plural(n: int, noun: str, many: str | None = None) -> str:
    """plural(1, "image") = "1 image", plural(3, "image") = "3 images", plural(5, "class", "classes")."""
    return f"{n} {noun if n == 1 else many or noun + 's'}"
