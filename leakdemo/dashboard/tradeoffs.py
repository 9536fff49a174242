"""The Trade-offs page: sweep a defense's strength and watch privacy against utility draw itself.

Layout and widgets only: the grid, scoring, utility and ε are leakdemo.sweep's; the runs go to the
server's shared worker pool (sweep_job.py); finished runs come from the run store at once."""
from __future__ import annotations

import base64
import json
import math
import sqlite3
import sys
from urllib.parse import urlencode

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st
from plotly.subplots import make_subplots

from .. import catalog
from ..artifacts import upscale
from ..errors import LeakdemoError, ParamError
from ..scenario import did_you_mean, likeliest, load, presets
from ..store import default_path, open_store
from ..sweep import MAX_POINTS, Sweep, flat_utility, parse_axis, pareto, utility_of
from ..sweeps import meant_sweeps, sweeps
from ..tradeoff import (SHARE_RANGE, UTILITY_TITLES, axis_title, epsilon_title, equations_line, has_epsilon,
                        knob_name, named_series, one_figure_line, plain, point_words, privacy_key, shown_table,
                        strip_caption, strip_series, sweep_csv, utility_range)
from ..words import clock, meant_question, plural, small_figure, time_left, value_text
from .axes import CHAR_PX, LABEL_PX, VEIL, label_place, side_by_side
from .pictures import IMAGE_CSS, png_once
from .server_disk import check_disk
from .shared import (KEEP, PAGE_TOP_CSS, SIDEBAR_CHOICES_CSS, held, held_index, history_step, ignored_line, keep_link,
                     line_under_buttons, link_now, mark_link, note_drawn, run_pool, stacked_when_narrow, tab_alive,
                     undo_stale_echoes)
from .state import Ignored, one_by_one, one_each, to_query
from .sweep_job import SweepJob, pool_runner

CUSTOM = "custom"
DEFAULT_SWEEP = "sweep-dp-dlg"  # what the page opens on, and what a bare link means
SPEC_KEYS = ("sweep", "preset", "defense", "vary", "seeds")
VARY_SEPARATOR = ";"  # between the Vary box's two ranges
DEFAULT_VARY = "dp_sigma=1e-4..1:6"  # the built-in DP sweep's range, where a link names none
SECOND_RANGE_EXAMPLE = "dp_sigma=1e-4..1:6; dp_clip=1,4,16"  # the Vary box's help: a grid, as the Gaussian noise's
POLL_SECONDS = 1.0
WAIT_FOR_STORE = 3.0  # seconds Run waits for a sweep to finish before the page polls it
MAX_SEEDS = 5
STRIP_PER_ROW = 10  # most pictures per row of the strip: each fills its column (all columns are equal), so a
# caption wraps under its own picture (ten fixed 112-px pictures overlapped theirs); more are dealt into even rows
COLORS = ("#2471a3", "#8e44ad", "#16a085", "#d35400", "#7f8c8d")
CSS = f"""
<style>
{PAGE_TOP_CSS}
{IMAGE_CSS}
/* a strip's row: its pictures share the width down to 64 px each, then wrap onto another row. (Columns that
   do not wrap keep 128 px each, and a strip of ten ran off a 1280-px screen: six seen, the strongest defenses
   hidden; columns that do, Streamlit stacks on a phone, each picture as wide as the screen.) */
[class*="st-key-strip_"] [data-testid="stHorizontalBlock"] {{flex-wrap: wrap;}}
[class*="st-key-strip_"] [data-testid="stColumn"] {{min-width: 64px; flex-grow: 0;}}
{stacked_when_narrow("t_charts")}
{line_under_buttons("t_run")}
{SIDEBAR_CHOICES_CSS}
</style>
"""


# ---------------------------------------------------------------- what to sweep (URL <-> widgets <-> Sweep)


def _protocol(preset: str) -> str:
    return presets()[preset].params.get("protocol", "fedsgd")


def _sweepable(defense: str, preset: str) -> list:
    """What a sweep of this defense varies (its numeric strengths); without a defense ("none"), the preset's
    protocol knobs that defend — batch size, local steps, clients."""
    if defense == "none":
        return catalog.defending_knobs(_protocol(preset))
    return [p for p in catalog.DEFENSES[defense].params if p.kind in ("int", "float") and p.name != "dp_delta"]


def _sweepable_defenses(preset: str) -> list[str]:
    """The defenses a sweep can vary on this preset's protocol: those with a numeric strength, then "none"
    (a protocol knob instead) where the protocol has one."""
    out = [d for d in catalog.defenses_for(_protocol(preset)) if d != "none" and _sweepable(d, preset)]
    return out + (["none"] if _sweepable("none", preset) else [])


def _defense_title(defense: str) -> str:
    return "None: vary a protocol knob instead" if defense == "none" else catalog.DEFENSES[defense].title


def _init_from_query(spec: dict | None = None) -> None:
    """A shared link (?sweep=NAME, or ?sweep=custom&preset=…&defense=…&vary=…&seeds=…) fills the widgets;
    a bad value is reported and left at its default. spec: a sweep the page showed, read as its link is (the
    browser's Back to it: `_follow_history`)."""
    if "t_sweep" in st.session_state and spec is None:
        return
    q, twice = one_each(st.query_params) if spec is None else ({k: str(v) for k, v in spec.items()}, {})
    problems = []
    custom_keys = [k for k in q if k != "sweep"]
    # a hand-written link that names a preset, defense or range but no sweep means a custom one
    name = q.get("sweep", CUSTOM if {"preset", "defense", "vary"} & set(q) else DEFAULT_SWEEP)
    if name != CUSTOM and name not in sweeps():
        why = meant_question(meant_sweeps(name))  # `prune`: sweep-prune-dlg
        problems.append(Ignored(f"sweep={name!r} (unknown{': ' + why if why else ''}; "
                                f"built-in: {', '.join(sweeps())})"))
        name = DEFAULT_SWEEP
    st.session_state["t_sweep"] = name
    if name != CUSTOM and custom_keys:  # the sidebar would drop them in silence
        problems.append(Ignored(f"{', '.join(custom_keys)} (a built-in sweep sets its own scenario; "
                                f"sweep=custom takes them)", replaced=False))
        q = {}
    st.session_state["t_preset"] = q.get("preset", "dlg") if q.get("preset", "dlg") in presets() else "dlg"
    if q.get("preset") and q["preset"] not in presets():
        problems.append(Ignored(f"preset={q['preset']!r} (unknown)"))
    st.session_state["t_defense"] = q.get("defense", "dp-gaussian")
    implied = _implied(q)
    if implied:
        st.session_state["t_preset"], st.session_state["t_defense"] = implied
    defenses = _sweepable_defenses(st.session_state["t_preset"])
    if q.get("defense") is not None and q["defense"] not in defenses:  # the sidebar would swap it in silence
        problems.append(Ignored(f"defense={q['defense']!r}" + (f" with vary={q['vary']!r}" if "vary" in q else "")
                                + f" (preset {st.session_state['t_preset']} sweeps {', '.join(defenses)})"))
    defense = st.session_state["t_defense"] if st.session_state["t_defense"] in defenses else defenses[0]
    # no range in the link: the built-in DP sweep's, or the first one of the defense it names (`?defense=prune`
    # was given the noise σ's range, and refused it)
    st.session_state["t_vary"] = q.get("vary") or (DEFAULT_VARY if defense == "dp-gaussian" else
                                                   default_vary(_sweepable(defense, st.session_state["t_preset"])[0],
                                                                st.session_state["t_preset"]))
    try:
        seeds = int(q.get("seeds", "1"))
        if not 1 <= seeds <= MAX_SEEDS:
            raise ValueError
    except ValueError:
        problems.append(Ignored(f"seeds={q.get('seeds')!r} (must be an integer in [1, {MAX_SEEDS}])"))
        seeds = 1
    st.session_state["t_seeds"] = seeds
    # any other key of a custom link is a scenario parameter (image_size=16, iterations=50, …): the sidebar
    # cannot change them, so each one that does not fit is dropped here, and said, rather than block Run
    st.session_state["t_set"], dropped = _fitting(st.session_state["t_preset"], defense,
                                                  {k: v for k, v in q.items() if k not in SPEC_KEYS})
    # a name given twice: the page's own value stands for a sweep's setting or a parameter the scenario takes
    own = set(SPEC_KEYS) | (set(load(st.session_state["t_preset"], {"defense": defense}).params)
                            if name == CUSTOM else set())
    st.session_state["t_problems"] = [Ignored(note, key in own) for key, note in twice.items()] + problems + dropped


