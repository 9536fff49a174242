"""Sweeps, utility and formal privacy: the behaviour a user exploring defense trade-offs relies on."""
import json
import math
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from leakdemo import privacy, utility
from leakdemo.errors import LeakdemoError, ParamError
from leakdemo.scenario import from_preset
from leakdemo.store import RunStore
from leakdemo.sweep import PointDone, Sweep, SweepFinished, SweepStarted, parse_axis, pareto

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAST = {"image_size": 16, "iterations": 25, "defense": "dp-gaussian"}


def cli(*args, env=None, timeout=600):
    return subprocess.run([sys.executable, "-m", "leakdemo", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


# ---------------------------------------------------------------- the grid


def test_axes_follow_the_catalog():
    base = from_preset("dlg", FAST)
    a = parse_axis("dp_sigma=1e-4..1:5", base)  # the catalog marks dp_sigma log: decades evenly spaced
    assert a.log and a.values == (1e-4, 1e-3, 1e-2, 0.1, 1.0)
    b = parse_axis("dp_clip=0..8:3", base)
    assert not b.log and b.values == (0.0, 4.0, 8.0)
    c = parse_axis("dp_clip=0,4", base)
    assert c.values == (0.0, 4.0)
    # numbers in ascending order, however given: the strip put 0.1's picture before 0.01's; choices keep their order
    assert parse_axis("dp_sigma=0.1, 0.01,1e-3,0.1", base).values == (1e-3, 0.01, 0.1)
    assert parse_axis("model=mlp,lenet", base).values == ("mlp", "lenet")
    d = parse_axis("iterations=10..12:8", base)  # integers: rounded, each once
    assert d.values == (10, 11, 12)


@pytest.mark.parametrize("text,message", [
    ("zzz=1..2:3", "zzz: is not a parameter of protocol=fedsgd, attack=dlg, defense=dp-gaussian"),
    ("steps=1..2:3", "steps: is not a parameter of protocol=fedsgd, attack=dlg, defense=dp-gaussian "
                     "(did you mean iterations?); sweepable: "),
    ("tv_weight=0..1:3", "tv_weight: is not a parameter of protocol=fedsgd, attack=dlg, defense=dp-gaussian "
                         "(it belongs to: invgrad"),
    ("dp_sigma=1e-4..1:1", "dp_sigma: the number of points must be an integer in [2, 64], got 1"),
    ("dp_sigma=1e-4..1:65", "dp_sigma: the number of points must be an integer in [2, 64], got 65"),
    ("dp_sigma=1e-4..1:x", "dp_sigma: the number of points after ':' must be an integer in [2, 64]"),
    # no ':' was told of "the number of points after ':'", and three dots of a range "from low to high" (1.0..0.2)
    ("dp_sigma=1e-4..1", "dp_sigma: a range needs its number of points: dp_sigma=1e-4..1:N, N an integer in [2, 64]"),
    ("dp_sigma=0.1...1:4", "dp_sigma: a range is LOW..HIGH, with two dots, got '0.1...1'"),
    # two parameters in one --vary: the second was read as the count ("got '6 dp_clip=0,4'"); each needs its own
    ("dp_sigma=1e-4..1:6 dp_clip=0,4", "--vary: one parameter per range, got a second (dp_clip) in "
                                       "'dp_sigma=1e-4..1:6 dp_clip=0,4'; give them as --vary dp_sigma=1e-4..1:6 --vary "
                                       "dp_clip=0,4"),
    ("dp_sigma=0.1,0.01,dp_clip=4", "--vary: one parameter per range, got a second (dp_clip)"),
    ("dp_sigma=1e-4..1:6, dp_sigma=0.1", "--vary: dp_sigma is given twice in"),
    ("dp_sigma=1..1e-4:4", "dp_sigma: the range must go from low to high"),
    ("dp_sigma=1e-4..100:4", "dp_sigma: must be a number in [0, 10], got 100"),
    ("defense=none,prune", "defense: cannot be swept"),
    ("seed=1,2,3", "seed: cannot be swept: every point already runs the sweep's seeds per point"),
    ("dp_sigma", "--vary: expected NAME=LOW..HIGH:N or NAME=a,b,c"),
    # the example is one to type: lowercase booleans, as --set and --vary take them
    ("secure_aggregation=0..1:2", "secure_aggregation: a range needs a number parameter; give the values instead, "
                                  "e.g. secure_aggregation=true,false"),
    ("model=lenet..mlp:2", "model: a range needs a number parameter; give the values instead, e.g. "
                           "model=lenet,mlp,convnet"),
])
def test_bad_axes_name_the_parameter(text, message):
    with pytest.raises(LeakdemoError) as e:
        parse_axis(text, from_preset("dlg", FAST))
    assert str(e.value).startswith(message) and "\n" not in str(e.value)
    if "sweepable: " in str(e.value):  # the list offers what a sweep can vary: not the seed it refuses
        offered = str(e.value).split("sweepable: ")[1].split(", ")
        assert "seed" not in offered and "dp_sigma" in offered, offered


def test_a_defenses_knob_on_an_undefended_scenario_says_which_defense_to_set():
    """`--vary sigma` on a run without a defense means the DP noise: the message names it, its defenses and the
    --set that makes it sweepable, as `--vary dp_sigma` does."""
    for typed in ("sigma", "dp_sigma"):
        with pytest.raises(ParamError) as e:
            parse_axis(f"{typed}=1e-4..1:3", from_preset("dlg", {**FAST, "defense": "none"}))
        assert "dp-gaussian, dp-laplace; --set defense=dp-gaussian to sweep it)" in str(e.value), str(e.value)
    assert str(e.value).startswith("dp_sigma: is not a parameter of protocol=fedsgd, attack=dlg, defense=none "
                                   "(it belongs to: dp-gaussian, dp-laplace;")
    with pytest.raises(ParamError, match=r"^sigma: .* \(did you mean dp_sigma\? it belongs to: dp-gaussian"):
        parse_axis("sigma=1e-4..1:3", from_preset("dlg", {**FAST, "defense": "none"}))


def test_a_knob_of_another_protocol_is_pointed_at_its_counterpart_here():
    """`--vary dp_sigma` on FedMD was told `--set defense=dp-gaussian to sweep it`, a defense FedMD refuses."""
    pli = from_preset("pli-digits")
    with pytest.raises(ParamError) as e:
        parse_axis("dp_sigma=0.1,1", pli)
    assert "dp-laplace; on fedmd its counterpart is logit_sigma: --set defense=logit-noise to sweep it)" in str(e.value)
    with pytest.raises(ParamError, match=r"cafe; pli's counterpart is inversion_epochs\); sweepable: "):
        parse_axis("iterations=10,20", pli)


def test_bad_sweep_on_the_command_line_is_one_line_exit_2():
    r = cli("sweep", "dlg", "--set", "defense=dp-gaussian", "--vary", "dp_sigma=1e-4..1:99")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip() == "error: dp_sigma: the number of points must be an integer in [2, 64], got 99"
    r = cli("sweep", "dlg", "--vary", "prune_ratio=0..0.9:3")
    assert r.returncode == 2 and r.stderr.startswith("error: prune_ratio: is not a parameter of protocol=fedsgd, "
                                                     "attack=dlg, defense=none (it belongs to: prune; "
                                                     "--set defense=prune to sweep it)")
    r = cli("sweep", "dlg", "--vary", "images=coffee,rocket", "--images", "camera")  # --images would win unseen
    assert r.returncode == 2 and r.stderr.strip() == ("error: images: either vary images or give --images (every "
                                                      "point runs each), not both")


# ---------------------------------------------------------------- formal privacy


def test_epsilon_only_where_a_dp_mechanism_exists():
    def g(**over):
        return privacy.guarantee(dict(from_preset("dlg", over).params))
    assert g(defense="dp-gaussian", dp_sigma=0.1)["epsilon"] is None  # no clipping: no guarantee
    assert "without clipping" in g(defense="dp-gaussian", dp_sigma=0.1)["note"]
    assert g(defense="dp-laplace", dp_sigma=0.1, dp_clip=1)["epsilon"] is None
    assert "Laplace noise calibrated to an L2 clip" in g(defense="dp-laplace", dp_sigma=0.1, dp_clip=1)["note"]
    # with no clip there is no clip to calibrate to: Laplace noise says what Gaussian noise says
    assert g(defense="dp-laplace", dp_sigma=0.1)["note"] == g(defense="dp-gaussian", dp_sigma=0.1)["note"]
    assert g(defense="prune")["epsilon"] is None
    assert privacy.describe(g(defense="prune")) == "no formal guarantee"
    strong, weak = g(defense="dp-gaussian", dp_sigma=10, dp_clip=1), g(defense="dp-gaussian", dp_sigma=1, dp_clip=1)
    assert strong["noise_multiplier"] == 5.0 and 0 < strong["epsilon"] < 1 < weak["epsilon"]
    # the figure is Opacus's own: its accountant over the same orders gives the same number
    from opacus.accountants import RDPAccountant
    acc = RDPAccountant()
    acc.history = [(5.0, 1.0, 1)]
    assert strong["epsilon"] <= acc.get_epsilon(1e-5) + 1e-9
    assert g(defense="dp-gaussian", dp_sigma=10, dp_clip=1, dp_delta=1e-3)["epsilon"] < strong["epsilon"]


def test_epsilon_grows_with_what_the_attacker_saw():
    one = privacy.guarantee(dict(from_preset("dlm-plus", {"defense": "dp-gaussian", "dp_sigma": 2, "dp_clip": 1}).params))
    four = privacy.guarantee(dict(from_preset("dlm-plus", {"defense": "dp-gaussian", "dp_sigma": 2, "dp_clip": 1,
                                                            "epochs": 4}).params))
    assert four["releases"] == 4 * one["releases"] and four["epsilon"] > one["epsilon"]
    cafe = privacy.guarantee(dict(from_preset("cafe", {"defense": "dp-gaussian", "dp_sigma": 2, "dp_clip": 1}).params))
    assert cafe["releases"] == 2000 and cafe["noise_multiplier"] == pytest.approx(2 / (2 * 1 * math.sqrt(4)))


# ---------------------------------------------------------------- utility


def test_utility_is_measured_and_falls_with_noise(tmp_path):
    store = RunStore(str(tmp_path / "runs.sqlite"))
    p = dict(from_preset("dlg", {"image_size": 16}).params)
    clean = utility.measure(p, store)
    assert clean["test_accuracy"] == clean["clean_test_accuracy"] >= 0.85  # LeNet learns the held-out digits
    noisy_p = dict(from_preset("dlg", {"image_size": 16, "defense": "dp-gaussian", "dp_sigma": 1.0}).params)
    noisy = utility.measure(noisy_p, store)
    assert noisy["test_accuracy"] <= 0.3 and noisy["clean_test_accuracy"] == clean["clean_test_accuracy"]
    utility._memo.clear()  # a new process: the store answers, nothing is trained
    real_train = utility._train
    utility._train = lambda *a, **k: pytest.fail("trained again although the store holds it")
    try:
        assert utility.cached(noisy_p, store) == noisy
    finally:
        utility._train = real_train
    assert utility.measure(dict(from_preset("cafe").params)) is None  # VFL reports its own training loss


def test_a_convnet_federation_s_clients_looped_give_what_vmapped_gives():
    """The convolutional nets' clients are computed one after another (faster on a CPU): each client's
    gradient must be the one the vmapped program gives — from the server's weights (FedSGD) and from its own
    (FedAvg, every client's weights different here)."""
    import torch
    import torch.nn.functional as F
    from torch.func import functional_call, grad

    from leakdemo.protocols.fedsgd import make_model
    p = dict(from_preset("invgrad", {"image_size": 16}).params)
    assert p["model"] in utility.LOOPED_MODELS
    torch.manual_seed(0)
    model = make_model(p)
    torch.func.replace_all_batch_norm_modules_(model)
    names, buffers = [n for n, _ in model.named_parameters()], dict(model.named_buffers())
    gradient = grad(lambda w, x, y: F.cross_entropy(functional_call(model, (dict(zip(names, w)), buffers), (x,)), y))
    xb, yb = torch.rand(4, 8, 3, 16, 16), torch.randint(0, 10, (4, 8))
    shared = [w.detach() for w in model.parameters()]
    own = [w.unsqueeze(0) + 0.1 * torch.randn(4, *w.shape) for w in shared]
    for params, is_shared in ((shared, True), (own, False)):
        looped = utility.client_gradients(gradient, params, xb, yb, is_shared, looped=True)
        vmapped = utility.client_gradients(gradient, params, xb, yb, is_shared, looped=False)
        assert [t.shape for t in looped] == [t.shape for t in vmapped]
        for a, b in zip(looped, vmapped):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
        assert not torch.allclose(looped[0][0], looped[0][1])  # the clients' gradients differ


def test_the_federation_trains_with_onednn_and_the_attacks_keep_it_off(monkeypatch):
    """oneDNN trains the federation's batches faster but slows the attacks' double backward: on for the
    training only, and off again after it, in a process that runs attacks."""
    import torch

    import leakdemo.runner  # noqa: F401  (turns oneDNN off for the attacks)
    monkeypatch.setattr(torch.backends.mkldnn, "enabled", False)  # as a gradient attack leaves it (CAFE turns it on)
    seen = []
    monkeypatch.setattr(utility, "_federation", lambda p, defended: seen.append(torch.backends.mkldnn.enabled) or 0.5)
    assert utility._train(dict(from_preset("invgrad").params), True) == 0.5
    assert seen == [True] and torch.backends.mkldnn.enabled is False


# ---------------------------------------------------------------- a sweep end to end


def _collect(sweep):
    events = list(sweep.events())
    assert isinstance(events[0], SweepStarted) and isinstance(events[-1], SweepFinished)
    return events


def test_sweep_measures_privacy_and_utility_and_comes_back_from_the_store(tmp_path):
    store = RunStore(str(tmp_path / "runs.sqlite"))
    base = from_preset("dlg", FAST)
    axes = [parse_axis("dp_sigma=1e-4..1:2", base)]
    events = _collect(Sweep(base, axes, seeds=1, store=store, workers=2))
    assert events[0].runs == 3 and events[0].cached == 0
    points = [e for e in events if isinstance(e, PointDone)]
    assert len(points) == 3  # each point streams out as it finishes
    rows = {r["label"]: r for r in events[-1].rows}
    clean, weak, strong = rows["no defense"], rows["dp_sigma=0.0001"], rows["dp_sigma=1"]
    assert clean["undefended"] and clean["psnr"] >= 40 and clean["recognisable"] == 1.0
    assert strong["psnr"] <= 10 and strong["recognisable"] == 0.0
    assert clean["psnr"] > weak["psnr"] > strong["psnr"]
    assert clean["test_accuracy"] >= 0.85 and strong["test_accuracy"] <= 0.3  # measured, not assumed
    assert weak["privacy"] == "no formal guarantee" and clean["privacy"] == "ε = ∞"
    assert strong["index"] in pareto(events[-1].rows) and weak["index"] in pareto(events[-1].rows)
    assert len(store.runs()) == 3  # every run is recorded, by the sweep's own process

    again = _collect(Sweep(base, axes, seeds=1, store=store, workers=2))
    assert again[0].cached == 3  # nothing computed
    assert [(r["label"], r["psnr"], r["test_accuracy"]) for r in again[-1].rows] == \
           [(r["label"], r["psnr"], r["test_accuracy"]) for r in events[-1].rows]


def test_the_pareto_front_ignores_leakage_differences_within_noise():
    """The recorded sweep-dp-dlg's noise floor: σ = 1 leaks 4.5 dB at 15 % accuracy, σ = 0.07 with clipping
    4.8 dB at 96 %. The first is no privacy gain for the utility it costs; a clear gain on either axis still
    counts."""
    rows = [dict(index=0, psnr=91.6, test_accuracy=0.95), dict(index=1, psnr=25.0, test_accuracy=0.96),
            dict(index=2, psnr=4.8, test_accuracy=0.96), dict(index=3, psnr=4.5, test_accuracy=0.15),
            dict(index=4, psnr=2.0, test_accuracy=0.10)]
    assert sorted(pareto(rows)) == [2, 4]
    rows.append(dict(index=5, psnr=17.0, test_accuracy=0.965))  # +0.5 points of accuracy for 12 dB: no
    assert sorted(pareto(rows)) == [2, 4]
    twins = [dict(index=0, psnr=4.8, test_accuracy=0.96), dict(index=1, psnr=4.2, test_accuracy=0.96)]
    assert sorted(pareto(twins)) == [0, 1]  # a tie both ways: neither is dropped
    rng = np.random.default_rng(0)
    for _ in range(300):  # wins never go round in a circle: some row always stands
        pts = [dict(index=i, psnr=float(p), test_accuracy=float(a))
               for i, (p, a) in enumerate(zip(rng.uniform(4, 8, 12), rng.uniform(0.9, 1.0, 12)))]
        assert pareto(pts)


def test_a_failing_point_is_a_row_and_the_sweep_goes_on(tmp_path):
    r = cli("sweep", "dlm-plus", "--set", "image_size=16", "--set", "iterations=10", "--set", "local_steps=2",
            "--vary", "batch_size=1,48", "--workers", "1", "--out", str(tmp_path), env={"LEAKDEMO_STORE": "off"})
    assert r.returncode == 0, r.stderr
    # "2 points × 1 seed × 1 image = 1 runs" read as a slip: the refused run is counted, and said to be refused
    assert "2 points × 1 seed × 1 image = 2 runs (1 refused: its row says why), 0 from the run store" in r.stderr, r.stderr
    rows = json.loads((tmp_path / "sweep.json").read_text())["rows"]
    bad = next(r for r in rows if r["label"] == "batch_size=48")  # 2 steps × 48 images: more than a client holds
    good = next(r for r in rows if r["label"] == "batch_size=1")
    assert bad["failed"] == 1 and bad["runs"] == 0 and "at most 64 images" in bad["errors"][0]
    assert good["runs"] == 1 and good["psnr"] is not None
    sweep = Sweep(from_preset("dlg"), [parse_axis("batch_size=1,30,40", from_preset("dlg"))], workers=1)
    # said before anything runs (the Trade-offs page shows it above Run sweep)
    assert sweep.refused() == ("2 of 3 swept points will run nothing (their rows will say so), at batch_size=30, 40: "
                               "batch_size: must be at most 23 for data=samples, got 30")
    assert [t.point for t in sweep.tasks()] == [0]  # 30 of the 23 photos: refused without starting a worker
    assert sweep.points[1].runs[0]["error"] == "batch_size: must be at most 23 for data=samples, got 30"
    assert Sweep(from_preset("dlg"), [parse_axis("batch_size=1,4", from_preset("dlg"))], workers=1).refused() is None


def test_a_strength_that_leaves_the_payload_as_it_is_is_the_undefended_run_not_run_twice():
    """The Trade-offs page's first range for pruning, 0 to 0.999, ran pruning 0 % beside the undefended point:
    the same run twice (75.8 dB both), labelled "ε = ∞" once and "no formal guarantee" once."""
    import torch
    from leakdemo import catalog
    from leakdemo.defenses import apply_defense
    payload = [torch.randn(5, 3), torch.randn(7)]
    for p in ({"defense": "prune", "prune_ratio": 0.0}, {"defense": "logit-temperature", "send_temperature": 1.0}):
        assert catalog.defense_does_nothing(p)  # and it is so, bit for bit
        assert all(torch.equal(a, b) for a, b in zip(apply_defense(p["defense"], payload, p, torch.Generator()), payload))
    assert not catalog.defense_does_nothing({"defense": "prune", "prune_ratio": 0.001})
    # the top k of the logits' every class: pli-digits' ten, DS-FL's models' five private ones
    logits = [torch.randn(6, 10)]
    for over, k, nothing in (({}, 10, True), ({}, 9, False), ({"protocol": "ds-fl"}, 5, True)):
        p = {**from_preset("pli-digits", over).params, "defense": "top-k", "top_k": k}
        assert catalog.defense_does_nothing(p) is nothing, (over, k)
    assert torch.equal(apply_defense("top-k", logits, {"top_k": 10}, torch.Generator())[0], logits[0])
    # a run of it alone says so before it starts (Lab, CLI): its title names a defense its figures do not have
    assert from_preset("pli-digits", {"defense": "top-k", "top_k": 10}).warnings == (
        "Top-k only (k = 10) leaves the logits as they are (the top 10 of the logits' 10 classes are all of them): "
        "this run is the undefended one",)
    assert not from_preset("pli-digits", {"defense": "top-k", "top_k": 9}).warnings
    assert "leaves the payload as it is (it zeroes no entry)" in from_preset("dlg", {"defense": "prune",
                                                                                   "prune_ratio": 0}).warnings[0]
    base = from_preset("pli-digits", {"defense": "top-k"})
    assert Sweep(base, [parse_axis("top_k=1,3,10", base)]).same_as_undefended() == \
        "top_k=10 is the undefended run, not run twice"
    assert not catalog.defense_does_nothing({"defense": "dp-gaussian", "dp_sigma": 0.0, "dp_clip": 0.0})  # still draws
    base = from_preset("dlg", {"defense": "prune", "image_size": 16, "iterations": 10})
    sweep = Sweep(base, [parse_axis("prune_ratio=0..0.9:3", base)], seeds=2)
    assert [p.label for p in sweep.points] == ["no defense", "prune_ratio=0.45", "prune_ratio=0.9"]
    assert len(sweep.tasks()) == 6
    assert sweep.same_as_undefended() == "prune_ratio=0 is the undefended run, not run twice"
    # where another axis changes the run, pruning 0 % there is a run of its own
    both = Sweep(base, [parse_axis("prune_ratio=0,0.5", base), parse_axis("iterations=10,20", base)])
    assert [p.label for p in both.points] == ["no defense", "prune_ratio=0, iterations=20",
                                              "prune_ratio=0.5, iterations=10", "prune_ratio=0.5, iterations=20"]
    assert both.same_as_undefended() == "prune_ratio=0, iterations=10 is the undefended run, not run twice"


@pytest.mark.parametrize("axis,images,sets,message", [
    ("batch_size=30,40", None, {}, "batch_size: must be at most 23 for data=samples, got 30"),
    ("lr=0.5,1", ["nope"], {}, "images: unknown samples item 'nope'"),
    # one image refused at every point is a slip too: half the runs failed, a note in each row
    ("lr=0.5,1", ["coffee", "nope"], {}, "images: unknown samples item 'nope'"),
    # the undefended yardstick would run, every swept point not: it ran the yardstick a minute, then listed failures
    ("data=folder,torchvision", None, {"defense": "dp-gaussian"},
     "folder: empty; give the path of the image folder to read"),
    ("data=torchvision,folder", None, {"defense": "dp-gaussian"}, "data_root: empty; give the folder where"),
    # a parameter the scenario never reads: every point ran alike
    ("tv_dataset=SVHN,CIFAR100", None, {}, "tv_dataset: every point of the sweep would run alike: it is read only "
                                           "when data=torchvision (here data=samples)"),
    # pruning nothing is the undefended run, which the sweep runs anyway
    ("prune_ratio=0", None, {"defense": "prune"}, "prune_ratio: 0 leaves the payload as it is (the undefended "
                                                  "scenario): the sweep would run nothing else"),
])
def test_a_sweep_whose_every_run_is_refused_is_a_bad_input(axis, images, sets, message):
    """Not a table of failed points after the sweep 'ran': one line at once, as for a bad run."""
    base = from_preset("dlg", sets)
    with pytest.raises(LeakdemoError) as e:
        Sweep(base, [parse_axis(axis, base)], images=images)
    assert str(e.value).startswith(message)
    r = subprocess.run([sys.executable, "-m", "leakdemo", "sweep", "dlg", "--vary", axis]
                       + (["--images", ",".join(images)] if images else [])
                       + [a for k, v in sets.items() for a in ("--set", f"{k}={v}")],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.startswith("error: " + message) and r.stdout == ""


@pytest.mark.parametrize("address,message", [
    ("127.0.0.1:1", "address: cannot reach the Ray cluster at 127.0.0.1:1 (Connection refused)"),
    ("ray://127.0.0.1:1", "address: cannot reach the Ray cluster at ray://127.0.0.1:1 (Connection refused)"),
    ("cluster", "address: must be host:port, ray://host:port, auto or local; got 'cluster'"),
])
def test_an_unreachable_ray_cluster_is_said_at_once(address, message):
    """ray.init retries an address it cannot reach for minutes; the sweep says so before it starts."""
    base = from_preset("dlg")
    with pytest.raises(LeakdemoError) as e:
        Sweep(base, [parse_axis("lr=0.5,1", base)], backend="ray", ray_address=address)
    assert str(e.value).startswith(message)


def test_stopping_keeps_the_points_already_done():
    base = from_preset("dlg", {**FAST, "iterations": 200})
    sweep = Sweep(base, [parse_axis("dp_sigma=1e-4..1:6", base)], workers=1)
    seen = []
    for ev in sweep.events():
        seen.append(ev)
        if isinstance(ev, PointDone):
            threading.Timer(0.1, sweep.stop).start()
    assert seen[-1].status == "stopped" and 1 <= len(seen[-1].rows) < 7


def test_a_sweep_title_says_a_defense_held_at_one_strength():
    # `sweep dlg --set defense=dp-gaussian --vary lr=…` was titled 'DLG, varying learning rate (dlg)': every point
    # ran under σ = 0.01, and the title read as an undefended sweep
    from leakdemo.catalog import sweep_title
    from leakdemo.scenario import load
    dp, prune = load("dlg", {"defense": "dp-gaussian"}).params, load("dlg", {"defense": "prune"}).params
    assert sweep_title(dp, "lr", "dlg") == "DLG under Gaussian noise (noise σ = 0.01, clip norm off), varying learning " \
                                           "rate · preset dlg"
    assert sweep_title(prune, "batch_size") == "DLG against batch size under magnitude pruning (pruned fraction = 0.5)"
    assert sweep_title(dp, "dp_sigma", "dlg") == "DLG against Gaussian noise (DP-style) · preset dlg"  # strength swept
    assert sweep_title(dp, "batch_size", swept=("dp_sigma",)) == "DLG against batch size"  # swept too: not held
    assert sweep_title(from_preset("dlg").params, "lr") == "DLG, varying learning rate"  # no defense: as before


def test_a_built_in_sweep_given_other_axes_is_titled_by_them(store_path):
    # `sweep sweep-dp-dlg --vary lr=…` was headed "DLG against Gaussian noise on the gradient (FedSGD), with and
    # without clipping": the built-in's title, over a sweep of the learning rate at one σ; then "· preset dlg",
    # over the built-in's own settings (16 px, not dlg's 32)
    r = cli("sweep", "sweep-dp-dlg", "--vary", "lr=0.1,1", "--set", "iterations=1", "--seeds", "1")
    assert r.returncode == 0, r.stderr
    assert r.stderr.startswith("DLG under Gaussian noise (noise σ = 0.01, clip norm off), varying learning rate · "
                               "from sweep-dp-dlg: 3 points × 1 seed × 1 image = 3 runs"), r.stderr
    # in a log, a row is the row alone: the spaces that blank a terminal's progress bar trailed each one
    assert [line for line in r.stderr.splitlines() if line != line.rstrip()] == []


def test_cli_sweep_writes_its_files_and_streams_jsonl(tmp_path, store_path):
    out = tmp_path / "out"
    r = cli("sweep", "dlg", "--set", "image_size=16", "--set", "iterations=10", "--set", "defense=prune",
            "--vary", "prune_ratio=0.5,0.99", "--seeds", "2", "--jsonl", "--out", str(out), "--workers", "2")
    assert r.returncode == 0, r.stderr
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert lines[0]["event"] == "started" and lines[-1]["event"] == "finished"
    assert sum(x["event"] == "point" for x in lines) == 3
    runs = [x for x in lines if x["event"] == "run"]  # a point's first seed back: its index and the row so far
    assert len(runs) == 3 and all(x["point"] in (0, 1, 2) and x["row"]["runs"] == 1 for x in runs)
    assert sorted(os.listdir(out)) == ["strip.png", "sweep.csv", "sweep.json", "tradeoff.png"]
    from leakdemo.tradeoff import SWEEP_FILES
    assert set(os.listdir(out)) <= set(SWEEP_FILES)  # what --out checks before the sweep
    header = (out / "sweep.csv").read_text().splitlines()[0].split(",")
    assert {"label", "prune_ratio", "psnr", "test_accuracy", "epsilon", "privacy"} <= set(header)
    written = json.loads((out / "sweep.json").read_text())
    assert written["title"] == "DLG against magnitude pruning · preset dlg"  # as the Trade-offs page heads it
    assert len(written["rows"]) == 3 and written["utility_is_one_figure"] is False  # pruning costs the federation
    listed = cli("runs", "list", "--json")
    assert listed.returncode == 0 and len(json.loads(listed.stdout)) == 6
    # what tells the recorded runs of the sweep apart: the setting each changed from its preset
    changes = [r["changes"] for r in json.loads(listed.stdout)]
    assert sorted(c.get("prune_ratio", -1) for c in changes) == [-1, -1, 0.5, 0.5, 0.99, 0.99], changes
    assert all(c["image_size"] == 16 and c["iterations"] == 10 for c in changes)


def test_strip_png_is_the_page_s_strip_with_its_captions():
    """strip.png went into slides as a row of bare pictures: no strengths, no figures, no undefended point
    apart from the rest. It is now the page's strip: each picture over its caption, a row per clip norm."""
    import io

    from PIL import Image

    from leakdemo.tradeoff import strip_png, strip_series
    rng = np.random.default_rng(0)
    pic = lambda: rng.random((1, 8, 8, 3))  # noqa: E731
    originals = pic()
    rows = [{"undefended": True, "psnr": 41.87, "thumbnail": pic(), "originals": originals}]
    rows += [{"undefended": False, "psnr": p, "dp_sigma": s, "dp_clip": c, "thumbnail": pic(), "originals": originals}
             for c in (0, 4) for s, p in ((0.1, 6.04), (0.001, 25.2))]
    base = {"protocol": "fedsgd", "attack": "dlg", "defense": "dp-gaussian"}
    lines = strip_series(rows, ["dp_sigma", "dp_clip"], base)
    assert [name for name, _ in lines] == ["clip norm off", "clip norm = 4"]
    assert [caption for caption, _ in lines[0][1]] == [
        "the private image", "no defense · 41.9\u00a0dB", "0.001 · 25.2\u00a0dB", "0.1 · 6.0\u00a0dB"]  # in order
    assert (lines[0][1][0][1] == originals[0]).all() and (lines[1][1][1][1] == rows[0]["thumbnail"][0]).all()
    png = Image.open(io.BytesIO(strip_png(rows, ["dp_sigma", "dp_clip"], "DLG against Gaussian noise", base)))
    assert png.width >= 4 * 96 and png.height > 2 * (96 + 2 * 16)  # two labelled rows over the caption band
    assert strip_png(rows[:1], ["dp_sigma"], "t", base) is not None  # the undefended point alone still shows
    assert strip_series([{**r, "thumbnail": None} for r in rows], ["dp_sigma"], base) == []
    # grey pictures — PLI's faces and digits — as grey, not a crash after the sweep ran (`sweep pli --out`)
    grey = [{**r, "thumbnail": r["thumbnail"][..., :1], "originals": originals[..., :1]} for r in rows]
    png = Image.open(io.BytesIO(strip_png(grey, ["dp_sigma"], "t", base))).convert("RGB")
    tile = np.asarray(png)[20:60, 20:60].astype(int)  # inside the first picture: its channels agree
    assert (tile[..., 0] == tile[..., 1]).all() and (tile[..., 1] == tile[..., 2]).all() and tile.std() > 10


def _children(pid: int) -> list[int]:
    """Live (not zombie) processes whose parent is pid, from /proc."""
    out = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[1] == str(pid) and fields[0] != "Z":
            out.append(int(entry))
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads processes from /proc (Linux)")
def test_a_sweep_killed_outright_takes_its_workers_with_it(store_path):
    """kill -9 on a CLI sweep (or a closed terminal): its worker processes end within seconds, instead of
    computing the queued runs for nobody and then waiting forever with their memory."""
    proc = subprocess.Popen([sys.executable, "-m", "leakdemo", "sweep", "dlg", "--set", "image_size=16",
                             "--set", "iterations=5000", "--set", "defense=dp-gaussian", "--vary", "dp_sigma=1e-4,1",
                             "--workers", "2", "--fresh"], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(_children(proc.pid)) < 3:  # two workers and their tracker
            time.sleep(0.5)
        started = _children(proc.pid)
        assert len(started) >= 2, started
        time.sleep(5)  # the workers are computing their runs
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(_alive(p) for p in started):
        time.sleep(0.5)
    assert not any(_alive(p) for p in started), [p for p in started if _alive(p)]


@pytest.mark.timeout(600)
def test_ray_backend_gives_the_local_results():
    ray = pytest.importorskip("ray")
    base = from_preset("dlg", {**FAST, "iterations": 10})
    axes = [parse_axis("dp_sigma=1e-3,1e-1", base)]
    local = _collect(Sweep(base, axes, workers=2))[-1].rows
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        remote = _collect(Sweep(base, axes, backend="ray", workers=2))[-1].rows
    finally:
        ray.shutdown()
    key = lambda rows: sorted((r["label"], r["psnr"], r["ssim"], r["test_accuracy"]) for r in rows)  # noqa: E731
    assert key(remote) == key(local)


def test_every_built_in_sweep_resolves():
    from leakdemo.scenario import load
    from leakdemo.sweeps import sweeps
    names = set(sweeps())
    assert {"sweep-dp-dlg", "sweep-prune-dlg", "sweep-batch-dlg", "sweep-dp-dlm-plus", "sweep-fake-gradients-cafe",
            "sweep-topk-pli"} <= names
    for spec in sweeps().values():
        base = load(spec.base, spec.set)
        sweep = Sweep(base, [parse_axis(v, base) for v in spec.vary], seeds=spec.seeds)
        tasks = sweep.tasks()
        assert tasks and not any(p.runs for p in sweep.points), spec.name  # no point is refused
        # a defense's sweep starts from the undefended point; a protocol knob's (batch size) has no defense
        assert sweep.points[0].undefended == (base["defense"] != "none"), spec.name
    assert "sweep-dp-dlg" in cli("list").stdout


def test_the_cli_chart_keeps_shares_and_accuracies_in_proportion(monkeypatch):
    """The command line's tradeoff.png: attack accuracy on its whole 0–1 scale (top-k's seed noise between 0.7
    and 0.85 filled the panel), and an accuracy axis with room around its values, never past 1 (0.98 to 1.0
    took the panel's whole height)."""
    from matplotlib.figure import Figure

    from leakdemo.tradeoff import SHARE_RANGE, tradeoff_png
    drawn = []
    save = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: (drawn.append(self), save(self, *a, **k))[1])
    rows = [{"index": i, "label": f"p{i}", "undefended": i == 0, "top_k": None if i == 0 else k, "runs": 1,
             "psnr": 15.0, "psnr_range": None, "attack_accuracy": acc, "client_accuracy": util}
            for i, (k, acc, util) in enumerate([(None, 0.8, 1.0), (1, 0.75, 0.98), (2, 0.7, 0.99), (5, 0.85, 1.0)])]
    assert tradeoff_png(rows, "top-k", ["top_k"]).startswith(b"\x89PNG")
    left, right, twin = drawn[0].axes
    assert list(left.get_ylim()) == SHARE_RANGE and list(right.get_ylim()) == SHARE_RANGE
    for lo, hi in (twin.get_ylim(), right.get_xlim()):
        assert lo <= 0.93 and 1.0 < hi <= 1.01  # room below, the 1.0 points whole, nothing far past 1
    # each line drawn across the left panel is named in its legend: the undefended utility's grey one was not
    across = [ln for ax in (left, twin) for ln in ax.get_lines() if len(set(ln.get_ydata())) == 1 and len(ln.get_xdata()) == 2]
    assert sorted(ln.get_label() for ln in across) == ["leakage with no defense", "utility with no defense"]
    assert [t.get_text() for t in left.get_legend().get_texts()] == ["leakage", "leakage with no defense", "utility",
                                                                      "utility with no defense"]


def test_the_sweep_knows_when_the_federations_utility_cannot_change():
    """The federation trains with its own batches, rounds and step size: a FedSGD client's batch size, warm-up
    steps or FedAvg's local learning rate leave its utility one figure (the page says so), noise and local steps
    do not; PLI's clients and CAFE's training have utilities of their own."""
    def one(preset, vary, **over):
        base = from_preset(preset, over)
        return Sweep(base, [parse_axis(vary, base)]).utility_is_one_figure()
    assert one("dlg", "batch_size=1,2,4") and one("dlg", "warmup_steps=0,300") and one("dlm-plus", "local_lr=0.01,0.1")
    assert not one("dlg", "dp_sigma=0.1,1", defense="dp-gaussian") and not one("dlm-plus", "local_steps=1,2")
    assert not one("pli", "clients=1,2") and not one("cafe", "train_lr=0,0.0001")


def test_the_cli_chart_says_when_its_utility_cannot_change(monkeypatch):
    """tradeoff.png, like the page, says why a batch-size sweep's utility line is flat (the picture travels
    without the page's caption), in the knob's words; a sweep whose utility does move says nothing. Its log
    axis is marked at the swept values."""
    from matplotlib.figure import Figure

    from leakdemo.tradeoff import tradeoff_png
    drawn = []
    save = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: (drawn.append(self), save(self, *a, **k))[1])
    rows = [{"index": i, "label": f"p{i}", "undefended": False, "batch_size": b, "runs": 1, "psnr": p,
             "psnr_range": None, "test_accuracy": 0.9} for i, (b, p) in enumerate([(1, 60.0), (2, 25.0), (4, 12.0)])]
    base = dict(from_preset("dlg").params)
    for flag in (True, False):
        tradeoff_png(rows, "batch", ["batch_size"], True, base=base, one_figure=flag)
    said = [[t.get_text() for t in fig.texts] for fig in drawn]
    # on the log axis the swept sizes themselves, not decades ("10^0, 10^1")
    assert [t.get_text() for t in drawn[0].axes[0].get_xticklabels()] == ["1", "2", "4"]
    assert any(t.startswith("The federation's accuracy is one figure at every point") and "batch size" in t
               for t in said[0]), said[0]
    assert not any("one figure" in t for t in said[1])


def test_a_sweep_says_how_many_numbers_per_unknown_each_point_sends_where_dlg_runs_short():
    from leakdemo.tradeoff import equations_line
    base = dict(from_preset("dlg").params)  # 32 px: 2.93 numbers per unknown for one photo
    said = equations_line("batch_size", [1, 2, 4], base)
    assert said == ("Numbers per unknown pixel value in the LeNet's gradient, by batch size (batch_size): 1: 2.93, "
                    "2: 1.61, 4: 0.94. Below 1 many images give the same gradient; DLG needed about 2 to bring its "
                    "images back.")
    assert equations_line("image_size", [16, 32, 64], base).endswith("16: 10.97, 32: 2.93, 64: 0.92. Below 1 many "
                                                                     "images give the same gradient; DLG needed "
                                                                     "about 2 to bring its images back.")
    assert equations_line("dp_sigma", [0.001, 0.01], base) is None  # the count does not move
    assert equations_line("batch_size", [1, 2], {**base, "image_size": 16}) is None  # 10.97 and 5.68: plenty
    assert equations_line("batch_size", [1, 8], dict(from_preset("invgrad").params)) is None  # not the LeNet


def test_a_parameter_swept_where_another_axis_makes_it_read_is_taken():
    """model_depth is read by the MLP only: beside `--vary model=lenet,mlp` its points differ, so it is swept."""
    base = from_preset("dlg")
    axes = [parse_axis("model_depth=1,2", base), parse_axis("model=lenet,mlp", base)]
    assert len(Sweep(base, axes, workers=1).points) == 4
    with pytest.raises(ParamError, match="^model_depth: every point of the sweep would run alike: it is read only "
                                         r"when model=resnet or model=mlp \(here model=lenet\)$"):
        Sweep(base, axes[:1], workers=1)
    # a --set that no point reads is said before the sweep runs, one that some point reads is not
    said = Sweep(from_preset("dlg", {"folder": "/tmp", "model_depth": 3}), axes[1:], workers=1).unread(["folder", "model_depth"])
    assert said == ["folder=/tmp changes nothing: it is read only when data=folder (here data=samples)"]


def test_the_cli_chart_stacks_the_labels_of_equal_points(monkeypatch):
    """`sweep pli-digits --vary prior=restored,auto`: two points with equal figures sit on one spot of the
    privacy chart; their labels are stacked there, each readable, not printed over each other."""
    from matplotlib.figure import Figure

    from leakdemo.tradeoff import tradeoff_png
    drawn = []
    save = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: (drawn.append(self), save(self, *a, **k))[1])
    rows = [{"index": i, "label": f"p{i}", "undefended": False, "prior": prior, "runs": 1, "psnr": psnr,
             "psnr_range": None, "test_accuracy": acc}
            for i, (prior, psnr, acc) in enumerate([("restored", 14.0, 0.5), ("auto", 14.0, 0.5), ("none", 9.0, 0.5)])]
    tradeoff_png(rows, "prior", ["prior"])
    spots = {t.get_text(): (t.xy, t.xyann) for t in drawn[0].axes[1].texts}
    assert set(spots) == {"restored", "auto", "none"}
    assert spots["restored"][0] == spots["auto"][0] and spots["restored"][1] != spots["auto"][1]
    assert spots["none"][1] in (spots["restored"][1], spots["auto"][1])  # a point of its own keeps the usual place


def test_the_cli_chart_keeps_the_labels_of_near_points_apart(monkeypatch):
    """`sweep cafe --set defense=prune --vary prune_ratio=0.1,0.3,0.5`: 0.1 and 0.3 lie at 12.6 and 12.5 dB with
    the same training loss, not on one spot; their labels overlapped on the privacy chart."""
    from matplotlib.figure import Figure

    from leakdemo.tradeoff import tradeoff_png
    drawn = []
    save = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: (drawn.append(self), save(self, *a, **k))[1])
    rows = [{"index": i, "label": f"p{i}", "undefended": ratio == 0, "prune_ratio": ratio, "runs": 1, "psnr": psnr,
             "psnr_range": None, "training_loss": loss}
            for i, (ratio, psnr, loss) in enumerate([(0, 12.63, 0.3903), (0.1, 12.62, 0.3903), (0.3, 12.5, 0.3904),
                                                     (0.5, 10.9, 0.3917)])]
    tradeoff_png(rows, "prune", ["prune_ratio"])
    renderer = drawn[0]._get_renderer()
    boxes = {t.get_text(): t.get_window_extent(renderer) for t in drawn[0].axes[1].texts}
    assert {"0.1", "0.3", "0.5"} <= set(boxes)
    assert not boxes["0.1"].overlaps(boxes["0.3"]), (boxes["0.1"], boxes["0.3"])
    assert boxes["0.5"].y0 < boxes["0.3"].y0  # each beside its own point


