"""The Trade-offs page without a browser (AppTest): widgets, validation and the shareable URL."""
import math
import os
import time

import pytest
from streamlit.testing.v1 import AppTest

PAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pages", "2_Tradeoffs.py")


def page(**query):
    at = AppTest.from_file(PAGE, default_timeout=120)
    for k, v in query.items():
        at.query_params[k] = v
    return at.run()


def texts(at):
    return " ".join(m.value for m in at.markdown)


def test_default_is_the_built_in_dp_sweep():
    at = page()
    assert not at.exception and not at.error
    assert at.selectbox(key="t_sweep").value == "sweep-dp-dlg"
    assert "17 points (the undefended one included) × 3 seeds = 51 runs" in texts(at)
    assert not at.button[0].disabled and at.button[0].label == "Run sweep"
    # the bare address is this default, and stays bare: written on arrival, it cost Back an entry (shared.keep_link)
    assert "sweep" not in at.query_params


def test_the_browser_s_back_returns_to_the_sweep_before():
    """Each sweep chosen is written into the link, a history entry; Back met a link that the sidebar's sweep wrote
    straight over, and looked dead. A link the page did not write, met on the page itself, now brings back the
    sweep it stood for — the bare address the default one, a custom link its settings."""
    at = page()
    at.selectbox(key="t_sweep").set_value("sweep-prune-dlg").run()
    at.selectbox(key="t_sweep").set_value("custom").run()
    at.text_input(key="t_vary").set_value("prune_ratio=0.2,0.8").run()
    custom = dict(at.query_params)
    assert custom["sweep"] == "custom" and custom["vary"] == "prune_ratio=0.2,0.8", custom

    def back_to(link):  # what the browser's Back or Forward sends: the link of another history entry
        at.query_params.clear()
        at.query_params.update(link)
        at.run()
        assert not at.exception, at.exception
        return at.selectbox(key="t_sweep").value, dict(at.query_params)

    assert back_to({"sweep": "sweep-prune-dlg"}) == ("sweep-prune-dlg", {"sweep": "sweep-prune-dlg"})
    assert back_to({}) == ("sweep-dp-dlg", {})  # the bare address: the default sweep, and Back leaves from there
    assert back_to(custom) == ("custom", custom)  # Forward, twice
    assert at.text_input(key="t_vary").value == "prune_ratio=0.2,0.8" and not at.warning
    at.slider(key="t_seeds").set_value(2).run()  # the link as the page last wrote it is no step
    assert at.slider(key="t_seeds").value == 2 and at.query_params["seeds"] == "2"


def test_a_shared_custom_sweep_link_fills_the_widgets():
    at = page(sweep="custom", preset="dlg", defense="prune", vary="prune_ratio=0..0.9:3", seeds="2")
    assert not at.exception and not at.error
    assert at.selectbox(key="t_defense").value == "prune"
    assert at.text_input(key="t_vary").value == "prune_ratio=0..0.9:3"
    assert at.slider(key="t_seeds").value == 2
    # pruning 0 % is the undefended run: it was computed twice, as a point of its own
    assert "3 points (the undefended one included; prune_ratio=0 is that same run) × 2 seeds = 6 runs" in texts(at)
    assert "**DLG against magnitude pruning · preset dlg**" in texts(at)  # names, not 'dlg against magnitude pruning'
    at = page(sweep="custom", preset="dlg", defense="dp-gaussian", vary="dp_sigma=1e-4..1:3")
    assert "**DLG against Gaussian noise (DP-style) · preset dlg**" in texts(at)  # Gauss keeps his capital


def test_a_link_with_a_defense_the_preset_cannot_sweep_says_so():
    at = page(sweep="custom", preset="dlg", defense="logit-noise", vary="logit_sigma=0.1..1:3")
    assert not at.exception
    assert any(w.value.startswith("Ignored from the link: defense='logit-noise' with vary='logit_sigma=0.1..1:3' "
                                  "(preset dlg sweeps dp-gaussian") for w in at.warning), [w.value for w in at.warning]
    assert at.selectbox(key="t_defense").value == "dp-gaussian"


def test_a_link_that_names_only_another_protocols_defense_opens_a_preset_that_sweeps_it():
    """`?defense=top-k` said "preset dlg sweeps dp-gaussian, …" and opened the DP sweep: the link names no preset,
    so it gets the first one whose protocol the defense protects, as the sidebar's two choices would give."""
    at = page(defense="top-k", vary="top_k=1..5:3")
    assert not at.exception and not at.error and not at.warning, [w.value for w in at.warning]
    assert at.selectbox(key="t_preset").value == "pli" and at.selectbox(key="t_defense").value == "top-k"
    assert at.text_input(key="t_vary").value == "top_k=1..5:3"
    assert at.query_params["preset"] in ("pli", ["pli"])


@pytest.mark.parametrize("query, preset, defense, vary", [
    ({"defense": "prune"}, "dlg", "prune", "prune_ratio=0..0.999:5"),  # was given noise σ's range, and refused it
    ({"defense": "fake-gradients"}, "cafe", "fake-gradients", "fake_sigma=0.0105..10:5"),
    ({"vary": "top_k=1..5:3"}, "pli", "top-k", "top_k=1..5:3"),  # the range names the defense
    ({"preset": "dlg", "vary": "batch_size=1..16:5"}, "dlg", "none", "batch_size=1..16:5"),  # a knob: no defense
    # top-k's whole range, 1 … 1000, left only k = 1 below pli's 40 classes: the rest was the undefended run
    ({"defense": "top-k"}, "pli", "top-k", "top_k=1,2,4,8,16"),
    ({"preset": "pli-digits", "defense": "top-k"}, "pli-digits", "top-k", "top_k=1,2,4,8"),  # ten digits
    # 0.1 … 1000 began with sharpened logits (below 1), then the undefended run (1)
    ({"preset": "pli-digits", "defense": "logit-temperature"}, "pli-digits", "logit-temperature",
     "send_temperature=2,5,10,100,1000"),
    # a count ends where the preset's data does: clients=1..20:5 refused four points of five (5 target classes)
    ({"preset": "pli-digits", "defense": "none"}, "pli-digits", "none", "clients=1..5:5"),
    ({"preset": "dlg-round", "defense": "none"}, "dlg-round", "none", "batch_size=1..2:2"),  # 8 clients, 23 photos
])
def test_a_link_that_leaves_out_the_defense_or_its_range_gets_what_the_rest_implies(query, preset, defense, vary):
    at = page(**query)
    assert not at.exception and not at.error and not at.warning, ([e.value for e in at.error], at.warning)
    assert (at.selectbox(key="t_preset").value, at.selectbox(key="t_defense").value) == (preset, defense)
    assert at.text_input(key="t_vary").value == vary


def test_the_defense_and_range_before_a_change_sent_back_by_a_timer_tick_are_not_taken(monkeypatch):
    """While a sweep runs its panel polls, and a tick carries the sidebar as the browser shows it — before the
    browser has drawn the range a new defense brought. Streamlit took it as a change: the old defense called
    the callback again (its range back), or the old range stood under the new defense until the next tick."""
    from leakdemo.dashboard import shared
    at = page(sweep="custom", preset="dlg", defense="dp-gaussian", vary="dp_sigma=1e-4..1:3")
    at.selectbox(key="t_defense").set_value("prune").run()
    assert at.text_input(key="t_vary").value.startswith("prune_ratio=")
    drawn = at.text_input(key="t_vary").value
    monkeypatch.setattr(shared, "_fragment_run", lambda: True)  # the tick, with the browser's values from before
    at.selectbox(key="t_defense").set_value("dp-gaussian")
    at.text_input(key="t_vary").set_value("dp_sigma=1e-4..1:3")
    at.run()
    monkeypatch.setattr(shared, "_fragment_run", lambda: False)
    at.run()  # the next full run (the sweep ending) draws what the session holds
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert (at.selectbox(key="t_defense").value, at.text_input(key="t_vary").value) == ("prune", drawn)


