"""The Attack Lab through streamlit.testing.v1.AppTest: widgets, validation, query-string loading."""
import threading

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from leakdemo.dashboard import state
from leakdemo.scenario import from_preset, resolve


def lab(**query) -> AppTest:
    at = AppTest.from_file("../app.py", default_timeout=120)
    for k, v in query.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, at.exception
    return at


def widget(at, label):
    for kind in ("selectbox", "number_input", "multiselect", "text_input", "toggle"):
        for w in getattr(at.sidebar, kind):
            if w.label == label:
                return w
    raise KeyError(label)


def test_a_shared_link_loads_its_scenario():
    at = lab(preset="dlg", images="rocket", seed="3")
    assert widget(at, "Preset").value == "dlg"
    assert widget(at, "Images (the batch starts with these)").value == ["rocket"]
    assert widget(at, "Seed").value == 3
    assert [b.label for b in at.button][:2] == ["Run attack", "Stop"]
    assert not at.button[0].disabled and at.button[1].disabled
    assert "Threat model" in " ".join(m.value for m in at.markdown)
    assert dict(at.query_params) == {"preset": "dlg", "images": "rocket", "seed": "3"}
    scenario = next(c.value for c in at.caption if c.value.startswith("Scenario:"))
    assert "preset **dlg**, DLG on LeNet, 1 private image, 32×32 px, seed 3." in scenario  # not "on lenet"


def test_bad_link_values_fall_back_and_are_reported():
    at = lab(preset="dlg", lr="banana", iterations="-4", attack="nope", images="coffee")
    text = " ".join(w.value for w in at.warning)
    assert "lr: must be a number" in text and "iterations: must be an integer" in text and "attack:" in text
    assert widget(at, "Learning rate").value == 1.0 and widget(at, "Iterations").value == 300
    assert dict(at.query_params) == {"preset": "dlg"}  # the URL now holds only what is valid
    at.run()  # a fresh page's next full rerun (its thumbnails ready) wiped the message a second after it showed
    assert "lr: must be a number" in " ".join(w.value for w in at.warning)
    widget(at, "Iterations").set_value(200).run()  # the user's own setting: the link's message has served
    assert not [w.value for w in at.warning if w.value.startswith("Ignored from the link")]


def test_an_unknown_name_in_a_link_gets_the_likeliest_meant_one_without_the_clis_list():
    at = lab(preset="dlg", steps="50")
    said = [w.value for w in at.warning if w.value.startswith("Ignored from the link")]
    assert said == ["Ignored from the link: steps: unknown parameter (did you mean iterations?)."], said  # no
    # default: the scenario has no `steps` to fall back
    assert widget(at, "Iterations").value == 300


def test_a_value_given_twice_in_a_link_is_ambiguous_and_said():
    """`?seed=1&seed=2` ran seed 2 without a word (Streamlit keeps a key's last value); `--set` twice with
    different values is refused on the command line. Here the key falls back to its default, and the page says
    why; the same value twice is not ambiguous."""
    at = lab(preset="dlg", seed=["1", "2"], iterations=["50", "50"], bogus=["1", "2"])
    said = [w.value for w in at.warning if w.value.startswith("Ignored from the link")]
    assert said == ["Ignored from the link: seed (given 2 times: '1' and '2'). Using the default instead.",
                    "Ignored from the link: bogus (given 2 times: '1' and '2')."], said  # no default of bogus's
    assert widget(at, "Seed").value == 0 and widget(at, "Iterations").value == 50


def test_an_unknown_photo_in_a_link_is_reported_not_dropped_in_silence():
    at = lab(preset="dlg", images="coffee,nope")
    assert any(w.value.startswith("Ignored from the link: images: unknown samples item 'nope'") for w in at.warning)
    assert widget(at, "Images (the batch starts with these)").value == ["coffee"]  # the preset's photo


def test_unknown_preset_in_link_is_reported():
    at = lab(preset="zzz")
    assert any("preset='zzz'" in w.value for w in at.warning)
    assert widget(at, "Preset").value == "dlg"


def test_choosing_an_attack_offers_its_parameters_and_updates_the_url():
    at = lab(preset="dlg")
    widget(at, "Attack").set_value("invgrad").run()
    assert not at.exception
    assert widget(at, "Total-variation weight").value == 0.01
    assert widget(at, "Learning rate").value == 0.1  # invgrad's own default, not DLG's
    assert any("stalls on the sigmoid LeNet" in w.value for w in at.warning)  # known-bad pair explained
    assert at.query_params["attack"] == "invgrad"


def test_defense_parameters_appear_with_the_defense():
    at = lab(preset="dlg")
    widget(at, "Defense").set_value("dp-gaussian").run()
    assert widget(at, "Noise σ").value == 0.01
    widget(at, "Noise σ").set_value(0.1).run()
    assert at.query_params["dp_sigma"] == "0.1" and at.query_params["defense"] == "dp-gaussian"
    # the threat card and the scenario line name the defense and its strength, in words, not its code
    text = " ".join(m.value for m in at.markdown)
    assert ("batch of 1 image, after the client's defense: Gaussian noise (noise σ = 0.1, clip norm off)."
            in text and "dp-gaussian" not in text), text
    scenario = next(c.value for c in at.caption if c.value.startswith("Scenario:"))
    assert "DLG on LeNet, against Gaussian noise (noise σ = 0.1, clip norm off), 1 private image" in scenario


def test_the_scenario_line_names_a_defense_as_a_sentence_does():
    """It read 'DLG on LeNet, against Magnitude pruning (…)', 'against Top-k only (k = 1)': the sidebar's
    capitalised titles in mid-sentence. Gauss and Laplace keep their capitals."""
    for query, words in (({"preset": "dlg", "defense": "prune"}, ", against magnitude pruning (pruned fraction = 0.5)"),
                         ({"preset": "pli", "defense": "top-k"}, ", against top-k only (k = 1), "),
                         ({"preset": "cafe", "defense": "fake-gradients"}, ", against fake gradients (fake σ = "),
                         ({"preset": "dlg", "defense": "dp-laplace"}, ", against Laplace noise (noise scale b = ")):
        scenario = next(c.value for c in lab(**query).caption if c.value.startswith("Scenario:"))
        assert words in scenario, scenario


def test_widgets_bound_their_values():
    at = lab(preset="dlg")
    w = widget(at, "Iterations")
    assert (w.min, w.max) == (1, 5000)
    assert widget(at, "Batch size").max == 64


def test_preset_switch_loads_the_preset():
    at = lab(preset="dlg")
    widget(at, "Preset").set_value("invgrad-batch").run()
    assert widget(at, "Batch size").value == 4
    assert widget(at, "Model").value == "convnet"


def test_the_browser_s_back_returns_to_the_scenario_before():
    """Each change of the sidebar writes the scenario into the link, a history entry; Back met a link that the
    sidebar's scenario wrote straight over (`?preset=dlg`, then idlg: Back stayed on idlg, and a second press left
    the app). A link the page did not write, met on the page itself, now brings back what it stood for."""
    at = lab(preset="dlg")
    widget(at, "Preset").set_value("idlg").run()
    widget(at, "Iterations").set_value(40).run()
    assert dict(at.query_params) == {"preset": "idlg", "iterations": "40"}

    def back_to(**link):  # what the browser's Back or Forward sends: the link of another history entry
        at.query_params.clear()
        at.query_params.update(link)
        at.run()
        assert not at.exception, at.exception
        return widget(at, "Preset").value, widget(at, "Iterations").value, dict(at.query_params)

    assert back_to(preset="idlg") == ("idlg", 300, {"preset": "idlg"})
    assert back_to(preset="dlg") == ("dlg", 300, {"preset": "dlg"})
    assert back_to(preset="idlg", iterations="40") == ("idlg", 40, {"preset": "idlg", "iterations": "40"})  # Forward
    # the link as the page last wrote it is no step: a later run keeps what the sidebar says
    widget(at, "Iterations").set_value(50).run()
    assert widget(at, "Iterations").value == 50 and at.query_params["iterations"] == "50"


def test_choices_read_as_names_while_links_keep_the_codes():
    """A class reads "LeNet" and "Photos (scikit-image)" in the sidebar, not "lenet" and "samples"; the link
    and the CLI keep the codes, and the help names them."""
    at = lab(preset="dlg")
    model = widget(at, "Model")
    assert model.options == ["LeNet", "MLP", "ConvNet", "ResNet"] and model.value == "lenet"
    assert "`model`, one of lenet, mlp, convnet, resnet" in model.help
    assert widget(at, "Source").options[0] == "Photos (scikit-image)"
    assert widget(at, "Compile the objective").options == ["Auto", "On", "Off"]
    model.set_value("convnet").run()
    assert at.query_params["model"] == "convnet"
    widget(at, "Protocol").set_value("vfl").run()
    assert widget(at, "Worker model").options == ["Slim CNN (fast)", "CAFE's CNN", "Fully connected"]


def test_state_round_trip_is_minimal():
    s = from_preset("invgrad", {"seed": 5})
    assert state.to_query(s) == {"preset": "invgrad", "seed": "5"}
    again, ignored = state.from_query(state.to_query(s))
    assert again.params == s.params and ignored == []


def test_a_defenses_link_names_only_what_differs_from_its_defaults():
    """A defense the preset lacks wrote each of its values out: the Lab's address bar read
    `?preset=dlg&defense=dp-gaussian&dp_sigma=0.01&dp_clip=0.0&dp_delta=1e-05` for the sidebar's one choice."""
    plain = from_preset("dlg", {"defense": "dp-gaussian"})
    assert state.to_query(plain) == {"preset": "dlg", "defense": "dp-gaussian"}
    stronger = from_preset("cafe", {"defense": "dp-gaussian", "dp_sigma": 0.1})
    assert state.to_query(stronger) == {"preset": "cafe", "defense": "dp-gaussian", "dp_sigma": "0.1"}
    for s in (plain, stronger, from_preset("pli", {"defense": "top-k"}), from_preset("agic", {"defense": "prune"})):
        again, ignored = state.from_query(state.to_query(s))
        assert again.params == s.params and ignored == []


