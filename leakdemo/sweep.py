"""Sweeps: a grid over one or two catalog parameters × seeds × images, each point scored for privacy
(what the attack recovered, against the truth, outside the attack), utility (what the defense costs the
federation, on held-out data) and formal privacy (ε where a DP mechanism exists).

    sweep = Sweep(base_scenario, [parse_axis("dp_sigma=1e-4..1:8", base)], seeds=3)
    for event in sweep.events():      # SweepStarted, then PointDone as points finish, then SweepFinished
        ...
    sweep.stop()                      # from any thread: running runs end, finished points are kept

Each run of a point is a trial: looked up in the run store first (an identical run of the same code
version costs nothing), else computed in local worker processes or as Ray tasks; results come back to
this process, which alone writes the store. Runs that differ only in seed, photo and defense strength (DLG,
iDLG and Inverting Gradients on FedSGD, DLM and DLM+ on FedAvg) go to a worker together and are attacked as one
vectorised program (together.py).
"""
from __future__ import annotations

import itertools
import math
import os
import re
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from . import catalog, privacy, utility
from .data import check_source
from .errors import LeakdemoError, ParamError
from .milestones import RECOGNISABLE_DB
from .scenario import Scenario, did_you_mean, likeliest, resolve, unread
from .words import value_text

MAX_POINTS = 64
MAX_BATCH = 256  # runs attacked as one program, at most (--batch)
MAX_SEEDS = 16  # seeds per point, at most (--seeds)
MAX_WORKERS = 64  # local worker processes, at most (--workers)
# runs per program when the sweep chooses: enough to pay (4 runs cost 1.9× one on 2 CPU cores), few enough that
# each worker reports at least ~3 times (points stream in as programs finish), more on a GPU
AUTO_BATCH = {"cpu": 8, "cuda": 64}
REPORTS_PER_WORKER = 3
# ...except where batching measured no gain on a CPU: an Inverting Gradients sweep's time there is its utility
# (training the ConvNet federation, ~25 s a run against ~2 s of attack; 8 runs on one worker: 261 s batched,
# 254 s alone), and a program trains its runs' utilities one after another, which balances workers worse
CPU_ALONE = {"invgrad"}
LOGIT_PROTOCOLS = catalog.LOGIT_PROTOCOLS


# ---------------------------------------------------------------- the grid


@dataclass(frozen=True)
class Axis:
    name: str
    values: tuple
    log: bool = False


