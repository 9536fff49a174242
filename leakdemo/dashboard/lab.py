"""The Attack Lab page: choose a scenario in the sidebar, read the threat model, run, watch it stream.

Layout and widgets only: the scenario logic is in state.py and the engine, runs live in pool.py.
"""
from __future__ import annotations

import json
import time

import numpy as np
import plotly.graph_objects as go
import streamlit as st

from .. import catalog
from ..artifacts import MOSAIC_FROM, grid, matching_grid, mosaic, mosaic_layout, psnr_color, upscale
from ..data import MAX_UPLOAD_FILES, available_samples, decode_upload, sample_image
from ..device import cuda_available, describe_hardware
from ..errors import LeakdemoError
from ..metrics import LPIPS_HELP
from ..protocols.fedavg import LOCAL_DATA
from ..protocols.vfl import tile_grid, tiles
from ..scenario import from_dict, presets
from . import state
from .shared import run_pool, tab_alive

ORIGINAL_COLOR = "#1f77b4"  # blue: the private data
RECON_COLOR = "#ff7f0e"  # orange: what the attacker rebuilt
POLL_SECONDS = 0.5  # a running run's frames
QUEUED_POLL_SECONDS = 2.0  # a queued run's place in the line
CHART_SECONDS = 1.5  # the curves' refresh while a run lives
CELL = 224  # on-screen pixels per image: nearest-neighbour, crisp on a projector

CSS = f"""
<style>
.block-container {{padding-top: 2.2rem;}}
h1 {{font-size: 2.3rem !important;}}
.ld-orig {{color: {ORIGINAL_COLOR}; font-weight: 700; font-size: 1.15rem;}}
.ld-recon {{color: {RECON_COLOR}; font-weight: 700; font-size: 1.15rem;}}
.ld-base {{color: #555; font-weight: 700; font-size: 1.15rem;}}
[data-testid="stMetricValue"] {{font-size: 2.1rem;}}
[data-testid="stImage"] img {{image-rendering: pixelated;}}
</style>
"""


@st.cache_resource
def warm_up() -> bool:
    """Pay the one-time costs before anyone clicks Run: start the warmed-up workers, encode the gallery."""
    run_pool()
    _thumbnails()
    return True


# ---------------------------------------------------------------- scenario state

def _push_to_widgets(s) -> None:
    for k, v in s.params.items():
        st.session_state[f"w_{k}"] = v
    if s["data"] == "samples":
        st.session_state["w_gallery"] = [x for x in str(s["images"]).split(",") if x]
    st.session_state["scenario"] = s


def _init_session() -> None:
    if "scenario" in st.session_state:
        return
    s, ignored = state.from_query(dict(st.query_params))
    st.session_state["ignored"] = ignored
    st.session_state["preset"] = s.preset
    _push_to_widgets(s)


def _on_preset() -> None:
    name = st.session_state["preset"]
    _push_to_widgets(state.from_query({"preset": name})[0])


def _on_choice(name: str) -> None:
    s = st.session_state["scenario"]
    try:
        _push_to_widgets(state.switch(s, name, st.session_state[f"w_{name}"]))
    except LeakdemoError as e:
        st.session_state["choice_error"] = str(e)


def _on_scenario_file() -> None:
    f = st.session_state.get("scenario_file")
    if f is None:
        return
    try:
        s = from_dict(json.loads(f.getvalue().decode("utf-8")))
        st.session_state["preset"] = s.preset if s.preset in presets() else st.session_state["preset"]
        _push_to_widgets(s)
        st.session_state["loaded_note"] = "Scenario loaded from file: press Run attack to replay it exactly."
    except (LeakdemoError, ValueError, UnicodeDecodeError) as e:
        st.session_state["loaded_note"] = f"error: that file is not a leakdemo scenario ({e})"


# ---------------------------------------------------------------- widgets from the catalog

def _help(p) -> str:
    return p.help + (f"\n\nPaper: {p.paper}" if p.paper else "") + f"\n\nParameter `{p.name}`, {p.allowed()}."


def param_widget(p, where=st) -> None:
    key = f"w_{p.name}"
    if p.kind == "choice":
        where.selectbox(p.title, p.choices, key=key, help=_help(p))
    elif p.kind == "int":
        where.number_input(p.title, min_value=int(p.low), max_value=int(p.high), step=1, key=key, help=_help(p))
    elif p.kind == "float":
        step = 0.01 if (p.high or 1) <= 1 else 0.1
        where.number_input(p.title, min_value=float(p.low), max_value=float(p.high), step=step, format="%g",
                           key=key, help=_help(p))
    elif p.kind == "bool":
        where.toggle(p.title, key=key, help=_help(p))
    else:
        where.text_input(p.title, key=key, help=_help(p), max_chars=2000)


