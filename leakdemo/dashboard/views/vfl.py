"""The vertical-FL view (CAFE): many private samples as two mosaics framed by PSNR, the tiles each worker
holds, Steps I–II against the truth, and the training loss a defense costs."""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import streamlit as st

from ...artifacts import grid, mosaic, mosaic_layout, psnr_color
from ...settings import round_clients, tile_grid, tiles
from ..axes import RUN_FRAME, log_axis
from ..pictures import RECON_COLOR, show, titled_columns, zoom

PAGE = 100  # samples per page of the data-set view


def dataset_panel(run: int, started, originals: np.ndarray, images, per: list, ids, frame: tuple) -> None:
    """Many private samples (vertical FL): two mosaics, a page at a time, each reconstruction framed by
    its PSNR; the tiles the workers hold; which samples an attack on one batch saw."""
    scenario = started.scenario["params"]
    n = len(originals)
    start = 0
    if n > PAGE:
        pages = [f"{i + 1}–{min(i + PAGE, n)}" for i in range(0, n, PAGE)]
        page = st.segmented_control("Samples shown", pages, default=pages[0], key="vfl_sample_page") or pages[0]
        start = pages.index(page) * PAGE
    shown = slice(start, min(start + PAGE, n))
    size = originals.shape[1]
    cols, shown_cell = mosaic_layout(min(PAGE, n), size, width=640)
    cell, z = 2 * size, zoom(size, shown_cell)
    clients = round_clients(scenario)
    what = ("the batch DLG attacked" if ids is not None
            else f"the images of all {clients} clients" if clients > 1 else f"all {n} training samples")
    left, right = titled_columns(f"Original — {what} (private, never sent)", "Reconstruction (what the server rebuilt)")
    # the same border as the framed reconstructions beside them: both mosaics the same size (the originals' was ~5 % smaller)
    show(left, ("orig", run, start, ids is None), lambda: mosaic(originals[shown], cols, cell, border=2), z)
    if images is not None and len(per) == n:
        frames = [psnr_color(v) for v in per[shown]]
        key = ("recon", run, start, frame)
        show(right, key, lambda: mosaic(images[shown], cols, cell, frames, border=2), z)
        good, fair = sum(v >= 30 for v in per), sum(20 <= v < 30 for v in per)
        right.caption(f"Frame = that sample's PSNR: :green[green ≥ 30 dB] ({good}), :orange[amber 20–30 dB] "
                      f"({fair}), :red[red < 20 dB] ({n - good - fair}) of {n}.")
    if ids is not None and n == 1:  # nothing to pair ("it cannot tell the 1 samples apart" said nothing)
        st.caption("DLG sees the gradient of one batch, here of one sample: it is scored on that sample alone.")
    elif ids is not None:
        st.caption(f"DLG sees one aggregated batch gradient: it cannot tell the {n} samples apart, so its "
                   "images are paired with that batch's originals by the Hungarian algorithm before scoring.")
    elif clients > 1 and scenario.get("secure_aggregation"):
        st.caption(f"The server saw only the average of the {clients} clients' gradients (secure aggregation): its "
                   "reconstructions come back in any order, so each is paired with an original by the Hungarian "
                   "algorithm before scoring.")
    elif clients > 1:
        st.caption(f"In the order the {clients} clients sent their gradients: the server knows which client sent "
                   "which" + (", so each reconstruction is scored against its own original." if scenario["batch_size"] == 1
                              else "; a client's batch comes back in any order, so the reconstructions are paired "
                              "with the originals by the Hungarian algorithm before scoring."))
    elif scenario.get("protocol") == "vfl":
        grid_rc = tile_grid(scenario["workers"])
        parts = tiles(started.originals[:1].transpose(0, 3, 1, 2), grid_rc)
        views = [p[0].transpose(1, 2, 0) for p in parts]
        c1, c2 = st.columns([1, 3])
        show(c1, ("tiles", run), lambda: grid([views], 2 * views[0].shape[0]), zoom(views[0].shape[0], 96))
        c2.caption(f"What each of the {scenario['workers']} workers holds of sample 1 (a {grid_rc[0]}×{grid_rc[1]} "
                   "grid of tiles): no party ever has a whole image — yet the server rebuilds them all, each "
                   "scored against its own original (the server chose the indices, so it knows which is which).")


def steps_chart(c: dict):
    """CAFE's Steps I and II: how far its per-sample estimates are from the truth (scored by the Runner)."""
    fig = go.Figure()
    for key, name, color in (("step1_error", "Step I: ∂L/∂u per sample", "#6a3d9a"),
                             ("step2_error", "Step II: first-FC input h per sample", "#2ca02c")):
        pts = [(i, v) for i, v in zip(c["iteration"], c[key]) if v is not None]
        fig.add_trace(go.Scatter(x=[i for i, _ in pts], y=[v for _, v in pts], name=name, line=dict(color=color, width=3)))
    fig.update_layout(height=300, margin=RUN_FRAME, title="Steps I–II: relative error vs the truth",
                      xaxis_title="iteration", yaxis=log_axis([*c["step1_error"], *c["step2_error"]]),
                      legend=dict(orientation="h", y=-0.25), font=dict(size=14))
    return fig


def utility_chart(u: dict):
    """What the defense costs: the VFL model's training loss with and without it."""
    fig = go.Figure()
    step = np.arange(1, len(u["defended"]) + 1)  # SGD step 1 … 200, the axis ending where its title says
    fig.add_trace(go.Scatter(x=step, y=u["defended"], name="with this defense" if "clean" in u else "no defense",
                             line=dict(color=RECON_COLOR, width=3)))
    if "clean" in u:
        fig.add_trace(go.Scatter(x=np.arange(1, len(u["clean"]) + 1), y=u["clean"], name="no defense",
                                 line=dict(color="#555", width=2, dash="dot")))
    fig.update_layout(height=300, margin=RUN_FRAME,  # the Lab's grid of charts in one frame
                      # the steps and rate under the axis: in the title they ran off a 1024-px laptop's chart
                      title="Utility: training loss", xaxis_title=f"SGD step (of {u['steps']}, lr {u['lr']:g})",
                      yaxis=dict(rangemode="tozero"), font=dict(size=14),
                      # shown for one line too ("no defense"): the Steps chart beside it has a legend, and their
                      # x-axes only line up when both have one
                      showlegend=True, legend=dict(orientation="h", y=-0.25))
    attacked = u.get("while_attacked")
    if attacked:  # the model kept training during the attack: its own loss, on the attack's iterations (top axis)
        total = u.get("attacked_iterations", len(attacked))
        fig.add_trace(go.Scatter(x=np.linspace(1, total, len(attacked)), y=attacked, xaxis="x2",
                                 name=f"the federation during the attack (Adam {u.get('train_lr', 0):g}; top axis: "
                                      "iteration)", line=dict(color="#1f77b4", width=2)))
        fig.update_layout(xaxis2=dict(overlaying="x", side="top", showgrid=False, tickmode="auto"),
                          height=330, margin=dict(t=60), legend=dict(orientation="h", y=-0.4))
    return fig
