import pytest

from leakdemo import catalog
from leakdemo.errors import ParamError
from leakdemo.params import Param
from leakdemo.scenario import from_preset, presets, resolve


def test_numbers_are_coerced_and_range_checked():
    p = Param("lr", "float", 0.1, "h", low=1e-4, high=1.0)
    assert p.coerce("0.5") == 0.5
    for bad in ("abc", "nan", "inf", "2", True, None):
        with pytest.raises(ParamError, match=r"^lr: must be a number in \[0.0001, 1\]"):
            p.coerce(bad)


def test_ints_reject_fractions_and_bools():
    p = Param("iterations", "int", 10, "h", low=1, high=100)
    assert p.coerce("7") == 7 and p.coerce(7.0) == 7
    # a whole number written as a float reads alike whether a JSON number or text (a link, --set, a string in
    # a scenario file): "7.0" was refused where 7.0 was taken
    assert p.coerce("7.0") == 7 and p.coerce("1e2") == 100 and p.coerce(" +7 ") == 7
    for bad in ("7.5", 7.5, True, "0", "101", "1e999", "nan", "0x10", "", "1e3"):
        with pytest.raises(ParamError, match="^iterations: must be an integer in"):
            p.coerce(bad)
    # out of range, it says what was written, not a hundred-digit integer
    with pytest.raises(ParamError, match=r"^iterations: must be an integer in \[1, 100\], got 1e99$"):
        p.coerce("1e99")
    with pytest.raises(ParamError, match=r"^iterations: must be an integer in \[1, 100\], got 1e\+99$"):
        p.coerce(1e99)  # a JSON number in a scenario file


def test_choices_and_bools():
    p = Param("loop", "choice", "robust", "h", choices=("robust", "original"))
    with pytest.raises(ParamError, match="one of robust, original"):
        p.coerce("fast")
    assert Param("x", "bool", False, "h").coerce("yes") is True


def test_every_preset_resolves_and_every_default_is_valid():
    assert {"dlg", "idlg", "invgrad", "invgrad-batch"} <= set(presets())
    for name in presets():
        s = from_preset(name)
        for spec in catalog.params_for(s["protocol"], s["attack"], s["defense"]).values():
            spec.coerce(spec.default)
            spec.coerce(s[spec.name])


def test_every_setting_at_its_bounds_is_accepted_or_refused_in_one_line():
    """What the Lab checks before Run is pressed, for each preset with each of its settings (and each defense's)
    at the low and the high end of its range and each other choice: a scenario that runs, or one line naming a
    parameter — never another exception (the sidebar shows the line; a crash would be a traceback). Runs
    themselves at those bounds were tried once by hand (see the README's robustness note); this keeps the
    checks honest as settings are added."""
    from leakdemo.data import check_source

    def values(spec):
        if spec.kind in ("int", "float"):
            return [spec.coerce(spec.low), spec.coerce(spec.high)]
        return [c for c in spec.choices if c != spec.default] if spec.kind == "choice" else \
            [not spec.default] if spec.kind == "bool" else []
    tried = refused = 0
    for name in presets():
        base = from_preset(name)
        overs = [{}] + [{"defense": d} for d in catalog.defenses_for(base["protocol"]) if d != base["defense"]]
        for over in overs:
            s = from_preset(name, over)
            for spec in catalog.params_for(s["protocol"], s["attack"], s["defense"]).values():
                if spec.name in ("preset", "protocol", "attack", "defense", "data", "device"):
                    continue
                for v in values(spec):
                    tried += 1
                    try:
                        check_source(dict(from_preset(name, {**over, spec.name: v}).params))
                    except ParamError as e:
                        refused += 1
                        assert "\n" not in str(e) and str(e).split(":")[0] in catalog.all_param_names() | {
                            "rounds_per_epoch × local_steps × batch_size", "clients × batch_size"}, (name, spec.name, v, e)
    assert tried > 500 and 0 < refused < tried / 4