def sidebar() -> tuple:
    """Draw the sidebar; return (scenario or None, error message or None, uploads)."""
    sb = st.sidebar
    sb.selectbox("Preset", list(presets()), key="preset", on_change=_on_preset,
                 format_func=lambda n: f"{n} — {presets()[n].title}",
                 help="A ready-made scenario. Everything below can then be changed.")
    s = st.session_state["scenario"]
    sb.selectbox("Protocol", list(catalog.PROTOCOLS), key="w_protocol", on_change=_on_choice, args=("protocol",),
                 format_func=lambda n: catalog.PROTOCOLS[n].title, help="What a client sends to the server.")
    sb.selectbox("Attack", catalog.attacks_for(s["protocol"]), key="w_attack", on_change=_on_choice,
                 args=("attack",), format_func=lambda n: catalog.ATTACKS[n].title,
                 help="How the server rebuilds the private data. " + catalog.ATTACKS[s["attack"]].paper)
    sb.selectbox("Defense", catalog.defenses_for(s["protocol"]), key="w_defense", on_change=_on_choice,
                 args=("defense",), format_func=lambda n: catalog.DEFENSES[n].title,
                 help="What the client does to its payload before sending it.")
    groups = state.visible_params(s)
    if groups.get("defense"):
        for p in groups["defense"]:
            param_widget(p, sb)
    sb.markdown("**Attack settings**")
    for p in groups.get("attack", []):
        param_widget(p, sb)

    sb.markdown("**Private data**")
    param_widget(catalog.PROTOCOLS[s["protocol"]].param("data"), sb)
    if s["protocol"] in catalog.LOGIT_PROTOCOLS:  # the federation's data is built, not picked or uploaded
        uploads = []
        for p in groups.get("data", []):
            if p.name not in ("data", "image_size"):
                param_widget(p, sb)
    else:
        uploads = _data_widgets(sb, st.session_state.get("w_data", s["data"]))
    for p in groups.get("protocol", []):
        param_widget(p, sb)
    with sb.expander("Model and image size"):
        for p in groups.get("model", []) + [q for q in groups.get("data", []) if q.name == "image_size"]:
            param_widget(p, st)
    with sb.expander("Run: seed and device"):
        for p in groups.get("run", []):
            param_widget(p, st)
        st.caption(f"This machine: {describe_hardware()}")
    pool = run_pool()
    ready = pool.ready()
    sb.caption(f"Engine: {ready} of {pool.max_running} workers ready" if ready else
               "Engine: starting the workers (a few seconds)…")
    with sb.expander("Replay a scenario file"):
        st.file_uploader("scenario.json", type=["json"], key="scenario_file", on_change=_on_scenario_file,
                         help="The scenario.json a previous run's download gave you.")

    values = {k[2:]: v for k, v in st.session_state.items() if k.startswith("w_") and k[2:] in
              catalog.params_for(s["protocol"], s["attack"], s["defense"])}
    if st.session_state.get("w_data") == "samples":
        values["images"] = ",".join(st.session_state.get("w_gallery", []))
    if uploads:
        values["images"] = ""
    try:
        s2 = state.resolve(values, preset=st.session_state["preset"])
    except LeakdemoError as e:
        return None, str(e), uploads
    st.session_state["scenario"] = s2
    if s2["device"] == "cuda" and not cuda_available():
        return s2, "device: CUDA is not available on this machine; choose auto or cpu", uploads
    need = catalog.private_images(s2)
    if uploads and len(uploads) < need:
        what = {"fedsgd": "batch_size", "vfl": "n_samples"}.get(s2["protocol"], LOCAL_DATA)
        return s2, f"{what}: needs {need} image(s) but {len(uploads)} are uploaded", uploads
    return s2, None, uploads


@st.cache_data
def _thumbnails() -> list[bytes]:
    """PNG thumbnails of the built-in photos, encoded once per server rather than on every rerun."""
    from ..artifacts import png_bytes
    return [png_bytes((upscale(sample_image(n, 32).transpose(1, 2, 0), 64) * 255).astype(np.uint8))
            for n in available_samples()]


