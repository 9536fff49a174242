"""Presenter mode: full-screen scenes for a projector — no sidebar, no controls but Back / Next (keyboard: ← and
→, or a presentation clicker's Page Up / Page Down) and a scene chooser, big pictures and figures.

Four kinds of scene: a recorded showcase replaying by itself (`g3`), a run of your own from the run store
replaying the same way (`r12`), an attack computed live on this machine (`live:dlg`), and a built-in sweep's
trade-off chart from the run store (`sweep:sweep-dp-dlg`). The list is in the link
(`?scenes=g1,r12,live:dlg,sweep:sweep-dp-dlg&scene=2`), so a prepared talk is one bookmark.

Opened as the Present page, or with ?present=1 on the app's address (then the navigation is hidden too)."""
from __future__ import annotations

import sqlite3

import numpy as np
import streamlit as st

from .. import catalog, milestones, utility
from ..artifacts import as_mosaics, grid, pair_grid, shown_originals
from ..errors import LeakdemoError
from ..gallery import open_gallery, showcase_rows, showcase_why
from ..store import open_store
from ..words import clock, fixed, plural
from .pictures import show
from .shared import queue_line, run_pool, same_page_as_before, setup_line
from .compare import frame_at, judged_extras, run_refs, your_runs

TICK = 0.3
REPLAY_SECONDS = 6.0
LIVE_POLL = 0.5  # a live scene's frames while it runs
QUEUED_POLL = 2.0  # while it waits for a worker
DEFAULT_LIVE = ("dlg",)
DEFAULT_SWEEPS = ("sweep-dp-dlg",)
EPSILON = "@epsilon"  # a sweep scene's code ending in it: the chart against the formal ε
YOUR_SWEEPS = "presenter-sweep"  # the run store's kind for the Trade-offs page's finished custom sweeps
BIG_FONT = 18  # a chart's text, read from the back of a room
NOTE_REM = 6.5  # what a two-line note under a chart takes (its margins too): the chart gives it up
CSS = """
<style>
[data-testid="stSidebar"], [data-testid="stSidebarCollapsedControl"], header, footer {display: none !important;}
.block-container {padding: 1.2rem 2.5rem 0.5rem 2.5rem !important; max-width: 100% !important;}
h1 {font-size: 2.4rem !important; margin: 0 !important; padding: 0 !important;}
.ld-why {font-size: 1.45rem; color: #333; margin: 0.2rem 0 0.6rem 0;}
[data-testid="stMetricValue"] {font-size: 2.6rem !important;}
[data-testid="stMetricLabel"] p {font-size: 1.1rem !important;}
[data-testid="stImage"] img {image-rendering: pixelated; max-height: 62vh; object-fit: contain;}
[data-testid="stImageCaption"] {text-align: center;}
[data-testid="stImageCaption"] [data-testid="stCaptionContainer"],
[data-testid="stImageCaption"] p {font-size: 1.2rem; color: #333; opacity: 1;}
[data-testid="stPlotlyChart"] {height: 68vh !important;}
.st-key-p_clicker_next, .st-key-p_clicker_back, .st-key-p_clicker_first, .st-key-p_clicker_last {display: none !important;}
/* Back, Next, Scenes and ✕ need ~23rem: beside the title on a narrower screen (a 1024×768 projector, or one at
   125 % zoom: 819 px) they read "B…", "N…", "S…"; there they stand above it, at the right, and the title takes
   the row */
.st-key-p_head {container-type: inline-size;}
@container (max-width: 1060px) {
  .st-key-p_head > div > [data-testid="stHorizontalBlock"] {flex-wrap: wrap; row-gap: 0.4rem;}
  .st-key-p_head > div > [data-testid="stHorizontalBlock"] > [data-testid="stColumn"]:first-child {
    flex: 1 1 100% !important; min-width: 100% !important;}
  .st-key-p_head > div > [data-testid="stHorizontalBlock"] > [data-testid="stColumn"]:last-child {
    order: -1; flex: 0 0 min(23.5rem, 100%) !important; min-width: 0 !important; margin-left: auto;}
}
</style>
"""


# ---------------------------------------------------------------- which scenes


