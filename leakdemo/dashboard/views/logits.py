"""The logit-sharing view (PLI, TBI): per private class its mean image, the reconstruction with the paper's
✓/✗, the TBI baseline beside it, attack accuracy over the rounds and what a logit defense costs."""
from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

from ...artifacts import VERDICTS_PER_ROW, class_block
from ...words import fixed
from ..axes import RUN_FRAME
from ..pictures import RECON_COLOR, show, zoom


PER_ROW = VERDICTS_PER_ROW  # classes per row: 50 in one row would shrink each face to a few pixels


def classes_panel(run: int, started, images, baseline, success, latest) -> None:
    """Logit sharing: per private target class, its mean private image, the attack's reconstruction (framed
    green ✓ when it passes the paper's attack-accuracy test, red ✗ when not) and the TBI baseline's."""
    params = started.scenario["params"]
    n = len(started.originals)
    cell = 96 if n <= PER_ROW else 80  # ten of 80 px fit the page's main column
    rows, labels = [list(started.originals)], ["Private class mean (never sent)"]
    name = "PLI" if params["attack"] == "pli" else "TBI"
    if images is not None:
        rows.append(list(images))
        labels.append(f"{name} reconstruction (what the server rebuilt)")
    if baseline is not None:
        rows.append(list(baseline))
        labels.append("TBI baseline (client logits only)")
    frame = latest.iteration if latest is not None else -1
    judged = images is not None and success is not None and len(success) == n
    for i, (text, cls, row) in enumerate(zip(labels, ("ld-orig", "ld-recon", "ld-base"), rows)):
        st.markdown(f'<span class="{cls}">{text}</span>', unsafe_allow_html=True)
        size = row[0].shape[0]
        verdicts = tuple(map(bool, success)) if i == 1 and judged else None  # PLI's row: framed by them

        def picture(row=row, size=size, verdicts=verdicts):
            return class_block(row, 2 * size, verdicts)
        show(st, ("classes", run, i, -1 if i == 0 else frame, verdicts), picture, zoom(size, cell))
        if i == 1 and judged:  # the verdicts right under the faces they judge, not under TBI's
            st.caption("Frame: green ✓ passes the attack-accuracy test, red ✗ fails — "
                       + "  ".join(f"{'✓' if ok else '✗'} {nm.split(' (')[0]}" for ok, nm in zip(success, started.names)))
    if latest is not None and params.get("inversion_epochs"):
        rnd = min(params["rounds"], latest.iteration // params["inversion_epochs"] + 1)
        st.caption(f"Communication round {rnd} of {params['rounds']}: each round brings the clients' new logits "
                   "and the inversion networks train on them. ✓ = the reconstruction is more similar (SSIM) to "
                   "its class's mean private image than to any other class's mean private or public image (the "
                   "PLI paper's attack accuracy), checked by the dashboard, never by the attack.")


def logit_metrics(fin, attack: str) -> None:
    m = fin.metrics
    cols = st.columns(5)
    name = attack.upper()
    # short labels: five metrics share a 560-px main area on a 1024-px laptop ("Attack acc…" before)
    cols[0].metric(f"{name} accuracy", f"{m['attack_accuracy']:.0%}",
                   help=f"{name}'s attack accuracy: the share of private target classes whose reconstruction is "
                        "closest (SSIM) to their own mean private image")
    if m.get("baseline_attack_accuracy") is not None:
        cols[1].metric("TBI accuracy", f"{m['baseline_attack_accuracy']:.0%}",
                       help="the TBI baseline's attack accuracy, by the same test")
    cols[2].metric("SSIM", fixed(m['ssim_to_mean']),
                   help="SSIM of each reconstruction to its class's mean private image, averaged")
    u = m.get("utility") or {}
    if u.get("defended"):
        acc = sum(u["defended"]) / len(u["defended"])
        # percentage points, short enough for the column ("+10.0% vs no defe…" before, and % read as relative)
        delta = None if "clean" not in u else f"{100 * (acc - sum(u['clean']) / len(u['clean'])):+.1f} pts"
        cols[3].metric("Utility", f"{acc:.1%}", delta=delta,
                       help="the clients' accuracy on held-out clean images of the private classes: what the "
                            "federation is for"
                            + ("; below it, the change in percentage points from the same federation without "
                               "the defense" if delta else ""))
    cols[4].metric("Time", f"{fin.seconds:.1f} s")


def accuracy_chart(c: dict, name: str):
    """PLI (and TBI beside it): the paper's attack accuracy as the rounds go by. `name` labels the attack's
    line as its metric above does ("PLI"), not as "this attack"."""
    fig = go.Figure()
    for key, name, color in (("attack_accuracy", name, RECON_COLOR),
                             ("baseline_attack_accuracy", "TBI baseline", "#555")):
        pts = [(i, v) for i, v in zip(c["iteration"], c[key]) if v is not None]
        if pts:
            fig.add_trace(go.Scatter(x=[i for i, _ in pts], y=[v for _, v in pts], name=name,
                                     line=dict(color=color, width=3)))
    fig.update_layout(height=300, margin=RUN_FRAME, title="Attack accuracy",  # fits 1024 px
                      xaxis_title="inversion epoch",
                      yaxis=dict(range=[0, 1.05], tickformat=".0%", title="share of target classes"),
                      legend=dict(orientation="h", y=-0.25), font=dict(size=14))
    return fig