def test_a_custom_sweep_can_vary_a_protocol_knob_instead_of_a_defense():
    """Without a defense, Custom varies what the protocol itself does that defends — a larger batch, more local
    steps — and nothing else: the attack's own iterations are not a defense's trade-off."""
    at = page(sweep="custom", preset="dlg", defense="dp-gaussian", vary="dp_sigma=1e-4..1:3")
    at.selectbox(key="t_defense").set_value("none").run()
    assert not at.exception and not at.error
    assert at.text_input(key="t_vary").value == "batch_size=1..16:5"  # doublings, on a log axis
    assert "**DLG against batch size · preset dlg** — 5 points × 1 seed = 5 runs. " \
           "`batch_size` ∈ {1, 2, 4, 8, 16}" in texts(at)
    assert not at.button[0].disabled
    at.text_input(key="t_vary").set_value("iterations=10..100:3").run()
    assert not at.exception and at.button[0].disabled
    assert any(e.value == "vary: without a defense, vary a protocol knob that defends: batch_size, warmup_steps; "
                          "got iterations" for e in at.error), [e.value for e in at.error]
    at.text_input(key="t_vary").set_value("batch=1..16:5").run()  # a mistyped knob gets the one meant
    assert any(e.value.endswith("got batch (did you mean batch_size?)") for e in at.error), [e.value for e in at.error]
    at = page(sweep="custom", preset="dlm-plus", defense="none", vary="local_steps=1,2,4")  # a shared link
    assert not at.exception and not at.error  # the Lab's note on 4 local steps' 4 images, as `run` says it:
    assert [w.value[:50] for w in at.warning] == ["At local_steps=4: Fewer equations than unknowns (0"]
    assert "**DLM+ against local steps · preset dlm-plus** — 3 points × 1 seed = 3 runs" in texts(at)


def test_bad_link_values_are_reported_not_fatal():
    at = page(sweep="nope")
    assert not at.exception
    assert "sweep='nope'" in " ".join(w.value for w in at.warning)
    assert at.selectbox(key="t_sweep").value == "sweep-dp-dlg"
    at = page(sweep="prune")  # a sweep named by its words: the one meant is said, not only all eight
    assert "sweep='prune' (unknown: did you mean sweep-prune-dlg?; built-in: " in " ".join(w.value for w in at.warning)
    at = page(sweep="custom", preset="dlg", defense="prune", vary="prune_ratio=0..0.9:3", seeds="99")
    assert not at.exception
    assert "seeds='99'" in " ".join(w.value for w in at.warning)
    assert at.slider(key="t_seeds").value == 1


def test_a_links_scenario_values_that_do_not_fit_are_dropped_and_said_not_left_to_block_run():
    """The sidebar cannot change a link's extra scenario values: one that does not fit is dropped, with a note,
    and the ones that fit are kept; a built-in sweep says it ignores them; a link naming a range is custom."""
    at = page(sweep="custom", preset="dlg", defense="dp-gaussian", vary="dp_sigma=1e-4..1:3", image_size="big",
              bogus="3", trials="2")
    assert not at.exception and not at.error
    warnings = [w.value for w in at.warning]
    assert any(w.startswith("Ignored from the link: image_size: must be an integer in [8, 128]") for w in warnings)
    assert "Ignored from the link: bogus: unknown parameter." in warnings, warnings  # nothing for a default to replace
    assert not at.button[0].disabled
    assert at.query_params["trials"] in ("2", ["2"]) and "image_size" not in at.query_params
    at.selectbox(key="t_preset").set_value("pli").run()  # PLI has no trials: set aside, not an error blocking Run
    assert not at.exception and not at.error and not at.button[0].disabled
    assert "Not used with this scenario: `trials=2`" in [c.value for c in at.sidebar.caption]
    assert "trials" not in at.query_params
    at.selectbox(key="t_preset").set_value("dlg").run()  # and back: the link's value applies again
    assert at.query_params["trials"] in ("2", ["2"]) and not at.button[0].disabled


def test_a_links_value_that_breaks_one_of_the_preset_s_own_is_dropped_and_said():
    """`n_samples=10` under cafe's batches of 40: the error named batch_size, which no widget here sets, and
    blocked Run. The link's values are now taken one at a time, as the Lab takes them: the one that does not fit
    is dropped and said, as given, with the rule it broke; the others stay."""
    at = page(sweep="custom", preset="cafe", defense="fake-gradients", vary="fake_sigma=0.1..10:3", n_samples="10",
              image_size="32")
    assert not at.exception and not at.error and not at.button[0].disabled
    assert [w.value for w in at.warning] == [
        "Ignored from the link: n_samples=10 (batch_size: must be at most n_samples (10), got 40). Using the "
        "default instead."]
    assert "n_samples" not in at.query_params and at.query_params["image_size"] in ("32", ["32"])
    at = page(sweep="sweep-prune-dlg", iterations="50")
    assert [w.value for w in at.warning] == ["Ignored from the link: iterations (a built-in sweep sets its own "
                                             "scenario; sweep=custom takes them)."]
    at = page(preset="dlm", defense="dp-gaussian", vary="dp_sigma=1e-4..1:3")  # written by hand, without sweep=
    assert not at.warning and at.selectbox(key="t_sweep").value == "custom"
    assert at.selectbox(key="t_preset").value == "dlm"
    at = page(sweep="custom", preset="dlg", vary=["dp_sigma=1e-4..1:3", "dp_sigma=1e-2..1:3"], trials=["1", "2"],
              bogus=["1", "2"])  # which one?
    assert [w.value for w in at.warning] == [
        "Ignored from the link: vary (given 2 times: 'dp_sigma=1e-4..1:3' and 'dp_sigma=1e-2..1:3'). Using the "
        "default instead.",
        "Ignored from the link: trials (given 2 times: '1' and '2'). Using the default instead.",
        "Ignored from the link: bogus (given 2 times: '1' and '2')."]  # nothing of bogus's for a default to replace


@pytest.mark.parametrize("vary,message", [
    ("dp_sigma=1e-4..1:99", "dp_sigma: the number of points must be an integer in [2, 64], got 99"),
    ("zzz=1..2:3", "zzz: is not a parameter of this scenario; the defense's: dp_sigma, dp_clip"),
    ("sigma=1e-4..1:3", "sigma: is not a parameter of this scenario (did you mean dp_sigma?); the defense's: "),
    ("dp_sigma=1..1e-4:3", "dp_sigma: the range must go from low to high"),
    ("seed=1,2", "seed: cannot be swept: every point already runs the sidebar's Seeds per point"),  # not --seeds
    # a name the page cannot sweep is not offered ("did you mean local_steps (of fedavg)?" on DLG)
    ("local_epochs=1,2", "local_epochs: is not a parameter of this scenario; the defense's: dp_sigma, dp_clip"),
    # named by this page's box, not the command line's option ("--vary: expected …")
    ("dp_sigma 0.1,1", "Vary: expected NAME=LOW..HIGH:N or NAME=a,b,c, got 'dp_sigma 0.1,1'"),
    ("DP_SIGMA=0.1,1", "DP_SIGMA: is not a parameter of this scenario (did you mean dp_sigma?); the defense's: "),
    # a second range after ';' is a grid's other axis: one line per value, so few of them, and another parameter
    ("dp_sigma=1e-4..1:3; dp_sigma=0.1,1", "vary: dp_sigma is given twice; the second range varies another"),
    ("dp_sigma=1e-4..1:3; dp_clip=1..32:6", "dp_clip: the second range draws one line per value: at most 5 values, got 6"),
    ("dp_sigma=1e-4..1:20; dp_clip=1,2,4,8", "vary: 20 × 4 = 80 points; at most 64"),
    ("dp_sigma=1e-4..1:3; dp_clip=1,4; lr=1,2", "vary: at most two ranges, separated by ';'"),
    ("dp_sigma=1e-4..1:3; clip=1,4", "clip: is not a parameter of this scenario (did you mean dp_clip?)"),
    # two ranges run together read "the number of points after ':' must be an integer …, got '3, dp_clip=1,4'"
    ("dp_sigma=1e-4..1:3, dp_clip=1,4", "Vary: one parameter per range, got a second (dp_clip) in "
                                        "'dp_sigma=1e-4..1:3, dp_clip=1,4'; give them as dp_sigma=1e-4..1:3; dp_clip=1,4"),
])
def test_a_bad_range_names_the_parameter_and_disables_run(vary, message):
    at = page(sweep="custom", preset="dlg", defense="dp-gaussian", vary="dp_sigma=1e-4..1:3")
    at.text_input(key="t_vary").set_value(vary).run()
    assert not at.exception
    assert any(e.value.startswith(message) for e in at.error), [e.value for e in at.error]
    assert at.button[0].disabled
    assert not [i.value for i in at.info if "Press **Run sweep**" in i.value]  # not under a greyed button


