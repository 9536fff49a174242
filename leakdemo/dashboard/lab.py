"""The Attack Lab page: choose a scenario in the sidebar, read the threat model, run, watch it stream.

Layout and widgets only: the scenario logic is in state.py and the engine, runs live in pool.py.
"""
from __future__ import annotations

import mimetypes
import re
import threading
import time

import numpy as np
import plotly.graph_objects as go
import streamlit as st

from .. import catalog, milestones, privacy
from ..attacks.notes import PASSING_NOTES
from ..artifacts import MOSAIC_FROM, upscale
from ..data import (MAX_UPLOAD_FILES, available_samples, check_source, decode_upload, folder_fingerprint, load_item,
                    planned_batch, sample_image)
from ..device import facts
from ..errors import LeakdemoError
from ..settings import LPIPS_HELP, MODEL_NAMES, round_clients
from ..switch import refit
from ..scenario import format_note, from_dict, presets, scenario_json, uploads_note
from ..words import clock, fixed, plural, small_figure, three_digits, time_left
from ..utility import barely_learns
from . import state
from .axes import RUN_FRAME, log_axis
from .pictures import IMAGE_CSS, ORIGINAL_COLOR, RECON_COLOR
from .compare import MAX_RUNS as MAX_COMPARED
from .pool import CONFIG_PROBLEMS, WAITS_FOR_BUILD
from .server_disk import check_disk, disk_problem
from .shared import (KEEP, PAGE_TOP_CSS, SIDEBAR_CHOICES_CSS, hardware, held, held_index, history_step, ignored_line,
                     keep_link, line_under_buttons, link_now, mark_link, note_drawn, polled, psnr_bars, queue_line,
                     run_pool, setup_line, stacked_when_narrow, tab_alive, undo_stale_echoes)
from .views import agic, logits, vfl
from .views import images as images_view

POLL_SECONDS = 0.5  # a running run's frames
QUEUED_POLL_SECONDS = 2.0  # a queued run's place in the line
CHART_SECONDS = 1.5  # the curves' refresh while a run lives
PREVIEW_THUMBS = 8  # the batch's thumbnails under the image picker (two rows of the sidebar)

# Five figures share the main area: on a 1024-px laptop each has 100 px, and "17.9 dB" at 2.1rem needs 104
# ("17.9 …"); below ~1100 px the figures shrink with the window (a column is about (100vw − 520 px) / 5).
# "Label accuracy" and its ? need 108 px, where a fifth of the row gives 100 on that laptop ("Label accu…"): its
# column takes from SSIM's, whose "0.999" is the row's narrowest figure (Time's "123.4 s" is not)
FIGURE_WIDTHS = (1, 0.85, 1, 1.15, 1)
# Under this main-area width (a window under ~1020 px with the sidebar open: a 1024×768 projector at 125 % zoom,
# half a laptop screen) the figures go three to a row, as on a phone, and the scenario line under Run and Stop:
# five figures across read "Label acc…", and beside the line the buttons read "Run a…" and "S…" at 900 px
NARROW_MAIN_PX = 550
CSS = f"""
<style>
{PAGE_TOP_CSS}
h1 {{font-size: 2.3rem !important;}}
.ld-orig {{color: {ORIGINAL_COLOR}; font-weight: 700; font-size: 1.15rem;}}
.ld-recon {{color: {RECON_COLOR}; font-weight: 700; font-size: 1.15rem;}}
.ld-base {{color: #555; font-weight: 700; font-size: 1.15rem;}}
[data-testid="stMetricValue"] {{font-size: clamp(1.4rem, calc((100vw - 520px) * 0.06), 2.1rem);}}
.st-key-ld_figures {{container-type: inline-size;}}
@container (max-width: {NARROW_MAIN_PX}px) {{
  .st-key-ld_figures [data-testid="stHorizontalBlock"] {{flex-wrap: wrap; row-gap: 0.75rem;}}
  .st-key-ld_figures [data-testid="stColumn"] {{flex: 0 0 calc((100% - 2rem) / 3) !important;
                                               min-width: calc((100% - 2rem) / 3) !important;}}
}}
{line_under_buttons("ld_run", NARROW_MAIN_PX)}
{SIDEBAR_CHOICES_CSS}
{IMAGE_CSS}
{images_view.ROW_CSS}
{stacked_when_narrow("ld_charts")}
</style>
"""


@st.cache_resource(show_spinner=False)
def warm_up() -> bool:
    """Pay the one-time costs before anyone clicks Run: start the warmed-up workers, encode the gallery."""
    run_pool()
    _gallery()
    return True


class Gallery:
    """PNG thumbnails of the built-in photos, encoded once per server in the background. Encoding them
    costs ~4 s on a cold 2-core machine (scikit-image's import, then anti-aliased downscaling of every
    photo): a fresh server's first page draws at once and shows the thumbnails when they are ready. They
    wait for the workers to load the engine first (a few seconds): a run clicked at once starts sooner."""

    WAIT_FOR_WORKERS = 15.0  # seconds at most

    def __init__(self, pool):
        self.pngs: dict[str, bytes] | None = None
        self.error: str | None = None
        self.ready = threading.Event()
        threading.Thread(target=self._encode, args=(pool,), daemon=True, name="leakdemo-thumbnails").start()

    def _encode(self, pool) -> None:
        from ..artifacts import png_bytes
        deadline = time.time() + self.WAIT_FOR_WORKERS
        while pool.ready() < pool.max_running and time.time() < deadline:
            time.sleep(0.1)
        try:
            self.pngs = {n: png_bytes((upscale(sample_image(n, 32).transpose(1, 2, 0), 64) * 255).astype(np.uint8))
                         for n in available_samples()}
        except Exception as e:  # noqa: BLE001 — the gallery is a convenience: say why it is missing, go on
            self.error = f"{e.__class__.__name__}: {e}"
        finally:
            self.ready.set()


@st.cache_resource(show_spinner=False)
def _gallery() -> Gallery:
    return Gallery(run_pool())


# ---------------------------------------------------------------- scenario state

def _push_to_widgets(s) -> None:
    for k, v in s.params.items():
        st.session_state[f"w_{k}"] = v
    if s["data"] == "samples":
        st.session_state["w_gallery"] = [x for x in str(s["images"]).split(",") if x]
    st.session_state["images_source"] = s["data"]
    st.session_state["scenario"] = s


def _init_session() -> None:
    if "scenario" in st.session_state:
        return
    _load_link()


