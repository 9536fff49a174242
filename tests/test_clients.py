"""A FedSGD round of several clients, each gradient seen apart: DLG and iDLG attack every client at once, one
start each, as one vectorised program (issue 14's trials over different photos)."""
import pytest
import torch

from leakdemo import catalog
from leakdemo.attacks.lbfgs import BatchedLBFGS
from leakdemo.attacks.racing import _objective, client_gradients_loss, shared_gradient_loss
from leakdemo.errors import ParamError
from leakdemo.runner import Run
from leakdemo.scenario import from_preset
from leakdemo.store import scenario_key
from leakdemo.threat import Observation


def _round(clients: int, **over):
    sc = from_preset("dlg", {"image_size": 16, "seed": 2, "clients": clients, **over})
    return catalog.PROTOCOLS["fedsgd"].run(dict(sc.params), torch.device("cpu"))


def test_each_client_sends_its_own_gradient_the_first_as_a_round_of_one():
    obs, kn, truth = _round(3)
    one, _, truth_one = _round(1)
    assert obs.context["clients"] == 3 and len(obs.payload) == 3 and len(truth.images) == 3
    assert all(torch.equal(a, b) for a, b in zip(obs.payload[0], one.payload))  # client 1 is the round of one
    assert not torch.allclose(obs.payload[0][-1], obs.payload[1][-1])  # the others sent their own photos
    assert torch.equal(truth.images[0], truth_one.images[0])
    assert any("which of the round's 3 clients" in f for f in kn.facts)


@pytest.mark.parametrize("fixed_labels", [False, True], ids=["dlg", "idlg"])
def test_each_client_of_a_round_takes_the_steps_it_takes_attacked_alone(fixed_labels):
    obs, kn, truth = _round(3)
    # in double precision, as the racing tests: float32's summation orders differ between a batch and one
    kn.model.double()
    obs.payload = [[t.double() for t in sent] for sent in obs.payload]
    cpu, shape = torch.device("cpu"), (1, *kn.input_shape)
    labels = truth.labels.view(3, 1)
    hard = labels if fixed_labels else None
    loss, cases = client_gradients_loss(obs, kn, cpu)
    together_f = _objective(loss, hard, shape, kn.num_classes, (), cases)
    starts = 0.5 + 0.1 * torch.randn(3, 3 * 16 * 16, generator=torch.Generator().manual_seed(1))
    if not fixed_labels:  # the attack's start: a confident logit on the label the gradient gives
        starts = torch.cat([starts, 5.0 * torch.nn.functional.one_hot(labels[:, 0], kn.num_classes)], dim=1)
    starts = starts.double()
    together = BatchedLBFGS(together_f, starts, lr=1.0)
    for _ in range(3):
        together.step()
    for i in range(3):
        alone_obs = Observation("gradients", obs.payload[i], "", {"batch_size": 1})
        alone_f = _objective(shared_gradient_loss(alone_obs, kn, cpu), labels[i] if fixed_labels else None, shape,
                             kn.num_classes, ())
        v_alone, g_alone = alone_f(starts[i:i + 1])
        v_all, g_all = together_f(starts)
        assert torch.allclose(v_alone[0], v_all[i], atol=1e-10, rtol=0)
        assert torch.allclose(g_alone[0], g_all[i], atol=1e-10, rtol=0)
        # the trajectory: client i's case alone through the same program. A batch of 3 and one sum in other
        # orders (3e-15 apart per evaluation); DLG's L-BFGS amplifies that ~50× a step, to 1e-7 after three
        one_case = _objective(loss, labels[i:i + 1] if fixed_labels else None, shape, kn.num_classes, (),
                              tuple(c[i:i + 1] for c in cases))
        alone = BatchedLBFGS(one_case, starts[i:i + 1], lr=1.0)
        for _ in range(3):
            alone.step()
        assert torch.allclose(alone.z[0], together.z[i], atol=1e-6), (i, (alone.z[0] - together.z[i]).abs().max())


@pytest.mark.parametrize("attack", ["dlg", "idlg"])
def test_every_client_of_a_round_is_reconstructed(attack):
    run = Run(from_preset(attack, {"image_size": 16, "iterations": 60, "clients": 3, "compile": "off",
                                   "images": "coffee,rocket,camera"}))
    events = list(run.events())
    started, fin = events[0], events[-1]
    assert len(started.originals) == 3
    assert fin.status == "finished" and len(fin.images) == 3
    assert min(fin.metrics["psnr_per_image"]) > 30, fin.metrics["psnr_per_image"]
    assert fin.metrics["label_accuracy"] == 1.0
    assert "each of the 3 clients" in fin.metrics["note"]