def test_a_sweep_says_what_run_would_warn_of_at_its_points():
    """`run` warns of a cost, a model the attack fails on, too few equations; `sweep` said none of them, though a
    point of 20 clients takes minutes on a CPU. Each is said once, with the points it holds at; too few equations
    is left to the line under a batch-size sweep's chart, which counts every point."""
    base = from_preset("dlg", {"device": "cpu"})  # the cost is said of a CPU
    said = Sweep(base, [parse_axis("clients=8,20", base), parse_axis("model=lenet,resnet", base)], workers=1).warnings()
    assert said == ["at model=resnet: DLG's L2 objective rarely converges on ReLU/BatchNorm nets; try invgrad.",
                    next(w for w in from_preset("dlg", {"clients": 20, "device": "cpu"}).warnings
                         if w.startswith("clients=20: "))]
    [cost] = Sweep(base, [parse_axis("clients=18,20", base)], workers=1).warnings()
    assert cost.startswith("clients=18: ") and cost.endswith(" — likewise at clients=20")  # it names its point
    assert not Sweep(base, [parse_axis("batch_size=1,8,16", base)], workers=1).warnings()  # the chart counts them
    # two axes: no chart line counts the equations, so the warning is said
    grid = Sweep(base, [parse_axis("batch_size=1,16", base), parse_axis("iterations=100,200", base)], workers=1)
    assert grid.warnings()[0].startswith("at batch_size=16: Fewer equations than unknowns")
    # alike but for their figures: said once, the first in full (three paragraphs on equations before)
    fedavg = from_preset("dlm-plus")
    said = Sweep(fedavg, [parse_axis("batch_size=1..16:5", fedavg)], workers=1).warnings()
    assert len(said) == 1 and said[0].startswith("at batch_size=4: Fewer equations than unknowns (0.94 per unknown)")
    assert said[0].endswith(" — likewise at batch_size=8; batch_size=16"), said
    run = cli("sweep", "dlg", "--vary", "model=resnet", "--set", "iterations=1", "--set", "model_width=4")
    assert "warning: DLG's L2 objective rarely converges" in run.stderr, run.stderr