def test_unknown_and_misplaced_parameters_are_named():
    with pytest.raises(ParamError, match="^foo: unknown parameter"):
        from_preset("dlg", {"foo": 1})
    with pytest.raises(ParamError, match="^dp_sigma: does not apply .* dp-gaussian, dp-laplace"):
        from_preset("dlg", {"dp_sigma": "0.1"})
    with pytest.raises(ParamError, match="^preset: unknown preset 'nope'; available: "):
        from_preset("nope")


@pytest.mark.parametrize("preset,over,fix", [
    ("dlg", {"dp_sigma": "0.1"}, "(it belongs to: dp-gaussian, dp-laplace; set defense=dp-gaussian with it)"),
    # PLI counts its length in inversion epochs: `iterations` was told only that it belongs to 8 other attacks
    ("pli", {"iterations": 5}, "cafe; pli's counterpart is inversion_epochs)"),
    ("dlg", {"inversion_epochs": 5}, "(it belongs to: pli, tbi; dlg's counterpart is iterations)"),
    # FedMD's noise is on the logits: no DP defense applies there, so none is offered
    ("pli", {"dp_sigma": 0.1}, "dp-laplace; on fedmd its counterpart is logit_sigma: set defense=logit-noise with it)"),
    ("pli", {"defense": "logit-noise", "dp_sigma": 0.1}, "dp-laplace; logit-noise's counterpart is logit_sigma)"),
    ("dlg", {"top_k": 3}, "(it belongs to: top-k)"),  # no defense of FedSGD's keeps the top k
])
def test_a_parameter_where_it_does_not_apply_is_pointed_at_what_does(preset, over, fix):
    with pytest.raises(ParamError) as e:
        from_preset(preset, over)
    assert str(e.value).endswith(fix), str(e.value)


def test_an_unknown_name_gets_the_likeliest_meant_one_and_the_names_the_scenario_takes():
    """`--set steps=50` on DLG: its steps are `iterations` (not warmup_steps, which trains the model first)."""
    with pytest.raises(ParamError) as e:
        from_preset("dlg", {"steps": 50})
    said = str(e.value)
    assert said.startswith("steps: unknown parameter (did you mean iterations?); dlg on fedsgd takes: ")
    assert said.split("takes: ")[1].split(", ") == sorted(catalog.params_for("fedsgd", "dlg", "none"))
    with pytest.raises(ParamError, match=r"^iteration: unknown parameter \(did you mean iterations\?\)"):
        from_preset("dlg", {"iteration": 5})
    with pytest.raises(ParamError, match=r"^epoch: unknown parameter \(did you mean inversion_epochs or local_epochs\?\)"):
        from_preset("pli", {"epoch": 3})
    with pytest.raises(ParamError, match=r"^dp_sigm: unknown parameter \(did you mean dp_sigma \(of dp-gaussian"):
        from_preset("dlg", {"dp_sigm": 0.1})  # a defense's name, before that defense is chosen
    with pytest.raises(ParamError, match=r"^noise: unknown parameter \(did you mean dp_sigma \(of dp-gaussian"):
        from_preset("dlg", {"noise": 0.1})  # the papers' word for it
    with pytest.raises(ParamError, match=r"^stps: unknown parameter; `python -m leakdemo list` shows them all$"):
        resolve({"protocol": "nope"}, {"stps": 1})  # no scenario to list the names of


