"""Fidelity: one check per paper claim, our figure beside the paper's, and a verdict.

`python -m leakdemo fidelity [--quick] [--only NAME,...]` runs the checks (each a preset with overrides,
scored outside the attack like every run) and prints a table: the claim, the paper's figure and setting,
ours and our setting, and reproduced / partly / not with the reason. Runs already in the run store (same
scenario, same code version) are replayed from it, so a second report takes seconds.

The paper figures quoted here are those of the four papers in the design notes (CAFE, DLM/DLM+, AGIC, PLI)
and the well-known headline results of DLG, iDLG and Inverting Gradients."""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

from .errors import LeakdemoError
from .words import alike, hint

REPRODUCED, PARTLY, NOT = "reproduced", "partly", "not"


@dataclass(frozen=True)
class Check:
    name: str
    paper: str
    claim: str
    their_figure: str  # the paper's figure and its setting
    runs: tuple[tuple[str, dict], ...]  # (preset, overrides) per run; seeds are overrides
    judge: Callable[[list[dict]], tuple[str, str, str]]  # metrics of each run -> (ours, verdict, reason)
    setting: str  # our setting, in words
    quick: bool = True  # part of --quick (the whole quick list fits in ~10 minutes on 2 CPU cores)


@dataclass
class Result:
    check: Check
    ours: str = ""
    verdict: str = NOT
    reason: str = ""
    seconds: float = 0.0
    replayed: int = 0
    metrics: list = field(default_factory=list)


# ---------------------------------------------------------------- the judges


def _db(v: float | None) -> str:
    return "—" if v is None else f"{v:.1f} dB"


def _grade(v: float, good: float, fair: float, what: str, unit: str) -> tuple[str, str]:
    """(verdict, reason) for a figure against the paper's bar: reproduced at `good`, partly at `fair`."""
    if v >= good:
        return REPRODUCED, f"{what} ≥ {good:g}{unit}"
    if v >= fair:
        return PARTLY, f"{what} {v:.1f}{unit}: above {fair:g}{unit} but below {good:g}{unit}"
    return NOT, f"{what} {v:.1f}{unit}, below {fair:g}{unit}"


def _above(key: str, good: float, fair: float, what: str):
    """One run's metric (the median over seeds) against the paper's bar."""
    def judge(ms):
        vals = [m[key] for m in ms]
        v = statistics.median(vals)
        ours = " / ".join(_db(x) if key == "psnr" else f"{x:.2f}" for x in vals)
        if len(vals) > 1:
            ours += f" (median {_db(v) if key == 'psnr' else f'{v:.2f}'})"
        return (ours, *_grade(v, good, fair, what, " dB" if key == "psnr" else ""))
    return judge


def _below(key: str, bar: float, what: str):
    """A defense claim: the attack's figure stays below `bar`."""
    def judge(ms):
        vals = [m[key] for m in ms]
        v = statistics.median(vals)
        ours = " / ".join(_db(x) if key == "psnr" else f"{x:.2f}" for x in vals)
        if v < bar:
            return ours, REPRODUCED, f"{what} stays below {bar:g}"
        return ours, NOT, f"{what} {v:.1f} reaches {bar:g}: the defense does not hold here"
    return judge


def _batch_median(good: float, fair: float):
    """A batch attack over seeds: each run's median image (after matching), then the median over runs."""
    def judge(ms):
        medians = [statistics.median(m["psnr_per_image"]) for m in ms]
        means = " / ".join(_db(m["psnr"]) for m in ms)
        seconds = " / ".join(f"{m['seconds']:.0f}" for m in ms)
        ours = f"median image {' / '.join(_db(x) for x in medians)} (mean {means}); {seconds} s"
        return (ours, *_grade(statistics.median(medians), good, fair, "median matched image (over seeds)", " dB"))
    return judge


def _idlg(ms):
    m = ms[0]
    ours = f"label accuracy {m['label_accuracy']:.0%}, {_db(m['psnr'])}"
    ok = m["label_accuracy"] == 1.0
    return ours, REPRODUCED if ok and m["psnr"] >= 30 else PARTLY if ok else NOT, \
        "the label is read off the last layer's gradient exactly" if ok else "a label was inferred wrongly"