def scene_choices(rows: list[dict], store=None, named=()) -> dict[str, str]:
    """Every scene this server can show, code -> what the chooser says: the gallery's showcases, the runs of
    the run store `store` (the newest 200, as Compare offers them, and any older one `named` names), a live run
    of each standard preset, each built-in sweep's chart."""
    from ..scenario import presets
    from ..sweeps import sweeps
    out = {f"g{r['id']}": f"Showcase: {showcase_why(r)}" for r in rows}
    out.update(your_runs(store, named) if store is not None else {})
    out.update({f"live:{n}": f"Live: {p.title}" for n, p in presets().items() if p.standard})
    out.update({f"sweep:{n}": f"Trade-off chart: {s.title}" for n, s in sweeps().items()})
    out.update(stored_sweeps(store) if store is not None else {})
    return out


def not_live(code: str) -> str | None:
    """Why `live:<preset>` is no scene, where the preset is one of those that take minutes on a laptop's CPU
    (`dlg-round`, `pli-10-clients`: what `bench` leaves out of its table), and what to do instead; None for any
    other code. A talk's link to one read "no such scene here", though the Lab lists the preset."""
    from ..scenario import presets
    preset = presets().get(code.removeprefix("live:")) if code.startswith("live:") else None
    if preset is None or preset.standard:
        return None
    return (f"{preset.name} takes minutes on a laptop's CPU, too long to compute during a talk: run it in the "
            f"Attack Lab beforehand, then present that run (scenes=r12 presents your run 12)")


def stored_sweeps(store) -> dict[str, str]:
    """The custom sweeps finished on the Trade-offs page (the newest 50), each chart also against the formal ε
    where it has one: code -> 'Custom trade-off chart: …'. An unreadable store offers none (its runs say why)."""
    out = {}
    try:
        kept = store.kept(YOUR_SWEEPS, limit=50)
    except (LeakdemoError, sqlite3.Error):
        return out
    for code, value in kept:
        title = f"Custom trade-off chart: {value.get('label') or 'a custom sweep'}"
        out[code] = title
        if value.get("epsilon"):
            out[code + EPSILON] = f"{title}, against the formal ε"
    return out


def custom_sweeps(codes: list[str], choices: dict) -> tuple[dict[str, str], dict[str, str]]:
    """The sweep scenes among the codes that the chooser does not list by itself — custom sweeps (`sweep:custom:…`,
    from the Trade-offs page's "Present this chart"), and any sweep's chart against the formal ε (`…@epsilon`):
    each code carries its sweep, so the chooser offers those the talk holds. Returns (code -> what the chooser
    says, code -> why this version cannot draw it: a setting it refuses, said rather than "no such scene")."""
    from .tradeoffs import CUSTOM, custom_sweep
    out, unread = {}, {}
    for code in codes:
        plain_code = code.removesuffix(EPSILON)
        name = choices.get(plain_code)
        if name is None and plain_code.startswith(f"sweep:{CUSTOM}:"):
            try:
                name = f"Trade-off chart: {custom_sweep(plain_code.split(':', 2)[2]).title}"
            except LeakdemoError as e:
                unread[code] = f"a custom sweep this version cannot draw: {e}"
        if name is not None and plain_code.startswith("sweep:") and code not in choices:
            out[code] = name + (", against the formal ε" if code.endswith(EPSILON) else "")
    return out, unread


def default_scenes(rows: list[dict], choices: dict) -> list[str]:
    """The showcases in order, one live attack, then what a defense costs."""
    codes = [f"g{r['id']}" for r in rows] + [f"live:{n}" for n in DEFAULT_LIVE] + [f"sweep:{n}" for n in DEFAULT_SWEEPS]
    return [c for c in codes if c in choices]