@pytest.mark.parametrize("preset, name, meant", [
    ("dlg", "clip", "dp_clip (of dp-gaussian, dp-laplace)"),  # was: clients
    ("dlg", "max_grad_norm", "dp_clip (of dp-gaussian, dp-laplace)"),  # Opacus's word; was: nothing
    ("dlg", "delta", "dp_delta (of dp-gaussian)"),  # was: data or model
    ("dlg", "noise_sigma", "dp_sigma (of dp-gaussian, dp-laplace)"),  # was: nothing
    ("dlg", "learning_rate", "lr"),
    ("dlg", "sparsity", "prune_ratio (of prune)"),
    ("pli", "sigma", "logit_sigma (of logit-noise)"),  # was: dp_sigma, which no logit protocol takes
    ("pli", "k", "top_k (of top-k)"),  # was: attack
])
def test_the_fields_words_for_a_parameter_get_its_name(preset, name, meant):
    """Papers and Opacus say clip, max_grad_norm, δ, noise σ: each is read as what it means, on this protocol."""
    with pytest.raises(ParamError) as e:
        from_preset(preset, {name: 1})
    assert str(e.value).startswith(f"{name}: unknown parameter (did you mean {meant}?); "), str(e.value)


def test_a_one_letter_name_is_not_offered_every_name_holding_it():
    with pytest.raises(ParamError, match=r"^k: unknown parameter; dlg on fedsgd takes: "):
        from_preset("dlg", {"k": 3})  # was: (did you mean attack?)


def test_switching_attack_drops_the_old_attacks_values():
    s = from_preset("invgrad", {"attack": "dlg"})
    assert s["lr"] == catalog.ATTACKS["dlg"].param("lr").default  # not invgrad's 0.1
    assert s["model"] == "convnet"  # protocol values stay
    assert s.warnings == ()
    s = from_preset("dlg", {"attack": "invgrad"})
    assert any("stalls on the sigmoid LeNet" in w for w in s.warnings)


def test_switching_the_data_source_drops_the_presets_images():
    assert from_preset("dlg")["images"] == "coffee"
    assert from_preset("dlg", {"data": "digits"})["images"] == ""  # coffee is no digit: the seed picks one
    assert from_preset("dlg", {"data": "samples"})["images"] == "coffee"  # the same source keeps them
    assert from_preset("dlg", {"data": "digits", "images": "3"})["images"] == "3"


def test_defense_parameters_follow_the_defense():
    s = from_preset("dlg", {"defense": "dp-gaussian", "dp_sigma": "0.1"})
    assert s["dp_sigma"] == 0.1 and s["dp_clip"] == 0.0
    with pytest.raises(ParamError, match="^prune_ratio: must be a number in"):
        from_preset("dlg", {"defense": "prune", "prune_ratio": "1.5"})


def test_scenario_round_trips_through_json(tmp_path):
    from leakdemo.scenario import from_file
    s = from_preset("dlg", {"seed": "3", "images": "rocket"})
    path = tmp_path / "scenario.json"
    path.write_text(s.to_json())
    again = from_file(str(path))
    assert again.params == s.params and again.preset == "dlg" and not again.warnings
    assert s.diff_from_preset() == {"seed": 3, "images": "rocket"}
    # a newer leakdemo's file is read, and said: its settings may mean more than this one reads in them
    path.write_text(s.to_json().replace("leakdemo-scenario/1", "leakdemo-scenario/2"))
    newer = from_file(str(path))
    assert newer.params == s.params
    assert newer.warnings == ("format: 'leakdemo-scenario/2' is not leakdemo-scenario/1 (what this leakdemo writes "
                              "and reads); the params were read as leakdemo-scenario/1",)