def _follow_history() -> bool:
    """The browser's Back and Forward step through the sweeps the page showed (`sweep-dp-dlg`, then
    `sweep-prune-dlg`: Back stayed on pruning): a link met by them returns to the sweep it stood for, or, one
    the page never stood at, is read as an arrival reads it. True where the link was followed: that run does not
    write its link again (shared.history_step)."""
    stepped, marked = history_step("t")
    if not stepped:
        return False
    for key in SIDEBAR_KEYS + ("t_set",):
        st.session_state.pop(key, None)
    _init_from_query(marked)
    return True


def _implied(q: dict) -> tuple[str, str] | None:
    """(preset, defense) for a link that leaves one or both out but names what only some can sweep: a defense of
    another protocol (`?defense=top-k`: pli), or a range of a parameter (`?vary=prune_ratio=0..0.9:4`: magnitude
    pruning on dlg; `?vary=local_steps=1..8:4`: FedAvg's knob, no defense, on agic) — the first preset (dlg first)
    and defense that sweep it, as the sidebar's choices would give. None where the link's own choices do or
    nothing can (the page then says what it ignored)."""
    named = [q["preset"]] if "preset" in q else ["dlg", *presets()]
    axis = q.get("vary", "").partition("=")[0].strip()

    def sweeps(preset: str, defense: str) -> bool:
        own = _sweepable_defenses(preset)
        return defense in own and (not axis or axis in [p.name for p in _sweepable(defense, preset)])

    for preset in (n for n in named if n in presets()):
        wanted = [q["defense"]] if "defense" in q else _sweepable_defenses(preset) if axis else ["dp-gaussian"]
        for defense in wanted:
            if sweeps(preset, defense):
                return preset, defense
    return None


def _fitting(preset: str, defense: str, extra: dict) -> tuple[dict, list[Ignored]]:
    """The link's scenario parameters that fit the preset under this defense, and what each other one broke."""
    kept, dropped = dict(extra), []
    while kept:
        try:
            load(preset, {**kept, "defense": defense})
            break
        except ParamError as e:
            if e.name not in kept:  # refused for another value's sake (n_samples=10 under cafe's batches of 40):
                # the link's values one at a time, as the Lab takes them — that error blocked Run, naming a
                # parameter (batch_size) that no widget here sets
                kept, errors = one_by_one(lambda values: load(preset, {**values, "defense": defense}), kept)
                dropped += [errors[k] for k in extra if k in errors]
                break
            dropped.append(Ignored(e.short, not e.foreign))
            del kept[e.name]
        except LeakdemoError:
            break
    return kept, dropped


SIDEBAR_KEYS = ("t_sweep", "t_preset", "t_defense", "t_vary", "t_seeds")  # the sidebar's widgets, outside the panel


def _controls() -> dict:
    """The sidebar; returns the sweep's description (for the URL and the Sweep)."""
    names = list(sweeps()) + [CUSTOM]
    sb = st.sidebar
    sb.header("What to sweep")
    # each widget's default is the value the session holds (shared.held): a tab that draws it late keeps the link's
    name = sb.selectbox("Sweep", names, index=held_index("t_sweep", names), key="t_sweep", persist_state=KEEP,
                        format_func=lambda n: "Custom: choose the defense and the range" if n == CUSTOM
                        else sweeps()[n].title)
    if name != CUSTOM:
        spec = sweeps()[name]
        sb.caption(spec.description)
        return {"sweep": name}
    preset = sb.selectbox("Scenario (preset)", list(presets()), index=held_index("t_preset", presets()),
                          key="t_preset", format_func=lambda n: f"{n} — {presets()[n].title}", persist_state=KEEP)
    defenses = _sweepable_defenses(preset)
    if st.session_state.get("t_defense") not in defenses:  # a preset whose protocol lacks the defense
        st.session_state["t_defense"] = defenses[0]
        _new_defense()
    defense = sb.selectbox("Defense", defenses, index=held_index("t_defense", defenses), key="t_defense",
                           format_func=_defense_title, on_change=_new_defense, persist_state=KEEP)
    names = [p.name for p in _sweepable(defense, preset)]
    whose = "Protocol knobs that defend" if defense == "none" else "Parameters of this defense"
    sb.text_input("Vary (NAME=LOW..HIGH:N or NAME=a,b,c)", value=str(held("t_vary", "")), key="t_vary",
                  persist_state=KEEP,
                  help=f"{whose}: {', '.join(names)}. Log-spaced where the catalog says so "
                       f"(e.g. noise σ, batch size); 2 to {MAX_POINTS} points. A second range after "
                       f"'{VARY_SEPARATOR}' draws one line per value (at most {len(COLORS)}), e.g. "
                       f"`{SECOND_RANGE_EXAMPLE}` under Gaussian noise: which clip norm, at which noise.")
    seeds = sb.slider("Seeds per point", 1, MAX_SEEDS, value=min(max(int(held("t_seeds", 1)), 1), MAX_SEEDS),
                      key="t_seeds", persist_state=KEEP)
    # the link's scenario values that fit this preset and defense; the others wait, should the user switch back
    extra, aside = _fitting(preset, defense, st.session_state.get("t_set") or {})
    if extra:
        sb.caption("Also set by the link: " + ", ".join(f"`{k}={v}`" for k, v in extra.items()))
    if aside:
        sb.caption("Not used with this scenario: " + ", ".join(
            f"`{k}={v}`" for k, v in (st.session_state.get("t_set") or {}).items() if k not in extra))
    return {"sweep": CUSTOM, "preset": preset, "defense": defense, "vary": st.session_state["t_vary"],
            "seeds": seeds, **extra}


def _new_defense() -> None:
    """Another defense: start from a range of its first parameter (what the user typed is never replaced
    otherwise — a wrong name is an error to read, not something to paper over)."""
    if undo_stale_echoes():  # the defense before, sent back by the sweep panel's timer: not a choice
        return
    preset = st.session_state["t_preset"]
    st.session_state["t_vary"] = default_vary(_sweepable(st.session_state["t_defense"], preset)[0], preset)