def _pli(ms):
    """PLI beside TBI over seeds: the paper's bar is a clear lead at a high accuracy."""
    pli = [m["attack_accuracy"] for m in ms]
    tbi = [m["baseline_attack_accuracy"] for m in ms]
    p, t = statistics.median(pli), statistics.median(tbi)
    ours = f"PLI {' / '.join(f'{v:.2f}' for v in pli)}, TBI {' / '.join(f'{v:.2f}' for v in tbi)}"
    if p >= 0.6 and p - t >= 0.3 - 1e-9:  # accuracies are shares of ten classes: no float dust
        return ours, REPRODUCED, f"PLI {p:.2f}, {p - t:+.2f} over TBI (median over seeds)"
    if p > t:
        return ours, PARTLY, f"PLI ahead of TBI ({p:.2f} vs {t:.2f}) but below the paper's margin"
    return ours, NOT, f"PLI {p:.2f} does not beat TBI {t:.2f}"


def _dlm_pair(ms):
    dlm, plus = ms[0]["psnr"], ms[1]["psnr"]
    ours = f"DLM {_db(dlm)}, DLM+ {_db(plus)}"
    if plus >= 30 and dlm < 20:
        return ours, REPRODUCED, "DLM+ needs no learning rate; DLM from k₀ = 1 ≤ 1/η collapses"
    if plus >= 30:
        return ours, PARTLY, "DLM+ works, but DLM did not fail from k₀ = 1"
    return ours, NOT, "DLM+ below 30 dB"


def _agic_pair(ms):
    agic, sim = ms[0], ms[1]
    speed = (agic["iterations"] / agic["seconds"]) / max(sim["iterations"] / sim["seconds"], 1e-9)
    ours = f"AGIC {_db(agic['psnr'])} vs simulation {_db(sim['psnr'])}; {speed:.1f}× the iterations per second"
    if agic["psnr"] >= sim["psnr"] - 0.5 and speed > 1.3:
        return ours, REPRODUCED, "AGIC as good as simulating the client's steps, and cheaper per iteration"
    if speed > 1.3:
        return ours, PARTLY, "cheaper per iteration, but below the simulation on this run"
    return ours, NOT, "not cheaper than the simulation"


def _fake_gradients(ms):
    m = ms[0]
    util = (m.get("utility") or {}).get("defended") or []
    falls = len(util) > 1 and util[-1] < 0.5 * util[0]
    ours = f"{_db(m['psnr'])}; training loss {util[0]:.2f} → {util[-1]:.2f}" if util else _db(m["psnr"])
    if m["psnr"] < 12 and falls:
        return ours, REPRODUCED, "the attack fails and the model still trains"
    if m["psnr"] < 12:
        return ours, PARTLY, "the attack fails, but training suffered"
    return ours, NOT, "the attack still recovers the data"


def _while_training(ms):
    """CAFE on a model that keeps training: the median sample's PSNR, and the federation's own loss must fall."""
    m = ms[0]
    v = statistics.median(m["psnr_per_image"])
    loss = (m.get("utility") or {}).get("while_attacked") or []
    falls = len(loss) > 1 and loss[-1] < loss[0] - 0.1
    ours = f"median sample {_db(v)}" + (f"; training loss {loss[0]:.2f} → {loss[-1]:.2f}" if loss else "")
    if not falls:
        return ours, NOT, "the federation's training loss did not fall: the model was not training"
    return (ours, *_grade(v, 25, 20, "median sample PSNR while the loss falls", " dB"))


def _multiround(ms):
    one, two = ms[0]["psnr"], ms[1]["psnr"]
    ours = f"one epoch {_db(one)}, two {_db(two)}; matching {ms[1].get('matching_rate') or 0:.0%}"
    if two > one and (ms[1].get("matching_rate") or 0) >= 0.9:
        return ours, REPRODUCED, "a second epoch adds information, and the pairing across epochs holds"
    return ours, PARTLY if two > one else NOT, "a second epoch did not help on this run"


# ---------------------------------------------------------------- the checks

DLG = "Zhu et al., Deep Leakage from Gradients (2019)"
IDLG = "Zhao et al., iDLG (2020)"
IG = "Geiping et al., Inverting Gradients (2020)"
DLM = "Zhao et al., Deep Leakage from Model (2022)"
AGIC = "Xu et al., AGIC (2022)"
CAFE = "Jin et al., CAFE (2021)"
PLI = "Takahashi et al., Breaching FedMD (2023)"

