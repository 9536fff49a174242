"""What a sweep leaves behind: sweep.csv, sweep.json, tradeoff.png (privacy against utility, the Pareto
front marked) and strip.png (the reconstruction at each strength: the picture people remember)."""
from __future__ import annotations

import csv
import io
import json
import math
import os
import textwrap

import numpy as np

from .catalog import ENOUGH_EQUATIONS, param_label, setting_words
from .settings import equations_per_unknown
from .sweep import flat_utility, pareto, utility_of
from .words import three_digits, value_text

COLUMNS = ("index", "label", "undefended", "runs", "failed", "psnr", "psnr_range", "ssim", "lpips", "recognisable",
           "attack_accuracy", "test_accuracy", "test_accuracy_range", "clean_test_accuracy", "training_loss",
           "client_accuracy", "epsilon", "privacy", "seconds", "errors")
UTILITY_TITLES = {"test_accuracy": "federation's accuracy (held-out digits)",
                  "client_accuracy": "clients' test accuracy", "training_loss": "federation's training loss"}


def plain(row: dict) -> dict:
    """A row without its images, JSON-ready (ε = ∞ written as null)."""
    out = {k: v for k, v in row.items() if not isinstance(v, np.ndarray) and k not in ("thumbnail", "originals")}
    if isinstance(out.get("epsilon"), float) and math.isinf(out["epsilon"]):
        out["epsilon"] = None
    return out


# Attack accuracy is a share, drawn on its whole scale: there 0.7 to 0.85 reads as the noise between seeds it
# is, not the swing an axis from 0.7 to 0.85 made of it (`sweep-topk-pli`, where top-k protects nothing)
SHARE_RANGE = [-0.03, 1.05]


LOSS_SPAN = 0.1  # a training-loss axis spans at least this share of its largest loss (and at least 0.01)


def utility_range(rows: list[dict], name: str) -> list[float] | None:
    """An accuracy axis stays within [0, 1] (plotly's autorange spread two equal accuracies of 0.96 over
    0.33–1.69, matplotlib's drew 0.98 to 1.0 as the whole height), with room to see the differences. A
    training loss spans at least a tenth of its largest value: the libraries drew cafe's pruning sweep,
    0.3903 to 0.3917, as the axis's whole height, a defense that costs nothing read as a steep cost."""
    values = [v for v in (utility_of(r)[1] for r in rows) if v is not None]
    if not values:
        return None
    lo, hi = min(values), max(values)
    if name == "training_loss":
        pad = max(0.05 * (hi - lo), (max(LOSS_SPAN * hi, 0.01) - (hi - lo)) / 2)
        return [max(0.0, lo - pad), hi + pad]
    pad = max(0.05, 0.15 * (hi - lo))
    return [max(0.0, lo - pad), min(1.0, hi + pad)]


def _with_margin(span: list[float]) -> tuple[float, float]:
    """matplotlib clips a marker drawn on an axis's limit: a point at accuracy 1.0 keeps its whole circle."""
    pad = 0.03 * (span[1] - span[0])
    return span[0] - pad, span[1] + pad


def privacy_key(rows: list[dict]) -> str:
    return "attack_accuracy" if any(r.get("attack_accuracy") is not None for r in rows) else "psnr"


TABLE_FIGURES = ("psnr", "ssim", "lpips", "recognisable", "attack_accuracy", "test_accuracy", "clean_test_accuracy",
                 "training_loss", "client_accuracy", "privacy", "runs", "failed")


def point_words(r: dict, axes: list[str], base: dict | None = None) -> str:
    """A point named as the sidebar names its settings: 'noise σ = 0.0001, clip norm off', not its code names
    'dp_sigma=0.0001, dp_clip=0' (the table, the chart's hover and a picked point's pictures say the same)."""
    if not axes or base is None or r.get("undefended"):
        return r["label"]
    return ", ".join(setting_words(base, a, r.get(a)) for a in axes)


