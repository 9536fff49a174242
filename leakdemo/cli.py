"""python -m leakdemo list | run PRESET_OR_JSON [--set k=v ...] | bench — see README for the contract."""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from . import catalog
from .errors import LeakdemoError
from .events import Failed, Finished, Progress, Started, to_json
from .scenario import Scenario, load, presets


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, like every other bad input
        print(f"error: {message} (see `python -m leakdemo --help`)", file=sys.stderr)
        raise SystemExit(2)


def parse_sets(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs or []:
        if "=" not in pair:
            raise LeakdemoError(f"--set: expected name=value, got {pair!r}")
        k, v = pair.split("=", 1)
        out[k.strip()] = v.strip()
    return out


# ---------------------------------------------------------------- list


def cmd_list(args) -> int:
    if args.json:
        d = catalog.describe()
        d["presets"] = [{"name": p.name, "title": p.title, "description": p.description} for p in presets().values()]
        print(json.dumps(d, indent=2))
        return 0
    d = catalog.describe()
    for section in ("protocols", "attacks", "defenses"):
        print(section.upper())
        for c in d[section]:
            extra = f"   [with: {', '.join(c['protocols'])}]" if "protocols" in c else ""
            print(f"  {c['name']:<14} {c['title']}{extra}")
            print(f"  {'':<14} {c['summary']}")
            for p in c["params"]:
                print(f"  {'':<16}{_param_line(p)}")
        print()
    print("RUN")
    for p in d["run"]:
        print(f"  {'':<2}{_param_line(p)}")
    print("\nPRESETS")
    for p in presets().values():
        print(f"  {p.name:<16} {p.title}")
    return 0


def _param_line(p: dict) -> str:
    if p["type"] == "choice":
        rng = "{" + "|".join(p["choices"]) + "}"
    elif p["type"] in ("int", "float"):
        rng = f"[{p['min']:g}, {p['max']:g}]"
    else:
        rng = p["type"]
    return f"{p['name']}={p['default']!s:<10} {rng:<26} {p['help']}"


# ---------------------------------------------------------------- run


def _bar(ev: Progress, width: int = 28) -> str:
    frac = ev.iteration / max(ev.total, 1)
    filled = int(frac * width)
    psnr = f"{ev.psnr:5.1f} dB" if ev.psnr is not None else "   -   "
    return (f"\r[{'#' * filled}{'.' * (width - filled)}] {ev.iteration}/{ev.total}  PSNR {psnr}  "
            f"loss {ev.loss if ev.loss is not None else float('nan'):.3g}  {ev.seconds:5.1f}s  ETA {ev.eta or 0:5.1f}s ")


def execute(scenario: Scenario, jsonl: bool = False, out_dir: str | None = None, quiet: bool = False):
    """Run a scenario with CLI output; returns the Finished event or raises LeakdemoError."""
    from .runner import Run
    run = Run(scenario)
    tty = sys.stderr.isatty() and not quiet
    started = None
    try:
        for ev in run.events():
            if jsonl:
                print(json.dumps(to_json(ev)), flush=True)
            if isinstance(ev, Started):
                started = ev
                if not jsonl and not quiet:
                    for w in scenario.warnings:
                        print(f"warning: {w}", file=sys.stderr)
            elif isinstance(ev, Progress):
                if tty and not jsonl:
                    print(_bar(ev), end="", file=sys.stderr, flush=True)
                if ev.note and not jsonl and not quiet:
                    print(f"\n{ev.note}" if tty else ev.note, file=sys.stderr)
            elif isinstance(ev, Failed):
                raise LeakdemoError(ev.message)
            elif isinstance(ev, Finished):
                if tty and not jsonl:
                    print(file=sys.stderr)
                if out_dir:
                    from .artifacts import write_all
                    files = write_all(out_dir, scenario.to_json(), started.originals, ev, run.keyframes.items)
                    if not jsonl and not quiet:
                        print(f"wrote {', '.join(files)}", file=sys.stderr)
                return ev
    except KeyboardInterrupt:
        run.stop()
        raise
    raise LeakdemoError("the run ended without a result")


def _summary(ev: Finished) -> str:
    m = ev.metrics
    lp = f"{m['lpips']:.3f}" if m["lpips"] is not None else "n/a"
    la = f"{m['label_accuracy']:.2f}" if m["label_accuracy"] is not None else "n/a"
    word = "Finished" if ev.status == "finished" else "Stopped"
    return (f"{word}: PSNR {m['psnr']:.2f} dB, SSIM {m['ssim']:.3f}, LPIPS {lp}, label accuracy {la}, "
            f"{ev.iterations} iterations in {ev.seconds:.1f} s"
            + ("" if m.get("matching_rate") is None else f", matching across epochs {m['matching_rate']:.0%}")
            + "".join(f"\n  {line}" for line in _vfl_lines(m) + _logit_lines(m)))


def _logit_lines(m: dict) -> list[str]:
    """Logit sharing extras: the PLI paper's attack accuracy (and TBI's beside it), and client accuracy."""
    lines = []
    if "attack_accuracy" in m:
        text = (f"attack accuracy {m['attack_accuracy']:.2f} ({sum(m['success'])}/{len(m['success'])} target "
                f"classes), SSIM to the class mean {m['ssim_to_mean']:.3f}; PSNR/SSIM above are against each "
                "target class's mean private image")
        if "baseline_attack_accuracy" in m:
            text += (f"\n  TBI baseline alongside: attack accuracy {m['baseline_attack_accuracy']:.2f}, SSIM to "
                     f"the class mean {m['baseline_ssim_to_mean']:.3f}")
        lines.append(text)
    u = m.get("utility")
    if u and "steps" not in u:
        def mean(v):
            return sum(v) / len(v)
        text = f"client test accuracy {mean(u['defended']):.3f}"
        text += f" with this defense, {mean(u['clean']):.3f} without" if "clean" in u else " (no defense)"
        lines.append(text)
    return lines


def _vfl_lines(m: dict) -> list[str]:
    """Vertical FL extras: how well Steps I–II did, and what the defense costs training."""
    lines = []
    if "step1_error" in m:
        lines.append(f"Step I error {m['step1_error']:.2g}, Step II error {m['step2_error']:.2g} "
                     "(relative to the true per-sample gradients / first-FC inputs)")
    if "sample_ids" in m:
        lines.append(f"scored on the {len(m['sample_ids'])} samples of the one batch the attack saw")
    u = m.get("utility")
    if u and "steps" in u:
        def span(c):
            return f"{c[0]:.3f} → {sum(c[-10:]) / len(c[-10:]):.3f}"
        text = f"training loss over {u['steps']} SGD steps (lr {u['lr']:g}): {span(u['defended'])}"
        text += f" with this defense, {span(u['clean'])} without" if "clean" in u else " (no defense)"
        lines.append(text)
    return lines


def cmd_run(args) -> int:
    overrides = parse_sets(args.set)
    if args.device:
        overrides["device"] = args.device
    scenario = load(args.scenario, overrides)
    ev = execute(scenario, jsonl=args.jsonl, out_dir=args.out)
    if not args.jsonl:
        print(_summary(ev))
        if ev.metrics.get("note"):
            print(f"  (the attack {ev.metrics['note']})")
        if ev.metrics.get("lpips_note"):
            print(f"  ({ev.metrics['lpips_note']})")
    return 0


# ---------------------------------------------------------------- bench


def bench_one(scenario: Scenario) -> dict:
    """Time one run: seconds to the first frame, iterations per second, seconds to 20/30 dB, final PSNR."""
    from .runner import Run
    t_start = time.perf_counter()
    first_frame = t20 = t30 = None
    for ev in Run(scenario).events():
        if isinstance(ev, Failed):
            raise LeakdemoError(ev.message)
        if isinstance(ev, Progress):
            if first_frame is None:
                first_frame = time.perf_counter() - t_start
            if ev.psnr is not None and ev.psnr >= 20 and t20 is None:
                t20 = ev.seconds
            if ev.psnr is not None and ev.psnr >= 30 and t30 is None:
                t30 = ev.seconds
        if isinstance(ev, Finished):
            return {"first_frame_s": first_frame, "it_per_s": ev.iterations / max(ev.seconds, 1e-9),
                    "to_20db_s": t20, "to_30db_s": t30, "psnr": ev.metrics["psnr"], "ssim": ev.metrics["ssim"],
                    "lpips": ev.metrics["lpips"], "label_accuracy": ev.metrics["label_accuracy"], "seconds": ev.seconds,
                    "iterations": ev.iterations, "matching_rate": ev.metrics.get("matching_rate"),
                    "attack_accuracy": ev.metrics.get("attack_accuracy"),
                    "baseline_attack_accuracy": ev.metrics.get("baseline_attack_accuracy")}
    raise LeakdemoError("the run ended without a result")


def _fmt(v, spec=".1f"):
    return "-" if v is None else format(v, spec)


def cmd_bench(args) -> int:
    import torch
    overrides = parse_sets(args.set)
    if args.device:
        overrides["device"] = args.device
    names = args.presets or [p.name for p in presets().values() if p.standard]
    image_lists = [s.strip() for s in args.images.split(",")] if args.images else [None]
    rows = []
    print(f"leakdemo bench — torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"device {overrides.get('device', 'auto')}; PSNR is standard (peak 1, images in [0, 1])")
    header = f"{'preset':<16}{'images':<22}{'first frame s':>14}{'it/s':>8}{'to 20 dB s':>12}{'to 30 dB s':>12}{'final dB':>10}{'LPIPS':>7}{'total s':>9}"
    print(header)
    for name in names:
        for img in image_lists:
            ov = dict(overrides)
            if img:
                ov["images"] = img
            sc = load(name, ov)
            r = bench_one(sc)
            r.update(preset=name, images=sc["images"] or "(seeded)")
            rows.append(r)
            print(f"{name:<16}{r['images'][:21]:<22}{_fmt(r['first_frame_s'], '.2f'):>14}{r['it_per_s']:>8.1f}"
                  f"{_fmt(r['to_20db_s']):>12}{_fmt(r['to_30db_s']):>12}{r['psnr']:>10.1f}{_fmt(r['lpips'], '.3f'):>7}{r['seconds']:>9.1f}"
                  + ("" if r["matching_rate"] is None else f"   matching {r['matching_rate']:.0%}")
                  + ("" if r["attack_accuracy"] is None else f"   attack accuracy {r['attack_accuracy']:.2f}")
                  + ("" if r["baseline_attack_accuracy"] is None else f" (TBI {r['baseline_attack_accuracy']:.2f})"),
                  flush=True)
        if len(image_lists) > 1:
            mine = [r for r in rows if r["preset"] == name]
            t30 = [r["to_30db_s"] for r in mine if r["to_30db_s"] is not None]
            print(f"{'':<16}{'median':<22}{'':>14}{'':>8}{'':>12}{_fmt(statistics.median(t30) if t30 else None):>12}"
                  f"{statistics.median(r['psnr'] for r in mine):>10.1f}   "
                  f"({sum(r['psnr'] >= 30 for r in mine)}/{len(mine)} reach 30 dB)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, indent=2)
    return 0


# ---------------------------------------------------------------- entry point


def main(argv=None) -> int:
    ap = _Parser(prog="python -m leakdemo", description="leakdemo: watch federated learning leak training data.")
    sub = ap.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    p = sub.add_parser("list", help="protocols, attacks, defenses, presets and their parameters")
    p.add_argument("--json", action="store_true", help="print the catalog as JSON")
    p = sub.add_parser("run", help="run a preset or a scenario.json")
    p.add_argument("scenario", metavar="PRESET_OR_JSON")
    p.add_argument("--set", action="append", metavar="NAME=VALUE", help="override a parameter (repeatable)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"))
    p.add_argument("--out", metavar="DIR", help="write grid.png, progress.gif, metrics.json, scenario.json")
    p.add_argument("--jsonl", action="store_true", help="one JSON object per event on stdout")
    p = sub.add_parser("bench", help="speed and fidelity table of the standard presets on this machine")
    p.add_argument("presets", nargs="*", metavar="PRESET")
    p.add_argument("--set", action="append", metavar="NAME=VALUE")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"))
    p.add_argument("--images", help="comma-separated images: one run per image, with medians")
    p.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    args = ap.parse_args(argv)
    try:
        return {"list": cmd_list, "run": cmd_run, "bench": cmd_bench}[args.cmd](args)
    except LeakdemoError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