def test_bad_scenario_files_give_one_line(tmp_path):
    from leakdemo.errors import LeakdemoError
    from leakdemo.scenario import from_file
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(LeakdemoError, match="not valid JSON"):
        from_file(str(bad))
    with pytest.raises(LeakdemoError, match="cannot read"):
        from_file(str(tmp_path / "missing.json"))
    bad.write_text("[1, 2]")
    with pytest.raises(LeakdemoError, match="'params' object.*; got a JSON array"):
        from_file(str(bad))
    bad.write_text("[" * 100_000 + "]" * 100_000)  # past the parser's recursion limit: was a RecursionError
    with pytest.raises(LeakdemoError, match="nested too deeply"):
        from_file(str(bad))
    bad.write_bytes(b" " * (2**20 + 1))  # read no further than 1 MB: `run /dev/zero` ran out of memory
    with pytest.raises(LeakdemoError, match="is over 1 MB"):
        from_file(str(bad))
    bad.write_bytes('{"params": {"seed": "ü"}}'.encode("utf-16"))
    with pytest.raises(LeakdemoError, match="is not UTF-8 text"):
        from_file(str(bad))
    bad.write_bytes(b"\xef\xbb\xbf" + b'{"preset": "dlg", "params": {"seed": 3}}')  # Notepad's byte-order mark
    assert from_file(str(bad))["seed"] == 3
    bad.write_text('{"preset": "dlg", "iterations": 50}')  # written by hand, flat: the shape and what it has
    with pytest.raises(LeakdemoError, match=r'\{"preset": NAME, "params": \{NAME: VALUE, …\}\}.*got an object '
                                            r'with keys preset, iterations'):
        from_file(str(bad))


def test_catalog_lists_papers_and_valid_combinations():
    d = catalog.describe()
    assert {a["name"] for a in d["attacks"]} == {"dlg", "idlg", "invgrad", "dlm", "dlm-plus", "agic", "invgrad-fedavg", "cafe", "pli", "tbi"}
    assert all(a["paper"] for a in d["attacks"])
    assert catalog.attacks_for("fedsgd") == ["dlg", "idlg", "invgrad"]
    assert catalog.attacks_for("fedavg") == ["dlm", "dlm-plus", "agic", "invgrad-fedavg"]
    assert catalog.defenses_for("fedavg") == catalog.defenses_for("fedsgd")
    assert catalog.attacks_for("vfl") == ["dlg", "cafe"]
    assert catalog.defenses_for("vfl") == catalog.defenses_for("fedsgd") + ["fake-gradients"]
    for scheme in ("fedmd", "ds-fl", "fedgems"):
        assert catalog.attacks_for(scheme) == ["pli", "tbi"]
        assert catalog.defenses_for(scheme) == ["none", "logit-noise", "logit-rounding", "top-k", "logit-temperature"]
    with pytest.raises(ParamError, match="^protocol: must be one of"):
        resolve({"protocol": "fedprox"})


def test_a_recorded_run_says_what_it_changed_from_its_preset():
    """What `runs list` and Compare show beside a run: the settings a user (or a sweep) changed — not the
    defaults a switched attack or protocol brings, but a defense's strength wherever the preset had none."""
    from leakdemo.scenario import changed_settings

    def changed(preset, **over):
        return changed_settings(from_preset(preset, over).params, preset)
    assert changed("dlg", seed=2, batch_size=4) == {"seed": 2, "batch_size": 4}
    assert changed("dlg", attack="idlg") == {} and changed("dlg", protocol="fedavg", attack="dlm-plus") == {}
    assert changed("dlg", protocol="fedavg", attack="dlm-plus", local_steps=4) == {"local_steps": 4}
    assert changed("dlg", defense="prune") == {"prune_ratio": from_preset("dlg", {"defense": "prune"})["prune_ratio"]}
    assert changed_settings({"seed": 3}, "custom") == {}  # a scenario file's run: no preset to differ from
    # a protocol switched in the Lab brings its own defaults: FedMD from `dlg` listed seventeen "changes" (faces,
    # 40 classes, 5 rounds, …), every one of them FedMD's default, in `runs list` and Compare's picker
    from leakdemo.switch import switch
    lab = switch(from_preset("dlg", {"seed": 3}), "protocol", "fedmd")[0]
    assert changed_settings(lab.params, "dlg") == {"seed": 3}
    lab = switch(switch(lab, "attack", "tbi")[0], "defense", "top-k")[0]
    assert changed_settings(lab.params, "dlg") == {"seed": 3, "top_k": lab["top_k"]}
    assert changed_settings(switch(from_preset("dlg"), "protocol", "vfl")[0].params, "dlg") == {}  # not 16 px, …


