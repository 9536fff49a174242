"""Runner: Scenario -> a stream of Events. It wires protocol, defense and attack together, times them,
scores each snapshot against the ground truth the attack never sees, and stops on request.

    run = Run(scenario)
    for event in run.events():   # Started, Progress..., then Finished or Failed
        ...
    run.stop()                   # from any thread; the run ends within one attack step
"""
from __future__ import annotations

import math
import sys
import threading
import time
import traceback
from typing import Iterator

import numpy as np
import torch

from . import cancel, catalog, metrics, milestones
from .crossings import Held
from .device import device_name, resolve_device
from .errors import LeakdemoError
from .events import Failed, Finished, Progress, Started, Thinned
from .scenario import Scenario, file_dict

EVAL_INTERVAL = 0.1  # seconds between scored snapshots (every step when steps are slower)
SCORING_SPACING = 8  # ... and at least this many times what one scoring took: scoring takes at most ~1/9 of the time
MAX_KEYFRAMES = 48  # frames kept for the progress GIF (thinned uniformly: memory stays bounded)
MAX_HISTORY = 4000  # curve points kept (thinned uniformly)
STOPPED_IN_SETUP = "stopped during the set-up, before the attack's first step"

# oneDNN (mkldnn) is slower than PyTorch's native CPU kernels for the gradient-matching attacks' tiny
# convolutions with double backward: measured 1.6x per DLG function evaluation and 1.15x per Inverting
# Gradients step here. It is faster where networks train on batches: the logit-sharing federations and PLI's
# inversion networks (`run pli` 22.9 s against 30.5 s, the same figures) and CAFE's vertical federation
# (`run cafe` 36.3 s against 58.5 s; 33.40 against 33.42 dB). Each run sets it for its attack; off by default.
torch.backends.mkldnn.enabled = False
ONEDNN_ATTACKS = {"pli", "tbi", "cafe"}


def to_hwc(images: torch.Tensor) -> np.ndarray:
    return metrics.to_unit(images).permute(0, 2, 3, 1).numpy()


def threat_card(s: Scenario, obs, kn) -> dict:
    """What the attacker receives and knows, in plain words, for this scenario."""
    protocol, attack, defense = catalog.components(s["protocol"], s["attack"], s["defense"])
    knows = list(dict.fromkeys(kn.facts + list(attack.knowledge)))
    return {
        "protocol": protocol.title, "attack": attack.title, "defense": defense.title,
        "receives": obs.description,
        "knows": knows,
        "does_not_know": ["the client's images", "their labels" if s["attack"] == "dlg" else
                          "their labels (it infers them)"],
        "defenses_in_play": [d for d in _active_defenses(s)],
        "warnings": list(s.warnings),
    }


def _active_defenses(s: Scenario) -> list[str]:
    out = []
    if s["defense"] != "none":
        d = catalog.DEFENSES[s["defense"]]
        out.append(f"{d.title}: " + ", ".join(f"{p.name}={s[p.name]}" for p in d.params))
    protocol = catalog.PROTOCOLS[s["protocol"]]
    for p in protocol.params:
        if p.defends and s[p.name] != p.default:
            out.append(f"{p.name}={s[p.name]} ({p.help})")
    return out