def _init(rows: list[dict], choices: dict, unread: dict) -> None:
    """The scene list and the current scene, from the link on a first visit (unknown codes reported, left out;
    unread: custom sweeps' codes that cannot be drawn, and why)."""
    if "p_scenes" in st.session_state:
        return
    # `scenes=g1&scenes=g2` is the list g1,g2, as on Compare
    asked = run_refs(st.query_params.get_all("scenes"))  # `12`: your run 12, as on Compare
    slow = {c: why for c in asked if c not in choices and (why := not_live(c))}
    bad = [c for c in asked if c not in choices and c not in unread and c not in slow]
    kept = [c for c in asked if c in choices]
    said = ([(f"scenes={','.join(bad)}", "no such scene here")] if bad else []) + \
        [(f"scenes={c}", why) for c, why in slow.items()] + \
        [(f"scenes={c[:24]}…", why) for c, why in unread.items() if c in asked]
    if said and not kept:  # nothing of the link's list left: say what opens instead, as Compare does
        said[-1] = (said[-1][0], f"{said[-1][1]}; the presenter opens on its default scenes instead")
    problems = [f"{what} ({why})" for what, why in said]
    scenes = st.session_state["p_scenes"] = kept or default_scenes(rows, choices)
    asked_scene = st.query_params.get("scene", "1")
    try:
        n = int(asked_scene)
    except ValueError:
        n = 0
    if not 1 <= n <= len(scenes):  # a talk's bookmark to a scene the list no longer has opens on its first
        problems.append(f"scene={asked_scene} (a scene number in [1, {len(scenes)}]; opening on the first)")
        n = 1
    st.session_state["p_problem"] = "; ".join(problems)
    st.session_state["p_scene"] = n - 1
    st.session_state["p_pos"] = 0.0
    _mark()


def _link_now() -> tuple:
    """The talk as the address bar gives it: its scene list and its scene."""
    return tuple(st.query_params.get_all("scenes")), st.query_params.get("scene", "1")


def _mark() -> None:
    """Remember the talk and scene that the link now stands for: Back to that link comes back to them."""
    link = st.session_state["p_link"] = _link_now()
    st.session_state.setdefault("p_marks", {})[link] = (list(st.session_state["p_scenes"]),
                                                        st.session_state["p_scene"])


def _follow_history() -> None:
    """The browser's Back and Forward step through the talk. Each step writes its scene into the link, which
    Streamlit makes a history entry; Back then showed scene 4 under a link saying scene 3, and a reload jumped
    to 3. A link met on a run of this same page that it did not just write returns to the scene it stood for
    (one never seen is read as a first visit reads it). Arriving from another page (the sidebar, whose link is
    bare), the talk stays where it was left, and the link stands for that."""
    link = _link_now()
    if "p_scenes" not in st.session_state or st.session_state.get("p_link") == link:
        return
    if not same_page_as_before():
        _mark()
        return
    _leave_live()
    marked = st.session_state.get("p_marks", {}).get(link)
    if marked is None:
        for key in ("p_scenes", "p_scene", "p_pos", "p_problem"):
            st.session_state.pop(key, None)
        return
    st.session_state["p_scenes"], st.session_state["p_scene"] = list(marked[0]), marked[1]
    st.session_state["p_pos"], st.session_state["p_problem"] = 0.0, ""
    st.session_state["p_link"] = link


def _go(step: int) -> None:
    _go_to(st.session_state.get("p_scene", 0) + step)


def _go_to(scene: int) -> None:
    """To this scene (0 the first, -1 the last; past either end, round to the other)."""
    count = len(st.session_state["p_scenes"])
    st.session_state["p_scene"] = scene % count
    st.session_state["p_pos"], st.session_state["p_problem"] = 0.0, ""
    _leave_live()
    st.query_params["scene"] = str(st.session_state["p_scene"] + 1)
    _mark()


def _picked() -> None:
    """The chooser changed the list: start again at its first scene, and keep the list in the link."""
    codes = list(st.session_state["p_pick"]) or st.session_state["p_scenes"]
    st.session_state["p_scenes"], st.session_state["p_scene"], st.session_state["p_pos"] = codes, 0, 0.0
    st.session_state["p_problem"] = ""
    _leave_live()
    st.query_params["scenes"] = ",".join(codes)
    st.query_params["scene"] = "1"
    _mark()


def _leave() -> None:
    """Out of presenter mode, to the Attack Lab (on the next run of the page: a callback cannot switch pages); a
    live scene still going is stopped, as moving on stops it."""
    _leave_live()
    st.session_state["p_leaving"] = True


def _leave_if_asked() -> None:
    """Go to the Attack Lab if ✕ was pressed (both ways end this run of the page). Opened as the Present page,
    that is the Lab page; opened with ?present=1 (a tab of its own, or a talk's bookmark) the Lab is the same
    address without it."""
    if not st.session_state.pop("p_leaving", False):
        return
    if st.query_params.get("present") == "1":
        st.query_params.clear()
        st.rerun()
    from .lab import page
    st.switch_page(page())