def test_the_cli_chart_against_epsilon_still_places_every_point_by_its_utility(monkeypatch):
    """`sweep pli-digits --vary logit_sigma=... --x-axis epsilon`: no point has a formal ε, so the left panel says
    so; the right panel (privacy against utility) has no ε axis and drew the undefended star alone, the three
    measured points gone. A DP sweep with and without clipping lost its unclipped points there too."""
    from matplotlib.figure import Figure

    from leakdemo.tradeoff import tradeoff_png
    drawn = []
    save = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: (drawn.append(self), save(self, *a, **k))[1])
    rows = [{"index": i, "label": f"p{i}", "undefended": i == 0, "dp_sigma": s, "dp_clip": c, "runs": 1,
             "psnr": p, "psnr_range": None, "test_accuracy": a, "epsilon": e}
            for i, (s, c, p, a, e) in enumerate([(None, None, 50.0, 0.9, None), (0.1, 0.0, 30.0, 0.8, None),
                                                 (1.0, 0.0, 12.0, 0.6, None), (0.1, 1.0, 25.0, 0.85, 40.0),
                                                 (1.0, 1.0, 10.0, 0.7, 3.0)])]
    tradeoff_png(rows, "dp", ["dp_sigma", "dp_clip"], True, x="epsilon")
    left, right = drawn[0].axes[:2]
    placed = {tuple(map(float, line.get_xydata()[0])) for line in right.lines if len(line.get_xydata())}
    assert {(r["test_accuracy"], r["psnr"]) for r in rows} <= placed
    # on the left only the clipped points, at their ε, and a line saying the other two are on the right only
    assert sorted(x for line in left.lines if line.get_marker() == "o" for x in line.get_xdata()) == [3.0, 40.0]
    assert "2 points with no formal ε: on the right only" in [t.get_text() for t in left.texts]