def _load_link() -> None:
    """The scenario the address bar's link describes, into the sidebar, with a note on each value it ignores."""
    query, twice = state.one_each(st.query_params)
    refitted = []  # what the link's source of data changed besides, said as the Source box says it
    s, ignored = state.from_query(query, refitted)
    if refitted:
        source = catalog.PROTOCOLS[s["protocol"]].param("data")
        _say(loaded_note=f"The link's data is {source.show(s['data'])}: " + " ".join(f"{n}." for n in refitted))
    # a name given twice that the scenario takes stays at the preset's value; one it does not take, at nothing
    ignored = [state.Ignored(note, key == "preset" or key in s.params) for key, note in twice.items()] + ignored
    st.session_state["ignored"] = (ignored, s.params)  # shown while the page still holds the link's scenario
    st.session_state["preset"] = s.preset
    _push_to_widgets(s)


def _follow_history() -> bool:
    """The browser's Back and Forward step through the scenarios the Lab showed (`?preset=dlg`, then idlg: Back
    stayed on idlg): a link met by them returns to the scenario it stood for, or, one the page never stood at, is
    read as an arrival reads it. True where the link was followed: that run does not write its link again (a bare
    one, which stood for the scenario the page was opened with from the sidebar, would be written over, and Back
    eaten once more)."""
    stepped, marked = history_step("lab")
    if not stepped:
        return False
    if marked is None:
        _load_link()
    else:
        st.session_state.pop("ignored", None)
        st.session_state["preset"] = marked.preset if marked.preset in presets() else st.session_state["preset"]
        _push_to_widgets(marked)
    return True


SAID = ("loaded_note", "loaded_warnings", "choice_error")


def _say(**said) -> None:
    """A note on the settings just changed (a switch's, a file's, an error): shown until the settings change again
    or Run is pressed. Popped at the next run, it went with the full rerun that follows when the engine's line
    changes or a run ends, a second or two after it came (a fresh server's first minute)."""
    for key in SAID:
        st.session_state.pop(key, None)
    st.session_state.update(said, said_for=None)  # the settings it speaks of: those of the next run that shows it


def _on_preset() -> None:
    if undo_stale_echoes():  # as in _on_choice
        return
    name = st.session_state["preset"]
    _push_to_widgets(state.from_query({"preset": name})[0])


def _on_choice(name: str) -> None:
    if undo_stale_echoes():  # the browser's old value, sent back by the run panel's timer: not a choice
        return
    s = st.session_state["scenario"]
    try:
        new, notes = state.switch(s, name, st.session_state[f"w_{name}"])
        _push_to_widgets(new)
        if notes:
            table = {"protocol": catalog.PROTOCOLS, "attack": catalog.ATTACKS, "defense": catalog.DEFENSES}[name]
            label = table[new[name]].title.split(" — ")[0]  # as the list names it: FedGEMS, not fedgems
            _say(loaded_note=f"Switched {name} to {label}. " + " ".join(f"{n}." for n in notes))
    except LeakdemoError as e:
        _say(choice_error=str(e))


def _on_data() -> None:
    """A new source of data, with what it refuses made to fit and said, as a switch of protocol does: PLI's 10
    private classes of 40 faces, put on the 10 digits, and CAFE's 200 samples on the 100 faces stood refused
    beside a greyed Run until lowered by hand."""
    if undo_stale_echoes():  # as in _on_choice
        return
    values = _widget_values(st.session_state["scenario"])
    values.pop("images", None)  # names belong to their source
    try:
        new, notes = refit(values, {"data": values.pop("data")}, st.session_state["preset"],
                           None if st.session_state.get("uploads") else check_source)  # uploads replace the data
    except LeakdemoError:
        return  # what still does not fit is named beside Run, as before
    if notes:
        for k, v in new.params.items():
            if k in values and values[k] != v:
                st.session_state[f"w_{k}"] = v
        source = catalog.PROTOCOLS[new["protocol"]].param("data")
        _say(loaded_note=f"Switched data to {source.show(new['data'])}. " + " ".join(f"{n}." for n in notes))


def _on_scenario_file() -> None:
    f = st.session_state.get("scenario_file")
    if f is None:
        return
    try:
        d = scenario_json(f.getvalue(), f.name)
        s = from_dict(d)
        st.session_state["preset"] = s.preset if s.preset in presets() else st.session_state["preset"]
        _push_to_widgets(s)
        # what the file alone says, under the note (the page says what its settings say, from the settings)
        notes = [n for n in (format_note(d), uploads_note(d)) if n]  # another format; photos the file lacks
        _say(loaded_warnings=notes,
             loaded_note="Scenario loaded from file: press Run attack to replay it" + ("." if notes else " exactly."))
    except (LeakdemoError, ValueError) as e:
        # one line that names the file once: the reader's own "scenario:" prefix would say it a third time
        # ("that file is not a leakdemo scenario (scenario: deep.json is not a scenario (…))"), and a file with
        # one bad value is a scenario, refused for that value
        why = str(e).removeprefix("scenario: ")
        _say(loaded_note="error: " + (why if why.startswith(f.name) else f"{f.name} was not loaded: {why}"))


# ---------------------------------------------------------------- widgets from the catalog

def _help(p) -> str:
    return p.help + (f"\n\nPaper: {p.paper}" if p.paper else "") + f"\n\nParameter `{p.name}`, {p.allowed()}."


def param_widget(p, where=st, unread: str | None = None, on_change=None) -> None:
    """unread: why the scenario does not read the parameter now (catalog.without_effect): greyed out, and its
    help says why — model_depth on the LeNet, AGIC's pre-reconstruction with one observed epoch. Greyed out
    where it holds its default only: a value set otherwise stays at hand to set back (secure aggregation left
    on as the clients went down to 1, which the check refuses: a greyed-out switch left Run blocked for good)."""
    key = f"w_{p.name}"
    value = st.session_state.get(key, p.default)  # this rerun's: a click's new value too
    greyed = bool(unread) and value == p.default
    if greyed:  # Streamlit drops the value a click just gave a widget drawn disabled, for its old one; set, it stays
        st.session_state[key] = value
    kw = dict(key=key, help=_help(p) + (f"\n\n**Changes nothing now:** {unread}." if unread else ""),
              disabled=greyed, persist_state=KEEP, on_change=on_change)
    # each widget's own default is the value it holds (shared.held): a tab that draws it late shows that value
    if p.kind == "choice":
        where.selectbox(p.title, p.choices, index=held_index(key, p.choices), format_func=p.show, **kw)
    elif p.kind == "int":
        low, high = int(p.low), int(p.high)
        where.number_input(p.title, min_value=low, max_value=high, value=min(max(int(value), low), high), step=1,
                           **kw)
    elif p.kind == "float":
        low, high = float(p.low), float(p.high)
        step = 0.01 if (p.high or 1) <= 1 else 0.1
        where.number_input(p.title, min_value=low, max_value=high, value=min(max(float(value), low), high),
                           step=step, format="%g", **kw)
    elif p.kind == "bool":
        where.toggle(p.title, value=bool(value), **kw)
    else:
        where.text_input(p.title, value=str(value), max_chars=2000, **kw)


