"""What every dashboard page shares: the server's one worker pool, and whether a browser tab still listens."""
from __future__ import annotations

import itertools
import time
from typing import Any

import streamlit as st

from .. import catalog, milestones
from ..words import plural
from .axes import CHAR_PX, LABEL_PX, VEIL, label_box, label_place
from .pool import RunPool


@st.cache_resource(validate=lambda pool: not pool.closing, show_spinner=False)
def run_pool() -> RunPool:
    """One pool for the whole server: every browser session, on every page, shares its bounded workers.
    A pool that was closed (its workers gone) is never handed out again: the next page starts a new one."""
    return RunPool()


_FULL_RUNS = itertools.count(1)


def polled(body, pace: float | None):
    """`body` as the fragment that redraws a page's live part every `pace` seconds (None: not again), under
    a fragment id of its own for this full run.

    Why a new id each time: the browser drops its fragment timers when a full run starts, and arms the new one
    when that run's fragment call reaches it. A tick of the old timer sent just before (a pace change is a full
    run that a tick of the old pace asked for) could reach a busy server just after the full run ended; for a
    fragment that still exists Streamlit then starts a second script runner, and the first runner's messages
    not yet sent are dropped, the new timer among them: the tab stopped redrawing for good (12 tabs on 2 cores,
    about one classroom in four). A tick for a fragment id the full run did not register is ignored instead.

    Not for a panel with a selectable Plotly chart (`on_select="rerun"`): under a changing id a click on the
    Trade-offs page's chart went unanswered, so that page keeps a plain fragment (the Lab's keyed toggle and
    download buttons still answer: checked in the browser)."""
    def live(*args, **kwargs):
        return body(*args, **kwargs)
    live.__qualname__ = f"{getattr(body, '__qualname__', 'live')}#{next(_FULL_RUNS)}"  # the id Streamlit hashes
    return st.fragment(run_every=pace)(live)


def note_drawn(keys) -> None:
    """At the end of a page's controls, in a full run: the values its widgets outside the live fragment were
    drawn with, which undo_stale_echoes puts back."""
    st.session_state["drawn_widgets"] = {k: st.session_state[k] for k in keys if k in st.session_state}