def test_a_list_of_images_has_one_spelling():
    """`--set "images=coffee, rocket"` ran as coffee,rocket but was kept as typed: another run in the store than
    the same batch named without the space, and `images=,,` (none named: the seed picks) listed in `runs list`
    as a change from the preset."""
    from leakdemo.scenario import changed_settings
    spaced = from_preset("invgrad", {"images": " coffee , rocket,", "batch_size": 2})
    assert spaced["images"] == "coffee,rocket"
    assert spaced.params == from_preset("invgrad", {"images": "coffee,rocket", "batch_size": 2}).params
    digits = from_preset("dlg", {"data": "digits", "images": ",,"})
    assert digits["images"] == "" and changed_settings(digits.params, "dlg") == {"data": "digits"}


def test_more_named_images_than_the_batch_holds_run_the_first_ones():
    """A batch of four cut to one in the Lab, the small end of a batch-size sweep, a round of eight clients cut
    to two: the batch starts with the named images, takes the first ones and says which it left out — the
    scenario runs instead of being refused until the user unpicks them."""
    from leakdemo.data import check_source, load_batch
    one = from_preset("invgrad-batch", {"batch_size": 1})
    assert one.warnings[0] == ("images: batch_size is 1, so the run takes the first named image (chelsea) and "
                               "leaves out coffee, rocket, astronaut")
    check_source(dict(one.params))  # what the Lab and a sweep check before a run: nothing left to refuse
    assert load_batch(dict(one.params)).names == ["chelsea"]
    two = from_preset("dlg-round", {"clients": 2})
    assert two.warnings[0].startswith("images: clients × batch_size is 2, so the run takes the first 2 named "
                                      "images (coffee, rocket) and leaves out camera, chelsea")
    fedavg = from_preset("dlm-plus", {"images": "coffee,rocket,camera", "local_steps": 2})
    assert "local_steps × batch_size is 2" in fedavg.warnings[0]
    assert not any(w.startswith("images:") for w in from_preset("invgrad-batch").warnings)  # the batch holds them all


def test_a_parameter_set_where_the_scenario_does_not_read_it_is_said(tmp_path):
    """`run dlg --set tv_dataset=SVHN` ran the photos as before without a word, as `--set model_depth=3` on the
    LeNet did: the command line's setting is said to change nothing, and why. Where it is read, nothing is said;
    a scenario file, which holds every value, is not told about the ones it did not set."""
    from leakdemo.data import check_source
    from leakdemo.scenario import load
    s = load("dlg", {"tv_dataset": "SVHN", "model_depth": 3, "iterations": 5})
    assert s.warnings[:2] == (
        "tv_dataset=SVHN changes nothing: it is read only when data=torchvision (here data=samples)",
        "model_depth=3 changes nothing: it is read only when model=resnet or model=mlp (here model=lenet)")
    assert not any("changes nothing" in w for w in load("dlg", {"model": "mlp", "model_depth": 3}).warnings)
    assert load("agic", {"pre_iterations": 50}).warnings[0] == (
        "pre_iterations=50 changes nothing: it is read only when epochs > 1, where AGIC pairs the rounds of several "
        "observed epochs (here epochs=1)")
    assert not any("changes nothing" in w for w in load("agic-multiround", {"pre_iterations": 50}).warnings)
    assert load("cafe", {"lr_step1": 0.5}).warnings[0].endswith(
        "it is read only when solver=sgd, as least squares solves Step I exactly (here solver=least-squares)")
    assert not any("changes nothing" in w for w in load("cafe", {"lr_step1": 0.5, "solver": "sgd"}).warnings)
    assert load("dlm", {"shuffle": False}).warnings[0].startswith("shuffle=False changes nothing")
    assert load("pli-digits", {"num_classes": 20}).warnings[0] == ("num_classes=20 changes nothing: it is read only "
                                                                   "when data=faces, as digits always have 10 classes "
                                                                   "(here data=digits)")
    assert not any("changes nothing" in w for w in load("pli", {"num_classes": 20}).warnings)
    assert not any("changes nothing" in w for w in load("dlg", {"data": "digits", "num_classes": 20}).warnings)
    path = tmp_path / "s.json"
    path.write_text(load("dlg", {"model": "mlp"}).to_json())
    assert not any("changes nothing" in w for w in load(str(path), {"seed": 2}).warnings)
    # a torchvision source is refused before a run starts when it has no folder to read (a sweep's point, the Lab)
    with pytest.raises(ParamError, match="^data_root: empty; give the folder where the torchvision dataset already lies"):
        check_source(dict(from_preset("dlg", {"data": "torchvision"}).params))
    with pytest.raises(ParamError, match="^data_root: '/no/such' is not a readable folder$"):
        check_source(dict(from_preset("dlg", {"data": "torchvision", "data_root": "/no/such"}).params))