def default_vary(p, preset: str | None = None) -> str:
    """A first range for a parameter: two decades either side of its default when it is log-scaled; a count
    (batch size) in five doublings from a quarter of its default: 1, 2, 4, 8, 16 from 1; 10 … 160 from 40. Top-k
    keeps fewer classes than the preset's logits have, in doublings (1 … 16 of 40, 1 … 8 of the ten digits): its
    whole range, 1 … 1000, put every point but k = 1 at or above the class count, each the undefended run. A
    sending temperature starts above 1, which sends the logits as they are. A count ends where the preset's data
    ends (PLI's clients at its target classes)."""
    classes = catalog.logit_classes(load(preset, {}).params) if p.name == "top_k" and preset else None
    if classes:
        ks = [k for k in (1, 2, 4, 8, 16) if k < classes] or [1]
        return f"{p.name}={','.join(map(str, ks))}"
    if p.name == "send_temperature":  # from 1 up, where 1 is the undefended run: two decades above the default
        return f"{p.name}=2,5,10,100,1000"
    if p.kind == "int":
        lo = max(p.low, p.default // 4) if p.log else p.low
        hi = _largest_taken(p.name, preset, lo, min(p.high, max(4 * p.default, 16 * lo)) if p.log else p.high)
        return f"{p.name}={lo:g}..{hi:g}:{min(5, hi - lo + 1)}" if hi > lo else f"{p.name}={lo:g}"
    if p.log:
        return f"{p.name}={max(p.low or 0, p.default / 100):g}..{min(p.high, p.default * 100):g}:5"
    return f"{p.name}={p.low:g}..{p.high:g}:5"


def _largest_taken(name: str, preset: str | None, lo: int, hi: int) -> int:
    """The largest count in [lo, hi] that the preset takes: PLI's clients stop at its target classes (5 on
    pli-digits, whose first range of clients, 1 … 20, ran one point and refused four), the batch of dlg-round's
    eight clients at 2 (23 photos)."""
    from ..data import check_source

    def taken(v: int) -> bool:
        try:
            check_source(load(preset, {name: v}))  # the data too: dlg-round's 8 clients share 23 photos
            return True
        except LeakdemoError:
            return False
    if preset is None or taken(hi):
        return hi
    while hi - lo > 1:  # lo is taken (the preset's own scale), hi is not
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if taken(mid) else (lo, mid)
    return lo


def build(spec: dict) -> tuple[Sweep, str, str]:
    """(sweep, title, description) for a page spec; LeakdemoError names what is wrong."""
    store = _store()
    if spec["sweep"] != CUSTOM:
        s = sweeps()[spec["sweep"]]
        base = load(s.base, s.set)
        axes = [parse_axis(v, base) for v in s.vary]
        return Sweep(base, axes, seeds=s.seeds, store=store), s.title, s.description
    base = load(spec["preset"], {**{k: v for k, v in spec.items() if k not in SPEC_KEYS},
                                 "defense": spec["defense"]})
    ranges = vary_ranges(spec["vary"])
    if len(ranges) > 2:
        raise ParamError("vary", f"at most two ranges, separated by '{VARY_SEPARATOR}' (the second draws one line "
                                 f"per value); got {len(ranges)}")
    for text in ranges:
        _check_swept(text.partition("=")[0].strip(), "=" in text, spec, base)
    # the command line's --vary, once or twice; one text holding both is told the box's way: 'a; b'
    axes = [parse_axis(text, base, said_as="Vary", two=f"{{}}{VARY_SEPARATOR} {{}}") for text in ranges]
    if len(axes) == 2:
        if axes[0].name == axes[1].name:
            raise ParamError("vary", f"{axes[0].name} is given twice; the second range varies another parameter")
        if len(axes[1].values) > len(COLORS):
            raise ParamError(axes[1].name, f"the second range draws one line per value: at most {len(COLORS)} "
                                           f"values, got {len(axes[1].values)}")
        if len(axes[0].values) * len(axes[1].values) > MAX_POINTS:
            raise ParamError("vary", f"{len(axes[0].values)} × {len(axes[1].values)} = "
                                     f"{len(axes[0].values) * len(axes[1].values)} points; at most {MAX_POINTS}")
    check_disk(base.params, axes)  # before Sweep reads a folder: a classroom's browsers never list the server's disk
    # "iDLG against magnitude pruning · …"; a second range is told in the lines' names
    title = catalog.sweep_title(base.params, axes[0].name, spec["preset"], tuple(a.name for a in axes[1:]))
    return Sweep(base, axes, seeds=spec["seeds"], store=store), title, ""


def vary_ranges(text: str) -> list[str]:
    """The Vary box's ranges: one, or two separated by ';' — the second is a grid's other axis, drawn as one
    line per value (`dp_sigma=1e-4..1:6; dp_clip=1,4,16`: which clip norm, at which noise), as a second --vary
    is on the command line. An empty box is one empty range (its error says what to type)."""
    return [t.strip() for t in text.split(VARY_SEPARATOR) if t.strip()] or [text]


def _check_swept(name: str, eq: bool, spec: dict, base) -> None:
    """A name the page cannot sweep is told in the page's terms (parse_axis lists all the CLI could sweep)."""
    knobs = {p.name: p for p in _sweepable("none", spec["preset"])}
    takes = catalog.params_for(base["protocol"], base["attack"], base["defense"])

    def meant(own: list[str]) -> str:  # only a name this page can sweep is worth offering ("lr_step1 (of cafe)" was)
        return did_you_mean(name, own, [k for k in likeliest(name, own) if k in own])
    if name == "seed" and eq:  # parse_axis's reason names the command line's --seeds
        raise ParamError("seed", "cannot be swept: every point already runs the sidebar's Seeds per point")
    if name and eq and spec["defense"] == "none" and name not in knobs:  # a protocol knob that defends
        raise ParamError("vary", f"without a defense, vary a protocol knob that defends: "
                                 f"{', '.join(knobs) or 'this protocol has none'}; got {name}"
                                 f"{'' if name in takes else meant(list(knobs))}")
    if name and eq and name not in takes:
        own = [p.name for p in _sweepable(spec["defense"], spec["preset"])]
        raise ParamError(name, f"is not a parameter of this scenario{meant(own)}; the defense's: {', '.join(own)}")


def presenter_code(spec: dict, by_epsilon: bool = False) -> str:
    """This page's sweep as a presenter scene: a built-in one by name (`sweep:sweep-dp-dlg`); a custom one carried
    whole in the code (`sweep:custom:…`, its settings as URL-safe base64 JSON: a talk's bookmark holds it, and no
    comma of its range splits the link's list of scenes); `@epsilon` after either: its chart against the formal ε."""
    from .presenter import EPSILON
    tail = EPSILON if by_epsilon else ""
    if spec["sweep"] != CUSTOM:
        return f"sweep:{spec['sweep']}{tail}"
    blob = json.dumps({k: str(v) for k, v in spec.items() if k != "sweep"}, sort_keys=True, separators=(",", ":"))
    return f"sweep:{CUSTOM}:" + base64.urlsafe_b64encode(blob.encode()).decode().rstrip("=") + tail


def custom_sweep(tail: str):
    """The SweepSpec of a custom sweep's scene code (what follows `sweep:custom:`), checked as this page checks
    its sidebar; LeakdemoError says what is wrong."""
    from ..sweeps import SweepSpec
    try:
        spec = json.loads(base64.urlsafe_b64decode(tail + "=" * (-len(tail) % 4)))
        if not isinstance(spec, dict) or not {"preset", "defense", "vary", "seeds"} <= set(spec):
            raise ValueError
        spec = {"sweep": CUSTOM, **{k: str(v) for k, v in spec.items()}, "seeds": int(spec["seeds"])}
    except (ValueError, TypeError):  # binascii.Error is a ValueError
        raise LeakdemoError("not a custom sweep's code (copy the link from the Trade-offs page again)") from None
    if spec["preset"] not in presets():
        raise LeakdemoError(f"preset={spec['preset']!r} (unknown)")
    _, title, _ = build(spec)
    extra = {k: v for k, v in spec.items() if k not in SPEC_KEYS}
    return SweepSpec(CUSTOM, title, "", spec["preset"], {**extra, "defense": spec["defense"]}, vary_ranges(spec["vary"]),
                     spec["seeds"])


def _store():
    try:
        return open_store()
    except LeakdemoError as e:
        st.session_state["t_store_problem"] = str(e)
        return None


# ---------------------------------------------------------------- charts


LINE_STYLES = "solid: the attack · dashed: the federation"  # the strength chart's key to its lines
RECOGNISABLE = "20 dB: recognisable"  # the 20 dB line's label where it fits


def strength_figure(rows: list[dict], axes: list[str], log: bool, plot_px: int | None = None,
                    char_px: int | None = None, base: dict | None = None, planned: tuple = (),
                    by_epsilon: bool = False) -> go.Figure:
    """Leakage (left axis) and utility (right axis) against the swept strength: where the knee is. plot_px and
    char_px: the plot's width and a label character's, where the chart is drawn (a half-width chart on a
    laptop unless told; the presenter's spans a projector). base: the sweep's scenario, which names the axes
    in words ('noise σ (dp_sigma)', 'clip norm off'). planned: the swept values, which frame the axis while only
    the undefended point is in (plotly's empty log axis ran from 1 to 1M). by_epsilon: against the points'
    formal ε instead (those that have one: DP's usual chart), on a log axis."""
    # each series keeps its colour when some have no place (against ε, 'clip norm = 4' stays purple)
    names = [name for name, _ in named_series(rows, axes, base)]
    if by_epsilon:  # each point placed at its ε: the lines, labels and ticks below need nothing else
        rows = [r if r["undefended"] else {**r, axes[0]: r["epsilon"]} for r in rows
                if r["undefended"] or has_epsilon(r)]
        log, planned = True, ()
    key = privacy_key(rows)
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    clean = next((r for r in rows if r["undefended"]), None)
    for name, rs in named_series(rows, axes, base):
        color = COLORS[names.index(name) % len(COLORS)]
        xs = [r.get(axes[0]) for r in rs]
        # several series: one legend entry each, by colour (the subtitle tells solid from dashed); four entries
        # of "leakage dp_clip=0.0"… ran over each other on a 1024-px laptop
        # cliponaxis off: a point on the axis's edge (a utility of 1.0 at the top of its 0.95–1 range, an attack
        # accuracy of 0) is drawn whole, not cut in half
        fig.add_trace(go.Scatter(x=xs, y=[r.get(key) for r in rs], mode="lines+markers", name=name or "leakage",
                                 legendgroup=name, line=dict(color=color, width=3), marker=dict(size=9),
                                 cliponaxis=False), secondary_y=False)
        util = [utility_of(r)[1] for r in rs]
        if any(u is not None for u in util):
            fig.add_trace(go.Scatter(x=xs, y=util, mode="lines+markers", name=name or "utility", legendgroup=name,
                                     showlegend=not name, line=dict(color=color, dash="dash"),
                                     marker=dict(symbol="square"), cliponaxis=False), secondary_y=True)
    uname = next((utility_of(r)[0] for r in rows if utility_of(r)[1] is not None), "test_accuracy")
    lo, hi = _leakage_span(rows, key)
    # while a sweep runs, every value it will draw frames the axis from the start: the points stay put as
    # the others arrive (one point at local steps = 1 stood alone in the middle, the axis reading "1")
    drawn = _numbers([r.get(axes[0]) for r in rows if not r.get("undefended")], log)
    swept = _numbers(list(planned) + drawn, log)
    frame = _frame(swept, log) if planned else None
    # the dashed utility lines, at the height the right-hand axis draws them, cross the labels too
    curves = [(2, c) for c in _curves(rows, axes, lambda r: r.get(key), log, frame)] + \
        [(1, c) for c in _curves(rows, axes, _on_leakage_axis(rows, uname, lo, hi), log, frame)]
    label_h = LABEL_PX / PLOT_HEIGHT_PX * (hi - lo)
    char = (char_px or CHAR_PX) / (plot_px or LAPTOP_PLOT_PX)  # a label character's share of the plot's width
    lines = [(clean.get(key) if clean else None, "no defense", dict(color="#c0392b", dash="dot"), "top")]
    subtitle = LINE_STYLES
    if key == "psnr":
        # the whole label where it covers under half the narrowest plot it is drawn in (a projector's); on the
        # page's narrowest side-by-side chart it covered over half, across the curves: there the line says
        # "20 dB" and the subtitle says what it means
        text = RECOGNISABLE
        if (char_px or CHAR_PX) * len(text) > 0.45 * (plot_px or NARROW_PLOT_PX):
            text, subtitle = "20 dB", f"{LINE_STYLES}<br>above 20 dB: recognisable"
        lines.append((20, text, dict(color="#e67e22", dash="dash"), "bottom"))
    for y, text, line, prefer in lines:
        if y is not None:
            fig.add_hline(y=y, line=line, annotation_text=text, annotation_bgcolor=VEIL,
                          annotation_position=label_place(curves, y, text, label_h, char, prefer))
    ticks = _strength_ticks(swept, log)
    if frame:
        ticks["range"] = list(frame)
    fig.update_xaxes(title_text=epsilon_title(base) if by_epsilon else axis_title(axes[0], base),
                     type="log" if log else None, **ticks)
    fig.update_yaxes(title_text="attack accuracy" if key == "attack_accuracy" else "PSNR, dB (median)",
                     secondary_y=False, range=[lo, hi])
    fig.update_yaxes(title_text=UTILITY_TITLES[uname], secondary_y=True, range=utility_range(rows, uname),
                     tickmode="auto", showgrid=False)  # its own round ticks, not the leakage grid's
    # short enough for a half-width chart on a 1024-px laptop ("… against the defense's strength" ran past it)
    by = "formal ε" if by_epsilon else knob_name(axes[0], base) or "strength"
    fig.update_layout(title=dict(text=f"Leakage and utility by {by}",
                                 subtitle=dict(text=subtitle)),
                      height=420, margin=dict(l=10, r=10, t=70 + 14 * subtitle.count("<br>"), b=10),
                      legend=dict(orientation="h", y=-0.25))
    return fig


def _leakage_span(rows: list[dict], key: str) -> tuple[float, float]:
    """The left axis's range, set rather than plotly's autorange so the labels can be placed against it (and
    the dashed utility lines mapped onto it): attack accuracy's fixed one; PSNR from 0 to a tenth above the
    highest value or line."""
    if key == "attack_accuracy":
        return tuple(SHARE_RANGE)
    seen = [r[key] for r in rows if isinstance(r.get(key), (int, float))] + [20]
    lo = min(0.0, min(seen))
    return lo, max(seen) + 0.1 * (max(seen) - lo)  # room above the highest point for the label of its line


def _frame(values: list[float], log: bool) -> tuple[float, float] | None:
    """The strength axis's range around `values` (sorted), in its own units (decades on a log axis), with a
    margin of 5 % each side (half a unit for a single value)."""
    if not values:
        return None
    lo, hi = (math.log10(values[0]), math.log10(values[-1])) if log else (values[0], values[-1])
    pad = 0.05 * (hi - lo) or 0.5
    return lo - pad, hi + pad


def _curves(rows: list[dict], axes: list[str], value, log: bool,
            frame: tuple[float, float] | None = None) -> list[list[tuple[float, float]]]:
    """Each series' points as (share of the x axis's width, height on the leakage axis), in the order drawn:
    where a line's label may collide with it. frame: the axis's range where it is set, else the points span it."""
    def drawn(x) -> bool:  # a strength the axis can place
        return isinstance(x, (int, float)) and not isinstance(x, bool) and (x > 0 or not log)

    def at(x) -> float:
        return math.log10(x) if log else x
    xs = [at(r[axes[0]]) for r in rows if not r.get("undefended") and drawn(r.get(axes[0]))]
    if not xs:
        return []
    lo, hi = frame or (min(xs), max(xs))
    out = [[((at(r[axes[0]]) - lo) / (hi - lo) if hi > lo else 0.5, value(r)) for r in rs
            if drawn(r.get(axes[0])) and value(r) is not None] for _, rs in named_series(rows, axes)]
    return [c for c in out if c]


def _on_leakage_axis(rows: list[dict], uname: str, lo: float, hi: float):
    """A row's utility at the height the right-hand axis draws it, in the left axis's units (lo … hi)."""
    util = [u for u in (utility_of(r)[1] for r in rows) if u is not None]
    if not util:
        return lambda r: None
    ulo, uhi = utility_range(rows, uname) or (min(util), max(util))

    def height(r):
        u = utility_of(r)[1]
        return None if u is None or uhi <= ulo else lo + (u - ulo) / (uhi - ulo) * (hi - lo)
    return height


# the leakage chart's plot, in px, at its narrowest: side by side in the narrowest main area that does not stack
# them (700 px: a 1165-px window, the sidebar open; a phone's stacked chart is 226), and on a 1280-px laptop;
# the plot's height (a label's character and height: axes.CHAR_PX, LABEL_PX)
NARROW_PLOT_PX, LAPTOP_PLOT_PX, PLOT_HEIGHT_PX = 210, 250, 260


def _numbers(values, log: bool) -> list:
    """The values a strength axis can place, sorted (no flags, nothing ≤ 0 on a log axis)."""
    return sorted({v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool) and (v > 0 or not log)})


