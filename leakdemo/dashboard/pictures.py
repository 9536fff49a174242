"""Pictures for every dashboard view: encoded once, sent inline and small, enlarged crisply by the browser."""
from __future__ import annotations

import numpy as np
import streamlit as st

from ..artifacts import grid

ORIGINAL_COLOR = "#1f77b4"  # blue: the private data
RECON_COLOR = "#ff7f0e"  # orange: what the attacker rebuilt
CELL = 224  # on-screen pixels per image: nearest-neighbour, crisp on a projector


COLUMN = 520  # on-screen pixels a half-page column offers a batch (wide layout, 1440 px window)
# Pictures are sized for a 1440-px window; in a narrower one (a 1280-px laptop: a half-page column is 378 px),
# or with three or four runs side by side, each shrinks to its own column instead of covering its neighbour.
IMAGE_CSS = """[data-testid="stImage"] img {image-rendering: pixelated; max-width: 100%; height: auto;}
[data-testid="stImageContainer"] {max-width: 100%;}"""


def batch_columns(n: int) -> int:
    """One or two images side by side; more in a near-square block, so a batch of 8 fits its column."""
    return n if n <= 2 else int(np.ceil(np.sqrt(n)))


def batch_grid(images: np.ndarray) -> np.ndarray:
    """The first 16 images of a batch in rows of `batch_columns`, at twice their size, white gaps between
    them (the browser enlarges it further). Originals and reconstructions use the same places."""
    shown = list(images[:16])
    cols = batch_columns(len(shown))
    return grid([shown[i:i + cols] for i in range(0, len(shown), cols)], 2 * images.shape[1])


def batch_zoom(n: int, size: int) -> float:
    """`zoom` for a batch block of n images: each about CELL px, less when its columns would not fit."""
    return zoom(size, min(CELL, COLUMN // batch_columns(min(n, 16))))


def zoom(size: int, cell: int) -> float:
    """How much the browser enlarges a picture sent at twice its size so each image shows at about `cell` px."""
    return max(1, cell // size) / 2


def png_once(key: tuple, make, memo_name: str = "png_memo", limit: int = 12) -> tuple[str, int]:
    """A picture for the page, encoded once per key: (inline data URL, its width in pixels).

    The run panel redraws twice a second and a frame may change less often, so encoding each time would
    take CPU from the attack on a small machine. Inline, the picture travels with the element that shows
    it: there is no media file that a later frame could drop before the browser has fetched it. Pictures
    are sent small (twice the images' own size) and enlarged by the browser with crisp, pixelated scaling:
    an upscaled PNG re-sent on every redraw of a dozen tabs kept the server's one core busy."""
    import base64

    from ..artifacts import png_bytes
    memo = st.session_state.setdefault(memo_name, {})
    if key not in memo:
        if len(memo) > limit:
            memo.clear()
        picture = make()
        memo[key] = ("data:image/png;base64," + base64.b64encode(png_bytes(picture)).decode("ascii"),
                     picture.shape[1])
    return memo[key]


def show(where, key: tuple, make, zoom: float | None, caption: str | None = None) -> None:
    """The picture enlarged `zoom` times, or with zoom None as wide as its column (the page's CSS caps its
    height)."""
    url, width = png_once(key, make)
    where.image(url, width="stretch" if zoom is None else max(1, int(width * zoom)), caption=caption)


def titled_columns(original: str, reconstruction: str, where=st):
    """Two columns under their titles, the titles in a row of their own: a title that wraps to more lines
    than its neighbour's no longer starts its picture lower (CAFE's "Original — all 200 training samples …"
    did, by a line, on a 1280-px screen). Side by side on a phone too: stacked, both titles came first and both
    pictures after them, the original under the reconstruction's title."""
    heads = where.columns(2, gap="large", wrap=False)
    heads[0].markdown(f'<span class="ld-orig">{original}</span>', unsafe_allow_html=True)
    heads[1].markdown(f'<span class="ld-recon">{reconstruction}</span>', unsafe_allow_html=True)
    return where.columns(2, gap="large", wrap=False)