def _nav(where, choices: dict) -> None:
    b1, b2, b3, b4 = where.columns([1, 1, 1.25, 0.5])
    b1.button("Back", on_click=_go, args=(-1,), shortcut="Left", width="stretch",
              help="the previous scene (key: ←)")
    b2.button("Next", on_click=_go, args=(1,), shortcut="Right", width="stretch", type="primary",
              help="the next scene (key: →)")
    with b3.popover("Scenes", icon=":material/tune:", help="choose the scenes and their order", width="stretch"):
        st.session_state["p_pick"] = list(st.session_state["p_scenes"])
        st.multiselect("Scenes, in the order shown", list(choices), key="p_pick", format_func=choices.get,
                       on_change=_picked, help="showcases replay the gallery's recorded runs, and Run #… one of "
                                               "yours from the run store; live scenes compute the attack now; "
                                               "charts come from the run store")
        st.caption("The link in the address bar keeps this list.")
    b4.button("", on_click=_leave, icon=":material/close:", width="stretch", key="p_exit",
              help="leave presenter mode: to the Attack Lab")  # a window's ✕: the scene keeps the row
    # a presentation clicker sends Page Down / Page Up, not the arrows: two buttons nobody sees take them (a
    # button has one shortcut; hidden by CSS, its key still works)
    b3.button("Next", on_click=_go, args=(1,), shortcut="PageDown", key="p_clicker_next")
    b3.button("Back", on_click=_go, args=(-1,), shortcut="PageUp", key="p_clicker_back")
    # Home and End, as in a slide deck: to the first scene and the last (after the Q&A, back to the opening one)
    b3.button("First", on_click=_go_to, args=(0,), shortcut="Home", key="p_clicker_first")
    b3.button("Last", on_click=_go_to, args=(-1,), shortcut="End", key="p_clicker_last")


def _head(title: str, line: str, choices: dict) -> None:
    """The title beside the buttons, and under both the scene's line across the page: beside the buttons too, a
    defense with two settings ('Fake gradients (fake σ = 1.05, candidates ν = 1000) · your run #1, recorded')
    wrapped at 1280 px, its scene number alone on a second line."""
    head, nav = st.container(key="p_head").columns([4.6, 2.4])  # narrow: the buttons above the title (CSS)
    head.title(title)
    _nav(nav, choices)
    i, count = st.session_state["p_scene"], len(st.session_state["p_scenes"])
    scene = f'<span style="white-space: nowrap">scene {i + 1} of {count}</span>'
    st.markdown(f'<div class="ld-why">{line} · {scene}</div>', unsafe_allow_html=True)


# ---------------------------------------------------------------- the page


def main() -> None:
    _leave_if_asked()
    st.markdown(CSS, unsafe_allow_html=True)
    run_pool()  # whatever page opens first starts the workers: they compute, and tell the server the machine
    try:
        gallery = open_gallery()
        rows = showcase_rows(gallery)
    except LeakdemoError as e:
        st.warning(f"The recorded showcases are unavailable: {e}")
        gallery, rows = None, []
    try:
        store = open_store()
    except LeakdemoError:  # an unreadable store: Compare says why; the talk goes on without its runs
        store = None
    _follow_history()
    asked = st.session_state.get("p_scenes") or run_refs(st.query_params.get_all("scenes"))
    choices = scene_choices(rows, store, asked)
    custom, unread = custom_sweeps(asked, choices)
    choices.update(custom)
    _init(rows, choices, unread)
    if st.session_state.get("p_problem"):
        # kept until Back, Next or the chooser: the replay's closing rerun would otherwise take it away at once
        st.warning(f"Ignored from the link: {st.session_state['p_problem']}.", icon=":material/link_off:")
    code = st.session_state["p_scenes"][st.session_state["p_scene"]]
    if code.startswith("live:"):
        live_scene(code.split(":", 1)[1], choices)
    elif code.startswith("sweep:"):
        sweep_scene(code.split(":", 1)[1], choices)
    else:
        path, run_id = (gallery.path if code.startswith("g") else store.path), int(code[1:])
        try:
            p = _run(path, run_id).scenario.get("params", {})
        except LeakdemoError as e:  # one of yours deleted since the talk was set up (`runs delete 12`)
            _head(f"Run #{run_id}", "not in the run store", choices)
            st.warning(f"{e}. Next goes on to the next scene.", icon=":material/delete:")
            return
        if code.startswith("g"):
            row = next(r for r in rows if r["id"] == run_id)
            defense = catalog.defense_name(p.get("defense", "none"))
            _head(showcase_why(row), f"{catalog.headline(p)} · <b>{defense}</b> · recorded", choices)
        else:  # one of yours: what it is, its defense with the strength it ran at
            _head(catalog.headline(p), f"<b>{catalog.defense_phrase(p)}</b> · your run #{run_id}, recorded", choices)
        pace = TICK if st.session_state.get("p_pos", 0.0) < 1.0 else None
        st.fragment(run_every=pace)(showcase_body)(path, run_id, pace)