def _data_widgets(where, source: str):
    """The gallery of built-in photos, or indices for other sources; plus the upload box."""
    if source == "samples":
        where.multiselect("Images (the batch starts with these)", available_samples(), key="w_gallery",
                          help="Built-in photos shipped with scikit-image. The seed picks the rest of the batch.")
        with where.expander("Browse the built-in photos"):
            st.image(_thumbnails(), caption=available_samples(), width=64)
        chosen = st.session_state.get("w_gallery", [])[:8]
        if chosen:
            thumbs = dict(zip(available_samples(), _thumbnails()))
            where.image([thumbs[n] for n in chosen], caption=chosen, width=64)
    elif source == "folder":
        param_widget(catalog.PROTOCOLS["fedsgd"].param("folder"), where)
        where.text_input("Images (file names, comma-separated)", key="w_images")
    elif source == "torchvision":
        for name in ("tv_dataset", "data_root"):
            param_widget(catalog.PROTOCOLS["fedsgd"].param(name), where)
        where.text_input("Images (indices, comma-separated)", key="w_images")
    else:
        where.text_input("Images (indices, comma-separated)", key="w_images")
    files = where.file_uploader("…or upload your own (PNG, JPEG, WebP; ≤ 10 MB)", type=["png", "jpg", "jpeg", "webp"],
                                accept_multiple_files=True, key="uploads",
                                help="Uploads stay in this browser session; they are never written to disk.")
    uploads, errors = [], []
    files = files or []
    if len(files) > MAX_UPLOAD_FILES:
        errors.append(f"{len(files)} files uploaded: only the first {MAX_UPLOAD_FILES} are used (the largest batch)")
        files = files[:MAX_UPLOAD_FILES]
    decoded = st.session_state.setdefault("decoded_uploads", {})  # this session only; decode each file once
    for gone in set(decoded) - {f.file_id for f in files}:  # removed from the box: forget them
        del decoded[gone]
    for f in files:
        if f.file_id not in decoded:
            try:
                decoded[f.file_id] = decode_upload(f.name, f.getvalue())
            except LeakdemoError as e:
                decoded[f.file_id] = str(e)
        if isinstance(decoded[f.file_id], str):
            errors.append(decoded[f.file_id])
        else:
            uploads.append((f.name, decoded[f.file_id]))
    for e in errors:
        where.error(e)
    return uploads


# ---------------------------------------------------------------- main area

def threat_card(s) -> None:
    protocol, attack, defense = catalog.components(s["protocol"], s["attack"], s["defense"])
    with st.container(border=True):
        st.markdown("#### :material/policy: Threat model — what the attacker gets")
        c1, c2 = st.columns(2)
        c1.markdown(f"**Receives:** {protocol.receives(s)}.")
        c1.markdown("**Does not receive:** the images or their labels. Scores are computed outside the attack.")
        if s["protocol"] == "fedavg":
            knows = "local_lr" in attack.needs
            c1.markdown(f"**Learning rate η = {s['local_lr']:g}:** "
                        + ("known to this attack (with the local steps and mini-batch size)." if knows else
                           "**not** known to this attack."))
        if s["protocol"] == "vfl":
            c1.markdown("**Batch indices:** chosen by the server every iteration (data index alignment) — "
                        + ("CAFE uses them to tell the samples apart." if s["attack"] == "cafe" else
                           "DLG ignores them and attacks one batch's gradient."))
        if s["protocol"] in catalog.LOGIT_PROTOCOLS:
            c1.markdown("**No gradients, no weights:** only predictions on public images. "
                        + ("PLI pairs each client's logits with its own model's and exploits the confidence gap "
                           "on classes only that client has seen." if s["attack"] == "pli" else
                           "TBI inverts the client logits alone."))
        c2.markdown("**Assumed to know:**\n" + "\n".join(f"- {k}" for k in attack.knowledge))
        knobs = [f"{p.name} = {s[p.name]}" for p in protocol.params if p.defends]
        st.caption(f"Attack: {attack.title} — {attack.summary}  ·  Protocol knobs that defend: {', '.join(knobs)}")
        for w in s.warnings:
            st.warning(w, icon=":material/warning:")


def _grid(images: np.ndarray) -> np.ndarray:
    """A row of images at twice their size, white gaps between them (the browser enlarges it further)."""
    return grid([list(images[:16])], 2 * images.shape[1])