class Run:
    """One run of a scenario. With a run store, a finished run is recorded there, and (unless `fresh`) an
    identical scenario already recorded by this code version is replayed from it instead of computed."""

    def __init__(self, scenario: Scenario, uploads: list[tuple[str, np.ndarray]] | None = None, stop_event=None,
                 store=None, fresh: bool = False, source: str = "cli", prepared: tuple | None = None):
        """prepared: (observation, knowledge, ground truth, the attack's steps) when the case was set up and
        the attack started elsewhere — several runs attacked as one program (together.py)."""
        self.scenario = scenario
        self.prepared = prepared
        self.uploads = uploads
        self._stop = stop_event if stop_event is not None else threading.Event()  # any object with set/is_set
        self.keyframes = Thinned(MAX_KEYFRAMES)
        self.store, self.fresh, self.source = store, fresh, source
        self.stored_id: int | None = None  # the store's id of this run (recorded, or replayed from)
        self.from_store = False

    def stop(self) -> None:
        self._stop.set()

    def events(self) -> Iterator:
        try:
            if self.store is None:
                yield from self._events()
                return
            key = self.key()
            if not self.fresh:
                found = self.store.find(key)
                if found is not None:
                    yield from self._replay(found)
                    return
            started = None
            for ev in self._events():
                if isinstance(ev, Started):
                    started = ev
                elif isinstance(ev, Finished) and started is not None:
                    self._record(key, started, ev)
                yield ev
        except LeakdemoError as e:
            yield Failed(str(e))
        except torch.cuda.OutOfMemoryError:
            yield Failed("the GPU ran out of memory; choose a smaller batch or image size, or device=cpu")
        except Exception as e:  # an engine bug must still reach the user as one readable line
            traceback.print_exc(file=sys.stderr)
            yield Failed(f"internal error ({e.__class__.__name__}: {e}); the details are in the server log")

    def file_dict(self) -> dict:
        """The scenario as its scenario.json holds it: with the uploaded photos' names, so that the Lab's download
        says what a replay of it lacks."""
        return file_dict(self.scenario, [name for name, _ in self.uploads or []])

    def key(self) -> str:
        from .store import scenario_key
        return scenario_key(dict(self.scenario.params), device_name(self.scenario["device"]), self.uploads)

    def _replay(self, run_id: int) -> Iterator:
        """A recorded run's Started and Finished, as they were (images as 8-bit PNG)."""
        stored = self.store.load(run_id)
        self.stored_id, self.from_store = run_id, True
        self.keyframes.items = list(stored.keyframes)
        yield stored.started
        yield stored.finished

    def _record(self, key: str, started: Started, finished: Finished) -> None:
        """Keep the run in the store; a store that fails now costs the record, never the result."""
        try:
            self.stored_id = self.store.record(key, self.source, self.scenario.to_dict(), started, finished,
                                               self.keyframes.items)
        except Exception as e:  # noqa: BLE001 — the record is a convenience, the result is what matters
            print(f"warning: the run was not recorded in the run store ({e})", file=sys.stderr)

    def _events(self) -> Iterator:
        s = self.scenario
        p = dict(s.params)
        t_setup = time.perf_counter()
        device = resolve_device(p["device"])
        torch.backends.mkldnn.enabled = p["attack"] in ONEDNN_ATTACKS  # one run at a time in a process
        protocol = catalog.PROTOCOLS[p["protocol"]]
        attack = catalog.ATTACKS[p["attack"]]
        try:  # Stop reaches the set-up too: a warm-up or a federation's rounds check it (cancel.py)
            with cancel.watching(self._stop):
                if self.prepared is not None:
                    obs, kn, truth, steps = self.prepared
                else:
                    obs, kn, truth = protocol.run(p, device, self.uploads)
                    kn = kn.restricted(attack.needs)  # e.g. DLM is not told the client's learning rate
                    steps = attack.run(obs, kn, p, device)
                first = next(steps)  # the attack's first step happens before `Started`, so the first frame is real
        except cancel.Cancelled:
            yield Failed(STOPPED_IN_SETUP)
            return
        truth_images = truth.images.float()
        lpips_ok, lpips_reason = metrics.lpips_status()
        yield Started(s.to_dict(), threat_card(s, obs, kn), to_hwc(truth_images), truth.names,
                      truth.labels.tolist(), first.total, str(device), lpips_reason,
                      round(time.perf_counter() - t_setup, 3))
        t0 = time.perf_counter()
        history = {k: Thinned(MAX_HISTORY) for k in ("iteration", "seconds", "loss", "psnr", "ssim")}
        if truth.checks is not None:  # e.g. CAFE's Step I/II errors, scored here against the truth
            history.update({k: Thinned(MAX_HISTORY) for k in ("step1_error", "step2_error")})
        if truth.judge is not None:  # PLI: attack accuracy, and the TBI baseline's when it runs alongside
            history.update({k: Thinned(MAX_HISTORY) for k in JUDGED})
        last_eval, last, status = -1.0, first, "finished"
        eval_cost = 0.0  # seconds one scoring takes: big data sets are scored less often, so the attack keeps the CPU
        matching, stage = None, None  # stage: the last one streamed (a new one is always streamed, and forced
        # into the history, so that PLI's accuracy curve has a point at each communication round)
        chain = _prepend(first, steps)
        steady = None  # (iteration, seconds) at the first step taken: the ETA's rate starts there
        # the milestones still ahead, and the unscored steps since the last scored frame, so that a frame that
        # crossed one is traced back to the step that did (crossings.py); where a point carries checks or a
        # verdict as well, the history keeps only scored frames
        plain = truth.checks is None and truth.judge is None
        ahead = [milestones.RECOGNISABLE_DB, milestones.RECOVERED_DB] if plain else []
        held = Held()

        def score_kept(kept):
            return metrics.score(kept.images, _truth_for(kept, truth_images), aligned=kept.aligned)
        while True:
            try:  # one step at a time under this run's stop event (never across a yield: see cancel.py)
                with cancel.watching(self._stop):
                    step = next(chain)
            except StopIteration:
                break
            except cancel.Cancelled:  # stopped inside a long step: the last whole step is the result
                status = "stopped"
                break
            last = step
            now = time.perf_counter() - t0
            if self._stop.is_set():
                status = "stopped"
                break
            if step.final:
                break
            if steady is None and step.iteration >= 1:
                steady = (step.iteration, now)
            fresh = None  # the matching travels once, with the step that made it
            if step.matching is not None and matching is None:
                matching = fresh = _matching(step.matching, truth)
            interval = max(EVAL_INTERVAL, SCORING_SPACING * eval_cost)
            mark = bool(step.note) or step.stage != stage  # a point every curve keeps
            if not (mark or now - last_eval >= interval or step.iteration in (0, step.total) or last_eval < 0):
                if ahead:
                    held.offer(step, now)
                continue
            last_eval, stage = now, step.stage
            t_eval = time.perf_counter()
            sc = metrics.score(step.images, _truth_for(step, truth_images), aligned=step.aligned)
            checks = truth.checks(step.internals) if (truth.checks and step.internals) else {}
            checks.update(_judged(truth, step))
            success = checks.pop("success", None)
            eval_cost = time.perf_counter() - t_eval
            eta = _eta(step, steady, now)
            order = torch.as_tensor(sc["order"])
            images = to_hwc(step.images[order.to(step.images.device)])
            if ahead:
                crossed = [db for db in ahead if sc["psnr"] >= db]
                for kept, kept_sc in held.crossings(crossed, score_kept):
                    _offer_point(history, kept.iteration, kept.seconds, kept.loss, kept_sc, force=True)
                ahead = [db for db in ahead if db not in crossed]
                held.clear()
            _offer_point(history, step.iteration, now, step.loss, sc, force=mark, checks=checks)
            self.keyframes.offer((step.iteration, images))
            trials, trials_psnr = _trials(step, _truth_for(step, truth_images))
            yield Progress(step.iteration, step.total, round(now, 4), _finite(step.loss), round(sc["psnr"], 3),
                           round(sc["ssim"], 4), eta, _host_labels(step.labels), step.note, images,
                           [round(v, 2) for v in sc["psnr_per_image"]], fresh, checks or None, step.sample_ids,
                           _baseline(step), success, trials, trials_psnr, step.stage)
        seconds = time.perf_counter() - t0
        if self._stop.is_set():
            status = "stopped"
        steps.close()
        final = metrics.score(last.images, _truth_for(last, truth_images), with_lpips=lpips_ok, aligned=last.aligned)
        order = torch.as_tensor(final["order"])
        images = to_hwc(last.images[order.to(last.images.device)])
        self.keyframes.offer((last.iteration, images), force=True)
        label_acc = None
        if last.labels is not None:
            label_acc = metrics.label_accuracy(_host_labels(last.labels), _truth_for(last, truth.labels).tolist())
        result = {
            "psnr": round(final["psnr"], 3), "ssim": round(final["ssim"], 4), "lpips": final.get("lpips"),
            "label_accuracy": label_acc, "psnr_per_image": [round(v, 3) for v in final["psnr_per_image"]],
            "loss": _finite(last.loss), "lpips_note": None if lpips_ok else lpips_reason,
            "matched_order": final["order"], "status": status, "note": last.note if last.final else None,
        }
        if last.sample_ids is not None:
            result["sample_ids"] = list(last.sample_ids)
        if truth.checks is not None and last.internals:
            result.update({k: float(f"{v:.4g}") for k, v in truth.checks(last.internals).items()})
        if truth.judge is not None:
            result.update({k: (round(v, 4) if k != "success" else v) for k, v in _judged(truth, last).items()})
        if truth.utility is not None and status != "stopped":  # it trains models again: a stopped run skips it
            try:
                with cancel.watching(self._stop):
                    result["utility"] = truth.utility()
            except cancel.Cancelled:  # Stop pressed while the utility trains: the attack's result stands
                status = result["status"] = "stopped"
        if p["defense"] != "none":  # a formal (ε, δ) where the defense is a DP mechanism, else why not
            from . import privacy
            g = privacy.guarantee(p)
            result["epsilon"] = g["epsilon"] if g["epsilon"] is not None and math.isfinite(g["epsilon"]) else None
            result["privacy"], result["privacy_note"] = privacy.describe(g), g["note"]
        if matching is None and last.matching is not None:
            matching = _matching(last.matching, truth)
        if matching is not None:
            result["matching_rate"] = matching["rate"]
            result["matching"] = matching
        yield Finished(status, result, images, round(seconds, 3), last.iteration,
                       {k: v.items for k, v in history.items()}, _baseline(last))