def _showcase_picker() -> None:
    """The recorded showcases, replayed at once on the Compare page (nothing is computed)."""
    from ..gallery import open_gallery, showcase_rows, showcase_why
    try:
        rows = showcase_rows(open_gallery())
    except LeakdemoError as e:
        st.caption(f"Unavailable: {e}")
        return
    whys = {r["id"]: showcase_why(r) for r in rows}
    pick = st.selectbox("Showcase", list(whys), key="w_showcase", format_func=whys.get, persist_state=KEEP)
    if st.button("Replay it", icon=":material/replay:", width="stretch"):
        st.switch_page("pages/3_Compare.py", query_params={"runs": f"g{pick}"})


def sidebar() -> tuple:
    """Draw the sidebar; return (scenario or None, error message or None, uploads)."""
    sb = st.sidebar
    sb.selectbox("Preset", list(presets()), index=held_index("preset", presets()), key="preset", persist_state=KEEP,
                 on_change=_on_preset, format_func=lambda n: f"{n} — {presets()[n].title}",
                 help="A ready-made scenario. Everything below can then be changed.")
    s = st.session_state["scenario"]
    sb.selectbox("Protocol", list(catalog.PROTOCOLS), index=held_index("w_protocol", catalog.PROTOCOLS),
                 key="w_protocol", on_change=_on_choice, args=("protocol",), persist_state=KEEP,
                 format_func=lambda n: catalog.PROTOCOLS[n].title, help="What a client sends to the server.")
    attacks, defenses = catalog.attacks_for(s["protocol"]), catalog.defenses_for(s["protocol"])
    sb.selectbox("Attack", attacks, index=held_index("w_attack", attacks), key="w_attack", on_change=_on_choice,
                 args=("attack",), persist_state=KEEP, format_func=lambda n: catalog.ATTACKS[n].title,
                 help="How the server rebuilds the private data. " + catalog.ATTACKS[s["attack"]].paper)
    sb.selectbox("Defense", defenses, index=held_index("w_defense", defenses), key="w_defense", persist_state=KEEP,
                 on_change=_on_choice, args=("defense",), format_func=lambda n: catalog.DEFENSES[n].title,
                 help="What the client does to its payload before sending it.")
    groups = state.visible_params(s)
    now = {**s.params, **{k[2:]: v for k, v in st.session_state.items() if k.startswith("w_")}}  # this rerun's

    def unread(p) -> str | None:
        return catalog.without_effect(now, p.name)
    if groups.get("defense"):
        for p in groups["defense"]:
            param_widget(p, sb)
    sb.markdown("**Attack settings**")
    for p in groups.get("attack", []):
        param_widget(p, sb, unread(p))

    sb.markdown("**Private data**")
    param_widget(catalog.PROTOCOLS[s["protocol"]].param("data"), sb, on_change=_on_data)
    preview = None
    if s["protocol"] in catalog.LOGIT_PROTOCOLS:  # the federation's data is built, not picked or uploaded
        uploads = []
        for p in groups.get("data", []):
            if p.name not in ("data", "image_size"):
                param_widget(p, sb, unread(p))
    else:
        source = st.session_state.get("w_data", s["data"])
        if st.session_state.get("images_source", source) != source:  # names belong to their source
            st.session_state["w_images"] = ""
        st.session_state["images_source"] = source
        uploads, preview, upload_note = _data_widgets(sb, source)
    for p in groups.get("protocol", []):
        param_widget(p, sb, unread(p))
    with sb.expander("Model and image size"):
        for p in groups.get("model", []) + [q for q in groups.get("data", []) if q.name == "image_size"]:
            param_widget(p, st, unread(p))
    with sb.expander("Run: seed and device"):
        for p in groups.get("run", []):
            param_widget(p, st)
        st.caption(f"This machine: {hardware()}")
    sb.caption(engine_line(run_pool()))
    for problem in CONFIG_PROBLEMS:  # the server's environment, refused at start (also in its log)
        sb.warning(problem, icon=":material/settings:")
    with sb.expander("Replay a scenario file"):
        st.file_uploader("scenario.json", type=["json"], key="scenario_file", on_change=_on_scenario_file,
                         help="The scenario.json a previous run's download gave you.")
    with sb.expander("Replay a showcase"):
        _showcase_picker()
    # for undo_stale_echoes: the sidebar's keys are w_…; the run panel's own widgets are named otherwise, for a
    # click there is a run of the panel alone, which would put them back (the VFL view's page of samples did)
    note_drawn(["preset"] + [k for k in st.session_state if k.startswith("w_")])

    resolved = _resolved(s, uploads)
    if uploads and resolved[0] is not None and resolved[1] is None:
        _uploads_left_out(upload_note, uploads, resolved[0])
    if preview is not None and not uploads:  # uploads replace the photos: no thumbnails of photos not used
        _batch_preview(preview, resolved[0] if resolved[1] is None else None, st.session_state["images_source"])
    return resolved


def _widget_values(s) -> dict:
    """The sidebar's values of the parameters s's protocol, attack and defense take (the gallery's photos too)."""
    values = {k[2:]: v for k, v in st.session_state.items() if k.startswith("w_") and k[2:] in
              catalog.params_for(s["protocol"], s["attack"], s["defense"])}
    if st.session_state.get("w_data") == "samples":
        values["images"] = ",".join(st.session_state.get("w_gallery", []))
    return values


def _resolved(s, uploads) -> tuple:
    """The sidebar's widgets as a scenario: (scenario or None, error message or None, uploads)."""
    values = _widget_values(s)
    if uploads:
        values["images"] = ""
    try:
        s2 = state.resolve(values, preset=st.session_state["preset"])
    except LeakdemoError as e:
        return None, str(e), uploads
    st.session_state["scenario"] = s2
    known = facts(wait=False)  # before the workers report it, the run itself says so if CUDA is missing
    if s2["device"] == "cuda" and known is not None and not known["cuda"]:
        return s2, "device: CUDA is not available on this machine; choose auto or cpu", uploads
    if uploads and len(uploads) < catalog.private_images(s2):
        return s2, too_few_uploads(s2, len(uploads)), uploads
    if not uploads:
        try:
            check_disk(s2.params)  # before the source is read: a classroom's browsers never list the server's disk
            check_source(s2)
        except LeakdemoError as e:
            return s2, str(e), uploads
    return s2, None, uploads