def _strength_ticks(values: list[float], log: bool) -> dict:
    """A few swept values label their own axis: on a log axis over less than two decades plotly's ticks are
    bare leading digits ("3 4 5 … 1 2 … 10" for 0.3 … 10), on a linear one they skip values (top-k's 1, 2, 5,
    10 read "5 10"), both hard to match with the points from the back of a room. A wider log axis writes its
    decades as powers of ten; values too crowded to label each keep plotly's ticks."""
    if not values:  # the swept values, as _numbers gives them
        return {}
    if log and values[-1] >= 100 * values[0]:
        return {"exponentformat": "power", "dtick": 1}  # 10⁻⁴, not plotly's SI "100μ"; no "2 5" between them
    texts = [value_text(float(v)) for v in values]
    if not log and not _labels_fit(values, texts):
        return {}
    return {"tickmode": "array", "tickvals": values, "ticktext": texts}


def _labels_fit(values: list[float], texts: list[str]) -> bool:
    """Whether every value's label fits beside its neighbours on the narrowest chart, unrotated (top-k's 1, 2,
    5, 10 do; pruning's 0.1, 0.2, 0.3 … 0.99 stood on end, and plotly's 0.2, 0.4 … read better)."""
    span = values[-1] - values[0]
    return span > 0 and all((b - a) / span * NARROW_PLOT_PX >= CHAR_PX * (len(p) + len(q)) / 2 + 4
                            for a, b, p, q in zip(values, values[1:], texts, texts[1:]))