def shown_table(rows: list[dict], axes: list[str], base: dict | None = None) -> tuple[list[dict], str]:
    """The sweep's table as the page shows it, and a line for what every point shares. Each point named in
    words ('noise σ = 0.0001, clip norm off', not 'dp_sigma=0.0001, dp_clip=0'); a figure no point has left
    out; the runs per point, the failures and the federation's accuracy without the defense, the same on every
    row, said once under the table — with them the privacy column ran off a 1280-px screen's edge."""
    keep = [k for k in TABLE_FIGURES if any(r.get(k) is not None for r in rows)]
    said = []
    if rows and len({r.get("runs") for r in rows}) == 1 and len({r.get("failed") for r in rows}) == 1:
        runs, failed = rows[0].get("runs"), rows[0].get("failed")
        said.append((f"medians over {runs} runs a point" if runs != 1 else "one run a point")
                    + (", none failed" if not failed else f", {failed} failed at each"))
        keep = [k for k in keep if k not in ("runs", "failed")]
    clean = {r.get("clean_test_accuracy") for r in rows}
    if "clean_test_accuracy" in keep and len(clean) == 1:
        said.append(f"the federation's accuracy without the defense: {next(iter(clean)):.2%}")
        keep.remove("clean_test_accuracy")
    table = [{"label": point_words(r, axes, base), **{k: plain(r).get(k) for k in keep}} for r in rows]
    line = "; ".join(said)
    return table, line[:1].upper() + line[1:] + ("." if said else "")


def sweep_csv(rows: list[dict], axes: list[str]) -> str:
    buf = io.StringIO()
    cols = list(COLUMNS[:3]) + axes + list(COLUMNS[3:])
    w = csv.writer(buf)
    w.writerow(cols)
    for r in rows:
        p = plain(r)
        w.writerow(["" if p.get(c) is None else (json.dumps(p[c]) if isinstance(p[c], (list, dict)) else p[c])
                    for c in cols])
    return buf.getvalue()


SERIES_COLORS = ("#2471a3", "#8e44ad", "#16a085", "#d35400", "#7f8c8d", "#c0392b")


def named_series(rows: list[dict], axes: list[str], base: dict | None = None) -> list[tuple[str, list[dict]]]:
    """The defended rows as lines: one per value of the second axis (or one line), in first-axis order, each
    named in words from the sweep's base scenario ('clip norm off', 'clip norm = 4'; without it, the codes)."""
    rows = [r for r in rows if not r["undefended"]]
    if len(axes) < 2:
        return [("", sorted(rows, key=lambda r: (r.get(axes[0]) is None, r.get(axes[0]))))] if axes else []
    out = []
    for v in dict.fromkeys(r.get(axes[1]) for r in rows):
        mine = sorted((r for r in rows if r.get(axes[1]) == v), key=lambda r: r.get(axes[0]))
        out.append((setting_words(base or {}, axes[1], v), mine))
    return out


def has_epsilon(row: dict) -> bool:
    """Whether a point has a formal ε (finite): only those have a place on an axis of ε (the undefended point,
    and noise without clipping, have none)."""
    eps = row.get("epsilon")
    return isinstance(eps, (int, float)) and not isinstance(eps, bool) and math.isfinite(eps)


def epsilon_title(base: dict | None) -> str:
    """An axis of ε in words, with its δ where the sweep's scenario sets one."""
    delta = (base or {}).get("dp_delta")
    return f"formal ε (δ = {value_text(delta)}; lower is more private)" if delta else \
        "formal ε (δ as set; lower is more private)"


def knob_name(axis: str, base: dict | None) -> str | None:
    """The swept protocol knob's name in words ('batch size', 'local steps') when the sweep varies a knob of
    the protocol instead of a defense; None for a defense's sweep. The charts are named after it."""
    return param_label(base, axis) if (base or {}).get("defense") == "none" else None


def axis_title(axis: str, base: dict | None = None) -> str:
    """'noise σ (dp_sigma)': the swept parameter as the sidebar names it, with the code the sweep's summary
    and the CLI use."""
    label = param_label(base or {}, axis)
    return axis if label == axis else f"{label} ({axis})"


def one_figure_line(axis: str, base: dict | None = None) -> str:
    """Why a sweep's utility line is flat (`Sweep.utility_is_one_figure`): said under every chart of it — the
    page, the presenter, the CLI's rows and tradeoff.png — since a flat line otherwise reads as "costs nothing"."""
    return (f"The federation's accuracy is one figure at every point: its training does not take the "
            f"{knob_name(axis, base) or axis_title(axis, base)} — only the round the attack observes does.")


def equations_per_point(axis: str, values, base: dict | None) -> list[float] | None:
    """Each swept value's numbers per unknown pixel value in DLG's LeNet gradient, where a FedSGD sweep falls
    below two at some point (the Lab's note before Run, catalog.too_few_equations) — `sweep-batch-dlg`'s batch
    of 16 holds 1.04. None where the count does not move with the axis or never comes near."""
    if not base or base.get("protocol") != "fedsgd":
        return None
    ratios = [equations_per_unknown({**base, axis: value}) for value in values]
    if None in ratios or min(ratios) >= ENOUGH_EQUATIONS or max(ratios) - min(ratios) < 0.01:
        return None
    return ratios