def test_a_corrupt_store_is_a_message_on_the_page(tmp_path, monkeypatch):
    bad = tmp_path / "runs.sqlite"
    bad.write_text("not a database")
    monkeypatch.setenv("LEAKDEMO_STORE", str(bad))
    at = page()
    assert not at.exception
    assert any("is not a SQLite database" in w.value for w in at.warning)
    assert bad.read_text() == "not a database"


def row(i, acc, psnr, undefended=False):
    """A sweep's row at test accuracy `acc` leaking `psnr`, its thumbnail a flat gray."""
    import numpy as np
    pic = np.full((8, 8, 3), i / 10, dtype=np.float32)
    return {"index": i, "label": "no defense" if undefended else f"p{i}", "undefended": undefended,
            "dp_sigma": None if undefended else 10.0 ** -i, "runs": 1, "psnr": psnr, "psnr_range": [psnr, psnr],
            "test_accuracy": acc, "attack_accuracy": None, "privacy": "ε = ∞", "thumbnail": [pic],
            "originals": [pic]}


def test_the_chart_shows_what_the_best_trade_offs_give_away():
    """The Pareto front's points and the undefended one carry their reconstruction on the chart."""
    from leakdemo.dashboard.tradeoffs import tradeoff_figure

    rows = [row(0, 0.95, 90.0, True), row(1, 0.95, 40.0), row(2, 0.9, 10.0), row(3, 0.5, 30.0), row(4, 0.2, 5.0)]
    fig = tradeoff_figure(rows, ["dp_sigma"])
    placed = sorted((round(im.x, 2), round(im.yanchor == "bottom" and im.y, 1)) for im in fig.layout.images)
    # front (lower-right is better): 0.95/40, 0.9/10, 0.2/5; plus the undefended star; 0.5/30 is dominated
    assert [p[0] for p in placed] == [0.2, 0.9, 0.95, 0.95]
    assert all(im.source.startswith("data:image/png;base64,") for im in fig.layout.images)
    lo, hi = fig.layout.yaxis.range
    assert lo < 5 and hi > 90 + 0.16 * 85  # every thumbnail fits inside the chart


def test_crowded_points_carry_one_picture_not_a_pile():
    """sweep-dp-dlg's front is three strengths at 96 % accuracy and ~5 dB, tied: their pictures were drawn one
    over another. Now the least leaking one shows; the undefended star keeps its own."""
    from leakdemo.dashboard.tradeoffs import tradeoff_figure

    rows = [row(0, 0.96, 90.0, True), row(1, 0.96, 5.5), row(2, 0.955, 5.0), row(3, 0.95, 5.8), row(4, 0.15, 4.5)]
    fig = tradeoff_figure(rows, ["dp_sigma"])
    placed = sorted((im.x, im.y) for im in fig.layout.images)
    assert len(placed) == 2
    assert placed[0][0] == 0.955 and placed[1][0] == 0.96 and placed[1][1] > 90  # the 5.0 dB point, the star
    # a defense that costs nothing (PLI's client keeps accuracy 1.0): a 0.05 span about it, not 0.996–1.004
    rows = [row(0, 1.0, 0.9, True), row(1, 1.0, 0.6), row(2, 1.0, 0.0)]
    for r in rows:
        r["psnr"], r["attack_accuracy"] = 15.0, r["psnr"]
    fig = tradeoff_figure(rows, ["dp_sigma"])
    lo, hi = fig.layout.xaxis.range
    assert abs((lo + hi) / 2 - 1.0) < 1e-9 and hi - lo > 0.05  # mid-axis, with room for pictures either side
    assert list(fig.layout.xaxis.tickvals) == [0.98, 0.99, 1.0]  # but no "1.02" on a share
    # sweep-topk-pli: five points within 0.15 of each other at accuracy ~1.0 had four pictures round them, none
    # telling whose it was; now only the undefended star's, above it
    rows = [row(0, 1.0, 0.8, True), row(1, 0.9995, 0.75), row(2, 0.999, 0.7), row(3, 1.0, 0.85)]
    for r in rows:
        r["psnr"], r["attack_accuracy"] = 15.0, r["psnr"]
    pictures = tradeoff_figure(rows, ["top_k"]).layout.images
    assert [(im.x, im.yanchor) for im in pictures] == [(1.0, "bottom")] and pictures[0].y > 0.8
    rows = [row(0, 0.96, 90.0, True), row(1, 0.5, 30.0), row(2, 0.1, 5.0)]  # a wide span: plotly's own ticks
    assert tradeoff_figure(rows, ["dp_sigma"]).layout.xaxis.tickvals is None
    # one that costs nothing below 1 (sweep-batch-dlg's 0.951 at every batch size) sits mid-axis, not on its edge
    rows = [row(0, 0.951, 90.0), row(1, 0.951, 47.0), row(2, 0.951, 15.0)]
    lo, hi = tradeoff_figure(rows, ["batch_size"]).layout.xaxis.range
    assert abs((lo + hi) / 2 - 0.951) < 1e-9 and hi - lo > 0.05


def test_a_defended_point_on_the_undefended_one_is_drawn_over_the_star():
    """sweep-topk-pli's k = 10 leaks and costs what no defense does, (1.0, 0.8): the star, drawn after it, hid it
    whole. The star now lies under the defended points, its tips showing round a point that sits on it."""
    from leakdemo.dashboard.tradeoffs import tradeoff_figure

    rows = [row(0, 1.0, 0.8, True), row(1, 1.0, 0.8), row(2, 0.9995, 0.7)]
    for r in rows:
        r["psnr"], r["attack_accuracy"] = 15.0, r["psnr"]
    names = [t.name for t in tradeoff_figure(rows, ["top_k"]).data]
    assert names.index("no defense") < min(i for i, n in enumerate(names) if n not in ("no defense", "Pareto front"))


def _picture_boxes(fig):
    """Each picture's box on the chart, (x0, x1, y0, y1) in data units."""
    boxes = []
    for im in fig.layout.images:
        x0 = {"left": im.x, "center": im.x - im.sizex / 2, "right": im.x - im.sizex}[im.xanchor]
        y0 = {"bottom": im.y, "middle": im.y - im.sizey / 2, "top": im.y - im.sizey}[im.yanchor]
        boxes.append((x0, x0 + im.sizex, y0, y0 + im.sizey))
    return boxes


def test_a_picture_never_hides_another_point():
    """sweep-dp-dlg's best point (σ = 0.07: 96 % accuracy, 4.9 dB) lies under two weaker ones (15 and 17 dB at
    the same accuracy), and its picture, drawn above it, hid them both. It now goes beside the point, wherever
    it covers no other point and stays on the chart."""
    from leakdemo.dashboard.tradeoffs import tradeoff_figure

    rows = [row(0, 0.951, 90.0, True), row(1, 0.955, 15.1), row(2, 0.965, 17.1), row(3, 0.96, 25.0),
            row(4, 0.958, 4.9), row(5, 0.83, 4.8), row(6, 0.1, 4.8)]
    fig = tradeoff_figure(rows, ["dp_sigma"])
    boxes = _picture_boxes(fig)
    assert len(boxes) == 2  # the star's and the best point's
    best = min(boxes, key=lambda b: b[2])
    assert best[1] <= 0.958 and best[2] < 4.9 < best[3]  # to its left, level with it
    for r in rows:
        covered = [b for b in boxes if b[0] < r["test_accuracy"] < b[1] and b[2] < r["psnr"] < b[3]]
        assert not covered, (r["label"], covered)
    (x_lo, x_hi), (y_lo, y_hi) = fig.layout.xaxis.range, fig.layout.yaxis.range
    assert all(x_lo <= b[0] and b[1] <= x_hi and y_lo <= b[2] and b[3] <= y_hi for b in boxes)