def tradeoff_figure(rows: list[dict], axes: list[str], base: dict | None = None) -> go.Figure:
    """Privacy against utility: error bars over the runs, the Pareto front, the undefended point a star."""
    key = privacy_key(rows)
    usable = [r for r in rows if r.get(key) is not None and utility_of(r)[1] is not None]
    fig = go.Figure()
    front = set(pareto(usable, key))
    clean = next((r for r in usable if r["undefended"]), None)
    # the star first, under the defended points: one that leaks and costs as much as no defense (sweep-topk-pli's
    # k = 10 at (1.0, 0.8)) sits on it, and drawn after, the star hid it; under it, the star still shows round it
    if clean is not None:
        fig.add_trace(go.Scatter(x=[utility_of(clean)[1]], y=[clean[key]], mode="markers", name="no defense",
                                 marker=dict(symbol="star", size=22, color="#c0392b"), customdata=[clean["index"]],
                                 hovertemplate=[_hover(clean, key, clean["label"])]))
    for i, (name, rs) in enumerate(named_series(usable, axes, base)):
        color = COLORS[i % len(COLORS)]
        rs = [r for r in rs if r in usable]
        if not rs:
            continue
        fig.add_trace(go.Scatter(
            x=[utility_of(r)[1] for r in rs], y=[r[key] for r in rs], mode="markers", name=name or "defended",
            marker=dict(size=[16 if r["index"] in front else 11 for r in rs], color=color,
                        line=dict(width=[3 if r["index"] in front else 0 for r in rs], color="black")),
            error_y=_error(rs, key), customdata=[r["index"] for r in rs],
            hovertemplate=[_hover(r, key, point_words(r, axes, base)) for r in rs]))
    if len(front) > 1:
        pts = sorted((utility_of(r)[1], r[key]) for r in usable if r["index"] in front)
        fig.add_trace(go.Scatter(x=[p[0] for p in pts], y=[p[1] for p in pts], mode="lines", name="Pareto front",
                                 line=dict(color="black", width=1, dash="dot"), hoverinfo="skip"))
    if key == "attack_accuracy":  # ticks up to 1 only: the room above is for the pictures
        fig.update_yaxes(range=SHARE_RANGE, tickmode="array", tickvals=[0, 0.2, 0.4, 0.6, 0.8, 1])
    uname = utility_of(usable[0])[0] if usable else "test_accuracy"
    fig.update_xaxes(range=utility_range(usable, uname))  # as the strength chart's; the pictures widen it
    _thumbnails(fig, usable, [r for r in usable if r["index"] in front or r["undefended"]], key)
    better = "lower-left" if uname == "training_loss" else "lower-right"
    # the hint as a subtitle: in one line the title ran past a half-width chart on a 1280-px screen
    fig.update_layout(title=dict(text="Privacy against utility",
                                 subtitle=dict(text=f"{better} is better · click a point to see its run")),
                      height=420,
                      # in two lines: in one, "(held-out digits)" ran past a 1024-px laptop's half-width chart
                      xaxis_title=UTILITY_TITLES[uname].replace(" (", "<br>("),
                      yaxis_title="attack accuracy" if key == "attack_accuracy" else "PSNR, dB (median)",
                      # r=30: at 1024 px the last utility tick ("0.98") was dropped at the edge
                      margin=dict(l=10, r=30, t=70, b=10), legend=dict(orientation="h", y=-0.32))  # below 2 lines
    return fig


def _thumbnails(fig: go.Figure, rows: list[dict], shown: list[dict], key: str) -> None:
    """What the attack rebuilt, drawn on the chart by each point of the Pareto front and the undefended
    point: the best trade-offs and what each still gives away, readable at a glance. Each picture goes above
    its point, else to its left, right or below, wherever it covers no other point and no picture already
    drawn (the undefended point's first, then the front's from the least leakage up); where it would cover
    one wherever it went, it is left out — as is one whose point lies within a picture's size of a point that
    has a picture (sweep-topk-pli's five points within 0.15 of each other at accuracy 1.0 had four pictures
    round them, none telling whose it was). sweep-dp-dlg's best point sits under two weaker ones, and its
    picture hid them; points crowd where a defense costs nothing, and a pile of thumbnails reads as none.
    (Plotly's hover labels hold text only; a click on any point shows its reconstructions below the chart.)"""
    shown = [r for r in shown if r.get("thumbnail") is not None]
    if not shown:
        return
    xs = [utility_of(r)[1] for r in rows]
    ys = [v for r in rows for v in ([r[key]] + list(r.get("psnr_range") or [] if key == "psnr" else []))]
    ys += [0.0, 1.0] if key == "attack_accuracy" else []  # a share: its whole scale (see SHARE_RANGE)
    lo_x, hi_x = min(xs), max(xs)
    if utility_of(rows[0])[0] == "training_loss":  # a tenth of the loss at least, as on the strength chart
        lo_x, hi_x = utility_range(rows, "training_loss")
    narrow = utility_of(rows[0])[0] != "training_loss" and hi_x - lo_x < 0.05
    if narrow:
        # an accuracy that no defense moves (PLI's client keeps 1.0; averaging a batch costs 0.95 nothing) sits
        # in the middle of a 0.05 span: at 1.0 too, the room past it for pictures, as the share's scale above 1
        # on the leakage axis (its ticks stop at 1). Flush against the right edge, sweep-topk-pli's five points
        # at 1.0 had their pictures piled on one side of them.
        lo_x, hi_x = (lo_x + hi_x) / 2 - 0.025, (lo_x + hi_x) / 2 + 0.025
    span_x, span_y = max(hi_x - lo_x, 0.05), max(max(ys) - min(ys), 1e-3)
    x_range = [lo_x - 0.08 * span_x, hi_x + 0.08 * span_x]
    if narrow and x_range[1] > 1.005:  # no "1.02" on a share: its hundredths up to 1
        ticks = [k / 100 for k in range(math.ceil(x_range[0] * 100 - 1e-6), 101)]
        fig.update_xaxes(tickmode="array", tickvals=ticks, ticktext=[f"{t:g}" for t in ticks])
    y_range = [min(ys) - 0.08 * span_y, max(ys) + 0.28 * span_y]
    chart = _Chart(x_range, y_range, 0.09 * span_x, 0.16 * span_y, 0.04 * span_y)
    ringed = {r["index"] for r in shown}
    chart.points = [chart.marker(utility_of(r)[1], r[key], _marker_px(r, ringed)) for r in rows]
    pictured: list[tuple[float, float]] = []
    for r in sorted(shown, key=lambda r: (not r["undefended"], r[key])):
        x, y = utility_of(r)[1], r[key]
        if any(abs(x - px) < chart.w and abs(y - py) < chart.h for px, py in pictured):
            continue  # within a picture's size of a point that has one, its picture would read as either's
        spot = chart.place(x, y, _marker_px(r, ringed))
        if spot is None:
            continue
        pictured.append((x, y))
        url, _ = png_once(("chart", r["index"], r["runs"]), lambda r=r: _small(r["thumbnail"][0]),
                          memo_name="chart_thumbs", limit=80)
        fig.add_layout_image(source=url, xref="x", yref="y", sizex=chart.w, sizey=chart.h, sizing="contain",
                             layer="above", **spot)
    fig.update_xaxes(range=x_range)
    fig.update_yaxes(range=y_range)


PARETO_PLOT_PX = (340, 216)  # the Pareto chart's plot area on a laptop (301 × 216 px at 1280, 381 at 1440), w × h:
# turns a marker's size in pixels into data units


def _marker_px(r: dict, ringed: set) -> float:
    """A point's marker radius in pixels: the star 22 px across, the front's 16 with a 3-px ring, others 11."""
    return 11.0 if r["undefended"] else 9.5 if r["index"] in ringed else 5.5