def too_few_uploads(s, n: int) -> str:
    """Fewer uploads than the run takes, and the ways out: one photo uploaded, then Protocol → vertical FL read
    "n_samples: needs 200 images but 1 are uploaded" beside a greyed Run, and said neither what to change nor
    that the upload was what held the built-in digits back. A lower count is offered only where it resolves
    (vertical FL's N cannot go under its batch, nor to 1)."""
    need, name = catalog.private_images(s), catalog.private_images_name(s)
    ways = [f"upload {need - n} more"]
    if name in s.params:  # one setting makes the count (batch_size, n_samples): that setting at n, if it may be
        try:
            state.resolve({**s.params, name: n}, preset=s.preset)
            ways.append(f"set {name} to {n}")
        except LeakdemoError:
            pass
    else:  # a product (clients × batch_size): lower its parts
        ways.append(f"lower {' or '.join(name.split(' × '))}")
    ways.append("remove the uploads to run on the built-in data")
    return (f"{name}: needs {plural(need, 'image')}, but only {n} {'is' if n == 1 else 'are'} uploaded — "
            f"{', '.join(ways[:-1])}, or {ways[-1]}")


def _batch_preview(where, scenario, source: str) -> None:
    """Thumbnails of the images a run will take: the named ones, then those the seed picks (a FedAvg client's
    4 images, a round's 8, showed only the one named). The digits, faces and a folder's files were typed blind,
    by index or name, and first seen in the run: they show too, under the name the run gives them ('digit 7
    #360'). Only the named photos while the settings are invalid."""
    named, picked = (list(st.session_state.get("w_gallery", [])) if source == "samples" else []), []
    if scenario is not None:
        try:
            named, picked = planned_batch(scenario) or (named, [])
        except LeakdemoError:  # said in the run panel already
            pass
    keys = (named + picked)[:PREVIEW_THUMBS]
    if source == "samples":
        thumbs = _gallery().pngs or {}
        shown = [(thumbs[n], n) for n in keys if n in thumbs]
    else:
        shown = _item_thumbs(dict(scenario.params), keys) if scenario is not None and keys else []
    if not shown:
        where.empty()
        return
    with where.container():
        st.image([png for png, _ in shown], caption=[name for _, name in shown], width=64)
        more = len(named) + len(picked) - len(shown)
        if picked:
            which = f"{len(picked)} more" if named else ("all" if len(picked) > 1 else "it")
            choose = "photos" if source == "samples" else "images"
            st.caption(f"The seed ({scenario['seed']}) picked {which}" + (f"; {more} not shown" if more else "")
                       + f" — name {choose} above to choose them.")


def _item_thumbs(p: dict, keys: list[str]) -> list[tuple[bytes, str]]:
    """(PNG, the run's name for it) of each item of a digits, faces or folder batch, at the run's image size;
    none where an item cannot be read (the run says why)."""
    try:
        files = folder_fingerprint(p["folder"]) if p["data"] == "folder" else None
        return [_item_thumb(p["data"], key, p["image_size"], p.get("folder") or "", files) for key in keys]
    except (LeakdemoError, OSError, ValueError):
        return []


@st.cache_data(max_entries=256, show_spinner=False)
def _item_thumb(source: str, key: str, size: int, folder: str, files: str | None) -> tuple[bytes, str]:
    """files: what the folder holds now (a picture replaced under its name is drawn anew)."""
    from ..artifacts import png_bytes
    img, _, name = load_item(source, key, {"image_size": size, "num_classes": 1, "folder": folder})
    return png_bytes((upscale(img.transpose(1, 2, 0), 64) * 255).round().astype(np.uint8)), name