@st.cache_data(max_entries=16, show_spinner=False)
def _run(path: str, run_id: int):
    from ..store import RunStore
    return RunStore(path, read_only=True).load(run_id)


def _picture(originals: np.ndarray, images: np.ndarray, baseline=None, psnr=None,
             verdicts=None) -> tuple[np.ndarray, str]:
    """One or two images side by side, as large as the screen allows; more as rows or mosaics (logit
    sharing's reconstructions framed green / red by the attack-accuracy test once it is known)."""
    if len(originals) <= 2 and baseline is None:
        return (grid([[*originals, *images[:len(originals)]]], cell=320),
                "left: the private data · right: what the server rebuilt")
    if as_mosaics(len(originals), baseline is not None) and verdicts is None:  # two mosaics side by side
        where = "left: the private data · right: what the server rebuilt"
    else:
        where = "top: the private data · below: what the server rebuilt" + \
            (" (green: passes the attack-accuracy test, red: fails)" if _judged(verdicts) else "") + \
            (" · bottom: the TBI baseline" + ("" if _judged(verdicts) else ", shown at the end")
             if baseline is not None else "")
    return pair_grid(originals, images, cell=160, width=720, baseline=baseline, psnr=psnr, verdicts=verdicts), where


def _judged(verdicts) -> bool:
    return verdicts is not None and all(v is not None for v in verdicts)


# ---------------------------------------------------------------- a recorded showcase


def showcase_body(path: str, run_id: int, pace) -> None:
    """The run replaying by itself, and the figures at the end. The timer runs while the replay does (set by
    the full run; a change of pace is one full rerun)."""
    run = _run(path, run_id)
    pos = st.session_state.get("p_pos", 0.0)
    if pace is not None:
        pos = min(1.0, pos + TICK / REPLAY_SECONDS)
    st.session_state["p_pos"] = pos
    it, images = frame_at(run, pos)
    originals = shown_originals(run.started.originals, run.finished.metrics)
    final = pos >= 1.0
    verdicts, baseline = judged_extras(run, final)
    picture, where = _picture(originals, images, baseline,
                              run.finished.metrics.get("psnr_per_image") if final else None, verdicts)
    left, right = st.columns([3, 1])
    # inline, encoded once per frame: a media file (what st.image makes of an array) could be replaced by the
    # next frame before the browser fetched it, and the projector showed a broken image for a tick
    show(left, ("showcase", path, run_id, it, final), lambda: picture, None,
         f"{where} · {catalog.step_noun(run.scenario.get('params', {}))} {it} of {run.finished.iterations}")
    m = run.finished.metrics
    if m.get("attack_accuracy") is not None:
        right.metric("Attack accuracy", f"{m['attack_accuracy']:.0%}" if final else "…")
        if m.get("baseline_attack_accuracy") is not None:
            right.metric("TBI baseline", f"{m['baseline_attack_accuracy']:.0%}" if final else "…")
    else:  # the figures of the frame shown, as the live run showed them; the final ones at the end
        psnr, ssim = (m["psnr"], m["ssim"]) if final else (_history_at(run, it, "psnr"), _history_at(run, it, "ssim"))
        right.metric("PSNR", "…" if psnr is None else f"{psnr:.1f} dB")
        right.metric("SSIM", "…" if ssim is None else fixed(ssim, 2))
    if final:
        _cost_metric(right, m, run.scenario.get("params", {}))
        right.metric("Run time", clock(run.finished.seconds, 0, short=True))
        _recovered_metric(right, run.finished)
    else:
        seconds = _history_at(run, it, "seconds")
        right.metric("Time", "…" if seconds is None else clock(seconds, 0, short=True))
    if (TICK if st.session_state["p_pos"] < 1.0 else None) != pace:
        st.rerun()


