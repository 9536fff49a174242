"""python -m leakdemo list | run PRESET_OR_JSON [--set k=v ...] | bench — see README for the contract."""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import sys
import time
from collections import Counter

from . import catalog, device, milestones, privacy, utility
from .errors import LeakdemoError, ParamError
from .events import Failed, Finished, Progress, Started, to_json
from .scenario import Scenario, load, presets, unknown_preset_hint
from .sweep import MAX_BATCH, MAX_SEEDS, MAX_WORKERS
from .artifacts import RUN_FILES
from .tradeoff import SWEEP_FILES
from .words import alike, clock, fixed, hint, meant_question, plural, small_figure, three_digits, value_text


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, like every other bad input
        typed = re.match(r"argument (.*?): invalid choice: '(.*?)' \(choose from (.*)\)$", message)
        if typed:  # `lst`, `--device gpu`: the one meant first, then argparse's choices without their quotes
            what, word, choices = typed[1], typed[2], [c.strip(" '") for c in typed[3].split(",")]
            meant = hint(alike(word, choices))
            message = (f"{word}: not a command{meant}; the commands are {', '.join(choices)}" if what == "COMMAND"
                       else f"{what}: must be one of {', '.join(choices)}, got {word}{meant}")
        ranged = re.match(r"argument (--[\w-]+): (must be .*)$", message)
        if ranged:  # an `integer` option's: what it takes is said, as any other value out of range says it
            message = f"{ranged[1]}: {ranged[2]}"
        print(f"error: {message}" + ("" if ranged else f" (see `{self.prog} --help`)"),  # the subcommand's own help
              file=sys.stderr)
        raise SystemExit(2)


def integer(low: int, high: int):
    """An option's type: a whole number in [low, high], refused with what it takes as the line is read; argparse's
    own `int` said "invalid int value: 'abc'", with no word of the range."""
    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer in [{low}, {high}], got {text!r}") from None
        if not low <= n <= high:
            raise argparse.ArgumentTypeError(f"must be an integer in [{low}, {high}], got {n}")
        return n
    return parse


NAMED_ALONE = ("--preset", "--sweep", "--scenario")  # flags a newcomer puts before what is named on its own


def each_once(words: list[str]) -> list[str]:
    """Names given spaced or comma-separated (`dlg idlg`, `dlg,idlg`), each once, in their order."""
    return list(dict.fromkeys(w.strip() for a in words for w in a.split(",") if w.strip()))


def _spaced_list(extra: list[str], argv: list[str]) -> str | None:
    """`--set images=coffee rocket`: the list as it should have been typed (--set images=coffee,rocket), or None;
    `--vary lr=0.1, 1` likewise."""
    for i, arg in enumerate(argv):
        if i == 0 or arg not in extra or arg.startswith("-") or "=" in arg or arg in presets():
            continue
        flag, _, glued = argv[i - 1].partition("=")
        if flag in ("--set", "--vary") and glued:  # --set=images=coffee rocket
            option, pair = flag, glued
        elif i >= 2 and argv[i - 2] in ("--set", "--vary"):  # --set images=coffee rocket
            option, pair = argv[i - 2], argv[i - 1]
        else:
            continue
        if "=" not in pair:
            continue
        words = [arg]
        for more in argv[i + 1:]:
            if more not in extra or more.startswith("-") or "=" in more:
                break
            words.append(more)
        return f"{option} " + ",".join([pair.rstrip(","), *(w.strip(",") for w in words)])
    return None


def _unknown(extra: list[str], cmd: str, argv: list[str]) -> str:
    """argparse's message for arguments it does not know, plus the fix when one is a parameter's name:
    `run dlg --iterations 50` means `--set iterations=50`; `run dlg --set seed=1 iterations=50` means a second
    --set; `run --preset dlg` means `run dlg` — and with both (`sweep --preset dlg --defense prune --vary …`) the
    whole line as it should have been typed."""
    extra = [a for a in extra if a]  # `run dlg --preset=` left its empty value
    message = f"unrecognized arguments: {' '.join(extra)}"
    if cmd not in ("run", "sweep", "bench"):
        return message
    names = catalog.all_param_names()
    flag = next((a for a in extra if a in NAMED_ALONE), None)
    retyped, sets, bare, i, option = [], [], [], 0, "--set"
    while i < len(argv):
        arg, i = argv[i], i + 1
        name, glued, value = arg[2:].partition("=")
        name = name.replace("-", "_")
        if arg in NAMED_ALONE or not arg:
            continue
        if arg in extra and not arg.startswith("-") and arg.partition("=")[0].strip() in names and "=" in arg:
            bare.append(option)  # `--set data=folder folder=~/pics`: the second pair had no --set of its own
            retyped += [option, arg]
            continue
        if arg.startswith("--"):
            option = "--vary" if arg.partition("=")[0] == "--vary" else "--set"  # `--vary a=1,2 b=3,4`: two --vary
        if arg in extra and arg.startswith("--") and name in names:
            following = argv[i] if i < len(argv) else "--"
            if not glued and not following.startswith("--") and following not in presets():
                value, i = following, i + 1  # (`run --iterations 5 dlg`: argparse took "5" as the preset)
            sets.append(f"{name}={value or 'VALUE'}")
            retyped += ["--set", sets[-1]]
        else:
            retyped.append(arg)
    if flag:
        return f"{message}; name it without {flag}: python -m leakdemo {shlex.join(retyped)}"
    listed = _spaced_list(extra, argv)
    if listed:
        return f"{message}; a list is comma-separated, with no spaces: {listed}"
    if bare:
        said = " or ".join(dict.fromkeys(bare))
        return f"{message}; each parameter takes its own {said}: python -m leakdemo {shlex.join(retyped)}"
    if sets:
        return f"{message}; parameters are set with --set {sets[0]}"
    if cmd == "run" and any(a in presets() for a in extra):  # `run dlg idlg`
        return f"{message}; run takes one preset at a time (`python -m leakdemo bench` times several)"
    if cmd == "sweep" and any(a in presets() or a.startswith("sweep-") for a in extra):
        return f"{message}; sweep takes one sweep or preset at a time"
    return message


def parse_sets(pairs: list[str]) -> dict[str, str]:
    """`--set k=v ...` as a dict. A name set twice is refused, not settled silently by the last one:
    `--set seed=1 ... --set seed=2` in a long command line is a slip, and the run would not be the one meant."""
    out = {}
    for pair in pairs or []:
        if "=" not in pair or not pair.split("=", 1)[0].strip():
            raise LeakdemoError(f"--set: expected name=value, got {pair!r}")
        k, v = (x.strip() for x in pair.split("=", 1))
        if k in out and out[k] != v:
            raise LeakdemoError(f"--set: {k} is set twice ({k}={out[k]} and {k}={v}); give it once")
        out[k] = v
    return out


def listed(text: str | None, option: str) -> list[str] | None:
    """A comma-separated option's items, or None when it is not given. Given but empty (`--images ,,`) is
    refused: bench ran its default photo three times and reported a median of "3/3 photos"."""
    if text is None:
        return None
    items = [s.strip() for s in text.split(",") if s.strip()]
    if not items:
        raise LeakdemoError(f"{option}: give at least one name, comma-separated; got {text!r}")
    return items