def _zoom(size: int, cell: int) -> float:
    """How much the browser enlarges a picture sent at twice its size so each image shows at about `cell` px."""
    return max(1, cell // size) / 2


def _chart(handle):
    c = {k: v.items for k, v in handle.curves.items()}
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=c["iteration"], y=c["psnr"], name="PSNR (dB)", line=dict(color=RECON_COLOR, width=3)))
    fig.add_trace(go.Scatter(x=c["iteration"], y=c["ssim"], name="SSIM", yaxis="y2",
                             line=dict(color=ORIGINAL_COLOR, width=2, dash="dot")))
    fig.update_layout(height=300, margin=dict(l=10, r=10, t=30, b=10), title="Reconstruction quality",
                      xaxis_title="iteration", yaxis=dict(title="PSNR (dB)", rangemode="tozero"),
                      yaxis2=dict(title="SSIM", overlaying="y", side="right", range=[0, 1]),
                      legend=dict(orientation="h", y=-0.25), font=dict(size=14))
    loss = go.Figure(go.Scatter(x=c["iteration"], y=c["loss"], name="loss", line=dict(color="#555", width=2)))
    loss.update_layout(height=300, margin=dict(l=10, r=10, t=30, b=10), title="Attack loss (its own objective)",
                       xaxis_title="iteration", yaxis=dict(type="log"), font=dict(size=14))
    return fig, loss


def run_view(handle) -> None:
    """One run as it stands: progress, the images, the metrics and, once finished, the downloads."""
    pool = run_pool()
    with handle.lock:
        status, started, latest, fin, error = handle.status, handle.started, handle.latest, handle.finished, handle.error
        notes = list(handle.notes[-3:])
        matching = handle.matching
    if status == "queued":
        ahead = pool.position(handle)
        st.progress(0.0, text=f"Waiting for a free worker — {ahead} run(s) ahead in the queue "
                              f"({pool.max_running} run at a time on this server).")
    elif status == "running" and latest is None:
        st.progress(0.0, text="Setting up: the client computes its update…")
    elif latest is not None and not handle.done:
        eta = f" · about {latest.eta:.0f} s left" if latest.eta is not None and latest.seconds > 1 else ""
        st.progress(min(1.0, latest.iteration / max(latest.total, 1)),
                    text=f"Iteration {latest.iteration} / {latest.total} · {latest.seconds:.1f} s{eta}"
                         + (" · stopping…" if handle.stopping else ""))
    if status == "failed":
        st.error(f"The run could not complete: {error}")
        return
    if status in ("finished", "stopped") and fin is not None:
        word = "Finished" if status == "finished" else "Stopped"
        st.success(f"**{word}** after {fin.iterations} iterations in {fin.seconds:.1f} s."
                   + (f" The attack {fin.metrics['note']}." if fin.metrics.get("note") else ""),
                   icon=":material/check_circle:")
    for n in notes:
        st.caption(f":material/info: {n}")
    if started is None:
        return
    images = fin.images if fin is not None else (latest.images if latest is not None else None)
    per = fin.metrics["psnr_per_image"] if fin is not None else (latest.psnr_per_image or [] if latest else [])
    ids = fin.metrics.get("sample_ids") if fin is not None else (latest.sample_ids if latest else None)
    originals = started.originals if ids is None else started.originals[np.asarray(ids)]
    frame = ("final", fin.iterations) if fin is not None else ("live", latest.iteration if latest else -1)
    if started.scenario["params"].get("protocol") in catalog.LOGIT_PROTOCOLS:
        src = fin if fin is not None else latest
        success = fin.metrics.get("success") if fin is not None else (latest.success if latest else None)
        _classes_panel(handle.seq, started, images, getattr(src, "baseline", None), success, latest)
    elif len(started.originals) >= MOSAIC_FROM:
        _dataset_panel(handle.seq, started, originals, images, per, ids, frame)
    else:
        left, right = st.columns(2, gap="large")
        left.markdown('<span class="ld-orig">Original (private, never sent)</span>', unsafe_allow_html=True)
        zoom = _zoom(originals.shape[1], CELL)
        _show(left, ("row", handle.seq, -1), lambda: _grid(originals), zoom, ", ".join(started.names[:16]))
        right.markdown('<span class="ld-recon">Reconstruction (what the server rebuilt)</span>', unsafe_allow_html=True)
        if images is not None:
            _show(right, ("row", handle.seq, frame), lambda: _grid(images), zoom,
                  " · ".join(f"{v:.1f} dB" for v in per[:16]) or None)
        if len(originals) > 1 and started.scenario["params"].get("attack") == "cafe":
            st.caption("Each reconstruction is scored against its own original: the server chose the batch "
                       "indices, so it knows which sample is which.")
        elif len(originals) > 1:
            st.caption("Batch reconstructions come back in any order; each is paired with its original by the "
                       "Hungarian algorithm before scoring.")
    if matching:
        _matching_panel(handle.seq, matching)
    if fin is not None and "attack_accuracy" in fin.metrics:
        _logit_metrics(fin, started.scenario["params"]["attack"])
    elif fin is not None:
        m = fin.metrics
        cols = st.columns(5)
        cols[0].metric("PSNR", f"{m['psnr']:.1f} dB", help="peak 1, images in [0, 1], averaged per image")
        cols[1].metric("SSIM", f"{m['ssim']:.3f}")
        cols[2].metric("LPIPS", "unavailable" if m["lpips"] is None else f"{m['lpips']:.3f}",
                       help=m.get("lpips_note") or LPIPS_HELP)
        cols[3].metric("Label accuracy", "n/a" if m["label_accuracy"] is None else f"{m['label_accuracy']:.0%}")
        cols[4].metric("Time", f"{fin.seconds:.1f} s")
        if m.get("lpips_note"):
            st.caption(m["lpips_note"])
    elif latest is not None and latest.psnr is not None:
        cols = st.columns(3)
        cols[0].metric("PSNR", f"{latest.psnr:.1f} dB")
        cols[1].metric("SSIM", f"{latest.ssim:.3f}")
        cols[2].metric("Loss", f"{latest.loss:.3g}" if latest.loss is not None else "—")
    if handle.done and handle.artifacts.get("error"):
        st.caption(handle.artifacts["error"])
    elif handle.done and handle.artifacts:
        st.markdown("**Downloads**")
        files = [("grid.png", "image/png"), ("progress.gif", "image/gif"), ("metrics.csv", "text/csv"),
                 ("metrics.json", "application/json"), ("scenario.json", "application/json")]
        if "matching.png" in handle.artifacts:
            files.append(("matching.png", "image/png"))
        cols = st.columns(len(files))
        for col, (name, mime) in zip(cols, files):
            col.download_button(name, handle.artifacts[name], file_name=name, mime=mime, key=f"dl_{name}",
                                on_click="ignore")
    elif handle.done and fin is not None:
        st.caption("Preparing the downloads…")