def _data_widgets(where, source: str):
    """The gallery of built-in photos, or indices for other sources; plus the upload box (and, for the
    photos, a place for the batch's thumbnails)."""
    preview = None
    if source == "samples":
        photos = available_samples()
        # the box below, as it stood (or the photos it held before the page was left): uploads replace these
        uploaded = bool(st.session_state.get("uploads") or st.session_state.get("kept_uploads"))
        where.multiselect("Images (the batch starts with these)", photos, key="w_gallery", persist_state=KEEP,
                          default=[n for n in held("w_gallery", []) if n in photos], disabled=uploaded,
                          help="Your uploads below replace the built-in photos: remove them to choose these again."
                          if uploaded else "Built-in photos shipped with scikit-image. The seed picks the rest of "
                                           "the batch.")
        thumbs = _gallery().pngs
        with where.expander("Browse the built-in photos"):
            if thumbs:
                st.image(list(thumbs.values()), caption=list(thumbs), width=64)
            else:
                st.caption(f"The thumbnails could not be made ({_gallery().error})." if _gallery().error
                           else "Preparing the thumbnails (once per server start)…")
        preview = where.empty()  # filled once the scenario is resolved: the seed's picks need it
    else:
        for name in {"folder": ("folder",), "torchvision": ("tv_dataset", "data_root")}.get(source, ()):
            param_widget(catalog.PROTOCOLS["fedsgd"].param(name), where)
        what = "file names" if source == "folder" else "indices"
        where.text_input(f"Images ({what}, comma-separated)", value=str(held("w_images", "")), key="w_images",
                         persist_state=KEEP)
        if source != "torchvision":  # a torchvision set is opened by the run alone
            preview = where.empty()
    files = where.file_uploader("…or upload your own (PNG, JPEG, WebP; ≤ 10 MB)", type=["png", "jpg", "jpeg", "webp"],
                                accept_multiple_files=True, key="uploads", on_change=_uploads_changed,
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
    if files:
        st.session_state["kept_uploads"] = uploads
    elif st.session_state.get("kept_uploads"):
        uploads = _kept_uploads(where)
    return uploads, preview, where.empty()  # the last: what of the uploads the run leaves out (_uploads_left_out)


def _uploads_changed() -> None:
    """The user emptied the upload box: the photos it held are gone for good (not kept as below)."""
    if not st.session_state.get("uploads"):
        st.session_state.pop("kept_uploads", None)


def _kept_uploads(where) -> list:
    """A file box empties whenever it leaves the page (Compare it and back; a logit protocol, whose federation's
    data is built, and back): the next run then took the built-in photos, the user's gone without a word. The
    photos it held stay in play, said so, until the user forgets them or uploads others."""
    kept = st.session_state["kept_uploads"]
    names = ", ".join(name for name, _ in kept)
    where.caption(f":material/photo_library: Still using your {plural(len(kept), 'photo')} uploaded earlier: {names}.")
    where.button("Forget them", key="forget_uploads", icon=":material/close:",
                 on_click=lambda: st.session_state.pop("kept_uploads", None),
                 help="use the built-in photos again (or upload others above)")
    return list(kept)


def _uploads_left_out(where, uploads: list, scenario) -> None:
    """Three photos uploaded for a batch of one: the run took the first and said nothing of the others."""
    need = catalog.private_images(scenario)
    if len(uploads) <= need:
        return
    used = ", ".join(name for name, _ in uploads[:need])
    where.caption(f":material/info: {len(uploads)} photos uploaded; the run takes the first {need} "
                  f"({catalog.private_images_name(scenario)} = {need}): {used}. Raise it to attack the others too.")


# ---------------------------------------------------------------- main area

THREAT_TITLE = "Threat model — what the attacker gets"


def threat_card(s, folded: bool = False) -> None:
    """What the attacker receives and knows. Once a run is on the page the card folds to one line: the class
    has read it, and on a 1280×720 projector the open card (~320 px) pushed the pictures below the fold."""
    protocol, attack, defense = catalog.components(s["protocol"], s["attack"], s["defense"])
    box = st.expander(THREAT_TITLE, icon=":material/policy:") if folded else st.container(border=True)
    with box:
        if not folded:
            st.markdown(f"#### :material/policy: {THREAT_TITLE}")
        c1, c2 = st.columns(2)
        c1.markdown(f"**Receives:** {protocol.receives(s)}.")
        c1.markdown("**Does not receive:** the images or their labels. Scores are computed outside the attack.")
        if s["protocol"] == "fedavg":
            knows = "local_lr" in attack.needs
            c1.markdown(f"**Learning rate η = {s['local_lr']:g}:** "
                        + ("known to this attack (with the local steps and mini-batch size)." if knows else
                           "**not** known to this attack."))
        k = round_clients(s)
        if k > 1 and s.get("secure_aggregation"):
            c1.markdown(f"**Secure aggregation:** the server learns only the average of the {k} gradients — to the "
                        f"attack, one batch of {k * s['batch_size']} images, which leaks far less per image than each "
                        "client's gradient apart (turn it off to see).")
        elif k > 1:
            c1.markdown(f"**Each client apart:** no secure aggregation, so the server attacks all {k} gradients at once, "
                        f"each against its own. Secure aggregation would show it only their sum, like one client's "
                        f"batch of {k * s['batch_size']} — which leaks far less per image (switch *Secure aggregation* "
                        "on to see).")
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
        knobs = [f"{p.title} {'on' if s[p.name] else 'off'}" if isinstance(s[p.name], bool)
                 else f"{p.title} = {s[p.name]:g}" if isinstance(s[p.name], float) else f"{p.title} = {s[p.name]}"
                 for p in protocol.params if p.defends]  # as the sidebar names them ("Batch size", not batch_size)
        st.caption(f"Attack: {attack.title} — {attack.summary}  ·  Protocol knobs that defend: {', '.join(knobs)}")


def _chart(handle):
    c = {k: v.items for k, v in handle.curves.items()}
    noun = catalog.step_noun(handle.scenario.params)  # PLI's curves share the accuracy chart's axis
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=c["iteration"], y=c["psnr"], name="PSNR (dB)", line=dict(color=RECON_COLOR, width=3)))
    fig.add_trace(go.Scatter(x=c["iteration"], y=c["ssim"], name="SSIM", yaxis="y2",
                             line=dict(color=ORIGINAL_COLOR, width=2, dash="dot")))
    # each axis in its line's colour, no legend: a legend under this chart alone set its x-axis above the loss
    # chart's beside it
    fig.update_layout(height=300, margin=RUN_FRAME, title="Reconstruction quality",
                      xaxis_title=noun, showlegend=False,
                      yaxis=dict(title=dict(text="PSNR (dB) ━", font=dict(color=RECON_COLOR)), rangemode="tozero",
                                 tickfont=dict(color=RECON_COLOR)),
                      yaxis2=dict(title=dict(text="SSIM ┅", font=dict(color=ORIGINAL_COLOR)), overlaying="y",
                                  side="right", range=[0, 1], showgrid=False, tickfont=dict(color=ORIGINAL_COLOR),
                                  # Streamlit's theme syncs an overlaid axis's ticks to the PSNR grid (0.569, 0.853…)
                                  tickmode="array", tickvals=[0, 0.25, 0.5, 0.75, 1]),
                      font=dict(size=14))
    if handle.scenario.params.get("protocol") not in catalog.LOGIT_PROTOCOLS:  # PLI's PSNR is against a class's mean
        psnr_bars(fig, (185, 200))  # its narrowest: side by side in a 700-px main area (narrower, they stack)
    loss = go.Figure(go.Scatter(x=c["iteration"], y=c["loss"], name="loss", line=dict(color="#555", width=2)))
    loss.update_layout(height=300, margin=RUN_FRAME, title="Attack loss (its own objective)",
                       xaxis_title=noun, yaxis=log_axis(c["loss"]), font=dict(size=14))
    return fig, loss


def shown_notes(notes: list[str], n: int = 3, done: bool = False) -> list[str]:
    """The newest n distinct notes, newest last. A note that only renumbers an earlier one replaces it:
    "stalled … restarting (3/3)" stands for the three restarts, not three captions of them; once the run is
    done, the restarts' notes go (under "gave up after 4 starts" the last still read "… restarting (3/3)", as
    if it went on). (The attack's stage — PLI's round, CAFE's step, a compile — is shown in the progress bar,
    and only while it runs.)"""
    kept: dict[str, str] = {}
    for note in notes:
        if done and any(passing in note for passing in PASSING_NOTES):
            continue
        key = re.sub(r"\d+", "#", note)
        kept.pop(key, None)
        kept[key] = note
    return list(kept.values())[-n:]


def _label_help(m: dict, p: dict) -> str:
    """What the label accuracy counts, or why a run has none."""
    if m["label_accuracy"] is not None:
        return "The share of the private labels the attack guessed right, in any order."
    return f"n/a: {catalog.no_label_guess(p)}."


def _figures(fin, latest, started) -> None:
    """The run's figures in a row: the final five (PLI's own five), or three while it runs."""
    if fin is not None and "attack_accuracy" in fin.metrics:
        logits.logit_metrics(fin, started.scenario["params"]["attack"])
    elif fin is not None:
        m = fin.metrics
        cols = st.columns(FIGURE_WIDTHS)
        cols[0].metric("PSNR", f"{m['psnr']:.1f} dB", help="peak 1, images in [0, 1], averaged per image")
        cols[1].metric("SSIM", fixed(m['ssim']))
        cols[2].metric("LPIPS", "n/a" if m["lpips"] is None else small_figure(m["lpips"]),
                       help=m.get("lpips_note") or LPIPS_HELP)
        cols[3].metric("Label accuracy", "n/a" if m["label_accuracy"] is None else f"{m['label_accuracy']:.0%}",
                       help=_label_help(m, started.scenario["params"]))
        cols[4].metric("Time", clock(fin.seconds, short=True))
        if m.get("lpips_note"):
            st.caption(m["lpips_note"])
    elif latest is not None and latest.psnr is not None:
        cols = st.columns(3)
        cols[0].metric("PSNR", f"{latest.psnr:.1f} dB")
        cols[1].metric("SSIM", fixed(latest.ssim))
        cols[2].metric("Loss", three_digits(latest.loss) if latest.loss is not None else "—")