def equations_line(axis: str, values, base: dict | None) -> str | None:
    """Under the sweep's chart (page and CLI): each point's count, so a class sees why the attack gives out where
    it does (equations_per_point); None where there is nothing to say."""
    ratios = equations_per_point(axis, values, base)
    if ratios is None:
        return None
    each = ", ".join(f"{value_text(v)}: {r:.2f}" for v, r in zip(values, ratios))
    return (f"Numbers per unknown pixel value in the LeNet's gradient, by {axis_title(axis, base)}: {each}. Below 1 "
            f"many images give the same gradient; DLG needed about 2 to bring its images back.")


def _place_tags(ax, tags: list, size: float = 6.5) -> None:
    """Each point's label beside it, moved down a line while it would cover one already placed: equal figures
    (prior=restored,auto) printed theirs over each other, and near ones (pruning 0.1 and 0.3 at 12.6 and
    12.5 dB) overlapped."""
    scale = ax.figure.dpi / 72  # points to pixels
    placed = []  # (left, bottom, right, top) in pixels
    for tag, u, leak, color in tags:
        x, y = ax.transData.transform((u, leak))
        x0, width, height = x + 6 * scale, 0.62 * size * len(tag) * scale, 8 * scale
        lift = 4
        while any(x0 < r and x0 + width > lf and y + lift * scale < t and y + lift * scale + height > b
                  for lf, b, r, t in placed) and lift > -80:
            lift -= 8
        placed.append((x0, y + lift * scale, x0 + width, y + lift * scale + height))
        ax.annotate(tag, (u, leak), textcoords="offset points", xytext=(6, lift), fontsize=size, color=color)