def test_attack_accuracy_is_drawn_on_its_whole_scale():
    """sweep-topk-pli's attack accuracy moves between 0.7 and 0.85 with top-k — seed noise, the defense protects
    nothing — and an axis from 0.7 to 0.85 drew it as a swing across the chart. A share now spans 0 to 1."""
    from leakdemo.dashboard.tradeoffs import strength_figure, tradeoff_figure

    rows = [row(0, 1.0, 0.0, True), row(1, 1.0, 0.0), row(2, 0.99, 0.0), row(3, 0.98, 0.0)]
    for r, acc in zip(rows, [0.8, 0.85, 0.7, 0.75]):
        r["psnr"], r["attack_accuracy"], r["psnr_range"] = 15.0, acc, None
    for fig in (strength_figure(rows, ["dp_sigma"], True), tradeoff_figure(rows, ["dp_sigma"])):
        lo, hi = fig.layout.yaxis.range
        assert lo <= 0 and hi >= 1
        assert fig.layout.yaxis.tickvals is None or max(fig.layout.yaxis.tickvals) == 1  # no "1.2" on a share


def test_a_log_axis_over_few_decades_labels_the_swept_values():
    """CAFE's fake σ from 0.3 to 10 was labelled "3 4 5 … 1 2 … 10" (plotly's leading digits); over two
    decades or more plotly's own decades stay, written as powers of ten (its SI default read "100μ")."""
    from leakdemo.dashboard.tradeoffs import strength_figure

    def rows(values):
        return [row(0, 0.95, 30.0, True)] + [{**row(i + 1, 0.95, 10.0), "dp_sigma": v} for i, v in enumerate(values)]
    x = strength_figure(rows([0.3, 0.721, 1.73, 4.16, 10.0]), ["dp_sigma"], True).layout.xaxis
    assert x.type == "log" and list(x.tickvals) == [0.3, 0.721, 1.73, 4.16, 10.0]
    assert list(x.ticktext) == ["0.3", "0.721", "1.73", "4.16", "10"]
    x = strength_figure(rows([1e-4, 1e-3, 1e-2, 1e-1, 1.0]), ["dp_sigma"], True).layout.xaxis
    assert x.type == "log" and x.tickvals is None and x.exponentformat == "power"


def test_the_strength_axis_spans_the_swept_values_before_any_defended_point_is_in():
    """A sweep's first point is often the undefended one: the empty log axis read 1, 100, 10k, 1M under σ from
    1e-4 to 1. The planned values frame it from the start."""
    from leakdemo.dashboard.tradeoffs import strength_figure
    only_clean = [row(0, 0.95, 90.0, True)]
    x = strength_figure(only_clean, ["dp_sigma"], True, planned=(1e-4, 1e-3, 1e-2, 0.1, 1.0)).layout.xaxis
    assert -4.3 < x.range[0] < -4 and 0 < x.range[1] < 0.3 and x.exponentformat == "power"
    x = strength_figure(only_clean, ["top_k"], False, planned=(1, 2, 5, 10)).layout.xaxis
    assert list(x.tickvals) == [1, 2, 5, 10] and x.range[0] < 1 and x.range[1] > 10
    # ... and while the others arrive: sweep-steps-dlm-plus's first point, local steps = 1, stood alone in the
    # middle of an axis that read "1", and moved as each point came in
    first = [{**row(1, 0.95, 97.0), "dp_sigma": None, "local_steps": 1}]
    x = strength_figure(first, ["local_steps"], True, planned=(1, 2, 4, 8)).layout.xaxis
    assert list(x.tickvals) == [1, 2, 4, 8] and x.range[0] < 0 and x.range[1] > math.log10(8)
    done = first + [{**row(i + 2, 0.95, 90.0 - 10 * i), "dp_sigma": None, "local_steps": k}
                    for i, k in enumerate((2, 4, 8))]
    assert strength_figure(done, ["local_steps"], True, planned=(1, 2, 4, 8)).layout.xaxis.range == x.range
    assert strength_figure(done, ["local_steps"], True).layout.xaxis.range is None  # no plan (the CLI): plotly's


def test_a_few_linear_strengths_label_their_own_axis_and_the_baseline_label_stays_clear():
    """sweep-topk-pli's k = 1, 2, 5, 10 were labelled "5 10", and its "no defense" label sat on k = 10's point,
    which leaked as much as no defense at all."""
    from leakdemo.dashboard.tradeoffs import strength_figure

    def rows(ks, accs, clean):
        out = [{**row(0, 1.0, 15.0, True), "top_k": None}] + [{**row(i + 1, 1.0, 15.0), "top_k": k}
                                                               for i, k in enumerate(ks)]
        for r, acc in zip(out, [clean] + accs):
            r["attack_accuracy"], r["psnr_range"] = acc, None
        return out
    fig = strength_figure(rows([1, 2, 5, 10], [0.2, 0.4, 0.6, 0.85], 0.8), ["top_k"], False)
    assert list(fig.layout.xaxis.tickvals) == [1, 2, 5, 10] and list(fig.layout.xaxis.ticktext) == ["1", "2", "5", "10"]
    label = next(a for a in fig.layout.annotations if a.text == "no defense")
    # the curve ends on the line at the right and far below it at the left: the label goes above the line, left
    assert (label.x, label.xanchor, label.yanchor) == (0, "left", "bottom")
    fig = strength_figure(rows([1, 2, 5, 10], [0.9, 0.6, 0.3, 0.1], 0.8), ["top_k"], False)
    label = next(a for a in fig.layout.annotations if a.text == "no defense")
    assert (label.x, label.xanchor, label.yanchor) == (1, "right", "bottom")  # a defense that works: as before
    fig = strength_figure(rows([0, 300, 2000], [0.9, 0.6, 0.3], 0.8), ["top_k"], False)  # warm-up steps, say
    assert list(fig.layout.xaxis.ticktext) == ["0", "300", "2000"]  # not "2e+03"
    # values too crowded to label one by one keep plotly's own ticks (pruning's 0.1, 0.2, 0.3 … stood on end)
    fig = strength_figure(rows([0, 0.01, 0.5, 1], [0.9, 0.6, 0.3, 0.1], 0.8), ["top_k"], False)
    assert fig.layout.xaxis.tickvals is None
    fig = strength_figure(rows([0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 0.99], [0.9] * 7, 0.8), ["top_k"], False)
    assert fig.layout.xaxis.tickvals is None


def test_the_recognisable_line_is_labelled_where_no_curve_crosses_it():
    """sweep-prune-dlg falls through 20 dB in the chart's left half; its label sat on the falling curve."""
    from leakdemo.dashboard.tradeoffs import strength_figure

    rows = [row(0, 0.96, 91.6, True)] + [{**row(i + 1, 0.95, p), "dp_sigma": None, "prune_ratio": r}
                                         for i, (r, p) in enumerate(zip([0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 0.99],
                                                                        [38.2, 30.7, 24.7, 16.5, 10.5, 6.3, 5.0]))]
    rows[0]["prune_ratio"] = None
    fig = strength_figure(rows, ["prune_ratio"], False)
    labels = {a.text: a for a in fig.layout.annotations if a.text in ("20 dB", "no defense")}
    label = labels["20 dB"]
    # on the right, below the line as it prefers: the curve is down at 5–6 dB there, and crosses at the left
    assert (label.x, label.xanchor, label.yanchor, label.y) == (1, "right", "top", 20)
    assert label.bgcolor  # and readable where the utility line crosses it
    assert labels["no defense"].y == 91.6 and labels["no defense"].bgcolor  # each label on its own line