def run_view(handle, settling: bool = False) -> None:
    """One run as it stands: progress, the images, the metrics and, once finished, the downloads.

    `settling`: this draw hands over to a full rerun at once (the run panel's `redraw_page`), which draws the
    downloads instead. Drawn here too, a button could be pressed under the redraw that follows at once — its click
    naming a file the rerun revokes (Streamlit registers a deferred file anew each time it draws the button), or
    meeting a button being replaced — and nothing downloaded (the browser test, twice in the suite's runs)."""
    with handle.lock:
        status, started, latest, fin, error = handle.status, handle.started, handle.latest, handle.finished, handle.error
        since = handle.since_latest()
        # why the first frame is late, until it comes
        notes = shown_notes([n for n in handle.notes if latest is None or n != WAITS_FOR_BUILD], done=handle.done)
        matching = handle.matching
    if status == "queued":
        st.progress(0.0, text=queue_line(run_pool(), handle))
    elif status == "running" and latest is None:
        st.progress(0.0, text=f"{setup_line(handle.scenario.params)} · {since:.0f} s"
                              + (" · stopping…" if handle.stopping else ""))
    elif latest is not None and not handle.done:
        seconds = latest.seconds + since  # the clock runs on between events (RunHandle.since_latest)
        left = None if latest.eta is None else max(0.0, latest.eta - since)
        eta = f" · about {time_left(left)} left" if left is not None and seconds > 1 else ""
        noun = catalog.step_noun(handle.scenario.params)
        st.progress(min(1.0, latest.iteration / max(latest.total, 1)),
                    text=f"{noun[0].upper() + noun[1:]} {latest.iteration} / {latest.total}{f' · {latest.stage}' if latest.stage else ''}"
                         f" · {clock(seconds)}{eta}"
                         + (" · stopping…" if handle.stopping else ""))
    if status == "failed":
        st.error(f"The run could not complete: {error}")
        return
    if status == "stopped" and fin is None:
        said = (error[0].upper() + error[1:]) if error else "Stopped before it started"
        st.info(f"{said}. Nothing to show yet: press **Run attack** to start again.", icon=":material/stop_circle:")
        return
    if status in ("finished", "stopped") and fin is not None:
        word = "Finished" if status == "finished" else "Stopped"
        noun = catalog.step_noun(handle.scenario.params)
        when = milestones.sentence(getattr(fin, "history", None), fin.metrics, status == "finished", noun)
        st.success(f"**{word}** after {catalog.steps_taken(handle.scenario.params, fin.iterations)} in "
                   f"{clock(fin.seconds)}."
                   + (f" {when}" if when else "")
                   + (f" The attack {fin.metrics['note']}." if fin.metrics.get("note") else ""),
                   icon=":material/check_circle:")
    if notes:  # one line, newest last: three captions took ~120 px above the pictures on a projector
        st.caption(":material/info: " + "  ·  ".join(notes))
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
        logits.classes_panel(handle.seq, started, images, getattr(src, "baseline", None), success, latest)
    elif len(started.originals) >= MOSAIC_FROM:
        vfl.dataset_panel(handle.seq, started, originals, images, per, ids, frame)
    else:
        images_view.images_panel(handle.seq, started, originals, images, per, frame)
        if latest is not None and latest.trials is not None:
            images_view.trials_panel(handle.seq, latest)
    if matching:
        agic.matching_panel(handle.seq, matching)
    if fin is not None or (latest is not None and latest.psnr is not None):
        with st.container(key="ld_figures"):  # in a narrow main area three to a row (CSS), not five cut short
            _figures(fin, latest, started)
    guarantee = privacy.line(fin.metrics) if fin is not None else None
    if guarantee:  # what the defense guarantees formally, or why nothing: the CLI's line, under the figures
        st.caption(f":material/lock: **Formal privacy:** {guarantee}")
    if handle.done and handle.artifacts.get("error"):
        st.caption(handle.artifacts["error"])
    elif handle.done and handle.artifacts and not settling:
        st.markdown("**Downloads**")
        row = st.container(horizontal=True)  # buttons as wide as their names, wrapping: no "scenario.j…" at 1024 px
        for name in handle.artifacts:  # the files `run --out` writes, under the same names
            mime = mimetypes.guess_type(name)[0] or "application/octet-stream"
            # handed over when clicked (deferred): no media file exists before, so none can vanish under a
            # browser that fetches it while the page redraws (a busy classroom showed such 404s)
            row.download_button(name, lambda blob=handle.artifacts[name]: blob, file_name=name, mime=mime,
                                key=f"dl_{name}", on_click="ignore")
        _compare_link(handle)
    elif handle.done and (fin is not None or handle.artifacts):
        st.caption("Preparing the downloads…")


def _compare_link(handle) -> None:
    """This tab's latest runs side by side on Compare, this one last: run it undefended, then under noise, and
    one click sets them beside each other (before, the picker's list of every stored run was the only way)."""
    if handle.uploads:  # never kept (pool._worker_main): say why there is no Compare, rather than leave it out
        st.caption(":material/lock: Runs on your uploaded photos are not kept in the run store: your photos are "
                   "never written to disk, nor shown to the server's other browsers. Compare cannot replay this "
                   "one; the downloads above are yours.")
        return
    if handle.stored_id is None:  # the run store is off or unusable
        return
    mine = st.session_state.setdefault("lab_runs", [])
    if handle.stored_id not in mine:
        mine.append(handle.stored_id)
    runs = mine[-MAX_COMPARED:]
    label = "Compare it" if len(runs) == 1 else f"Compare it with your {plural(len(runs) - 1, 'run')} before"
    st.page_link("pages/3_Compare.py", label=label, icon=":material/compare:",
                 query_params={"runs": ",".join(f"r{i}" for i in runs)},
                 help=f"Opens Compare on {'this run' if len(runs) == 1 else 'your latest runs in this tab'} "
                      f"(run #{', #'.join(str(i) for i in runs)} of the run store), replayed side by side.")


def _checks_chart(handle):
    """The Runner's checks against the truth as curves: PLI's attack accuracy or CAFE's Step I/II errors."""
    c = {k: v.items for k, v in handle.curves.items()}
    if any(v is not None for v in c["attack_accuracy"]):
        return logits.accuracy_chart(c, handle.scenario.params["attack"].upper())
    if any(v is not None for v in c["step1_error"]):
        return vfl.steps_chart(c)
    return None