def _offer_point(history: dict, iteration: int, seconds: float, loss, sc: dict, force: bool,
                 checks: dict | None = None) -> None:
    """One scored point of the run's curves (`sc`: metrics.score's dict; checks: CAFE's errors, PLI's verdicts)."""
    for k, v in (("iteration", iteration), ("seconds", seconds), ("loss", float(loss)), ("psnr", sc["psnr"]),
                 ("ssim", sc["ssim"]), *(checks or {}).items()):
        history[k].offer(v, force=force)


def _matching(report: dict, truth) -> dict:
    """AGIC's cross-epoch pairing as images, each slot checked against the ground truth (here, never
    in the attack)."""
    ok = metrics.matching_check(report["views"], report["where"], truth.images.float(), truth.membership)
    views = report["views"]
    return {"rate": round(sum(ok) / len(ok), 4), "correct": ok,
            "views": [to_hwc(views[s]) for s in range(len(views))]}


JUDGED = ("attack_accuracy", "ssim_to_mean", "baseline_attack_accuracy", "baseline_ssim_to_mean")


def _judged(truth, step) -> dict:
    """Attack accuracy of a step's class reconstructions (and of the baseline's, when it carries one)."""
    if truth.judge is None:
        return {}
    j = truth.judge(step.images)
    out = {"attack_accuracy": j["attack_accuracy"], "ssim_to_mean": j["ssim_to_mean"], "success": j["success"]}
    if step.internals and "baseline" in step.internals:
        b = truth.judge(step.internals["baseline"])
        out.update(baseline_attack_accuracy=b["attack_accuracy"], baseline_ssim_to_mean=b["ssim_to_mean"])
    return out