def _history_at(run, iteration: int, key: str) -> float | None:
    """A figure of the recorded run's curves at the replayed frame's iteration (the last value recorded at
    or before it); None before its first value."""
    h = run.finished.history
    value = None
    for it, v in zip(h.get("iteration", []), h.get(key, [])):
        if it > iteration:
            break
        if v is not None:
            value = v
    return value


# ---------------------------------------------------------------- a live run


def _live_handle(preset: str):
    live = st.session_state.get("p_live")
    return live[1] if live is not None and live[0] == preset else None


def _start_live(preset: str) -> None:
    from ..scenario import from_preset
    from .shared import tab_alive
    _leave_live()
    st.session_state["p_live"] = (preset, run_pool().submit(from_preset(preset), alive=tab_alive()))


def _leave_live() -> None:
    """Moving on stops a live run still going: the next scene should not share the cores with it."""
    live = st.session_state.pop("p_live", None)
    if live is not None and not live[1].done:
        live[1].stop()


def _live_pace(handle) -> float | None:
    if handle is None or handle.done:  # the scene needs no downloads: done is the end
        return None
    return LIVE_POLL if handle.status == "running" else QUEUED_POLL


def live_scene(preset: str, choices: dict) -> None:
    """The preset's attack computed now, in the server's worker pool, streaming into the scene; it starts when
    the scene opens (Back / Next stop it) and can be run again."""
    from ..scenario import presets
    from .shared import hardware
    p = presets()[preset]
    _head(f"Live: {p.title}", f"computed now on this machine: {hardware()}", choices)  # not "(CPU only (2 cores))"
    if _live_handle(preset) is None:
        _start_live(preset)
    handle = _live_handle(preset)
    pace = _live_pace(handle)
    st.fragment(run_every=pace)(live_body)(preset, pace)


def live_caption(where: str, latest, fin, noun: str = "iteration") -> str:
    """Where the private data is, the iteration (`noun`: PLI's inversion epoch), and — while it runs — the
    attack's stage (PLI's round, CAFE's step, compiling), as the Lab's progress bar shows it."""
    if fin is not None:
        return f"{where} · {noun} {fin.iterations} of {fin.iterations}"
    if latest is None:
        return f"{where} · {noun} 0 of …"
    stage = f" · {latest.stage}" if latest.stage else ""
    return f"{where} · {noun} {latest.iteration} of {latest.total}{stage}"


def live_body(preset: str, pace) -> None:
    handle = _live_handle(preset)
    if handle is None:  # the scene was left while this refresh was on its way
        return
    handle.poll()
    with handle.lock:
        status, started, latest, fin, error = handle.status, handle.started, handle.latest, handle.finished, handle.error
    left, right = st.columns([3, 1])
    if status == "failed":
        left.error(f"The run could not complete: {error}")
    elif started is None:
        left.info(queue_line(run_pool(), handle) if status == "queued"
                  else f"{setup_line(handle.scenario.params)} · {handle.since_latest():.0f} s")
    else:
        src = fin if fin is not None else latest
        ids = (fin.metrics.get("sample_ids") if fin is not None else getattr(latest, "sample_ids", None))
        originals = started.originals if ids is None else started.originals[np.asarray(ids)]
        images = src.images if src is not None and src.images is not None else np.ones_like(originals)
        picture, where = _picture(originals, images, getattr(fin, "baseline", None),
                                  fin.metrics.get("psnr_per_image") if fin is not None else None,
                                  fin.metrics.get("success") if fin is not None else None)
        frame = ("final", fin.status) if fin is not None else (-1 if latest is None else latest.iteration)
        show(left, ("live", handle.seq, frame), lambda: picture, None,
             live_caption(where, latest, fin, catalog.step_noun(handle.scenario.params)))
    if fin is not None:
        m = fin.metrics
        if m.get("attack_accuracy") is not None:
            right.metric("Attack accuracy", f"{m['attack_accuracy']:.0%}")
        else:
            right.metric("PSNR", f"{m['psnr']:.1f} dB")
            right.metric("SSIM", fixed(m['ssim'], 2))
        _cost_metric(right, m, handle.scenario.params)
        right.metric("Run time", clock(fin.seconds, 0, short=True))
        _recovered_metric(right, fin)
    elif latest is not None:
        accuracy = (latest.checks or {}).get("attack_accuracy")
        if accuracy is not None:  # PLI: its figure while it runs too
            right.metric("Attack accuracy", f"{accuracy:.0%}")
        else:
            right.metric("PSNR", "…" if latest.psnr is None else f"{latest.psnr:.1f} dB")
        right.metric("Time", clock(latest.seconds + handle.since_latest(), 0, short=True))
    if handle.done:
        right.button("Run again", on_click=_start_live, args=(preset,), icon=":material/replay:", width="stretch")
    if _live_pace(handle) != pace:
        st.rerun()


