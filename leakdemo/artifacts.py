"""What a finished run leaves behind: the image grid (PNG), the progress animation (GIF), metrics and
the resolved scenario (JSON, which `run` and the dashboard accept back)."""
from __future__ import annotations

import csv
import io
import json
import math
import os

import numpy as np

from . import milestones
from .captions import caption_rows, captioned

GRID_CELL = 128  # pixels per image in the grid: nearest-neighbour upscaling keeps pixels crisp
GAP = 4


def upscale(img: np.ndarray, cell: int = GRID_CELL) -> np.ndarray:
    """Nearest-neighbour enlargement of an (H, W, 3) image in [0, 1] to about `cell` pixels."""
    k = max(1, cell // img.shape[0])
    return np.kron(img, np.ones((k, k, 1), dtype=img.dtype))


def grid(rows: list[np.ndarray], cell: int = GRID_CELL) -> np.ndarray:
    """uint8 grid: one row per stack of images (e.g. originals, reconstructions), white gaps."""
    tiles = [[upscale(im, cell) for im in row] for row in rows]
    h, w = tiles[0][0].shape[:2]
    n = max(len(r) for r in tiles)
    out = np.ones((len(tiles) * (h + GAP) + GAP, n * (w + GAP) + GAP, 3), dtype=np.float32)
    for i, row in enumerate(tiles):
        for j, t in enumerate(row):
            y, x = GAP + i * (h + GAP), GAP + j * (w + GAP)
            out[y:y + h, x:x + w] = t
    return (np.clip(out, 0, 1) * 255).round().astype(np.uint8)


MOSAIC_FROM = 17  # from this many images on, originals and reconstructions are drawn as two mosaics
MOSAIC_WIDTH = 900  # target pixels per mosaic (each image is enlarged by a whole factor)
PSNR_COLORS = ((milestones.RECOVERED_DB, (0.17, 0.63, 0.17)), (milestones.RECOGNISABLE_DB, (0.93, 0.60, 0.05)),
               (-1e9, (0.84, 0.15, 0.16)))


VERDICT_COLORS = {True: PSNR_COLORS[0][1], False: PSNR_COLORS[2][1]}  # a test passed / failed: green / red


def psnr_color(value: float) -> tuple[float, float, float]:
    """Green from 30 dB (recovered), amber from 20 dB (recognisable), red below."""
    return next(c for bound, c in PSNR_COLORS if value >= bound)


def mosaic(images: np.ndarray, cols: int, cell: int, frames: list | None = None, border: int = 3) -> np.ndarray:
    """Images in rows of `cols`, each enlarged to about `cell` px, optionally framed in a colour each."""
    n, h = len(images), images[0].shape[0]
    k = max(1, cell // h)
    side = h * k + 2 * border
    rows = -(-n // cols)
    out = np.ones((rows * (side + GAP) + GAP, cols * (side + GAP) + GAP, 3), dtype=np.float32)
    for i, im in enumerate(images):
        y, x = GAP + (i // cols) * (side + GAP), GAP + (i % cols) * (side + GAP)
        if frames is not None:
            out[y:y + side, x:x + side] = frames[i]
        out[y + border:y + side - border, x + border:x + side - border] = upscale(im, h * k)
    return (np.clip(out, 0, 1) * 255).round().astype(np.uint8)


def mosaic_layout(n: int, size: int, width: int = MOSAIC_WIDTH) -> tuple[int, int]:
    """(columns, cell px) so that n images of `size` px fill about `width` px per mosaic."""
    cols = max(1, int(np.ceil(np.sqrt(n))))
    return cols, max(size, width // cols)


VERDICTS_PER_ROW = 10  # judged classes per row: PLI's 50 in one row would shrink each face to a few pixels


def class_block(images, cell: int, verdicts: list | None = None) -> np.ndarray:
    """Logit sharing's images, one per class, in rows of ten, each in a 2-px frame: green or red by its
    verdict (the attack-accuracy test), white when unjudged (None) — so a class keeps its column in every block."""
    verdicts = [None] * len(images) if verdicts is None else verdicts
    frames = [(1.0, 1.0, 1.0) if v is None else VERDICT_COLORS[bool(v)] for v in verdicts]
    return mosaic(images, min(len(images), VERDICTS_PER_ROW), cell, frames, border=2)


def judged_classes(verdicts: list | None, n: int) -> bool:
    """Whether a pair_grid of n is logit sharing's classes, each with its verdict (drawn in framed rows of ten)."""
    return verdicts is not None and len(verdicts) == n


def as_mosaics(n: int, baseline: bool) -> bool:
    """Whether a pair_grid of n images (not judged classes) is two mosaics side by side rather than rows."""
    return n >= MOSAIC_FROM and not baseline


def pair_grid(originals: np.ndarray, recon: np.ndarray, cell: int = GRID_CELL, psnr: list | None = None,
              width: int = MOSAIC_WIDTH, baseline: np.ndarray | None = None,
              verdicts: list | None = None) -> np.ndarray:
    """Originals beside reconstructions: two rows for a few images (a third for a baseline attack's, e.g.
    TBI beside PLI), two mosaics side by side for many. With verdicts (logit sharing: whether each class's
    reconstruction passes the attack-accuracy test) the reconstructions are framed green or red, every block
    in rows of ten classes."""
    if judged_classes(verdicts, len(originals)):
        blocks = [class_block(originals, cell), class_block(recon, cell, verdicts)]
        return np.concatenate(blocks + ([class_block(baseline, cell)] if baseline is not None else []), axis=0)
    if not as_mosaics(len(originals), baseline is not None):
        return grid([list(originals), list(recon)] + ([list(baseline)] if baseline is not None else []), cell)
    cols, cell = mosaic_layout(len(originals), originals.shape[1], width)
    frames = None if psnr is None else [psnr_color(v) for v in psnr]
    left = mosaic(originals, cols, cell, [(1, 1, 1)] * len(originals) if frames else None)
    right = mosaic(recon, cols, cell, frames)
    gap = np.full((left.shape[0], 6 * GAP, 3), 255, dtype=np.uint8)
    return np.concatenate([left, gap, right], axis=1)


def shown_originals(originals: np.ndarray, metrics: dict) -> np.ndarray:
    """The private images a result stands for: all of them, or the one batch an attack saw (VFL DLG)."""
    ids = metrics.get("sample_ids")
    return originals if ids is None else originals[np.asarray(ids)]


def layout_words(n: int, params: dict, baseline: bool = False, verdicts: bool = False,
                 psnr_frames: bool = False) -> str:
    """What is where in a pair_grid of n private images (or classes), as the Lab's captions say it; with
    `psnr_frames`, what the frames of a mosaic's reconstructions mean (grid.png draws them)."""
    from .catalog import ATTACKS, LOGIT_PROTOCOLS
    attack = ATTACKS[params["attack"]].short if params.get("attack") in ATTACKS else "the attack"
    if params.get("protocol") in LOGIT_PROTOCOLS or verdicts:
        words = (f"top: each private class's mean image (never sent) · {'middle' if baseline else 'below'}: "
                 f"{attack}'s reconstruction"
                 + (", framed green where it passes the attack-accuracy test, red where not" if verdicts else ""))
    elif as_mosaics(n, baseline):
        words = "left: the private images (never sent) · right: what the server rebuilt" + (
            ", framed green from 30 dB, amber from 20 dB, red below" if psnr_frames else "")
    else:
        words = f"top: the private {'image' if n == 1 else 'images'} (never sent) · below: what the server rebuilt"
    return words + (" · bottom: the TBI baseline (client logits only)" if baseline else "")


def _scenario_words(params: dict) -> list[str]:
    """'DLG on FedSGD · no defense': the run a picture comes from ([] for an unknown scenario)."""
    from .catalog import defense_phrase, headline
    if not params.get("attack") or not params.get("protocol"):
        return []
    return [f"{headline(params)} · {defense_phrase(params)}"]


def _result_words(finished, params: dict) -> str:
    from .catalog import steps_taken
    from .words import fixed
    m = finished.metrics
    after = ("stopped after " if finished.status == "stopped" else "after ") + steps_taken(params, finished.iterations)
    if m.get("attack_accuracy") is not None:
        return (f"attack accuracy {m['attack_accuracy']:.0%} ({sum(m['success'])} of {len(m['success'])} "
                f"classes) {after}")
    if m.get("psnr") is None:
        return after
    return f"PSNR {m['psnr']:.1f} dB, SSIM {fixed(m['ssim'])} {after}"


def grid_png(originals: np.ndarray, finished, params: dict) -> np.ndarray:
    """grid.png: originals beside the result (pair_grid), above what they are and the run's figures."""
    verdicts = finished.metrics.get("success")
    picture = pair_grid(originals, finished.images, psnr=finished.metrics["psnr_per_image"],
                        baseline=finished.baseline, verdicts=verdicts)
    where = layout_words(len(originals), params, finished.baseline is not None,
                         judged_classes(verdicts, len(originals)), psnr_frames=True)
    return captioned(picture, _scenario_words(params) + [where, _result_words(finished, params)])


def side_by_side(pictures: list[np.ndarray], gap: int = 8 * GAP) -> np.ndarray:
    """uint8 pictures in a row, tops aligned, white below the shorter ones and between them."""
    height = max(p.shape[0] for p in pictures)
    padded = [np.pad(p, ((0, height - p.shape[0]), (0, 0), (0, 0)), constant_values=255) for p in pictures]
    spacer = np.full((height, gap, 3), 255, dtype=np.uint8)
    return np.concatenate([x for p in padded for x in (p, spacer)][:-1], axis=1)


def comparison_png(runs: list[tuple[np.ndarray, object, dict]]) -> bytes:
    """comparison.png (Compare's download): each run's grid.png — its pictures over its caption — side by side,
    for (originals, Finished, scenario params) of each run in the page's order."""
    return png_bytes(side_by_side([grid_png(shown_originals(originals, fin.metrics), fin, params)
                                   for originals, fin, params in runs]))


def png_bytes(image: np.ndarray) -> bytes:
    import imageio.v3 as iio
    return iio.imwrite("<bytes>", image, extension=".png")


def gif_bytes(originals: np.ndarray, keyframes: list[tuple[int, np.ndarray]], cell: int = 96,
              params: dict | None = None, total: int | None = None) -> bytes:
    """originals on top (or left), the reconstruction at each kept keyframe below, over a band that says
    what is where and which iteration it is; the last frame lingers."""
    import imageio.v3 as iio
    from .catalog import step_noun
    params = params or {}
    pictures = [pair_grid(originals, images, cell, width=480) for _, images in keyframes]
    head = _scenario_words(params) + [layout_words(len(originals), params)]
    noun = step_noun(params)
    lines = [head + [f"{noun} {it}" + (f" of {total}" if total else "")] for it, _ in keyframes]
    rows = max(caption_rows(each, pictures[0].shape[1]) for each in lines)
    frames = [captioned(p, each, rows) for p, each in zip(pictures, lines)]
    durations = [120] * (len(frames) - 1) + [2000]
    if len(frames) == 1:  # a run stopped at its first frame: Pillow takes one frame's duration as a number
        durations = durations[0]
    return iio.imwrite("<bytes>", np.stack(frames), extension=".gif", duration=durations, loop=0)


def metrics_csv(history: dict, step: str = "iteration") -> str:
    """history.csv: one row per scored step; its first column is named as the attack counts its steps
    (`catalog.step_noun`: PLI's are inversion epochs, not iterations)."""
    buf = io.StringIO()
    keys = list(history)
    w = csv.writer(buf)
    w.writerow([step.replace(" ", "_") if k == "iteration" else k for k in keys])
    for row in zip(*(history[k] for k in keys)):
        # a figure not there (step 0's loss, before any step) is an empty cell, as spreadsheets and pandas read a
        # missing value; it was written "nan", which a spreadsheet takes for text
        w.writerow(["" if isinstance(v, float) and math.isnan(v) else v for v in row])
    return buf.getvalue()


def metrics_json(finished) -> bytes:
    """The final metrics as JSON (AGIC's matching keeps its verdicts; its images go to matching.png), with
    when the picture reached 20 and 30 dB (seconds from the first step, as the Lab says it)."""
    from .events import without_views
    return json.dumps({**without_views(finished.metrics), "seconds": finished.seconds,
                       "iterations": finished.iterations,
                       **milestones.figures(finished.history, finished.metrics)}, indent=2).encode()


def matching_grid(matching: dict, cell: int = 64) -> np.ndarray:
    """One row per observed epoch, one column per private image: the pre-reconstructions AGIC paired, each
    column framed green when its images were paired correctly, red when not (as logit sharing's verdicts are:
    a line of ✓ ✗ under the grid did not say which column each mark was)."""
    views, correct = matching["views"], matching["correct"]
    epochs = len(views[0])
    images = [v[e] for e in range(epochs) for v in views]
    frames = [VERDICT_COLORS[bool(correct[i % len(views)])] for i in range(len(images))]
    return mosaic(np.stack(images), len(views), cell, frames, border=2)


def matching_png(matching: dict, params: dict | None = None) -> bytes:
    """matching.png: the matching grid over what it shows, as the Lab's panel says it."""
    correct = matching["correct"]
    return png_bytes(captioned(matching_grid(matching), _scenario_words(params or {}) + [
        f"Matching across epochs: {sum(correct)} of {len(correct)} images paired correctly",
        "a column per private image · top: AGIC's pre-reconstruction from the first epoch · below: what it paired "
        "with it from the next epoch · green: paired correctly, red: not"]))


# the names run_files can give (matching.png: AGIC's matching only); `--out` checks each before the run
RUN_FILES = ("grid.png", "progress.gif", "metrics.json", "history.csv", "scenario.json", "matching.png")


def run_files(scenario_json: str, originals: np.ndarray, finished, keyframes) -> dict[str, bytes]:
    """A finished run's files, name -> bytes: what `run --out` and `runs export` write and the Lab offers
    for download, under the same names."""
    from .catalog import step_noun
    originals = shown_originals(originals, finished.metrics)
    params = json.loads(scenario_json).get("params", {}) if scenario_json else {}
    files = {
        "grid.png": png_bytes(grid_png(originals, finished, params)),
        "progress.gif": gif_bytes(originals, keyframes, params=params, total=finished.iterations),
        "metrics.json": metrics_json(finished),
        "history.csv": metrics_csv(finished.history, step_noun(params) if params else "iteration").encode(),
        "scenario.json": scenario_json.encode(),
    }
    if finished.metrics.get("matching"):
        files["matching.png"] = matching_png(finished.metrics["matching"], params)
    return files


def write_all(out_dir: str, scenario_json: str, originals: np.ndarray, finished, keyframes) -> list[str]:
    os.makedirs(out_dir, exist_ok=True)
    files = run_files(scenario_json, originals, finished, keyframes)
    for name, data in files.items():
        with open(os.path.join(out_dir, name), "wb") as fh:
            fh.write(data)
    return [os.path.join(out_dir, n) for n in files]
