"""Axes that stay legible in a 300-px chart: log axes whatever the span of the values drawn, room for the
last tick label, plots that line up side by side, and a horizontal line's label where no curve runs."""
from __future__ import annotations

import math

MOST_DECADES = 6  # labelled decades on one axis; wider spans label every second, third … decade
SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")
# the Lab's charts (quality, loss; CAFE's steps and utility, PLI's accuracy) share one plot frame,
# wide enough for the widest of their y axes (PLI's titled percentages on the left, SSIM on the right): stacked
# in a narrow main area, the loss chart's plot began 20 px left of the quality chart's above it and ended 45 px
# right of it, so a loss spike did not sit over the PSNR dip it caused; side by side, the two plots match. (A chart
# with no right-hand axis needs ≥ 30 px there too: plotly drops a tick label that would cross the edge, and with
# 10 px the loss chart's axis read 0 … 800 for a run of 1000 iterations.)
RUN_FRAME = dict(l=82, r=76, t=30, b=10)
VEIL = "rgba(255,255,255,0.6)"  # behind a line's label: readable where a curve crosses it all the same
CHAR_PX, LABEL_PX = 6, 16  # a line label's character, and its height with its veil's padding, in px


def tick_label(v: float) -> str:
    """0.05, 0.2, 10, 500 as they are; further out m·10ⁿ (10ⁿ for m = 1), m to the digits the tick needs: a
    noised DLG run's loss between 83 300 and 84 500 read "8·10⁴" on every tick, now 8.34·10⁴, 8.36·10⁴ …"""
    if 1e-3 <= v < 1e4:
        return f"{v:.6g}"
    exponent = math.floor(math.log10(v) + 1e-9)
    mantissa = float(f"{v / 10 ** exponent:.4g}")
    if mantissa >= 10:
        mantissa, exponent = mantissa / 10, exponent + 1
    power = "10" + str(exponent).translate(SUPERSCRIPT)
    return power if mantissa == 1 else f"{mantissa:g}·{power}"


def _short_span_ticks(lo: float, hi: float) -> list[float]:
    """1, 2 and 5 of each decade within [lo, hi]; every digit if that leaves fewer than two; within less than
    one digit's step (a loss between 1.84 and 2.00, whose chart had no label at all) evenly spaced round
    values, 1.85 1.9 1.95."""
    for digits in ((1, 2, 5), range(1, 10)):
        ticks = [m * 10 ** e for e in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1)
                 for m in digits]
        ticks = [t for t in ticks if lo * (1 - 1e-9) <= t <= hi * (1 + 1e-9)]
        if len(ticks) >= 2:
            return ticks
    if hi <= lo * (1 + 1e-9):
        return [lo]
    for step in sorted((m * 10.0 ** e for e in range(math.floor(math.log10(hi - lo)) - 2,
                                                    math.floor(math.log10(hi - lo)) + 1) for m in (1, 2, 5)),
                       reverse=True):
        ticks = [k * step for k in range(math.ceil(lo / step - 1e-9), math.floor(hi / step + 1e-9) + 1)]
        if len(ticks) >= 3:
            return [float(f"{t:.12g}") for t in ticks]
    return []


def log_axis(values) -> dict:
    """A plotly log axis's tick settings for `values`: powers of ten, one label per decade (or per few, over
    a wide span); under two decades 1, 2 and 5 of each, each labelled in full ("0.05", "2·10⁻⁶"). Plotly's
    own choice there labelled every digit — AGIC's loss between 2·10⁻³ and 6·10⁻² read "6 5 4 3 2 10⁻² 9 8 7
    6 5 4 3 2", digits on top of each other — and its "D2" setting a bare "5" under "10⁻¹" for 0.05."""
    pos = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v) and v > 0]
    if not pos:
        return {"type": "log", "exponentformat": "power"}
    lo, hi = min(pos), max(pos)
    span = math.log10(hi / lo)
    if span < 2:
        ticks = _short_span_ticks(lo, hi)
        if ticks:
            return {"type": "log", "tickmode": "array", "tickvals": ticks, "ticktext": [tick_label(t) for t in ticks]}
        return {"type": "log", "exponentformat": "power", "dtick": "D1"}
    return {"type": "log", "exponentformat": "power", "dtick": max(1, math.ceil(span / MOST_DECADES))}


def side_by_side(*figs, height: int = 450, bottom: int = 150, legend_gap: int = 90) -> None:
    """Two charts drawn side by side, their plot areas at one height: the same top margin (one title's
    subtitle has two lines, the other's one) and one bottom margin that holds an axis title of two lines and
    a legend of two rows, each legend's top legend_gap px under its plot, below such a title. Left to plotly,
    the margin fits what is there: a one-line axis title and a one-row legend left the Trade-offs page's
    strength chart's x-axis 30 px below the Pareto chart's beside it."""
    top = max(f.layout.margin.t or 0 for f in figs)
    for f in figs:
        f.update_layout(height=height, margin=dict(t=top, b=bottom),
                        legend=dict(yref="container", y=(bottom - legend_gap) / height, yanchor="top"))


def label_place(curves: list[tuple[int, list[tuple[float, float]]]], y: float, text: str, height: float,
                char: float, prefer: str = "top") -> str:
    """Where a horizontal line's label is least in the way: each end of the chart (right, else left), above or
    below the line, scored by the pieces of the curves (weight, points) that pass through the label's box —
    and, counted half, within half its height beyond it — the attack's thick lines and markers weighing twice the
    federation's thin dashed ones ("no defense" sat on top_k = 10's point; "20 dB" on the prune curve as it
    fell through 20 dB, and on dp-dlg's dashed accuracy lines)."""
    best = None
    for place in ("top right", "bottom right", "top left", "bottom left"):
        a, b, y0, y1 = label_box(place, y, text, height, char)
        top = place.startswith("top")
        near = (y0, y1 + height / 2) if top else (y0 - height / 2, y1)
        hits = sum(w * (_meets(c, a, b, y0, y1) + _meets(c, a, b, *near)) / 2 for w, c in curves)
        score = (hits, top != (prefer == "top"), place.endswith("left"))
        if best is None or score < best[0]:
            best = (score, place)
    return best[1]


def label_box(place: str, y: float, text: str, height: float, char: float) -> tuple[float, float, float, float]:
    """The box [a, b] × [y0, y1] that the label of the line at height y covers at `place` ('top right' …):
    a and b as shares of the plot's width (char: one character's share), y0 and y1 in the axis's units."""
    span = min(1.0, char * len(text))
    a, b = (1 - span, 1.0) if place.endswith("right") else (0.0, span)
    y0, y1 = (y, y + height) if place.startswith("top") else (y - height, y)
    return a, b, y0, y1


def _meets(curve: list[tuple[float, float]], a: float, b: float, y0: float, y1: float) -> int:
    """How many of a curve's points and segments pass through the box [a, b] × [y0, y1]."""
    hits = sum(a <= s <= b and y0 <= v <= y1 for s, v in curve)
    for (s1, v1), (s2, v2) in zip(curve, curve[1:]):
        lo, hi = max(a, min(s1, s2)), min(b, max(s1, s2))
        if lo > hi or s1 == s2:
            continue
        ends = [v1 + (v2 - v1) * (t - s1) / (s2 - s1) for t in (lo, hi)]  # the segment clipped to [a, b]
        hits += min(ends) <= y1 and max(ends) >= y0
    return hits