class _Chart:
    """Where pictures of w × h (data units) fit on a chart of these ranges: boxes (x0, x1, y0, y1) taken by
    markers and pictures, and the spots a point's picture may take."""

    def __init__(self, x_range, y_range, w: float, h: float, gap: float):
        self.x_range, self.y_range, self.w, self.h, self.gap = x_range, y_range, w, h, gap
        self.points: list[tuple] = []
        self.pictures: list[tuple] = []

    def marker(self, x: float, y: float, px: float) -> tuple:
        rx = px / PARETO_PLOT_PX[0] * (self.x_range[1] - self.x_range[0])
        ry = px / PARETO_PLOT_PX[1] * (self.y_range[1] - self.y_range[0])
        return (x - rx, x + rx, y - ry, y + ry)

    def place(self, x: float, y: float, px: float) -> dict | None:
        """The layout-image placement of the first free spot by the point at (x, y), taking it; else None."""
        own = self.marker(x, y, px)
        gx, gy = own[1] - x, max(own[3] - y, self.gap)
        w, h = self.w, self.h
        spots = [((x - w / 2, x + w / 2, y + gy, y + gy + h), dict(x=x, y=y + gy, xanchor="center", yanchor="bottom")),
                 ((x - gx - w, x - gx, y - h / 2, y + h / 2), dict(x=x - gx, y=y, xanchor="right", yanchor="middle")),
                 ((x + gx, x + gx + w, y - h / 2, y + h / 2), dict(x=x + gx, y=y, xanchor="left", yanchor="middle")),
                 ((x - w / 2, x + w / 2, y - gy - h, y - gy), dict(x=x, y=y - gy, xanchor="center", yanchor="top"))]
        # markers under the point's own (ties drawn at one spot) are covered by it already
        others = [m for m in self.points if not (own[0] <= (m[0] + m[1]) / 2 <= own[1]
                                                 and own[2] <= (m[2] + m[3]) / 2 <= own[3])]
        ex, ey = 1e-6 * (self.x_range[1] - self.x_range[0]), 1e-6 * (self.y_range[1] - self.y_range[0])
        for box, placement in spots:
            inside = (self.x_range[0] - ex <= box[0] and box[1] <= self.x_range[1] + ex
                      and self.y_range[0] - ey <= box[2] and box[3] <= self.y_range[1] + ey)
            if inside and not any(_overlap(box, b) for b in others + self.pictures):
                self.pictures.append(box)
                return placement
        return None


def _overlap(a: tuple, b: tuple) -> bool:
    return a[0] < b[1] and b[0] < a[1] and a[2] < b[3] and b[2] < a[3]


def _error(rs, key):
    if key != "psnr" or not all(r.get("psnr_range") for r in rs):
        return None
    return dict(type="data", symmetric=False, array=[r["psnr_range"][1] - r["psnr"] for r in rs],
                arrayminus=[r["psnr"] - r["psnr_range"][0] for r in rs], thickness=1)


def _hover(r: dict, key: str, name: str) -> str:
    leak = f"attack accuracy {r[key]:.0%}" if key == "attack_accuracy" else \
        f"PSNR {r['psnr']:.1f} dB ({r['psnr_range'][0]:.1f}–{r['psnr_range'][1]:.1f})"
    utility, u = utility_of(r)  # in the axis's words ("federation's accuracy 96.4%", as the table gives it)
    figure = f"{u:.3f}" if utility == "training_loss" else f"{u:.1%}"
    return (f"<b>{name}</b><br>{leak}<br>{UTILITY_TITLES[utility].split(' (')[0]} {figure}<br>{r['privacy']}"
            f"<br>{plural(r['runs'], 'run')}<extra></extra>")


PICKED_CELL = 112  # on-screen pixels of a picked point's pictures (a whole multiple of the image's size)


def _small(img: np.ndarray) -> np.ndarray:
    """An image at twice its size as uint8 RGB (sent inline; the browser enlarges it crisply)."""
    img = np.clip(np.asarray(img, dtype=np.float32), 0, 1)
    img = np.repeat(img, 3, axis=-1) if img.shape[-1] == 1 else img
    return (upscale(img, 2 * img.shape[0]) * 255).round().astype(np.uint8)


def _small_url(kind: str, caption: str, img: np.ndarray) -> str:
    """`_small(img)` as an inline PNG, encoded once: the sweep panel refreshes while a sweep runs, and a media
    file could be replaced by the next refresh before the browser fetched it."""
    return png_once((kind, caption, img.shape, float(np.asarray(img).sum())), lambda: _small(img),
                    memo_name="strip_memo", limit=80)[0]


# ---------------------------------------------------------------- the page


def _start(spec: dict) -> None:
    old = st.session_state.get("t_job")
    if old is not None and not old.done:
        old.stop()
    try:
        sweep, title, _ = build(spec)
    except LeakdemoError as e:
        st.session_state["t_error"] = str(e)
        return
    sweep.runner = pool_runner(run_pool(), tab_alive(), in_flight=run_pool().max_running)
    sweep.workers = run_pool().max_running  # the pool's runs at a time size its batches (Sweep.batch_size)
    _show(SweepJob(sweep, on_finished=_offer_to_the_presenter(spec, title, sweep.store)), title, spec)


def _offer_to_the_presenter(spec: dict, title: str, store):
    """A custom sweep that finishes whole joins the presenter's chooser ("Custom trade-off chart: …"), kept in the
    run store beside its runs: a talk is put together there from one's own charts (each came as a link of its own,
    Present this chart, to be merged by hand). None for a built-in sweep, which the chooser lists anyway."""
    if spec["sweep"] != CUSTOM or store is None:
        return None
    from .presenter import YOUR_SWEEPS
    # two sweeps of one preset and defense share a title: the chooser tells them apart by their settings
    settings = [spec["vary"], ", ".join(f"{k}={v}" for k, v in spec.items() if k not in SPEC_KEYS),
                plural(int(spec["seeds"]), "seed") if int(spec["seeds"]) > 1 else ""]
    label = " · ".join([title, *filter(None, settings)])

    def keep(rows: list[dict]) -> None:  # on the sweep's thread: the store, never the page
        if any(r.get("failed") for r in rows):  # the scene draws a sweep whose every run is in the store
            return
        try:
            store.keep(YOUR_SWEEPS, presenter_code(spec), {"label": label, "epsilon": any(map(has_epsilon, rows))})
        except (LeakdemoError, sqlite3.Error) as e:
            print(f"warning: the sweep was not offered to the presenter ({e})", file=sys.stderr)
    return keep


def _show(job: SweepJob, title: str, spec: dict) -> SweepJob:
    job.spec = spec  # what the sidebar described when it started: the panel says when that has changed since
    st.session_state["t_job"] = job
    st.session_state["t_title"] = title
    st.session_state["t_axes"] = ([a.name for a in job.sweep.axes], job.sweep.axes[0].log)
    job.thread.join(timeout=WAIT_FOR_STORE)  # a sweep the store holds whole is drawn at once, without polling
    return job


def _recorded(spec: dict, job: SweepJob | None) -> SweepJob | None:
    """The job the panel draws. A built-in sweep already recorded — by this machine's run store or by the
    gallery, which ships sweep-dp-dlg — is drawn as the page opens, before Run sweep: a fresh install shows
    its chart at once. A sweep the user started stays on the page until another is started, or until it is
    stopped before its first point: Run sweep, then Stop, brings back the recorded chart it had replaced."""
    name = spec["sweep"]
    unrecorded = st.session_state.setdefault("t_unrecorded", set())  # looked for once per session and sweep
    if job is not None and getattr(job, "recorded_for", None) in (None, name):
        stopped_empty = job.status == "stopped" and not job.snapshot()
        if not stopped_empty or name == CUSTOM or name in unrecorded:
            return job
    if name == CUSTOM or name in unrecorded:
        st.session_state.pop("t_job", None)
        return None
    from ..gallery import recorded_sweep
    s = sweeps()[name]
    try:
        base = load(s.base, s.set)
        sweep, from_gallery, _ = recorded_sweep(base, [parse_axis(v, base) for v in s.vary], s.seeds, _store())
    except LeakdemoError:
        sweep = None  # the page's own check of the spec says what is wrong
    if sweep is None:
        unrecorded.add(name)
        st.session_state.pop("t_job", None)
        return None
    job = SweepJob(sweep)
    job.recorded_for, job.from_gallery = name, from_gallery
    return _show(job, s.title, spec)


def _stop() -> None:
    job = st.session_state.get("t_job")
    if job is not None:
        job.stop()