def chart_panel(handle) -> None:
    """The curves. Building Plotly figures is the costliest part of a redraw, so they are rebuilt at most
    every CHART_SECONDS while the run lives (and once at its end), and drawn from that copy in between."""
    if handle.latest is None or (handle.done and handle.finished is None):  # nothing to show: no curves either
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
        flat = barely_learns(utility, handle.scenario.params) if utility else None  # cafe-faces: a flat loss
        memo = (version, (fig, loss, steps, vfl.utility_chart(utility) if utility else None, flat))
        st.session_state["chart_memo"] = memo
    fig, loss, steps, utility, flat = memo[1]
    charts = st.container(key="ld_charts")  # side by side, or one above the other in a narrow main area (CSS)
    left, right = charts.columns(2)
    left.plotly_chart(fig, key="chart_quality", config={"displayModeBar": False})
    right.plotly_chart(loss, key="chart_loss", config={"displayModeBar": False})
    if steps is not None or utility is not None:
        left, right = charts.columns(2)
        if steps is not None:
            left.plotly_chart(steps, key="chart_steps", config={"displayModeBar": False})
        if utility is not None:
            right.plotly_chart(utility, key="chart_utility", config={"displayModeBar": False})
            if flat:
                right.caption(flat)


def _start(scenario, uploads) -> None:
    if not uploads and (refused := disk_problem(scenario.params)) is not None:  # the button was greyed for it
        _say(choice_error=str(refused))
        return
    for key in SAID:  # what they said was about the settings before this run
        st.session_state.pop(key, None)
    old = st.session_state.get("handle")
    if old is not None and not old.done:
        old.stop()
    st.session_state["handle"] = run_pool().submit(scenario, uploads or None, alive=tab_alive())


def _stop() -> None:
    h = st.session_state.get("handle")
    if h is not None:
        h.stop()


def page():
    """The Attack Lab as the app's navigation registers it: the home page (the presenter's Exit switches to it)."""
    return st.Page(main, title="Attack Lab", icon=":material/science:", default=True)


def main() -> None:
    st.markdown(CSS, unsafe_allow_html=True)
    warm_up()
    _init_session()
    arrived_by, followed = link_now(), _follow_history()
    scenario, problem, uploads = sidebar()

    st.title(":material/lock_open: leakdemo — Attack Lab")
    st.markdown("Federated learning keeps data on the clients and shares only updates — yet those updates "
                "can be turned back into the private data. Pick a protocol, an attack and a defense, press "
                "**Run attack**, and watch the server rebuild a client's image from what it received.")
    # until the user changes a setting: popped at once, the message flashed for a second and went with the
    # full rerun that follows a fresh page's first one
    ignored, for_params = st.session_state.get("ignored", ([], None))
    if scenario is not None and scenario.params != for_params:
        st.session_state.pop("ignored", None)
    else:
        for item in ignored:
            st.warning(ignored_line(item), icon=":material/link_off:")
    if scenario is not None and st.session_state.get("said_for") is None:
        st.session_state["said_for"] = scenario.params
    elif scenario is not None and scenario.params != st.session_state.get("said_for"):
        for key in SAID:  # _say's notes, until the settings change
            st.session_state.pop(key, None)
    note = st.session_state.get("loaded_note")
    if note:
        (st.error if note.startswith("error") else st.info)(note)
    for w in st.session_state.get("loaded_warnings", []):
        st.warning(w, icon=":material/warning:")
    if st.session_state.get("choice_error"):
        st.error(st.session_state["choice_error"])

    if scenario is not None and not followed:
        keep_link(state.to_query(scenario), state.to_query(state.from_query({})[0]))
    mark_link("lab", scenario, arrived_by)
    handle = st.session_state.get("handle")
    pace = _pace(handle)
    run_buttons(scenario, problem, uploads)
    polled(run_panel, pace)(scenario, problem, pace, handle, engine_line(run_pool()), _stoppable(handle),
                            tuple(n for n, _ in uploads or []), _files_ready(handle))


def engine_line(pool) -> str:
    """The sidebar's word on the workers: starting, warming up, how many are ready, and any building ahead."""
    ready, warm, building = pool.ready(), pool.warm(), pool.building()
    ahead = f" · {building} compiling DLG and DLM+ ahead, for faster runs" if building else ""
    return (f"Engine: {warm + building} of {pool.max_running} workers ready{ahead}" if warm + building else
            "Engine: workers started, warming up (a run can start now)" if ready else
            "Engine: starting the workers (a few seconds)…")


def _engine_settled(pool) -> bool:
    """Every worker warm and none building ahead: the engine line has nothing more to say until a build starts."""
    return pool.warm() == pool.max_running and not pool.building()


def _pace(handle) -> float | None:
    """How often the run panel refreshes: twice a second while the run runs or is next in line (its start
    shows at once) or has finished while its downloads are built (at the queued pace they came up to 2.1 s
    after "Finished"; now 0.1–0.8 s, DLG at 16 px), every 2 s while it waits further back (a full classroom
    waiting costs the server little), never once it is complete — but for a fresh server's first seconds,
    until the gallery's thumbnails are ready to draw and the workers warm (the sidebar's engine line said
    "starting the workers…" until a click)."""
    if handle is None or handle.complete:
        return None if _gallery().ready.is_set() and _engine_settled(run_pool()) else POLL_SECONDS
    if handle.done or handle.status == "running" or (handle.status == "queued" and run_pool().position(handle) == 1):
        return POLL_SECONDS
    return QUEUED_POLL_SECONDS


def redraw_page(handle, pace: float | None, drawn_with, engine: str | None = None,
                stop_enabled: bool | None = None) -> bool:
    """Whether the run panel asks for a full rerun: the pace its run's state needs changed, or the run is not
    the one the page was drawn with — a run just started gets one full rerun, which draws the page (and this
    panel's `drawn_with`) around it, even where the pace stays at POLL_SECONDS from before the click (a fresh
    server's gallery thumbnails) through the first run. Stop, drawn outside the panel, is drawn again when the
    run it could stop ends (`stop_enabled`: as the full run drew it), even where the pace stays the same."""
    return (_pace(handle) != pace or handle is not drawn_with
            or (engine is not None and engine_line(run_pool()) != engine)
            or (stop_enabled is not None and stop_enabled != _stoppable(handle)))


def _files_ready(handle) -> bool:
    """A finished run's files are ready: the full run that sees it draws their download buttons."""
    return handle is not None and handle.done and bool(handle.artifacts)


def _stoppable(handle) -> bool:
    return handle is not None and not handle.done