def _cost_metric(column, m: dict, p: dict) -> None:
    """What the defense cost the federation, where the run measured it beside the same federation without it
    (vertical FL's training loss, logit sharing's clients' accuracy): a defended run's scene showed its privacy
    alone, and the slide meant to weigh a defense read as if it were free. Left out where the undefended loss
    barely falls (cafe-faces, utility.barely_learns): there 'no cost' would be the wrong lesson."""
    own = utility.of_run(m)
    if own is None or own[2] is None or utility.barely_learns(m["utility"], p):
        return
    name, value, clean = own
    if name == "training_loss":
        column.metric("Training loss", f"{value:.3f}", delta=f"{value - clean:+.3f} vs none", delta_color="inverse",
                      help="the federation's final training loss with this defense; below it, the change from the "
                           "same federation without it (higher: it learns worse)")
    else:
        column.metric("Clients' accuracy", f"{value:.0%}", delta=f"{100 * (value - clean):+.0f} pts vs none",
                      help="the clients' accuracy on held-out images of the private classes with this defense; "
                           "below it, the change in percentage points from the same federation without it")


def _recovered_metric(column, fin) -> None:
    """When the picture came back (30 dB), or 'never': the figure a class remembers, under the run's time."""
    after = milestones.recovered_after(getattr(fin, "history", None), fin.metrics, short=True)
    if after is not None:
        column.metric("30 dB after", after, help=milestones.RECOVERED_HELP)


# ---------------------------------------------------------------- a trade-off chart


def sweep_scene(name: str, choices: dict) -> None:
    """A built-in sweep's chart, drawn from this machine's run store when it holds every run, else from the
    gallery's recording (sweep-dp-dlg ships there); otherwise it says what to run."""
    from ..sweeps import sweeps
    from ..tradeoff import equations_per_point, knob_name, one_figure_line
    from .tradeoffs import CUSTOM, LINE_STYLES, custom_sweep, strength_figure
    from ..sweep import flat_utility
    from ..tradeoff import has_epsilon
    name, by_epsilon = name.removesuffix(EPSILON), name.endswith(EPSILON)  # the Trade-offs page's ε chart
    # a custom sweep's code carries it, checked when the scene list was read (or when the sweep finished)
    try:
        spec = custom_sweep(name.split(":", 1)[1]) if name.startswith(f"{CUSTOM}:") else sweeps()[name]
    except LeakdemoError as e:
        _head("A trade-off chart", "a custom sweep", choices)
        st.info(f"This version cannot draw it: {e}. Next goes on to the next scene.")
        return
    memo = st.session_state.setdefault("p_sweep_rows", {})
    if name not in memo:
        memo[name] = _sweep_rows(spec)
    rows, axes, recorded, problem, base, one_utility = memo[name]
    no_epsilon = not problem and by_epsilon and not any(has_epsilon(r) for r in rows)
    if no_epsilon:  # a hand-made link: the slide shows the chart it can draw, not an empty projector
        by_epsilon = False
    knob = knob_name(axes[0].name, base) if axes else None  # a protocol knob's sweep (batch size): no defense
    # a knob the federation's training does not take leaves utility one figure: no trade-off to title
    title = (f"What the attack recovers, by {knob}" if one_utility else f"Privacy against utility, by {knob}") \
        if knob else "What a formal guarantee buys: leakage and utility by ε" if by_epsilon \
        else "What a defense costs: privacy against utility"
    _head(title, spec.title + (" · recorded with the gallery" if recorded else ""), choices)
    if problem:
        st.info(problem)
        memo.pop(name)  # asked again next time: the sweep may have been run meanwhile
        return
    # the plot spans the projector: about 850 px at 1024×768, its labels' characters about half the font wide
    fig = strength_figure(rows, [a.name for a in axes], axes[0].log, plot_px=850, char_px=BIG_FONT // 2, base=base,
                          by_epsilon=by_epsilon)
    big, bigger = dict(size=BIG_FONT), dict(size=BIG_FONT + 4)  # the theme sizes each part: each is set here
    # no title (the scene's heading says it), so the key to solid and dashed lines heads the legend
    fig.update_layout(height=None, font=big, title=None, margin=dict(t=24),
                      # at the figure's foot, below the axis title however long (a share of the plot's height met
                      # it on a short chart)
                      legend=dict(font=big, yref="container", y=0, yanchor="bottom",
                                  title=dict(text=LINE_STYLES, font=big)))
    fig.update_xaxes(tickfont=big, title_font=bigger)
    fig.update_yaxes(tickfont=big, title_font=bigger)
    right = fig.layout.yaxis2.title.text  # "federation's accuracy (held-out digits)" ran past a short chart's top
    if right and " (" in right:
        fig.update_yaxes(title_text=right.replace(" (", "<br>(", 1), secondary_y=True)
    fig.update_annotations(font=big)
    if not by_epsilon:
        _count_beside_each_value(fig, equations_per_point(axes[0].name, axes[0].values, base), axes[0].values)
    if one_utility:  # the chart gives the note below it room: at 1024×768 and 1280×720 it fell below the fold
        st.markdown(f'<style>[data-testid="stPlotlyChart"] {{height: calc(68vh - {NOTE_REM}rem) !important;}}</style>',
                    unsafe_allow_html=True)
    st.plotly_chart(fig, config={"displayModeBar": False}, height="stretch")
    if one_utility:
        st.markdown(f'<div class="ld-why">{one_figure_line(axes[0].name, base)}</div>',
                    unsafe_allow_html=True)  # read from the back: the subtitle's size
    flat = flat_utility(rows)
    if flat:  # cafe-faces: every defense would look free on the projector, without a word
        st.markdown(f'<div class="ld-why">{flat}</div>', unsafe_allow_html=True)
    if no_epsilon:
        st.markdown('<div class="ld-why">No point of this sweep has a formal ε (only Gaussian noise on a clipped '
                    'payload gives one), so the chart is drawn against the defense\'s strength.</div>',
                    unsafe_allow_html=True)


