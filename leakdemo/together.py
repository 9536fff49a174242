"""Several runs as one program: a sweep's runs of DLG, iDLG or Inverting Gradients (FedSGD), DLM or DLM+ (FedAvg)
that differ only in seed, photo and defense strength are attacked together, trial i of one vectorised L-BFGS (or
Inverting Gradients' signed Adam) being run i (`several_runs` in attacks/dlg.py, dlm.py and invgrad.py),
then dealt back into one ordinary `Run` each — scored, timed and recorded as if it had run alone.

    runs = prepare([scenario_a, scenario_b, ...], stop_event)   # scenarios for which `share_key` agrees
    events = side_by_side(runs)                                   # each run's events: Started, ..., Finished

Why: one L-BFGS step of K runs costs far less than K steps (measured on 2 CPU cores: 4 at once 1.9× one,
10 at once 4.0×), and on a GPU nearly the price of one. Each case is still simulated on its own (its model,
gradient and defense noise), and the attacker still receives only its own run's observation.
"""
from __future__ import annotations

from collections import deque
from typing import Iterator

from . import catalog  # the rest is imported where it is used: `can_share` and `share_key` serve the web server,
# which groups a sweep's runs and never imports torch (its workers do)

ATTACKS = {"fedsgd": ("dlg", "idlg", "invgrad"), "fedavg": ("dlm", "dlm-plus")}  # the attacks `prepare` can batch
# what may differ between runs of one program: everything else (model, data, steps, learning rate) is shared
VARYING = {"seed", "images", "defense"} | {p.name for d in catalog.DEFENSES.values() for p in d.params}


def can_share(params: dict) -> bool:
    """A run that can be attacked together with others: DLG, iDLG or Inverting Gradients on a plain FedSGD
    gradient of one client, DLM or DLM+ on a FedAvg client's updates; one start (L-BFGS's: the robust loop),
    which is what `several_runs` is the same as, to tolerance."""
    if params["attack"] not in ATTACKS.get(params["protocol"], ()) or params.get("clients", 1) != 1:
        return False
    if params["attack"] == "invgrad":
        return params.get("restarts", 0) == 0
    return params.get("trials", 1) == 1 and params.get("loop") == "robust"


def share_key(params: dict) -> tuple:
    """Runs with equal keys can be attacked as one program."""
    return tuple(sorted((k, repr(v)) for k, v in params.items() if k not in VARYING))


def prepare(scenarios: list, stop_event) -> list:
    """One `Run` per scenario, their attacks one program. Each case is set up alone here (its model, its
    gradient, its defense); the runs' events then come as usual, as long as they are pulled side by side."""
    from . import cancel
    from .device import resolve_device
    from .runner import Run
    p0 = dict(scenarios[0].params)
    keys = {share_key(dict(s.params)) for s in scenarios}
    if len(keys) != 1 or not all(can_share(dict(s.params)) for s in scenarios):
        raise ValueError("together: these runs do not share one program")
    device = resolve_device(p0["device"])
    protocol, attack = catalog.PROTOCOLS[p0["protocol"]], catalog.ATTACKS[p0["attack"]]
    cases = []
    with cancel.watching(stop_event):
        for s in scenarios:
            obs, kn, truth = protocol.run(dict(s.params), device, None)
            cases.append((obs, kn.restricted(attack.needs), truth))
    runs, seeds = [(obs, kn) for obs, kn, _ in cases], [s["seed"] for s in scenarios]
    if p0["attack"] == "invgrad":
        from .attacks.invgrad import several_runs as adam_runs
        steps = adam_runs(runs, p0, seeds, device)
    else:
        if p0["protocol"] == "fedavg":
            from .attacks.dlm import several_runs
        else:
            from .attacks.dlg import several_runs
        steps = several_runs(runs, p0, seeds, device, fixed_labels=p0["attack"] == "idlg")
    dealer = _Dealer(steps, len(scenarios))
    return [Run(s, stop_event=stop_event, source="sweep", prepared=(obs, kn, truth, dealer.stream(i)))
            for i, (s, (obs, kn, truth)) in enumerate(zip(scenarios, cases))]


def side_by_side(runs: list) -> list[list]:
    """Every run's events, pulling them in turn so that no run gets far ahead of the others (the steps
    they share wait in memory until each has taken its own)."""
    streams = [r.events() for r in runs]
    events: list[list] = [[] for _ in runs]
    active = list(range(len(runs)))
    while active:
        for i in list(active):
            try:
                events[i].append(next(streams[i]))
            except StopIteration:
                active.remove(i)
    return events


class _Dealer:
    """Deals each step of the shared program out to its runs: run i's images, labels and loss."""

    def __init__(self, steps: Iterator, k: int):
        self.steps, self.k = steps, k
        self.queues = [deque() for _ in range(k)]
        self.error: BaseException | None = None
        self.over = False

    def stream(self, i: int) -> Iterator:
        while True:
            if not self.queues[i]:
                if self.error is not None:
                    raise self.error  # the program failed: so does every run of it, not only the first to see it
                if self.over:
                    return
                try:
                    step = next(self.steps)
                except StopIteration:
                    self.over = True
                    return
                except BaseException as e:
                    self.error = e
                    raise
                for j in range(self.k):
                    self.queues[j].append(self._part(step, j))
            yield self.queues[i].popleft()

    def _part(self, step, j: int):
        from .threat import Step
        n = len(step.images) // self.k  # each run's images (DLM: every image of the client's first epoch)
        rows = slice(j * n, (j + 1) * n)
        labels = step.labels[rows] if step.labels is not None else None
        loss = step.losses[j] if step.losses is not None else step.loss
        return Step(step.iteration, step.total, loss, step.images[rows], labels, step.note, step.stage, step.final,
                    aligned=step.aligned)