def test_the_labels_keep_clear_of_the_federations_dashed_lines():
    """sweep-dp-dlg: the federation's accuracy (dashed, right axis) runs along the top at about 0.95 — where
    "no defense" sat, on its markers — then falls through 20 dB at the right, where "20 dB" sat below the line
    on the dropping curves. The labels go where neither the attack's curves nor the dashed lines pass."""
    from leakdemo.dashboard.tradeoffs import strength_figure

    sigmas = [1e-4, 3.728e-4, 1.389e-3, 5.179e-3, 1.931e-2, 7.197e-2, 0.2683, 1.0]  # the gallery's recording
    runs = {0.0: ([58.5, 47.1, 35.9, 25.0, 15.1, 5.5, 4.7, 4.8], [0.949, 0.951, 0.949, 0.956, 0.951, 0.958, 0.729, 0.124]),
            4.0: ([49.7, 38.1, 27.2, 17.1, 6.2, 4.8, 4.7, 4.5], [0.967, 0.967, 0.964, 0.967, 0.964, 0.958, 0.836, 0.138])}
    rows = [{**row(0, 0.951, 91.6, True), "dp_clip": None}]
    for clip, (psnr, acc) in runs.items():
        rows += [{**row(len(rows), a, p), "dp_sigma": s, "dp_clip": clip} for s, p, a in zip(sigmas, psnr, acc)]
    fig = strength_figure(rows, ["dp_sigma", "dp_clip"], True)
    labels = {a.text: a for a in fig.layout.annotations if a.text in ("20 dB", "no defense")}
    # below the baseline at the left: the dashed lines' markers at 0.95 lie above it, the attack's curves far below
    assert (labels["no defense"].x, labels["no defense"].yanchor) == (0, "top")
    # below 20 dB at the far left, as it prefers: the attack's curves are still at 50–58 dB there (they cross 20 dB
    # in the middle), and the dashed lines run along the top until they fall at the far right
    assert (labels["20 dB"].x, labels["20 dB"].yanchor) == (0, "top")
    # on a projector the label covers a tenth of the plot, not half: the dashed lines' last drop runs through
    # its right end, while the left end lies clear between the attack's curves high above and nothing below
    fig = strength_figure(rows, ["dp_sigma", "dp_clip"], True, plot_px=850, char_px=9)
    label = next(a for a in fig.layout.annotations if a.text == "20 dB: recognisable")
    assert (label.x, label.yanchor) == (0, "top")
    lo, hi = fig.layout.yaxis.range  # set, so the labels' placement and the dashed lines' heights match the chart
    assert lo == 0 and hi == pytest.approx(91.6 * 1.1)


def test_the_recognisable_line_keeps_its_label_short_where_the_chart_is_narrow():
    """The page's narrowest side-by-side plot is ~210 px: "20 dB: recognisable" covered over half of it
    and lay across the curves. There the line says "20 dB" and the subtitle says what it means; a projector's
    wide chart keeps the whole label and the one-line subtitle."""
    from leakdemo.dashboard.tradeoffs import NARROW_PLOT_PX, CHAR_PX, strength_figure

    rows = [{**row(0, 0.951, 91.6, True), "dp_sigma": None}] + [
        {**row(i + 1, 0.95, p), "dp_sigma": s} for i, (s, p) in enumerate(zip([1e-3, 1e-2, 1e-1, 1.0], [50, 30, 12, 5]))]
    page = strength_figure(rows, ["dp_sigma"], True)
    texts = [a.text for a in page.layout.annotations]
    assert "20 dB" in texts and "20 dB: recognisable" not in texts
    assert CHAR_PX * len("20 dB") <= 0.25 * NARROW_PLOT_PX
    assert page.layout.title.subtitle.text.endswith("<br>above 20 dB: recognisable")
    assert page.layout.margin.t > 70  # room for the subtitle's second line
    wide = strength_figure(rows, ["dp_sigma"], True, plot_px=850, char_px=9)
    assert "20 dB: recognisable" in [a.text for a in wide.layout.annotations]
    assert "<br>" not in wide.layout.title.subtitle.text


def test_the_utility_axis_title_wraps_on_the_privacy_chart():
    """"federation's accuracy (held-out digits)" ran past the half-width scatter on a 1024-px laptop."""
    from leakdemo.dashboard.tradeoffs import tradeoff_figure

    rows = [{**row(0, 0.951, 91.6, True), "dp_sigma": None}, {**row(1, 0.95, 30.0), "dp_sigma": 0.01}]
    assert tradeoff_figure(rows, ["dp_sigma"]).layout.xaxis.title.text == "federation's accuracy<br>(held-out digits)"


def test_an_accuracy_axis_stays_within_zero_and_one():
    """Two equal accuracies once spread the utility axis over 0.33–1.69; an accuracy is never above 1."""
    from leakdemo.dashboard.tradeoffs import strength_figure

    def row(i, acc, psnr, undefended=False, **extra):
        return {"index": i, "label": "no defense" if undefended else f"batch_size={i}", "undefended": undefended,
                "batch_size": None if undefended else i, "runs": 1, "failed": 0, "psnr": psnr, "test_accuracy": acc,
                **extra}
    rows = [row(0, 0.9645, 85.6, True), row(1, 0.9645, 20.2), row(2, 0.9645, 10.2)]
    lo, hi = strength_figure(rows, ["batch_size"], False).layout.yaxis2.range
    assert 0.85 < lo < 0.9645 < hi <= 1.0
    rows = [row(0, 0.99, 85.6, True), row(1, 0.98, 30.0), row(2, 0.12, 8.0)]
    lo, hi = strength_figure(rows, ["batch_size"], False).layout.yaxis2.range
    assert lo < 0.12 and 0.99 < hi <= 1.0
    # a utility of 1.0 sits on the axis's top edge (sweep-noise-pli): its markers are drawn whole, not halved
    full = [row(0, 1.0, 85.6, True), row(1, 1.0, 20.2), row(2, 1.0, 10.2)]
    fig = strength_figure(full, ["batch_size"], False)
    assert fig.layout.yaxis2.range[1] == 1.0 and all(t.cliponaxis is False for t in fig.data)
    loss = [dict(r, test_accuracy=None, training_loss=v) for r, v in zip(rows, (0.4, 0.5, 2.3))]
    lo, hi = strength_figure(loss, ["batch_size"], False).layout.yaxis2.range
    assert 0.2 < lo < 0.4 and 2.3 < hi < 2.5


def test_a_loss_that_a_defense_hardly_moves_stays_a_small_step_on_the_charts(tmp_path):
    """cafe against pruning: training loss 0.3903, 0.3904, 0.3917 filled the utility axis's whole height (the
    libraries' own ranges), and pruning half the gradient read as a steep cost. The axis spans at least a tenth
    of the loss, on the page's two charts and in tradeoff.png."""
    from leakdemo.dashboard.tradeoffs import strength_figure, tradeoff_figure
    from leakdemo.tradeoff import utility_range

    def loss_row(i, loss, psnr, pictures=True):
        r = {**row(i, None, psnr, i == 0), "training_loss": loss}
        return r if pictures else {**r, "thumbnail": None}
    rows = [loss_row(0, 0.3903, 12.6), loss_row(1, 0.3904, 12.6), loss_row(5, 0.3917, 10.9)]
    bare = [loss_row(r["index"], r["training_loss"], r["psnr"], pictures=False) for r in rows]
    for lo, hi in (strength_figure(rows, ["dp_sigma"], False).layout.yaxis2.range,
                   tradeoff_figure(rows, ["dp_sigma"]).layout.xaxis.range,
                   tradeoff_figure(bare, ["dp_sigma"]).layout.xaxis.range, utility_range(rows, "training_loss")):
        assert lo < 0.3903 and 0.3917 < hi and hi - lo >= 0.039, (lo, hi)
    assert utility_range([loss_row(0, 0.0, 1), loss_row(1, 0.0001, 1)], "training_loss") == \
        [0.0, pytest.approx(0.00505)]  # a loss near 0: the axis spans 0.01 at least, and stops at 0


def test_points_that_will_run_nothing_are_said_before_the_sweep_runs():
    """`clients=1..20:5` on pli-digits: the page said "5 points" and Run ran one, then showed four failed
    rows. The points a run would refuse are named before Run, with why; Run stays offered for the others."""
    at = page(sweep="custom", preset="pli-digits", defense="none", vary="clients=1..20:5")
    assert not at.exception and not at.error and not at.button[0].disabled
    assert [w.value for w in at.warning] == [
        "4 of 5 swept points will run nothing (their rows will say so), at clients=6, 10, 15, 20: clients: each "
        "client holds at least one target class: at most target_classes (5); got 6"]
    at.text_input(key="t_vary").set_value("clients=1..5:5").run()
    assert not at.exception and not at.warning
    at.text_input(key="t_vary").set_value("clients=3").run()  # one point, in the singular ("1 points" before)
    assert "— 1 point × 1 seed = 1 run. " in texts(at), texts(at)


