"""The gallery: a few recorded showcase runs shipped in assets/gallery.sqlite (a run store opened read-only),
so the Compare page can replay them at once on a fresh install, offline, before anything has run — and the
runs of every built-in sweep, so the Trade-offs page and the presenter draw each one's chart at once too.

`python -m leakdemo record-gallery` records them again; `--sweeps-only` renews the sweeps alone,
`--showcases-only` the showcases alone, and `--missing` adds only the runs the gallery lacks (a new built-in
sweep)."""
from __future__ import annotations

import os
import sqlite3
import tempfile
from dataclasses import dataclass

from .errors import LeakdemoError

# every built-in sweep (assets/sweeps/), drawn at once on a fresh install: the presenter's trade-off charts and
# the Trade-offs page's choices; a test checks that none is left out
GALLERY_SWEEPS = ("sweep-dp-dlg", "sweep-prune-dlg", "sweep-batch-dlg", "sweep-dp-dlm-plus", "sweep-steps-dlm-plus",
                  "sweep-fake-gradients-cafe", "sweep-noise-pli", "sweep-topk-pli")
GALLERY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "assets", "gallery.sqlite")


@dataclass(frozen=True)
class Showcase:
    preset: str
    overrides: dict
    why: str


SHOWCASES = (
    Showcase("dlg", {"images": "coffee", "seed": 1}, "DLG rebuilds a photo from one gradient"),
    Showcase("dlg", {"images": "coffee", "seed": 1, "defense": "dp-gaussian", "dp_sigma": 0.01},
             "the same gradient with Gaussian noise σ = 0.01: the photo never appears"),
    Showcase("dlm-plus", {}, "DLM+ rebuilds the photo from FedAvg weights without the learning rate"),
    Showcase("agic-multiround", {}, "AGIC pairs reconstructions across epochs and rebuilds the batch"),
    Showcase("cafe", {}, "CAFE brings back all 200 digits from vertical-FL batches of 40"),
    Showcase("cafe-fake-gradients", {}, "CAFE against fake gradients: the digits stay noise"),
    Showcase("pli", {}, "PLI beside TBI on FedMD logits: what the private faces look like"),
    Showcase("dlg", {"images": "coffee", "seed": 1, "defense": "prune", "prune_ratio": 0.5},
             "DLG against 50 % gradient pruning"),
    Showcase("cafe-training", {}, "CAFE while the federation keeps training: the digits still come back"),
)


def open_gallery(path: str = GALLERY):
    """The shipped showcases — and the runs of the built-in sweeps in GALLERY_SWEEPS — as a read-only run
    store. It is a recording: its sweep runs are found whatever code version recorded them."""
    from .store import RunStore
    if not os.path.isfile(path):
        raise LeakdemoError(f"{path} is missing (record it with `python -m leakdemo record-gallery`)")
    return RunStore(path, read_only=True, any_version=True)


def showcase_why(row: dict) -> str:
    """What a gallery row of a showcase shows, as a title ('The same gradient with Gaussian noise…'); its
    preset for a row recorded under another list of showcases."""
    i = row["id"] - 1
    why = SHOWCASES[i].why if 0 <= i < len(SHOWCASES) and SHOWCASES[i].preset == row["preset"] else row["preset"]
    return why[:1].upper() + why[1:]


def showcase_rows(gallery) -> list[dict]:
    """The gallery's showcases in order (its sweep runs are not showcases)."""
    return sorted((r for r in gallery.runs(limit=1000) if r["source"] == "gallery"), key=lambda r: r["id"])


def recorded_sweep(base, axes, seeds: int, own):
    """A sweep whose every run is already recorded: (sweep, from_gallery, lacking). The sweep reads the first
    of this machine's run store (`own`, may be None) and the gallery that holds all its runs, so its events
    compute nothing; from_gallery says it is the gallery's recording (another machine, maybe another code
    version). When neither holds them all: (None, False, the fewest runs either lacks)."""
    from .sweep import Sweep, lacking_runs
    fewest = None
    for store in (own, _gallery_or_none()):
        if store is None:
            continue
        n = lacking_runs(Sweep(base, axes, seeds=seeds, store=store))
        if n == 0:  # a fresh Sweep: listing the tasks notes refused points on the one that listed them
            return Sweep(base, axes, seeds=seeds, store=store), store.any_version, 0
        fewest = n if fewest is None else min(fewest, n)
    return None, False, fewest


def _gallery_or_none():
    try:
        return open_gallery()
    except LeakdemoError:
        return None


def record(path: str = GALLERY, progress=print) -> str:
    """Run every showcase and every sweep of GALLERY_SWEEPS afresh into a new store, compacted into `path`
    (replacing it only at the end)."""
    from .store import RunStore
    folder = os.path.dirname(os.path.abspath(path))
    tmp = tempfile.mkdtemp(prefix="gallery-", dir=folder)
    work = os.path.join(tmp, "gallery.sqlite")
    store = RunStore(work)
    _record_showcases(store, progress)
    _record_sweeps(store, progress)
    return _compact(work, path, tmp)