# ---------------------------------------------------------------- list


SECTIONS = ("protocols", "attacks", "defenses", "run", "presets", "sweeps")


def cmd_list(args) -> int:
    """The catalog, or one section of it (`list attacks`) or one name (`list cafe`): the whole of it is 250
    lines, and `list attacks` was refused as an unknown argument."""
    from .sweeps import sweeps
    d = catalog.describe()
    d["presets"] = [{"name": p.name, "title": p.title, "description": p.description, "params": p.params}
                    for p in presets().values()]
    d["sweeps"] = [{"name": w.name, "title": w.title, "description": w.description, "base": w.base, "set": w.set,
                    "vary": w.vary, "seeds": w.seeds} for w in sweeps().values()]
    widths = _list_widths(d)
    # several, as `bench` takes presets (`list presets sweeps`, `list dlg,idlg`): argparse refused the second
    asked = each_once(args.what)
    if args.what and not asked:
        raise LeakdemoError(f"list: name a section or a name, or none for the whole catalog; got {args.what[0]!r}")
    if asked:
        parts = [_list_only(d, w) for w in asked]
        d = {section: list({c.get("name", id(c)): c for part in parts for c in part.get(section, [])}.values())
             for section in SECTIONS if any(section in part for part in parts)}
    if args.json:
        print(json.dumps(d, indent=2))
        return 0
    _print_catalog(d, *widths, whole=not asked or all(w in SECTIONS for w in asked))
    return 0


def _list_only(d: dict, what: str) -> dict:
    """The catalog cut down to one section, or to what is named `what`: a protocol, an attack or a defense, a
    preset (its settings), a sweep — `cafe` is an attack and a preset, and both are listed."""
    if what in SECTIONS:
        return {what: d[what]}
    found = {section: [c for c in d[section] if c["name"] == what] for section in SECTIONS if section != "run"}
    found = {section: items for section, items in found.items() if items}
    if found:
        return found
    names = [c["name"] for section in SECTIONS if section != "run" for c in d[section]]
    meant = hint(alike(what, SECTIONS + tuple(names)))
    raise LeakdemoError(f"list: {what!r} is none of the catalog's sections or names{meant}; sections: {', '.join(SECTIONS)}; or a protocol, attack, defense, preset or sweep "
                        "(`python -m leakdemo list` shows them all)")


def _list_widths(d: dict) -> tuple[int, int]:
    """The name column's width and the setting column's, from the whole catalog: one part listed alone lines up
    as it does in the whole list."""
    parts = [c for section in ("protocols", "attacks", "defenses") for c in d[section]]
    every = [p for c in parts for p in c["params"]] + d["run"]
    # `logit-temperature` pushed its title out of line; each range starts in one column
    return max(len(c["name"]) for c in parts), max(len(f"{p['name']}={p['default']}") for p in every)


def _print_catalog(d: dict, width: int, setting: int, whole: bool = True) -> None:
    """whole: a section or all of them, a line for each preset and sweep; else the ones named, in full."""
    blocks = []
    for section in ("protocols", "attacks", "defenses"):
        if section in d:
            lines = [section.upper()]
            for c in d[section]:
                extra = f"   [with: {', '.join(c['protocols'])}]" if "protocols" in c else ""
                lines += [f"  {c['name']:<{width}} {c['title']}{extra}", f"  {'':<{width}} {c['summary']}"]
                lines += [f"  {'':<{width + 3}}{_param_line(p, setting)}" for p in c["params"]]
            blocks.append(lines)
    if "run" in d:
        blocks.append(["RUN"] + [f"  {'':<{width + 3}}{_param_line(p, setting)}" for p in d["run"]])
    if "presets" in d and whole:
        names = max(len(p["name"]) for p in d["presets"])
        blocks.append(["PRESETS"] + [f"  {p['name']:<{names}} {p['title']}" for p in d["presets"]])
    elif "presets" in d:
        blocks += [[f"PRESET {p['name']} (python -m leakdemo run {p['name']})", f"  {p['title']}",
                    f"  {p['description']}", "  " + " ".join(f"{k}={value_text(v)}" for k, v in p["params"].items())]
                   for p in d["presets"]]
    if "sweeps" in d and whole:
        blocks.append(["SWEEPS (python -m leakdemo sweep NAME)"]
                      + [f"  {w['name']:<26} {w['title']}" for w in d["sweeps"]])
    elif "sweeps" in d:
        blocks += [[f"SWEEP {w['name']} (python -m leakdemo sweep {w['name']})", f"  {w['title']}",
                    f"  {w['description']}",
                    f"  preset {w['base']}" + "".join(f" {k}={value_text(v)}" for k, v in w["set"].items())
                    + f"; varies {'; '.join(w['vary'])}; {plural(w['seeds'], 'seed')} each"]
                   for w in d["sweeps"]]
    print("\n\n".join("\n".join(b) for b in blocks))


def _param_line(p: dict, setting: int) -> str:
    """`name=default  range  help`, the range in the column `setting` wide names end at; an integer's
    bounds in full (`seed` read `[0, 2.14748e+09]`)."""
    if p["type"] == "choice":
        rng = "{" + "|".join(p["choices"]) + "}"
    elif p["type"] == "int":
        rng = f"[{p['min']:d}, {p['max']:d}]"
    elif p["type"] == "float":
        rng = f"[{p['min']:g}, {p['max']:g}]"
    else:
        rng = p["type"]
    return f"{p['name'] + '=' + str(p['default']):<{setting}}  {rng:<26} {p['help']}"


# ---------------------------------------------------------------- run


def _bar(ev: Progress, width: int = 28) -> str:
    frac = ev.iteration / max(ev.total, 1)
    filled = int(frac * width)
    psnr = f"{ev.psnr:5.1f} dB" if ev.psnr is not None else "   -   "
    return (f"\r[{'#' * filled}{'.' * (width - filled)}] {ev.iteration}/{ev.total}  PSNR {psnr}  "
            f"loss {three_digits(ev.loss if ev.loss is not None else float('nan'))}  {ev.seconds:5.1f}s  ETA {_eta(ev.eta):>6} ")


def execute(scenario: Scenario, jsonl: bool = False, out_dir: str | None = None, quiet: bool = False,
            store=None, fresh: bool = False):
    """Run a scenario with CLI output (from the run store when it holds it); returns the Finished event
    or raises LeakdemoError."""
    from .runner import Run
    run = Run(scenario, store=store, fresh=fresh, source="cli")
    tty = sys.stderr.isatty() and not quiet
    started, stage, said = None, None, Counter()
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
                # a note said again and again (L-BFGS diverging 21 times in 100 steps) is printed once and
                # counted at the end; stages and other notes keep their place in the log
                if ev.note:
                    said[ev.note] += 1
                for line in (ev.stage if ev.stage != stage else None, ev.note if said[ev.note] == 1 else None):
                    if line and not jsonl and not quiet:
                        print(f"\n{line}" if tty else line, file=sys.stderr)
                stage = ev.stage
            elif isinstance(ev, Failed):
                raise LeakdemoError(ev.message)
            elif isinstance(ev, Finished):
                if tty and not jsonl and not run.from_store:
                    print(file=sys.stderr)
                for line, n in said.items():
                    if n > 1 and not jsonl and not quiet:
                        print(f"({line}: {n} times in all)", file=sys.stderr)
                if run.from_store and not jsonl and not quiet:
                    print(f"from the run store (run {run.stored_id}, recorded before by this code version; "
                          "--fresh runs it again)", file=sys.stderr)
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