def main() -> None:
    st.markdown(CSS, unsafe_allow_html=True)
    run_pool()  # whatever page opens first starts the workers: they compute, and tell the server the machine
    _init_from_query()
    arrived_by, followed = link_now(), _follow_history()
    st.title(":material/balance: Defense trade-offs")
    st.markdown("How much does a defense cost, and what does it buy? A sweep runs the attack at each strength "
                "of a defense — several seeds each — and sets what the attack recovered (privacy) against what "
                "the defense costs the federation's own learning on held-out data (utility), with the formal "
                "ε where the defense is a differential-privacy mechanism.")
    for item in st.session_state.pop("t_problems", []):
        st.warning(ignored_line(item), icon=":material/link_off:")
    spec = _controls()
    note_drawn(SIDEBAR_KEYS)  # for undo_stale_echoes
    st.session_state["t_spec_now"] = spec
    if not followed:
        keep_link({k: str(v) for k, v in spec.items()}, {"sweep": DEFAULT_SWEEP})
    mark_link("t", spec, arrived_by)
    problem, said = None, []
    try:
        sweep, title, _ = build(spec)
        # as the command line says them: a link's value no point reads (tv_dataset=SVHN on the photos), and what
        # `run` would warn of at the points (a cost, a model the attack fails on)
        said = [*filter(None, [sweep.refused()]), *sweep.unread([k for k in spec if k not in SPEC_KEYS]),
                *sweep.warnings()]
        n_points, runs = len(sweep.points), len(sweep.points) * len(sweep.seeds) * len(sweep.images)
        undefended = (f" (the undefended one included{'; ' + sweep.same_as_undefended('that same run') if sweep.as_undefended else ''})"
                      if any(pt.undefended for pt in sweep.points) else "")
        summary = (f"**{title}** — {plural(n_points, 'point')}{undefended} × {plural(len(sweep.seeds), 'seed')} "
                   f"= {plural(runs, 'run')}. " + ", ".join(f"`{a.name}` ∈ {{{', '.join(value_text(v) for v in a.values)}}}"
                                                 for a in sweep.axes))
    except LeakdemoError as e:
        problem, summary = str(e), None
    if st.session_state.get("t_store_problem"):
        st.warning(f"{st.session_state['t_store_problem']}. Sweeping without the store.")
    job = _recorded(spec, st.session_state.get("t_job")) if problem is None else st.session_state.get("t_job")
    # "Run sweep" whole on a 1024-px laptop (it read "Ru…"); narrower, the sweep's line goes under the buttons
    c1, c2, c3 = st.container(key="t_run").columns([1.5, 1.1, 3.4])
    c1.button("Run sweep", type="primary", disabled=problem is not None, on_click=_start, args=(spec,),
              icon=":material/play_arrow:", width="stretch")
    c2.button("Stop", disabled=job is None or job.done, on_click=_stop, icon=":material/stop:", width="stretch")
    if problem:
        c3.error(problem)
    elif summary:
        c3.markdown(summary)
    for w in said:  # a sentence on the page: "At batch_size=4: …" (the command line's reads "warning: at …")
        st.warning("A" + w[1:] if w.startswith("at ") else w, icon=":material/warning:")
    if st.session_state.get("t_error"):
        st.error(st.session_state.pop("t_error"))
    pace = None if job is None or job.done else POLL_SECONDS
    st.fragment(run_every=pace)(sweep_panel)(pace, refused=problem is not None)


def sweep_panel(pace, refused: bool = False) -> None:
    """Progress, charts, the strip, the table and downloads; one fragment, refreshed while the sweep runs.
    refused: the sidebar's sweep cannot run (its message stands beside the greyed button, and says what to do)."""
    undo_stale_echoes()  # a tick's old sidebar values (a range the defense just replaced), set aside
    job: SweepJob | None = st.session_state.get("t_job")
    if job is None:
        if not refused:  # "Press Run sweep" under a greyed Run sweep, as the Lab no longer says it
            st.info("Press **Run sweep**. Points appear as they finish" + (
                "; runs already in the run store come back at once." if default_path() is not None else "."))
        return
    rows = job.snapshot()
    if getattr(job, "spec", None) != st.session_state.get("t_spec_now"):
        st.caption(f"Showing the sweep last run, **{st.session_state.get('t_title')}** — the sidebar now describes "
                   "another: press **Run sweep** to run that one.")
    total = max(job.total_runs, 1)
    since = job.since_latest()
    left = None if job.eta is None or job.done else max(0.0, job.eta - since)
    eta = "" if left is None or left < 1 else f", about {time_left(left)} left"  # spent: the clock runs on
    took = f"in {clock(job.seconds, 0)}" if job.done else f"{clock(job.seconds + since, 0)} so far"
    status = {"starting": "Starting…", "running": "Running", "finished": "Finished", "stopped": "Stopped",
              "failed": "Failed"}[job.status]
    if getattr(job, "recorded_for", None) and job.done:
        st.progress(1.0, text=f"Recorded: {plural(job.done_runs, 'run')}, {plural(len(rows), 'point')}, "
                              + ("from the gallery" if job.from_gallery else "from this machine's run store"))
    else:
        st.progress(min(1.0, job.done_runs / total),
                    text=f"{status}: {job.done_runs}/{job.total_runs} runs ({job.cached} from the run store), "
                         f"{plural(len(rows), 'point')} done {took}{eta}"
                         + (f" · first point after {job.first_point_s:.0f} s" if job.first_point_s is not None else "")
                         + (f" · up to {job.batch} runs attacked as one program" if job.batch > 1 else ""))
    if getattr(job, "from_gallery", False):
        st.info("Recorded with the gallery that ships with leakdemo (on another machine, possibly an earlier code "
                "version). Press **Run sweep** to compute it on this machine: a few minutes on a laptop.",
                icon=":material/history:")
    if job.error:
        st.error(job.error)
    failures = failure_lines(rows, st.session_state.get("t_axes", ([], False))[0], job.sweep.base.params)
    if failures:
        st.warning(failures, icon=":material/warning:")
    if rows:
        axes, log = st.session_state.get("t_axes", ([], False))
        by_epsilon = _against_epsilon(rows, axes, job.sweep.base.params)
        # figures are rebuilt only when a point changes: the panel polls every second, and on a 2-core
        # machine the server's CPU is the sweep's CPU
        version = (id(job), tuple((r["index"], r["runs"]) for r in rows), job.status, by_epsilon)
        memo = st.session_state.get("t_fig_memo")
        if memo is None or memo[0] != version:
            base = job.sweep.base.params
            memo = (version, strength_figure(rows, axes, log, base=base, planned=job.sweep.axes[0].values,
                                             by_epsilon=by_epsilon),
                    tradeoff_figure(rows, axes, base))
            side_by_side(memo[1], memo[2])
            st.session_state["t_fig_memo"] = memo
        # side by side; one above the other where the main area is under 700 px (CSS): on a 1024-px laptop
        # with the sidebar open each had 270 px, the Pareto chart's plot 170 px wide
        left, right = st.container(key="t_charts").columns(2)
        left.plotly_chart(memo[1], key="t_strength", config={"displayModeBar": False})
        if axes and _one_utility(job):
            left.caption(one_figure_line(axes[0], job.sweep.base.params))
        flat = flat_utility(rows)
        if flat:  # cafe-faces: the loss cannot rise where the undefended training learns nothing
            left.caption(flat)
        counted = axes and equations_line(axes[0], job.sweep.axes[0].values, job.sweep.base.params)
        if counted:
            left.caption(counted)
        picked = right.plotly_chart(memo[2], key="t_tradeoff", on_select="rerun",
                                    selection_mode="points", config={"displayModeBar": False})
        _picked_point(rows, picked, job)
        _present_link(job, by_epsilon)
        _strip(rows, axes, job.sweep.base.params)
        _table(rows, axes, job)
    if (None if job.done else POLL_SECONDS) != pace:
        st.rerun()


def _against_epsilon(rows: list[dict], axes: list[str], base: dict) -> bool:
    """Whether the leakage chart is drawn against the formal ε: offered once a point has one (noise on a clipped
    payload), as the command line's --x-axis epsilon draws it — DP's usual chart, which the page lacked."""
    placed = sum(1 for r in rows if not r["undefended"] and has_epsilon(r))
    if not placed or not axes:
        return False
    strength = knob_name(axes[0], base) or catalog.param_label(base, axes[0])  # "noise σ"
    pick = st.segmented_control("Leakage and utility against", ["strength", "epsilon"], key="t_x", required=True,
                                default="strength", persist_state=KEEP,
                                format_func=lambda x: strength if x == "strength" else "formal ε",
                                help="The formal ε of each point's (ε, δ) guarantee, from Opacus's accountant: "
                                     "only noise on a clipped payload has one.")
    if pick != "epsilon":
        return False
    defended = sum(1 for r in rows if not r["undefended"])
    if placed < defended:
        st.caption(f"{placed} of {plural(defended, 'defended point')} have a formal ε, and are placed at it; the "
                   "others (noise without clipping) have none. The undefended run is the dotted line.")
    return True


