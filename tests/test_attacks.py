"""Each attack really recovers data on a tiny setting; labels come off the last layer exactly."""
import pytest
import torch

from leakdemo import milestones
from leakdemo.attacks.dlg import restart_reason
from leakdemo.attacks.notes import PASSING_NOTES, RESTARTING
from leakdemo.attacks.gradients import infer_labels, model_gradients
from leakdemo.events import Finished
from leakdemo.models import build_model
from leakdemo.runner import Run
from leakdemo.scenario import from_preset


def finish(scenario) -> Finished:
    events = list(Run(scenario).events())
    assert events[-1].event == "finished", events[-1]
    return events[-1]


@pytest.mark.parametrize("seed", range(5))
def test_idlg_label_is_exact_for_one_image(seed):
    model = build_model("lenet", 3, 16, 100, seed, init="uniform")
    x, y = torch.rand(1, 3, 16, 16), torch.tensor([seed * 17 % 100])
    assert infer_labels(model, model_gradients(model, x, y, False), 1) == [y.item()]


def test_batch_label_inference_finds_distinct_labels():
    model = build_model("convnet", 3, 16, 10, 0, init="default")
    x, y = torch.rand(4, 3, 16, 16), torch.tensor([1, 4, 7, 9])
    assert infer_labels(model, model_gradients(model, x, y, False), 4) == [1, 4, 7, 9]


def test_dlg_recovers_a_photo(tiny):
    f = finish(from_preset("dlg", {**tiny, "images": "rocket"}))
    assert f.metrics["psnr"] > 25
    assert f.metrics["label_accuracy"] == 1.0
    # when the photo became recognisable, read off the run's own curve, as the Lab and the CLI say it
    seconds, iteration = milestones.reached(f.history, 20)
    assert 0 <= seconds <= f.seconds and 0 <= iteration <= f.iterations
    assert milestones.sentence(f.history, f.metrics, True).startswith(f"Recognisable (20 dB) after {seconds:.1f} s, ")


def test_dlg_cannot_single_out_a_photo_when_the_gradient_has_fewer_numbers_than_pixels(tiny):
    """The Lab's note before Run says so (catalog.too_few_equations); the same run as above, a narrower LeNet."""
    scenario = from_preset("dlg", {**tiny, "images": "rocket", "model_width": 2})  # 488 numbers, 768 pixel values
    assert any(w.startswith("Fewer equations than unknowns (0.64 per unknown)") for w in scenario.warnings)
    assert finish(scenario).metrics["psnr"] < 15


def test_idlg_recovers_a_photo_with_the_exact_label(tiny):
    f = finish(from_preset("idlg", {**tiny, "images": "chelsea"}))
    assert f.metrics["psnr"] > 25 and f.metrics["label_accuracy"] == 1.0


def test_invgrad_recovers_on_a_relu_net():
    f = finish(from_preset("invgrad", {"image_size": 16, "iterations": 250, "images": "coffee"}))
    assert f.metrics["psnr"] > 17 and f.metrics["label_accuracy"] == 1.0


def test_invgrad_batch_is_matched_and_recovered():
    f = finish(from_preset("invgrad-batch", {"image_size": 16, "iterations": 300}))
    assert sorted(f.metrics["matched_order"]) == [0, 1, 2, 3]
    assert f.metrics["psnr"] > 14


@pytest.mark.parametrize("defense", [{"defense": "dp-gaussian", "dp_sigma": "0.1"},
                                     {"defense": "prune", "prune_ratio": "0.7"}])
def test_defenses_bite(tiny, defense):
    clean = finish(from_preset("dlg", {**tiny, "images": "rocket"})).metrics["psnr"]
    events = list(Run(from_preset("dlg", {**tiny, "images": "rocket", **defense})).events())
    assert events[-1].metrics["psnr"] < clean - 15
    assert milestones.sentence(events[-1].history, events[-1].metrics, True) == (
        "It never became recognisable: the PSNR stayed below 20 dB.")
    # the starts stall, restart and give up (and never diverge); the notes the Lab drops once the run is done
    # (a GPU's first step also says how its objective was compiled)
    passing = [e.note for e in events if any(n in (getattr(e, "note", None) or "") for n in PASSING_NOTES)]
    assert [n.split(" — ")[1] for n in passing] == [f"{RESTARTING} ({i}/3)" for i in (1, 2, 3)]
    assert events[-1].metrics["note"].startswith("gave up after 4 starts (stalled at loss ")


def test_original_loop_is_kept_for_comparison(tiny):
    s = from_preset("dlg", {**tiny, "loop": "original", "iterations": 5})
    f = finish(s)
    assert f.iterations == 5


def test_a_start_that_only_creeps_down_gives_way_to_a_fresh_one():
    """The robust loop's restart rule. A start that saturated the sigmoids can lose ~1 % a step for hundreds
    of steps (coffee, seed 1: 158 -> 91 over 250 of 300 steps, ending the run at 34 dB); by step 50 it is
    replaced. Converging starts are far below a tenth of their first loss by then and keep going."""
    assert restart_reason(49, 0, 42.0, 100.0) is None  # not yet
    assert restart_reason(50, 0, 42.0, 100.0) == "still at 42% of its first loss after 50 steps"
    assert restart_reason(50, 0, 3e-2 * 100, 100.0) is None  # the highest a start levelled off measured (50 % pruned)
    assert restart_reason(300, 0, 1e-6, 100.0) is None
    assert restart_reason(12, 10, 50.0, 100.0) == "stalled at loss 50"  # the stall rule, as before
    assert restart_reason(12, 10, 1e-3, 100.0) is None  # a converged start that stopped gaining is kept