def tradeoff_png(rows: list[dict], title: str, axes: list[str] | None = None, log: bool = False,
                 x: str = "strength", base: dict | None = None, one_figure: bool = False) -> bytes:
    """Two panels. Left: leakage (median PSNR, or attack accuracy) and utility against the swept strength —
    where the knee is. Right: leakage against utility, error bars over seeds × images, the undefended
    point a star, the Pareto front ringed, ε beside the points that have one. `one_figure`: the utility
    cannot move with the swept value (`Sweep.utility_is_one_figure`), said under the chart."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    axes = axes or []
    key = privacy_key(rows)
    ylabel = "attack accuracy" if key == "attack_accuracy" else "reconstruction PSNR, dB (median)"
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5), dpi=110)
    clean = next((r for r in rows if r["undefended"]), None)
    series = named_series(rows, axes, base)
    numeric = bool(axes) and all(isinstance(r.get(axes[0]), (int, float)) and not isinstance(r.get(axes[0]), bool)
                                 for _, rs in series for r in rs)
    uname = next((utility_of(r)[0] for r in rows if utility_of(r)[1] is not None), None)
    twin = left.twinx() if uname else None
    by_epsilon = x == "epsilon"
    every_series = series  # the right panel places every point, whatever the left one's x-axis
    if by_epsilon:  # only points with a formal guarantee have a place on this axis
        series = [(n, sorted((r for r in rs if has_epsilon(r)), key=lambda r: r["epsilon"])) for n, rs in series]
        numeric, log = True, True
        if not any(rs for _, rs in series):
            left.text(0.5, 0.5, "no point has a formal ε:\nonly dp-gaussian with dp_clip > 0 gives one",
                      ha="center", va="center", transform=left.transAxes)
        else:
            off = sum(1 for _, rs in every_series for r in rs if not r["undefended"] and not has_epsilon(r))
            if off:
                left.text(0.02, 0.02, f"{off} point{'s' if off > 1 else ''} with no formal ε: on the right only",
                          ha="left", va="bottom", fontsize=7, color="#555", transform=left.transAxes)
    for i, (name, rs) in enumerate(series):
        if not rs:  # a series with no formal ε, on the ε axis: its colour stays its own on the right
            continue
        color = SERIES_COLORS[i % len(SERIES_COLORS)]
        xs = [(r["epsilon"] if by_epsilon else r.get(axes[0])) if numeric else j for j, r in enumerate(rs)]
        ys = [r.get(key) for r in rs]
        left.plot(xs, ys, "o-", color=color, label=f"leakage {name}".strip())
        if twin is not None:
            twin.plot(xs, [utility_of(r)[1] for r in rs], "s--", color=color, alpha=0.55, markersize=5,
                      label=f"utility {name}".strip())
        if not numeric:
            left.set_xticks(range(len(rs)), [value_text(r.get(axes[0])) for r in rs])
    if clean is not None and clean.get(key) is not None:
        left.axhline(clean[key], color="#c0392b", linewidth=1, linestyle=":", label="leakage with no defense")
    if key == "psnr":
        left.axhline(20, color="#e67e22", linestyle="--", linewidth=1, label="20 dB: recognisable")
    if numeric and log and any(rs for _, rs in series):
        xs = [r["epsilon"] if by_epsilon else r.get(axes[0]) for _, rs in series for r in rs]
        lo, hi = min(xs), max(xs)
        if lo == 0:
            linthresh = min([x for x in xs if x] or [1])
            left.set_xscale("symlog", linthresh=linthresh)
            left.set_xlim(-0.3 * linthresh, max(hi, linthresh) * 1.3)  # not to "-10^-2": nothing is swept below 0
        else:
            left.set_xscale("log")
            left.set_xlim(lo / 1.3, hi * 1.3)
        ticks = sorted(set(xs))
        if len(ticks) <= 12:  # the swept values (or the points' ε) themselves, not decades ("3×10^0 4×10^0")
            left.set_xticks(ticks, [three_digits(t) if by_epsilon else value_text(t) for t in ticks])
            left.minorticks_off()
    if key == "attack_accuracy":
        left.set_ylim(*SHARE_RANGE)
    left.set_xlabel(epsilon_title(base) if by_epsilon else (axis_title(axes[0], base) if axes else ""))
    left.set_ylabel(ylabel)
    if twin is not None:
        twin.set_ylabel(UTILITY_TITLES[uname], color="#555")
        if utility_range(rows, uname):
            twin.set_ylim(*_with_margin(utility_range(rows, uname)))
        if clean is not None and utility_of(clean)[1] is not None:
            # named in the legend: unnamed, a grey dotted line across the chart read as nothing in particular
            twin.axhline(utility_of(clean)[1], color="#555", linewidth=0.8, linestyle=":", label="utility with no defense")
    handles = left.get_legend_handles_labels()
    if twin is not None:
        more = twin.get_legend_handles_labels()
        handles = (handles[0] + more[0], handles[1] + more[1])
    left.legend(*handles, fontsize=7, loc="best", framealpha=0.9)
    left.grid(alpha=0.3)
    knob = knob_name(axes[0], base) if axes else None
    left.set_title("leakage and utility against " + ("the formal ε" if by_epsilon else knob or "the defense's strength"),
                   fontsize=9)

    usable = [r for r in rows if r.get(key) is not None and utility_of(r)[1] is not None]
    if not usable:
        right.text(0.5, 0.5, "no point has both a leakage and a utility figure", ha="center", va="center")
    else:
        front = set(pareto(usable, key))
        tags = []  # (text, u, leak, colour): placed once the axes' ranges are set, clear of each other
        for i, (name, rs) in enumerate(every_series):
            color = SERIES_COLORS[i % len(SERIES_COLORS)]
            rs = [r for r in rs if r in usable]
            for r in rs:
                u, leak = utility_of(r)[1], r[key]
                lo_hi = r.get("psnr_range") if key == "psnr" else None
                urange = r.get("test_accuracy_range") if uname == "test_accuracy" else None
                right.errorbar(u, leak, yerr=None if not lo_hi else [[leak - lo_hi[0]], [lo_hi[1] - leak]],
                               xerr=None if not urange else [[u - urange[0]], [urange[1] - u]], capsize=2,
                               marker="o", color=color, linestyle="none", markersize=6, alpha=0.9)
                if r["index"] in front:
                    right.plot(u, leak, "o", markersize=13, markerfacecolor="none", markeredgecolor="black")
                eps = r.get("epsilon")
                tag = value_text(r.get(axes[0])) if axes else r["label"]
                if isinstance(eps, float) and math.isfinite(eps):
                    tag += f" (ε={three_digits(eps)})"
                tags.append((tag, u, leak, color))
            right.plot([], [], "o", color=color, label=name or "defended")
        if clean is not None and clean in usable:
            right.plot(utility_of(clean)[1], clean[key], "*", markersize=16, color="#c0392b", label="no defense")
        right.plot([], [], "o", markersize=11, markerfacecolor="none", markeredgecolor="black", label="Pareto front")
        if key == "psnr":
            right.axhline(20, color="#e67e22", linestyle="--", linewidth=1)
        right.set_xlabel(UTILITY_TITLES[uname] + (" (lower is better)" if uname == "training_loss" else ""))
        right.set_ylabel(ylabel)
        if utility_range(usable, uname):
            right.set_xlim(*_with_margin(utility_range(usable, uname)))
        if key == "attack_accuracy":
            right.set_ylim(*SHARE_RANGE)
        _place_tags(right, tags)
        right.legend(fontsize=7, loc="best")
        right.grid(alpha=0.3)
        corner = "lower-left" if uname == "training_loss" else "lower-right"
        right.set_title(f"privacy against utility ({corner} is better)", fontsize=9)
    fig.suptitle(title, fontsize=10)
    # under the chart, as the page says them: the picture travels without the page's captions
    notes = ([one_figure_line(axes[0], base)] if one_figure and axes else []) + \
        [textwrap.fill(flat, 190) for flat in [flat_utility(rows)] if flat]  # cafe-faces: a loss that cannot rise
    if notes:
        said = "\n".join(notes)
        fig.text(0.5, 0.01, said, ha="center", va="bottom", fontsize=8, color="#555")
        fig.tight_layout(rect=(0, 0.04 * (said.count("\n") + 1), 1, 1))
    else:
        fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def strip_figure(r: dict, key: str) -> str:
    """A strip picture's figure; the no-break space keeps "5.6 dB" whole when a narrow caption wraps."""
    return f"{r[key]:.0%}" if key == "attack_accuracy" else f"{r['psnr']:.1f}\u00a0dB"