def _count_beside_each_value(fig, counts: list[float] | None, values) -> None:
    """Beside each swept value its gradient's numbers per unknown pixel value (tradeoff.equations_per_point), where
    a sweep of DLG's LeNet runs short of them: the reason the attack gives out there, on the chart itself, since
    a projector has no room for the page's line of figures (sweep-batch-dlg: '16 (1.04)')."""
    x = fig.layout.xaxis
    if not counts or x.tickvals is None or x.ticktext is None:
        return
    count = dict(zip(values, counts))
    if not all(v in count for v in x.tickvals):
        return
    fig.update_xaxes(ticktext=[f"{t} ({count[v]:.2f})" for v, t in zip(x.tickvals, x.ticktext)],
                     title_text=f"{x.title.text} · in brackets: numbers per unknown (DLG needs ~2)")


def _own_store():
    """This machine's run store, or None where it cannot be opened (the gallery may still draw the chart)."""
    from ..store import open_store
    try:
        return open_store()
    except LeakdemoError:
        return None


def _sweep_rows(spec) -> tuple:
    """(rows, axes, recorded, problem, the sweep's base parameters, whether its utility is one figure): this
    machine's own runs of the sweep first
    (this code, this machine), else the gallery's recording; a problem says why neither can draw it."""
    from ..gallery import recorded_sweep
    from ..scenario import load
    from ..sweep import SweepFinished, parse_axis
    try:
        base = load(spec.base, spec.set)
        axes = [parse_axis(v, base) for v in spec.vary]
        sweep, recorded, missing = recorded_sweep(base, axes, spec.seeds, _own_store())
        if sweep is not None:
            rows = next(ev.rows for ev in sweep.events() if isinstance(ev, SweepFinished))
            return rows, axes, recorded, None, base.params, sweep.utility_is_one_figure()
    except LeakdemoError as e:
        return None, None, False, f"The sweep cannot be drawn here: {e}", None, False
    lacks = plural(missing, "run") if missing else "the runs"
    return None, None, False, (f"The run store lacks {lacks} of this sweep: run it once on the Trade-offs page (a few "
                               "minutes on a laptop); from then on this scene draws it at once."), None, False