def _summary(ev: Finished, p: dict) -> str:
    m = ev.metrics
    lp = small_figure(m["lpips"]) if m["lpips"] is not None else "n/a"
    la = f"{m['label_accuracy']:.2f}" if m["label_accuracy"] is not None else "n/a"
    word = "Finished" if ev.status == "finished" else "Stopped"
    if "attack_accuracy" in m:  # logit sharing: judged by its attack accuracy; it recovers no labels
        head = (f"{word}: attack accuracy {m['attack_accuracy']:.2f} ({sum(m['success'])}/{len(m['success'])} "
                f"target classes), {catalog.steps_taken(p, ev.iterations)} in {clock(ev.seconds)}\n  against each "
                f"target class's mean private image: PSNR {m['psnr']:.2f} dB, SSIM {fixed(m['ssim'])}, LPIPS {lp}")
    else:
        head = (f"{word}: PSNR {m['psnr']:.2f} dB, SSIM {fixed(m['ssim'])}, LPIPS {lp}, label accuracy {la}, "
                f"{plural(ev.iterations, 'iteration')} in {clock(ev.seconds)}")
    when = milestones.sentence(ev.history, m, ev.status == "finished")
    why = [f"label accuracy n/a: {catalog.no_label_guess(p)}"] if la == "n/a" and "attack_accuracy" not in m else []
    return (head
            + ("" if m.get("matching_rate") is None else f", matching across epochs {m['matching_rate']:.0%}")
            + "".join(f"\n  {line}" for line in ([when] if when else []) + _vfl_lines(m, p) + _logit_lines(m) + why)
            + (f"\n  privacy: {privacy.line(m)}" if m.get("privacy") else ""))


def _logit_lines(m: dict) -> list[str]:
    """Logit sharing extras: TBI's attack accuracy beside PLI's, and the clients' accuracy."""
    lines = []
    if "baseline_attack_accuracy" in m:
        lines.append(f"TBI baseline alongside: attack accuracy {m['baseline_attack_accuracy']:.2f}, SSIM to the "
                     f"class mean {fixed(m['baseline_ssim_to_mean'])}")
    u = m.get("utility")
    if u and "steps" not in u:
        def mean(v):
            return sum(v) / len(v)
        text = f"client test accuracy {mean(u['defended']):.3f}"
        text += f" with this defense, {mean(u['clean']):.3f} without" if "clean" in u else " (no defense)"
        lines.append(text)
    return lines


def _vfl_lines(m: dict, p: dict) -> list[str]:
    """Vertical FL extras: how well Steps I–II did, and what the defense costs training."""
    lines = []
    if "step1_error" in m:
        lines.append(f"Step I error {m['step1_error']:.2g}, Step II error {m['step2_error']:.2g} "
                     "(relative to the true per-sample gradients / first-FC inputs)")
    if "sample_ids" in m:
        n = len(m["sample_ids"])
        lines.append(f"scored on {'the one sample' if n == 1 else f'the {n} samples'} of the one batch the attack saw")
    u = m.get("utility")
    if u and "steps" in u:
        def span(c):
            return f"{c[0]:.3f} → {sum(c[-10:]) / len(c[-10:]):.3f}"
        text = f"training loss over {u['steps']} SGD steps (lr {u['lr']:g}): {span(u['defended'])}"
        text += f" with this defense, {span(u['clean'])} without" if "clean" in u else " (no defense)"
        lines.append(text)
        if flat := utility.barely_learns(u, p):
            lines.append(flat)
    if u and u.get("while_attacked"):
        c = u["while_attacked"]
        lines.append(f"the federation's own training loss while attacked (Adam {u.get('train_lr', 0):g}): "
                     f"{c[0]:.3f} → {c[-1]:.3f}")
    return lines


def cmd_run(args) -> int:
    from .attacks import compiled
    from .store import open_store
    compiled.ONE_OFF = True  # this process runs one attack: on a GPU, building its compiled objective would not pay
    overrides = parse_sets(args.set)
    if args.device:
        overrides["device"] = args.device
    several = [n.strip() for n in args.scenario.split(",")]
    if len(several) > 1 and all(n in presets() for n in several):  # was: unknown preset 'dlg,idlg' (did you mean idlg?)
        raise LeakdemoError(f"run: one preset at a time, got {args.scenario!r} (`python -m leakdemo bench "
                            f"{args.scenario}` times several)")
    scenario = load(args.scenario, overrides)
    if scenario.warnings and device.runs_on_gpu(scenario["device"]) is None:  # a CPU's costs said unknowing:
        device.facts()  # torch asked (the run loads it anyway), so that they are not said where it has CUDA
        scenario = load(args.scenario, overrides)
    ev = execute(scenario, jsonl=args.jsonl, out_dir=args.out, store=open_store(), fresh=args.fresh)
    if not args.jsonl:
        print(_summary(ev, scenario.params))
        if ev.metrics.get("note"):
            print(f"  (the attack {ev.metrics['note']})")
        if ev.metrics.get("lpips_note"):
            print(f"  ({ev.metrics['lpips_note']})")
    return 0


# ---------------------------------------------------------------- fidelity


def cmd_fidelity(args) -> int:
    from .fidelity import NOT, PARTLY, REPRODUCED, checks, run_check, table
    from .store import open_store
    todo = checks(args.quick, listed(args.only, "--only"))
    store = open_store()
    results = []
    where = ("the run store is off (LEAKDEMO_STORE=off): every run is computed" if store is None else
             "--fresh: every run is computed" if args.fresh else "runs already in the run store are replayed from it")
    print(f"leakdemo fidelity — {plural(len(todo), 'check')}{' (quick)' if args.quick else ''}; {where}", flush=True)
    for c in todo:
        r = run_check(c, store, args.fresh)
        results.append(r)
        from_store = f", {r.replayed} of {plural(len(c.runs), 'run')} from the store" if r.replayed else ""
        print(f"  {c.name:<22} {r.verdict:<10} {r.ours}  ({r.seconds:.0f} s{from_store})", flush=True)
    report = table(results)
    print()
    print(report)
    count = {v: sum(r.verdict == v for r in results) for v in (REPRODUCED, PARTLY, NOT)}
    print(f"\n{count[REPRODUCED]} reproduced, {count[PARTLY]} partly, {count[NOT]} not")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write(report + "\n")
        print(f"wrote {args.out}")
    return 0


# ---------------------------------------------------------------- bench