def test_the_lenet_gradients_count_is_the_models_own():
    from leakdemo.models import LeNet
    from leakdemo.settings import lenet_equations
    for size, width, classes in ((16, 12, 100), (32, 12, 100), (64, 12, 100), (64, 24, 10), (33, 5, 10)):
        model = LeNet(3, size, classes, width=width)
        conv = sum(p.numel() for name, p in model.named_parameters() if name.startswith("body"))
        p = {"protocol": "fedsgd", "model": "lenet", "model_width": width, "image_size": size, "num_classes": classes,
             "batch_size": 1}
        assert lenet_equations(p) == (conv + model.fc.in_features + classes, 3 * size * size, 1)
        fc_size = model.fc.weight.numel() + model.fc.bias.numel()  # a batch's outer products fill at most the layer
        assert lenet_equations({**p, "batch_size": 1000})[0] == conv + fc_size


def test_the_torch_free_cost_of_a_pass_is_what_torch_counts_for_every_model():
    """settings.forward_macs (the web server's count, without torch) against torch's own FlopCounterMode."""
    import itertools
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from leakdemo.models import build_model
    from leakdemo.settings import MODELS, forward_macs
    for name, width, size, depth in itertools.product(MODELS, (0, 5), (8, 13, 32), (1, 2)):
        model = build_model(name, 3, size, 7, 0, width=width, depth=depth)
        with FlopCounterMode(display=False) as counted:
            model(torch.zeros(1, 3, size, size))
        p = {"protocol": "fedsgd", "model": name, "model_width": width, "image_size": size, "num_classes": 7,
             "model_depth": depth}
        assert forward_macs(p) == counted.get_total_flops() // 2, (name, width, size, depth)
    assert forward_macs({**p, "protocol": "vfl"}) is None  # CAFE's workers have models of their own


def test_the_torch_free_cost_of_a_vertical_fl_pass_is_what_torch_counts():
    """settings.vfl_forward_macs (every worker's bottom model and the top model) against FlopCounterMode."""
    import itertools
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from leakdemo.protocols.vfl import VerticalModel
    from leakdemo.settings import WORKER_MODELS, vfl_forward_macs
    for kind, workers, size, width in itertools.product(WORKER_MODELS, (1, 2, 4, 6), (12, 16, 30), (0, 8)):
        p = {"worker_model": kind, "workers": workers, "image_size": size, "model_width": width, "fc_width": 20,
             "num_classes": 7}
        with FlopCounterMode(display=False) as counted:
            VerticalModel(p)(torch.zeros(1, 3, size, size))
        assert vfl_forward_macs(p) == counted.get_total_flops() // 2, p