def _fragment_run() -> bool:
    """Whether this script run runs fragments alone (a fragment's timer tick), not the whole page."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx
    ctx = get_script_run_ctx()
    return ctx is not None and bool(ctx.fragment_ids_this_run)


def undo_stale_echoes() -> bool:
    """Whether this run is a live fragment's alone; if so, each widget outside it goes back to the value the last
    full run drew it with.

    Why: a fragment's timer tick carries every widget's value as the browser shows it. Between a choice that a
    callback answers by setting other widgets (a preset's values, a protocol's own attack and defense) and the
    browser drawing them, a tick sent the old ones back, and Streamlit took them for the user's: switching the
    Lab to FedMD under Gaussian noise while the page polled (a run going, a fresh server's first minute) called
    the defense's callback with "Gaussian noise (DP-style)", no FedMD choice, and "defense: must be one of …"
    stood beside Run; a preset switched during a run went to DLG and back (1 in 4 tries). A choice of the user's
    own outside the fragment is always a full run, so in a fragment's run such a change is an echo: a callback
    that sees True ignores it."""
    if not _fragment_run():
        return False
    for key, value in st.session_state.get("drawn_widgets", {}).items():
        if st.session_state.get(key) != value:
            st.session_state[key] = value
    return True


# Every keyed choice of a page is drawn with persist_state=KEEP: its value outlives a visit to another page.
# Without it Streamlit drops a widget's value as soon as a run does not draw it; back from Trade-offs, the Lab's
# sidebar read preset agic, DLG on FedSGD, with CAFE's 40 images and 2000 iterations left over (the scenario the
# page held was still cafe's) and Run blocked; the Trade-offs page came back on the DP sweep beside the pruning
# sweep it was still running, and Compare on its two showcases instead of the runs picked.
KEEP = "session"


def held(key: str, fallback=None):
    """What the session holds for a keyed widget: pass it to the widget as its default too (`value=`,
    `default=`; `held_index` for `index=`).

    Why: a value the page sets through st.session_state (a link's, a preset's) reaches the browser once, with
    the run that set it. A tab that draws the widget only after a later full run has replaced that run's
    elements — a slow or busy tab, on a fresh server whose first page is followed by a full run as its workers
    warm up — mounts it at its default instead: the first option, the minimum. It shows that, and sends it
    back with its next message: 1 in 5 classroom rounds had a tab run preset `agic`, DLG, 1 iteration at
    lr 0.0001, 8 px, seed 0 where its link said DLG, 15 iterations, 16 px (the same with the tab's CPU slowed
    20×, three fresh servers in three). With the held value as its default, the fallback is the value itself."""
    return st.session_state.get(key, fallback)


def held_index(key: str, options, fallback: int = 0) -> int:
    """`held` for a selectbox or a radio: the index of the option the session holds (`fallback` where it holds
    none of them)."""
    options = list(options)
    value = st.session_state.get(key)
    return options.index(value) if value in options else fallback


def hardware() -> str:
    """The machine in words, as the workers reported it (the web server itself never loads torch)."""
    from ..device import facts
    known = facts(wait=False)
    return known["hardware"] if known else "its workers are still starting"


def queue_line(pool, handle) -> str:
    """Why a queued run waits, in words: the workers still starting (a fresh server's first run), or the runs
    ahead of it."""
    if pool.ready() == 0:
        return ("Starting the attack workers (each loads PyTorch once, when the server's first page opens): "
                "this run begins as soon as one is ready.")
    ahead = max(0, pool.position(handle) - 1)
    n = pool.max_running
    at_once = f"{plural(n, 'run')} at a time on this server"
    place = "next in line" if ahead == 0 else f"{plural(ahead, 'run')} ahead of this one"
    # what holds the workers: a sweep started on Trade-offs took both, and the Lab waited a minute unexplained
    busy = pool.on_sweeps()
    who = "the worker is" if n == 1 else "both workers are" if busy == n == 2 else f"{busy} of the {n} workers are"
    held_by = f"; {who} on a sweep's runs (Trade-offs, or Compare's defenses form)" if busy else ""
    waited = time.monotonic() - handle.queued_at  # a wait without a clock looks hung
    return f"Waiting for a free worker{f' for {waited:.0f} s' if waited >= 1 else ''} — {place} ({at_once}){held_by}."


def same_page_as_before() -> bool:
    """Whether this run is of the page the session's run before was of (app.py notes each run's page): a link
    that changed between two such runs came from the browser's Back or Forward, not from a switch of page."""
    return st.session_state.get("page_before") == st.session_state.get("page_now")


def link_now() -> tuple:
    """The address bar's link, comparable and hashable: each name with all its values."""
    return tuple(sorted((k, tuple(st.query_params.get_all(k))) for k in st.query_params))


def history_step(page: str) -> tuple[bool, Any]:
    """Whether this run's link came from the browser's Back or Forward — a link met on a run of this same page
    that the page did not write itself — and, if so, what the page showed when it stood at that link (None: a
    link it never stood at, to be read as an arrival reads it). Each change a page writes into its link is a
    history entry: the Lab and Trade-offs wrote what their sidebar held straight back over the link Back
    returned to, and Back looked dead. Arriving from another page, the sidebar stays as it was. page: the
    session-state prefix of the page's own marks (`mark_link`)."""
    link = link_now()
    if st.session_state.get(f"{page}_link") in (None, link) or not same_page_as_before():
        return False, None
    return True, st.session_state.get(f"{page}_marks", {}).get(link)


def mark_link(page: str, shown: Any, arrived_by: tuple) -> None:
    """Remember what the link now stands for (`shown`, None for nothing to return to), and, on arriving from
    another page or a first visit, the link the page was reached by: a bare one stands for what the page then
    showed (a page reached by the sidebar writes its settings as a second entry, streamlit/streamlit#9279)."""
    marks = st.session_state.setdefault(f"{page}_marks", {})
    if shown is not None:
        marks[link_now()] = shown
        if not same_page_as_before():
            marks[arrived_by] = shown
    st.session_state[f"{page}_link"] = link_now()


def keep_link(query: dict[str, str], default: dict[str, str]) -> None:
    """Keep the address bar's link to what the page shows; a bare address is the page's default view, and stays
    bare while the page shows it. Streamlit pushes a browser-history entry for every change of the query: a page
    that wrote its default on arrival left Back on the bare address, which wrote it again, so Back could not
    leave the app or the page (3 of 3 arrivals at `/`, `/Tradeoffs` and `/Compare` in Chromium). A switch in the
    sidebar to a page that holds other settings still writes them: two entries, as streamlit/streamlit#9279."""
    shown = dict(st.query_params)
    if shown == query or (not shown and query == default):
        return
    st.query_params.from_dict(query)


def ignored_line(ignored) -> str:
    """'Ignored from the link: …', with the fallback where a value of the page's own takes the ignored one's
    place (not for a name that nothing takes: `bogus: unknown parameter. Using the default instead.` promised
    one). ignored: a state.Ignored."""
    fallback = " Using the default instead." if ignored.replaced else ""
    return f"Ignored from the link: {ignored.text}.{fallback}"


def setup_line(p: dict) -> str:
    """What the set-up before the attack's first frame does, in words: a ten-client federation's rounds take
    ~30 s on 2 cores, where "the client computes its update" told a class nothing about the wait."""
    if p.get("protocol") in catalog.LOGIT_PROTOCOLS:
        k = p.get("clients", 1)
        who = "the client trains and shares" if k == 1 else f"{k} clients train and share"
        doing = f"the federation runs its {plural(p.get('rounds', 1), 'round')} — {who} logits on the public images"
    elif p.get("protocol") == "vfl":
        doing = f"{p.get('workers')} workers take their tiles of the {p.get('n_samples')} samples"
    elif p.get("protocol") == "fedavg":
        doing = "the client trains on its private data and sends its new weights"
    elif p.get("clients", 1) > 1:
        doing = f"{p['clients']} clients compute their gradients on their private batches"
    else:
        doing = "the client computes its gradient on its private batch"
    if p.get("warmup_steps"):
        doing = f"the model is first trained for {plural(p['warmup_steps'], 'step')} on other images, then {doing}"
    return f"Setting up: {doing}…"


def tab_alive():
    """Whether this browser tab is still connected (its websocket), for the pool to free a closed tab's
    worker at once; None where there is no server runtime (AppTest)."""
    from streamlit import runtime
    from streamlit.runtime.scriptrunner import get_script_run_ctx
    ctx = get_script_run_ctx()
    if ctx is None or not runtime.exists():
        return None
    rt, session = runtime.get_instance(), ctx.session_id
    return lambda: rt.is_active_session(session)


def leave_legacy_pages_mode() -> None:
    """Streamlit runs files of pages/ by themselves (its first multipage mode) until some session has run
    app.py's st.navigation; a shared link to a page, opened first on a fresh server, would get the old
    navigation and none of app.py's set-up. Leave that mode and rerun: app.py then routes the link."""
    from streamlit.runtime.pages_manager import PagesManager
    if PagesManager.uses_pages_directory:
        PagesManager.uses_pages_directory = False
        st.rerun()


# Every page's title at one height, nearer the top than Streamlit's 6 rem (the Catalog kept Streamlit's: moving to
# it from another page, its title dropped 60 px)
PAGE_TOP_CSS = ".block-container {padding-top: 2.2rem;}"


# A sidebar choice's list opens wider than its 240-px box, so each option reads whole ("Vertical FL — parties hold
# slices of eve", "agic-multiround — AGIC over two epochs — matching and j" were cut at its edge), and a name the
# box, or the list on a phone, still cannot hold ends in "…" rather than mid-word (an option's text sits in a flex
# box, which takes no ellipsis: a block of the same 28-px line does). The list is drawn outside the sidebar: :has.
SIDEBAR_CHOICES_CSS = """
body:has([data-testid="stSidebar"] [data-testid="stSelectbox"] input[aria-expanded="true"])
  [data-testid="stSelectboxVirtualDropdown"] {width: min(31rem, calc(100vw - 2.5rem)) !important;}
[data-testid="stSelectboxVirtualDropdown"] [role="option"] > div {display: block; line-height: 28px;
  text-overflow: ellipsis;}
[data-testid="stSidebar"] [data-testid="stSelectbox"] input {text-overflow: ellipsis;}
"""


def stacked_when_narrow(key: str, px: int = 700) -> str:
    """CSS: the columns inside st.container(key=key) stand one above the other where that container is under
    px wide (a 1024-px laptop with the sidebar open leaves the main area 555 px: two charts side by side got
    plots 135-175 px wide), and side by side from there up. Streamlit itself stacks columns only on a phone."""
    return (f".st-key-{key} {{container-type: inline-size;}}\n"
            f"@container (max-width: {px}px) {{\n"
            f"  .st-key-{key} [data-testid=\"stHorizontalBlock\"] {{flex-wrap: wrap;}}\n"
            f"  .st-key-{key} [data-testid=\"stColumn\"] {{flex: 1 1 100% !important; min-width: 100% !important;}}\n"
            "}")


def line_under_buttons(key: str, px: int = 550) -> str:
    """CSS: in the row of st.container(key=key) — two buttons, then a line of words — the line goes under the
    buttons where that container is under px wide, and the buttons share the row. Beside the line in a main
    area of 440 px (a 900-px window with the sidebar open) they read "Run a…" and "S…"; a 1024-px laptop
    leaves 555 px, where they fit."""
    return (f".st-key-{key} {{container-type: inline-size;}}\n"
            f"@container (max-width: {px}px) {{\n"
            f"  .st-key-{key} [data-testid=\"stHorizontalBlock\"] {{flex-wrap: wrap; row-gap: 0.25rem;}}\n"
            f"  .st-key-{key} [data-testid=\"stColumn\"]:nth-child(3) {{flex: 1 1 100% !important;"
            " min-width: 100% !important;}\n"
            "}")


def psnr_bars(fig, plot_px: tuple[int, int]) -> None:
    """Dashed bars at 20 dB (recognisable) and 30 dB (recovered) on a PSNR chart: the bars the result box times
    and CAFE's frames colour, so a class reads a curve against them (a defended plateau under both says "never").
    Each label goes where no curve runs (above the bar at the right, else below it, else at the left): a run that
    ends at 31–35 dB ran along "30 dB: recovered" at the right, where a run's final value is read. plot_px: the
    plot's width and height at their narrowest, where a label covers the most of it. Call it once the figure
    holds its curves and its y axis."""
    lo, hi = _psnr_span(fig)
    curves, placed = _psnr_curves(fig, lo, hi), []
    xs = [x for t in fig.data for x in (t.x or ()) if x is not None]
    x0, x1 = fig.layout.xaxis.range or ((min(xs), max(xs)) if xs else (0, 1))  # no curve yet: the axis fits the bar
    height = LABEL_PX / plot_px[1] * (hi - lo)
    for db, words, color in ((milestones.RECOGNISABLE_DB, "recognisable", "#e67e22"),
                             (milestones.RECOVERED_DB, "recovered", "#2ca02c")):
        text = f"{db:g} dB: {words}"
        where = label_place(curves + placed, db, text, height, CHAR_PX / plot_px[0])
        # between the grid and the curves, so in the x axis's own units: add_hline's "below" is under the gridlines
        # too (where 20 dB is a tick, as on Compare's axis 0, 20, 40, its gridline hid the bar, leaving its label by
        # nothing), and plotly.js draws no "between" shape that spans the axis's domain
        fig.add_shape(type="line", xref="x", x0=x0, x1=x1, yref="y", y0=db, y1=db, layer="between",
                      line=dict(color=color, dash="dash", width=1))
        fig.add_annotation(text=text, font=dict(size=11, color=color), bgcolor=VEIL, showarrow=False,
                           xref="x domain", x=1 if where.endswith("right") else 0,
                           xanchor="right" if where.endswith("right") else "left",
                           yref="y", y=db, yanchor="bottom" if where.startswith("top") else "top")
        a, b, y0, y1 = label_box(where, db, text, height, CHAR_PX / plot_px[0])
        placed.append((4, [(a, y0), (b, y0), (b, y1), (a, y1), (a, y0)]))  # the next label keeps clear of it


def _psnr_span(fig) -> tuple[float, float]:
    """The left axis's range as plotly draws it: the PSNR curves and the bars, from 0 where the axis says so."""
    ys = [v for t in fig.data if (t.yaxis or "y") == "y" for v in (t.y or ()) if v is not None]
    ys += [milestones.RECOGNISABLE_DB, milestones.RECOVERED_DB]
    return (min(0.0, min(ys)) if fig.layout.yaxis.rangemode == "tozero" else min(ys)), max(ys)


def _psnr_curves(fig, lo: float, hi: float) -> list[tuple[int, list[tuple[float, float]]]]:
    """The figure's lines as (weight, [(share of the x axis, height on the PSNR axis)]): a 0–1 curve on the
    right-hand axis (SSIM) at the height it is drawn, the PSNR axis running from lo to hi; thick lines weigh
    twice a thin one."""
    xs = [x for t in fig.data for x in (t.x or ()) if x is not None]
    if not xs:
        return []
    x0, x1 = min(xs), max(xs)
    out = []
    for t in fig.data:
        right = (t.yaxis or "y") != "y"
        points = [((x - x0) / (x1 - x0) if x1 > x0 else 0.5, lo + v * (hi - lo) if right else v)
                  for x, v in zip(t.x or (), t.y or ()) if x is not None and v is not None]
        out.append((2 if (t.line.width or 2) >= 3 else 1, points))
    return out