def test_a_vertical_fl_sweep_says_when_its_utility_cannot_show_a_cost(monkeypatch):
    """A sweep on cafe-faces drew a flat training loss at every strength (2.306 → 2.199 undefended: the faces have
    no identity labels), so every defense looked free: its rows carry the line the Lab shows under the chart."""
    from types import SimpleNamespace

    from leakdemo.sweep import Point, Task, _scored, summarise
    base = from_preset("cafe-faces", {"defense": "prune"})
    axes = [parse_axis("prune_ratio=0.5,0.9", base)]

    def run(clean, defended):
        task = Task(0, 0, None, dict(base.params), "cafe-faces", True)
        m = {"psnr": 12.0, "ssim": 0.3, "lpips": 0.4,
             "utility": {"steps": 200, "lr": 0.1, "defended": defended, "clean": clean}}
        return _scored(task, SimpleNamespace(metrics=m, status="finished", seconds=1.0, images=np.zeros((1, 2, 2, 3))),
                       None, None)
    flat, falls = [2.306] + [2.2] * 199, [2.312] + [0.39] * 199
    row = summarise(Point(1, {"prune_ratio": 0.5}, runs=[run(flat, [2.3] * 200)]), base, axes)
    assert row["barely_learns"].startswith("Without a defense the federation's training loss barely falls in 200 "
                                           "steps (2.306 → 2.200): the faces carry no identity labels")
    assert row["training_loss"] == pytest.approx(2.3)
    fine = summarise(Point(1, {"prune_ratio": 0.5}, runs=[run(falls, flat)]), base, axes)
    assert fine["barely_learns"] is None
    from leakdemo.sweep import flat_utility
    assert flat_utility([fine, row]) == row["barely_learns"] and flat_utility([fine]) is None
    # and under the command line's tradeoff.png, which travels without the page's captions
    from matplotlib.figure import Figure

    from leakdemo import tradeoff
    drawn = []
    save = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: (drawn.append(self), save(self, *a, **k))[1])
    tradeoff.tradeoff_png([{**row, "index": 0}, {**fine, "index": 1}], "faces", ["prune_ratio"])
    said = " ".join(t.get_text().replace("\n", " ") for t in drawn[0].texts)
    assert row["barely_learns"] in said