def test_failed_points_say_why():
    from leakdemo.dashboard.tradeoffs import failure_lines
    from leakdemo.scenario import from_preset
    from leakdemo.sweep import Sweep, parse_axis

    sweep = Sweep(from_preset("dlg"), [parse_axis("batch_size=1,30", from_preset("dlg"))], workers=1)
    sweep.tasks()  # batch 30 of the 23 photos is refused here, before any run
    rows = [{"label": p.label, "runs": 0, "failed": len(p.runs), "errors": [r["error"] for r in p.runs],
             **p.values} for p in sweep.points]
    assert failure_lines(rows) == ("**batch_size=30**: 1 of 1 run failed — batch_size: must be at most 23 for "
                                   "data=samples, got 30")
    many = [dict(rows[1], label=f"p{i}") for i in range(7)]
    assert failure_lines(many).count("  \n") == 5 and failure_lines(many).endswith("2 more: see the table")
    assert failure_lines(rows[:1]) is None
    # named as the sidebar and the table name the point, where the page knows the sweep's axes
    assert failure_lines(rows, ["batch_size"], from_preset("dlg").params).startswith("**batch size = 30**: 1 of 1")


def test_a_fresh_install_draws_the_recorded_sweep_at_once(tmp_path, monkeypatch):
    """The built-in sweeps' runs ship with the gallery: the default's chart is there before Run sweep, and says
    so; so is any other built-in sweep's."""
    monkeypatch.setenv("LEAKDEMO_STORE", str(tmp_path / "empty.sqlite"))  # nothing computed on this machine
    import leakdemo.tradeoff
    drawn = []  # the tradeoff.png download's drawing: what it was told
    monkeypatch.setattr(leakdemo.tradeoff, "tradeoff_png", lambda *a, **k: drawn.append((a, k)) or b"\x89PNG")
    at = page()
    assert not at.exception and not at.error
    assert "Recorded with the gallery" in " ".join(i.value for i in at.info)
    assert len(at.get("plotly_chart")) == 2  # privacy/utility by strength, and the trade-off
    # the files the CLI's --out writes, strip.png included (the page offered every one but the picture people remember)
    assert [b.proto.label for b in at.get("download_button")] == ["sweep.csv", "sweep.json", "tradeoff.png", "strip.png"]
    assert any("Recorded: 51 runs, 17 points, from the gallery" in str(p.proto) for p in at.get("progress"))
    assert not at.button[0].disabled and at.button[1].disabled  # Run sweep recomputes here; nothing to stop
    import json
    chart = json.loads(at.get("plotly_chart")[0].proto.spec)  # the swept settings in the sidebar's words
    assert [t["name"] for t in chart["data"] if t.get("showlegend") is not False] == ["clip norm off", "clip norm = 4"]
    assert chart["layout"]["xaxis"]["title"]["text"] == "noise σ (dp_sigma)"
    assert ["clip norm off", "clip norm = 4"] == [c.value for c in at.caption if c.value.startswith("clip norm")]
    # a point's hover on the privacy-utility chart names it as the table does, not by its code names
    hovers = [h for t in json.loads(at.get("plotly_chart")[1].proto.spec)["data"] for h in t.get("hovertemplate") or []]
    assert any(h.startswith("<b>noise σ = 0.000373, clip norm = 4</b>") for h in hovers)
    assert any("<br>federation's accuracy 96.4%<br>ε = 1.82e7 (δ = 1e-5)<br>" in h for h in hovers)  # as the table
    assert any(h.startswith("<b>no defense</b>") for h in hovers) and not any("dp_sigma" in h for h in hovers)
    assert "The reconstruction as the defense grows" in [h.value for h in at.subheader]
    assert any(c.value.startswith("Left to right: noise σ (dp_sigma).") for c in at.caption)
    assert not any("is one figure" in c.value for c in at.caption)  # noise on the gradients does cost the federation
    assert not any(c.value.startswith("Numbers per unknown") for c in at.caption)  # noise leaves the count as it is
    # the table names its points in the same words and says once what every point shares (its privacy column
    # ran off a 1280-px screen's edge beside a runs, a failed and a without-defense column the same on every row)
    table = at.dataframe[0].value
    assert list(table["label"][:3]) == ["no defense", "noise σ = 0.0001, clip norm off", "noise σ = 0.0001, clip norm = 4"]
    assert "noise σ = 0.000373, clip norm off" in list(table["label"])  # as the strip writes it, not 0.0003728
    assert not {"runs", "failed", "clean_test_accuracy"} & set(table.columns)
    assert table["privacy"][2] == "ε = 3.52e9 (δ = 1e-5)"  # not 3.52e+09 (δ = 1e-05)
    assert table["privacy"][4] == "ε = 2.53e8 (δ = 1e-5)"  # not 253274256, nine digits for a three-digit figure
    # LPIPS stays a number, so sorting the column orders it (as text, "< 0.001" fell among the figures at
    # random), and reads as the Lab words it: the undefended photo "< 0.001", not "0.000"
    assert table["lpips"].dtype.kind == "f" and table["lpips"][0] < 0.001
    from streamlit import dataframe_util
    shown = dataframe_util.convert_arrow_bytes_to_pandas_df(at.dataframe[0].proto.arrow_data.styler.display_values)
    assert list(shown["lpips"][:2]) == ["< 0.001", "< 0.001"] and "0.036" in list(shown["lpips"])
    assert "-0.000" not in [f"{v:.3f}" for v in table["ssim"]]  # the grid's "%.3f" of σ = 1's SSIM of -0.0004
    assert ("Medians over 3 runs a point, none failed; the federation's accuracy without the defense: 95.11%."
            in [c.value for c in at.caption])
    # every built-in sweep ships: choosing another draws it at once too
    at.selectbox(key="t_sweep").set_value("sweep-prune-dlg").run()
    assert not at.exception and len(at.get("plotly_chart")) == 2
    assert any("Recorded: 24 runs, 8 points, from the gallery" in str(p.proto) for p in at.get("progress"))
    # a protocol knob's sweep has no undefended point, and says so; batch sizes 1…16 on a log axis
    at.selectbox(key="t_sweep").set_value("sweep-batch-dlg").run()
    assert not at.exception and len(at.get("plotly_chart")) == 2
    assert "— 5 points × 3 seeds = 15 runs" in texts(at)
    chart = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert chart["layout"]["xaxis"]["type"] == "log" and chart["layout"]["xaxis"]["title"]["text"].endswith("(batch_size)")
    assert "The reconstruction against batch size" in [h.value for h in at.subheader]  # the knob, not "the defense"
    assert chart["layout"]["title"]["text"] == "Leakage and utility by batch size"
    # its utility is one figure: the federation's training never takes the attacked client's batch size — said
    assert any(c.value.startswith("The federation's accuracy is one figure at every point: its training does not "
                                  "take the batch size") for c in at.caption)
    # and why DLG gives out at 16: the LeNet's gradient then holds barely one number per unknown pixel value
    assert any(c.value.startswith("Numbers per unknown pixel value in the LeNet's gradient, by batch size "
                                  "(batch_size): 1: 10.97, 2: 5.68, 4: 3.03, 8: 1.70, 16: 1.04.") for c in at.caption)
    # and so does the tradeoff.png it offers (drawn without the sweep's knob or this line before), as the CLI's
    assert drawn and drawn[-1][1]["one_figure"] is True and drawn[-1][1]["base"]["defense"] == "none"
    assert drawn[0][1]["one_figure"] is False  # the DP sweep's utility does move
    # a sweep the gallery does not hold (a custom one) waits for Run sweep
    at.selectbox(key="t_sweep").set_value("custom").run()
    assert not at.exception and not at.get("plotly_chart")
    assert any("Press **Run sweep**" in i.value for i in at.info)


def test_run_sweep_then_stop_before_a_point_brings_the_recorded_chart_back(tmp_path, monkeypatch):
    """A presenter presses Run sweep on the recorded DP sweep, sees it will take minutes, and presses Stop: the
    page was left with "Stopped: 0/51 runs" and no chart, and the recorded one did not come back all session."""
    monkeypatch.setenv("LEAKDEMO_STORE", str(tmp_path / "empty.sqlite"))
    at = page()
    assert any("Recorded: 51 runs" in str(p.proto) for p in at.get("progress"))
    at.button[0].click().run()  # Run sweep: the first batch of DLG runs takes tens of seconds on a laptop
    assert not at.get("plotly_chart") and not at.button[1].disabled
    at.button[1].click().run()  # Stop
    deadline = time.time() + 60
    while time.time() < deadline and not any("Recorded: 51 runs" in str(p.proto) for p in at.get("progress")):
        time.sleep(0.5)
        at.run()
    assert not at.exception
    assert any("Recorded: 51 runs, 17 points, from the gallery" in str(p.proto) for p in at.get("progress"))
    assert len(at.get("plotly_chart")) == 2 and at.button[1].disabled


