"""The FedSGD / FedAvg view: the private images beside the current reconstruction, each captioned with its PSNR."""
from __future__ import annotations

import numpy as np
import streamlit as st

from ...artifacts import mosaic, psnr_color
from ...settings import clients_apart
from ..pictures import batch_grid, batch_zoom, show, titled_columns

ROW_KEY = "ld_row"
ROW_HEIGHT = "34vh"  # the row's pictures fill their columns up to this: big on a projector, the curves in reach
ROW_CSS = f".st-key-{ROW_KEY} [data-testid=\"stImage\"] img {{max-height: {ROW_HEIGHT}; object-fit: contain;}}"


def images_panel(seq: int, started, originals: np.ndarray, images, per: list, frame: tuple) -> None:
    """A few private images: originals on the left, the reconstruction (matched to them) in the same places
    on the right — a row for one or two images, a block for a batch."""
    row = len(originals) <= 2  # one or two images grow with the window (a projector), up to ROW_HEIGHT
    left, right = titled_columns("Original (private, never sent)", "Reconstruction (what the server rebuilt)",
                                 st.container(key=ROW_KEY if row else None))
    z = None if row else batch_zoom(len(originals), originals.shape[1])
    show(left, ("row", seq, -1), lambda: batch_grid(originals), z, ", ".join(started.names[:16]))
    if images is not None:
        show(right, ("row", seq, frame), lambda: batch_grid(images), z,
              " · ".join(f"{v:.1f}\u00a0dB" for v in per[:16]) or None)  # "21.0 | dB" broke over two lines
    params = started.scenario["params"]
    if len(originals) > 1 and params.get("attack") == "cafe":
        st.caption("Each reconstruction is scored against its own original: the server chose the batch "
                   "indices, so it knows which sample is which.")
    elif len(originals) > 1 and clients_apart(params) > 1 and params.get("batch_size") == 1:
        st.caption(f"One image per client, in the order the {params['clients']} clients sent their gradients: the "
                   "server knows which client sent which, so each reconstruction is scored against its own original.")
    elif len(originals) > 1:
        st.caption("Batch reconstructions come back in any order; each is paired with its original by the "
                   "Hungarian algorithm before scoring.")


TRIALS_WIDTH, TRIALS_CELL = 480, 160  # px of the racing starts' mosaic, and at most of one start in it


def trials_layout(n: int, size: int) -> tuple[int, int]:
    """(columns, cell px) for n racing starts: a strip about twice as wide as tall under the picture (a square
    block of 8 starts, 3 × 160 px, stood 500 px tall and pushed the curves off a laptop's screen; now 4 × 2 at
    120 px, 16 starts 6 × 3 at 80)."""
    rows = max(1, round((n / 2) ** 0.5))
    cols = -(-n // rows)
    return cols, max(size, min(TRIALS_CELL, TRIALS_WIDTH // cols))


def trials_panel(seq: int, latest) -> None:
    """Racing starts, on request: every shown trial's current estimate, framed by its PSNR (scored outside
    the attack), so the class sees K starts race and one win."""
    n = len(latest.trials)
    if not st.toggle(f"Show all {n} racing starts", key="show_trials",
                     help="Each start's current estimate, framed green from 30 dB, amber from 20 dB, red below."):
        return
    cols, cell = trials_layout(n, latest.trials.shape[1])
    frames = [psnr_color(v) for v in latest.trials_psnr]
    best = int(np.argmax(latest.trials_psnr))
    show(st, ("trials", seq, latest.iteration), lambda: mosaic(latest.trials, cols, cell, frames), 1.0,
         f"{n} starts · best: start {best + 1} at {latest.trials_psnr[best]:.1f} dB")