def bench_one(scenario: Scenario) -> dict:
    """Time one run: seconds to the first frame, iterations per second, seconds to 20/30 dB, final PSNR."""
    from .runner import Run
    t_start = time.perf_counter()
    first_frame = None
    for ev in Run(scenario).events():
        if isinstance(ev, Failed):
            raise LeakdemoError(ev.message)
        if isinstance(ev, Progress) and first_frame is None:
            first_frame = time.perf_counter() - t_start
        if isinstance(ev, Finished):
            t20, t30 = (milestones.reached(ev.history, db) for db in (milestones.RECOGNISABLE_DB, milestones.RECOVERED_DB))
            return {"first_frame_s": first_frame, "it_per_s": ev.iterations / max(ev.seconds, 1e-9),
                    "to_20db_s": t20 and t20[0], "to_30db_s": t30 and t30[0], "psnr": ev.metrics["psnr"], "ssim": ev.metrics["ssim"],
                    "lpips": ev.metrics["lpips"], "label_accuracy": ev.metrics["label_accuracy"], "seconds": ev.seconds,
                    # what the user waits: the federation's own training (logit sharing, vertical FL) included
                    "wall_s": time.perf_counter() - t_start,
                    "iterations": ev.iterations, "matching_rate": ev.metrics.get("matching_rate"),
                    "attack_accuracy": ev.metrics.get("attack_accuracy"),
                    "baseline_attack_accuracy": ev.metrics.get("baseline_attack_accuracy"),
                    "psnr_per_image": ev.metrics.get("psnr_per_image") or []}
    raise LeakdemoError("the run ended without a result")


def _fmt(v, spec=".1f"):
    return "-" if v is None else format(v, spec)


def _each_image(r: dict) -> str:
    """How many of a run's images came back (a batch, a round of clients, CAFE's data set): the mean PSNR
    hides a photo that did not. Logit sharing is judged by attack accuracy instead."""
    per = r["psnr_per_image"]
    if len(per) < 2 or r["attack_accuracy"] is not None:
        return ""
    return f"   {sum(v >= 30 for v in per)}/{len(per)} images ≥ 30 dB, lowest {min(per):.1f}"


DEVICES = ("auto", "cpu", "cuda")


def bench_devices(text: str | None) -> list[str | None]:
    """--device: one device, or several (`cpu,cuda`) to run every row on each, side by side."""
    devices = listed(text, "--device") or [None]
    for d in devices:
        if d is not None and d not in DEVICES:
            raise LeakdemoError(f"device: must be auto, cpu or cuda, or several of them (cpu,cuda); got {d!r}"
                                f"{hint(alike(d, DEVICES))}")
    return devices


def bench_sets(names: list[str], overrides: dict, images_flag: bool = False) -> tuple[dict[str, dict], list[str]]:
    """Each row's share of `--set`, and what is said of the rest. A setting some rows do not take
    (`iterations` on PLI's rows, which count inversion_epochs) is left out of theirs: `bench --set
    iterations=50` stopped on PLI's first row with 'does not apply'. One that no row takes stays, to be
    refused as `run` refuses it. images_flag: `images` came from --images, and is said so."""
    chosen = {k: overrides[k] for k in ("protocol", "attack", "defense") if k in overrides}
    per, left_out = {}, {}
    for name in names:
        try:
            sc = load(name, chosen)
        except LeakdemoError:  # loading the row with all of --set says what is wrong
            per[name] = dict(overrides)
            continue
        takes = catalog.params_for(sc["protocol"], sc["attack"], sc["defense"])
        per[name] = {k: v for k, v in overrides.items() if k in takes}
        for k in overrides.keys() - takes.keys():
            left_out.setdefault(k, []).append((name, sc))
    notes = []
    for k, rows in left_out.items():
        if len(rows) == len(names):
            for name, _ in rows:
                per[name][k] = overrides[k]
            continue
        sc, one = rows[0][1], len(rows) == 1
        named, run = ", ".join(n for n, _ in rows), "its row runs" if one else "their rows run"
        if k == "images" and images_flag:  # vertical FL's and logit sharing's rows draw from a data set
            notes.append(f"note: --images: {named} take{'s' if one else ''} no named images: {run} once, on "
                         f"{'its' if one else 'their'} own data")
            continue
        notes.append(f"note: {k} is not a setting of {named}: {run} without it"
                     f"{catalog.instead_note(k, sc['protocol'], sc['attack'], sc['defense'])}")
    return per, notes


def cmd_bench(args) -> int:
    import torch
    overrides = parse_sets(args.set)
    devices = bench_devices(args.device)
    # `bench dlg,idlg` as --images is written was one unknown preset 'dlg,idlg'; `bench dlg dlg` ran dlg twice
    # and took the two for one row's medians
    names = each_once(args.presets) or [p.name for p in presets().values() if p.standard]
    if args.presets and not each_once(args.presets):
        raise LeakdemoError(f"bench: name the presets to time, or none for every standard one; got {args.presets[0]!r}")
    image_lists = listed(args.images, "--images") or [None]
    rows = []
    # every scenario resolved and checked before the first line: a bad setting (an unknown image, a device this
    # machine lacks) stops the bench before its table starts, not after minutes of rows
    from .data import check_source
    from .device import device_name
    # --images as one more setting: rows that take no named images (vertical FL's, logit sharing's) run once
    sets, notes = bench_sets(names, {**overrides, **({"images": args.images} if args.images else {})},
                             images_flag=bool(args.images))
    row_images = {name: image_lists if sets[name].pop("images", None) is not None else [None] for name in names}
    scenarios = {(name, img, dev): load(name, {**sets[name], **({"images": img} if img else {}),
                                               **({"device": dev} if dev else {})})
                 for name in names for img in row_images[name] for dev in devices}
    for sc in scenarios.values():
        device_name(sc["device"])
        check_source(sc)
    resolved = [device_name(d or overrides.get("device", "auto")) for d in devices]
    if len(set(resolved)) < len(resolved):
        raise LeakdemoError(f"device: each device once; {args.device!r} names {resolved[0]} twice on this machine")
    threads = torch.get_num_threads()
    cpu_threads = args.cpu_threads or threads
    cores = os.cpu_count() or 1
    if cpu_threads > cores:  # the threads take turns on the cores: slower rows than at `cores`, with no word
        notes.append(f"note: --cpu-threads {cpu_threads} is more than this machine's {plural(cores, 'core')}: the "
                     f"threads take turns on them, so the CPU's rows time slower than at --cpu-threads {cores}")
    side_by_side = len(devices) > 1
    if side_by_side:
        where = f"devices {', '.join(resolved)} side by side, the CPU's rows on {plural(cpu_threads, 'thread')}"
    else:
        where = (f"{plural(cpu_threads if resolved[0] == 'cpu' else threads, 'thread')}, "
                 f"device {devices[0] or overrides.get('device', 'auto')}")
    print(f"leakdemo bench — torch {torch.__version__}, {where}; PSNR is standard (peak 1, images in [0, 1])")
    for note in notes:
        print(note, file=sys.stderr)
    w = max(16, 2 + max(map(len, names)))  # cafe-fake-gradients ran into its images column at 16
    dev_col = 7 if side_by_side else 0
    header = (f"{'preset':<{w}}{'images':<22}" + (f"{'device':<{dev_col}}" if side_by_side else "")
              + f"{'first frame s':>14}{'it/s':>8}{'to 20 dB s':>12}{'to 30 dB s':>12}{'final dB':>10}{'LPIPS':>8}{'total s':>9}")
    print(header)
    for name in names:
        for img in row_images[name]:
            for dev in devices:
                sc = scenarios[name, img, dev]
                where = device_name(sc["device"])
                torch.set_num_threads(cpu_threads if where == "cpu" else threads)
                r = bench_one(sc)
                # vertical FL and logit sharing take a data set, not named images: "(digits)", "(faces)"
                r.update(preset=name, images=sc.get("images") or f"({sc.get('data') or 'seeded'})", device=where)
                rows.append(r)
                print(f"{name:<{w}}{r['images'][:21]:<22}" + (f"{where:<{dev_col}}" if side_by_side else "")
                      + f"{_fmt(r['first_frame_s'], '.2f'):>14}{r['it_per_s']:>8.1f}"
                      f"{_fmt(r['to_20db_s'], '.2f'):>12}{_fmt(r['to_30db_s'], '.2f'):>12}{r['psnr']:>10.1f}{'-' if r['lpips'] is None else small_figure(r['lpips']):>8}{r['wall_s']:>9.1f}"
                      + ("" if r["matching_rate"] is None else f"   matching {r['matching_rate']:.0%}")
                      + ("" if r["attack_accuracy"] is None else f"   attack accuracy {r['attack_accuracy']:.2f}")
                      + ("" if r["baseline_attack_accuracy"] is None else f" (TBI {r['baseline_attack_accuracy']:.2f})")
                      + _each_image(r),
                      flush=True)
        torch.set_num_threads(threads)
        mine = [r for r in rows if r["preset"] == name]
        medians = {}
        for where in dict.fromkeys(r["device"] for r in mine):
            runs = [r for r in mine if r["device"] == where]
            t30 = [r["to_30db_s"] for r in runs if r["to_30db_s"] is not None]
            medians[where] = statistics.median(t30) if t30 else None
            if len(row_images[name]) > 1:
                print(f"{'':<{w}}{'median':<22}" + (f"{where:<{dev_col}}" if side_by_side else "")
                      + f"{'':>14}{'':>8}{'':>12}{_fmt(medians[where], '.2f'):>12}"
                      f"{statistics.median(r['psnr'] for r in runs):>10.1f}   "
                      f"({sum(r['psnr'] >= 30 for r in runs)}/{len(runs)} reach 30 dB)")
        if medians.get("cpu") and medians.get("cuda"):
            ratio = medians["cpu"] / medians["cuda"]
            print(f"{'':<{w}}cuda reached 30 dB "
                  + (f"{ratio:.1f}× sooner" if ratio >= 1 else f"{1 / ratio:.1f}× later") + " than cpu"
                  + (" (medians)" if len(row_images[name]) > 1 else ""))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, indent=2)
    return 0