def _trials(step, truth_images) -> tuple:
    """Racing starts: every shown trial scored like the estimate itself (here, outside the attack)."""
    if step.trials is None:
        return None, None
    firsts, psnrs = [], []
    for estimate in step.trials:
        sc = metrics.score(estimate, truth_images, aligned=step.aligned)
        firsts.append(to_hwc(estimate[torch.as_tensor(sc["order"]).to(estimate.device)])[0])
        psnrs.append(round(sc["psnr"], 3))  # as the frame's own psnr, so the leading start's figure is the frame's
    return np.stack(firsts), psnrs


def _baseline(step) -> np.ndarray | None:
    b = (step.internals or {}).get("baseline")
    return None if b is None else to_hwc(b)


def _truth_for(step, truth: torch.Tensor) -> torch.Tensor:
    """The private images (or labels) a step's estimate stands for: an attack on one VFL batch covers only that
    batch (DLG on vertical FL scored its one recovered label against all 200 samples' labels: 1/200)."""
    if step.sample_ids is None:
        return truth
    return truth[torch.as_tensor(step.sample_ids, dtype=torch.long, device=truth.device)]


def _eta(step, steady: tuple[int, float] | None, now: float) -> float | None:
    """Seconds left at the pace since the first step: what came before it — the set-up, a torch.compile build
    (16 s for DLG on a round of 8 clients on 2 cores, which read "about 1292 s left" at iteration 4 of 300
    for a run of ~3 minutes) — is not the attack's pace. None until a second step has been timed."""
    if steady is None or step.iteration <= steady[0]:
        return None
    return round((step.total - step.iteration) * (now - steady[1]) / (step.iteration - steady[0]), 2)


def _finite(x: float | torch.Tensor) -> float | None:
    x = float(x)  # a step's loss may still be on the device (see Step.loss)
    return x if np.isfinite(x) else None


def _host_labels(labels: list[int] | torch.Tensor | None) -> list[int] | None:
    return labels.tolist() if isinstance(labels, torch.Tensor) else labels


def _prepend(first, rest):
    yield first
    yield from rest
