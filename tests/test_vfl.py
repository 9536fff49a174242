"""Vertical FL: the protocol, CAFE's Steps I-II (exact on an FC model), the fake-gradients defense,
each CAFE mode's real recovery, the DLG baseline on one batch, and the parameters that conflict."""
import pytest
import torch

from leakdemo import catalog
from leakdemo.attacks.cafe import StepOne, batches, cafe, graphable, min_norm, off_span, row_space, spectral_norm_squared
from leakdemo.defenses import fake_gradients
from leakdemo.errors import ParamError
from leakdemo.protocols import vfl
from leakdemo.events import Progress
from leakdemo.runner import Run
from leakdemo.scenario import from_preset

# 24 digits of 8×8 px cut into 4 quadrants, batches of 6: a CAFE run in a few seconds
TINY = {"image_size": 8, "n_samples": 24, "batch_size": 6, "model_width": 32, "fc_width": 16, "iterations": 300}


def simulate(**over):
    s = from_preset("cafe", {**TINY, **over})
    p = dict(s.params)
    return (*catalog.PROTOCOLS["vfl"].run(p, torch.device("cpu"), None), p)


def finish(**over):
    events = list(Run(from_preset("cafe", {**TINY, **over})).events())
    assert events[-1].event == "finished", events[-1]
    return events[-1]


# ---------------------------------------------------------------- the protocol

def test_tiles_split_every_image_among_the_workers():
    assert [vfl.tile_grid(m) for m in (1, 2, 3, 4, 6, 8, 16)] == [(1, 1), (1, 2), (1, 3), (2, 2), (2, 3), (2, 4), (4, 4)]
    x = torch.arange(2 * 3 * 8 * 8, dtype=torch.float32).view(2, 3, 8, 8)
    parts = vfl.tiles(x, (2, 2))
    assert [t.shape for t in parts] == [torch.Size([2, 3, 4, 4])] * 4
    assert torch.equal(parts[3], x[..., 4:, 4:])
    assert sum(t.numel() for t in parts) == x.numel()


def test_the_server_gets_each_workers_gradient_for_the_batch_it_chose():
    obs, kn, truth, p = simulate()
    session = obs.payload
    q = session.query([3, 5, 7, 11, 13, 17])
    assert obs.kind == "vfl" and len(q.workers) == 4 and obs.context["n_samples"] == 24
    model = kn.model  # the same weights as the federation's: the gradients must be those of that batch
    idx = torch.tensor([3, 5, 7, 11, 13, 17])
    loss = torch.nn.functional.cross_entropy(model(truth.images[idx]), truth.labels[idx])
    grads = torch.autograd.grad(loss, list(model.parameters()))
    sent = [t for u in q.workers for t in u] + q.top
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(grads, sent))
    assert not hasattr(session, "images") and not hasattr(session, "labels")  # nothing private in public names


def test_a_training_federation_moves_its_weights_between_queries():
    obs, *_ = simulate(train_lr=1e-3)
    a = obs.payload.query(list(range(6)))
    b = obs.payload.query(list(range(6, 12)))
    assert b.version == a.version + 1 and not torch.equal(a.weights[0], b.weights[0])


def test_samples_become_deterministic_crops_of_the_photos():
    s = from_preset("cafe", {**TINY, "data": "samples", "n_samples": 30})
    obs, _, truth = catalog.PROTOCOLS["vfl"].run(dict(s.params), torch.device("cpu"), None)
    again = catalog.PROTOCOLS["vfl"].run(dict(s.params), torch.device("cpu"), None)[2]
    assert len(truth.images) == 30 and torch.equal(truth.images, again.images)
    assert len({tuple(im.flatten()[:20].tolist()) for im in truth.images}) == 30  # all different crops


def test_batches_cover_every_sample_each_epoch():
    g = torch.Generator().manual_seed(0)
    stream = batches(10, 4, g)
    seen = [next(stream) for _ in range(5)]
    assert all(len(set(b.tolist())) == 4 for b in seen)
    assert set(torch.cat(seen[:2]).tolist()) | set(seen[2][:2].tolist()) == set(range(10))


# ---------------------------------------------------------------- CAFE's steps

@pytest.mark.parametrize("solver", ["least-squares", "sgd"])
def test_steps_one_and_two_recover_the_exact_fc_inputs_on_a_fully_connected_model(solver):
    obs, kn, truth, p = simulate(worker_model="fc", solver=solver, internal_weight=0.0,
                                 iterations=150 if solver == "least-squares" else 600)
    last = None
    for step in cafe(obs, kn, p, torch.device("cpu")):
        last = step
    errors = truth.checks(last.internals)
    assert errors["step1_error"] < 1e-3 and errors["step2_error"] < 1e-2
    # on an FC-only worker the first FC layer's input is the worker's tile itself: the data are out
    H = last.internals["H"]
    for m, tile in enumerate(vfl.tiles(truth.images, vfl.tile_grid(4))):
        assert torch.allclose(H[m], tile.flatten(1), atol=2e-2 if solver == "sgd" else 1e-3)