# ---------------------------------------------------------------- runs (the run store)


def cmd_runs(args) -> int:
    from .store import default_path, open_store
    action, rest = args.action or "list", args.rest  # `runs` alone lists, as its help's [brackets] promise
    if args.limit is not None and action != "list":  # `runs show 3 --limit 5` ran, --limit unread
        raise ParamError("--limit", f"applies to `runs list` only, not `runs {action}`")
    if args.json and action in ("delete", "export"):  # show prints JSON anyway
        raise ParamError("--json", f"applies to `runs list` (and `runs show`, whose output is JSON), not `runs {action}`")
    if args.out is not None:  # `runs export 3 --out DIR`, as `run --out DIR` writes the same files
        if action != "export":
            raise ParamError("--out", f"applies to `runs export`, not `runs {action}`")
        if len(rest) >= 2:
            raise LeakdemoError(f"runs export: give the folder once, after the id or as --out (got {rest[1]!r} and "
                                f"{args.out!r})")
        rest = [*rest, args.out] if rest else rest  # no id: said below, not the folder read as one
    limit = 50 if args.limit is None else args.limit
    takes = {"list": 0, "show": 1, "delete": 1, "export": 2}[action]
    if len(rest) > takes:  # `runs delete 1 2 3` deleted run 1 and said nothing of 2 and 3
        what = {0: "no id", 1: "one id", 2: "one id and a folder"}[takes]
        raise LeakdemoError(f"runs {action}: takes {what}, got {' '.join(rest)!r}")
    path = default_path()
    if path is None:
        raise LeakdemoError("runs: the run store is turned off (LEAKDEMO_STORE=off)")
    if not os.path.exists(os.path.expanduser(path)):  # reading a mistyped LEAKDEMO_STORE created an empty store
        where = os.path.abspath(os.path.expanduser(path))
        if action != "list":
            raise LeakdemoError(f"runs {action}: no run store at {where} yet (`run`, `sweep` and the dashboard "
                                "record their runs there)")
        print("[]" if args.json else f"0 runs: no run store at {where} yet (`run`, `sweep` and the dashboard "
              "record their runs there)")
        return 0
    store = open_store(path)
    if action == "list":
        rows = store.runs(limit=limit, milestones=True)
        if args.json:
            print(json.dumps(rows, indent=2))
            return 0
        print(f"{plural(len(rows), 'run')} in {store.path}" + ("" if len(rows) < limit else f" (newest {limit})"))
        # the name columns as wide as their longest name: at fixed widths "cafe-fake-gradients" was cut to
        # "cafe-fake-gradien", and a defense "logit-temperature" pushed the rest of its row out of line
        wide = {k: max([len(k)] + [len(r[k] or "-") for r in rows]) for k in ("source", "preset", "protocol", "attack",
                                                                              "defense")}
        if rows:
            print(f"{'id':>5}  {'recorded':<16} {'source':<{wide['source']}} {'preset':<{wide['preset']}} "
                  f"{'protocol':<{wide['protocol']}} {'attack':<{wide['attack']}} {'defense':<{wide['defense']}} "
                  f"{'status':<9} {'result':>8} {'seconds':>8} {'to 30 dB':>9}  changed from the preset")
        for r in rows:
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(r["created"]))
            psnr = ("-" if r["psnr"] is None else f"{r['psnr']:.1f} dB") if r["attack_accuracy"] is None \
                else f"acc {r['attack_accuracy']:.2f}"  # PLI/TBI are judged by attack accuracy, not PSNR
            # when the picture came back (milestones.py): 'never', or '-' for a run judged by attack accuracy
            back = "-" if r["attack_accuracy"] is not None else milestones.seconds_cell(r["to_30db_s"], r["status"])
            changed = " ".join(f"{k}={value_text(v)}" for k, v in r["changes"].items())
            # the protocol: a PLI run on FedGEMS read as one on FedMD (what it changed leaves the switch out)
            names = " ".join(f"{r[k] or '-':<{wide[k]}}" for k in wide)
            print(f"{r['id']:>5}  {when:<16} {names} {r['status']:<9} {psnr:>8} {r['seconds']:>8.1f} {back:>9}  "
                  f"{changed}".rstrip())
        return 0
    if not rest:
        raise LeakdemoError(f"runs {action}: give the run's id (`python -m leakdemo runs list` shows them)")
    found = re.fullmatch(r"[#rR]?(\d+)", rest[0].strip())  # r12, as the Compare page's link names run 12, is 12
    if found is None:
        showcase = " (g-codes are the gallery's showcases; `runs` reads your run store)" \
            if re.fullmatch(r"[gG]\d+", rest[0].strip()) else ""
        raise LeakdemoError(f"runs {action}: the id must be a whole number, got {rest[0]!r}{showcase}")
    run_id = int(found.group(1))
    if action == "delete":
        if not store.delete(run_id):
            raise LeakdemoError(f"runs delete: no run {run_id} in {store.path}")
        print(f"deleted run {run_id}")
        return 0
    stored = store.load(run_id)
    if action == "show":
        info = {"id": stored.id, "recorded": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stored.created)),
                "source": stored.source, "code_version": stored.code_version, "scenario": stored.scenario,
                **to_json(stored.finished)}
        print(json.dumps(info, indent=2))
        return 0
    if len(rest) < 2:
        raise LeakdemoError("runs export: give the run's id and a folder, e.g. `runs export 3 out/`")
    from .artifacts import write_all
    scenario_json = json.dumps(stored.scenario, indent=2)
    files = write_all(rest[1], scenario_json, stored.started.originals, stored.finished, stored.keyframes)
    print(f"wrote {', '.join(files)}")
    return 0


