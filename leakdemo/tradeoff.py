"""What a sweep leaves behind: sweep.csv, sweep.json, tradeoff.png (privacy against utility, the Pareto
front marked) and strip.png (the reconstruction at each strength: the picture people remember)."""
from __future__ import annotations

import csv
import io
import json
import math
import os

import numpy as np

from .sweep import pareto, utility_of

COLUMNS = ("index", "label", "undefended", "runs", "failed", "psnr", "psnr_range", "ssim", "lpips", "recognisable",
           "attack_accuracy", "test_accuracy", "test_accuracy_range", "clean_test_accuracy", "training_loss",
           "client_accuracy", "epsilon", "privacy", "seconds", "errors")
UTILITY_TITLES = {"test_accuracy": "test accuracy of the federation (held-out digits)",
                  "client_accuracy": "clients' test accuracy", "training_loss": "federation's training loss"}


def plain(row: dict) -> dict:
    """A row without its images, JSON-ready (ε = ∞ written as null)."""
    out = {k: v for k, v in row.items() if not isinstance(v, np.ndarray) and k not in ("thumbnail", "originals")}
    if isinstance(out.get("epsilon"), float) and math.isinf(out["epsilon"]):
        out["epsilon"] = None
    return out


def privacy_key(rows: list[dict]) -> str:
    return "attack_accuracy" if any(r.get("attack_accuracy") is not None for r in rows) else "psnr"


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


def tradeoff_png(rows: list[dict], title: str) -> bytes:
    """Privacy (median PSNR, or attack accuracy) against utility; error bars over seeds × images; the
    undefended point a star; the Pareto front joined; each point labelled with its setting."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    key = privacy_key(rows)
    usable = [r for r in rows if r.get(key) is not None and utility_of(r)[1] is not None]
    fig, ax = plt.subplots(figsize=(8, 5.2), dpi=110)
    if not usable:
        ax.text(0.5, 0.5, "no point has both a privacy and a utility figure", ha="center", va="center")
    else:
        uname = utility_of(usable[0])[0]
        front = set(pareto(usable, key))
        for r in usable:
            u = utility_of(r)[1]
            leak = r[key]
            lo_hi = r.get("psnr_range") if key == "psnr" else None
            yerr = None if not lo_hi else [[leak - lo_hi[0]], [lo_hi[1] - leak]]
            urange = r.get("test_accuracy_range") if uname == "test_accuracy" else None
            xerr = None if not urange else [[u - urange[0]], [urange[1] - u]]
            style = dict(marker="*", markersize=16, color="#c0392b") if r["undefended"] else \
                dict(marker="o", markersize=8, color="#2471a3" if r["index"] in front else "#95a5a6")
            ax.errorbar(u, leak, yerr=yerr, xerr=xerr, capsize=3, linestyle="none", **style)
            eps = r.get("epsilon")
            tag = r["label"] + ("" if eps is None or (isinstance(eps, float) and math.isinf(eps))
                                else f"\nε={eps:.3g}")
            ax.annotate(tag, (u, leak), textcoords="offset points", xytext=(7, 5), fontsize=7, color="#34495e")
        fr = sorted((utility_of(r)[1], r[key]) for r in usable if r["index"] in front)
        if len(fr) > 1:
            ax.plot([f[0] for f in fr], [f[1] for f in fr], color="#2471a3", linewidth=1, alpha=0.6,
                    label="Pareto front (less leakage, more utility)")
        if key == "psnr":
            ax.axhline(20, color="#e67e22", linestyle="--", linewidth=1, label="20 dB: recognisable")
        ax.set_xlabel(UTILITY_TITLES[uname] + (" (lower is better)" if uname == "training_loss" else ""))
        ax.set_ylabel("attack accuracy" if key == "attack_accuracy" else "reconstruction PSNR, dB (median over runs)")
        ax.legend(loc="best", fontsize=8)
        ax.grid(alpha=0.3)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def strip_png(rows: list[dict]) -> bytes | None:
    """Original, then the first run's reconstruction at each point in order (the first image of each)."""
    from .artifacts import grid, png_bytes
    pics = [r for r in rows if r.get("thumbnail") is not None and len(r["thumbnail"])]
    if not pics or pics[0].get("originals") is None:
        return None
    return png_bytes(grid([[pics[0]["originals"][0]] + [r["thumbnail"][0] for r in pics]], cell=96))


def write_all(out_dir: str, rows: list[dict], axes: list[str], title: str, meta: dict) -> list[str]:
    os.makedirs(out_dir, exist_ok=True)
    files = {"sweep.csv": sweep_csv(rows, axes).encode(),
             "sweep.json": json.dumps({**meta, "rows": [plain(r) for r in rows]}, indent=2).encode(),
             "tradeoff.png": tradeoff_png(rows, title)}
    strip = strip_png(rows)
    if strip is not None:
        files["strip.png"] = strip
    for name, data in files.items():
        with open(os.path.join(out_dir, name), "wb") as fh:
            fh.write(data)
    return [os.path.join(out_dir, n) for n in files]