PAGE = 100  # samples per page of the data-set view


def _png_once(key: tuple, make) -> tuple[str, int]:
    """A picture for the page, encoded once per key: (inline data URL, its width in pixels).

    The run panel redraws twice a second and a frame may change less often, so encoding each time would
    take CPU from the attack on a small machine. Inline, the picture travels with the element that shows
    it: there is no media file that a later frame could drop before the browser has fetched it. Pictures
    are sent small (twice the images' own size) and enlarged by the browser with crisp, pixelated scaling:
    an upscaled PNG re-sent on every redraw of a dozen tabs kept the server's one core busy."""
    import base64

    from ..artifacts import png_bytes
    memo = st.session_state.setdefault("png_memo", {})
    if key not in memo:
        if len(memo) > 12:
            memo.clear()
        picture = make()
        memo[key] = ("data:image/png;base64," + base64.b64encode(png_bytes(picture)).decode("ascii"),
                     picture.shape[1])
    return memo[key]


def _show(where, key: tuple, make, zoom: float, caption: str | None = None) -> None:
    url, width = _png_once(key, make)
    where.image(url, width=max(1, int(width * zoom)), caption=caption)


def _dataset_panel(run: int, started, originals: np.ndarray, images, per: list, ids, frame: tuple) -> None:
    """Many private samples (vertical FL): two mosaics, a page at a time, each reconstruction framed by
    its PSNR; the tiles the workers hold; which samples an attack on one batch saw."""
    scenario = started.scenario["params"]
    n = len(originals)
    start = 0
    if n > PAGE:
        pages = [f"{i + 1}–{min(i + PAGE, n)}" for i in range(0, n, PAGE)]
        page = st.segmented_control("Samples shown", pages, default=pages[0], key="w_sample_page") or pages[0]
        start = pages.index(page) * PAGE
    shown = slice(start, min(start + PAGE, n))
    size = originals.shape[1]
    cols, shown_cell = mosaic_layout(min(PAGE, n), size, width=640)
    cell, zoom = 2 * size, _zoom(size, shown_cell)
    left, right = st.columns(2, gap="large")
    what = "the batch DLG attacked" if ids is not None else f"all {n} training samples"
    left.markdown(f'<span class="ld-orig">Original — {what} (private, never sent)</span>', unsafe_allow_html=True)
    _show(left, ("orig", run, start, ids is None), lambda: mosaic(originals[shown], cols, cell, border=1), zoom)
    right.markdown('<span class="ld-recon">Reconstruction (what the server rebuilt)</span>', unsafe_allow_html=True)
    if images is not None and len(per) == n:
        frames = [psnr_color(v) for v in per[shown]]
        key = ("recon", run, start, frame)
        _show(right, key, lambda: mosaic(images[shown], cols, cell, frames, border=2), zoom)
        good, fair = sum(v >= 30 for v in per), sum(20 <= v < 30 for v in per)
        right.caption(f"Frame = that sample's PSNR: :green[green ≥ 30 dB] ({good}), :orange[amber 20–30 dB] "
                      f"({fair}), :red[red < 20 dB] ({n - good - fair}) of {n}.")
    if ids is not None:
        st.caption(f"DLG sees one aggregated batch gradient: it cannot tell the {n} samples apart, so its "
                   "images are paired with that batch's originals by the Hungarian algorithm before scoring.")
    elif scenario.get("protocol") == "vfl":
        grid_rc = tile_grid(scenario["workers"])
        parts = tiles(started.originals[:1].transpose(0, 3, 1, 2), grid_rc)
        views = [p[0].transpose(1, 2, 0) for p in parts]
        c1, c2 = st.columns([1, 3])
        _show(c1, ("tiles", run), lambda: grid([views], 2 * views[0].shape[0]), _zoom(views[0].shape[0], 96))
        c2.caption(f"What each of the {scenario['workers']} workers holds of sample 1 (a {grid_rc[0]}×{grid_rc[1]} "
                   "grid of tiles): no party ever has a whole image — yet the server rebuilds them all, each "
                   "scored against its own original (the server chose the indices, so it knows which is which).")