# ---------------------------------------------------------------- sweep


def _eta(seconds) -> str:
    if seconds is None:
        return "…"
    m, sec = divmod(int(round(seconds)), 60)
    return f"{m}m{sec:02d}s" if m else f"{sec}s"


def _row_line(r: dict, width: int = 28) -> str:
    """A sweep's row in one line; width: the label column's, as wide as the sweep's longest label."""
    from .sweep import utility_of
    if r.get("attack_accuracy") is not None:
        leak = f"attack accuracy {r['attack_accuracy']:.2f}"
    elif r.get("psnr") is not None:
        lo, hi = r["psnr_range"]
        rec = "" if r.get("recognisable") is None else f", {r['recognisable']:.0%} recognisable"
        leak = f"PSNR {r['psnr']:5.1f} dB [{lo:.1f}–{hi:.1f}]{rec}"
    else:
        leak = "no result"
    name, u = utility_of(r)
    util = "" if u is None else f"  {name.replace('_', ' ')} {u:.3f}"
    fail = f"  ({r['failed']} failed: {r['errors'][0]})" if r.get("failed") else ""
    return f"{r['label']:<{width}} {leak}{util}  {r['privacy']}{fail}"


def cmd_sweep(args) -> int:
    from .store import open_store
    from .sweep import PointDone, RunDone, Sweep, SweepFinished, SweepStarted, parse_axis
    from . import sweeps as presets_of_sweeps
    overrides = parse_sets(args.set)
    if args.device:
        overrides["device"] = args.device
    spec = presets_of_sweeps.load(args.scenario)
    if spec is not None:
        base = load(spec.base, {**spec.set, **overrides})
        varies = args.vary or spec.vary
        seeds = args.seeds if args.seeds is not None else spec.seeds
        images = args.images if args.images is not None else spec.images
        # its own axes replaced: the title of what runs, not of the built-in's axes ("DLG against Gaussian noise
        # ..., with and without clipping" headed a sweep of the learning rate)
        title = None if args.vary else spec.title
        # ... and headed as run from its settings (16 px, 100 iterations for sweep-dp-dlg), not the preset's
        source = f"from {args.scenario}"
    else:
        if not (args.scenario.endswith(".json") or os.path.sep in args.scenario) and args.scenario not in presets():
            # the preset's own message listed presets only, to someone who likely typed a sweep's name
            # (`sweep dp`, `sweep prune`: the sweeps of that name; a protocol, attack or defense: its presets)
            named = presets_of_sweeps.meant_sweeps(args.scenario)
            known = [*presets_of_sweeps.sweeps(), *presets()]
            why = meant_question(named) if named else unknown_preset_hint(args.scenario, known)
            raise ParamError("sweep", f"unknown sweep or preset {args.scenario!r}{f' ({why})' if why else ''}; "
                                      f"built-in sweeps: {', '.join(presets_of_sweeps.sweeps())}; "
                                      f"presets: {', '.join(presets())}")
        base = load(args.scenario, overrides)
        seeds = args.seeds if args.seeds is not None else 1  # 0 is refused by Sweep, not read as "not given"
        varies, images, title = args.vary, args.images, None
        source = f"preset {base.preset}" if base.preset else ""
    if not varies:
        raise LeakdemoError("sweep: give at least one --vary NAME=LOW..HIGH:N (or NAME=a,b,c)")
    axes = [parse_axis(v, base) for v in varies]
    if title is None:  # "DLG against Gaussian noise · preset dlg", as the Trade-offs page heads it (not "dlg: sweep")
        title = catalog.sweep_title(base.params, axes[0].name, None, tuple(a.name for a in axes[1:])) \
            + (f" · {source}" if source else "")
    image_list = listed(images, "--images")
    address = args.address or os.environ.get("LEAKDEMO_RAY_ADDRESS") or None
    backend = args.backend or ("ray" if args.address else "local")
    sweep = Sweep(base, axes, seeds=seeds, images=image_list, store=open_store(), fresh=args.fresh,
                  backend=backend, workers=args.workers, ray_address=address, batch=args.batch)
    warnings = [] if args.jsonl else sweep.warnings()
    if warnings and device.runs_on_gpu(base["device"]) is None:  # as in `run`: not a CPU's costs on a GPU
        device.facts()
        warnings = sweep.warnings()
    for w in [] if args.jsonl else [*sweep.unread(overrides), *warnings]:  # as `run` says them
        print(f"warning: {w}", file=sys.stderr)
    tty = sys.stderr.isatty()
    rows, status, total_s = [], "finished", 0.0
    width = max([28] + [len(p.label) for p in sweep.points])  # a two-axis label ran past 28 and out of line
    try:
        for ev in sweep.events():
            if args.jsonl:
                print(json.dumps(_sweep_json(ev)), flush=True)
            if isinstance(ev, SweepStarted):
                if not args.jsonl:
                    same = f" ({sweep.same_as_undefended()})" if sweep.as_undefended else ""
                    asked = len(ev.points) * seeds * len(image_list or [1])
                    # "3 points × 1 seed × 1 image = 2 runs" read as a slip: the refused run is counted and named
                    refused = f" ({asked - ev.runs} refused: {'its row says' if asked - ev.runs == 1 else 'their rows say'} why)" \
                        if asked > ev.runs else ""
                    print(f"{title}: {plural(len(ev.points), 'point')}{same} × {plural(seeds, 'seed')} × {plural(len(image_list or [1]), 'image')} = "
                          f"{plural(asked, 'run')}{refused}, {ev.cached} from the run store, backend {ev.backend}"
                          + (f"; attacked as {plural(ev.programs, 'program')} of up to {ev.batch} runs (--batch 1: "
                             f"each run alone)" if ev.batch > 1 else ""), file=sys.stderr)
            elif isinstance(ev, (PointDone, RunDone)) and not args.jsonl:
                bar = f"[{'#' * int(28 * ev.done_runs / max(ev.total_runs, 1)):<28}] {ev.done_runs}/{ev.total_runs} runs" \
                      f"  {ev.seconds:5.1f}s  ETA {_eta(ev.eta)}"
                if isinstance(ev, PointDone):
                    # on a terminal, over the progress bar (the spaces blank its tail); in a log, the row alone
                    print(("\r" if tty else "") + _row_line(ev.point, width) + (" " * 10 if tty else ""),
                          file=sys.stderr, flush=True)
                if tty:
                    print("\r" + bar, end="", file=sys.stderr, flush=True)
            elif isinstance(ev, SweepFinished):
                rows, status, total_s = ev.rows, ev.status, ev.seconds
    except KeyboardInterrupt:
        sweep.stop()
        print("\ninterrupted: keeping the points already done", file=sys.stderr)
        status = "stopped"
        rows = [sweep._row(p) for p in sweep.points if p.runs]
    if tty and not args.jsonl:
        print(file=sys.stderr)
    one_figure = bool(rows) and sweep.utility_is_one_figure()
    if not args.jsonl:
        print(f"{'Sweep' if status == 'finished' else 'Stopped sweep'}: {plural(len(rows), 'point')} in {total_s:.1f} s")
        for r in sorted(rows, key=lambda r: r["index"]):
            print("  " + _row_line(r, width))
        if one_figure:
            from .tradeoff import one_figure_line
            print("  (" + one_figure_line(axes[0].name, base.params) + ")")
        from .sweep import flat_utility
        flat = flat_utility(rows)
        if flat:
            print("  (" + flat + ")")
        from .tradeoff import equations_line
        counted = axes and equations_line(axes[0].name, axes[0].values, base.params)
        if counted:
            print("  (" + counted + ")")
    if args.out and rows:
        from .tradeoff import write_all
        meta = {"title": title, "base": base.to_dict(), "vary": [a.name for a in axes],
                "values": {a.name: list(a.values) for a in axes}, "seeds": seeds, "images": image_list,
                "status": status}
        files = write_all(args.out, sorted(rows, key=lambda r: r["index"]), [a.name for a in axes], title, meta,
                          log=axes[0].log, x=args.x_axis, base=base.params, one_figure=one_figure)
        if not args.jsonl:
            print(f"wrote {', '.join(files)}", file=sys.stderr)
    return 0 if status == "finished" else 130