def test_a_link_to_a_switched_protocol_brings_the_same_scenario_back():
    # the Lab keeps the preset's name when the protocol changes, so its link names dlg with DLM on FedAvg,
    # PLI on FedMD...; each value alone does not fit the preset's protocol, together they do
    for protocol in ("fedavg", "vfl", "fedmd", "ds-fl", "fedgems"):
        s, notes = state.switch(from_preset("dlg", {"seed": 3}), "protocol", protocol)
        assert notes == []
        again, ignored = state.from_query(state.to_query(s))
        assert ignored == [] and again.params == s.params, protocol
    again, ignored = state.from_query({**state.to_query(s), "rounds": "0"})  # one bad value: only it is dropped
    assert again["protocol"] == "fedgems" and again["rounds"] == s["rounds"] and ignored[0].text.startswith("rounds:")
    assert ignored[0].replaced  # the preset's rounds stand in: the page says "Using the default instead"


def test_a_switch_to_a_protocol_that_refuses_a_kept_value_takes_its_default_and_says_so():
    """8-px images on FedSGD, then FedGEMS (16 px at least): the list said FedGEMS, the attack stayed DLG, and
    two errors stood beside Run ("image_size: must be 16, 32 or 64 on FedGEMS", "attack: dlg does not apply to
    protocol fedgems"). The switch now finishes, with the image size back at FedGEMS's default."""
    at = lab(preset="dlg")
    widget(at, "Image size (px)").set_value(8).run()
    widget(at, "Protocol").set_value("fedgems").run()
    assert not at.exception, at.exception
    assert (widget(at, "Attack").value, widget(at, "Image size (px)").value) == ("pli", 32)
    assert not at.error and not at.button[0].disabled
    note = " ".join(i.value for i in at.info)
    assert note.startswith("Switched protocol to FedGEMS. image_size is back at its default, 32 — 8 is refused "
                           "there: must be 16, 32 or 64 on FedGEMS"), note
    assert "got 8" not in note, note  # the refused value is said once, first


def test_a_new_source_of_data_brings_values_that_fit_it_and_says_so():
    """PLI's 10 private classes of 40 faces, switched to the ten digits: "target_classes: must be below the number
    of classes (10)" stood beside a greyed Run until lowered by hand. The switch takes the value the preset made
    for digits gives (pli-digits: 5), and says so; what that then refuses goes back to its default. CAFE's 200
    samples on the 100 faces likewise."""
    at = lab(preset="pli")
    widget(at, "Source").set_value("digits").run()
    assert not at.exception and not at.error and not at.button[0].disabled
    assert widget(at, "Private target classes").value == 5
    classes = widget(at, "Classes J")  # the faces' identities: digits have 10, whatever it says
    assert classes.disabled and "read only when data=faces, as digits always have 10 classes" in classes.help
    note = " ".join(i.value for i in at.info)
    assert note.startswith("Switched data to Digits (scikit-learn). target_classes is now 5, as preset pli-digits "
                           "has it — 10 is refused there: must be below the number of classes (10)"), note
    at = lab(preset="pli-10-clients")
    widget(at, "Source").set_value("digits").run()
    assert not at.error and widget(at, "Clients").value == 1
    assert "clients is back at its default, 1 — 10 is refused there: each client holds at least one target " \
           "class: at most target_classes (5)." in " ".join(i.value for i in at.info)
    widget(at, "Source").set_value("faces").run()  # nothing refused: nothing changed, nothing said
    assert widget(at, "Private target classes").value == 5 and "Switched data" not in " ".join(i.value for i in at.info)
    assert not widget(at, "Classes J").disabled
    at = lab(preset="cafe")  # what only the data says: 200 samples, of the 100 faces
    widget(at, "Source").set_value("faces").run()
    assert not at.error and widget(at, "Training samples N").value == 100
    said = "Switched data to Faces (LFW). n_samples is now 100, as preset cafe-faces has it — 200 is refused " \
           "there: must be at most 100 for data=faces."
    assert said in " ".join(i.value for i in at.info)


def test_a_defense_the_new_protocol_lacks_is_said_to_be_dropped():
    """Gaussian noise on DLG, then FedMD: the defense went to "No defense" without a word, and PLI's 90 % read
    as a result that holds under noise. The note says so, and names the new protocol's own defenses."""
    at = lab(preset="dlg")
    widget(at, "Defense").set_value("dp-gaussian").run()
    widget(at, "Protocol").set_value("fedmd").run()
    assert not at.exception and widget(at, "Defense").value == "none"
    note = " ".join(i.value for i in at.info)
    assert "Switched protocol to FedMD. Gaussian noise does not apply to FedMD, so no defense now (its own: Noise on " \
           "logits, Rounded logits, Top-k only, Flattened logits)." in note, note
    widget(at, "Protocol").set_value("fedsgd").run()  # nothing dropped: no note
    assert "does not apply" not in " ".join(i.value for i in at.info)
    widget(at, "Defense").set_value("prune").run()
    widget(at, "Protocol").set_value("fedavg").run()  # a defense both take stays, unsaid
    assert widget(at, "Defense").value == "prune" and "does not apply" not in " ".join(i.value for i in at.info)


def test_old_choices_the_browser_sends_back_with_a_timer_tick_are_not_taken(monkeypatch):
    """While the run panel polls (a run going, a fresh server's first minute), its timer's tick carries every
    widget's value as the browser shows it — before the browser has drawn what a switch set. Streamlit took them
    for the user's: a preset switched from dlg to invgrad during a run went to DLG and back (1 in 4 tries in
    Chromium), and after Gaussian noise and a switch to FedMD the tick's "Gaussian noise (DP-style)", no FedMD
    choice, left "defense: must be one of …" beside Run. In a fragment's run such values are put back to what
    the page last drew, and no callback acts on them."""
    from leakdemo.dashboard import shared
    at = lab(preset="dlg")
    at.selectbox(key="preset").set_value("invgrad").run()
    drawn = {k: widget(at, k).value for k in ("Attack", "Iterations", "Learning rate")}
    assert drawn == {"Attack": "invgrad", "Iterations": 1000, "Learning rate": 0.1}
    monkeypatch.setattr(shared, "_fragment_run", lambda: True)  # the tick, with the browser's values from before
    widget(at, "Attack").set_value("dlg")
    widget(at, "Iterations").set_value(300)
    widget(at, "Learning rate").set_value(1.0)
    at.selectbox(key="preset").set_value("dlg")
    at.run()
    monkeypatch.setattr(shared, "_fragment_run", lambda: False)
    at.run()  # the next full run (a run ending, the engine settling) draws what the session holds
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert {k: widget(at, k).value for k in drawn} == drawn and at.selectbox(key="preset").value == "invgrad"
    widget(at, "Attack").set_value("dlg").run()  # the user's own choice is a full run: taken
    assert widget(at, "Attack").value == "dlg"


def test_a_note_stays_until_the_settings_change():
    """A switch's note ("Gaussian noise does not apply to FedMD …") was popped by the next run: the full rerun
    that follows as a fresh server's engine settles or a run ends took it away a second or two after it came."""
    at = lab(preset="dlg")
    widget(at, "Defense").set_value("dp-gaussian").run()
    widget(at, "Protocol").set_value("fedmd").run()
    said = "Switched protocol to FedMD. Gaussian noise does not apply to FedMD"
    for _ in range(2):  # a rerun that changes nothing keeps it
        assert said in " ".join(i.value for i in at.info)
        at.run()
    widget(at, "Rounds").set_value(3).run()  # a setting changed: the note spoke of the settings before
    assert said not in " ".join(i.value for i in at.info)


def test_too_few_uploads_for_the_new_protocol_say_how_to_run():
    """One photo uploaded, then Protocol → vertical FL: beside a greyed Run stood "n_samples: needs 200 images but
    1 are uploaded", which said neither what to change nor that the upload held the built-in digits back."""
    at = lab(preset="dlg")
    at.session_state["kept_uploads"] = [("cat.png", np.full((32, 32, 3), 0.5, dtype=np.float32))]  # as the box
    widget(at, "Batch size").set_value(4).run()  # left it when the page was left
    assert at.button[0].disabled
    assert [e.value for e in at.error] == ["batch_size: needs 4 images, but only 1 is uploaded — upload 3 more, "
                                           "set batch_size to 1, or remove the uploads to run on the built-in data"]
    widget(at, "Protocol").set_value("vfl").run()
    assert at.button[0].disabled  # N cannot go to 1 (nor under the batch of 40): not offered
    assert [e.value for e in at.error] == ["n_samples: needs 200 images, but only 1 is uploaded — upload 199 more, "
                                           "or remove the uploads to run on the built-in data"]
    at.button(key="forget_uploads").click().run()
    assert not at.error and not at.button[0].disabled


def test_a_hand_typed_link_naming_an_attack_of_another_protocol_gets_that_protocol():
    # `?attack=cafe` on the default preset (DLG on FedSGD) was ignored — "cafe does not apply to protocol fedsgd"
    # — and `?protocol=fedmd&attack=tbi` lost both, since dlg's photos are no FedMD data
    for query, protocol in (({"attack": "cafe"}, "vfl"), ({"attack": "pli"}, "fedmd"), ({"attack": "agic"}, "fedavg"),
                            ({"preset": "cafe", "attack": "tbi"}, "fedmd"), ({"preset": "dlm", "attack": "idlg"}, "fedsgd"),
                            ({"protocol": "fedmd", "attack": "tbi"}, "fedmd"),
                            ({"protocol": "ds-fl", "attack": "tbi", "rounds": "3"}, "ds-fl"),
                            ({"preset": "cafe", "protocol": "fedgems", "attack": "tbi"}, "fedgems")):
        s, ignored = state.from_query(query)
        assert ignored == [] and (s["protocol"], s["attack"]) == (protocol, query["attack"]), (query, ignored)
        preset = from_preset(query.get("preset", "dlg"))
        switched = state.switch(state.switch(preset, "protocol", protocol)[0], "attack", query["attack"])[0]
        extra = {k: int(v) for k, v in query.items() if k not in ("preset", "protocol", "attack")}  # rounds=3
        assert s.params == {**switched.params, **extra}  # the sidebar's two clicks, whether the link names the protocol
        assert state.from_query(state.to_query(s))[0].params == s.params
    # written as the sidebar's choice: the protocol, which brings its own attack
    assert state.to_query(state.from_query({"attack": "cafe"})[0]) == {"preset": "dlg", "protocol": "vfl"}
    s, ignored = state.from_query({"attack": "invgrad"})  # one of the preset's protocol's: no switch
    assert ignored == [] and s["protocol"] == "fedsgd"