def run_buttons(scenario, problem, uploads) -> None:
    """Run and Stop, and the scenario in words beside them — outside the run panel's fragment, so that a click
    is a full rerun. Inside, a click asked for a rerun of the fragment it was drawn in; when it met a full run
    (the engine line settling as a classroom pressed Run at once), that run had registered the fragment under
    a new id, the click's request named the old one and Streamlit skipped it: `_start` ran, but nothing drew
    the run, and with the page's timer off the tab could stay on "Press Run attack" (reproduced on a minimal
    page: a click sent while a slow full run has not yet drawn the new fragment)."""
    # "Run attack" whole on a 1024-px laptop (it read "Ru…"); narrower, the line goes under the buttons (CSS)
    c1, c2, c3 = st.container(key="ld_run").columns([1.5, 1.1, 3.4])
    c1.button("Run attack", type="primary", disabled=problem is not None or scenario is None, on_click=_start,
              args=(scenario, uploads), icon=":material/play_arrow:", width="stretch")
    c2.button("Stop", disabled=not _stoppable(st.session_state.get("handle")), on_click=_stop,
              icon=":material/stop:", width="stretch")
    if problem:
        c3.error(problem)
    elif scenario is not None:
        if scenario["protocol"] in catalog.LOGIT_PROTOCOLS:
            n = catalog.private_images(scenario)
            model = (f"{catalog.PROTOCOLS[scenario['protocol']].short}, {plural(scenario['clients'], 'client')} "
                     "sharing logits")  # FedMD or DS-FL: the same attack, very different odds
            what = plural(n, "private target class", "private target classes")
        else:
            model = (MODEL_NAMES.get(scenario.get("model"), scenario.get("model"))  # "DLG on LeNet", not "on lenet"
                     or f"{scenario['workers']} {scenario['worker_model']} workers")
            what = plural(catalog.private_images(scenario), "private image")
            if round_clients(scenario) > 1:
                what = f"{plural(scenario['clients'], 'client')} with {plural(scenario['batch_size'], 'private image')} each"
        defended = ("" if scenario["defense"] == "none"  # mid-sentence: 'against magnitude pruning', not 'Magnitude'
                    else f", against {catalog.in_sentence(catalog.defense_phrase(scenario))}")
        head, tail = preset_words(scenario)
        # a link holds settings, not photos: opened elsewhere, it ran the built-in ones and said it reproduced this
        kept = (" The link in the address bar keeps these settings, not your photos." if uploads else
                " The link in the address bar reproduces it.")
        c3.caption(f"Scenario: {head}{catalog.ATTACKS[scenario['attack']].short} on {model}"
                   f"{defended}, {what}{_yours(scenario) if uploads else ''}, "
                   f"{scenario['image_size']}×{scenario['image_size']} px, seed {scenario['seed']}{tail}.{kept}")


def _yours(scenario) -> str:
    return " (your upload)" if catalog.private_images(scenario) == 1 else " (your uploads)"


def preset_words(scenario) -> tuple[str, str]:
    """Where the scenario line names its preset: first where it is the preset's own attack on its own protocol,
    last as where it started once either was switched — 'preset **dlg**, PLI on FedMD' read as if dlg were a
    PLI preset."""
    base = presets().get(scenario.preset)
    if base is None:
        return "", ""
    if all(base.params.get(k) == scenario[k] for k in ("protocol", "attack")):
        return f"preset **{scenario.preset}**, ", ""
    return "", f", started from preset **{scenario.preset}**"


def shown_run_line(shown: dict, shown_files: list[str], now: dict, now_files: list[str]) -> str | None:
    """The line over a run the sidebar has moved on from, or None while they agree. With the attack switched
    from Inverting Gradients to DLM after a run, the cat it rebuilt stood under "Finished" below DLM's threat
    card and scenario line, and nothing said it was the old attack's. Where the attack, protocol and defense are the same,
    the line names the settings the shown run had ("with iterations = 300"); the Trade-offs page says as much
    of the sweep it shows."""
    if shown == now and shown_files == now_files:
        return None
    what = f"**{catalog.headline(shown)} · {catalog.defense_phrase(shown)}**"
    if all(shown.get(k) == now.get(k) for k in ("protocol", "attack", "defense")):
        strengths = catalog.strengths(shown.get("defense"))  # the defense's phrase gives them
        words = [catalog.setting_words(shown, k, v) for k, v in shown.items()
                 if k not in strengths and now.get(k) != v and v != ""]
        if shown_files and shown_files != now_files:
            words.append(f"the uploaded {', '.join(shown_files[:3])}{' …' if len(shown_files) > 3 else ''}")
        if words:
            what += " with " + ", ".join(words[:4]) + (f" and {len(words) - 4} more" if len(words) > 4 else "")
    return (f"Showing the run last started, {what}: the sidebar has changed since. Press **Run attack** to run "
            "what it says now.")


def run_panel(scenario, problem, pace: float | None, drawn_with=None, engine: str | None = None,
              stop_enabled: bool | None = None, uploaded: tuple[str, ...] = (), files_drawn: bool = False) -> None:
    """The run itself, under Run and Stop: one fragment, the page's one refresh mechanism.

    The fragment's timer is set by the full run that draws it, at the pace the run's state needs. When
    that state changes pace (queued → running → complete; a fresh server's thumbnails ready), the fragment
    asks for one full rerun, which sets the new pace — the browser drops every fragment timer when a full
    run starts, so no timer outlives the tree it draws into, and a complete run's page stops refreshing
    (that rerun also greys Stop again).
    There is one fragment and one timer: nothing else races it (two fragments and a rerun from one of them
    blanked a busy classroom's tabs). Each full run gives it a new fragment id (`shared.polled`), so that a
    late tick of the old timer is ignored instead of costing the page its new one.
    `files_drawn`: the full run drew the run's download buttons; a tick that hands over to a full rerun draws
    them too (they stay put), where it would otherwise be the first to (run_view's `settling`)."""
    undo_stale_echoes()  # a tick's old sidebar values, set aside before anything reads them
    handle = st.session_state.get("handle")
    settling = False  # this draw hands over to a full rerun (run_view's word)
    if scenario is not None:  # under Run and Stop, which stay put as the card folds (above, they jumped up
        for w in scenario.warnings:  # ~300 px from under the pointer that had just pressed Run)
            st.warning(w, icon=":material/warning:")
        threat_card(scenario, folded=handle is not None)
    if handle is None:
        if problem is None:  # while a setting is refused, the message beside the greyed button says what to do
            st.info("Press **Run attack** to start. The reconstruction streams in here as the attack works.")
    else:
        if scenario is not None:
            line = shown_run_line(dict(handle.scenario.params), [n for n, _ in handle.uploads or []],
                                  dict(scenario.params), list(uploaded))
            if line:
                st.caption(":material/history: " + line)
        settling = redraw_page(handle.poll(), pace, drawn_with, engine, stop_enabled)
        run_view(handle, settling and not files_drawn)
        chart_panel(handle)
    # asked again after drawing: a state that changed meanwhile is drawn by the rerun, not a tick later
    if settling or redraw_page(handle, pace, drawn_with, engine, stop_enabled):
        st.rerun()  # one full rerun sets the new pace (and stops the timer once the run is complete)