def _sweep_json(ev) -> dict:
    from dataclasses import asdict
    from .tradeoff import plain
    d = {k: v for k, v in asdict(ev).items() if k not in ("point", "rows", "points", "row")}
    if isinstance(getattr(ev, "point", None), dict):
        d["point"] = plain(ev.point)
    elif hasattr(ev, "point"):  # a run came back: its point's index, and the point so far
        d["point"] = ev.point
        d["row"] = plain(ev.row) if ev.row is not None else None
    if hasattr(ev, "rows"):
        d["rows"] = [plain(r) for r in ev.rows]
    if hasattr(ev, "points"):
        d["points"] = [plain(r) for r in ev.points]
    return d


# ---------------------------------------------------------------- the gallery of showcases


def cmd_record_gallery(args) -> int:
    from .gallery import GALLERY, record, record_showcases, record_sweeps
    progress = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    if args.showcases_only and (args.sweeps_only or args.missing):
        raise LeakdemoError("--showcases-only records the showcases alone and keeps the sweeps' runs; "
                            "leave out --sweeps-only and --missing")
    if args.showcases_only:
        path = record_showcases(args.out or GALLERY, progress)
    elif args.sweeps_only or args.missing:
        path = record_sweeps(args.out or GALLERY, progress, missing=args.missing)
    else:
        path = record(args.out or GALLERY, progress=progress)
    print(f"wrote {path} ({os.path.getsize(path) / 1e6:.1f} MB)")
    return 0


# ---------------------------------------------------------------- entry point


def check_output(path: str | None, option: str, folder: bool, files: tuple = ()) -> None:
    """An output path that cannot be written is said before the work starts (a run or a sweep can take
    minutes), in one line naming the option. Nothing is left behind: the check writes a temporary file in
    the folder that would hold the output (or the nearest existing parent of a folder to be created).
    files: the names a folder output writes; one of them there as a folder failed only once the work was done."""
    if path is None:
        return
    if not path.strip():  # `--out "$DIR"` with DIR unset ran, and wrote nothing anywhere
        raise ParamError(option, f"empty; give a {'folder' if folder else 'file name'}")
    import tempfile
    where = os.path.abspath(path)
    if os.path.exists(where) and folder != os.path.isdir(where):
        raise ParamError(option, f"{path!r} is {'a file' if folder else 'a folder'}; give a "
                                 f"{'folder' if folder else 'file name'}")
    parent = where if folder else os.path.dirname(where)
    if not folder and not os.path.isdir(parent):
        raise ParamError(option, f"the folder {os.path.dirname(path) or '.'!r} does not exist")
    while not os.path.exists(parent):  # a folder is created with its parents: the nearest existing one decides
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise ParamError(option, f"cannot write {path!r} ({parent}: not a folder)")
    try:
        with tempfile.TemporaryFile(dir=parent):
            pass
    except OSError as e:
        # the folder exists: say what failed in it ("/proc: No such file or directory" read as if /proc were missing)
        raise ParamError(option, f"cannot write {path!r} (creating a file in {parent} failed: "
                                 f"{e.strerror or e})") from None
    for name in files:
        there = os.path.join(where, name)
        why = "a folder" if os.path.isdir(there) else \
            "a file that cannot be overwritten" if os.path.exists(there) and not os.access(there, os.W_OK) else None
        if why:
            raise ParamError(option, f"cannot write {os.path.join(path, name)!r}: it is {why}")


OUTPUTS = {"run": [("out", "--out", True, RUN_FILES)], "sweep": [("out", "--out", True, SWEEP_FILES)],
           "record-gallery": [("out", "--out", False)], "fidelity": [("out", "--out", False)],
           "bench": [("json", "--json", False)]}


DEVICE_HELP = "where the attack runs: auto (CUDA when present), cpu or cuda; default: the scenario's device"


def _version() -> str:
    """'leakdemo 0.1.0 (torch 2.14.1, Python 3.11.2)', read from the installed metadata: importing torch
    to print a line would cost seconds."""
    from importlib.metadata import PackageNotFoundError, version
    from . import __version__
    try:
        torch = version("torch")
    except PackageNotFoundError:
        torch = "not installed"
    return f"leakdemo {__version__} (torch {torch}, Python {sys.version.split()[0]})"