def _classes_panel(run: int, started, images, baseline, success, latest) -> None:
    """Logit sharing: per private target class, its mean private image, the attack's reconstruction (✓ when
    it passes the paper's attack-accuracy test) and, beside it, the TBI baseline's."""
    params = started.scenario["params"]
    n = len(started.originals)
    cell = 96 if n <= 10 else 64
    rows, labels = [list(started.originals)], ["Private class mean (never sent)"]
    name = "PLI" if params["attack"] == "pli" else "TBI"
    if images is not None:
        rows.append(list(images))
        labels.append(f"{name} reconstruction (what the server rebuilt)")
    if baseline is not None:
        rows.append(list(baseline))
        labels.append("TBI baseline (client logits only)")
    frame = latest.iteration if latest is not None else -1
    for i, (text, cls, row) in enumerate(zip(labels, ("ld-orig", "ld-recon", "ld-base"), rows)):
        st.markdown(f'<span class="{cls}">{text}</span>', unsafe_allow_html=True)
        size = row[0].shape[0]
        _show(st, ("classes", run, i, -1 if i == 0 else frame), lambda: grid([row], 2 * size), _zoom(size, cell))
    marks = "  ".join(f"{('✓' if ok else '✗')} {nm.split(' (')[0]}" for ok, nm in zip(success or [], started.names))
    if marks:
        st.caption(marks)
    if latest is not None and params.get("inversion_epochs"):
        rnd = min(params["rounds"], latest.iteration // params["inversion_epochs"] + 1)
        st.caption(f"Communication round {rnd} of {params['rounds']}: each round brings the clients' new logits "
                   "and the inversion networks train on them. ✓ = the reconstruction is more similar (SSIM) to "
                   "its class's mean private image than to any other class's mean private or public image (the "
                   "PLI paper's attack accuracy), checked by the dashboard, never by the attack.")


def _logit_metrics(fin, attack: str) -> None:
    m = fin.metrics
    cols = st.columns(5)
    name = attack.upper()
    cols[0].metric(f"Attack accuracy ({name})", f"{m['attack_accuracy']:.0%}",
                   help="share of private target classes whose reconstruction is closest (SSIM) to their own "
                        "mean private image")
    if m.get("baseline_attack_accuracy") is not None:
        cols[1].metric("Attack accuracy (TBI)", f"{m['baseline_attack_accuracy']:.0%}")
    cols[2].metric("SSIM to class mean", f"{m['ssim_to_mean']:.3f}")
    u = m.get("utility") or {}
    if u.get("defended"):
        acc = sum(u["defended"]) / len(u["defended"])
        delta = None if "clean" not in u else f"{acc - sum(u['clean']) / len(u['clean']):+.1%} vs no defense"
        cols[3].metric("Client accuracy", f"{acc:.1%}", delta=delta,
                       help="the clients' accuracy on held-out clean images of the private classes: what the "
                            "federation is for")
    cols[4].metric("Time", f"{fin.seconds:.1f} s")


def _matching_panel(run: int, m: dict) -> None:
    """AGIC over several epochs: which pre-reconstructions it paired, checked outside the attack."""
    with st.container(border=True):
        st.markdown(f"**Matching across epochs:** {sum(m['correct'])} of {len(m['correct'])} images paired "
                    f"correctly ({m['rate']:.0%})")
        size = m["views"][0].shape[1]
        _show(st, ("matching", run), lambda: matching_grid(m, 2 * size), _zoom(size, CELL // 2),
              "  ".join(("✓" if ok else "✗") for ok in m["correct"]))
        st.caption("One column per private image: the top row is what AGIC pre-reconstructed from the first "
                   "epoch's uploads, each row below what it paired with it from the next epoch (2×2-pooled MSE, "
                   "same inferred label). The ✓/✗ under each column is checked against the private images by "
                   "the dashboard, never by the attack.")


def _accuracy_chart(c: dict):
    """PLI (and TBI beside it): the paper's attack accuracy as the rounds go by."""
    fig = go.Figure()
    for key, name, color in (("attack_accuracy", "this attack", RECON_COLOR),
                             ("baseline_attack_accuracy", "TBI baseline", "#555")):
        pts = [(i, v) for i, v in zip(c["iteration"], c[key]) if v is not None]
        if pts:
            fig.add_trace(go.Scatter(x=[i for i, _ in pts], y=[v for _, v in pts], name=name,
                                     line=dict(color=color, width=3)))
    fig.update_layout(height=300, margin=dict(l=10, r=10, t=30, b=10), title="Attack accuracy (share of target classes)",
                      xaxis_title="inversion epoch", yaxis=dict(range=[0, 1.05], tickformat=".0%"),
                      legend=dict(orientation="h", y=-0.25), font=dict(size=14))
    return fig


def _checks_chart(handle):
    """The Runner's checks against the truth as curves: PLI's attack accuracy or CAFE's Step I/II errors."""
    c = {k: v.items for k, v in handle.curves.items()}
    if any(v is not None for v in c["attack_accuracy"]):
        return _accuracy_chart(c)
    if any(v is not None for v in c["step1_error"]):
        return _steps_chart(c)
    return None


def _steps_chart(c: dict):
    """CAFE's Steps I and II: how far its per-sample estimates are from the truth (scored by the Runner)."""
    fig = go.Figure()
    for key, name, color in (("step1_error", "Step I: ∂L/∂u per sample", "#6a3d9a"),
                             ("step2_error", "Step II: first-FC input h per sample", "#2ca02c")):
        pts = [(i, v) for i, v in zip(c["iteration"], c[key]) if v is not None]
        fig.add_trace(go.Scatter(x=[i for i, _ in pts], y=[v for _, v in pts], name=name, line=dict(color=color, width=3)))
    fig.update_layout(height=300, margin=dict(l=10, r=10, t=30, b=10), title="Steps I–II: relative error vs the truth",
                      xaxis_title="iteration", yaxis=dict(type="log", exponentformat="power", dtick=1),
                      legend=dict(orientation="h", y=-0.25), font=dict(size=14))
    return fig


def _utility_chart(u: dict):
    """What the defense costs: the VFL model's training loss with and without it."""
    fig = go.Figure()
    fig.add_trace(go.Scatter(y=u["defended"], name="with this defense" if "clean" in u else "no defense",
                             line=dict(color=RECON_COLOR, width=3)))
    if "clean" in u:
        fig.add_trace(go.Scatter(y=u["clean"], name="no defense", line=dict(color="#555", width=2, dash="dot")))
    fig.update_layout(height=300, margin=dict(l=10, r=10, t=30, b=10),
                      title=f"Utility: training loss ({u['steps']} SGD steps, lr {u['lr']:g})", xaxis_title="step",
                      yaxis=dict(rangemode="tozero"), legend=dict(orientation="h", y=-0.25), font=dict(size=14))
    return fig


def chart_panel(handle) -> None:
    """The curves. Building Plotly figures is the costliest part of a redraw, so they are rebuilt at most
    every CHART_SECONDS while the run lives (and once at its end), and drawn from that copy in between."""
    if handle.latest is None:
        return
    version = (handle.seq, "final" if handle.done else int(time.monotonic() / CHART_SECONDS))
    memo = st.session_state.get("chart_memo")
    if memo is None or memo[0] != version:
        with handle.lock:
            fig, loss = _chart(handle)
            steps = _checks_chart(handle)
            fin = handle.finished
        utility = fin.metrics.get("utility") if fin is not None else None
        if utility and "steps" not in utility:  # logit sharing: client accuracy is a metric above, not a curve
            utility = None
        memo = (version, (fig, loss, steps, _utility_chart(utility) if utility else None))
        st.session_state["chart_memo"] = memo
    fig, loss, steps, utility = memo[1]
    left, right = st.columns(2)
    left.plotly_chart(fig, key="chart_quality", config={"displayModeBar": False})
    right.plotly_chart(loss, key="chart_loss", config={"displayModeBar": False})
    if steps is not None or utility is not None:
        left, right = st.columns(2)
        if steps is not None:
            left.plotly_chart(steps, key="chart_steps", config={"displayModeBar": False})
        if utility is not None:
            right.plotly_chart(utility, key="chart_utility", config={"displayModeBar": False})


def _start(scenario, uploads) -> None:
    old = st.session_state.get("handle")
    if old is not None and not old.done:
        old.stop()
    st.session_state["handle"] = run_pool().submit(scenario, uploads or None, alive=tab_alive())


def _stop() -> None:
    h = st.session_state.get("handle")
    if h is not None:
        h.stop()


def main() -> None:
    st.markdown(CSS, unsafe_allow_html=True)
    warm_up()
    _init_session()
    scenario, problem, uploads = sidebar()

    st.title(":material/lock_open: leakdemo — Attack Lab")
    st.markdown("Federated learning keeps data on the clients and shares only updates — yet those updates "
                "can be turned back into the private data. Pick a protocol, an attack and a defense, press "
                "**Run attack**, and watch the server rebuild a client's image from what it received.")
    for msg in st.session_state.pop("ignored", []):
        st.warning(f"Ignored from the link: {msg}. Using the default instead.", icon=":material/link_off:")
    note = st.session_state.pop("loaded_note", None)
    if note:
        (st.error if note.startswith("error") else st.info)(note)
    if st.session_state.get("choice_error"):
        st.error(st.session_state.pop("choice_error"))

    if scenario is not None:
        query = state.to_query(scenario)
        if dict(st.query_params) != query:
            st.query_params.from_dict(query)
        threat_card(scenario)
    handle = st.session_state.get("handle")
    pace = _pace(handle)
    st.fragment(run_every=pace)(run_panel)(scenario, problem, uploads, pace)


def _pace(handle) -> float | None:
    """How often the run panel refreshes: twice a second while the run runs, every 2 s while it queues (a full
    classroom waiting costs the server little), never once it is complete."""
    if handle is None or handle.complete:
        return None
    return POLL_SECONDS if handle.status == "running" else QUEUED_POLL_SECONDS


def run_panel(scenario, problem, uploads, pace: float | None) -> None:
    """Run / Stop and the run itself: one fragment, the page's one refresh mechanism.

    The fragment's timer is set by the full run that draws it, at the pace the run's state needs. When
    that state changes pace (queued → running → complete), the fragment asks for one full rerun, which
    sets the new pace — the browser drops every fragment timer when a full run starts, so no timer
    outlives the tree it draws into, and a complete run's page stops refreshing. There is one fragment
    and one timer: nothing else races it (two fragments and a rerun from one of them blanked a busy
    classroom's tabs)."""
    handle = st.session_state.get("handle")
    running = handle is not None and not handle.done
    c1, c2, c3 = st.columns([1, 1, 4])
    c1.button("Run attack", type="primary", disabled=problem is not None or scenario is None, on_click=_start,
              args=(scenario, uploads), icon=":material/play_arrow:", width="stretch")
    c2.button("Stop", disabled=not running, on_click=_stop, icon=":material/stop:", width="stretch")
    if problem:
        c3.error(problem)
    elif scenario is not None:
        if scenario["protocol"] in catalog.LOGIT_PROTOCOLS:
            model, what = f"{scenario['clients']} client(s) sharing logits", "private target class(es)"
        else:
            model = scenario.get("model") or f"{scenario['workers']} {scenario['worker_model']} workers"
            what = "private image(s)"
        c3.caption(f"Scenario: preset **{scenario.preset}**, {scenario['attack']} on {model}, "
                   f"{catalog.private_images(scenario)} {what}, {scenario['image_size']}×{scenario['image_size']} px, "
                   f"seed {scenario['seed']}. The link in the address bar reproduces it.")
    if handle is None:
        st.info("Press **Run attack** to start. The reconstruction streams in here as the attack works.")
        return
    run_view(handle.poll())
    chart_panel(handle)
    if _pace(handle) != pace:
        st.rerun()  # one full rerun sets the new pace (and stops the timer once the run is complete)