def _present_link(job: SweepJob, by_epsilon: bool) -> None:
    """The finished sweep's chart as a presenter scene, in a tab of its own, as drawn here (against the strength
    or the formal ε): a custom sweep too, which the presenter could not show before (its chooser lists the
    built-in ones)."""
    spec = getattr(job, "spec", None)
    if job.status != "finished" or spec is None:
        return
    st.link_button("Present this chart", f"./?present=1&scenes={presenter_code(spec, by_epsilon)}",
                   icon=":material/present_to_all:",
                   help="Opens the chart full screen for a projector, in a new tab (presenter mode); the link "
                        "holds this sweep, so a talk's bookmark keeps it. Drawn from the run store: the runs "
                        "of this sweep stay there.")


def _one_utility(job: SweepJob) -> bool:
    """`Sweep.utility_is_one_figure`, once per job (the panel polls every second)."""
    if not hasattr(job, "one_utility"):
        job.one_utility = job.sweep.utility_is_one_figure()
    return job.one_utility


def failure_lines(rows: list[dict], axes: list[str] = (), base: dict | None = None,
                  most: int = 5) -> str | None:
    """Why points failed, a line each (markdown): a point with no picture and no dot must still say why."""
    failed = [r for r in rows if r.get("failed")]
    if not failed:
        return None
    lines = [f"**{point_words(r, axes, base)}**: {r['failed']} of {plural(r['failed'] + r['runs'], 'run')} failed — "
             f"{(r.get('errors') or ['no message'])[0]}" for r in failed[:most]]
    if len(failed) > most:
        lines.append(f"…and {len(failed) - most} more: see the table")
    return "  \n".join(lines)


def _picked_point(rows: list[dict], picked, job: SweepJob) -> None:
    points = (picked or {}).get("selection", {}).get("points", []) if isinstance(picked, dict) else \
        getattr(getattr(picked, "selection", None), "points", []) or []
    if not points:
        return
    index = points[0].get("customdata")
    index = index[0] if isinstance(index, list) else index
    row = next((r for r in rows if r["index"] == index), None)
    if row is None or row.get("thumbnail") is None:
        return
    axes, _ = st.session_state.get("t_axes", ([], False))
    st.subheader(f"{point_words(row, axes, job.sweep.base.params)}: what the attack rebuilt (first run)")
    # each original beside its reconstruction, on a phone too; the row as wide as its pictures (one image's pair,
    # in two halves of the page, stood half a page apart)
    n = 2 * len(row["thumbnail"])
    cols = st.container(key="strip_picked").columns(n, wrap=False, width=n * (PICKED_CELL + 16))
    for i, pair in enumerate(zip(row["originals"], row["thumbnail"])):
        for col, caption, img in zip(cols[2 * i:2 * i + 2], ("original", "reconstruction"), pair):
            url = _small_url("picked", caption, img)
            col.image(url, caption=caption, width=PICKED_CELL // img.shape[0] * img.shape[0])
    try:
        query = to_query(job.sweep.scenario(index))
    except (LeakdemoError, IndexError):  # a point refused before running has no run to watch
        return
    st.link_button("Watch this run live in the Attack Lab", "./?" + urlencode(query),
                   icon=":material/science:", help="Opens the Lab (in a new tab) on this point's first run — "
                   "the same scenario, seed and image — ready to run, so the class sees it rebuilt step by step. Where "
                   "the attack wins on some seeds only, the live run can land on the other side (README: runs "
                   "attacked together).")


def _strip(rows: list[dict], axes: list[str], base: dict | None = None) -> None:
    """The first image's reconstruction at every strength, in order (one row per value of a second axis):
    the picture people remember."""
    lines = strip_series(rows, axes, base)
    if not lines:
        return
    knob = knob_name(axes[0], base)
    st.subheader(f"The reconstruction against {knob}" if knob else "The reconstruction as the defense grows")
    st.caption(strip_caption(axes[0], base))
    for series_no, (name, items) in enumerate(lines):
        if name:
            st.caption(name)
        per_row = strip_row_length(len(items))
        for start in range(0, len(items), per_row):
            # a short strip keeps its pictures at an eighth of the width; a strip on a phone too (stacked, each
            # picture took the screen's width: twenty screens to scroll)
            cols = st.container(key=f"strip_{series_no}_{start}").columns(max(per_row, 8), wrap=False)
            for col, (caption, img) in zip(cols, items[start:start + per_row]):
                url = _small_url("strip", caption, img)
                col.image(url, caption=caption, width="stretch")


def strip_row_length(n: int) -> int:
    """Pictures per row for a strip of n: one row up to STRIP_PER_ROW, else even rows (11 as 6 + 5, not 10 + 1;
    a sweep of seven strengths, with the private image and the undefended point, fills one row of 9, where a
    row of 8 left the strongest alone on a second)."""
    rows = -(-n // STRIP_PER_ROW)
    return max(1, -(-n // max(rows, 1)))


def _share(label: str, help: str):
    return st.column_config.NumberColumn(label, format="percent", help=help)


# the table as people read it (sweep.csv keeps the names and full figures): medians over a point's runs
TABLE_COLUMNS = {
    "label": st.column_config.TextColumn("point"),
    "psnr": st.column_config.NumberColumn("PSNR dB", format="%.1f", help="median over the point's runs"),
    "ssim": st.column_config.NumberColumn("SSIM", format="%.3f", help="median over the point's runs"),
    # a number, so the grid sorts it as one; _table words it as the Lab and Compare do ("< 0.001", not "0.000")
    "lpips": st.column_config.NumberColumn("LPIPS", help="median over the point's runs (lower: closer)"),
    "recognisable": _share("recognisable", "share of the point's runs at 20 dB or more"),
    "attack_accuracy": _share("attack acc.", "median attack accuracy over the point's runs"),
    "test_accuracy": _share("federation acc.", "the federation's accuracy on held-out data, with this defense"),
    "clean_test_accuracy": _share("without defense", "the same federation's accuracy without the defense"),
    "training_loss": st.column_config.NumberColumn("training loss", format="%.3f"),
    "client_accuracy": _share("clients' acc.", "the clients' test accuracy, median over the point's runs"),
}


def _table(rows: list[dict], axes: list[str], job: SweepJob) -> None:
    with st.expander("Table and downloads", expanded=False):
        table, shared = shown_table(rows, axes, job.sweep.base.params)
        frame = pd.DataFrame(table)
        if "ssim" in frame:  # the grid wrote pure noise's SSIM of -0.0004 as "-0.000"
            frame["ssim"] = frame["ssim"].round(3) + 0.0
        if "lpips" in frame:  # "< 0.001" shown, the number kept: as text it sorted among the figures at random
            frame = frame.style.format({"lpips": small_figure}, na_rep="")
        st.dataframe(frame, hide_index=True, width="stretch", column_config=TABLE_COLUMNS)
        if shared:
            st.caption(shared)
        row = st.container(horizontal=True)  # buttons as wide as their names, wrapping: no "tradeoff.…" at 1024 px
        row.download_button("sweep.csv", sweep_csv(rows, axes), file_name="sweep.csv", mime="text/csv",
                            icon=":material/download:")
        row.download_button("sweep.json", json.dumps({"title": st.session_state.get("t_title"),
                                                      "rows": [plain(r) for r in rows]}, indent=2),
                            file_name="sweep.json", mime="application/json", icon=":material/download:")
        if job.done:
            row.download_button("tradeoff.png", _png(job, rows, axes), file_name="tradeoff.png", mime="image/png",
                                icon=":material/download:")
            strip = _strip_png(job, rows, axes)
            if strip is not None:
                row.download_button("strip.png", strip, file_name="strip.png", mime="image/png",
                                    icon=":material/download:")


def _strip_png(job: SweepJob, rows, axes) -> bytes | None:
    """The strip as a picture with its captions, as the CLI's --out writes it (drawn once per finished sweep)."""
    if not hasattr(job, "strip_png"):
        from ..tradeoff import strip_png
        job.strip_png = strip_png(rows, axes, st.session_state.get("t_title", "sweep"), job.sweep.base.params)
    return job.strip_png


def _png(job: SweepJob, rows, axes) -> bytes:
    """The chart as a picture, drawn once per finished sweep (matplotlib takes a second)."""
    if getattr(job, "png", None) is None:
        from ..tradeoff import tradeoff_png
        job.png = tradeoff_png(rows, st.session_state.get("t_title", "sweep"), axes,
                               st.session_state.get("t_axes", ([], False))[1], base=job.sweep.base.params,
                               one_figure=bool(axes) and _one_utility(job))  # as the CLI's --out draws it
    return job.png
