"""Numbers put in words a class reads: a count with its noun in the right number (never "1 image(s)"), a small
figure that does not read as zero, a wait in minutes once it is long."""
from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable


def plural(n: int, noun: str, many: str | None = None) -> str:
    """plural(1, "image") = "1 image", plural(3, "image") = "3 images", plural(5, "class", "classes")."""
    return f"{n} {noun if n == 1 else many or noun + 's'}"


def small_figure(v: float) -> str:
    """Three decimals, two significant digits below 0.01, "< 0.001" below that — an LPIPS of 0.00037 (a
    near-perfect reconstruction) must not read "0.000", as if identical or broken, nor "3.7e-04" to a class:
    small_figure(0.048) = "0.048", small_figure(0.0048) = "0.0048", small_figure(0.00037) = "< 0.001"."""
    if 0 < v < 0.001:
        return "< 0.001"
    return f"{v:.2g}" if 0 < v < 0.01 else f"{v:.3f}"


def fixed(v: float, places: int = 3) -> str:
    """v to a fixed number of decimals, without the sign of a figure that rounds to zero: an SSIM of -0.0004
    (pure noise) reads "0.000", not "-0.000"."""
    text = f"{v:.{places}f}"
    return text[1:] if text.startswith("-") and not float(text) else text


def value_text(v) -> str:
    """A parameter's value as a label: three significant digits ("0.0001", "0.333"), whole numbers and
    thousands in full (value_text(2000.0) = "2000", where "%.3g" writes "2e+03"); flags and words as they are."""
    if isinstance(v, float) and (v.is_integer() or abs(v) >= 1000) and abs(v) < 1e9:
        return f"{v:.0f}"
    return three_digits(v) if isinstance(v, float) else str(v)


def three_digits(v: float) -> str:
    """A measured figure to three significant digits: "2.53e8" for an ε (not C's "2.53e+08", nor "253274256",
    which claims nine), "1e-6", not "1e-06"."""
    return re.sub(r"e([+-])0*(\d)", r"e\1\2", f"{v:.3g}").replace("e+", "e")


def clock(seconds: float, places: int = 1, short: bool = False) -> str:
    """How long something took, as a person reads it: "22.4 s", "25 min 3 s", "1 h 40 min" — a long CAFE run's
    "1503.4 s" had to be divided by 60 in the head. Decimals (`places`) only under 90 s. `short`: a metric's
    figure, "25 min" — in the Lab's fifth of a row at 1024 px "25 min 3 s" did not fit (the sentence beside it
    says it in full)."""
    if seconds < 90:
        return f"{seconds:.{places}f} s"
    if short:
        return about(seconds)
    if seconds < 90 * 60:
        minutes, rest = divmod(round(seconds), 60)
        return f"{minutes} min" + (f" {rest} s" if rest else "")
    hours, minutes = divmod(round(seconds / 60), 60)
    return f"{hours} h" + (f" {minutes} min" if minutes else "")


def time_left(seconds: float) -> str:
    """An estimate of the wait to come, as rounded as it is sure: "45 s", "13 min", "2 h" ("about 754 s left")."""
    return f"{math.ceil(seconds)} s" if seconds < 90 else about(seconds)


def about(seconds: float) -> str:
    """'45 s', '27 min', '2 h'."""
    figure, unit = duration(seconds)
    return f"{figure} {unit}"


def duration(seconds: float) -> tuple[str, str]:
    """A wait's figure and the unit a person reads it in: (3.4, s), (45, s), (27, min), (2, h)."""
    if seconds < 10:
        return f"{seconds:.1f}", "s"
    if seconds < 90:
        return f"{seconds:.0f}", "s"
    return (f"{seconds / 60:.0f}", "min") if seconds < 90 * 60 else (f"{seconds / 3600:.0f}", "h")


SAME_AS = {"gpu": "cuda"}  # difflib offered `cpu` for `device=gpu`, the one device it is not


def alike(word, options: Iterable, cutoff: float = 0.6) -> list[str]:
    """The options a mistyped `word` was likely meant as, none when nothing is near: difflib's close matches,
    with two letters swapped first (alike("dgl", presets) = ["dlg", "dlm"]: difflib scores both alike)."""
    word, options = str(word).strip(), [str(o) for o in options]
    if SAME_AS.get(word.lower()) in options:  # spelt nothing alike, meant all the same
        return [SAME_AS[word.lower()]]
    same = [o for o in options if o.lower() == word.lower()]  # difflib scores `DLG` against `dlg` as nothing alike
    if same:
        return same
    close = difflib.get_close_matches(word, options, n=2, cutoff=cutoff)
    return sorted(close, key=lambda o: sorted(o) != sorted(word))  # stable: difflib's order otherwise


def hint(said: Iterable[str]) -> str:
    """' (did you mean dlg?)' to follow an unknown name in a message, or '' when nothing is alike."""
    asked = meant_question(said)
    return f" ({asked})" if asked else ""


def meant_question(said: Iterable[str]) -> str:
    """'did you mean dlg or dlm?', or '' when nothing was alike — for a message that has its own brackets."""
    said = list(said)
    return f"did you mean {' or '.join(said)}?" if said else ""