def test_fake_gradients_keep_signs_and_ranks_and_respect_the_bounds():
    g = torch.Generator().manual_seed(0)
    true = [torch.randn(40, 30) ** 3 * 1e-3, torch.randn(64) * 1e-2]  # heavy-tailed, like real gradients
    fake = fake_gradients(true, 0.5, 200, g)
    for t, f in zip(true, fake):
        t, f = t.flatten(), f.flatten()
        assert torch.all(t * f >= 0)  # signs survive
        assert torch.all(f.abs() <= t.abs() + 1e-12)  # a clamp never enlarges an entry
        order = t.abs().argsort(descending=True)
        assert torch.all(f.abs()[order][:-1] >= f.abs()[order][1:] - 1e-12)  # the ranking survives
        assert torch.all(f[order[:5]] != t[order[:5]])  # the largest magnitudes do not
    # the same candidates for the whole run: equal inputs give equal uploads
    again = fake_gradients(true, 0.5, 200, torch.Generator().manual_seed(0))
    assert all(torch.equal(a, b) for a, b in zip(fake, again))
    # a large σ lets most entries through untouched; a small one replaces them all
    assert all((a == b).float().mean() > 0.9 for a, b in zip(fake_gradients(true, 5.0, 200, g), true))
    assert (fake_gradients(true, 0.01, 200, g)[1] != true[1]).float().mean() > 0.9


# ---------------------------------------------------------------- real recovery

def test_single_loop_cafe_recovers_every_sample():
    fin = finish()
    assert fin.metrics["psnr"] > 25, fin.metrics["psnr"]
    assert min(fin.metrics["psnr_per_image"]) > 15
    assert fin.metrics["matched_order"] == list(range(24))  # scored by index: the server knows which is which
    assert fin.metrics["step1_error"] < 1e-3 and fin.metrics["step2_error"] < 1e-2


def test_nested_loop_cafe_recovers_every_sample():
    fin = finish(cafe_loop="nested", phase_iterations=60)
    assert fin.metrics["psnr"] > 25, fin.metrics["psnr"]


def test_without_the_internal_representation_term_cafe_collapses():
    fin = finish(internal_weight=0.0, gradient_weight=1.0, iterations=200)
    assert fin.metrics["psnr"] < 15, fin.metrics["psnr"]


def test_the_first_fc_gradient_spans_its_batch_inputs_whatever_the_per_sample_gradients():
    g = torch.Generator().manual_seed(0)
    H, V = torch.randn(6, 40, generator=g), torch.randn(6, 16, generator=g)  # K = 6 samples, d1 = 40, d2 = 16
    basis = row_space(V.T @ H)  # ∇Θ₁ = Σ v_n h_nᵀ, as the server receives it
    assert off_span(H, basis) < 1e-8  # every sample's h lies in the rows' span
    assert off_span(torch.randn(6, 40, generator=g), basis) > 6 * 0.5  # a random h mostly does not (34 of 40 dims)
    assert off_span(3 * H[:2] - H[2:4], basis) < 1e-8  # but the term alone allows mixtures: gradient matching must pin them
    few = row_space(V[:, :4].T @ H)  # d2 = 4 < K: the rows span only 4 of the 6 directions
    assert off_span(H, few) > 0.1


def test_step_two_solves_each_batch_like_a_pseudo_inverse_but_never_blows_up():
    g = torch.Generator().manual_seed(0)
    for shape in [(16, 6), (4, 6)]:  # d2 ≥ K and d2 < K: either Gram matrix is the one factored
        a, r = torch.randn(shape, generator=g), torch.randn(shape[0], 30, generator=g)
        exact = torch.linalg.pinv(a.double()) @ r.double()
        assert (min_norm(a, r, 1e-3) - exact).norm() < 1e-3 * exact.norm()
    assert min_norm(torch.zeros(16, 6), torch.randn(16, 3, generator=g), 1e-3).abs().max() == 0  # V still 0
    # nearly dependent samples (V early on): a pseudo-inverse amplifies their difference, the damped one does not
    a = torch.randn(16, 1, generator=g).repeat(1, 6) + 1e-5 * torch.randn(16, 6, generator=g)
    r = torch.randn(16, 30, generator=g)
    assert (torch.linalg.pinv(a.double(), rtol=1e-6) @ r.double()).norm() > 1e3 * r.norm() / a.norm()
    assert min_norm(a, r, 1e-3).norm() < 10 * r.norm() / a.norm()


