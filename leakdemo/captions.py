"""Captions drawn into the pictures people download (grid.png, progress.gif, strip.png, matching.png): away
from the page that said what they show — on a slide, in a report — they say it themselves."""
from __future__ import annotations

import os
from functools import lru_cache

import numpy as np

CAPTION_PX = 13  # font size of the band under a downloaded picture, up to CAPTION_PX_MAX under a wide one
CAPTION_PX_MAX = 22
CAPTION_MIN_WIDTH = 300  # a one-photo grid (136 px) is widened, centred, rather than wrap its caption word by word
CAPTION_PAD = 6


@lru_cache(maxsize=None)
def _font(size: int = CAPTION_PX):
    """DejaVu Sans from matplotlib's own files (offline; it has σ, ε, ≥ and ·, which Pillow's built-in font
    draws as boxes), found without importing matplotlib; Pillow's font where that file is missing."""
    from importlib.util import find_spec

    from PIL import ImageFont
    spec = find_spec("matplotlib")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        try:
            return ImageFont.truetype(os.path.join(folder, "mpl-data", "fonts", "ttf", "DejaVuSans.ttf"), size)
        except OSError:
            continue
    return ImageFont.load_default(size=size)


def wrapped(lines: list[str], width: int, font) -> list[str]:
    """The lines broken at spaces so that each fits `width` pixels (a single word wider stays whole)."""
    out = []
    for line in lines:
        row = ""
        for word in line.split(" "):
            trial = f"{row} {word}" if row else word
            if row and font.getlength(trial) > width:
                out.append(row)
                row = word
            else:
                row = trial
        out.append(row)
    return out


def captioned(picture: np.ndarray, lines: list[str], rows: int = 0) -> np.ndarray:
    """The picture above a white band holding `lines` (wrapped to its width; at least `rows` text rows tall,
    so that a GIF's frames keep one size), widened with white, picture centred, where it is narrower than
    CAPTION_MIN_WIDTH."""
    from PIL import Image, ImageDraw
    width = max(picture.shape[1], CAPTION_MIN_WIDTH)
    font = _font(_caption_px(width))
    text = wrapped(lines, width - 2 * CAPTION_PAD, font)
    line_px = round(_caption_px(width) * 1.35)
    band = 2 * CAPTION_PAD + line_px * max(len(text), rows)
    canvas = Image.new("RGB", (width, picture.shape[0] + band), "white")
    canvas.paste(Image.fromarray(picture), ((width - picture.shape[1]) // 2, 0))
    draw = ImageDraw.Draw(canvas)
    for i, row in enumerate(text):
        draw.text((CAPTION_PAD, picture.shape[0] + CAPTION_PAD + i * line_px), row, fill=(60, 60, 60), font=font)
    return np.asarray(canvas)


def _caption_px(width: int) -> int:
    """The caption's font size under a picture this wide: CAFE's 1772-px mosaics read it at 17 px."""
    return min(CAPTION_PX_MAX, max(CAPTION_PX, width // 100))


def labelled_row(images: list[np.ndarray], captions: list[str], name: str = "", cell: int = 96) -> np.ndarray:
    """Images side by side, each over its caption ('0.01 · 15.0 dB' as two centred lines: the value, then the
    figure; wrapped to the picture's width), under the row's `name` where it has one (a second axis's value: 'clip norm = 4')."""
    from PIL import Image, ImageDraw

    from .artifacts import GAP, upscale
    # grey pictures (digits, faces: PLI's sweeps) as RGB: PIL takes no (H, W, 1) array, and strip.png crashed
    tiles = [np.repeat(t, 3 // t.shape[2], axis=2) for t in (upscale(im, cell) for im in images)]
    side = tiles[0].shape[0]
    font, line_px = _font(CAPTION_PX - 1), round((CAPTION_PX - 1) * 1.35)
    split = [wrapped(caption.split(" · "), side, font) for caption in captions]
    top = line_px + GAP if name else 0
    height = top + side + GAP + line_px * max(len(s) for s in split) + 2 * GAP
    canvas = Image.new("RGB", (len(tiles) * (side + GAP) + GAP, height), "white")
    draw = ImageDraw.Draw(canvas)
    if name:
        draw.text((GAP, GAP), name, fill=(60, 60, 60), font=font)
    for j, (tile, rows) in enumerate(zip(tiles, split)):
        x = GAP + j * (side + GAP)
        canvas.paste(Image.fromarray((np.clip(tile, 0, 1) * 255).round().astype(np.uint8)), (x, top + GAP))
        for i, row in enumerate(rows):
            draw.text((x + (side - font.getlength(row)) / 2, top + side + 2 * GAP + i * line_px), row,
                      fill=(60, 60, 60), font=font)
    return np.asarray(canvas)


def caption_rows(lines: list[str], picture_width: int) -> int:
    """How many text rows `captioned` gives these lines under a picture this wide."""
    width = max(picture_width, CAPTION_MIN_WIDTH)
    return len(wrapped(lines, width - 2 * CAPTION_PAD, _font(_caption_px(width))))
