"""The AGIC view over several epochs: which pre-reconstructions it paired, checked outside the attack."""
from __future__ import annotations

import streamlit as st

from ...artifacts import matching_grid
from ..pictures import CELL, show, zoom


def matching_panel(run: int, m: dict) -> None:
    """AGIC over several epochs: which pre-reconstructions it paired, checked outside the attack."""
    with st.container(border=True):
        st.markdown(f"**Matching across epochs:** {sum(m['correct'])} of {len(m['correct'])} images paired "
                    f"correctly ({m['rate']:.0%})")
        size = m["views"][0].shape[1]
        show(st, ("matching", run), lambda: matching_grid(m, 2 * size), zoom(size, CELL // 2),
             "Frame: green ✓ paired correctly, red ✗ not")
        st.caption("One column per private image: the top row is what AGIC pre-reconstructed from the first "
                   "epoch's uploads, each row below what it paired with it from the next epoch (2×2-pooled MSE, "
                   "same inferred label). Each column's frame is checked against the private images by the "
                   "dashboard, never by the attack.")