def test_a_link_naming_a_protocol_or_defense_as_its_preset_says_which_preset_to_take():
    # `?preset=ds-fl` was "unknown" beside the list of presets, none of which is on DS-FL
    for query, said in (({"preset": "ds-fl"}, "ds-fl is a protocol that no preset has: start from pli and set "
                                              "protocol=ds-fl; available: agic, "),
                        ({"preset": "vfl"}, "vfl is a protocol: its presets are cafe, cafe-faces, "
                                            "cafe-fake-gradients, cafe-training; available: agic, "),
                        ({"preset": "prune"}, "prune is a defense that no preset has: start from dlg and set "
                                              "defense=prune; available: agic, ")):
        s, ignored = state.from_query(query)
        assert len(ignored) == 1 and ignored[0].text.startswith(f"preset={query['preset']!r} (unknown: {said}"), ignored
        assert s.preset == "dlg"  # the default, as for any unknown preset
    _, ignored = state.from_query({"preset": "nope"})
    assert ignored[0].text.startswith("preset='nope' (unknown; available: agic, "), ignored
    _, ignored = state.from_query({"preset": "dgl"})  # a typo: the one meant, as `run dgl` says it
    assert ignored[0].text.startswith("preset='dgl' (unknown: did you mean dlg or dlm?; available: agic, "), ignored


def test_a_hand_typed_link_naming_only_a_protocol_switches_to_it_as_the_sidebar_does():
    # `?preset=dlg&protocol=fedmd`: DLG cannot attack FedMD; the link was ignored with a note, the page on DLG
    for protocol, attack, name in (("fedavg", "dlm", "iterations"), ("fedmd", "pli", "rounds"), ("ds-fl", "pli", "rounds")):
        s, ignored = state.from_query({"preset": "dlg", "protocol": protocol, name: "3"})
        assert ignored == [] and (s["protocol"], s["attack"], s[name]) == (protocol, attack, 3)
        switched, _ = state.switch(from_preset("dlg"), "protocol", protocol)  # the link's value on top of it
        assert s.params == {**switched.params, name: 3}
    s, ignored = state.from_query({"preset": "dlg", "protocol": "fedavg", "attack": "dlg"})  # named: still said
    assert [i.text[:48] for i in ignored] == ["attack: dlg does not apply to protocol fedavg; a"]
    assert (s["protocol"], s["attack"]) == ("fedavg", "dlm")  # the protocol stands, with its own attack
    at = lab(preset="dlg", protocol="fedmd")
    assert widget(at, "Attack").value == "pli" and not at.warning
    scenario = next(c.value for c in at.caption if c.value.startswith("Scenario:"))  # not "preset dlg, PLI on …"
    assert scenario.startswith("Scenario: PLI on FedMD, ") and ", started from preset **dlg**. " in scenario, scenario
    # and so the Lab's own link for a switched protocol stays that short, not the twenty values it brings
    assert dict(at.query_params) == {"preset": "dlg", "protocol": "fedmd"}
    tbi = state.switch(state.switch(from_preset("dlg"), "protocol", "ds-fl")[0], "attack", "tbi")[0]
    # a named attack too: the preset's photos are refused there, so the link reads as the two clicks did
    assert state.to_query(tbi) == {"preset": "dlg", "protocol": "ds-fl", "attack": "tbi"}

def test_a_hand_typed_link_naming_a_defense_of_another_protocol_gets_that_protocol():
    """`?defense=top-k` was ignored ("top-k does not apply to protocol fedsgd …") and opened undefended DLG; it
    now opens on the first protocol top-k defends, as picking that protocol and then the defense would."""
    for query, protocol, attack in (({"defense": "top-k"}, "fedmd", "pli"),
                                    ({"defense": "fake-gradients"}, "vfl", "cafe"),
                                    ({"defense": "logit-noise", "attack": "tbi"}, "fedmd", "tbi")):
        s, ignored = state.from_query(query)
        assert ignored == [] and (s["protocol"], s["attack"], s["defense"]) == (protocol, attack, query["defense"])
        switched = state.switch(from_preset("dlg"), "protocol", protocol)[0]
        for name in ("attack", "defense"):  # the sidebar's clicks
            switched = state.switch(switched, name, s[name])[0]
        assert s.params == switched.params, query
        assert state.from_query(state.to_query(s))[0].params == s.params
    s, ignored = state.from_query({"attack": "cafe", "defense": "top-k"})  # no protocol takes both: the attack's
    assert (s["protocol"], s["attack"], s["defense"]) == ("vfl", "cafe", "none")
    assert "top-k defends fedmd, ds-fl, fedgems" in ignored[0].text


def test_a_link_naming_another_protocol_opens_that_protocols_scenario_as_the_sidebar_does():
    """`?protocol=vfl` opened DLG on the preset's one coffee photo — vertical FL takes photos too — where choosing
    vertical FL in the sidebar gives CAFE on 200 digits; and `?protocol=vfl&attack=cafe` ran CAFE on that photo."""
    for query in ({"protocol": "vfl"}, {"protocol": "vfl", "attack": "cafe"}, {"preset": "idlg", "protocol": "vfl"}):
        s, ignored = state.from_query(query)
        assert ignored == [] and s.params == state.switch(from_preset(query.get("preset", "dlg")), "protocol",
                                                          "vfl")[0].params, query
        assert (s["attack"], s["data"], s["batch_size"]) == ("cafe", "digits", 40)


def test_a_hand_typed_link_naming_another_source_of_data_fits_it_as_the_sidebar_does():
    """`?preset=pli&data=digits` dropped the digits ("Ignored from the link: data=digits (target_classes: must be
    below the number of classes (10) …)") and opened PLI on the faces; picking digits in the sidebar gives
    pli-digits' 5 private classes. `?preset=cafe&data=faces` kept 200 samples of the 100 faces beside a greyed
    Run. A link now gets what the Source box gives, and the page says what changed besides."""
    for preset, data, label in (("pli", "digits", "Private target classes"), ("pli-10-clients", "digits", "Clients"),
                                ("cafe", "faces", "Training samples N")):
        clicked = lab(preset=preset)
        widget(clicked, "Source").set_value(data).run()
        typed = lab(preset=preset, data=data)
        assert not typed.warning and not typed.error and not typed.button[0].disabled, (preset, typed.warning)
        assert widget(typed, label).value == widget(clicked, label).value, (preset, label)
        assert widget(typed, "Source").value == data
        said = " ".join(i.value for i in typed.info)
        assert said.startswith("The link's data is ") and said.split(": ", 1)[1] in " ".join(
            i.value for i in clicked.info), said  # what the switch said, word for word
        assert state.from_query(state.to_query(state.from_query({"preset": preset, "data": data})[0]))[1] == []
    typed = lab(preset="pli", data="digits", target_classes="3")  # the link's own value stands over the fit
    assert widget(typed, "Private target classes").value == 3 and not typed.warning and not typed.info[:-1]
    assert not any(i.value.startswith("The link's data") for i in typed.info)  # "target_classes is now 5" was not so
    assert not any(i.value.startswith("The link's data") for i in lab(preset="dlg", data="digits").info)


def test_a_switched_protocols_link_keeps_a_value_set_back_to_the_presets():
    """On cafe-training, switch to FedSGD (DLG, learning rate 1.0), then set the learning rate to 0.4, the preset's:
    the link left lr out (it equals the preset's) and reopened at 1.0. One such scenario in three came back changed."""
    s = state.switch(from_preset("cafe-training"), "protocol", "fedsgd")[0]
    assert s["lr"] != from_preset("cafe-training")["lr"]
    s = resolve(s.params, {"lr": str(from_preset("cafe-training")["lr"])}, preset="cafe-training")
    again, ignored = state.from_query(state.to_query(s))
    assert ignored == [] and again.params == s.params


def test_uploads_are_validated():
    import io

    from PIL import Image

    from leakdemo.data import decode_upload
    from leakdemo.errors import LeakdemoError
    buf = io.BytesIO()
    Image.fromarray(np.zeros((10, 12, 3), dtype=np.uint8)).save(buf, format="PNG")
    assert decode_upload("a.png", buf.getvalue()).shape == (10, 12, 3)
    with pytest.raises(LeakdemoError, match="not a readable image"):
        decode_upload("b.png", b"garbage")
    gif = io.BytesIO()
    Image.fromarray(np.zeros((4, 4, 3), dtype=np.uint8)).save(gif, format="GIF")
    with pytest.raises(LeakdemoError, match="only PNG, JPEG and WebP"):
        decode_upload("c.gif", gif.getvalue())
    big = io.BytesIO()
    Image.new("L", (5000, 10)).save(big, format="PNG")
    with pytest.raises(LeakdemoError, match="too large"):
        decode_upload("d.png", big.getvalue())
    with pytest.raises(LeakdemoError, match="over the 10 MB limit"):
        decode_upload("e.png", b"0" * (11 * 2**20))