@pytest.mark.parametrize("extra, says", [
    ({"attack": "invgrad"}, "only DLG and iDLG"),
    ({"trials": 2}, "use trials=1"),
    ({"loop": "original"}, "loop=robust"),
    ({"clients": 0}, "[1, 256]"),
    ({"clients": 24}, "at most 23"),
])
def test_a_round_of_clients_refuses_what_it_cannot_do(extra, says):
    with pytest.raises(ParamError) as e:
        sc = from_preset("dlg", {"clients": 3, **extra})
        catalog.PROTOCOLS["fedsgd"].run(dict(sc.params), torch.device("cpu"))
    assert says in str(e.value), str(e.value)
    assert "clients" in str(e.value)


def test_a_round_of_one_keeps_the_key_its_runs_were_recorded_under():
    """`clients` and `secure_aggregation` came after the gallery was recorded: at 1 and off a FedSGD scenario's
    key is what it was."""
    params = dict(from_preset("dlg").params)
    before = {k: v for k, v in params.items() if k not in ("clients", "secure_aggregation")}
    assert scenario_key(params, "cpu") == scenario_key(before, "cpu")
    assert scenario_key({**params, "clients": 2}, "cpu") != scenario_key(before, "cpu")
    assert scenario_key({**params, "secure_aggregation": False}, "cpu") == scenario_key(before, "cpu")


def test_many_clients_warn_what_a_cpu_will_take():
    said = " ".join(from_preset("dlg", {"clients": 64, "device": "cpu"}).warnings)
    assert "clients=64" in said and "built for a GPU" in said and "~13 min" in said  # 64 × 40 ms × 300 steps
    assert not from_preset("idlg", {"clients": 8}).warnings
    assert said_of({"clients": 20, "iterations": 5}).endswith("5 steps take ~4 s")  # it said "~0 min"


def said_of(over: dict) -> str:
    return " ".join(from_preset("dlg", {"device": "cpu", **over}).warnings)


def test_a_round_of_clients_is_named_where_runs_are_listed():
    assert catalog.headline(dict(from_preset("dlg-round").params)) == "DLG on FedSGD, 8 clients"
    assert catalog.headline(dict(from_preset("dlg").params)) == "DLG on FedSGD"


def test_bench_says_how_many_of_a_round_s_photos_came_back(monkeypatch, capsys):
    from leakdemo import cli
    monkeypatch.setenv("LEAKDEMO_STORE", "off")
    assert cli.main(["bench", "dlg", "--set", "clients=2", "--set", "image_size=16", "--set", "iterations=40",
                     "--set", "compile=off"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("dlg"))
    assert "2/2 images ≥ 30 dB, lowest " in row, row


def test_secure_aggregation_shows_the_server_one_batch_of_the_whole_round():
    """The average of three one-image gradients is the gradient of the three images as one batch: what the
    server learns under secure aggregation, with nothing to say which client sent what."""
    obs, kn, truth = _round(3, secure_aggregation=True, images="coffee,rocket,camera")
    batch, kn_batch, truth_batch = _round(1, batch_size=3, images="coffee,rocket,camera")
    assert obs.context == {"batch_size": 3} and kn.batch_size == 3
    assert all(torch.allclose(a, b, atol=1e-6, rtol=1e-4) for a, b in zip(obs.payload, batch.payload))
    assert torch.equal(truth.images, truth_batch.images)
    assert any("only the average of the round's 3 gradients" in f for f in kn.facts)
    assert not any("which of the round's" in f for f in kn.facts)


def test_secure_aggregation_takes_any_fedsgd_attack_and_needs_several_clients():
    assert from_preset("invgrad", {"clients": 3, "secure_aggregation": True})["clients"] == 3
    with pytest.raises(ParamError) as e:
        from_preset("dlg", {"secure_aggregation": True})
    assert str(e.value).startswith("secure_aggregation: needs clients ≥ 2"), str(e.value)
    assert catalog.headline({"attack": "dlg", "protocol": "fedsgd", "clients": 4, "secure_aggregation": True}) == \
        "DLG on FedSGD, 4 clients, secure aggregation"
    averaged = from_preset("dlg", {"clients": 64, "secure_aggregation": True}).warnings  # one batch: no per-client cost
    assert not any("built for a GPU" in w for w in averaged)