CHECKS: tuple[Check, ...] = (
    Check("dlg", DLG, "one gradient gives back its image", "pixel-exact images, LeNet (sigmoid), 32 px",
          (("dlg", {"images": "coffee", "seed": 1}),), _above("psnr", 30, 20, "PSNR"),
          "coffee photo 32 px, LeNet (sigmoid), 300 L-BFGS steps"),
    Check("idlg", IDLG, "the label comes from the gradient for free", "100 % label accuracy",
          (("idlg", {"seed": 2}),), _idlg, "one photo, seed 2"),
    Check("invgrad", IG, "cosine matching + TV recovers an image", "recognisable single images",
          (("invgrad", {}),), _above("psnr", 20, 15, "PSNR"), "one photo, ConvNet, 1000 Adam steps"),
    Check("invgrad-batch-8", IG, "batches of 8 are recognisable on ConvNets", "recognisable batches of 8 (ConvNet64)",
          tuple(("invgrad-batch-8", {"seed": s}) for s in (0, 1, 2)), _batch_median(18, 14),
          "8 photos in one gradient, ConvNet of width 64, TV 0.1, 2000 steps, seeds 0–2, matched", quick=False),
    Check("dlm-vs-dlm-plus", DLM, "DLM+ needs no learning rate; DLM fails when k₀ ≤ 1/η",
          "DLM+ 46.96 dB / 92 %, DLM 41.98 dB / 68 % (their PSNR ≈ ours + 11.5 dB)",
          (("dlm", {}), ("dlm-plus", {})), _dlm_pair, "FedAvg, one step at η = 0.01, coffee"),
    Check("agic", AGIC, "approximating the local steps matches simulating them, cheaper",
          "AGIC 16.2 vs simulation 14.1 dB, 5× faster (ResNet20-4, CIFAR-10)",
          (("agic", {}), ("invgrad-fedavg", {})), _agic_pair, "4 local steps, batch 1, 1000 Adam steps"),
    Check("agic-epochs", AGIC, "more epochs, paired across epochs, help", "20.4 → 21.5 dB; matching 98.8 %",
          (("agic-multiround", {"epochs": 1}), ("agic-multiround", {})), _multiround,
          "4 rounds per epoch, η = 0.1, one vs two epochs", quick=False),
    Check("cafe", CAFE, "every sample of a VFL data set comes back", "43.15 dB (MNIST, 800 images, 20 000 its)",
          (("cafe", {}),), _above("psnr", 30, 20, "PSNR over all samples"),
          "200 digits 16 px, 4 workers, batches of 40, 2000 iterations"),
    Check("cafe-training", CAFE, "CAFE works while the model trains",
          "MNIST, Adam 1e-6: 20.7 dB at 20 000 its while the loss falls 2.36 → 1.68 (Table 8)",
          (("cafe-training", {}),), _while_training,
          "as `cafe`, the model trained with Adam at 1e-5 during the attack; gradient matching + row-space term"),
    Check("cafe-training-fast", CAFE, "… and at a faster training rate", "MNIST, Adam 1e-4: 31.8 dB (Table 7)",
          (("cafe-training", {"train_lr": 0.0001}),), _while_training,
          "as `cafe-training`, Adam at 1e-4 (our model memorises the 200 digits within the attack)", quick=False),
    Check("cafe-fake-gradients", CAFE, "fake gradients stop CAFE and keep training",
          "28.68 → 7.67 dB (CIFAR-10), training unharmed", (("cafe-fake-gradients", {}),), _fake_gradients,
          "σ² = 1.1, 1000 iterations"),
    Check("pli-fedmd", PLI, "PLI recovers private classes from FedMD logits, far above TBI",
          "LFW, K = 1: PLI 99.5 %, TBI 2.0 %", tuple(("pli", {"seed": s}) for s in (1, 2, 3)), _pli,
          "faces 32 px, 10 private of 40 identities, masked public set, seeds 1–3"),
    Check("pli-ds-fl", PLI, "the same on DS-FL", "LFW, K = 1: PLI 99.5 %, TBI 73.5 %",
          tuple(("pli", {"protocol": "ds-fl", "seed": s}) for s in (1, 2, 3)), _pli,
          "as `pli`, DS-FL (unlabelled public set: the models know the 10 private identities only), seeds 1–3"),
    Check("pli-ds-fl-1-in-5", PLI, "the same on DS-FL, at the paper's share of private identities",
          "LFW, K = 1 (200 private of 1000): PLI 99.5 %, TBI 73.5 %",
          tuple(("pli", {"protocol": "ds-fl", "num_classes": 100, "target_classes": 20, "seed": s}) for s in (1, 2, 3)),
          _pli, "as `pli-ds-fl`, 20 private of 100 identities (the paper's 1 in 5), seeds 1–3", quick=False),
    Check("pli-fedgems", PLI, "the same on FedGEMS", "LFW, K = 1: PLI 91 %, TBI 2.5 %",
          tuple(("pli", {"protocol": "fedgems", "seed": s}) for s in (1, 2)), _pli,
          "as `pli`, FedGEMS, seeds 1–2", quick=False),
    Check("pli-10-clients", PLI, "with ten clients the best client's logits still leak",
          "LFW, K = 10: PLI 79 %, TBI 10 %", tuple(("pli-10-clients", {"seed": s}) for s in (1, 2, 3)), _pli,
          "50 private of 100 identities, 5 per client, γ = 0.3, seeds 1–3", quick=False),
    Check("defense-dp", DLG, "Gaussian noise of variance ≥ 1e-2 on the gradient stops DLG",
          "no recognisable image from σ² ≥ 1e-2",
          (("dlg", {"images": "coffee", "seed": 1, "defense": "dp-gaussian", "dp_sigma": 0.1}),),
          _below("psnr", 20, "PSNR"), "σ = 0.1 (σ² = 1e-2), no clipping"),
    Check("defense-prune", DLG, "pruning 20 % of the gradient stops DLG", "not recognisable beyond 20 % pruned",
          (("dlg", {"images": "coffee", "seed": 1, "defense": "prune", "prune_ratio": 0.2}),),
          _below("psnr", 20, "PSNR"), "20 % of the smallest gradient entries zeroed"),
)


