"""Log axes that stay legible in a 300-px chart, whatever the span of the values drawn."""
from __future__ import annotations

import math

MOST_DECADES = 6  # labelled decades on one axis; wider spans label every second, third … decade


def log_axis(values) -> dict:
    """A plotly log axis's tick settings for `values`: powers of ten, one label per decade (or per few, over
    a wide span); under two decades 1, 2 and 5 of each (plotly's own choice there labelled every digit —
    AGIC's loss between 2·10⁻³ and 6·10⁻² read "6 5 4 3 2 10⁻² 9 8 7 6 5 4 3 2", digits on top of each
    other)."""
    pos = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v) and v > 0]
    if not pos:
        return {"type": "log", "exponentformat": "power"}
    span = math.log10(max(pos) / min(pos))
    dtick = "D2" if span < 2 else max(1, math.ceil(span / MOST_DECADES))
    return {"type": "log", "exponentformat": "power", "dtick": dtick}