def test_the_torch_free_cost_of_the_logit_attacks_networks_is_what_torch_counts():
    """settings.inverter_macs (PLI's and TBI's inversion network) and logit_classifier_macs (a client's model)
    against torch's FlopCounterMode."""
    import itertools
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from leakdemo.attacks.pli import Inverter
    from leakdemo.protocols.distillation import classifier
    from leakdemo.settings import inverter_macs, logit_classifier_macs
    for inputs, size, width in itertools.product((20, 80), (8, 16, 32, 64), (4, 32)):
        with FlopCounterMode(display=False) as counted:
            Inverter(inputs, size, width).eval()(torch.zeros(1, 1, inputs))
        assert inverter_macs(inputs, size, width) == counted.get_total_flops() // 2, (inputs, size, width)
    for size, width, data in itertools.product((8, 16, 32, 64), (1, 16), ("faces", "digits")):
        p = {"image_size": size, "model_width": width, "data": data, "num_classes": 40}
        with FlopCounterMode(display=False) as counted:
            classifier(10 if data == "digits" else 40, size, width, torch.Generator())(torch.zeros(1, 1, size, size))
        assert logit_classifier_macs(p) == counted.get_total_flops() // 2, p


def test_the_torch_free_count_of_a_logit_federation_s_images_is_what_it_deals():
    from leakdemo import identities
    from leakdemo.settings import identity_split
    for overrides in ({}, {"views": 7, "clients": 3, "target_classes": 7}, {"data": "digits", "target_classes": 4}):
        p = from_preset("pli", {"image_size": 8, **overrides}).params
        data = identities.build(p)
        split = identity_split(p)
        assert split["clean"] == len(data.public_clean[1]) and split["public"] == len(data.public[1]), overrides
        assert split["private"] == max(len(y) for _, y in data.private), overrides


def test_a_pli_run_too_slow_for_a_cpu_is_said_before_it_with_what_fits():
    """`pli` at inversion_epochs=500 trained for about 15 minutes on 2 cores with no word before it (the cost notes
    counted gradient attacks and CAFE only)."""
    def said(preset="pli", **overrides):
        return " ".join(w for w in from_preset(preset, {"device": "cpu", **overrides}).warnings
                        if w.startswith("A slow setting"))
    assert not any(said(name) for name in presets() if name.startswith("pli"))
    assert not said(rounds=20) and not said(inversion_width=128)  # 1.3 and 1.8 min measured
    big = said(inversion_epochs=500)
    assert big.startswith("A slow setting for a CPU: PLI's inversion network and TBI's train for 5 rounds × 500 "
                          "epochs on the public images of 32 px, about 14 min on 2 CPU cores"), big
    assert big.endswith("under 10 minutes on a CPU: inversion_epochs ≤ 360 or compare_tbi=false or "
                        "inversion_width ≤ 16 or image_size=16"), big
    for remedy in ({"inversion_epochs": 360}, {"compare_tbi": False}, {"inversion_width": 16}, {"image_size": 16}):
        assert not said(**{"inversion_epochs": 500, **remedy}), remedy
    assert said("pli-10-clients", rounds=20, inversion_epochs=20).startswith("A slow setting for a CPU: PLI's 10 "
                                                                            "inversion networks and TBI's train")
    assert said(attack="tbi", inversion_epochs=500, inversion_width=64).startswith(
        "A slow setting for a CPU: TBI's inversion network trains for 5 rounds × 500 epochs")
    assert not from_preset("pli", {"device": "cuda", "inversion_epochs": 500}).warnings  # a GPU's run: not said


def test_a_cafe_run_too_slow_for_a_cpu_is_said_before_it_with_what_fits():
    """`cafe` at image_size=128 drew a frame every 0.8 s and finished after about 27 minutes on 2 cores, with no
    word before it (the model-size warning counts only FedSGD's and FedAvg's models)."""
    def said(preset="cafe", **overrides):
        return " ".join(w for w in from_preset(preset, {"device": "cpu", **overrides}).warnings
                        if w.startswith("A slow setting"))
    assert not any(said(name) for name in presets() if name.startswith("cafe"))
    big = said(image_size=128)
    assert "each CAFE iteration, on a batch of 40 images of 128 px, takes about 0.8 s on 2 CPU cores, so 2000 " \
           "iterations and the training-loss check after them take about 27 min" in big, big
    assert big.endswith("under 10 minutes on a CPU: image_size ≤ 76 or iterations ≤ 690"), big
    assert not said(image_size=76) and not said(image_size=128, iterations=690)
    assert said(iterations=100000).endswith("iterations ≤ 28000")  # 21 ms each at 16 px
    assert said(worker_model="cafe", image_size=64).endswith("or worker_model=slim")