def test_the_sgd_steps_curvature_is_the_spectral_norm_without_an_svd():
    # solver=sgd scales Step II by ‖V_batch‖₂²; an SVD would make a GPU wait every iteration
    g = torch.Generator().manual_seed(0)
    for shape in [(3, 40, 64), (64, 40), (8, 8)]:  # a stack of workers, either Gram matrix
        a = torch.randn(shape, generator=g) * torch.logspace(0, -3, shape[-1])
        exact = torch.linalg.matrix_norm(a.double(), ord=2) ** 2
        assert torch.allclose(spectral_norm_squared(a), exact, rtol=1e-9)
    q = torch.linalg.qr(torch.randn(20, 20, generator=g, dtype=torch.float64)).Q
    close = q * torch.tensor([1.0, 0.9999] + [0.5] * 18, dtype=torch.float64).sqrt()  # two nearly equal tops
    assert abs(spectral_norm_squared(close) - 1.0) < 2e-4
    assert spectral_norm_squared(torch.zeros(2, 8, 5)).abs().max() == 0  # V still 0: no step


def test_the_worker_axis_solves_each_worker_as_if_alone():
    # Steps I–II run all workers at once; a worker with tiny gradients must not be damped by another's scale
    g = torch.Generator().manual_seed(0)
    a = torch.randn(3, 16, 6, generator=g) * torch.tensor([1.0, 1e-4, 30.0])[:, None, None]
    r = torch.randn(3, 16, 30, generator=g)
    together, basis = min_norm(a, r, 1e-3), row_space(a.mT @ r)
    for m in range(3):
        assert torch.allclose(together[m], min_norm(a[m], r[m], 1e-3), rtol=1e-6, atol=0)
        assert torch.allclose(basis[m], row_space(a[m].T @ r[m]), rtol=1e-5, atol=1e-7)
    n, idx = 10, torch.tensor([1, 4, 7])
    V, target = torch.zeros(3, n, 5), torch.randn(3, 5, generator=g)
    StepOne(n, "cpu").update(V, idx, target)
    for m in range(3):
        alone = torch.zeros(1, n, 5)
        StepOne(n, "cpu").update(alone, idx, target[m:m + 1])
        assert torch.equal(V[m], alone[0]) and torch.allclose(V[m, idx].sum(0), target[m], atol=1e-4)


# 3e-4 trains the tiny model hard (loss 2.3 → 0.3 in 600 iterations); the `cafe-training` preset's Step III
ROW_SPACE = {"internal_weight": 0.0, "gradient_weight": 1.0, "span_weight": 1.0, "lr": 0.4, "lr_decay": 0.1}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("preset", ["cafe", "cafe-fake-gradients"])
def test_on_a_gpu_the_federations_step_replays_a_cuda_graph_equal_to_the_eager_step(preset):
    """The server's queries (the first eager, then one captured graph replayed) send the gradients an eager
    step computes for each batch, undefended and under fake gradients (which draw no noise per query)."""
    dev = torch.device("cuda")
    obs, *_ = catalog.PROTOCOLS["vfl"].run(dict(from_preset(preset, TINY).params), dev, None)
    session = obs.payload
    for batch in ([0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11], [1, 3, 5, 7, 9, 11], [23, 2, 17, 4, 12, 0]):
        q = session.query(batch)
        sent = [t.clone() for u in q.workers for t in u] + [t.clone() for t in q.top]
        _, uploads, top = session._compute(q.indices)
        assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(sent, [t for u in uploads for t in u] + top))
    assert session._step.graph is not None and session._step.note is None  # captured, and replayed


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("preset", ["cafe", "cafe-fake-gradients", "cafe-training"])
def test_on_a_gpu_each_cafe_iteration_replays_a_cuda_graph_equal_to_the_eager_iteration(preset):
    """The graphed iterations (the first eager, the second captured, then replays) give the eager run's images,
    losses and Step I/II estimates, on a fixed model, under a defense, and with gradient matching and the
    row-space term on a model that trains meanwhile (cafe-training); no capture failed (a failure leaves a note)."""
    dev = torch.device("cuda")
    runs = []
    for graph in (True, False):
        p = dict(from_preset(preset, {**TINY, "iterations": 12}).params)
        assert graphable(p)
        obs, kn, _ = catalog.PROTOCOLS["vfl"].run(p, dev, None)
        runs.append(list(cafe(obs, kn, p, dev, graph=graph)))
    for a, b in zip(*runs):
        assert not (a.note and "CUDA graph" in a.note), a.note
        assert torch.allclose(a.images, b.images, atol=1e-5, rtol=0), a.iteration
        assert torch.allclose(torch.as_tensor(a.loss), torch.as_tensor(b.loss), rtol=1e-4, atol=1e-8), a.iteration
        for key in ("V", "H"):
            assert all(torch.allclose(u, v, atol=1e-5, rtol=1e-4) for u, v in zip(a.internals[key], b.internals[key]))
    assert runs[0][-1].images.std() > 0  # the iterations moved the estimate at all