def test_a_start_that_crawls_in_a_shallow_valley_gives_way_to_a_fresh_one():
    """After 200 warm-up steps, DLG on coffee (compiled) or horse (seed 0) sank to ~2e-3-4e-4 of its first loss
    within 100 steps and then lost well under 1 % a step — never a stall, never above a tenth of the first
    loss — ending the run at 5.5 and 4.5 dB. Not halving in 50 steps while above the stall ratio now gives
    the place to a fresh start (23.7 and 14.3 dB). Converging starts halve every few steps; starts a weak
    defense holds up level off below the stall ratio and are kept."""
    assert restart_reason(124, 0, 4.1e-4 * 100, 100.0, since_halved=50) == (
        "crawling at loss 0.041 (not halved in 50 steps)")
    assert restart_reason(124, 0, 4.1e-4 * 100, 100.0, since_halved=49) is None  # halved not long ago
    assert restart_reason(300, 0, 6e-5 * 100, 100.0, since_halved=235) is None  # a weak defense's floor: kept


def _scripted_loop(losses):
    """DLG's loop (iDLG's fixed label) on an objective whose value at its n-th evaluation is losses(n), with no
    gradient: L-BFGS stops at once each step, so the loop sees exactly that loss sequence, whatever the CPU."""
    from torch import nn
    from leakdemo.attacks.dlg import gradient_matching
    from leakdemo.threat import Knowledge
    calls = []

    def objective(x, label, extras):
        calls.append(x)
        return losses(len(calls) - 1) + 0 * x.sum()
    kn = Knowledge(nn.Identity(), (1, 4, 4), 10, 1, [])
    p = {"loop": "robust", "iterations": 80, "restarts": 3, "seed": 0, "lr": 1.0, "compile": "off"}
    return list(gradient_matching(kn, p, "cpu", objective, [3], fixed_labels=True))


def test_the_loop_leaves_a_start_that_has_not_halved_in_50_steps_for_a_fresh_one():
    """A start at a twentieth of its first loss after one step that then loses 1.2 % a step — never a stall,
    never hopeless, but not halving in 50 steps — gives way at step 52, 50 steps after its last halving; one
    that loses 1.5 % a step halves every 46 steps and is kept to the end."""
    crawls = _scripted_loop(lambda n: 100.0 if n == 0 else 5.0 * 0.988 ** n)
    notes = [(s.iteration, s.note) for s in crawls if s.note and RESTARTING in s.note]
    assert notes == [(52, f"crawling at loss 2.7 (not halved in 50 steps) — {RESTARTING} (1/3)")], notes
    assert crawls[-1].final and crawls[-1].note.endswith("(over 2 starts)")
    converges = _scripted_loop(lambda n: 100.0 if n == 0 else 5.0 * 0.985 ** n)
    assert [s.note for s in converges if s.note and RESTARTING in s.note] == []


def _fedavg_like_objective(device):
    """An eager gradient-inversion objective (cosine distance + TV, a double backward), as the signed-Adam
    attacks evaluate it."""
    from leakdemo.attacks.gradients import cosine_distance, total_variation
    from leakdemo.attacks.invgrad import scalar_objective
    model = build_model("convnet", 3, 16, 10, 0, init="default").to(device)
    y = torch.tensor([3, 5], device=device)
    target = model_gradients(model, torch.rand(2, 3, 16, 16, device=device), y, False)
    return scalar_objective(lambda v: cosine_distance(model_gradients(model, v, y, True), target)
                            + 1e-4 * total_variation(v))


def test_a_cpu_evaluates_the_signed_adam_objectives_as_they_are():
    from leakdemo.attacks.invgrad import graph_note, graphed_on_gpu
    objective = _fedavg_like_objective("cpu")
    assert graphed_on_gpu(objective, "cpu") is objective and graph_note(objective) is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_on_a_gpu_an_eager_objective_replays_a_cuda_graph_equal_to_it():
    """The first evaluation eager (torch's warm-up), the second captured, the rest replayed: each gives the
    eager objective's value and gradient at its own input."""
    from leakdemo.attacks.invgrad import graphed_on_gpu
    dev = torch.device("cuda")
    objective = _fedavg_like_objective(dev)
    graphed = graphed_on_gpu(objective, dev)
    for seed in range(5):
        x = torch.rand(2, 3, 16, 16, generator=torch.Generator().manual_seed(seed)).to(dev)
        (value, grad), (ref_value, ref_grad) = graphed(x), objective(x)
        assert torch.allclose(value, ref_value, rtol=1e-4, atol=1e-7), seed
        assert torch.allclose(grad, ref_grad, rtol=1e-3, atol=1e-6), seed
    assert graphed.graph is not None and graphed.note is None  # captured, and replayed


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("preset,over", [("invgrad", {"compile": "off"}), ("invgrad-fedavg", {}),
                                         ("agic", {"compile": "off"}), ("agic-multiround", {"pre_iterations": 6})])
def test_on_a_gpu_the_signed_adam_attacks_step_through_a_cuda_graph(preset, over):
    """Inverting Gradients (one start, not compiled), its FedAvg simulation and AGIC (one round, and several
    rounds with their per-epoch pre-reconstructions) capture their eager objective without a note saying it
    failed, and still move the estimate."""
    events = list(Run(from_preset(preset, {"image_size": 16, "iterations": 12, **over})).events())
    assert events[-1].event == "finished", events[-1]
    notes = [e.note for e in events if getattr(e, "note", None)]
    assert not any("CUDA graph" in n for n in notes), notes
    assert abs(events[-1].images.astype(float) - events[1].images.astype(float)).max() > 0.05  # frame 0: the start