def parse_axis(text: str, base: Scenario, said_as: str = "--vary", two: str = "--vary {} --vary {}") -> Axis:
    """'NAME=LOW..HIGH:N' (log-spaced where the catalog marks the parameter log) or 'NAME=a,b,c' (numbers in
    ascending order, however given: `dp_sigma=0.1,0.01` put 0.1's picture before 0.01's in the strip).
    said_as: what a message calls the text's box — the command line's option, or the Trade-offs page's Vary;
    two: how that box takes two ranges (a template for the two texts), said where one text holds both."""
    if "=" not in text:
        raise LeakdemoError(f"{said_as}: expected NAME=LOW..HIGH:N or NAME=a,b,c, got {text!r}")
    name, spec = (t.strip() for t in text.split("=", 1))
    # a second NAME= after a separator (a folder's path may hold a '='): `dp_sigma=1e-4..1:6, dp_clip=0,4` read
    # "the number of points after ':' must be an integer in [2, 64], got '6, dp_clip=0,4'"
    second = re.search(r"(?:^|(?<=[\s,;:]))[A-Za-z_]\w*\s*=", spec)
    if name and second:
        other = second.group()[:-1].strip()
        if other == name:
            raise LeakdemoError(f"{said_as}: {name} is given twice in {text!r}; one range is NAME=LOW..HIGH:N or "
                                f"NAME=a,b,c")
        first = f"{name}={spec[:second.start()].rstrip(' ,;:')}"
        rest = f"{other}={spec[second.end():].strip()}"
        raise LeakdemoError(f"{said_as}: one parameter per range, got a second ({other}) in {text!r}; give them as "
                            f"{two.format(first, rest)}")
    if not name:
        raise LeakdemoError(f"{said_as}: name the parameter before '=' (NAME=LOW..HIGH:N or NAME=a,b,c), got {text!r}")
    specs = catalog.params_for(base["protocol"], base["attack"], base["defense"])
    if name in ("protocol", "attack", "defense", "device"):
        raise ParamError(name, "cannot be swept: a sweep compares strengths of one scenario (set it with --set)")
    if name == "seed":  # _resolve sets every run's seed: a seed axis would run one seed under several names
        raise ParamError(name, "cannot be swept: every point already runs the sweep's seeds per point (--seeds "
                               "N on the command line): the scenario's seed and the ones after it")
    if name not in specs:
        known = sorted(n for n in specs if n not in ("protocol", "attack", "defense", "device", "seed"))
        owners = catalog.owners(name)
        close = [] if owners else likeliest(name, known, base["protocol"])
        meant = close[0] if len(close) == 1 and close[0] not in known else None  # another component's name
        whose = owners or (catalog.owners(meant) if meant else [])
        hint = catalog.instead_note(meant or name, base["protocol"], base["attack"], base["defense"],
                                    how="--set defense={} to sweep it")
        where = (f" (it belongs to: {', '.join(owners)}{hint})" if owners
                 else f" (did you mean {meant}? it belongs to: {', '.join(whose)}{hint})" if whose
                 else did_you_mean(name, known, close))
        raise ParamError(name, f"is not a parameter of protocol={base['protocol']}, attack={base['attack']}, "
                               f"defense={base['defense']}{where}; sweepable: {', '.join(known)}")
    p = specs[name]
    if ".." in spec:
        if p.kind not in ("int", "float"):
            raise ParamError(name, f"a range needs a number parameter; give the values instead, e.g. "
                                   f"{name}={','.join(str(c) for c in (p.choices or ('true', 'false'))[:3])}")
        rng, colon, count = spec.partition(":")
        if not colon:  # "the number of points after ':' …, got ''" to someone who typed no ':'
            raise ParamError(name, f"a range needs its number of points: {name}={rng}:N, N an integer in "
                                   f"[2, {MAX_POINTS}]")
        if "..." in rng:  # `1...2` read as 1.0..0.2: "low to high"
            raise ParamError(name, f"a range is LOW..HIGH, with two dots, got {rng!r}")
        lo_text, _, hi_text = rng.partition("..")
        try:
            n = int(count)
        except ValueError:
            raise ParamError(name, f"the number of points after ':' must be an integer in [2, {MAX_POINTS}], "
                                   f"got {count!r}") from None
        if not 2 <= n <= MAX_POINTS:
            raise ParamError(name, f"the number of points must be an integer in [2, {MAX_POINTS}], got {n}")
        lo, hi = p.coerce(lo_text), p.coerce(hi_text)
        if not lo < hi:
            raise ParamError(name, f"the range must go from low to high, got {lo}..{hi}")
        if p.log and lo > 0:
            values = np.geomspace(lo, hi, n)
        else:
            values = np.linspace(lo, hi, n)
        if p.kind == "int":
            values = sorted(set(int(round(v)) for v in values))
        else:
            values = [float(f"{v:.4g}") for v in values]
        return Axis(name, tuple(p.coerce(v) for v in values), log=bool(p.log and lo > 0))
    items = [v.strip() for v in spec.split(",") if v.strip()]
    if not 1 <= len(items) <= MAX_POINTS:
        raise ParamError(name, f"give 1 to {MAX_POINTS} values, got {len(items)}")
    values = tuple(dict.fromkeys(p.coerce(v) for v in items))
    if p.kind in ("int", "float"):  # ascending, as a range runs: the strip and the table read in order
        values = tuple(sorted(values))
    return Axis(name, values, log=bool(p.log and all(isinstance(v, (int, float)) and v > 0 for v in values)))


@dataclass
class Point:
    index: int
    values: dict  # the axes' values at this point ({} for the undefended point)
    undefended: bool = False
    runs: list = field(default_factory=list)  # one dict per (seed, image): metrics, or an error
    utility: dict = field(default_factory=dict)  # seed -> {"test_accuracy", ...}

    @property
    def label(self) -> str:
        if self.undefended:
            return "no defense"
        return ", ".join(f"{k}={value_text(v)}" for k, v in self.values.items())


def _seeds(base: Scenario, count: int) -> list[int]:
    return [base["seed"] + i for i in range(count)]


# ---------------------------------------------------------------- events


@dataclass
class SweepStarted:
    points: list[dict]
    runs: int
    cached: int
    backend: str
    programs: int = 0  # what the runs to compute go out as: a run alone, or runs attacked as one program (Batch)
    batch: int = 1  # runs per program, at most
    event: str = "started"


@dataclass
class PointDone:
    point: dict  # the row: values, privacy, utility, ε; see `summarise`
    done_runs: int
    total_runs: int
    seconds: float
    eta: float | None
    event: str = "point"


@dataclass
class RunDone:
    """One run of a point came back (progress between points); `row` is the point so far, for views that
    draw a point as soon as it has a first run (marked by row["partial"])."""
    point: int
    done_runs: int
    total_runs: int
    seconds: float
    eta: float | None
    row: dict | None = None
    event: str = "run"


@dataclass
class SweepFinished:
    rows: list[dict]
    status: str  # finished | stopped
    seconds: float
    event: str = "finished"


# ---------------------------------------------------------------- the sweep


@dataclass(frozen=True)
class Task:
    point: int
    seed: int
    image: str | None
    params: dict
    preset: str
    with_utility: bool