def test_the_strip_keeps_a_sweeps_pictures_in_even_rows():
    """Seven strengths with the private image and the undefended point are nine pictures: a row of eight left
    the strongest alone on a second row."""
    from leakdemo.dashboard.tradeoffs import strip_row_length
    assert [strip_row_length(n) for n in (3, 8, 9, 10, 11, 17, 20, 21)] == [3, 8, 9, 10, 6, 9, 10, 7]


def test_a_sweep_shown_under_another_choice_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("LEAKDEMO_STORE", str(tmp_path / "empty.sqlite"))
    at = page(sweep="custom", preset="dlg", defense="prune", vary="prune_ratio=0.5,0.9", image_size="16",
              iterations="3")
    at.button[0].click().run()  # Run sweep: three points of three DLG iterations
    deadline = time.time() + 240
    while time.time() < deadline and not any("Finished" in str(p.proto) for p in at.get("progress")):
        time.sleep(1)
        at.run()
    assert at.get("plotly_chart") and not at.exception
    assert not any("Showing the sweep last run" in c.value for c in at.caption)
    at.text_input(key="t_vary").set_value("prune_ratio=0..0.5:2").run()  # another sweep described, not run
    assert any("Showing the sweep last run" in c.value for c in at.caption)


def test_the_strength_chart_names_each_series_once():
    """Two series (clipped and not) had four legend entries, "leakage dp_clip=0.0" and so on, which ran over
    each other on a 1024-px laptop: now one per series, by colour; the subtitle tells solid from dashed."""
    from leakdemo.dashboard.tradeoffs import strength_figure

    rows = [row(0, 0.95, 90.0, True)] + [{**row(i + 1, 0.9, 30.0 - i), "dp_clip": c}
                                         for i, c in enumerate([0.0, 0.0, 4.0, 4.0])]
    fig = strength_figure(rows, ["dp_sigma", "dp_clip"], True)
    assert [t.name for t in fig.data if t.showlegend is not False] == ["dp_clip = 0", "dp_clip = 4"]
    assert "solid" in fig.layout.title.subtitle.text and "dashed" in fig.layout.title.subtitle.text
    # given the sweep's scenario, the series and the axis read as the sidebar names them, not as codes
    from leakdemo.dashboard.tradeoffs import tradeoff_figure
    from leakdemo.scenario import from_preset
    base = from_preset("dlg", {"defense": "dp-gaussian"}).params
    fig = strength_figure(rows, ["dp_sigma", "dp_clip"], True, base=base)
    assert [t.name for t in fig.data if t.showlegend is not False] == ["clip norm off", "clip norm = 4"]
    assert fig.layout.xaxis.title.text == "noise σ (dp_sigma)"
    assert [t.name for t in tradeoff_figure(rows, ["dp_sigma", "dp_clip"], base).data][:3] == \
        ["no defense", "clip norm off", "clip norm = 4"]  # the undefended star first, drawn under the others
    laplace = from_preset("dlg", {"defense": "dp-laplace"}).params  # the same code, another defense's name
    assert strength_figure(rows, ["dp_sigma"], True, base=laplace).layout.xaxis.title.text == "noise scale b (dp_sigma)"
    one = strength_figure(rows[:3], ["dp_sigma"], True)
    assert [t.name for t in one.data] == ["leakage", "utility"]


def test_the_sweep_s_clock_and_eta_run_on_between_points():
    """A slow last point (DLM+ replaying 8 local steps) sends nothing for a minute or more: the progress line read
    "done in 89 s, about 64 s left" for 80 s, as if the sweep had hung. The clock runs on from the latest event,
    and the ETA counts down from it, as the Lab's do."""
    import threading
    from leakdemo.dashboard.sweep_job import SweepJob
    from leakdemo.sweep import RunDone, SweepFinished, SweepStarted
    gate = threading.Event()

    class Slow:  # a sweep that reports one run, then computes on
        def events(self):
            yield SweepStarted(points=[], runs=4, cached=0, backend="local")
            yield RunDone(point=0, done_runs=1, total_runs=4, seconds=1.0, eta=60.0)
            gate.wait(30)
            yield SweepFinished(rows=[], status="stopped", seconds=21.0)

        def stop(self):
            gate.set()

    job = SweepJob(Slow())
    try:
        for _ in range(100):
            if job.done_runs == 1:
                break
            time.sleep(0.05)
        job.t0 -= 20  # as if that run had come back 20 s ago
        assert 19 < job.since_latest() < 22 and not job.done
    finally:
        job.stop()
        job.thread.join(5)
    assert job.since_latest() == 0.0  # ended: the clock stops


def test_the_page_says_what_a_run_would_warn_of_at_the_sweeps_points():
    """A link's ResNet under DLG: the Lab warns that DLG's objective rarely converges there, and so does the
    sweep, before minutes of runs that recover nothing; Run stays open (a warning, not an error)."""
    at = page(sweep="custom", preset="dlg", defense="prune", vary="prune_ratio=0..0.9:3", model="resnet")
    assert not at.exception and not at.error
    assert [w.value for w in at.warning] == ["DLG's L2 objective rarely converges on ReLU/BatchNorm nets; try invgrad."]
    assert not at.button[0].disabled
    assert not page(sweep="custom", preset="dlg", defense="prune", vary="prune_ratio=0..0.9:3").warning
    # a link's value that no point reads is said as `sweep --set` says it; one that is read is not
    at = page(sweep="custom", preset="dlg", defense="prune", vary="prune_ratio=0..0.9:3", tv_dataset="SVHN",
              iterations="100")
    assert [w.value for w in at.warning] == ["tv_dataset=SVHN changes nothing: it is read only when data=torchvision "
                                             "(here data=samples)"]


def test_a_dp_sweep_draws_its_leakage_against_the_formal_epsilon_too(tmp_path, monkeypatch):
    """DP's usual chart, which only the command line drew (--x-axis epsilon): the points with a formal ε placed at
    it, the others said, each series in its own colour still; a sweep without an ε does not offer it."""
    import json
    monkeypatch.setenv("LEAKDEMO_STORE", str(tmp_path / "empty.sqlite"))
    at = page()
    x = at.segmented_control(key="t_x")
    assert x.value == "strength" and x.options == ["noise σ", "formal ε"]
    before = json.loads(at.get("plotly_chart")[0].proto.spec)
    purple = next(t["line"]["color"] for t in before["data"] if t.get("name") == "clip norm = 4")
    x.set_value("epsilon").run()
    assert not at.exception
    chart = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert chart["layout"]["title"]["text"] == "Leakage and utility by formal ε"
    assert chart["layout"]["xaxis"]["title"]["text"] == "formal ε (δ = 1e-5; lower is more private)"
    assert chart["layout"]["xaxis"]["type"] == "log"
    attack = [t for t in chart["data"] if t.get("name") == "clip norm = 4" and t["line"].get("dash") is None]
    assert len(attack) == 1 and attack[0]["line"]["color"] == purple  # the clipped series only, as purple as before
    eps, psnr = attack[0]["x"], attack[0]["y"]
    assert len(eps) == 8 and eps == sorted(eps) and 50 < eps[0] < 100 and eps[-1] > 1e9  # σ = 1: ε = 68.6
    assert psnr[0] < 10 and psnr[-1] > 40  # more private (lower ε): less recovered
    assert any(c.value.startswith("8 of 16 defended points have a formal ε") for c in at.caption)
    # and on a projector as drawn here: the presenter's scene against ε too
    links = [(b.proto.label, b.proto.url) for b in at.get("link_button")]
    assert ("Present this chart", "./?present=1&scenes=sweep:sweep-dp-dlg@epsilon") in links
    show = AppTest.from_file(os.path.join(os.path.dirname(PAGE), "4_Present.py"), default_timeout=120)
    show.query_params["scenes"] = "sweep:sweep-dp-dlg@epsilon,sweep:sweep-prune-dlg@epsilon"
    show.run()
    assert not show.exception and not show.warning
    assert show.title[0].value == "What a formal guarantee buys: leakage and utility by ε"
    shown = json.loads(show.get("plotly_chart")[0].proto.spec)
    assert shown["layout"]["xaxis"]["title"]["text"] == "formal ε (δ = 1e-5; lower is more private)"
    assert [o for o in show.multiselect(key="p_pick").options if o.endswith("ε")] == [
        "Trade-off chart: DLG against Gaussian noise on the gradient (FedSGD), with and without clipping, against the "
        "formal ε", "Trade-off chart: DLG against gradient pruning (FedSGD), against the formal ε"]
    show.button[1].click().run()  # Next: pruning has no ε: it says so under the chart it can draw, not on an empty slide
    assert not show.exception and not show.info
    assert show.title[0].value == "What a defense costs: privacy against utility"
    shown = json.loads(show.get("plotly_chart")[0].proto.spec)
    assert "ε" not in shown["layout"]["xaxis"]["title"]["text"] and shown["data"]
    assert any("No point of this sweep has a formal ε" in m.value and "against the defense's strength" in m.value
               for m in show.markdown)
    at.selectbox(key="t_sweep").set_value("sweep-prune-dlg").run()  # pruning: no formal guarantee, no choice
    assert not at.exception and not at.segmented_control
    chart = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert "ε" not in chart["layout"]["xaxis"]["title"]["text"]