def test_a_model_too_large_for_a_cpu_is_said_before_the_run_with_what_fits():
    def said(preset, **overrides):
        return " ".join(w for w in from_preset(preset, {"device": "cpu", **overrides}).warnings
                        if w.startswith("A large model"))
    assert not any(said(name) for name in presets())  # every preset runs on 2 cores
    huge = said("dlg", model="resnet", model_width=256, image_size=128)  # 'Iteration 0 / 300' for minutes
    assert "ResNet (model_width=256) over a 128 px image takes 49.5 G multiply-adds" in huge
    assert "300 L-BFGS steps of up to 20 evaluations ~12–39 h" in huge  # 15.5 s a step measured on LeNet w256
    assert huge.endswith("under 10 minutes on a CPU: model_width ≤ 30 or image_size ≤ 14")
    assert not said("dlg", model="resnet", model_width=30, image_size=128)
    assert not said("dlg", model="resnet", model_width=256, image_size=14)
    adam = said("invgrad", model="resnet", model_width=256, image_size=128)  # one evaluation per Adam step
    assert "1000 steps ~2–6 h" in adam and "such passes" not in adam
    assert "(8 such passes)" in said("invgrad-batch-8", model="resnet", model_width=64, image_size=64)
    assert not said("invgrad", model="resnet", model_width=64, image_size=64)  # 2–6 min: not said


def test_a_gradient_with_too_few_numbers_for_its_pixels_is_said_before_the_run():
    def note(preset, **overrides):
        return " ".join(w for w in from_preset(preset, overrides).warnings if "equations" in w)
    assert not any(note(name) for name in presets())  # every preset's gradient pins its images down
    big = note("dlg", image_size=64)
    assert big.startswith("Fewer equations than unknowns (0.92 per unknown): many images give the same gradient")
    assert "about 11,308 numbers for the 12,288 pixel values of its image" in big
    assert big.endswith("Two per unknown: model_width=20 or more")  # 40 dB there (measured)
    assert not note("dlg", image_size=64, model_width=20)
    two = note("dlg", batch_size=2)
    assert two.startswith("Few equations for the unknowns (1.61 per unknown).")
    assert two.endswith("model_width=14 or more or at most 1 image per gradient (batch_size)")
    averaged = note("dlg-round", secure_aggregation=True)  # 8 one-image clients averaged: 1 image is not a round
    assert "of its 8 images" in averaged and averaged.endswith("model_width=26 or more")
    steps = note("dlm-plus", local_steps=5)  # 0.81: said, but a wider model is not offered (13 dB at 2.00)
    assert "update of the LeNet" in steps and steps.endswith("Two per unknown: at most 1 image per update "
                                                             "(local_steps × batch_size)")
    assert not note("dlm-plus", local_steps=2)  # 1.61: several steps need more than the count, so not said
    assert not note("invgrad", image_size=64)  # a ConvNet's gradient holds far more


def test_a_sending_temperature_below_one_is_refused():
    """Flattened logits at a temperature below 1 sharpened them — the opposite of the defense, and its clients'
    accuracy fell from 0.60 to 0.20 on pli-digits — and a sweep's first range began there."""
    with pytest.raises(ParamError, match=r"^send_temperature: must be a number in \[1, 1000\], got 0.5"):
        from_preset("pli-digits", {"defense": "logit-temperature", "send_temperature": 0.5})
    assert from_preset("pli-digits", {"defense": "logit-temperature", "send_temperature": 1})["send_temperature"] == 1
