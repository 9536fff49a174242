"""When a run's picture became recognisable (20 dB) and when it was recovered (30 dB), read off its scored
history. It is the figure a class remembers ("the photo was back after 3 seconds"), and the one that separates
two attacks that end at the same PSNR. The Lab, the presenter, Compare, the CLI and `bench` all word it from
here. It works for recorded runs as well as live ones, since every run keeps its history."""
from __future__ import annotations

from .words import clock

RECOGNISABLE_DB = 20.0  # PSNR from which a reconstruction counts as recognisable
RECOVERED_DB = 30.0  # ... and as recovered: the eye no longer tells it from the original
RECOVERED_HELP = ("Time from the attack's first step until the picture reached 30 dB PSNR, where the eye no "
                  "longer tells it from the original (set-up not counted); 'never' if it did not get there, "
                  "'not yet' if it was stopped before.")


def reached(history: dict | None, db: float) -> tuple[float, int] | None:
    """(seconds, iteration) of the first scored point whose PSNR is `db` or more, None if no point was.
    The seconds run from the attack's first step, as the Lab's clock does (the set-up is not counted)."""
    h = history or {}
    for seconds, iteration, psnr in zip(h.get("seconds") or [], h.get("iteration") or [], h.get("psnr") or []):
        if psnr is not None and psnr >= db:
            return seconds, iteration
    return None


def judged_by_psnr(metrics: dict) -> bool:
    """Logit sharing is judged by attack accuracy (its PSNR is against a class's mean face): no milestones."""
    return "attack_accuracy" not in metrics


def _timed(history: dict | None, metrics: dict) -> bool:
    """Whether the run has milestones to tell: judged by its PSNR, and scored at least once."""
    return judged_by_psnr(metrics) and bool((history or {}).get("psnr"))


def sentence(history: dict | None, metrics: dict, finished: bool, noun: str = "iteration") -> str | None:
    """'Recognisable (20 dB) after 0.4 s, recovered (30 dB) after 3.1 s (iteration 62).' A run that never got
    there says so ('It never became recognisable: the PSNR stayed below 20 dB.'); a stopped one says 'not yet'; a
    batch whose mean missed a bar some of its pictures reached counts those ('2 of 4 images ended recognisable').
    None where the run has no scored history or is not judged by its PSNR."""
    if not _timed(history, metrics):
        return None
    seen, back = reached(history, RECOGNISABLE_DB), reached(history, RECOVERED_DB)
    if seen is None:
        some = _images_over(metrics, RECOGNISABLE_DB)
        if some:  # a batch's mean below the bar, some of its pictures plainly above it (23.8 · 22.3 · 16 · 14.8 dB)
            return (f"{some} {'ended' if finished else 'had become'} recognisable (20 dB), but the batch's mean PSNR "
                    f"{'stayed' if finished else 'was'} below 20 dB{'' if finished else ' when it stopped'}.")
        return ("It never became recognisable: the PSNR stayed below 20 dB." if finished else
                "Not yet recognisable: the PSNR was below 20 dB when it stopped.")
    parts = [f"recognisable (20 dB) after {clock(seen[0])}"]
    if back is not None:
        parts.append(f"recovered (30 dB) after {clock(back[0])} ({noun} {back[1]})")
    else:
        some = _images_over(metrics, RECOVERED_DB)
        mean = " on the batch's mean" if some else ""
        parts.append(f"never recovered (30 dB){mean}" if finished else
                     f"not yet recovered (30 dB){mean} when it stopped")
        if some:
            parts[-1] += f", though {some} {'did' if finished else 'had'}"
    text = ", ".join(parts)
    return text[0].upper() + text[1:] + "."


def _images_over(metrics: dict, db: float) -> str | None:
    """'2 of 4 images' of a batch that ended at `db` or more, where some did; None for one image, or none over.
    The history's PSNR is the batch's mean: without this a batch with two photos plainly back read 'never'."""
    each = metrics.get("psnr_per_image") or []
    over = sum(v >= db for v in each)
    return f"{over} of {len(each)} images" if len(each) > 1 and over else None


def recovered_after(history: dict | None, metrics: dict, short: bool = False) -> str | None:
    """A page's cell: '3.1 s', '12 min 5 s', 'never' (judged by PSNR, did not get there), 'not yet' (stopped
    first), None (not judged by PSNR); `short`, a metric's: '12 min' (words.clock)."""
    if not _timed(history, metrics):
        return None
    back = reached(history, RECOVERED_DB)
    return clock(back[0], short=short) if back is not None else seconds_cell(None, metrics.get("status"))


def seconds_cell(seconds: float | None, status: str | None = None) -> str:
    """'3.1 s', or 'never' for a run that did not get there (`runs list` words its stored figures so too) —
    'not yet' for one stopped first: a run stopped at 29.5 dB read 'never', as if the attack had failed."""
    return f"{seconds:.1f} s" if seconds is not None else "not yet" if status == "stopped" else "never"


def figures(history: dict | None, metrics: dict) -> dict:
    """{'to_20db_s': 1.1, 'to_30db_s': 3.2} for metrics.json (bench --json's names; None: never got there),
    {} where the run is not judged by its PSNR."""
    if not judged_by_psnr(metrics):
        return {}
    hits = {db: reached(history, db) for db in (RECOGNISABLE_DB, RECOVERED_DB)}
    return {f"to_{db:g}db_s": None if hit is None else round(hit[0], 3) for db, hit in hits.items()}
