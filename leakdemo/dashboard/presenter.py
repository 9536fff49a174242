"""Presenter mode: the recorded showcases as full-screen scenes for a projector — no sidebar, no controls but
Previous / Next (keyboard: ← and →), big pictures and figures, each scene replaying its run by itself.

Opened as the Present page, or with ?present=1 on the app's address (then the navigation is hidden too)."""
from __future__ import annotations

import streamlit as st

from ..artifacts import grid, pair_grid, shown_originals
from ..errors import LeakdemoError
from ..gallery import SHOWCASES, open_gallery
from .compare import frame_at

TICK = 0.3
REPLAY_SECONDS = 6.0
CSS = """
<style>
[data-testid="stSidebar"], [data-testid="stSidebarCollapsedControl"], header, footer {display: none !important;}
.block-container {padding: 1.2rem 2.5rem 0.5rem 2.5rem !important; max-width: 100% !important;}
h1 {font-size: 2.4rem !important; margin: 0 !important; padding: 0 !important;}
.ld-why {font-size: 1.45rem; color: #333; margin: 0.2rem 0 0.6rem 0;}
[data-testid="stMetricValue"] {font-size: 2.6rem !important;}
[data-testid="stMetricLabel"] p {font-size: 1.1rem !important;}
[data-testid="stImage"] img {image-rendering: pixelated; max-height: 58vh; width: auto !important;
                              margin: 0 auto; display: block;}
[data-testid="stImageCaption"] {font-size: 1.1rem !important; text-align: center;}
</style>
"""


def _scenes():
    g = open_gallery()
    rows = sorted(g.runs(limit=100), key=lambda r: r["id"])
    return g, rows


def _go(step: int, count: int) -> None:
    st.session_state["p_scene"] = (st.session_state.get("p_scene", 0) + step) % count
    st.session_state["p_pos"] = 0.0


def main() -> None:
    st.markdown(CSS, unsafe_allow_html=True)
    try:
        store, rows = _scenes()
    except LeakdemoError as e:
        st.error(f"Presenter mode needs the recorded showcases: {e}")
        return
    if not rows:
        st.error("The gallery holds no showcases (`python -m leakdemo record-gallery`).")
        return
    if "p_scene" not in st.session_state:
        try:
            st.session_state["p_scene"] = max(0, min(len(rows), int(st.query_params.get("scene", "1")) - 1))
        except ValueError:
            st.session_state["p_scene"] = 0
        st.session_state["p_pos"] = 0.0
    count = len(rows) + 1  # the showcases, then what a defense costs
    if st.session_state["p_scene"] >= len(rows):
        tradeoff_scene(count)
        return
    pace = TICK if st.session_state.get("p_pos", 0.0) < 1.0 else None
    st.fragment(run_every=pace)(scene)(store.path, rows, pace)


def _nav(count: int, where) -> None:
    b1, b2 = where.columns(2)
    b1.button("Back", on_click=_go, args=(-1, count), shortcut="Left", width="stretch",
              help="the previous scene (key: ←)")
    b2.button("Next", on_click=_go, args=(1, count), shortcut="Right", width="stretch", type="primary",
              help="the next scene (key: →)")


def tradeoff_scene(count: int) -> None:
    """The last scene: the built-in DP sweep's chart, from the run store (run it once on the Trade-offs page)."""
    from ..scenario import load
    from ..store import open_store
    from ..sweep import Sweep, SweepFinished, _from_store, parse_axis
    from ..sweeps import sweeps
    from .tradeoffs import strength_figure
    head, nav = st.columns([5, 1.3])
    head.title("What a defense costs: privacy against utility")
    spec = sweeps()["sweep-dp-dlg"]
    head.markdown(f'<div class="ld-why">{spec.title} · scene {count} of {count}</div>', unsafe_allow_html=True)
    _nav(count, nav)
    rows = st.session_state.get("p_sweep_rows")
    if rows is None:
        try:
            base = load(spec.base, spec.set)
            sweep = Sweep(base, [parse_axis(v, base) for v in spec.vary], seeds=spec.seeds, store=open_store())
            missing = sum(1 for t in sweep.tasks() if sweep.store is None or _from_store(sweep.store, t) is None)
            if missing:
                st.info(f"The run store lacks {missing} run(s) of this sweep: run it once on the Trade-offs page "
                        "(about 5 minutes on a laptop); from then on this scene draws it at once.")
                return
            rows = next(ev.rows for ev in sweep.events() if isinstance(ev, SweepFinished))
            st.session_state["p_sweep_rows"] = rows
        except LeakdemoError as e:
            st.info(f"The sweep cannot be drawn here: {e}")
            return
    fig = strength_figure(rows, ["dp_sigma", "dp_clip"], True)
    fig.update_layout(height=560, font=dict(size=18), title=None)
    st.plotly_chart(fig, config={"displayModeBar": False})