def test_a_sweep_row_keeps_four_significant_digits():
    """sweep.csv read "0.6000000238418579" for a clients' accuracy of 0.6 (a float32 mean) and LPIPS to sixteen
    digits beside PSNR's two decimals."""
    from types import SimpleNamespace

    import torch

    from leakdemo.sweep import Point, Task, _scored, summarise
    base = from_preset("pli-digits")
    m = {"psnr": 12.0, "ssim": 0.3, "lpips": 0.40891456604003906, "attack_accuracy": 0.6,
         "utility": {"defended": [float(torch.tensor(0.6))]}}
    run = _scored(Task(0, 0, None, dict(base.params), "pli-digits", True),
                  SimpleNamespace(metrics=m, status="finished", seconds=1.0, images=np.zeros((1, 2, 2, 3))), None, None)
    assert run["client_accuracy"] != 0.6  # the float32 figure as the run measured it
    row = summarise(Point(1, {}, runs=[run]), base, [])
    assert (row["client_accuracy"], row["lpips"]) == (0.6, 0.4089)


def test_a_two_axis_sweep_s_rows_stay_in_line(monkeypatch, capsys):
    """`--vary dp_sigma=… --vary dp_clip=…`: a label such as 'dp_sigma=0.0001, dp_clip=0.001' ran past the
    28-character label column and pushed its row's figures out from under the others'."""
    from leakdemo import cli as cli_module
    from leakdemo.sweep import SweepFinished
    monkeypatch.setenv("LEAKDEMO_STORE", "off")
    monkeypatch.setattr(Sweep, "events", lambda self: iter([SweepFinished([self._row(p) for p in self.points],
                                                                          "finished", 0.1)]))
    assert cli_module.main(["sweep", "dlg", "--set", "defense=dp-gaussian", "--vary", "dp_sigma=0.0001,0.1",
                            "--vary", "dp_clip=0.001,10"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  ")]
    assert len(rows) == 5 and rows[1].startswith("  dp_sigma=0.0001, dp_clip=0.001 no result"), rows
    assert len({line.index(" no result") for line in rows}) == 1, rows