def test_a_sweep_is_presented_from_its_own_link_custom_ones_too(tmp_path, monkeypatch):
    """Present this chart: a built-in sweep by name; a custom one carried whole in the scene's code (the presenter
    offered only the built-in ones), read back as the page would check it; a code that does not read is refused."""
    from leakdemo.dashboard.tradeoffs import custom_sweep, presenter_code
    from leakdemo.errors import LeakdemoError
    monkeypatch.setenv("LEAKDEMO_STORE", str(tmp_path / "empty.sqlite"))
    at = page()
    links = [(b.proto.label, b.proto.url) for b in at.get("link_button")]
    assert ("Present this chart", "./?present=1&scenes=sweep:sweep-dp-dlg") in links
    spec = {"sweep": "custom", "preset": "idlg", "defense": "prune", "vary": "prune_ratio=0.3,0.6,0.9", "seeds": 2,
            "image_size": "16"}
    code = presenter_code(spec)
    assert code.startswith("sweep:custom:") and "," not in code and "&" not in code  # one scene in the link's list
    s = custom_sweep(code.split(":", 2)[2])
    assert (s.base, s.vary, s.seeds) == ("idlg", ["prune_ratio=0.3,0.6,0.9"], 2)
    assert s.set == {"image_size": "16", "defense": "prune"} and s.title.startswith("iDLG against magnitude pruning")
    with pytest.raises(LeakdemoError, match="not a custom sweep's code"):
        custom_sweep("bm90IGpzb24")  # "not json"
    bad = presenter_code({**spec, "vary": "prune_ratio=2"})  # out of range: the page's own message
    with pytest.raises(LeakdemoError, match="prune_ratio"):
        custom_sweep(bad.split(":", 2)[2])
    # the presenter: its scene titled from the code, and what to do while the store lacks its runs
    show = AppTest.from_file(os.path.join(os.path.dirname(PAGE), "4_Present.py"), default_timeout=120)
    show.query_params["scenes"] = f"{code},sweep:custom:xyz,{bad}"
    show.run()
    assert not show.exception
    warned = " ".join(w.value for w in show.warning)
    assert "scenes=sweep:custom:xyz… (a custom sweep this version cannot draw: not a custom sweep's code" in warned
    assert "(a custom sweep this version cannot draw: prune_ratio" in warned, warned
    assert any(m.value.startswith('<div class="ld-why">iDLG against magnitude pruning') for m in show.markdown)
    assert any("The run store lacks 8 runs of this sweep" in i.value for i in show.info), [i.value for i in show.info]
    assert show.multiselect(key="p_pick").value == [code]


def test_a_second_range_sweeps_a_grid_as_the_command_line_does(tmp_path, monkeypatch):
    """Which clip norm, at which noise: the command line took a second --vary and drew one line per value, the
    page only one range. A second range after ';' is that grid, here and in the presenter's scene of it."""
    from leakdemo.dashboard.tradeoffs import build, custom_sweep, presenter_code
    monkeypatch.setenv("LEAKDEMO_STORE", str(tmp_path / "empty.sqlite"))
    vary = "dp_sigma=1e-4..1:3; dp_clip=0,4"
    at = page(sweep="custom", preset="dlg", defense="dp-gaussian", vary=vary, seeds="2")
    assert not at.exception and not at.error and not at.button[0].disabled
    assert "7 points (the undefended one included) × 2 seeds = 14 runs" in texts(at)
    assert "`dp_clip` ∈ {0, 4}" in texts(at)
    spec = {"sweep": "custom", "preset": "dlg", "defense": "dp-gaussian", "vary": vary, "seeds": 2}
    sweep, title, _ = build(spec)
    assert [a.name for a in sweep.axes] == ["dp_sigma", "dp_clip"] and title.startswith("DLG against Gaussian noise")
    assert sorted({(pt.values.get("dp_sigma"), pt.values.get("dp_clip")) for pt in sweep.points if not pt.undefended}) \
        == [(s, c) for s in (0.0001, 0.01, 1.0) for c in (0.0, 4.0)]
    # a protocol's knobs make a grid too, without a defense
    knobs, _, _ = build({**spec, "defense": "none", "vary": "batch_size=1,2,4; warmup_steps=0,100"})
    assert [(a.name, len(a.values)) for a in knobs.axes] == [("batch_size", 3), ("warmup_steps", 2)]
    # Present this chart: the scene's code carries both ranges
    assert custom_sweep(presenter_code(spec).split(":", 2)[2]).vary == ["dp_sigma=1e-4..1:3", "dp_clip=0,4"]


def test_a_finished_custom_sweep_joins_the_presenters_chooser(tmp_path, monkeypatch):
    """A talk built from one's own charts: each custom sweep came to the presenter only as a link of its own
    (Present this chart), to be merged by hand. One that finishes is now in the chooser, against ε too."""
    monkeypatch.setenv("LEAKDEMO_STORE", str(tmp_path / "empty.sqlite"))
    present = os.path.join(os.path.dirname(PAGE), "4_Present.py")
    before = AppTest.from_file(present, default_timeout=120).run()
    assert not [o for o in before.multiselect(key="p_pick").options if o.startswith("Custom trade-off chart")]
    at = page(sweep="custom", preset="dlg", defense="dp-gaussian", vary="dp_sigma=0.01,1; dp_clip=0,4",
              image_size="16", iterations="3")
    at.button[0].click().run()  # Run sweep: a grid of two noises by two clip norms, and the undefended run
    deadline = time.time() + 240
    while time.time() < deadline and not any("Finished" in str(p.proto) for p in at.get("progress")):
        time.sleep(1)
        at.run()
    assert not at.exception and at.get("plotly_chart")
    at.session_state["t_job"].thread.join(timeout=30)  # offered on the sweep's thread, once it has finished
    show = AppTest.from_file(present, default_timeout=120).run()
    mine = [o for o in show.multiselect(key="p_pick").options if o.startswith("Custom trade-off chart")]
    named = ("Custom trade-off chart: DLG against Gaussian noise (DP-style) · preset dlg · dp_sigma=0.01,1; dp_clip=0,4 "
             "· image_size=16, iterations=3")  # its settings: another sweep of DLG under noise has the same title
    assert mine == [named, named + ", against the formal ε"]
    from leakdemo.dashboard.tradeoffs import presenter_code
    show.multiselect(key="p_pick").set_value([presenter_code(at.session_state["t_job"].spec)]).run()
    assert not show.exception and not show.info
    assert show.title[0].value == "What a defense costs: privacy against utility"
    import json
    chart = json.loads(show.get("plotly_chart")[0].proto.spec)
    assert {t.get("name") for t in chart["data"]} >= {"clip norm off", "clip norm = 4"}