def _png(image) -> bytes:
    import io
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def test_hostile_uploads_are_refused_with_a_message_naming_the_file():
    from PIL import Image

    from leakdemo.data import decode_upload
    from leakdemo.errors import LeakdemoError
    ok = _png(Image.fromarray(np.full((64, 64, 3), 100, dtype=np.uint8)))
    frames = [Image.fromarray(np.full((16, 16, 3), 50 * i, dtype=np.uint8)) for i in range(3)]
    anim = __import__("io").BytesIO()
    frames[0].save(anim, format="PNG", save_all=True, append_images=frames[1:])
    bomb = _png(Image.new("L", (20000, 20000), 7))  # ~430 KB of a single colour
    assert len(bomb) < 1_000_000
    cases = {"empty.png": (b"", "the file is empty"),
             "notes.png": (b"just text, renamed\n" * 20, "not a readable image"),
             "cut.png": (ok[: len(ok) // 2], "not a readable image"),
             "bomb.png": (bomb, "too large"),
             "anim.png": (anim.getvalue(), "animated images are not accepted")}
    for name, (data, message) in cases.items():
        with pytest.raises(LeakdemoError, match=message) as e:
            decode_upload(name, data)
        assert str(e.value).startswith(name + ":")


def test_sixteen_bit_uploads_are_scaled_not_clipped():
    from PIL import Image

    from leakdemo.data import decode_upload
    ramp = np.linspace(0, 65535, 64 * 64).reshape(64, 64).astype(np.uint16)
    rgb = decode_upload("ramp16.png", _png(Image.fromarray(ramp)))
    assert rgb.shape == (64, 64, 3) and rgb.dtype == np.uint8
    assert rgb.min() == 0 and rgb.max() == 255 and 120 < rgb[32, 32, 0] < 136  # mid-grey in the middle


def test_fedavg_threat_card_says_who_knows_the_learning_rate():
    at = lab(preset="dlg")
    widget(at, "Protocol").set_value("fedavg").run()
    assert not at.exception, at.exception
    assert widget(at, "Local learning rate η").value == 0.01
    widget(at, "Attack").set_value("agic").run()
    text = " ".join(m.value for m in at.markdown)
    assert "model weights before and after" in text and "known to this attack" in text
    # counts in the right number: not "each of 1 round(s) … mini-batches of 1 image(s)"
    assert ("before and after its one round of local training (one SGD step on mini-batches of 1 image, "
            "1 private image in all)") in text
    widget(at, "Attack").set_value("dlm").run()
    text = " ".join(m.value for m in at.markdown)
    assert "**not** known to this attack" in text
    assert widget(at, "Start of k (≈ 1/η)").value == 1.0


def test_vertical_fl_offers_cafe_and_checks_the_tiles_in_the_sidebar():
    at = lab(preset="dlg")
    widget(at, "Protocol").set_value("vfl").run()
    assert not at.exception, at.exception
    assert widget(at, "Attack").value == "cafe"  # the protocol's own attack, with its own data and sizes
    assert widget(at, "Source").value == "digits" and widget(at, "Batch size").value == 40
    assert widget(at, "Internal-representation weight γ").value == 1.0
    text = " ".join(m.value for m in at.markdown)
    assert "sample indices it chooses itself" in text and "Batch indices" in text
    knobs = next(c.value for c in at.caption if "Protocol knobs that defend" in c.value)
    assert knobs.endswith("Protocol knobs that defend: Batch size = 40, Training learning rate = 0")  # not batch_size
    widget(at, "Workers").set_value(3).run()  # a 1×3 grid of tiles cannot cut 16 px images
    assert any(e.value.startswith("workers: 3 workers cut the image into a 1×3 grid") for e in at.error)
    assert at.button[0].disabled
    widget(at, "Defense").set_value("fake-gradients").run()
    assert widget(at, "Fake σ").value == 1.05


def test_secure_aggregation_is_greyed_with_one_client_yet_left_on_stays_at_hand_to_turn_off():
    """One client: the average of one gradient is that gradient, so the switch is greyed out and says why. Left on
    as the clients go down to 1 (refused, Run blocked), it must stay switchable: greyed out, it left Run blocked."""
    at = lab(preset="dlg")
    switch = widget(at, "Secure aggregation")
    assert switch.disabled and "read only when clients ≥ 2" in switch.help
    widget(at, "Clients in the round").set_value(2).run()
    assert not widget(at, "Secure aggregation").disabled
    widget(at, "Secure aggregation").set_value(True).run()
    widget(at, "Clients in the round").set_value(1).run()
    assert any(e.value.startswith("secure_aggregation: needs clients ≥ 2") for e in at.error) and at.button[0].disabled
    assert not widget(at, "Secure aggregation").disabled
    widget(at, "Secure aggregation").set_value(False).run()
    assert not at.error and not at.button[0].disabled and not widget(at, "Secure aggregation").value
    assert widget(at, "Secure aggregation").disabled  # greyed out at once, not at the next click


def test_a_setting_the_scenario_does_not_read_is_greyed_and_says_why():
    """AGIC's pre-reconstruction runs only over several observed epochs, and the model depth is read by the ResNet
    and the MLP alone: the sidebar offered both on one epoch of a ConvNet, and moving them changed nothing."""
    at = lab(preset="agic")
    pre, depth = widget(at, "Pre iterations"), widget(at, "Model depth")
    assert pre.disabled and "**Changes nothing now:** it is read only when epochs > 1" in pre.help
    assert depth.disabled and "read only when model=resnet or model=mlp (here model=convnet)" in depth.help
    assert not widget(at, "Iterations").disabled and "Changes nothing" not in widget(at, "Iterations").help
    widget(at, "Epochs").set_value(2).run()  # read from the widgets of this rerun, not the last scenario's
    widget(at, "Model").set_value("resnet").run()
    assert not at.exception, at.exception
    assert not widget(at, "Pre iterations").disabled and not widget(at, "Model depth").disabled


def test_a_batch_larger_than_the_source_is_refused_before_run():
    at = lab(preset="dlg")
    widget(at, "Batch size").set_value(30).run()  # 30 > the 23 photos scikit-image ships
    assert any(e.value == "batch_size: must be at most 23 for data=samples, got 30" for e in at.error)
    assert at.button[0].disabled
    assert not any("Press **Run attack**" in i.value for i in at.info)  # not while Run is greyed
    widget(at, "Source").set_value("digits").run()  # 1797 digits: plenty
    assert not at.error and not at.button[0].disabled
    assert any("Press **Run attack**" in i.value for i in at.info)
    widget(at, "Images (indices, comma-separated)").set_value("12, 5000").run()
    assert any(e.value.startswith("images: unknown digits item '5000'; available: 0 to 1796") for e in at.error)
    assert at.button[0].disabled


def test_a_round_of_clients_takes_one_photo_per_client_and_says_so():
    at = lab(preset="dlg", clients="3", images="coffee,rocket,camera")
    assert not [w.value for w in at.warning if w.value.startswith("Ignored from the link")]  # 3 photos for 3 clients
    assert widget(at, "Images (the batch starts with these)").value == ["coffee", "rocket", "camera"]
    scenario = next(c.value for c in at.caption if c.value.startswith("Scenario:"))
    assert "DLG on LeNet, 3 clients with 1 private image each" in scenario
    card = " ".join(m.value for m in at.markdown)
    assert "from each of 3 clients, apart" in card and "Secure aggregation would show it only their sum" in card
    assert any("Secure aggregation off" in c.value for c in at.caption)  # the protocol's knobs that defend
    assert not at.button[0].disabled
    widget(at, "Clients in the round").set_value(30).run()  # 30 photos wanted, scikit-image ships 23
    assert any(e.value == "clients × batch_size: must be at most 23 for data=samples, got 30" for e in at.error)
    assert at.button[0].disabled
    widget(at, "Clients in the round").set_value(2).run()
    widget(at, "Attack").set_value("invgrad").run()  # Inverting Gradients takes one client's gradient: back to 1
    assert widget(at, "Clients in the round").value == 1 and not at.error and not at.button[0].disabled
    assert any(i.value.startswith("Switched attack to Inverting Gradients. clients is back at its default, 1 — 2 is refused "
                                  "there: only DLG and iDLG attack every client") and "got" not in i.value
               for i in at.info)


def test_link_values_that_only_fit_together_are_all_accepted():
    s, ignored = state.from_query({"preset": "cafe", "n_samples": "24", "batch_size": "6"})
    assert ignored == [] and s["n_samples"] == 24 and s["batch_size"] == 6
    s, ignored = state.from_query({"preset": "cafe", "n_samples": "24"})  # batch 40 > 24: reported
    # as the value the link gave and the page dropped, the preset's rule it broke as the reason: it read
    # "Ignored from the link: batch_size: … Using the default instead.", as if batch_size had been dropped
    assert s["n_samples"] == 200 and s["batch_size"] == 40
    assert ignored == [state.Ignored("n_samples=24 (batch_size: must be at most n_samples (24), got 40)")]
    # the link's own value that its data refuses: that value goes, the data stays (with pli-digits' 5 classes,
    # as the Source box fits them; the test of links naming another source)
    s, ignored = state.from_query({"preset": "pli", "data": "digits", "target_classes": "10"})
    assert (s["data"], s["target_classes"]) == ("digits", 5) and [i.text for i in ignored] == [
        "target_classes: must be below the number of classes (10) so the public set keeps clean identities to learn "
        "from; got 10"]


def test_logit_sharing_offers_pli_and_checks_its_data_in_the_sidebar():
    at = lab(preset="dlg")
    widget(at, "Protocol").set_value("fedmd").run()
    assert not at.exception, at.exception
    assert widget(at, "Attack").value == "pli" and widget(at, "Source").value == "faces"
    assert widget(at, "Temperature τ").value == 3.0 and widget(at, "Prior weight γ").value == 0.03
    with pytest.raises(KeyError):  # the federation's data is built, not picked
        widget(at, "Images (indices, comma-separated)")
    text = " ".join(m.value for m in at.markdown)
    assert "No gradients, no weights" in text and "logits of 1 client on" in text
    widget(at, "Private target classes").set_value(40).run()  # every class private: nothing clean to learn from
    assert any(e.value.startswith("target_classes: must be below the number of classes (40)") for e in at.error)
    assert at.button[0].disabled
    widget(at, "Private target classes").set_value(10).run()
    widget(at, "Protocol").set_value("ds-fl").run()
    widget(at, "Prior").set_value("restored").run()  # DS-FL has no public labels to restore per class
    assert any(e.value.startswith("prior: restored needs the public labels") for e in at.error)
    widget(at, "Prior").set_value("auto").run()
    widget(at, "Defense").set_value("top-k").run()
    assert widget(at, "k").value == 1 and not at.error
    assert any("PLI on DS-FL, 1 client sharing logits" in c.value for c in at.caption)  # not FedMD's odds


def test_the_page_draws_before_the_gallery_thumbnails_and_shows_them_when_ready(monkeypatch):
    """Encoding the built-in photos' thumbnails takes seconds on a fresh server: the page must not wait."""
    from leakdemo.dashboard import lab as lab_page
    gate = threading.Event()
    encode = lab_page.Gallery._encode
    monkeypatch.setattr(lab_page.Gallery, "_encode", lambda self, pool: (gate.wait(60), encode(self, pool)))
    lab_page._gallery.clear()  # a fresh server
    try:
        at = lab(preset="dlg")
        assert not at.button[0].disabled  # Run attack is there, the thumbnails are not
        assert any("Preparing the thumbnails" in c.value for c in at.sidebar.caption)
        assert not at.sidebar.get("image")
        gate.set()
        assert lab_page._gallery().ready.wait(60)
        at.run()
        shown = at.sidebar.get("image")
        assert len(shown) == 2  # the gallery in its expander, and the chosen photo under the list
        assert not any("Preparing the thumbnails" in c.value for c in at.sidebar.caption)
    finally:
        gate.set()
        lab_page._gallery.clear()


def test_the_sidebar_shows_every_photo_the_run_will_take():
    """invgrad-fedavg's client holds 4 photos and names one (chelsea): the sidebar showed chelsea alone. Its
    thumbnails are now the batch the run loads — the named photo, then the seed's picks — and a new seed
    picks others."""
    from leakdemo.dashboard import lab as lab_page
    from leakdemo.data import load_batch
    assert lab_page._gallery().ready.wait(120)
    at = lab(preset="invgrad-fedavg")

    def thumbnails():
        [under_the_list] = at.sidebar.get("image")[1:]  # after the gallery's expander
        return [im.caption for im in under_the_list.proto.imgs]
    p = from_preset("invgrad-fedavg").params
    ran = load_batch(p, count=4).keys
    assert thumbnails() == ran and ran[0] == "chelsea" and len(set(ran)) == 4
    assert any(c.value == "The seed (0) picked 3 more — name photos above to choose them." for c in at.sidebar.caption)
    widget(at, "Seed").set_value(5).run()
    assert thumbnails()[0] == "chelsea" and thumbnails() == load_batch({**p, "seed": 5}, count=4).keys != ran
    widget(at, "Images (the batch starts with these)").set_value(["coffee", "rocket", "camera", "moon"]).run()
    assert thumbnails() == ["coffee", "rocket", "camera", "moon"]
    assert not any("picked" in c.value for c in at.sidebar.caption)  # all named: nothing left to the seed


def test_digits_faces_and_a_folder_show_the_images_the_run_will_take(tmp_path):
    """The digits, the faces and a folder's files were named blind — by index, by file name — and first seen
    in the run: the sidebar shows them as the photos are shown, named as the run names them."""
    from PIL import Image

    from leakdemo.data import load_batch, load_item

    def shown(at):
        [pictures] = at.sidebar.get("image")
        return [im.caption for im in pictures.proto.imgs]
    at = lab(preset="dlg", data="digits", batch_size="3", images="5")
    p = {**from_preset("dlg").params, "data": "digits", "batch_size": 3, "images": "5"}
    keys = load_batch(p, count=3).keys
    assert keys[0] == "5" and shown(at) == [load_item("digits", k, p)[2] for k in keys]
    assert shown(at)[0] == "digit 5 #5"
    assert any(c.value == "The seed (0) picked 2 more — name images above to choose them." for c in at.sidebar.caption)
    for name, colour in (("a/red.png", (255, 0, 0)), ("b/blue.png", (0, 0, 255))):
        (tmp_path / name).parent.mkdir()
        Image.new("RGB", (20, 20), colour).save(tmp_path / name)
    at = lab(preset="dlg", data="folder", folder=str(tmp_path), batch_size="2", images="b/blue.png")
    assert shown(at) == ["b/blue.png", "a/red.png"]
    at = lab(preset="dlg", data="folder", folder=str(tmp_path / "missing"))
    assert not at.sidebar.get("image")  # the run panel says what is wrong; no pictures of nothing


def test_a_bad_server_setting_shows_in_the_sidebar():
    from leakdemo.dashboard import pool
    pool.CONFIG_PROBLEMS.append("LEAKDEMO_MAX_RUNS: must be an integer in [1, 64], got 'many'; using 2")
    try:
        at = lab(preset="dlg")
        assert [w.value for w in at.sidebar.warning] == pool.CONFIG_PROBLEMS
    finally:
        pool.CONFIG_PROBLEMS.pop()


def test_a_run_lists_its_notes_once_not_every_restart():
    from leakdemo.dashboard.lab import shown_notes
    stalls = [f"stalled at loss 0.00{i} — restarting from a new random start ({i}/3)" for i in range(1, 4)]
    assert shown_notes(["compiled the objective in 2.0 s"] + stalls) == ["compiled the objective in 2.0 s", stalls[-1]]
    kinds = ["compiled", "the model keeps training", "stalled"]
    assert shown_notes(kinds) == kinds  # distinct notes keep their order
    assert shown_notes(kinds + ["queued again at the same place"]) == kinds[1:] + ["queued again at the same place"]
    # done, the run's summary says how its starts ended ("gave up after 4 starts"); "… restarting (3/3)"
    # under it read as if the attack went on
    assert shown_notes(["compiled the objective in 2.0 s"] + stalls, done=True) == ["compiled the objective in 2.0 s"]


def _stage_page(status: str):
    """The Lab's run view for a PLI run in its third communication round, or finished (AppTest.from_function)."""
    from types import SimpleNamespace

    from leakdemo.dashboard.lab import run_view
    from leakdemo.dashboard.pool import RunHandle
    from leakdemo.scenario import from_preset
    h = RunHandle(scenario=from_preset("pli-digits"), status=status, seq=1)
    h.latest = SimpleNamespace(iteration=23, total=50, seconds=2.0, eta=2.3,
                               stage="round 3 of 5: new logits arrived, training on them")
    h.notes = ["compiled the objective in 2.0 s"]
    if status == "finished":
        h.finished = SimpleNamespace(iterations=50, seconds=4.6, metrics={})
    run_view(h)


def _finished_dlg_page(status: str):
    """The Lab's run view for a DLG run that finished or was stopped, with its scored history."""
    from types import SimpleNamespace

    from leakdemo.dashboard.lab import run_view
    from leakdemo.dashboard.pool import RunHandle
    from leakdemo.scenario import from_preset
    h = RunHandle(scenario=from_preset("dlg"), status=status, seq=1)
    history = {"iteration": [0, 40, 62, 300], "seconds": [0.0, 1.2, 3.1, 22.0], "psnr": [7.0, 22.0, 30.4, 41.0]}
    h.finished = SimpleNamespace(iterations=300, seconds=22.4, metrics={}, history=history)
    run_view(h)


def test_the_lab_says_when_the_photo_came_back():
    """'Finished after 300 iterations in 22.4 s.' said how long the attack ran, not when the photo was back — the
    figure a class remembers, and the one that tells a fast attack from a slow one that ends as well."""
    said = AppTest.from_function(_finished_dlg_page, args=("finished",), default_timeout=60).run().success[0].value
    assert said.startswith("**Finished** after 300 iterations in 22.4 s. Recognisable (20 dB) after 1.2 s, "
                           "recovered (30 dB) after 3.1 s (iteration 62)."), said


def _long_run_page(handle):
    from leakdemo.dashboard.lab import run_view
    run_view(handle)


def test_a_long_run_s_times_read_in_minutes():
    """A run of 25 minutes read "751.4 s · about 754 s left" and, finished, "Time 1503.4 s": figures a class
    divides by 60 in the head. Past 90 s they read in minutes, as the cost warnings word them; the figure in its
    fifth of a row in round minutes ("25 min 3 s" did not fit there at 1024 px)."""
    import dataclasses

    from leakdemo.dashboard.pool import RunHandle
    from leakdemo.events import Finished, Progress, Started
    from leakdemo.runner import Run
    from leakdemo.scenario import from_preset
    s = from_preset("dlg", {"image_size": 16, "iterations": 3, "restarts": 0})
    h = RunHandle(scenario=s, status="running", seq=1)
    for ev in Run(s).events():  # a real run of 3 steps, retimed as one of 300 taking 25 minutes
        if isinstance(ev, Started):
            h.started = ev
        elif isinstance(ev, Progress):
            h.latest = dataclasses.replace(ev, iteration=150, total=300, seconds=751.4, eta=754.0)
        elif isinstance(ev, Finished):
            history = {"iteration": [0, 100, 180, 300], "seconds": [0.0, 120.0, 905.0, 1503.4],
                       "psnr": [7.0, 22.0, 30.4, 41.0]}
            finished = dataclasses.replace(ev, iterations=300, seconds=1503.4, history=history)
    at = AppTest.from_function(_long_run_page, args=(h,), default_timeout=60).run()
    text = at.get("progress")[0].proto.text
    assert not at.exception and text == "Iteration 150 / 300 · 12 min 31 s · about 13 min left", text
    h.status, h.finished = "finished", finished
    at = AppTest.from_function(_long_run_page, args=(h,), default_timeout=60).run()
    assert not at.exception and {m.label: m.value for m in at.metric}["Time"] == "25 min"  # the sentence has it all
    said = at.success[0].value
    assert said.startswith("**Finished** after 300 iterations in 25 min 3 s. Recognisable (20 dB) after 2 min, "
                           "recovered (30 dB) after 15 min 5 s (iteration 180)."), said


def _setting_up_page(preset: str, over: dict):
    from leakdemo.dashboard.lab import run_view
    from leakdemo.dashboard.pool import RunHandle
    from leakdemo.scenario import from_preset
    import time
    # started 30 s ago (RunPool._start sets the clock): the line counts the wait, no event arriving meanwhile
    run_view(RunHandle(scenario=from_preset(preset, over), status="running", seq=1, clock_at=time.monotonic() - 30))


@pytest.mark.parametrize("preset,over,says", [
    ("pli-10-clients", {}, "the federation runs its 5 rounds — 10 clients train and share logits on the public images"),
    ("dlg", {"warmup_steps": 500}, "the model is first trained for 500 steps on other images, then the client "
                                   "computes its gradient"),
    ("dlm-plus", {}, "the client trains on its private data and sends its new weights"),
    # one of each, in the singular ("its 1 rounds", "for 1 steps" before)
    ("pli", {"rounds": 1}, "the federation runs its 1 round — the client trains and shares"),
    ("dlg", {"warmup_steps": 1}, "the model is first trained for 1 step on other images"),
])
def test_the_set_up_says_what_it_waits_for(preset, over, says):
    """A ten-client federation's rounds take ~30 s before PLI's first frame, under "Setting up: the client
    computes its update…" — which no federation of logits does."""
    at = AppTest.from_function(_setting_up_page, args=(preset, over), default_timeout=60).run()
    text = at.get("progress")[0].proto.text
    assert not at.exception and says in text and text.endswith("… · 30 s"), text


def _finished_page(over: dict, artifacts: dict | None = None, settling: bool = False):
    """The Lab's run view for a real, finished DLG run (a few steps on a 16-px photo); with `artifacts`, its files
    ready, drawn by a tick that hands over to a full rerun (`settling`) or by the run that settles the page."""
    from leakdemo.dashboard.lab import run_view
    from leakdemo.dashboard.pool import RunHandle
    from leakdemo.events import Finished, Progress, Started
    from leakdemo.runner import Run
    from leakdemo.scenario import from_preset
    s = from_preset("dlg", {"image_size": 16, "iterations": 3, "restarts": 0, **over})
    h = RunHandle(scenario=s, status="finished", seq=1)
    for ev in Run(s).events():
        if isinstance(ev, Started):
            h.started = ev
        elif isinstance(ev, Progress):
            h.latest = ev
        elif isinstance(ev, Finished):
            h.finished = ev
    h.artifacts = artifacts or {}
    run_view(h, settling)


def test_the_downloads_appear_only_once_the_page_has_settled():
    """The tick that first saw a run's files drew their buttons and asked for a full rerun in the same breath;
    a button pressed in that moment could name a file the rerun revoked (or meet a button being replaced): nothing
    downloaded (the browser test's scenario.json, twice in the suite's runs). Now that tick says the files are
    coming, and the full run draws the buttons, which nothing redraws until the page changes again."""
    def buttons(settling):
        files = {"scenario.json": b"{}", "metrics.json": b"{}"}
        at = AppTest.from_function(_finished_page, args=({}, files, settling), default_timeout=60).run()
        assert not at.exception, at.exception
        return [b.proto.label for b in at.get("download_button")], [c.value for c in at.caption]
    labels, captions = buttons(True)
    assert labels == [] and "Preparing the downloads…" in captions, (labels, captions)
    labels, captions = buttons(False)
    assert labels == ["scenario.json", "metrics.json"] and "Preparing the downloads…" not in captions


def test_a_defended_run_says_its_formal_privacy_under_its_figures():
    """The CLI printed ε (or why there is none) for a defended run; the Lab, whose users pick the defense,
    did not: now the same line sits under the figures — and nothing for an undefended run."""
    def privacy_lines(over):
        at = AppTest.from_function(_finished_page, args=(over,), default_timeout=120).run()
        assert not at.exception, at.exception
        assert {m.label for m in at.metric} >= {"PSNR", "SSIM", "LPIPS"}
        return [c.value for c in at.caption if "Formal privacy" in c.value]

    clipped = privacy_lines({"defense": "dp-gaussian", "dp_sigma": 1.0, "dp_clip": 4.0})
    assert len(clipped) == 1 and "**Formal privacy:** ε = " in clipped[0] and "(δ = 1e-5) — (ε, δ)-DP for any one " \
        "private image (Opacus RDP accountant)" in clipped[0], clipped
    assert privacy_lines({"defense": "dp-gaussian", "dp_sigma": 1.0}) == [
        ":material/lock: **Formal privacy:** no formal guarantee: without clipping (dp_clip = 0) one image can move "
        "the payload without bound, so no amount of noise gives an ε"]
    assert privacy_lines({"defense": "prune", "prune_ratio": 0.5}) == [
        ":material/lock: **Formal privacy:** no formal guarantee: this defense (magnitude pruning) is not a "
        "differentially private mechanism"]
    assert privacy_lines({}) == []


def test_dlg_on_one_vertical_fl_batch_says_how_it_is_scored():
    """DLG on vertical FL attacks one batch; of two samples its images are paired before scoring, of one there
    is nothing to pair (the page said "it cannot tell the 1 samples apart")."""
    def captions(over):
        at = AppTest.from_function(_finished_page, args=({"protocol": "vfl", **over},), default_timeout=120).run()
        assert not at.exception, at.exception
        return " ".join(c.value for c in at.caption)

    one = captions({})
    assert "here of one sample: it is scored on that sample alone" in one and "the 1 samples" not in one
    assert "cannot tell the 2 samples apart, so its images are paired" in captions({"batch_size": 2})


def _logit_figures(clean):
    from types import SimpleNamespace

    from leakdemo.dashboard.views.logits import logit_metrics
    utility = {"defended": [0.7, 0.7], **({"clean": [0.6, 0.6]} if clean else {})}
    logit_metrics(SimpleNamespace(seconds=2.1, metrics={"attack_accuracy": 0.6, "baseline_attack_accuracy": 0.2,
                                                        "ssim_to_mean": 0.56, "utility": utility}), "pli")


def test_a_defended_federation_s_utility_says_its_change_in_points():
    """'+10.0% vs no defense' ran out of its column ("vs no defe…") and read as a relative change: 60 % to 70 %
    is now '+10.0 pts', and the help says from what."""
    at = AppTest.from_function(_logit_figures, args=(True,), default_timeout=60).run()
    utility = next(m for m in at.metric if m.label == "Utility")
    assert not at.exception and utility.value == "70.0%" and utility.proto.delta == "+10.0 pts", utility.proto
    assert "percentage points from the same federation without the defense" in utility.proto.help
    alone = next(m for m in AppTest.from_function(_logit_figures, args=(False,)).run().metric if m.label == "Utility")
    assert not alone.proto.delta and "percentage points" not in alone.proto.help


def test_the_attack_s_stage_shows_while_it_runs_and_not_after():
    """A finished PLI run still said "round 1 of 5: training the inversion network … · round 5 of 5: new logits
    arrived" under its result: the stage now rides in the progress bar while the attack runs; notes stay."""
    running = AppTest.from_function(_stage_page, args=("running",), default_timeout=60).run()
    assert not running.exception
    # PLI counts inversion epochs, as its accuracy chart does
    assert "Inversion epoch 23 / 50 · round 3 of 5: new logits arrived, training on them · 2.0 s" in \
        running.get("progress")[0].proto.text
    done = AppTest.from_function(_stage_page, args=("finished",), default_timeout=60).run()
    assert not done.exception and not done.get("progress")
    said = " ".join(c.value for c in done.caption) + " ".join(s.value for s in done.success)
    # the whole run's count says how it came about: "after 50 inversion epochs" under a sidebar saying 10
    assert "Finished** after 50 inversion epochs (10 on each of the 5 rounds' logits) in 4.6 s" in said, said
    assert "compiled the objective" in said
    assert "round 3" not in said and "new logits" not in said  # the stage is gone


def test_the_quality_chart_reads_ssim_from_0_to_1_and_the_loss_in_powers_of_ten():
    from types import SimpleNamespace

    from leakdemo.dashboard.lab import _chart
    from leakdemo.dashboard.pool import CURVES, Thinned
    curves = {k: Thinned(400) for k in CURVES}
    for i, (psnr, s, loss) in enumerate([(9.0, 0.1, 50.0), (31.0, 0.9, 1e-3), (56.0, 1.0, 2e-6)]):
        for k, v in dict(iteration=i * 100, psnr=psnr, ssim=s, loss=loss).items():
            curves[k].offer(v)
    quality, loss = _chart(SimpleNamespace(curves=curves, scenario=SimpleNamespace(params={"protocol": "fedsgd"})))
    assert list(quality.layout.yaxis2.tickvals) == [0, 0.25, 0.5, 0.75, 1]  # not the PSNR grid's 0.569, 0.853
    assert loss.layout.yaxis.exponentformat == "power"  # 10⁻⁶, not "1μ"
    assert loss.layout.yaxis.dtick == 2  # 50 … 2·10⁻⁶ is 7.4 decades: every second one labelled
    assert quality.layout.xaxis.title.text == loss.layout.xaxis.title.text == "iteration"
    # side by side, their x-axes at one height: no legend under one chart alone; each axis in its line's colour
    assert quality.layout.showlegend is False and len(loss.data) == 1
    assert quality.layout.yaxis.title.font.color == quality.data[0].line.color
    assert quality.layout.yaxis2.title.font.color == quality.data[1].line.color
    quality, loss = _chart(SimpleNamespace(curves=curves, scenario=SimpleNamespace(params={"protocol": "fedmd"})))
    assert quality.layout.xaxis.title.text == loss.layout.xaxis.title.text == "inversion epoch"  # PLI's axis


def _chart_page(status: str):
    from types import SimpleNamespace

    import streamlit as st

    from leakdemo.dashboard.lab import chart_panel
    from leakdemo.dashboard.pool import RunHandle
    from leakdemo.scenario import from_preset
    h = RunHandle(scenario=from_preset("invgrad"), status=status, seq=1)
    h.latest = SimpleNamespace(iteration=0)  # frame 0 only: the build after it never ended
    for k, v in dict(iteration=0, psnr=9.6, ssim=0.01, loss=None).items():
        h.curves[k].offer(v)
    st.session_state.pop("chart_memo", None)
    chart_panel(h)


def test_a_run_stopped_before_its_result_draws_no_charts():
    """"Nothing to show yet" sat above a PSNR chart of one dot at iteration 0 and an empty loss chart, after a
    Stop that had to restart the worker during a torch.compile build."""
    stopped = AppTest.from_function(_chart_page, args=("stopped",), default_timeout=60).run()
    assert not stopped.exception and not stopped.get("plotly_chart")
    running = AppTest.from_function(_chart_page, args=("running",), default_timeout=60).run()
    assert not running.exception and len(running.get("plotly_chart")) == 2


def test_a_log_axis_labels_what_fits_its_span():
    """AGIC's loss, 2·10⁻³ to 6·10⁻², read "6 5 4 3 2 10⁻² 9 8 7 6 5 4 3 2" — plotly labels every digit of a
    short span, on top of each other in a 300-px chart: under two decades 1, 2 and 5 of each, above one label
    per decade, every few decades over a wide span."""
    from leakdemo.dashboard.axes import log_axis
    agic = log_axis([0.055, 0.004, 0.0021, 0.003])
    assert agic["ticktext"] == ["0.005", "0.01", "0.02", "0.05"] and agic["tickvals"] == [0.005, 0.01, 0.02, 0.05]
    # PLI's loss, 0.045 to 0.1, read "10⁻¹" over a bare "5": every label now reads alone
    assert log_axis([0.1, 0.045])["ticktext"] == ["0.05", "0.1"]
    assert log_axis([2e-6, 7e-6])["ticktext"] == ["2·10⁻⁶", "5·10⁻⁶"]  # far from 1: m·10ⁿ
    assert log_axis([0.06, 0.09])["ticktext"] == ["0.06", "0.07", "0.08", "0.09"]  # no 1, 2 or 5 inside: each digit
    # DLM+ under noise stalling between 1.84 and 2.00: no digit inside, and the chart had no label at all
    assert log_axis([1.98, 1.8435, 1.9977])["ticktext"] == ["1.85", "1.9", "1.95"]
    assert log_axis([123.4, 125.0])["ticktext"] == ["123.5", "124", "124.5", "125"]
    assert log_axis([2.0, 2.0])["ticktext"] == ["2"]  # a flat loss still says where it is
    # a noised DLG run's loss, 83 300 … 84 500: every tick read "8·10⁴"
    assert log_axis([83300.0, 84500.0])["ticktext"] == ["8.35·10⁴", "8.4·10⁴", "8.45·10⁴"]
    assert log_axis([1.0, 2e-3])["dtick"] == 1 and log_axis([100.0, 1e-7, None, float("nan")])["dtick"] == 2
    assert log_axis([1e4, 1e-20])["dtick"] == 4  # 24 decades: six labels
    assert "dtick" not in log_axis([None, 0.0]) and log_axis([])["type"] == "log"


def _verdict_panel():
    """PLI's panel for three classes judged ✓ ✗ ✓ (run by AppTest.from_function)."""
    import numpy as np

    from leakdemo.dashboard.views.logits import classes_panel
    from leakdemo.events import Started
    faces = np.random.default_rng(0).random((3, 8, 8, 3)).astype("float32")
    started = Started(scenario={"params": {"attack": "pli", "rounds": 2, "inversion_epochs": 0}}, threat={},
                      originals=faces, names=["identity 1 (x)", "identity 2", "identity 3"], labels=[0, 1, 2],
                      total=1, device="cpu", lpips="", setup_seconds=0.0)
    classes_panel(1, started, faces.copy(), faces.copy(), [True, False, True], None)


def test_pli_verdicts_frame_the_faces_they_judge():
    """The ✓/✗ line sat under TBI's row, where it read as TBI's verdicts and named faces by position only: each
    PLI face is now framed green (passes) or red (fails), the line right under PLI's row; the class means and
    TBI's faces keep white frames of the same width, so a class sits in one column in all three rows."""
    import base64
    import io

    from PIL import Image

    from leakdemo.artifacts import GAP, VERDICT_COLORS
    at = AppTest.from_function(_verdict_panel).run()
    assert not at.exception
    assert [e.type for e in at.main][1:] == ["markdown", "image", "markdown", "image", "caption", "markdown", "image"]
    pictures = [np.asarray(Image.open(io.BytesIO(base64.b64decode(im.proto.imgs[0].url.split(",", 1)[1]))))
                for im in at.get("image")]
    assert len({p.shape for p in pictures}) == 1  # three rows, one layout
    side = 2 * 8 + 2 * 2  # each face at twice its size inside a 2-px frame
    corner = [tuple(int(c) for c in p[GAP, GAP + j * (side + GAP)]) for p in pictures for j in range(3)]
    green, red = (tuple(round(255 * c) for c in VERDICT_COLORS[ok]) for ok in (True, False))
    assert corner == [(255, 255, 255)] * 3 + [green, red, green] + [(255, 255, 255)] * 3
    assert at.caption[0].value.endswith("✓ identity 1  ✗ identity 2  ✓ identity 3")


def test_racing_starts_show_as_a_small_strip():
    """Eight racing starts were a 3 × 3 block of 160-px pictures, 500 px tall, that pushed the curves off a
    laptop's screen when shown: they are a strip about twice as wide as tall, 480 px across."""
    from leakdemo.artifacts import mosaic
    from leakdemo.dashboard.views.images import trials_layout
    for n, expected in ((2, (2, 160)), (8, (4, 120)), (16, (6, 80))):
        assert trials_layout(n, 32) == expected
        strip = mosaic(np.random.rand(n, 32, 32, 3), *trials_layout(n, 32))
        assert strip.shape[1] <= 500 and strip.shape[1] >= 1.5 * strip.shape[0], strip.shape


def test_agic_matching_frames_each_column_by_its_verdict():
    """The matching panel listed "✓ ✓ ✗ ✓" in one line under the grid, which did not say which mark was which
    column's: each column is framed green (paired correctly) or red, in every epoch's row."""
    from leakdemo.artifacts import GAP, VERDICT_COLORS, matching_grid
    views = [[np.full((8, 8, 3), 0.5, np.float32)] * 2 for _ in range(3)]  # 3 images × 2 epochs
    picture = matching_grid({"views": views, "correct": [True, False, True]}, cell=16)
    side = 16 + 2 * 2
    green, red = (tuple(round(255 * c) for c in VERDICT_COLORS[ok]) for ok in (True, False))
    corners = [tuple(int(c) for c in picture[GAP + r * (side + GAP), GAP + j * (side + GAP)])
               for r in range(2) for j in range(3)]
    assert corners == [green, red, green] * 2


def test_the_server_does_not_collect_garbage_after_every_refresh():
    """Streamlit's default runs gc.collect() after every script run: 37 ms on our heap, after every refresh of
    every tab. A classroom of 12 tabs refreshing twice a second spent a core on it and fell minutes behind (CI:
    4 of 12 tabs finished in 10 minutes). The project's config turns it off; Streamlit must read it from there."""
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", "from streamlit import config; print(config.get_option('runner.postScriptGC'))"],
                         cwd=root, capture_output=True, text=True, check=True, env={**os.environ, "HOME": root + "/tests"})
    assert out.stdout.strip() == "False", out.stdout + out.stderr


def test_a_run_begun_redraws_the_page_once_even_at_an_unchanged_pace():
    """The run panel asks for one full rerun around a run it was not drawn with. It asked only when the pace
    changed — and on a fresh server the pace is the same before the click (the gallery's thumbnails) and
    during the run: while the threat card sat above the panel, the first run of a class played under the open
    card, its pictures below a 1280×720 projector's fold (the card now folds in the panel). Run attack itself
    is a full rerun now (its button sits outside the panel: `run_buttons`); a run begun another way still
    gets its page drawn."""
    from leakdemo.dashboard.lab import POLL_SECONDS, redraw_page
    from leakdemo.dashboard.pool import RunHandle
    run = RunHandle(scenario=from_preset("dlg"), status="running", seq=1)
    assert redraw_page(run, POLL_SECONDS, None)  # just clicked: a page drawn without it
    assert not redraw_page(run, POLL_SECONDS, run)  # drawn with it: ticks redraw the panel alone
    again = RunHandle(scenario=from_preset("dlg"), status="running", seq=2)
    assert redraw_page(again, POLL_SECONDS, run)  # a second run over the first's page


def test_stop_greys_again_when_the_run_ends_even_at_an_unchanged_pace(monkeypatch):
    """Stop sits outside the run panel's fragment (a click inside one could be skipped, see `run_buttons`), so
    only a full run redraws it: the panel asks for one when the run it could stop has ended, even where the
    pace stays (a fresh server's page ticks at POLL_SECONDS before, during and after a run)."""
    import threading
    from types import SimpleNamespace
    from leakdemo.dashboard import lab
    from leakdemo.dashboard.lab import POLL_SECONDS, redraw_page
    from leakdemo.dashboard.pool import RunHandle
    monkeypatch.setattr(lab, "_gallery", lambda: SimpleNamespace(ready=threading.Event()))  # thumbnails not ready
    run = RunHandle(scenario=from_preset("dlg"), status="running", seq=1)
    assert not redraw_page(run, POLL_SECONDS, run, stop_enabled=True)  # Stop drawn enabled, still right
    run.status = "stopped"
    assert redraw_page(run, POLL_SECONDS, run, stop_enabled=True)  # ended under an enabled Stop: drawn again
    assert not redraw_page(run, POLL_SECONDS, run, stop_enabled=False)  # and then left alone


def test_a_finished_run_s_downloads_are_looked_for_at_the_running_pace():
    """After "Finished" the worker builds the run's files; the panel ticked every 2 s (a queued run's pace) until
    they came, so the download buttons came up to 2 s late — on a live demo's stage, a pause after every run."""
    from leakdemo.dashboard import lab
    from leakdemo.dashboard.pool import RunHandle
    run = RunHandle(scenario=from_preset("dlg"), status="finished", seq=1)
    assert not run.complete and lab._pace(run) == lab.POLL_SECONDS


def test_the_engine_line_says_when_the_workers_are_ready_without_a_click(monkeypatch):
    """The sidebar's engine line was drawn once per full run: a fresh server's page said "starting the workers
    (a few seconds)…" until the user touched something. An idle panel now ticks until every worker is warm and
    none builds ahead, and asks for a full rerun whenever the line it was drawn with has changed."""
    import threading
    from types import SimpleNamespace
    from leakdemo.dashboard import lab

    class Pool:
        max_running, n_ready, n_warm, n_building = 2, 0, 0, 0
        def ready(self): return self.n_ready
        def warm(self): return self.n_warm
        def building(self): return self.n_building
    pool, shown = Pool(), threading.Event()
    shown.set()
    monkeypatch.setattr(lab, "run_pool", lambda: pool)
    monkeypatch.setattr(lab, "_gallery", lambda: SimpleNamespace(ready=shown))
    drawn = lab.engine_line(pool)
    assert drawn == "Engine: starting the workers (a few seconds)…"
    assert lab._pace(None) == lab.POLL_SECONDS and not lab.redraw_page(None, lab.POLL_SECONDS, None, drawn)
    pool.n_ready = 2
    assert lab.redraw_page(None, lab.POLL_SECONDS, None, drawn)  # "warming up": drawn again
    pool.n_warm, pool.n_building = 1, 1
    assert lab.engine_line(pool) == "Engine: 2 of 2 workers ready · 1 compiling DLG and DLM+ ahead, for faster runs"
    assert lab._pace(None) == lab.POLL_SECONDS
    pool.n_warm, pool.n_building = 2, 0
    assert lab.engine_line(pool) == "Engine: 2 of 2 workers ready"
    assert lab._pace(None) is None  # settled: an idle page stops ticking


def test_cafes_utility_chart_keeps_its_legend_for_one_line_so_its_axis_meets_the_steps_charts():
    """The Steps I–II chart beside it has a two-line legend under it; Plotly hides a lone line's legend, which
    set the undefended utility chart's x-axis lower than its neighbour's."""
    from leakdemo.dashboard.views import vfl
    fig = vfl.utility_chart({"defended": [2.3, 1.0, 0.4], "steps": 3, "lr": 0.1})
    assert [t.name for t in fig.data] == ["no defense"] and fig.layout.showlegend is True
    assert fig.layout.legend.y == vfl.steps_chart({"iteration": [0], "step1_error": [1.0], "step2_error": [1.0]}
                                                  ).layout.legend.y


def test_the_quality_chart_marks_the_recognisable_and_recovered_bars():
    """The PSNR curve is read against 20 dB (recognisable) and 30 dB (recovered), the bars the result box times and
    CAFE's frames colour; a defended curve's plateau under them says "never" at a glance. Logit sharing's PSNR is
    against a class's mean face, so its chart has no such bars."""
    from leakdemo.dashboard.lab import _chart
    from leakdemo.dashboard.pool import RunHandle
    from leakdemo.scenario import from_preset
    fig, _ = _chart(RunHandle(scenario=from_preset("dlg")))
    assert [(s.y0, s.y1) for s in fig.layout.shapes] == [(20, 20), (30, 30)]
    assert {s.layer for s in fig.layout.shapes} == {"between"}  # over the gridlines (20 dB is often a tick), under the curves
    assert [a.text for a in fig.layout.annotations] == ["20 dB: recognisable", "30 dB: recovered"]
    pli, _ = _chart(RunHandle(scenario=from_preset("pli-digits")))
    assert not pli.layout.shapes
    # Compare's chart of recorded runs too, unless every run is PLI's (its one shape: the replay's position line)
    from leakdemo.dashboard.compare import _curves
    from leakdemo.gallery import open_gallery, showcase_rows
    g = open_gallery()
    runs = {r["preset"]: g.load(r["id"]) for r in showcase_rows(g)}
    assert [s.y0 for s in _curves([("g1", runs["dlg"]), ("g7", runs["pli"])], 1.0).layout.shapes] == [0, 20, 30]
    assert [s.y0 for s in _curves([("g7", runs["pli"])], 1.0).layout.shapes] == [0]
    # and PLI alone is drawn by what judges it, its attack accuracy (its PSNR to a class's mean face said ~15 dB)
    alone = _curves([("g7", runs["pli"])], 1.0)
    assert alone.layout.yaxis.title.text == "attack accuracy" and tuple(alone.layout.yaxis.range) == (0, 1.02)
    assert list(alone.data[0].y) == runs["pli"].finished.history["attack_accuracy"]
    assert alone.data[1].name == "Showcase 7 · TBI baseline" and alone.data[1].line.dash == "dash"
    assert list(alone.data[1].y) == runs["pli"].finished.history["baseline_attack_accuracy"]
    assert _curves([("g1", runs["dlg"]), ("g7", runs["pli"])], 1.0).layout.yaxis.title.text == "PSNR, dB"


def _label_spot(fig, text: str) -> str:
    a = next(a for a in fig.layout.annotations if a.text == text)
    return f"{'top' if a.yanchor == 'bottom' else 'bottom'} {a.xanchor}"


def test_a_bar_s_label_keeps_off_the_curve_that_ends_along_it():
    """A run that ends at 31–35 dB (AGIC's showcase: 32.9 dB) ran along "30 dB: recovered" at the chart's right,
    where a class reads the final value: the label goes where no curve runs, and stays above the bar at the
    right where that is free."""
    from leakdemo.dashboard.compare import PLOT_PX, _curves
    from leakdemo.dashboard.lab import _chart
    from leakdemo.dashboard.pool import RunHandle
    from leakdemo.gallery import open_gallery, showcase_rows

    def lab_chart(end: float):
        h = RunHandle(scenario=from_preset("dlg"))
        for it in range(0, 301, 3):  # climbs from 8 dB to `end` over the first 90 iterations, then stays
            p = min(end, 8 + (end - 8) * it / 90)
            for k, v in (("iteration", it), ("psnr", p), ("ssim", min(1.0, p / 40)), ("loss", 1 / (it + 1))):
                h.curves[k].offer(v)
        return _chart(h)[0]

    assert _label_spot(lab_chart(32.5), "30 dB: recovered") != "top right"
    high = lab_chart(50)  # far above both bars: each label where it always was
    assert [_label_spot(high, t) for t in ("20 dB: recognisable", "30 dB: recovered")] == ["top right"] * 2
    g = open_gallery()
    agic = next(g.load(r["id"]) for r in showcase_rows(g) if r["preset"] == "agic-multiround")
    assert agic.finished.metrics["psnr"] > 31
    # on Compare's 400-px chart the label fits between the bar and that curve: wherever it goes, no curve crosses it
    from leakdemo.dashboard.axes import CHAR_PX, LABEL_PX, _meets, label_box
    from leakdemo.dashboard.shared import _psnr_span
    fig = _curves([("g4", agic)], 1.0)
    lo, hi = _psnr_span(fig)
    height = LABEL_PX / PLOT_PX[1] * (hi - lo)
    a, b, y0, y1 = label_box(_label_spot(fig, "30 dB: recovered"), 30, "30 dB: recovered", height, CHAR_PX / PLOT_PX[0])
    assert _meets(list(zip(fig.data[0].x, fig.data[0].y)), a, b, y0 - height / 2, y1 + height / 2) == 0  # with room


def test_a_browser_on_another_machine_never_reads_the_servers_disk(tmp_path, monkeypatch):
    """A classroom's students open the teacher's dashboard from their laptops: `?data=folder&folder=/home/teacher/…`
    showed the teacher's photos as the private data, and the source's messages listed the folder's files. Only a
    browser on the server's machine reads any folder; others read only those the operator shares."""
    from PIL import Image

    from leakdemo.dashboard import server_disk, tradeoffs
    from leakdemo.errors import ParamError
    for name in ("shared", "private"):
        (tmp_path / name).mkdir()
        Image.fromarray(np.zeros((16, 16, 3), np.uint8)).save(tmp_path / name / "a.png")
    at = lab(preset="dlg", data="folder", folder=str(tmp_path / "private"), image_size="16")
    assert not at.error and not at.button[0].disabled  # the user's own machine: any folder, as the CLI reads
    monkeypatch.setattr(server_disk, "on_this_machine", lambda: False)
    at = lab(preset="dlg", data="folder", folder=str(tmp_path / "private"), image_size="16")
    assert [e.value for e in at.error] == [
        "folder: data=folder reads the disk of the server's machine, and this browser is on another one: it may read "
        "none (the server's operator can share some: LEAKDEMO_DATA_DIRS=DIR); upload your own photos instead"]
    assert at.button[0].disabled
    monkeypatch.setenv("LEAKDEMO_DATA_DIRS", str(tmp_path / "shared"))
    at = lab(preset="dlg", data="folder", folder=str(tmp_path / "shared"), image_size="16")
    assert not at.error and not at.button[0].disabled
    at = lab(preset="dlg", data="folder", folder=str(tmp_path / "shared" / ".." / "private"), image_size="16")
    assert at.error[0].value.startswith(f"folder: data=folder reads the disk of the server's machine, and this browser "
                                        f"is on another one: it may read only folders under {tmp_path / 'shared'}")
    at = lab(preset="dlg", data="torchvision", data_root="/", image_size="16")
    assert at.error[0].value.startswith("data_root: data=torchvision reads the disk of the server's machine")
    # a sweep too, whether the link sets the folder or a point of the sweep switches to it
    spec = {"sweep": "custom", "preset": "dlg", "defense": "dp-gaussian", "seeds": 1, "folder": str(tmp_path / "private")}
    with pytest.raises(ParamError, match="^folder: data=folder reads the disk"):
        tradeoffs.build({**spec, "vary": "dp_sigma=0.01,1", "data": "folder"})
    with pytest.raises(ParamError, match="^folder: data=folder reads the disk"):
        tradeoffs.build({**spec, "vary": "dp_sigma=0.01,1; data=samples,folder"})


@pytest.mark.parametrize("peer,local", [(None, True), ("127.0.0.2", True), ("::ffff:127.0.0.1", True),
                                        ("192.0.2.2", False), ("fd00::2", False), ("fe80::1%eth0", False),
                                        ("::ffff:192.0.2.2", False), ("not an address", False)])
def test_only_a_loopback_peer_is_the_servers_own_machine(peer, local):
    from leakdemo.dashboard.server_disk import local_peer
    assert local_peer(peer) is local