def strip_series(rows: list[dict], axes: list[str], base: dict | None = None) -> list[tuple[str, list]]:
    """The strip as the page and strip.png show it: per line of the sweep (one, or one per value of a second
    axis), its name and its pictures with their captions — the private image, the undefended point, then the
    first run's first image at each strength, in order ('0.01 · 15.0 dB')."""
    pics = [r for r in rows if r.get("thumbnail") is not None and len(r["thumbnail"])]
    if not pics or not axes or pics[0].get("originals") is None:
        return []
    key = privacy_key(rows)
    clean = next((r for r in pics if r["undefended"]), None)
    head = [("the private image", pics[0]["originals"][0])]
    if clean is not None:
        head.append((f"no defense · {strip_figure(clean, key)}", clean["thumbnail"][0]))
    return [(name, head + [(f"{value_text(r.get(axes[0]))} · {strip_figure(r, key)}", r["thumbnail"][0])
                           for r in series])
            for name, series in named_series(pics, axes, base)]


def strip_png(rows: list[dict], axes: list[str], title: str, base: dict | None = None) -> bytes | None:
    """strip.png: the page's strip — each picture over its caption, a row per line of the sweep — above what
    it shows (the sweep, the swept setting left to right)."""
    from .artifacts import png_bytes
    from .captions import captioned, labelled_row
    lines = strip_series(rows, axes, base)
    if not lines:
        return None
    blocks = [labelled_row([img for _, img in items], [caption for caption, _ in items], name)
              for name, items in lines]
    width = max(b.shape[1] for b in blocks)
    picture = np.concatenate([np.pad(b, ((0, 0), (0, width - b.shape[1]), (0, 0)), constant_values=255)
                              for b in blocks])
    return png_bytes(captioned(picture, [title, strip_caption(axes[0], base)]))


def strip_caption(axis: str, base: dict | None = None) -> str:
    """What the strip shows, said under it on the page and in strip.png."""
    return (f"Left to right: {axis_title(axis, base)}. Each picture is the first image of the point's first run; "
            f"its figure, the point's median over all its runs.")


SWEEP_FILES = ("sweep.csv", "sweep.json", "tradeoff.png", "strip.png")  # write_all's: checked before a sweep


def write_all(out_dir: str, rows: list[dict], axes: list[str], title: str, meta: dict, log: bool = False,
              x: str = "strength", base: dict | None = None, one_figure: bool = False) -> list[str]:
    os.makedirs(out_dir, exist_ok=True)
    files = {"sweep.csv": sweep_csv(rows, axes).encode(),
             "sweep.json": json.dumps({**meta, "utility_is_one_figure": one_figure, "rows": [plain(r) for r in rows]},
                                      indent=2).encode(),
             "tradeoff.png": tradeoff_png(rows, title, axes, log, x, base, one_figure)}
    strip = strip_png(rows, axes, title, base)
    if strip is not None:
        files["strip.png"] = strip
    for name, data in files.items():
        with open(os.path.join(out_dir, name), "wb") as fh:
            fh.write(data)
    return [os.path.join(out_dir, n) for n in files]