def _record_showcases(store, progress) -> None:
    """Every showcase into `store`, which must be new: its runs get the ids 1, 2, … that scenes g1, g2, … name."""
    from .runner import Run
    from .scenario import from_preset
    for i, show in enumerate(SHOWCASES, 1):
        sc = from_preset(show.preset, show.overrides)
        run = Run(sc, store=store, fresh=True, source="gallery")
        last = None
        for ev in run.events():
            last = ev
        if getattr(last, "event", None) != "finished":
            raise LeakdemoError(f"showcase {show.preset} did not finish: {getattr(last, 'message', last)}")
        progress(f"[{i}/{len(SHOWCASES)}] {show.preset}: {show.why} — PSNR {last.metrics['psnr']:.1f} dB "
                 f"in {last.seconds:.0f} s")


def record_showcases(path: str = GALLERY, progress=print, source: str = GALLERY) -> str:
    """The gallery at `source` with its showcases recorded anew, written to `path`; the sweeps' runs stay as
    they are (their charts as shipped). The new runs take the old ones' ids, 1 to len(SHOWCASES)."""
    import shutil

    from .store import RunStore
    tmp = tempfile.mkdtemp(prefix="gallery-", dir=os.path.dirname(os.path.abspath(path)))
    fresh, work = os.path.join(tmp, "showcases.sqlite"), os.path.join(tmp, "gallery.sqlite")
    _record_showcases(RunStore(fresh), progress)
    shutil.copyfile(source, work)
    conn = sqlite3.connect(work)
    try:
        conn.execute("ATTACH DATABASE ? AS fresh", (fresh,))
        with conn:
            conn.execute("DELETE FROM images WHERE run_id IN (SELECT id FROM runs WHERE source = 'gallery')")
            conn.execute("DELETE FROM runs WHERE source = 'gallery'")
            conn.execute("INSERT INTO runs SELECT * FROM fresh.runs")
            conn.execute("INSERT INTO images SELECT * FROM fresh.images")
        conn.execute("DETACH DATABASE fresh")
    finally:
        conn.close()
    for name in os.listdir(tmp):  # the fresh store and its journal files: _compact keeps only the gallery
        if name.startswith("showcases.sqlite"):
            os.remove(os.path.join(tmp, name))
    return _compact(work, path, tmp)


def record_sweeps(path: str = GALLERY, progress=print, source: str = GALLERY, missing: bool = False) -> str:
    """The gallery at `source` with the GALLERY_SWEEPS' runs recorded anew, written to `path`; its showcases
    stay as they are. missing: keep every recorded run (whatever code version recorded it) and record only
    the runs the gallery lacks — a new built-in sweep's — so the others' charts stay as shipped."""
    import shutil

    from .store import RunStore
    tmp = tempfile.mkdtemp(prefix="gallery-", dir=os.path.dirname(os.path.abspath(path)))
    work = os.path.join(tmp, "gallery.sqlite")
    shutil.copyfile(source, work)
    if not missing:
        with sqlite3.connect(work) as conn:
            conn.execute("DELETE FROM images WHERE run_id IN (SELECT id FROM runs WHERE source = 'sweep')")
            conn.execute("DELETE FROM runs WHERE source = 'sweep'")
    _record_sweeps(RunStore(work, any_version=missing), progress, fresh=not missing)
    return _compact(work, path, tmp)


def _record_sweeps(store, progress, fresh: bool = True) -> None:
    from .scenario import load
    from .sweep import PointDone, Sweep, SweepFinished, parse_axis
    from .sweeps import sweeps
    for name in GALLERY_SWEEPS:
        spec = sweeps()[name]
        base = load(spec.base, spec.set)
        sweep = Sweep(base, [parse_axis(v, base) for v in spec.vary], seeds=spec.seeds, store=store, fresh=fresh)
        for ev in sweep.events():
            if isinstance(ev, PointDone):
                progress(f"sweep {name}: {ev.done_runs}/{ev.total_runs} runs")
            if isinstance(ev, SweepFinished) and ev.status != "finished":
                raise LeakdemoError(f"sweep {name} did not finish: {ev.status}")


def _compact(work: str, path: str, tmp: str) -> str:
    out = os.path.join(tmp, "compact.sqlite")
    with sqlite3.connect(work) as conn:  # one self-contained file in rollback mode: readable read-only anywhere
        # a sweep's chart, strip and table read a run's figures and its last frame, never its keyframes (the
        # showcases' replay does): 4 of the 6 MB the six sweeps would add
        conn.execute("DELETE FROM images WHERE kind = 'keyframe' AND run_id IN "
                     "(SELECT id FROM runs WHERE source = 'sweep')")
        conn.commit()
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute(f"VACUUM INTO '{out}'")
    with sqlite3.connect(out) as conn:
        conn.execute("PRAGMA journal_mode = DELETE")
    os.replace(out, path)
    for f in os.listdir(tmp):
        os.remove(os.path.join(tmp, f))
    os.rmdir(tmp)
    return path