def test_on_a_training_model_the_row_space_term_recovers_what_steps_one_and_two_cannot():
    training = {"train_lr": 3e-4, "iterations": 600}
    ours = finish(**training, **ROW_SPACE)
    assert ours.metrics["psnr"] > 22, ours.metrics["psnr"]
    loss = ours.metrics["utility"]["while_attacked"]
    assert loss[-1] < loss[0] - 1  # the federation really trained meanwhile
    events = list(Run(from_preset("cafe", {**TINY, **training})).events())  # the paper's Step III: Ĥ went stale
    stale = events[-1]
    assert stale.metrics["psnr"] < ours.metrics["psnr"] - 6, stale.metrics["psnr"]
    notes = [e.note for e in events if isinstance(e, Progress) and e.note]
    assert notes and "row-space term" in notes[0]  # the page tells the user what survives training
    matching_only = finish(**training, **{**ROW_SPACE, "span_weight": 0.0})
    assert matching_only.metrics["psnr"] < ours.metrics["psnr"] - 6, matching_only.metrics["psnr"]


def test_fake_gradients_stop_cafe_while_training_still_descends():
    fin = finish(defense="fake-gradients")  # σ² = 1.1, as in the paper
    assert fin.metrics["psnr"] < 15, fin.metrics["psnr"]
    u = fin.metrics["utility"]
    assert len(u["defended"]) == u["steps"] and "clean" in u
    assert sum(u["defended"][-10:]) / 10 < u["defended"][0] - 0.2  # the model still learns


def test_dlg_attacks_one_batch_and_is_scored_on_it():
    fin = finish(attack="dlg", iterations=5, restarts=0)
    assert len(fin.metrics["sample_ids"]) == 6 and len(fin.metrics["psnr_per_image"]) == 6
    assert len(fin.images) == 6
    # its labels too: scored against all 24 samples' labels, six recovered ones could reach 0.25 at most
    assert fin.metrics["label_accuracy"] >= 0.5, fin.metrics["label_accuracy"]


# ---------------------------------------------------------------- parameters

@pytest.mark.parametrize("over, name", [
    ({"batch_size": 30}, "batch_size"),  # more than the 24 samples
    ({"workers": 3}, "workers"),  # a 1×3 grid does not divide 8 px
    ({"workers": 16, "image_size": 6}, "workers"),  # a 4×4 grid does not divide 6 px
    ({"cafe_loop": "nested", "phase_iterations": 200}, "phase_iterations"),
    ({"span_weight": 1.0, "fc_width": 4}, "span_weight"),  # rank ≤ 4 cannot span a batch of 6
    ({"lr_decay": 0.0}, "lr_decay"),
    ({"fake_sigma": 0.0, "defense": "fake-gradients"}, "fake_sigma"),
    ({"attack": "invgrad"}, "attack"),
    ({"defense": "fake-gradients", "protocol": "fedsgd", "attack": "dlg"}, "defense"),
])
def test_bad_parameters_are_rejected_with_their_name(over, name):
    with pytest.raises(ParamError) as e:
        from_preset("cafe", {**TINY, **over})
    assert str(e.value).startswith(name + ":"), str(e.value)


def test_a_model_that_keeps_training_leaks_less():
    fixed = finish()
    training = finish(train_lr=1e-3)
    assert training.metrics["psnr"] < fixed.metrics["psnr"] - 10  # larger steps blur the equations
    assert "while_attacked" in training.metrics["utility"]


def test_a_training_loss_that_barely_falls_says_it_cannot_show_a_defense_s_cost():
    """cafe-faces' utility chart: 2.306 → 2.199 without a defense (the faces have no identity labels), so every
    defense looked free there; the digits' 2.312 → 0.390 shows a cost, and says nothing."""
    from leakdemo.utility import barely_learns
    flat = [2.306] + [2.2] * 199
    falls = [2.312] + [0.39] * 199
    said = barely_learns({"steps": 200, "lr": 0.1, "defended": flat}, {"data": "faces", "num_classes": 10})
    assert said == ("Without a defense the federation's training loss barely falls in 200 steps (2.306 → 2.200): the "
                    "faces carry no identity labels (face i is class i mod 10), so nothing in a face predicts its "
                    "class; the loss cannot show what a defense costs here (on the digits it can).")
    # judged on the undefended curve: a defense that stalls training is the cost itself, not a flat chart
    assert barely_learns({"steps": 200, "lr": 0.1, "defended": flat, "clean": falls}, {"data": "digits"}) is None
    assert barely_learns({"steps": 200, "lr": 0.1, "defended": falls}, {"data": "digits"}) is None
    assert barely_learns({"defended": [0.5, 0.6]}, {"data": "faces"}) is None  # logit sharing's accuracies