def checks(quick: bool = False, only: list[str] | None = None) -> list[Check]:
    names = {c.name for c in CHECKS}
    bad = [n for n in (only or []) if n not in names]
    if bad:
        meant = hint(alike(bad[0], names)) if len(bad) == 1 else ""
        raise LeakdemoError(f"fidelity --only: unknown {'check' if len(bad) == 1 else 'checks'} {', '.join(bad)}{meant}; "
                            f"known: {', '.join(sorted(names))}")
    return [c for c in CHECKS if (only and c.name in only) or (not only and (c.quick or not quick))]


def run_check(check: Check, store=None, fresh: bool = False) -> Result:
    """Every run of the check (from the store where it has them), then the judge."""
    from .events import Failed, Finished
    from .runner import Run
    from .scenario import load
    res, t0 = Result(check), time.perf_counter()
    for preset, overrides in check.runs:
        run = Run(load(preset, dict(overrides)), store=store, fresh=fresh, source="fidelity")
        fin = None
        for ev in run.events():
            if isinstance(ev, Failed):
                raise LeakdemoError(f"{check.name}: {ev.message}")
            if isinstance(ev, Finished):
                fin = ev
        if fin is None:
            raise LeakdemoError(f"{check.name}: the run ended without a result")
        res.replayed += run.from_store
        res.metrics.append({**fin.metrics, "iterations": fin.iterations, "seconds": fin.seconds})
    res.ours, res.verdict, res.reason = check.judge(res.metrics)
    res.seconds = time.perf_counter() - t0
    return res


def table(results: list[Result]) -> str:
    """The report as a Markdown table (the README's fidelity section is this table)."""
    lines = ["| check | paper's claim | paper's figure | ours | our setting | verdict |", "|---|---|---|---|---|---|"]
    for r in results:
        c = r.check
        lines.append(f"| `{c.name}` | {c.claim} ({c.paper}) | {c.their_figure} | {r.ours} | {c.setting} | "
                     f"**{r.verdict}**: {r.reason} |")
    return "\n".join(lines)
