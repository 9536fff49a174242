"""The Compare page: two to four recorded runs side by side — built-in showcases or any run of the store —
with their curves on one chart, their figures in one table, and a replay that plays them in sync from the
first frame to the last (nothing is computed: the frames come from the store).

Layout and widgets only: runs are read with leakdemo.store; pictures drawn with leakdemo.artifacts."""
from __future__ import annotations

import re
import time

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from .. import catalog, milestones, utility
from ..artifacts import as_mosaics, comparison_png, grid, pair_grid, shown_originals
from .pictures import IMAGE_CSS, png_once
from ..errors import LeakdemoError
from ..gallery import open_gallery, showcase_rows, showcase_why
from ..scenario import changed_settings
from ..store import StoredRun, open_store
from ..words import clock, fixed, plural, small_figure
from .shared import KEEP, PAGE_TOP_CSS, held, keep_link, psnr_bars, run_pool, same_page_as_before

MAX_RUNS = 4
TICK = 0.25  # seconds between replay frames
REPLAY_SECONDS = 8.0  # a whole replay at 1× speed
SPEEDS = {"0.5×": 0.5, "1×": 1.0, "2×": 2.0, "4×": 4.0}
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728")


def _runs_grid_css() -> str:
    """The runs as one grid: their titles in the first row, their pictures in the second, so a title that
    wraps to more lines does not push its picture below the others'. On a phone, two runs to a row, each
    title still above its own picture (four side by side scrolled sideways; stacked, every title came first).
    Streamlit wraps each keyed container in a div of its own: that div is the grid's cell."""
    def cell(kind: str, i: int, row: int, column: int, more: str = "") -> str:
        return f".st-key-c_grid > :has(> .st-key-c_{kind}_{i}) {{grid-row: {row}; grid-column: {column};{more}}}\n"
    wide = "".join(cell("head", i, 1, i + 1) + cell("pic", i, 2, i + 1) for i in range(MAX_RUNS))
    phone = "".join(cell("head", i, 2 * (i // 2) + 1, i % 2 + 1, " margin-top: 1rem;")
                    + cell("pic", i, 2 * (i // 2) + 2, i % 2 + 1) for i in range(2, MAX_RUNS))
    return (".st-key-c_grid {display: grid !important; grid-auto-columns: minmax(0, 1fr); column-gap: 1rem; "
            "row-gap: 0.5rem; align-items: start;}\n" + wide + "@media (max-width: 640px) {\n" + phone + "}")


CSS = f"""
<style>
{PAGE_TOP_CSS}
{IMAGE_CSS}
[data-testid="stImage"] img {{max-height: 46vh; object-fit: contain;}}
{_runs_grid_css()}
</style>
"""


# ---------------------------------------------------------------- where runs come from


def _sources() -> tuple[dict, list[str]]:
    """{"g": gallery store, "r": the user's store} (each may be missing), and why one is missing."""
    out, problems = {}, []
    try:
        out["g"] = open_gallery()
    except LeakdemoError as e:
        problems.append(f"the built-in showcases are unavailable: {e}")
    try:
        store = open_store()
        if store is not None:
            out["r"] = store
    except LeakdemoError as e:
        problems.append(str(e))
    return out, problems


def _choices(sources: dict, named=()) -> dict[str, str]:
    """'g3' / 'r12' -> a label people read: 'Run #12 · DLG on FedSGD, Gaussian noise, 4.1 dB (25 Nov 14:02,
    lab)', not the codes 'dlg: dlg, dp-gaussian'. named: the runs the link or the picker names (however old)."""
    out = {}
    if "g" in sources:
        for r in showcase_rows(sources["g"]):
            ref = f"g{r['id']}"
            out[ref] = f"{called(ref)} · {showcase_why(r)}"
    if "r" in sources:
        out.update(your_runs(sources["r"], named))
    return out


NEWEST_OFFERED = 200  # the runs of the store a picker lists, newest first


def your_runs(store, named=()) -> dict[str, str]:
    """The newest NEWEST_OFFERED runs of the user's store, and any older one that `named` (codes: `r12`) names,
    'r12' -> 'Run #12 · DLG on FedSGD, Gaussian noise (…), 4.1 dB (25 Nov 14:02, lab)': Compare's picker and the
    presenter's chooser. The older ones too: a talk's link to run 12 read "no such recorded run here" once a
    class's sweeps (51 runs each) had recorded 200 runs since."""
    out = {}
    rows = store.runs(limit=NEWEST_OFFERED)
    newest = {r["id"] for r in rows}
    older = {int(c[1:]) for c in named if re.fullmatch(r"r\d+", c)} - newest
    for r in rows + (store.runs(ids=older) if older else []):
        psnr = "" if r["psnr"] is None else f", {r['psnr']:.1f} dB"
        if r["attack_accuracy"] is not None:  # PLI is judged by it; its PSNR is against a class's mean
            psnr = f", attack accuracy {r['attack_accuracy']:.0%}"
        when = time.strftime("%d %b %H:%M", time.localtime(r["created"]))
        p = {**r, **r["changes"]}  # the defense's strength, where the run's preset did not set it
        changed = _changes(p, r["changes"])
        ref = f"r{r['id']}"
        # a run stopped early read as one that finished: its figure is of the picture when Stop was pressed
        stopped = (f", stopped after {plural(r['iterations'] or 0, catalog.step_noun(p))}"
                   if r["status"] == "stopped" else "")
        out[ref] = (f"{called(ref)} · {catalog.headline(p)}, {catalog.in_sentence(catalog.defense_phrase(p))}"
                    f"{', ' + changed if changed else ''}{psnr}{stopped} ({when}, {r['source']})")
    return out


def called(ref: str) -> str:
    """'Showcase 3' for 'g3', 'Run #12' for 'r12': how the picker, the chart's legend and the table's columns
    name a run (a legend reading 'g2 · …' over a table headed 'g2' left a class to guess what g meant)."""
    return f"Showcase {ref[1:]}" if ref.startswith("g") else f"Run #{ref[1:]}"


@st.cache_data(max_entries=32, show_spinner=False)
def _load(ref: str, path: str) -> StoredRun:
    from ..store import RunStore
    store = RunStore(path, read_only=ref.startswith("g"))
    return store.load(int(ref[1:]))


def run_refs(asked: list[str]) -> list[str]:
    """The run codes the link gives (`runs=g3,r12`, or the key once per run), each as the page names it: a bare
    `12` or `#12` is your run 12, as `runs list` and `runs show 12` number it (`r12`); `G3` is `g3`."""
    out = []
    for word in ",".join(asked).split(","):
        w = word.strip()
        if re.fullmatch(r"#?\d+", w):
            w = f"r{w.lstrip('#')}"
        elif re.fullmatch(r"[GRgr]\d+", w):
            w = w.lower()
        if w:
            out.append(w)
    return out


def _showcases(choices: dict) -> list[str]:
    """What the page opens on: the first two showcases, which contrast a defense with none (if shipped)."""
    return [k for k in choices if k.startswith("g")][:2]


def _init_from_query(choices: dict) -> None:
    # a list: `runs=g1&runs=g2` (as many sites write one) means `runs=g1,g2`, not the last alone
    wanted = run_refs(st.query_params.get_all("runs"))
    # read again only when the link is new (the Lab's "Replay it" and "Compare it" open this page with their
    # runs): a link this page wrote itself, or none (back from another page), leaves the picker as the user set
    # it. (Compared with the picker, not the link last written, a run added in the picker was taken back at once:
    # the link still named the runs before it.) The defenses form's runs still out join the new link's as they
    # finish (its link was ignored until they all had: Compare it showed the form's runs, not the Lab's).
    # A bare link met on the page itself while it shows other runs is the browser's Back to the page's first
    # address, which stands for its default: read again, as the link of each later pick is.
    shown = st.session_state.get("c_link")
    if "c_runs" in st.session_state and (wanted == shown or not wanted and (
            not same_page_as_before() or shown in ([], _showcases(choices)))):
        return
    known = list(dict.fromkeys(w for w in wanted if w in choices))  # each run once, in the link's order
    bad = [w for w in wanted if w not in choices]
    showcases = _showcases(choices)
    instead = "; the page opens on two showcases instead" if bad and not known and showcases else ""
    problems = [f"runs={','.join(bad)} (no such recorded run here{instead})"] if bad else []
    if len(known) > MAX_RUNS:
        problems.append(f"runs={','.join(known[MAX_RUNS:])} (at most {MAX_RUNS} runs side by side)")
        known = known[:MAX_RUNS]
    if problems:
        st.session_state["c_problems"] = problems
    if not known:  # a first visit: those showcases, if shipped
        known = showcases
    st.session_state["c_runs"] = known
    st.session_state["c_pos"] = 1.0  # the page opens on what each run rebuilt; Play replays from the first frame
    st.session_state["c_playing"] = False


# ---------------------------------------------------------------- one scenario under several defenses


def _defenses_form(sources: dict) -> None:
    """A preset and the defenses to set beside each other (each at its catalog default strength). Runs the
    store already holds come back at once; the others go to the shared worker pool and join the comparison
    as they finish."""
    from ..scenario import presets
    if "r" not in sources:
        st.caption("This needs the run store (it is turned off or unusable here).")
        return
    # the button in a row of its own: a third column cut it to "Run th…" on a 1024-px laptop
    c1, c2 = st.columns([2, 3])
    names = list(presets())
    preset = c1.selectbox("Scenario (preset)", names, key="c_preset", index=names.index("dlg") if "dlg" in names else 0,
                          persist_state=KEEP,
                          format_func=lambda n: f"{n} — {presets()[n].title}")
    protocol = presets()[preset].params.get("protocol", "fedsgd")
    options = catalog.defenses_for(protocol)
    if any(d not in options for d in st.session_state.get("c_defenses", [])):
        st.session_state["c_defenses"] = options[:2]
    # wrap: in a column the box kept one row and scrolled it, the first chosen cut at its left edge ("efense")
    c2.multiselect("Defenses (each at its default strength)", options, key="c_defenses", max_selections=MAX_RUNS,
                   persist_state=KEEP, wrap=True,
                   default=held("c_defenses", options[:2]),  # shared.held
                   format_func=lambda d: catalog.DEFENSES[d].title)
    pending = bool(st.session_state.get("c_pending"))
    row = st.container(horizontal=True)
    row.button("Run them", on_click=_start_defenses, args=(sources,), type="primary", icon=":material/play_arrow:",
               disabled=not st.session_state.get("c_defenses") or pending)
    # a slow preset picked by mistake (cafe: minutes a defense on a laptop) must not hold the form until it ends
    row.button("Stop", on_click=_stop_defenses, icon=":material/stop:", disabled=not pending, key="c_stop")
    if not st.session_state.get("c_defenses") and not pending:  # the greyed button, said why
        row.caption("Choose at least one defense to run.")
    if st.session_state.get("c_error"):
        st.error(st.session_state.pop("c_error"))
    if st.session_state.get("c_note"):  # the form's runs stopped, or one that found the picker full
        st.info(st.session_state.pop("c_note"), icon=":material/info:")


def _stop_defenses() -> None:
    """Stop the form's runs still out; those already finished stay in the comparison."""
    pending = st.session_state.get("c_pending") or []
    for _, h in pending:
        h.stop()
    st.session_state["c_pending"] = []
    if pending:
        names = [catalog.in_sentence(catalog.DEFENSES[d].title) for d, _ in pending]
        listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
        st.session_state["c_note"] = (f"Stopped the runs under {listed}; runs that had finished stay in the "
                                      "comparison.")


def _start_defenses(sources: dict) -> None:
    from ..device import device_name
    from ..scenario import from_preset
    from ..store import scenario_key
    from ..sweep import Task
    from .shared import tab_alive
    store, refs, pending = sources["r"], [], []
    st.session_state["c_order"] = list(st.session_state.get("c_defenses", []))
    for i, d in enumerate(st.session_state.get("c_defenses", [])):
        try:
            sc = from_preset(st.session_state["c_preset"], {"defense": d})
        except LeakdemoError as e:
            st.session_state["c_error"] = str(e)
            return
        found = store.find(scenario_key(dict(sc.params), device_name(sc["device"])))
        if found is not None:
            refs.append(f"r{found}")
            st.session_state.setdefault("c_ref_defense", {})[f"r{found}"] = d
            continue
        task = Task(i, sc["seed"], None, dict(sc.params), sc.preset, with_utility=False)
        pending.append((d, run_pool().submit_task(task, alive=tab_alive())))
    _set_runs(refs)
    st.session_state["c_pending"] = pending
    st.session_state["c_pos"], st.session_state["c_playing"] = 1.0, False


def _set_runs(refs: list[str]) -> None:
    """The comparison's runs, in the picker and in the link alike (a link this page wrote is not read again)."""
    st.session_state["c_runs"] = st.session_state["c_link"] = refs
    if refs:
        st.query_params["runs"] = ",".join(refs)
    else:
        st.query_params.pop("runs", None)


def _collect(sources: dict) -> None:
    """Finished runs of the defenses form: recorded in the store and added to the comparison (before the
    run picker is drawn, so it shows them)."""
    pending = st.session_state.get("c_pending") or []
    if not pending or "r" not in sources:
        return
    still = []
    for d, h in pending:
        if not h.done:
            still.append((d, h))
            continue
        result = (h.task_result or [{}])[0]  # one Task: one result
        rec = result.get("record")
        if rec is None:
            err = result.get("run", {}).get("error") or h.error or h.status
            st.session_state["c_error"] = f"{catalog.DEFENSES[d].title}: the run did not finish ({err})"
            continue
        run_id = sources["r"].record(rec["key"], "compare", rec["scenario"], rec["started"], rec["finished"],
                                     rec["keyframes"])
        st.session_state.setdefault("c_ref_defense", {})[f"r{run_id}"] = d
        shown = st.session_state.get("c_runs") or []
        if len(shown) >= MAX_RUNS:  # runs picked meanwhile fill the picker: a fifth crashed the page
            under = catalog.in_sentence(catalog.DEFENSES[d].title)
            st.session_state["c_note"] = (f"The run under {under} finished (Run #{run_id}), but {MAX_RUNS} runs are "
                                          "compared already: remove one, then pick it from the list.")
            continue
        _set_runs(in_form_order(shown + [f"r{run_id}"], st.session_state["c_ref_defense"],
                                st.session_state.get("c_order") or []))
    st.session_state["c_pending"] = still


def in_form_order(runs: list[str], ref_defense: dict, order: list[str]) -> list[str]:
    """The form's runs in the order its defenses were chosen (no defense, then noise: as picked), whichever
    finished first; runs picked otherwise keep their places."""
    rank = {ref: order.index(d) for ref, d in ref_defense.items() if d in order}
    ours = iter(sorted((r for r in runs if r in rank), key=rank.get))
    return [next(ours) if r in rank else r for r in runs]


def _pending_panel() -> None:
    pending = st.session_state.get("c_pending") or []
    total = max(len(st.session_state.get("c_order") or []), len(pending))  # the store's runs joined at once
    st.progress((total - len(pending)) / total if total else 0.0, text=pending_line(pending, total))
    for _, h in pending:
        h.poll()
    if any(h.done for _, h in pending):
        st.rerun()


def pending_line(pending: list, total: int) -> str:
    """The form's runs still out, in the sidebar's words and with a clock: "Gaussian noise (DP-style): running,
    12 s". A run scored whole sends no frames, and "none (running), dp-gaussian (running)" stood still, under
    an empty bar, until the first one finished."""
    def state(h) -> str:
        if h.status == "running":
            return f"running, {h.since_latest():.0f} s"
        return "waiting for a free worker" if h.status in ("queued", "dropped") else h.status
    each = "; ".join(f"{catalog.DEFENSES[d].title}: {state(h)}" for d, h in pending)
    return (f"Running the scenario under {plural(total, 'defense')} in the shared worker pool — {each}. Each "
            f"joins the comparison as it finishes ({total - len(pending)} of {total} so far).")


# ---------------------------------------------------------------- replay


def frame_at(run: StoredRun, fraction: float) -> tuple[int, np.ndarray]:
    """The run's picture at `fraction` of its iterations: the last kept keyframe not after it, and the
    final result at the end."""
    fin = run.finished
    if fraction >= 1.0 or not run.keyframes:
        return fin.iterations, fin.images
    target = fraction * max(fin.iterations, 1)
    best = run.keyframes[0]
    for it, images in run.keyframes:
        if it <= target:
            best = (it, images)
    return best


PENDING_SHADE = 0.92  # the TBI row before the replay's end: a light grey that keeps its place


def judged_extras(run: StoredRun, final: bool) -> tuple[list | None, np.ndarray | None]:
    """Logit sharing's verdicts and TBI baseline for a replayed frame: the finished run's at the end; before
    it, unjudged frames and a blank row where TBI's faces will be, so the picture keeps its size as the
    replay ends (it grew by a row at the last frame, pushing the charts below down the projector)."""
    verdicts, baseline = run.finished.metrics.get("success"), run.finished.baseline
    if final:
        return verdicts, baseline
    return (None if verdicts is None else [None] * len(verdicts),
            None if baseline is None else np.full_like(baseline, PENDING_SHADE))


def _play() -> None:
    if st.session_state.get("c_pos", 0.0) >= 1.0:
        st.session_state["c_pos"] = 0.0
    st.session_state["c_playing"] = True


def _pause() -> None:
    st.session_state["c_playing"] = False


def _seek() -> None:
    """The slider moved. Not while playing: the slider is hidden then, but the browser can still send the value
    it last showed (1.0) with the replay's first ticks, which would jump the replay to its end."""
    if not st.session_state.get("c_playing"):
        st.session_state["c_pos"] = st.session_state["c_seek"] / 100


# ---------------------------------------------------------------- the page


def main() -> None:
    st.markdown(CSS, unsafe_allow_html=True)
    run_pool()  # whatever page opens first starts the workers: they compute, and tell the server the machine
    st.title(":material/compare: Compare and replay")
    sources, problems = _sources()
    # with the store turned off (LEAKDEMO_STORE=off) no run is kept: the page said every one was
    kept = ("every finished run is kept in the run store, but one on uploaded photos" if "r" in sources or problems
            else "but the run store is off here, LEAKDEMO_STORE=off: no run is kept")
    st.markdown(f"Recorded runs side by side — the built-in showcases, or any run you made ({kept}). **Play** "
                "replays them together from the first frame to the last: nothing is computed, so it is instant on "
                "any machine.")
    for p in problems:
        st.warning(p)
    _collect(sources)
    choices = _choices(sources, run_refs(st.query_params.get_all("runs")) + list(st.session_state.get("c_runs", [])))
    _init_from_query(choices)
    for msg in st.session_state.pop("c_problems", []):
        st.warning(f"Ignored from the link: {msg}.", icon=":material/link_off:")
    with st.expander("Run one scenario under several defenses", expanded=not choices):
        _defenses_form(sources)
    if st.session_state.get("c_pending"):
        st.fragment(run_every=1.0)(_pending_panel)()
    if not choices:
        st.info("No recorded runs yet: run an attack in the Attack Lab, or record the showcases with "
                "`python -m leakdemo record-gallery`.")
        return
    gone = [r for r in st.session_state["c_runs"] if r not in choices]
    if gone:  # deleted since it was picked (`runs delete 12` in a terminal): it left without a word
        st.warning(f"{', '.join(map(called, gone))}: no longer in the run store (deleted since it was picked), "
                   "so no longer compared.", icon=":material/delete:")
        st.session_state["c_runs"] = [r for r in st.session_state["c_runs"] if r in choices]
    picked = st.multiselect(f"Runs to compare (up to {MAX_RUNS})", list(choices), key="c_runs",
                            format_func=choices.get, max_selections=MAX_RUNS, persist_state=KEEP)
    opens_on = _showcases(choices)
    keep_link({"runs": ",".join(picked)} if picked else {}, {"runs": ",".join(opens_on)} if opens_on else {})
    st.session_state["c_link"] = list(picked)
    if not picked:
        st.info("The form's runs join here as they finish." if st.session_state.get("c_pending")
                else "Pick one or more runs above.")
        return
    runs = []
    for ref in picked:
        src = sources["g" if ref.startswith("g") else "r"]
        try:
            runs.append((ref, _load(ref, src.path)))
        except LeakdemoError as e:
            st.error(f"{choices[ref]}: {e}")
    if not runs:
        return
    playing = st.session_state.get("c_playing", False)
    pace = TICK if playing else None
    st.fragment(run_every=pace)(replay_panel)(runs, pace)
    _table(runs)


def replay_panel(runs: list[tuple[str, StoredRun]], pace) -> None:
    """Controls and the runs at the current position, advancing while playing: one fragment, one timer,
    set by the full run at the pace playing needs (a change of pace is one full rerun)."""
    playing = st.session_state.get("c_playing", False)
    if playing and pace is not None:
        pos = min(1.0, st.session_state.get("c_pos", 0.0) + TICK * SPEEDS[st.session_state.get("c_speed", "1×")]
                  / REPLAY_SECONDS)
        st.session_state["c_pos"] = pos  # before the slider is drawn in this run
        if pos >= 1.0:
            st.session_state["c_playing"] = playing = False
    c1, c2, c3 = st.columns([1, 1, 3])
    c1.button("Pause" if playing else "Play", on_click=_pause if playing else _play, type="primary",
              icon=":material/pause:" if playing else ":material/play_arrow:", width="stretch")
    # no labels beside Play (a row of their own), so each says what it is: stacked on a phone, a bare "1×" and a
    # bare "1.00" under Play said nothing
    c2.selectbox("Speed", list(SPEEDS), index=1, key="c_speed", label_visibility="collapsed", persist_state=KEEP,
                 format_func=lambda s: f"{s} speed")
    pos = st.session_state.get("c_pos", 0.0)
    if playing:  # a bar, not the slider: a widget whose value the server moves would race the browser's
        c3.progress(pos, text=f"{pos:.0%} of the run")
    else:
        st.session_state["c_seek"] = round(pos * 100)  # in percent, as the bar shows it while playing
        c3.slider("Position in the run", 0, 100, key="c_seek", format="%d%% of the run",
                  label_visibility="collapsed", on_change=_seek)
    runs_grid = st.container(key="c_grid")  # laid out by _runs_grid_css
    heads = [runs_grid.container(key=f"c_head_{i}") for i in range(len(runs))]
    cols = [runs_grid.container(key=f"c_pic_{i}") for i in range(len(runs))]
    apart = told_apart([(run.scenario.get("params", {}), run.scenario.get("preset")) for _, run in runs])
    for head, col, (ref, run), settings in zip(heads, cols, runs, apart):
        it, images = frame_at(run, pos)
        p = run.scenario.get("params", {})
        originals = shown_originals(run.started.originals, run.finished.metrics)
        head.markdown(f"**{catalog.headline(p)}** · {catalog.defense_phrase(p)}")
        if settings:
            head.caption(settings)
        single = len(originals) == 1
        final = pos >= 1.0
        size = originals.shape[1]

        verdicts, baseline = (None, None) if single else judged_extras(run, final)  # TBI's, beside PLI's

        def picture():  # sent at twice the images' size, inline; the browser enlarges it crisply
            if single:
                return grid([[originals[0], images[0]]], cell=2 * size)
            return pair_grid(originals, images, cell=2 * size, width=20 * size,
                             psnr=run.finished.metrics.get("psnr_per_image") if final else None, verdicts=verdicts,
                             baseline=baseline)
        # pair_grid: two mosaics side by side for many, unless logit sharing's verdicts frame them in rows
        side_by_side = single or as_mosaics(len(originals), baseline is not None) and verdicts is None
        where = "left: private, right: rebuilt" if side_by_side else "top: private, below: rebuilt"
        if verdicts is not None and final:
            where += " (green: passes the attack-accuracy test, red: fails)"
        if baseline is not None:
            where += " · bottom: the TBI baseline" + ("" if final else ", shown at the end")
        url, _ = png_once(("compare", ref, it, final), picture)
        col.image(url, caption=f"{catalog.step_noun(p)} {it} of {run.finished.iterations} · {where}", width="stretch")
    st.plotly_chart(_curves(runs, pos), key="c_curves", config={"displayModeBar": False})
    if (TICK if st.session_state.get("c_playing") else None) != pace:
        st.rerun()


PLOT_PX = (450, 250)  # the PSNR chart's plot at its narrowest, w × h: a 1024-px laptop, the sidebar open


def _curves(runs, pos: float) -> go.Figure:
    # PLI and TBI are judged by attack accuracy: their PSNR is against a class's mean face (~15 dB whether the
    # faces came back or not), so runs of logit sharing alone are drawn by the figure that judges them
    by_psnr = any(milestones.judged_by_psnr(run.finished.metrics) for _, run in runs)
    key = "psnr" if by_psnr else "attack_accuracy"
    fig = go.Figure()
    for i, (ref, run) in enumerate(runs):
        h = run.finished.history
        if not h.get("iteration") or not h.get(key):
            continue
        total = max(run.finished.iterations, 1)
        fig.add_trace(go.Scatter(x=[x / total for x in h["iteration"]], y=h[key], mode="lines",
                                 # 'Showcase 2 · DLG on FedSGD, Gaussian noise': its name ties it to its column
                                 name=f"{called(ref)} · {_what(run.scenario.get('params', {}))}",
                                 line=dict(color=COLORS[i % len(COLORS)], width=3)))
        if not by_psnr and h.get("baseline_attack_accuracy"):  # TBI beside it, dashed, as the Lab draws it
            fig.add_trace(go.Scatter(x=[x / total for x in h["iteration"]], y=h["baseline_attack_accuracy"],
                                     mode="lines", name=f"{called(ref)} · TBI baseline",
                                     line=dict(color=COLORS[i % len(COLORS)], width=2, dash="dash")))
    fig.add_vline(x=pos, line=dict(color="#555", dash="dot"))
    # 400 px: at 320 the plot kept 170 px of it under a two-row legend, the two bars' labels pressed together
    fig.update_layout(title=f"{'PSNR' if by_psnr else 'Attack accuracy'} over each run (x: share of its iterations)",
                      height=400, xaxis=dict(title="progress through the run", range=[0, 1]),
                      yaxis_title="PSNR, dB" if by_psnr else "attack accuracy",
                      margin=dict(l=10, r=10, t=50, b=10), legend=dict(orientation="h", y=-0.3))
    if by_psnr:
        psnr_bars(fig, PLOT_PX)
    else:
        fig.update_yaxes(range=[0, 1.02], tickformat=".0%")
    return fig


def _changes(p: dict, changes: dict, most: int = 4) -> str:
    """'batch size = 16, seed = 2': what a run changed from its preset, in words — the points of one sweep
    differ in nothing else — but for a defense's strength, which its phrase gives ('Gaussian noise (noise σ =
    0.01, …)'); the first `most`, then how many more."""
    words = [catalog.setting_words(p, k, v) for k, v in changes.items() if k not in _STRENGTHS]
    return ", ".join(words[:most] + ([f"{len(words) - most} more"] if len(words) > most else []))


_STRENGTHS = frozenset(q.name for d in catalog.DEFENSES.values() for q in d.params)


def told_apart(runs: list[tuple[dict, str | None]]) -> list[str]:
    """For runs side by side, (parameters, preset) each: the settings, changed from a preset, in which they
    differ — 'batch size = 8' over one column and 'batch size = 16' over the next (two points of one sweep read
    alike: 'DLG on FedSGD · no defense' twice), and nothing where they agree (the showcases' common seed
    would only push the pictures down a projector). The titles name attack and defense already."""
    if len(runs) < 2:
        return [""] * len(runs)
    changed = [changed_settings(p, preset) for p, preset in runs]
    names = [k for k in dict.fromkeys(k for c in changed for k in c) if len({repr(p.get(k)) for p, _ in runs}) > 1]
    # a setting the run never reads is no part of it: a digits run beside a folder run read "folder ="
    return [_changes(p, {k: p[k] for k in names if p.get(k) not in (None, "") and not catalog.without_effect(p, k)},
                     most=6) for p, _ in runs]


def _what(p: dict) -> str:
    """'DLG on FedSGD, Gaussian noise' for a run's parameters (or a run store's row of them)."""
    return f"{catalog.headline(p)}, {catalog.in_sentence(catalog.defense_name(p.get('defense', 'none')))}"


def _table(runs) -> None:
    """The runs' figures, one column per run in the pictures' order. A row per run ran off a 1280-px projector's
    edge once PLI's accuracies joined DLG's figures, with 'None' in every cell a run has no figure for; as columns,
    four runs fit, a figure no run has is left out and one a run lacks reads '—'."""
    columns = {called(ref): figures(run) for ref, run in runs}
    names = [k for k in next(iter(columns.values())) if any(c[k] is not None for c in columns.values())]
    if len(columns) > 1 and len({c["preset"] for c in columns.values()}) == 1:
        names.remove("preset")  # the same for every run
    st.table(pd.DataFrame({ref: [c[k] or "—" for k in names] for ref, c in columns.items()}, index=names))
    if flat := flat_utility(runs):
        st.caption(flat)
    row = st.container(horizontal=True)
    # the finished runs as one picture for a slide: each run's grid.png, captions included (drawn when clicked)
    row.download_button("comparison.png", lambda: comparison_png([(run.started.originals, run.finished,
                                                                   run.scenario.get("params", {})) for _, run in runs]),
                        file_name="comparison.png", mime="image/png", icon=":material/download:", on_click="ignore",
                        help="The runs' final pictures side by side, each with what it shows and its figures")
    # the same runs on a projector, a scene each, in a tab of its own (presenter mode: no navigation)
    row.link_button("Present these runs", f"./?present=1&scenes={','.join(ref for ref, _ in runs)}",
                    icon=":material/present_to_all:",
                    help="Full screen in a new tab, a run a scene, each replaying by itself: Back / Next or ← / →")


def utility_words(m: dict) -> str | None:
    """'clients' accuracy 70% (60% without)' or 'training loss 0.635 (0.375 without)': the run's own utility
    figure beside the same federation's without the defense, where the run measured it (vertical FL, logit
    sharing); None for FedSGD and FedAvg, whose utility is a training of its own (the Trade-offs page's)."""
    own = utility.of_run(m)
    if own is None:
        return None
    name, value, clean = own
    form, what = ("{:.3f}", "training loss") if name == "training_loss" else ("{:.0%}", "clients' accuracy")
    return f"{what} {form.format(value)}" + ("" if clean is None else f" ({form.format(clean)} without)")


def flat_utility(runs) -> str | None:
    """Why the utility row cannot show what a defense costs (utility.barely_learns), said under the table as
    the Lab says it under its loss chart: cafe-faces runs side by side read 'training loss 2.199 (2.199
    without)', a defense that looked free because the undefended federation learns nothing either."""
    said = {}
    for ref, run in runs:
        u = run.finished.metrics.get("utility")
        if u and (flat := utility.barely_learns(u, run.scenario.get("params", {}))):
            said[called(ref)] = flat
    if not said:
        return None
    first = next(iter(said.values()))  # the runs' words differ by their figures alone: said once
    return first if len(runs) == 1 else f"{' and '.join(said)}: {first}"


def figures(run: StoredRun) -> dict[str, str | None]:
    """A finished run's figures as the page words them elsewhere (46.9 dB, 100%), None where it has none."""
    m, p = run.finished.metrics, run.scenario.get("params", {})

    def shown(v, form):
        return None if v is None else form.format(v)
    return {"preset": run.scenario.get("preset"), "attack": catalog.headline(p),
            "defense": catalog.defense_name(p.get("defense", "none")),
            "PSNR": shown(m.get("psnr"), "{:.1f} dB"), "SSIM": None if m.get("ssim") is None else fixed(m["ssim"]),
            # LPIPS as the Lab words it: "< 0.001", not "0.000"
            "LPIPS": None if m.get("lpips") is None else small_figure(m["lpips"]),
            "label accuracy": shown(m.get("label_accuracy"), "{:.0%}"),
            "attack accuracy": shown(m.get("attack_accuracy"), "{:.0%}"),
            "TBI accuracy": shown(m.get("baseline_attack_accuracy"), "{:.0%}"),
            # what the defense costs, where the run measured it (the Lab's Utility metric or its loss curve)
            "utility": utility_words(m),
            "privacy": m.get("privacy", "ε = ∞"), "steps": shown(run.finished.iterations, "{}"),
            "time": None if run.finished.seconds is None else clock(run.finished.seconds),
            # when the picture came back: two attacks that end at the same PSNR may differ fivefold here
            "30 dB after": milestones.recovered_after(run.finished.history, m)}