@st.cache_data(max_entries=16, show_spinner=False)
def _run(path: str, run_id: int):
    from ..store import RunStore
    return RunStore(path, read_only=True).load(run_id)


def scene(path: str, rows, pace) -> None:
    """One scene: its title, what it shows, the run replaying by itself, and the figures at the end. The
    timer runs while the replay does (set by the full run; a change of pace is one full rerun)."""
    i = st.session_state["p_scene"]
    row = rows[i]
    run = _run(path, row["id"])
    pos = st.session_state.get("p_pos", 0.0)
    if pace is not None:
        pos = min(1.0, pos + TICK / REPLAY_SECONDS)
    st.session_state["p_pos"] = pos
    why = SHOWCASES[i].why if i < len(SHOWCASES) else ""
    p = run.scenario.get("params", {})
    head, nav = st.columns([5, 1.3])
    head.title(f"{why[:1].upper()}{why[1:]}" if why else row["preset"])
    head.markdown(f'<div class="ld-why">{p.get("attack", "").upper()} on {p.get("protocol")}, defense: '
                  f'<b>{p.get("defense")}</b> · scene {i + 1} of {len(rows) + 1}</div>', unsafe_allow_html=True)
    _nav(len(rows) + 1, nav)
    it, images = frame_at(run, pos)
    originals = shown_originals(run.started.originals, run.finished.metrics)
    baseline = run.finished.baseline if pos >= 1.0 else None
    left, right = st.columns([3, 1])
    if len(originals) <= 2 and baseline is None:  # one or two images: side by side, as large as the screen allows
        picture = grid([[*originals, *images[:len(originals)]]], cell=320)
        where = "left: the private data · right: what the server rebuilt"
    else:
        picture = pair_grid(originals, images, cell=160, width=720, baseline=baseline,
                            psnr=run.finished.metrics.get("psnr_per_image") if pos >= 1.0 else None)
        where = "top: the private data · below: what the server rebuilt" + \
            (" · bottom: the TBI baseline" if baseline is not None else "")
    left.image(picture, caption=f"{where} · iteration {it} of {run.finished.iterations}", clamp=True)
    m = run.finished.metrics
    if m.get("attack_accuracy") is not None:
        right.metric("Attack accuracy", f"{m['attack_accuracy']:.0%}" if pos >= 1.0 else "…")
        if m.get("baseline_attack_accuracy") is not None:
            right.metric("TBI baseline", f"{m['baseline_attack_accuracy']:.0%}" if pos >= 1.0 else "…")
    else:
        right.metric("PSNR", f"{_psnr_at(run, pos):.1f} dB")
        right.metric("SSIM", f"{m['ssim']:.2f}" if pos >= 1.0 else "…")
    right.metric("Run time", f"{run.finished.seconds:.0f} s")
    if (TICK if st.session_state["p_pos"] < 1.0 else None) != pace:
        st.rerun()


def _psnr_at(run, pos: float) -> float:
    h = run.finished.history
    if pos >= 1.0 or not h.get("psnr"):
        return run.finished.metrics["psnr"]
    target = pos * max(run.finished.iterations, 1)
    value = h["psnr"][0]
    for it, v in zip(h["iteration"], h["psnr"]):
        if it <= target and v is not None:
            value = v
    return value