@dataclass(frozen=True)
class Batch:
    """Runs of a sweep attacked as one program (together.py): one worker computes them, each comes back as
    its own result, as a Task's does."""
    tasks: tuple[Task, ...]

    @property
    def params(self) -> dict:  # what a worker pool needs to queue it: the first run's scenario
        return self.tasks[0].params

    @property
    def preset(self) -> str:
        return self.tasks[0].preset


def unit_tasks(unit: Task | Batch) -> tuple[Task, ...]:
    return unit.tasks if isinstance(unit, Batch) else (unit,)


def failed(unit: Task | Batch, message: str) -> list[dict]:
    """A unit that never answered: each of its runs fails with the same line, the sweep goes on."""
    return [{"point": t.point, "run": {"seed": t.seed, "image": t.image, "error": message}} for t in unit_tasks(unit)]


def batched(tasks: list[Task], size: int) -> list[Task | Batch]:
    """The tasks as units of work: runs that can share one program (together.py) in batches of up to `size`,
    each unit placed where its first run was, so points still come roughly in order."""
    from .together import can_share, share_key
    if size <= 1:
        return list(tasks)
    groups: dict[tuple, list[Task]] = {}
    order: list = []
    for t in tasks:
        if not can_share(t.params):
            order.append(t)
            continue
        key = share_key(t.params)
        group = groups.setdefault(key, [])
        if len(group) % size == 0:
            order.append((key, len(group) // size))  # a new batch starts here
        group.append(t)
    out = []
    for item in order:
        if isinstance(item, Task):
            out.append(item)
            continue
        key, i = item
        chunk = tuple(groups[key][i * size:(i + 1) * size])
        out.append(chunk[0] if len(chunk) == 1 else Batch(chunk))
    return out


def _but_figures(sentence: str) -> str:
    """A sentence with its figures blanked: sentences alike but for them are said once, the first in full."""
    return re.sub(r"\d[\d,.]*", "#", sentence)


def _where(at: list[Point], swept: list[Point]) -> str | None:
    """The points a warning holds at, said shortly: None for all of them, 'model=resnet' for every point of that
    value, else each point's label."""
    if len(at) == len(swept):
        return None
    common = {k: v for k, v in at[0].values.items() if all(p.values.get(k) == v for p in at)}
    if common and sum(all(p.values.get(k) == v for k, v in common.items()) for p in swept) == len(at):
        return ", ".join(f"{k}={value_text(v)}" for k, v in common.items())
    return "; ".join(p.label for p in at)


class Sweep:
    def __init__(self, base: Scenario, axes: list[Axis], seeds: int = 1, images: list[str] | None = None,
                 store=None, fresh: bool = False, backend: str = "local", workers: int | None = None,
                 ray_address: str | None = None, runner=None, batch: int | None = None):
        """`runner(units, stop) -> iterator of results` replaces the backend (the dashboard hands its
        shared worker pool in); a unit is a Task or a Batch (`run_unit`). batch: runs attacked as one program,
        at most (None: chosen from the sweep's size, the workers and the device; 1: each run alone)."""
        if not axes:
            raise LeakdemoError("sweep: give at least one --vary NAME=LOW..HIGH:N")
        if len(axes) > 2:
            raise LeakdemoError("sweep: at most two --vary axes (a grid over more is rarely readable)")
        if len({a.name for a in axes}) != len(axes):
            raise LeakdemoError("sweep: each --vary names a different parameter")
        if not 1 <= seeds <= MAX_SEEDS:
            raise ParamError("seeds", f"must be an integer in [1, {MAX_SEEDS}], got {seeds}")
        if images is not None and not 1 <= len(images) <= 16:
            raise ParamError("images", f"give 1 to 16 images, got {len(images)}")
        if images is not None and any(a.name == "images" for a in axes):  # _resolve would put --images over the axis
            raise ParamError("images", "either vary images or give --images (every point runs each), not both")
        if workers is not None and not 1 <= workers <= MAX_WORKERS:
            raise ParamError("workers", f"must be an integer in [1, {MAX_WORKERS}], got {workers}")
        if batch is not None and not 1 <= batch <= MAX_BATCH:
            raise ParamError("batch", f"must be an integer in [1, {MAX_BATCH}], got {batch}")
        if backend not in ("local", "ray"):
            raise ParamError("backend", f"must be one of local, ray; got {backend!r}")
        if backend == "ray" and ray_address:
            check_ray_address(ray_address)
        self.base, self.axes, self.store, self.fresh = base, axes, store, fresh
        self.seeds, self.images = _seeds(base, seeds), images or [None]
        self.backend, self.ray_address, self.runner, self.batch = backend, ray_address, runner, batch
        self.workers = workers or max(1, (os.cpu_count() or 1))
        self._stop = threading.Event()
        self.points = self._grid()
        n = 1
        for a in axes:
            n *= len(a.values)
        if n > MAX_POINTS:
            raise LeakdemoError(f"sweep: {n} grid points; at most {MAX_POINTS} (fewer values per --vary)")
        for axis in axes:  # `--vary tv_dataset=SVHN,CIFAR100` on the photos ran every point alike, minutes each
            if why := self._read_nowhere(axis.name):
                raise ParamError(axis.name, f"every point of the sweep would run alike: {why}")
        self._check_something_runs()

    def _check_something_runs(self) -> None:
        """A point whose setting is refused is a row of the sweep (the others go on), but a sweep whose every
        run is refused — an unknown image, a batch too large for the data at every strength — is a bad input:
        said at once, like a bad run, not as a table of failures. So is one image that no point takes: `--images
        coffee,nope` ran every point and noted in each row that half its runs failed. Stops at the first run that
        would start for each image. The undefended point does not count: it is the yardstick, not the sweep
        (`--vary data=folder,digits` with no folder and a photo's name ran the baseline for a minute, then showed
        every swept point failed)."""
        swept = [p for p in self.points if not p.undefended]
        for image in self.images:
            refusals = []
            for point, seed in itertools.product(swept, self.seeds):
                try:
                    self._resolve(point, seed, image)
                    break
                except LeakdemoError as e:
                    refusals.append(e)
            else:
                if refusals:
                    raise refusals[0]

    def _read_nowhere(self, name: str) -> str | None:
        """Why no swept point reads setting `name` (catalog.without_effect), or None where one does. The undefended
        point is left out: it is the yardstick, not the sweep."""
        why = [catalog.without_effect({**self.base.params, **p.values}, name) for p in self.points if not p.undefended]
        return why[0] if all(why) else None

    def unread(self, names) -> list[str]:
        """What is said of the named settings (the command line's --set) that no point of the sweep reads; an
        axis that no point reads is refused instead."""
        return unread(self.base, [k for k in names if self._read_nowhere(k)])

    def warnings(self) -> list[str]:
        """What `run` warns of at the swept points (a cost, a model the attack fails on, too few equations), each
        once, with the points it holds at unless it holds at every one; warnings alike but for their figures are
        said once, the first in full (FedAvg's batch sizes 4, 8 and 16 each had a paragraph on its equations).
        Too few equations is left to the line under the chart where that counts each point's
        (tradeoff.equations_line): a FedSGD batch-size sweep shows it anyway."""
        from .tradeoff import equations_line
        axis = self.axes[0]
        charted = len(self.axes) == 1 and equations_line(axis.name, axis.values, self.base.params) is not None
        swept, said = [p for p in self.points if not p.undefended], {}
        for point in swept:
            try:
                sc = self._resolve(point, self.seeds[0], self.images[0])
            except LeakdemoError:
                continue  # its row says why
            left = catalog.too_few_equations(sc.params) if charted else None
            for w in sc.warnings:
                if w != left:
                    said.setdefault(w, []).append(point)
        alike: dict[str, list[tuple[str, list[Point]]]] = {}
        for w, at in said.items():
            alike.setdefault(_but_figures(w), []).append((w, at))
        out = []
        for (w, at), *more in alike.values():
            where = _where(at, swept)
            line = w if where is None or w.startswith(where + ":") else f"at {where}: {w}"
            also = "; ".join(_where(a, swept) or "every point" for _, a in more)
            out.append(line + (f" — likewise at {also}" if more else ""))
        return out

    def refused(self) -> str | None:
        """Which swept points will run nothing, and why, said before the sweep starts: `clients=1..20:5` on
        pli-digits ran one point and showed four failed rows after it, where the page had said "5 points" and
        nothing else. A point counts when its first run (first seed, first image) is refused, as a run would be;
        reasons alike but for their figures are said once, the first in full. None where every point runs."""
        swept, why = [p for p in self.points if not p.undefended], {}
        for point in swept:
            try:
                self._resolve(point, self.seeds[0], self.images[0])
            except LeakdemoError as e:
                why.setdefault(_but_figures(str(e)), (str(e), []))[1].append(point)
        if not why:
            return None
        at = [p for _, points in why.values() for p in points]
        if len(self.axes) == 1:
            name = self.axes[0].name
            where = f"{name}={', '.join(value_text(p.values[name]) for p in sorted(at, key=lambda p: p.index))}"
        else:
            where = "; ".join(p.label for p in sorted(at, key=lambda p: p.index))
        reasons = " · ".join(text for text, _ in why.values())
        return (f"{len(at)} of {len(swept)} swept points will run nothing (their rows will say so), at {where}: "
                f"{reasons}")

    def stop(self) -> None:
        self._stop.set()

    def _grid(self) -> list[Point]:
        combos = [{}]
        for a in self.axes:
            combos = [{**c, a.name: v} for c in combos for v in a.values]
        defended = self.base["defense"] != "none"
        points = [Point(0, {}, undefended=True)] if defended else []
        strengths = catalog.strengths(self.base["defense"])
        self.as_undefended = []  # the swept values that are the undefended point's run under another name
        for c in combos:
            if (defended and catalog.defense_does_nothing({**self.base.params, **c})
                    and all(k in strengths or self.base.params.get(k) == v for k, v in c.items())):
                # pruning 0 %: run as its own point, it ran the undefended run twice (a custom pruning sweep's
                # first range, 0 to 0.999, always did)
                self.as_undefended.append(Point(0, c).label)
                continue
            points.append(Point(len(points), c))
        if self.as_undefended and len(points) == 1:
            name = self.axes[0].name
            what = " and ".join(self.as_undefended) if len(self.axes) > 1 else \
                " and ".join(value_text(v) for v in self.axes[0].values)  # every value: the axis's name is said
            raise ParamError(name, f"{what} {'leaves' if len(self.as_undefended) == 1 else 'leave'} the payload as "
                                   "it is (the undefended scenario): the sweep would run nothing else; sweep stronger values")
        return points

    def same_as_undefended(self, run: str = "the undefended run, not run twice") -> str:
        """'prune_ratio=0 is the undefended run, not run twice' where a swept value is that run ('' where none
        is): the sweep's headline says it, page and command line, for the row the table has not."""
        if not self.as_undefended:
            return ""
        return f"{' and '.join(self.as_undefended)} {'is' if len(self.as_undefended) == 1 else 'are'} {run}"

    def _point_params(self, point: Point) -> dict:
        over = {"defense": "none"} if point.undefended else dict(point.values)
        return over

    def _resolve(self, point: Point, seed: int, image: str | None) -> Scenario:
        over = {**self._point_params(point), "seed": seed}
        if image is not None:
            over["images"] = image
        sc = resolve(self.base.params, over, preset=self.base.preset)
        check_source(sc)  # e.g. a batch larger than the source: refused without a worker
        return sc

    def utility_is_one_figure(self) -> bool:
        """True when the federation's utility is the same figure at every point: its training (utility.py: ten
        clients, fixed batches, rounds and step size) does not take the swept parameter — a FedSGD client's batch
        size, warm-up steps, FedAvg's local learning rate — only the round the attack observes does. The page
        says so under the flat utility line, which otherwise reads as a measured "costs nothing"."""
        if not utility.applies(dict(self.base.params)):
            return False
        keys = set()
        for point in self.points:
            try:
                keys.add(utility.keys(dict(self._resolve(point, self.seeds[0], self.images[0]).params))["test_accuracy"])
            except LeakdemoError:  # a point refused before running has no utility either
                continue
        return len(keys) == 1

    def scenario(self, index: int) -> Scenario:
        """The scenario of point `index` at the sweep's first seed and image: what the page's "watch it live"
        link opens in the Attack Lab (the point's first run, the one its thumbnail shows)."""
        return self._resolve(self.points[index], self.seeds[0], self.images[0])

    def tasks(self) -> list[Task]:
        out = []
        for point in self.points:
            for seed in self.seeds:
                for j, image in enumerate(self.images):
                    try:
                        sc = self._resolve(point, seed, image)
                    except LeakdemoError as e:
                        point.runs.append({"seed": seed, "image": image, "error": str(e)})
                        continue
                    out.append(Task(point.index, seed, image, dict(sc.params), sc.preset, with_utility=j == 0))
        return out

    def batch_size(self, runs: int) -> int:
        """Runs per program: as asked, else as many as keep every worker reporting a few times (AUTO_BATCH)."""
        if self.batch is not None:
            return self.batch
        from .device import device_name
        device = device_name(self.base["device"])
        if device == "cpu" and self.base["attack"] in CPU_ALONE:
            return 1
        cap = AUTO_BATCH.get(device, AUTO_BATCH["cpu"])
        return max(1, min(cap, math.ceil(runs / (self.workers * REPORTS_PER_WORKER))))

    def events(self) -> Iterator:
        t0 = time.perf_counter()
        tasks = self.tasks()
        todo, results = [], []
        for task in tasks:  # what the store holds is not computed again
            found = None if (self.store is None or self.fresh) else _from_store(self.store, task)
            (results if found is not None else todo).append(found if found is not None else task)
        size = self.batch_size(len(todo))
        units = batched(todo, size)
        yield SweepStarted([self._row(p) for p in self.points], len(tasks), len(results), self.backend, len(units),
                           max((len(unit_tasks(u)) for u in units), default=1))
        remaining = {p.index: sum(1 for t in tasks if t.point == p.index) for p in self.points}
        done, total = 0, len(tasks)
        reported = set()

        def finish(res: dict):
            nonlocal done
            point = self.points[res["point"]]
            point.runs.append(res["run"])
            if res.get("utility") is not None:
                point.utility[res["run"]["seed"]] = res["utility"]
            remaining[point.index] -= 1
            done += 1

        for res in results:
            finish(res)
        computed = done
        for point in self.points:
            if remaining[point.index] == 0 and point.index not in reported:
                reported.add(point.index)
                yield PointDone(self._row(point), done, total, time.perf_counter() - t0, None)
        status = "finished"
        if todo:
            if self.runner is not None:
                results_in = self.runner(units, self._stop)
            else:
                backend = _run_local if self.backend == "local" else _run_ray
                results_in = backend(units, self.workers, self._stop, self.ray_address)
            t_compute = time.perf_counter()
            for res in results_in:
                if res.get("record") is not None and self.store is not None:
                    _record(self.store, res.pop("record"))
                if res.get("utility") is not None and self.store is not None:
                    from .utility import store_result
                    store_result(self.store, res["utility_key"], res["utility"])
                finish(res)
                elapsed = time.perf_counter() - t_compute
                rate = elapsed / max(done - computed, 1)
                eta = rate * (total - done)
                point = self.points[res["point"]]
                if remaining[point.index] == 0:
                    reported.add(point.index)
                    yield PointDone(self._row(point), done, total, time.perf_counter() - t0, eta)
                else:
                    yield RunDone(point.index, done, total, time.perf_counter() - t0, eta,
                                  {**self._row(point), "partial": True})
            if self._stop.is_set():
                status = "stopped"
        for point in self.points:  # points with a failed setting (every run refused) are rows too
            if point.index not in reported and remaining[point.index] == 0:
                yield PointDone(self._row(point), done, total, time.perf_counter() - t0, None)
        rows = [self._row(p) for p in self.points if p.runs]
        yield SweepFinished(rows, status, round(time.perf_counter() - t0, 3))

    def _row(self, point: Point) -> dict:
        return summarise(point, self.base, self.axes)


# ---------------------------------------------------------------- one run, anywhere


def run_unit(unit: Task | Batch, stop_event=None) -> list[dict]:
    """Run a Task, or a Batch's runs as one program; one result per run (see `run_task`). A top-level
    function: local worker processes, Ray tasks and the dashboard's workers call it."""
    if isinstance(unit, Task):
        return [run_task(unit, stop_event)]
    from . import cancel
    from .runner import STOPPED_IN_SETUP
    from .together import prepare, side_by_side
    stop = stop_event if stop_event is not None else threading.Event()
    try:
        runs = prepare([Scenario(t.params, t.preset) for t in unit.tasks], stop)
    except cancel.Cancelled:
        return failed(unit, STOPPED_IN_SETUP)
    except LeakdemoError as e:
        return failed(unit, str(e))
    results = [_result(t, run, events) for t, run, events in zip(unit.tasks, runs, side_by_side(runs))]
    for r in results:  # each run lasted the whole program; the point's compute time counts it once
        if r["run"].get("seconds") is not None:
            r["run"]["seconds"] = round(r["run"]["seconds"] / len(results), 3)
    return results


def run_task(task: Task, stop_event=None) -> dict:
    """Run one (point, seed, image) with no store; returns its scored result and what the store keeps."""
    from .runner import Run
    sc = Scenario(task.params, task.preset)
    run = Run(sc, source="sweep", stop_event=stop_event)
    return _result(task, run, run.events())


def _result(task: Task, run, events) -> dict:
    """A run's events as the sweep's result: scored, with the record the store keeps and (for the first image
    of a seed) the federation's utility."""
    from .events import Failed, Finished, Started
    from .store import _thin, keyframe_cap, scenario_key
    from .device import device_name
    sc = run.scenario
    started = finished = None
    error = None
    for ev in events:
        if isinstance(ev, Started):
            started = ev
        elif isinstance(ev, Finished):
            finished = ev
        elif isinstance(ev, Failed):
            error = ev.message
    base = {"point": task.point}
    if finished is None:
        return {**base, "run": {"seed": task.seed, "image": task.image, "error": error or "no result"}}
    out = {**base, "run": _scored(task, finished, started, None)}
    key = scenario_key(task.params, device_name(task.params["device"]))
    out["record"] = {"key": key, "scenario": sc.to_dict(), "started": started, "finished": finished,
                     "keyframes": _thin(run.keyframes.items, keyframe_cap(finished.images))}
    if task.with_utility:
        if utility.applies(task.params):
            out["utility"] = utility.measure(task.params)
            out["utility_key"] = utility.keys(task.params)
    return out


def _scored(task: Task, finished, started, run_id) -> dict:
    m = finished.metrics
    run = {"seed": task.seed, "image": task.image, "status": finished.status, "psnr": m.get("psnr"),
           "ssim": m.get("ssim"), "lpips": m.get("lpips"), "seconds": finished.seconds, "run_id": run_id,
           "attack_accuracy": m.get("attack_accuracy"), "names": started.names if started else None}
    own = utility.of_run(m)  # vertical FL's final training loss, or logit sharing's clients' test accuracy
    if own is not None:
        run[own[0]] = own[1]
    if own is not None and own[0] == "training_loss":  # cafe-faces: a loss that no defense can be seen to raise
        run["barely_learns"] = utility.barely_learns(m["utility"], task.params)
    run["thumbnail"] = finished.images[:4]
    run["originals"] = started.originals[:4] if started is not None else None
    return run


def lacking_runs(sweep: Sweep) -> int:
    """How many of the sweep's runs its store does not hold (all of them without a store)."""
    tasks = sweep.tasks()
    if sweep.store is None:
        return len(tasks)
    return sum(1 for t in tasks if _from_store(sweep.store, t) is None)


def _from_store(store, task: Task) -> dict | None:
    from .device import device_name
    run_id = store.find_scenario(task.params, device_name(task.params["device"]))
    if run_id is None:
        return None
    stored = store.load(run_id, keyframes=False)
    out = {"point": task.point, "run": _scored(task, stored.finished, stored.started, run_id)}
    if task.with_utility:
        if utility.applies(task.params):
            u = utility.cached(task.params, store)
            if u is None:
                return None  # the runs are there, the utility is not: compute both (cheap next time)
            out["utility"] = u
    return out


def _record(store, rec: dict) -> None:
    try:
        store.record(rec["key"], "sweep", rec["scenario"], rec["started"], rec["finished"], rec["keyframes"])
    except Exception as e:  # noqa: BLE001 — a point's figures never depend on its record
        import sys
        print(f"warning: a sweep run was not recorded in the run store ({e})", file=sys.stderr)


def _worker_init() -> None:
    import torch

    from .spawn import exit_with_parent
    torch.set_num_threads(1)  # one run per core: several small runs beat one run on many threads
    exit_with_parent()  # a sweep killed outright takes its workers with it


def _run_local(units: list[Task | Batch], workers: int, stop: threading.Event, _address) -> Iterator[dict]:
    """Worker processes (spawned, one thread each), results in order of completion."""
    import multiprocessing as mp
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    n = max(1, min(workers, len(units)))
    from .spawn import plain_main
    pool = ProcessPoolExecutor(n, mp_context=mp.get_context("spawn"), initializer=_worker_init)
    with plain_main():  # the executor starts its processes as tasks are submitted
        pending = {pool.submit(run_unit, u): u for u in units}
    try:
        while pending and not stop.is_set():
            ready, _ = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            for fut in ready:
                unit = pending.pop(fut)
                try:
                    results = fut.result()
                except Exception as e:  # a worker that died: the point's runs fail, the sweep goes on
                    results = failed(unit, f"the worker failed ({e.__class__.__name__}: {e})")
                yield from results
    finally:
        for fut in pending:
            fut.cancel()
        if pending:  # stopped: the runs under way are abandoned, their processes ended now
            for proc in list(getattr(pool, "_processes", {}).values()):
                proc.terminate()
        pool.shutdown(wait=True, cancel_futures=True)


def check_ray_address(address: str) -> None:
    """An address Ray cannot reach is said in seconds: ray.init itself retries it for minutes."""
    import socket
    if address in ("auto", "local"):  # this machine's cluster (`ray start`), or a new one: Ray answers at once
        return
    host, sep, port = address.split("://", 1)[-1].rstrip("/").rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ParamError("address", f"must be host:port, ray://host:port, auto or local; got {address!r}")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
    except OSError as e:
        raise ParamError("address", f"cannot reach the Ray cluster at {address} ({e.strerror or e}); check --address "
                                    "or $LEAKDEMO_RAY_ADDRESS, or use --backend local") from None


def _run_ray(units: list[Task | Batch], workers: int, stop: threading.Event, address: str | None) -> Iterator[dict]:
    """Ray tasks on an existing cluster (address), or on a local Ray started for this sweep."""
    try:
        import ray
    except ImportError:
        raise LeakdemoError("backend: ray is not installed here (pip install ray), or use --backend local") from None
    started_here = False
    if not ray.is_initialized():
        try:
            if address:
                ray.init(address=address, log_to_driver=False)
            else:
                ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
                started_here = True
        except Exception as e:
            raise LeakdemoError(f"backend: cannot reach the Ray cluster at {address or 'local'} ({e})") from None
    remote = ray.remote(_ray_task)
    # a GPU per task when the sweep asks for CUDA, else one core (each task runs on one thread)
    refs = {remote.options(num_cpus=1, num_gpus=1 if u.params["device"] == "cuda" else 0).remote(u): u for u in units}
    try:
        while refs and not stop.is_set():
            ready, _ = ray.wait(list(refs), num_returns=1, timeout=0.5)
            for ref in ready:
                unit = refs.pop(ref)
                try:
                    results = ray.get(ref)
                except Exception as e:
                    results = failed(unit, f"the Ray task failed ({e.__class__.__name__})")
                yield from results
    finally:
        for ref in refs:
            ray.cancel(ref, force=True)
        if started_here:
            ray.shutdown()


def _ray_task(unit: Task | Batch) -> list[dict]:
    _worker_init()
    return run_unit(unit)


# ---------------------------------------------------------------- a point's row


def _median(values):
    values = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return statistics.median(values) if values else None


def _four(value):
    """Four significant digits: sweep.csv read "0.6000000238418579" for a clients' accuracy of 0.6 (float32)."""
    return None if value is None else float(f"{value:.4g}")


def _spread(values):
    values = [v for v in values if v is not None]
    return [min(values), max(values)] if values else None


def summarise(point: Point, base: Scenario, axes: list[Axis]) -> dict:
    """One row of the sweep: the point's values, privacy (median and spread over seeds × images),
    utility, ε, and the runs' errors if any."""
    p = dict(base.params)
    if point.undefended:
        p["defense"] = "none"
    else:
        p.update(point.values)
    ok = [r for r in point.runs if "error" not in r]
    psnr = [r["psnr"] for r in ok]
    logit = base["protocol"] in LOGIT_PROTOCOLS
    row = {"index": point.index, "label": point.label, "undefended": point.undefended,
           **{a.name: (None if point.undefended else point.values.get(a.name)) for a in axes},
           "runs": len(ok), "failed": len(point.runs) - len(ok),
           "psnr": _median(psnr), "psnr_range": _spread(psnr), "ssim": _median([r["ssim"] for r in ok]),
           "lpips": _four(_median([r["lpips"] for r in ok])),
           "recognisable": (sum(v >= RECOGNISABLE_DB for v in psnr) / len(psnr)) if psnr and not logit else None,
           "attack_accuracy": _median([r.get("attack_accuracy") for r in ok]) if logit else None}
    row["errors"] = sorted({r["error"] for r in point.runs if "error" in r})
    accuracies = [u["test_accuracy"] for u in point.utility.values() if u]
    row["test_accuracy"] = _four(_median(accuracies))
    row["test_accuracy_range"] = _spread(accuracies)
    row["clean_test_accuracy"] = _four(_median([u["clean_test_accuracy"] for u in point.utility.values() if u]))
    row["training_loss"] = _four(_median([r.get("training_loss") for r in ok]))
    row["client_accuracy"] = _four(_median([r.get("client_accuracy") for r in ok]))
    # judged on the undefended training, which each vertical-FL run repeats beside its own: said once per sweep
    row["barely_learns"] = next((r["barely_learns"] for r in ok if r.get("barely_learns")), None)
    try:
        g = privacy.guarantee(p)
    except KeyError:
        g = {"epsilon": None, "note": "no formal guarantee", "delta": None}
    row["epsilon"] = g["epsilon"] if g["epsilon"] is None or math.isfinite(g["epsilon"]) else math.inf
    row["privacy"] = privacy.describe(g)
    row["seconds"] = round(sum(r.get("seconds") or 0 for r in ok), 2)
    row["run_ids"] = [r.get("run_id") for r in ok]
    first = ok[0] if ok else None
    row["thumbnail"] = None if first is None else first.get("thumbnail")
    row["originals"] = None if first is None else first.get("originals")
    return row


def flat_utility(rows: list[dict]) -> str | None:
    """Why the sweep's utility cannot show what its defense costs (utility.barely_learns: cafe-faces' training
    loss hardly falls even undefended), said once under its chart; None where it can."""
    return next((r["barely_learns"] for r in rows if r.get("barely_learns")), None)


def utility_of(row: dict) -> tuple[str, float | None]:
    """The row's utility figure and its name: test accuracy (FedSGD/FedAvg), client accuracy (logits),
    or the training loss (vertical FL, lower is better)."""
    for name in ("test_accuracy", "client_accuracy", "training_loss"):
        if row.get(name) is not None:
            return name, row[name]
    return "test_accuracy", None


# Differences below these are noise between strengths and seeds, not a better choice: ties on the front.
LEAK_TIES = {"psnr": 1.0, "attack_accuracy": 0.05}
UTILITY_TIES = {"test_accuracy": 0.02, "client_accuracy": 0.02}


def pareto(rows: list[dict], privacy_key: str = "psnr") -> list[int]:
    """Indices of the rows no other row beats on leakage (lower is better) and utility (higher is better;
    for a training loss, lower), differences within LEAK_TIES / UTILITY_TIES counting as ties: in the noise
    floor (~5 dB) σ = 1 at 15 % accuracy is no better a choice than σ = 0.07 at 96 % for being 0.3 dB lower,
    nor is 17 dB at 96.5 % beside 4.8 dB at 96 %. A row beats another by more than a tie on one axis and
    at most a tie on the other, so no chain of wins comes back to its start, and the front is never empty."""
    pts = []
    for r in rows:
        name, u = utility_of(r)
        leak = r.get(privacy_key) if privacy_key != "attack_accuracy" else r.get("attack_accuracy")
        if u is None or leak is None:
            continue
        pts.append((r["index"], leak, -u if name == "training_loss" else u, UTILITY_TIES.get(name, 0.0)))
    tl = LEAK_TIES.get(privacy_key, 0.0)
    front = []
    for i, leak, u, tu in pts:
        if not any(l2 <= leak + tl and u2 >= u - tu and (l2 < leak - tl or u2 > u + tu) for _, l2, u2, _ in pts):
            front.append(i)
    return front