def main(argv=None) -> int:
    ap = _Parser(prog="python -m leakdemo", description="leakdemo: watch federated learning leak training data.")
    ap.add_argument("--version", action="version", version=_version(),
                    help="print leakdemo's, torch's and Python's versions (what a bug report needs) and exit")
    sub = ap.add_subparsers(dest="cmd", required=True, parser_class=_Parser, metavar="COMMAND")
    p = sub.add_parser("list", help="protocols, attacks, defenses, presets and their parameters")
    p.add_argument("what", nargs="*", metavar="SECTION_OR_NAME",
                   help=f"only these sections ({', '.join(SECTIONS)}), or names in full: a protocol, attack, "
                        "defense, preset or sweep (cafe: the attack, and the preset with its settings)")
    p.add_argument("--json", action="store_true", help="print the catalog as JSON")
    p = sub.add_parser("run", help="run a preset or a scenario.json")
    p.add_argument("scenario", metavar="PRESET_OR_JSON",
                   help="a preset (`python -m leakdemo list` shows them), or a scenario.json the Lab or "
                        "`run --out` wrote, or the folder it is in")
    p.add_argument("--set", action="append", metavar="NAME=VALUE", help="override a parameter (repeatable)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), help=DEVICE_HELP)
    p.add_argument("--out", metavar="DIR", help="write grid.png, progress.gif, metrics.json, history.csv, scenario.json (folder created if needed)")
    p.add_argument("--jsonl", action="store_true", help="one JSON object per event on stdout")
    p.add_argument("--fresh", action="store_true", help="run it even when the run store already holds this scenario")
    p = sub.add_parser("sweep", help="privacy against utility over a grid of defense strengths")
    p.add_argument("scenario", metavar="SWEEP_OR_PRESET_OR_JSON",
                   help="a built-in sweep (sweep-dp-dlg, ...: `list` shows them), or a preset or scenario.json to "
                        "sweep with --vary")
    p.add_argument("--vary", action="append", metavar="NAME=LOW..HIGH:N", help="a swept parameter (at most two); "
                   "log-spaced where the catalog says so; NAME=a,b,c for listed values")
    p.add_argument("--seeds", type=integer(1, MAX_SEEDS),
                   help="seeds per point (the scenario's seed and the next ones)")
    p.add_argument("--images", help="comma-separated images: every point runs each")
    p.add_argument("--set", action="append", metavar="NAME=VALUE",
                   help="override a parameter of the swept scenario (repeatable)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), help=DEVICE_HELP)
    p.add_argument("--out", metavar="DIR", help="write sweep.csv, sweep.json, tradeoff.png, strip.png")
    p.add_argument("--x-axis", dest="x_axis", choices=("strength", "epsilon"), default="strength",
                   help="tradeoff.png's left panel against the swept value (default) or against ε")
    p.add_argument("--jsonl", action="store_true", help="one JSON object per event: started, run, point, finished")
    p.add_argument("--fresh", action="store_true", help="compute every run even when the run store holds it")
    p.add_argument("--backend", choices=("local", "ray"), help="local worker processes (default) or Ray tasks")
    p.add_argument("--address", help="the Ray cluster to use (default $LEAKDEMO_RAY_ADDRESS, else a local Ray)")
    p.add_argument("--workers", type=integer(1, MAX_WORKERS), help="local worker processes (default: one per core)")
    p.add_argument("--batch", type=integer(1, MAX_BATCH),
                   help="DLG/iDLG/Inverting Gradients/DLM/DLM+ runs that differ only in seed, image and defense "
                        "strength attacked as one vectorised program, at most this many (default: chosen from the "
                        "sweep's size, the workers and the device; 1 = each run alone)")
    p = sub.add_parser("record-gallery", help="record the built-in showcases and sweeps (assets/gallery.sqlite) anew")
    p.add_argument("--out", metavar="FILE", help="write them here instead")
    p.add_argument("--sweeps-only", dest="sweeps_only", action="store_true",
                   help="keep the gallery's showcases, record the built-in sweeps' runs anew")
    p.add_argument("--showcases-only", dest="showcases_only", action="store_true",
                   help="keep the gallery's sweeps, record the showcases anew (the presenter's and Compare's "
                        "recorded runs)")
    p.add_argument("--missing", action="store_true",
                   help="keep every recorded run; record only the built-in sweeps' runs the gallery lacks "
                        "(a new sweep), leaving the others' charts as shipped")
    p = sub.add_parser("runs", help="the run store: list | show ID | export ID DIR | delete ID")
    p.add_argument("action", nargs="?", choices=("list", "show", "export", "delete"),
                   help="list (the default): the newest runs, with their ids, results and when each picture reached 30 dB; show ID: one run's scenario and "
                        "figures; export ID DIR: write its files (as run --out does); delete ID")
    p.add_argument("rest", nargs="*", metavar="ID [DIR]", help="the run's id, from `runs list`; export's folder")
    p.add_argument("--limit", type=integer(1, 100_000), help="list: how many of the newest runs (default 50)")
    p.add_argument("--json", action="store_true", help="list: as JSON (show always is)")
    p.add_argument("--out", metavar="DIR", help="export: the folder, as `run --out` names it (or give it after the id)")
    p = sub.add_parser("fidelity", help="one check per paper claim: the paper's figure beside ours, and a verdict")
    p.add_argument("--quick", action="store_true", help="the checks that fit in ~10 minutes on a 2-core CPU")
    p.add_argument("--only", help="comma-separated check names (see the table's first column)")
    p.add_argument("--fresh", action="store_true", help="compute every run even when the run store holds it")
    p.add_argument("--out", metavar="FILE", help="also write the table (Markdown) here")
    p = sub.add_parser("bench", help="speed and fidelity table of the standard presets on this machine")
    p.add_argument("presets", nargs="*", metavar="PRESET", help="the presets to time, as dlg idlg or dlg,idlg (default: every standard one)")
    p.add_argument("--set", action="append", metavar="NAME=VALUE",
                   help="override a parameter of every row (repeatable)")
    p.add_argument("--device", metavar="DEVICE[,DEVICE]",
                   help="auto, cpu or cuda; several (cpu,cuda) run every row on each, side by side, and say how "
                        "much sooner the GPU reached 30 dB")
    p.add_argument("--cpu-threads", type=integer(1, 256), metavar="N",
                   help="threads for the CPU rows (default: torch's)")
    p.add_argument("--images", help="comma-separated images: one run per image, with medians")
    p.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv:  # `python -m leakdemo` alone: what there is to type
        ap.print_help()
        return 2
    # `run --preset=dlg` as `run --preset dlg`, which argparse reads as the preset and a flag to refuse with the
    # fix (glued, the preset went missing: "the following arguments are required")
    argv = [part for a in argv for part in (a.split("=", 1) if a.partition("=")[0] in NAMED_ALONE else [a])]
    args, extra = ap.parse_known_args(argv)
    if extra:  # reported by the subcommand, so the hint names its own --help
        sub.choices[args.cmd].error(_unknown(extra, args.cmd, argv))
    try:
        for attr, option, folder, *files in OUTPUTS.get(args.cmd, []):
            check_output(getattr(args, attr), option, folder, *files)
        if args.cmd == "runs" and args.action == "export" and len(args.rest) >= 2:
            check_output(args.rest[1], "runs export DIR", True, RUN_FILES)
        if args.cmd == "runs" and args.action == "export" and args.out is not None:
            check_output(args.out, "--out", True, RUN_FILES)
        return {"list": cmd_list, "run": cmd_run, "runs": cmd_runs, "sweep": cmd_sweep, "record-gallery": cmd_record_gallery, "bench": cmd_bench,
                "fidelity": cmd_fidelity}[args.cmd](args)
    except LeakdemoError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `list | head`: the reader has what it wanted; quiet, as other tools are there
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # else Python's flush at exit complains
        return 141  # what a shell reports for a program that a closed pipe stopped (128 + SIGPIPE)
    except OSError as e:  # a disk that filled up, a folder removed while we wrote: one line, not a traceback
        print(f"error: {e.filename}: {e.strerror}" if e.filename and e.strerror else f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
