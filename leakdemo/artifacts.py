"""What a finished run leaves behind: the image grid (PNG), the progress animation (GIF), metrics and
the resolved scenario (JSON, which `run` and the dashboard accept back)."""
from __future__ import annotations

import csv
import io
import json
import os

import numpy as np

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


def png_bytes(image: np.ndarray) -> bytes:
    import imageio.v3 as iio
    return iio.imwrite("<bytes>", image, extension=".png")


def gif_bytes(originals: np.ndarray, keyframes: list[tuple[int, np.ndarray]], cell: int = 96) -> bytes:
    """originals on top, the reconstruction at each kept keyframe below; the last frame lingers."""
    import imageio.v3 as iio
    frames = [grid([list(originals), list(images)], cell) for _, images in keyframes]
    durations = [120] * (len(frames) - 1) + [2000]
    return iio.imwrite("<bytes>", np.stack(frames), extension=".gif", duration=durations, loop=0)


def metrics_csv(history: dict) -> str:
    buf = io.StringIO()
    keys = list(history)
    w = csv.writer(buf)
    w.writerow(keys)
    for row in zip(*(history[k] for k in keys)):
        w.writerow(row)
    return buf.getvalue()


def metrics_json(finished) -> bytes:
    """The final metrics as JSON (AGIC's matching keeps its verdicts; its images go to matching.png)."""
    from .events import without_views
    return json.dumps({**without_views(finished.metrics), "seconds": finished.seconds,
                       "iterations": finished.iterations}, indent=2).encode()


def matching_grid(matching: dict, cell: int = 64) -> np.ndarray:
    """One row per observed epoch, one column per private image: the pre-reconstructions AGIC paired."""
    views = matching["views"]
    return grid([[v[e] for v in views] for e in range(len(views[0]))], cell)


def matching_png(matching: dict) -> bytes:
    return png_bytes(matching_grid(matching))


def write_all(out_dir: str, scenario_json: str, originals: np.ndarray, finished, keyframes) -> list[str]:
    os.makedirs(out_dir, exist_ok=True)
    files = {
        "grid.png": png_bytes(grid([list(originals), list(finished.images)])),
        "progress.gif": gif_bytes(originals, keyframes),
        "metrics.json": metrics_json(finished),
        "history.csv": metrics_csv(finished.history).encode(),
        "scenario.json": scenario_json.encode(),
    }
    if finished.metrics.get("matching"):
        files["matching.png"] = matching_png(finished.metrics["matching"])
    for name, data in files.items():
        with open(os.path.join(out_dir, name), "wb") as fh:
            fh.write(data)
    return [os.path.join(out_dir, n) for n in files]
