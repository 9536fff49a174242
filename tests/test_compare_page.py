"""The Compare page and the gallery: recorded runs side by side, replayed without computing anything."""
import json
import os

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from leakdemo import milestones
from leakdemo.dashboard.compare import frame_at
from leakdemo.events import Finished, Started
from leakdemo.gallery import GALLERY, GALLERY_SWEEPS, SHOWCASES, open_gallery, showcase_rows
from leakdemo.scenario import from_preset
from leakdemo.store import RunStore, StoreError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, "pages", "3_Compare.py")


def page(**query):
    at = AppTest.from_file(PAGE, default_timeout=120)
    for k, v in query.items():
        at.query_params[k] = v
    return at.run()


def test_the_gallery_ships_every_showcase_and_opens_read_only():
    before = open(GALLERY, "rb").read()
    g = open_gallery()
    rows = showcase_rows(g)
    assert len(rows) == len(SHOWCASES) and all(r["status"] == "finished" for r in rows)
    assert [r["id"] for r in rows] == list(range(1, len(SHOWCASES) + 1))  # g1…g9, whatever else it holds
    assert os.path.getsize(GALLERY) < 8e6  # a few MB at most
    run = g.load(rows[0]["id"])
    assert len(run.keyframes) >= 8 and run.finished.images.shape[1:] == run.started.originals.shape[1:] or \
        run.finished.metrics.get("sample_ids") is not None
    by_preset = {r["preset"]: r for r in reversed(rows)}  # each preset's first showcase
    assert by_preset["cafe"]["psnr"] > 25 and by_preset["dlg"]["psnr"] > 30  # the showcases show the attack working
    assert open(GALLERY, "rb").read() == before  # reading never writes
    assert not os.path.exists(GALLERY + "-wal")


def test_a_machine_with_a_gpu_draws_the_gallery_s_recorded_sweeps_too(monkeypatch, tmp_path):
    """The gallery was recorded on a CPU; where `auto` means cuda the same scenarios are found there all the
    same (it is another machine's recording either way) — but this machine's own store keeps the devices apart."""
    from leakdemo import device
    from leakdemo.scenario import load
    from leakdemo.store import RunStore, scenario_key
    from leakdemo.sweep import Sweep, _from_store, parse_axis
    from leakdemo.sweeps import sweeps

    monkeypatch.setattr(device, "device_name", lambda choice: "cuda" if choice in ("auto", "cuda") else "cpu")
    spec = sweeps()["sweep-dp-dlg"]
    base = load(spec.base, spec.set)
    g = open_gallery()
    tasks = Sweep(base, [parse_axis(v, base) for v in spec.vary], seeds=spec.seeds, store=g).tasks()
    assert all(_from_store(g, t) is not None for t in tasks)
    # a copy of one recorded run in a store of this machine's own: recorded on the CPU, not served for cuda
    own = RunStore(str(tmp_path / "own.sqlite"))
    found = g.find_scenario(tasks[0].params, "cpu")
    run = g.load(found)
    own.record(scenario_key(tasks[0].params, "cpu"), "sweep", run.scenario, run.started, run.finished, [])
    assert own.find_scenario(tasks[0].params, "cpu") is not None
    assert own.find_scenario(tasks[0].params, "cuda") is None


def test_the_gallery_holds_every_run_of_every_built_in_sweep():
    """Each built-in sweep's chart draws at once on a fresh install — on the Trade-offs page and as a presenter
    scene — from the gallery's recording: every run of the sweep, with its utility, is found there (whatever
    code version recorded it), and what was recorded shows the defense at work."""
    from leakdemo.scenario import load
    from leakdemo.sweep import LOGIT_PROTOCOLS, Sweep, SweepFinished, _from_store, parse_axis, utility_of
    from leakdemo.sweeps import sweeps

    assert sorted(GALLERY_SWEEPS) == sorted(sweeps())  # a new built-in sweep is recorded too
    g = open_gallery()
    for name in GALLERY_SWEEPS:
        spec = sweeps()[name]
        base = load(spec.base, spec.set)
        sweep = Sweep(base, [parse_axis(v, base) for v in spec.vary], seeds=spec.seeds, store=g)
        tasks = sweep.tasks()
        assert tasks and all(_from_store(g, t) is not None for t in tasks), name
        rows = next(ev.rows for ev in sweep.events() if isinstance(ev, SweepFinished))  # nothing computed
        assert all(utility_of(r)[1] is not None and not r["failed"] for r in rows), name
        key = "attack_accuracy" if base["protocol"] in LOGIT_PROTOCOLS else "psnr"
        # the undefended point; a sweep of a protocol knob (batch size) has none: its weakest setting instead
        undefended = next((r for r in rows if r["undefended"]), rows[0])
        strongest = min(r[key] for r in rows if r is not undefended)
        if name == "sweep-topk-pli":  # the lesson of this one: even top-1 keeps what PLI needs
            assert strongest >= 0.6 and undefended[key] >= 0.7
        else:
            assert strongest < undefended[key] - (0.3 if key == "attack_accuracy" else 10), name
        if name == "sweep-batch-dlg":  # one image comes back; sixteen averaged into one gradient do not
            assert undefended["batch_size"] == 1 and undefended["psnr"] > 30 and strongest < 20
        if name == "sweep-steps-dlm-plus":  # a few local steps do not hide the photos from DLM+; eight blur them
            by = {r["local_steps"]: r["psnr"] for r in rows}
            assert by[1] > 40 and by[2] > 30 and by[8] < 20, by
        if name == "sweep-dp-dlg":  # the presenter's default chart: the attack works, then noise stops it
            assert undefended["psnr"] > 30 and undefended["test_accuracy"] > 0.9
            assert strongest < 15


def test_recording_the_sweeps_again_keeps_the_showcases(tmp_path, monkeypatch):
    """`record-gallery --sweeps-only`: the showcases stay as they were (with their replay), the sweeps' runs are
    recorded afresh and keep what their charts read — figures, originals, the last frame — without keyframes."""
    import sqlite3

    from leakdemo import gallery, sweeps
    tiny = sweeps.SweepSpec("sweep-tiny", "tiny", "", "dlg", {"image_size": 8, "iterations": 2, "defense": "prune"},
                            ["prune_ratio=0.5"], 1)
    monkeypatch.setattr(sweeps, "sweeps", lambda: {"sweep-tiny": tiny})
    monkeypatch.setattr(gallery, "GALLERY_SWEEPS", ("sweep-tiny",))
    out = str(tmp_path / "gallery.sqlite")
    gallery.record_sweeps(out, progress=lambda line: None)
    with sqlite3.connect(out) as conn:
        q = "SELECT r.source, i.kind, count(*) FROM runs r JOIN images i ON i.run_id = r.id GROUP BY r.source, i.kind"
        kinds = {(src, kind): n for src, kind, n in conn.execute(q)}
    with sqlite3.connect(GALLERY) as conn:
        shipped = {(src, kind): n for src, kind, n in conn.execute(q) if src == "gallery"}
    assert {k: n for k, n in kinds.items() if k[0] == "gallery"} == shipped and shipped[("gallery", "keyframe")]
    assert {k: n for k, n in kinds.items() if k[0] == "sweep"} == {("sweep", "final"): 2, ("sweep", "originals"): 2}
    g = RunStore(out, read_only=True, any_version=True)
    assert len(showcase_rows(g)) == len(SHOWCASES)


def test_recording_the_showcases_again_keeps_the_sweeps_and_the_scene_numbers(tmp_path, monkeypatch):
    """`record-gallery --showcases-only`: the showcases are recorded afresh under the ids their scenes name (g1 is
    id 1), each sweep run stays as it was, with its images and utility, so the shipped charts do not move."""
    import sqlite3

    from leakdemo import gallery
    shows = (gallery.Showcase("dlg", {"image_size": 8, "iterations": 2}, "tiny one"),
             gallery.Showcase("dlg", {"image_size": 8, "iterations": 3, "seed": 1}, "tiny two"))
    monkeypatch.setattr(gallery, "SHOWCASES", shows)
    out = str(tmp_path / "gallery.sqlite")
    gallery.record_showcases(out, progress=lambda line: None)

    def content(path, where):
        with sqlite3.connect(path) as conn:
            runs = conn.execute(f"SELECT id, key, created, psnr, finished, history FROM runs WHERE {where} "
                                "ORDER BY id").fetchall()
            images = conn.execute(f"SELECT run_id, kind, idx, png FROM images WHERE run_id IN (SELECT id FROM runs "
                                  f"WHERE {where}) ORDER BY run_id, kind, idx").fetchall()
            cache = conn.execute("SELECT * FROM cache ORDER BY kind, key").fetchall()
        return runs, images, cache
    assert content(out, "source = 'sweep'") == content(GALLERY, "source = 'sweep'")
    runs, images, _ = content(out, "source = 'gallery'")
    assert [r[0] for r in runs] == [1, 2] and all(r[2] > content(GALLERY, "id = 1")[0][0][2] for r in runs)
    assert {kind for _, kind, _, _ in images} >= {"originals", "final", "keyframe"}
    g = RunStore(out, read_only=True, any_version=True)
    assert [r["id"] for r in showcase_rows(g)] == [1, 2] and gallery.showcase_why(showcase_rows(g)[1]) == "Tiny two"
    assert g.load(2).scenario["params"]["iterations"] == 3 and g.load(2).keyframes
    assert not [f for f in os.listdir(tmp_path) if f != "gallery.sqlite"]  # nothing left behind


def test_recording_only_what_the_gallery_lacks_keeps_every_recorded_run(tmp_path, monkeypatch):
    """`record-gallery --missing`, for a new built-in sweep: the runs already recorded stay as they are (the
    shipped charts do not move), a run the new sweep shares with them is not computed again, and only its other
    runs are added — a second pass adds nothing."""
    import sqlite3

    from leakdemo import gallery, sweeps
    spec = lambda name, vary: sweeps.SweepSpec(name, name, "", "dlg", {"image_size": 8, "iterations": 2,  # noqa: E731
                                                                       "defense": "prune"}, [vary], 1)
    old, new = spec("sweep-old", "prune_ratio=0.5"), spec("sweep-new", "prune_ratio=0.5,0.9")
    monkeypatch.setattr(sweeps, "sweeps", lambda: {"sweep-old": old})
    monkeypatch.setattr(gallery, "GALLERY_SWEEPS", ("sweep-old",))
    first, second, third = (str(tmp_path / f"{n}.sqlite") for n in ("first", "second", "third"))
    gallery.record_sweeps(first, progress=lambda line: None)
    monkeypatch.setattr(sweeps, "sweeps", lambda: {"sweep-old": old, "sweep-new": new})
    monkeypatch.setattr(gallery, "GALLERY_SWEEPS", ("sweep-old", "sweep-new"))
    gallery.record_sweeps(second, progress=lambda line: None, source=first, missing=True)
    gallery.record_sweeps(third, progress=lambda line: None, source=second, missing=True)

    def sweep_runs(path):
        with sqlite3.connect(path) as conn:
            return dict(conn.execute("SELECT id, scenario FROM runs WHERE source = 'sweep'").fetchall())
    before, after = sweep_runs(first), sweep_runs(second)
    assert len(before) == 2 and all(after[i] == p for i, p in before.items())  # undefended and 0.5, kept
    added = [json.loads(p)["params"] for i, p in after.items() if i not in before]
    assert [p["prune_ratio"] for p in added] == [0.9]
    assert sweep_runs(third) == after


def test_a_read_only_store_refuses_what_is_not_ours(tmp_path):
    bad = tmp_path / "gallery.sqlite"
    bad.write_text("hello")
    with pytest.raises(StoreError, match="not a SQLite database"):
        RunStore(str(bad), read_only=True)
    with pytest.raises(StoreError, match="does not exist"):
        RunStore(str(tmp_path / "missing.sqlite"), read_only=True)


def test_frames_follow_the_share_of_the_run():
    img = [np.full((1, 4, 4, 3), v, np.float32) for v in (0.0, 0.5, 1.0)]
    started = Started({}, {}, img[0], ["a"], [0], 100, "cpu", "", 0.0)
    fin = Finished("finished", {"psnr_per_image": [1.0]}, img[2], 10.0, 100)
    from leakdemo.store import StoredRun
    run = StoredRun(1, 0.0, "cli", "v", {}, started, fin, [(0, img[0]), (50, img[1]), (90, img[1])])
    assert frame_at(run, 0.0)[0] == 0 and frame_at(run, 0.49)[0] == 0
    assert frame_at(run, 0.5)[0] == 50 and frame_at(run, 0.95)[0] == 90
    assert frame_at(run, 1.0) == (100, img[2])


def test_first_visit_shows_two_showcases_at_the_bare_address():
    at = page()
    assert not at.exception and not at.error
    picked = at.multiselect(key="c_runs").value
    assert len(picked) == 2 and all(p.startswith("g") for p in picked)
    # the bare address is this default, and stays bare: written on arrival, it cost Back an entry (shared.keep_link)
    assert "runs" not in at.query_params
    assert len(at.table) == 1 and at.button[0].label == "Play"
    # the runs as one picture for a slide: each run's grid.png (pictures and caption) side by side, in order
    assert [b.proto.label for b in at.get("download_button")] == ["comparison.png"]
    import io

    from PIL import Image

    from leakdemo.artifacts import comparison_png, grid_png, shown_originals
    runs = [open_gallery().load(int(ref[1:])) for ref in picked]
    parts = [(r.started.originals, r.finished, r.scenario["params"]) for r in runs]
    grids = [grid_png(shown_originals(o, f.metrics), f, p) for o, f, p in parts]
    both = np.asarray(Image.open(io.BytesIO(comparison_png(parts))).convert("RGB"))
    assert both.shape[0] == max(g.shape[0] for g in grids) and both.shape[1] > sum(g.shape[1] for g in grids)
    assert (both[:grids[0].shape[0], :grids[0].shape[1]] == grids[0]).all()
    assert (both[:grids[1].shape[0], -grids[1].shape[1]:] == grids[1]).all()


def test_a_shared_link_opens_its_runs_and_unknown_ids_are_reported():
    at = page(runs="g3,g5,r999")
    assert not at.exception
    assert at.multiselect(key="c_runs").value == ["g3", "g5"]
    assert any("r999" in w.value for w in at.warning)
    at = page(runs="r999")  # nothing of the link's left: the page says what it shows instead
    assert at.multiselect(key="c_runs").value == ["g1", "g2"]
    assert [w.value for w in at.warning] == ["Ignored from the link: runs=r999 (no such recorded run here; the page "
                                             "opens on two showcases instead)."]
    at = page(runs="g1,g1,g2,g3,g4,g5,g6")  # each run once; at most four side by side, the rest named
    assert at.multiselect(key="c_runs").value == ["g1", "g2", "g3", "g4"]
    assert [w.value for w in at.warning] == ["Ignored from the link: runs=g5,g6 (at most 4 runs side by side)."]
    at = page(runs=["g3", "g5"])  # the key once per run, as many sites write a list: both, not the last alone
    assert at.multiselect(key="c_runs").value == ["g3", "g5"] and not at.warning


def test_a_run_picked_or_dropped_in_the_picker_stays_and_the_link_follows():
    # the page read its link again on every run: a run added in the picker was taken back at once, since the
    # link still named the two runs before it
    at = page()
    at.multiselect(key="c_runs").select("g3").run()
    assert at.multiselect(key="c_runs").value == ["g1", "g2", "g3"] and not at.exception
    assert at.query_params["runs"] in ("g1,g2,g3", ["g1,g2,g3"])
    at.multiselect(key="c_runs").unselect("g1").run()
    assert at.multiselect(key="c_runs").value == ["g2", "g3"]
    assert at.query_params["runs"] in ("g2,g3", ["g2,g3"])


def test_a_link_names_your_run_as_runs_list_numbers_it(store_path):
    # `runs list` and `runs show 1` number a run 1; `?runs=1,2` opened two showcases, "no such recorded run here"
    run = open_gallery().load(1)
    rid = RunStore(str(store_path)).record("k", "cli", run.scenario, run.started, run.finished, run.keyframes)
    at = page(runs=f"{rid},G3")
    assert not at.exception and not at.warning
    assert at.multiselect(key="c_runs").value == [f"r{rid}", "g3"]
    assert at.query_params["runs"] in (f"r{rid},g3", [f"r{rid},g3"])  # the page's own link, in its own words
    at = page(runs="#999")
    assert [w.value for w in at.warning] == ["Ignored from the link: runs=r999 (no such recorded run here; the page "
                                             "opens on two showcases instead)."]
    from leakdemo.dashboard.compare import run_refs
    assert run_refs(["12, #4,g1", "R2,,x7"]) == ["r12", "r4", "g1", "r2", "x7"]


def test_a_run_deleted_while_it_is_compared_is_said_to_have_left(store_path):
    """`runs delete 12` in a terminal while the page compares run 12 with a showcase: the next rerun dropped it
    from the picker without a word, and the class saw one run where there had been two."""
    run = open_gallery().load(1)
    store = RunStore(str(store_path))
    rid = store.record("k", "cli", run.scenario, run.started, run.finished, run.keyframes)
    at = page(runs=f"r{rid},g1")
    assert not at.warning and at.multiselect(key="c_runs").value == [f"r{rid}", "g1"]
    store.delete(rid)
    at.run()
    assert not at.exception and at.multiselect(key="c_runs").value == ["g1"]
    assert [w.value for w in at.warning] == [f"Run #{rid}: no longer in the run store (deleted since it was picked), "
                                             "so no longer compared."]
    at.run()  # said once
    assert not at.warning and at.multiselect(key="c_runs").value == ["g1"]


def test_a_link_opens_a_run_older_than_the_newest_the_pickers_list(store_path, monkeypatch):
    """A talk's link to run 1 read "no such recorded run here" on Compare and "no such scene" on the presenter
    once 200 runs had been recorded after it (a class's sweeps record 51 each): the pickers list the newest 200,
    and now also any older run that the link names."""
    from leakdemo.dashboard import compare
    monkeypatch.setattr(compare, "NEWEST_OFFERED", 2)
    run = open_gallery().load(1)
    store = RunStore(str(store_path))
    old, _, newest = (store.record(k, "lab", run.scenario, run.started, run.finished, run.keyframes) for k in "abc")
    assert [r["id"] for r in store.runs(ids=[old, newest + 1])] == [old]
    at = page(runs=f"r{old},g1")
    assert not at.exception and not at.warning, [w.value for w in at.warning]
    assert at.multiselect(key="c_runs").value == [f"r{old}", "g1"]
    offered = page().multiselect(key="c_runs").options  # unnamed, it is not offered (the newest two are)
    assert not any(o.startswith(f"Run #{old} ·") for o in offered) and any(o.startswith(f"Run #{newest} ·")
                                                                          for o in offered), offered
    talk = AppTest.from_file(PRESENT, default_timeout=120)
    talk.query_params["scenes"] = f"r{old},g1"
    talk.run()
    assert not talk.exception and not talk.warning, [w.value for w in talk.warning]
    assert f"your run #{old}, recorded · <span style=\"white-space: nowrap\">scene 1 of 2" in \
        " ".join(m.value for m in talk.markdown)
    talk.button[1].click().run()  # Next, and back: the older run stays a scene
    talk.button[0].click().run()
    assert not talk.warning and f"your run #{old}, recorded" in " ".join(m.value for m in talk.markdown)


def test_runs_are_named_as_people_say_them():
    """Titles read 'DLM+ on FedAvg', not the codes 'DLM-PLUS on fedavg'; the picker names each showcase by
    what it shows, not 'dlg: dlg, none' three times over."""
    at = page(runs="g1,g3")
    assert not at.exception
    heads = " ".join(m.value for m in at.markdown)
    assert "**DLG on FedSGD** · no defense" in heads and "**DLM+ on FedAvg**" in heads
    assert "DLM-PLUS" not in heads and "on fedavg" not in heads
    at = page(runs="g2")  # a defense by its name, with the settings a user types
    assert "**DLG on FedSGD** · Gaussian noise (noise σ = 0.01, clip norm off)" in [m.value for m in at.markdown]
    import json
    legend = [t["name"] for t in json.loads(at.get("plotly_chart")[0].proto.spec)["data"]]
    # the run's name, as the picker gives it, ties its curve to its column: not the code 'g2'
    assert legend == ["Showcase 2 · DLG on FedSGD, Gaussian noise"]
    assert at.table[0].value.loc["defense"].tolist() == ["Gaussian noise"]
    options = at.multiselect(key="c_runs").options
    assert "Showcase 1 · DLG rebuilds a photo from one gradient" in options
    assert "Showcase 2 · The same gradient with Gaussian noise σ = 0.01: the photo never appears" in options


def test_your_runs_are_named_as_people_say_them(store_path):
    """The picker named a user's runs by codes, 'Run #1 · dlg: dlg, dp-gaussian'; and the runs of one sweep,
    which differ only in the swept setting, alike ('DLG on FedSGD, no defense, 15.3 dB' five times over): each
    now says what it changed from its preset, beside the defense's strength."""
    from leakdemo.dashboard.compare import _choices
    g = open_gallery()
    run = g.load(2)  # showcase 2: DLG under Gaussian noise, recorded as a run of this machine's store
    store = RunStore(str(store_path))
    rid = store.record("k", "lab", run.scenario, run.started, run.finished, run.keyframes)
    params = run.scenario["params"]
    bigger = {**run.scenario, "params": {**params, "batch_size": 4, "seed": 2}}
    rid2 = store.record("k2", "sweep", bigger, run.started, run.finished, run.keyframes)
    labels = _choices({"r": store})
    assert labels[f"r{rid}"].startswith(f"Run #{rid} · DLG on FedSGD, Gaussian noise (noise σ = "
                                        f"{params['dp_sigma']:g}, clip norm off), ") \
        and labels[f"r{rid}"].endswith(", lab)"), labels[f"r{rid}"]
    assert "seed = 2, batch size = 4" in labels[f"r{rid2}"] and "batch size" not in labels[f"r{rid}"], labels
    # a PLI run is named by its attack accuracy, the figure it is judged by (it said "14.7 dB": a PSNR against
    # each class's mean private image)
    pli = g.load(7)
    rid3 = store.record("k3", "lab", pli.scenario, pli.started, pli.finished, pli.keyframes)
    accuracy = pli.finished.metrics["attack_accuracy"]
    label = _choices({"r": store})[f"r{rid3}"]
    assert label.startswith(f"Run #{rid3} · PLI") and f", attack accuracy {accuracy:.0%} (" in label, label
    assert " dB" not in label, label
    # a run stopped early says so: its figure is of the picture when Stop was pressed, not of a finished attack
    import dataclasses
    early = dataclasses.replace(run.finished, status="stopped", iterations=40)
    rid4 = store.record("k4", "lab", run.scenario, run.started, early, run.keyframes)
    labels = _choices({"r": store})
    assert ", stopped after 40 iterations (" in labels[f"r{rid4}"], labels[f"r{rid4}"]
    assert "stopped" not in labels[f"r{rid}"]
    # a defense in mid-label is named as a sentence names it ('Magnitude pruning' read as a new heading)
    pruned = {**run.scenario, "params": {**params, "defense": "prune", "prune_ratio": 0.5}}
    rid5 = store.record("k5", "lab", pruned, run.started, run.finished, run.keyframes)
    assert f"Run #{rid5} · DLG on FedSGD, magnitude pruning (pruned fraction = 0.5), " in \
        _choices({"r": store})[f"r{rid5}"]


def test_runs_side_by_side_say_what_tells_them_apart():
    """Two points of one sweep were titled alike, 'DLG on FedSGD · no defense' twice: each column now says the
    settings in which the runs differ — and nothing where they agree, nor the defense's strength that the title
    gives."""
    from leakdemo.dashboard.compare import told_apart

    def run(preset, **over):
        return dict(from_preset(preset, over).params), preset
    assert told_apart([run("dlg", batch_size=8, image_size=16), run("dlg", batch_size=16, image_size=16)]) == \
        ["batch size = 8", "batch size = 16"]
    assert told_apart([run("dlg", seed=1), run("dlg", seed=1, defense="dp-gaussian")]) == ["", ""]
    assert told_apart([run("dlg", seed=1)]) == [""]
    # a width of 0 is the model's own: DLG beside a LeNet of width 8 read "model width = 0"
    assert told_apart([run("dlg"), run("dlg", model_width=8)]) == ["default model width",
                                                                   "model width = 8"]
    # a setting a run does not read is not said of it: a digits run beside a folder run read "folder ="
    assert told_apart([run("dlg", data="digits"), run("dlg", data="folder", folder="/tmp/imgs")]) == [
        "source = digits", "source = folder, folder = /tmp/imgs"]
    assert told_apart([run("dlg", data="folder", folder="/a"), run("dlg", data="digits", folder="/b")]) == [
        "source = folder, folder = /a", "source = digits"]


def test_the_defenses_form_s_runs_keep_the_order_chosen():
    from leakdemo.dashboard.compare import in_form_order
    chosen = ["none", "dp-gaussian", "prune"]
    # noise finished first, then pruning, then the undefended run; g1 was picked by hand meanwhile
    assert in_form_order(["r7", "g1", "r8", "r9"], {"r7": "dp-gaussian", "r8": "prune", "r9": "none"},
                         chosen) == ["r9", "g1", "r7", "r8"]
    assert in_form_order(["g2", "r3"], {"r3": "prune"}, chosen) == ["g2", "r3"]


def test_the_defenses_form_with_no_defense_chosen_says_why_it_cannot_run(store_path):
    """Every defense removed from the form greyed Run them without a word."""
    at = page()
    run = next(b for b in at.button if b.label == "Run them")
    assert not run.disabled and not [c for c in at.caption if "at least one defense" in c.value]
    at.multiselect(key="c_defenses").set_value([]).run()
    run = next(b for b in at.button if b.label == "Run them")
    assert run.disabled and [c for c in at.caption if c.value == "Choose at least one defense to run."]


def test_the_defenses_form_says_each_run_s_state_in_the_sidebar_s_words():
    """Runs scored whole send no frames: the line under the form is all a class sees until one finishes. It
    read "none (running), dp-gaussian (running)" and stood still; now each defense by its title, with a clock."""
    import time
    from leakdemo.dashboard.compare import pending_line
    from leakdemo.dashboard.pool import RunHandle
    noise, prune = RunHandle(scenario=from_preset("dlg")), RunHandle(scenario=from_preset("dlg"))
    noise.status, noise.clock_at = "running", time.monotonic() - 12.3
    line = pending_line([("dp-gaussian", noise), ("prune", prune)], 3)  # the undefended run came from the store
    assert line.startswith("Running the scenario under 3 defenses in the shared worker pool"), line
    assert "Gaussian noise (DP-style): running, 12 s; Magnitude pruning: waiting for a free worker" in line, line
    assert line.endswith("(1 of 3 so far)."), line


def test_the_defenses_form_s_runs_can_be_stopped(store_path):
    """CAFE under two defenses takes minutes a run on a laptop: picked by mistake, it held the form (Run them
    greyed, no Stop) until both ended. Stop ends the runs still out and gives the form back."""
    at = page()
    at.selectbox(key="c_preset").set_value("cafe").run()
    assert at.button(key="c_stop").disabled  # nothing to stop yet
    next(b for b in at.button if b.label == "Run them").click().run()
    pending = [h for _, h in at.session_state["c_pending"]]
    assert len(pending) == 2 and not at.button(key="c_stop").disabled
    assert next(b for b in at.button if b.label == "Run them").disabled
    at.button(key="c_stop").click().run()
    assert not at.exception and not at.session_state["c_pending"]
    assert all(h.stop_requested for h in pending)
    assert [i.value for i in at.info if i.value.startswith("Stopped")] == [
        "Stopped the runs under no defense and Gaussian noise (DP-style); runs that had finished stay in the "
        "comparison."]
    assert not next(b for b in at.button if b.label == "Run them").disabled and at.button(key="c_stop").disabled


def test_a_form_run_finishing_beside_four_picked_runs_is_said_not_a_crash(store_path):
    """Run them, then four runs picked by hand (or opened by the Lab's Compare it) while the form's runs were out:
    the one that finished made five, past the picker's limit, and the page died with Streamlit's error."""
    from leakdemo.dashboard.pool import RunHandle
    g = open_gallery()
    at = page(runs="g1,g2,g3,g4")
    assert at.multiselect(key="c_runs").value == ["g1", "g2", "g3", "g4"]
    run = g.load(2)
    done = RunHandle(scenario=from_preset("dlg"), status="finished")
    done.task_result = [{"record": {"key": "k", "scenario": run.scenario, "started": run.started,
                                    "finished": run.finished, "keyframes": run.keyframes}}]
    at.session_state["c_pending"] = [("dp-gaussian", done)]
    at.session_state["c_order"] = ["dp-gaussian"]
    at.run()
    assert not at.exception
    assert at.multiselect(key="c_runs").value == ["g1", "g2", "g3", "g4"]  # the user's four stay
    assert [i.value for i in at.info if "finished" in i.value] == [
        "The run under Gaussian noise (DP-style) finished (Run #1), but 4 runs are compared already: remove one, then "
        "pick it from the list."]
    assert any(o.startswith("Run #1 · DLG on FedSGD, Gaussian noise") for o in at.multiselect(key="c_runs").options)


def test_play_replays_to_the_last_frame(monkeypatch):
    at = page(runs="g1,g2")
    at.button[0].click().run()
    assert at.session_state["c_playing"] is True
    at.session_state["c_pos"] = 0.99
    at.run()
    at.run()
    assert at.session_state["c_pos"] == 1.0 and at.session_state["c_playing"] is False
    captions = [c.value for c in at.get("imgs")] if at.get("imgs") else []
    assert not at.exception, captions


def test_the_slider_s_last_value_sent_during_a_replay_does_not_jump_it_to_the_end(monkeypatch):
    """The slider is hidden while playing, but the browser can send the value it last showed with the first ticks
    (CI caught a replay that went from its first frame straight to its last)."""
    from leakdemo.dashboard import compare
    state = {"c_playing": True, "c_pos": 0.03125, "c_seek": 100}  # in percent
    monkeypatch.setattr(compare.st, "session_state", state)
    compare._seek()
    assert state["c_pos"] == 0.03125
    state["c_playing"] = False  # paused, the slider is the user's again
    compare._seek()
    assert state["c_pos"] == 1.0


PRESENT = os.path.join(ROOT, "pages", "4_Present.py")


def test_presenter_steps_through_the_showcases():
    at = AppTest.from_file(PRESENT, default_timeout=120)
    at.query_params["scene"] = "2"
    at.run()
    assert not at.exception and not at.error
    assert "scene 2 of 11" in " ".join(m.value for m in at.markdown)  # 9 showcases, a live run, a chart
    assert at.title[0].value.startswith("The same gradient with Gaussian noise")
    assert "DLG on FedSGD · <b>Gaussian noise</b> · recorded" in " ".join(m.value for m in at.markdown)
    # the frame travels inline with the element: no media file for a later frame to replace before the
    # projector's browser fetched it (a broken image for a tick, in one replay of three)
    urls = [im.url for el in at.get("image") for im in el.proto.imgs]
    assert urls and all(u.startswith("data:image/png;base64,") for u in urls), [u[:40] for u in urls]
    at.button[1].click().run()  # Next
    assert "scene 3 of 11" in " ".join(m.value for m in at.markdown)
    assert at.query_params["scene"] == "3"  # a reload stays on this scene
    at.button[0].click().run()  # Back
    at.button[0].click().run()
    assert "scene 1 of 11" in " ".join(m.value for m in at.markdown)
    at.button[0].click().run()  # from the first scene, Back goes round to the last: what a defense costs
    assert "scene 11 of 11" in " ".join(m.value for m in at.markdown)
    assert at.title[0].value.startswith("What a defense costs") and not at.exception
    # this test's store is off: the chart comes from the gallery's recording of the sweep, and says so
    assert "recorded with the gallery" in " ".join(m.value for m in at.markdown)
    assert len(at.get("plotly_chart")) == 1
    import json
    chart = json.loads(at.get("plotly_chart")[0].proto.spec)  # the settings as the sidebar names them
    assert chart["layout"]["xaxis"]["title"]["text"] == "noise σ (dp_sigma)"
    assert {"clip norm off", "clip norm = 4"} <= {t["name"] for t in chart["data"]}


def test_presenter_names_a_protocol_knobs_sweep_by_its_knob(store_path):
    """A sweep of local steps is no defense's cost: the scene says what it varies, on a log axis of doublings."""
    at = AppTest.from_file(PRESENT, default_timeout=120)
    at.query_params["scenes"] = "sweep:sweep-steps-dlm-plus"
    at.run()
    assert not at.exception and at.title[0].value == "Privacy against utility, by local steps"
    import json
    chart = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert chart["layout"]["xaxis"]["type"] == "log" and chart["layout"]["xaxis"]["title"]["text"] == \
        "local steps (local_steps)"
    assert not any("one figure" in m.value for m in at.markdown)  # local steps do enter the federation's training
    at.query_params["scenes"] = "sweep:sweep-batch-dlg"  # the batch size does not: no trade-off to title
    at.session_state["p_scenes"] = ["sweep:sweep-batch-dlg"]
    at.run()
    assert not at.exception and at.title[0].value == "What the attack recovers, by batch size"
    assert any("The federation's accuracy is one figure at every point" in m.value for m in at.markdown)
    # why DLG gives out at 8 and 16, on the chart itself: each batch size's numbers per unknown pixel value
    x = json.loads(at.get("plotly_chart")[0].proto.spec)["layout"]["xaxis"]
    assert x["ticktext"] == ["1 (10.97)", "2 (5.68)", "4 (3.03)", "8 (1.70)", "16 (1.04)"]
    assert x["title"]["text"] == "batch size (batch_size) · in brackets: numbers per unknown (DLG needs ~2)"


def test_presenter_scenes_come_from_the_link_and_the_chooser(store_path, monkeypatch):
    from leakdemo import gallery
    monkeypatch.setattr(gallery, "_gallery_or_none", lambda: None)  # a gallery without the sweep: say how to fill it
    at = AppTest.from_file(PRESENT, default_timeout=120)
    at.query_params["scenes"] = ["sweep:sweep-dp-dlg,g3,live:nonsense", "g99"]  # also as the key given twice
    at.run()
    assert not at.exception
    assert any("scenes=live:nonsense,g99" in w.value for w in at.warning)  # unknown codes named, left out
    assert "scene 1 of 2" in " ".join(m.value for m in at.markdown)
    assert at.title[0].value == "What a defense costs: privacy against utility"
    assert any("lacks 51 runs of this sweep" in i.value for i in at.info)  # an empty store: how to fill it
    at.button[1].click().run()
    assert at.title[0].value.startswith("DLM+ rebuilds the photo") and "scene 2 of 2" in " ".join(
        m.value for m in at.markdown)
    chooser = at.multiselect(key="p_pick")
    assert chooser.value == ["sweep:sweep-dp-dlg", "g3"]
    assert "Live: DLG on a photo" in chooser.options and any(o.startswith("Trade-off chart: ") for o in chooser.options)
    chooser.set_value(["g1", "g3"]).run()
    assert at.query_params["scenes"] == "g1,g3" and "scene 1 of 2" in " ".join(m.value for m in at.markdown)
    assert at.title[0].value.startswith("DLG rebuilds a photo") and not at.exception
    at = AppTest.from_file(PRESENT, default_timeout=120)
    at.query_params["scenes"] = "r99"  # nothing of the talk's list is left: what opens instead is said
    at.run()
    assert [w.value for w in at.warning] == [
        "Ignored from the link: scenes=r99 (no such scene here; the presenter opens on its default scenes instead)."]


def test_a_live_scene_of_a_slow_preset_says_why_it_is_none():
    """`live:dlg-round` read "no such scene here", though the Lab lists the preset: those that take minutes on a
    CPU are no live scene, and the line says so and what to present instead."""
    at = AppTest.from_file(PRESENT, default_timeout=120)
    at.query_params["scenes"] = "live:dlg-round,live:nope,live:dlg"
    at.run()
    assert not at.exception and at.multiselect(key="p_pick").value == ["live:dlg"]
    assert [w.value for w in at.warning] == [
        "Ignored from the link: scenes=live:nope (no such scene here); scenes=live:dlg-round (dlg-round takes "
        "minutes on a laptop's CPU, too long to compute during a talk: run it in the Attack Lab beforehand, "
        "then present that run (scenes=r12 presents your run 12))."]


def test_your_runs_are_scenes_too(store_path):
    # a talk could show the gallery's showcases but not the runs you made for it: `scenes=r12` was "no such scene"
    run = open_gallery().load(1)
    store = RunStore(str(store_path))
    rid, gone = (store.record(k, "lab", run.scenario, run.started, run.finished, run.keyframes) for k in "ab")
    at = AppTest.from_file(PRESENT, default_timeout=120)
    at.query_params["scenes"] = f"{rid},g1,r{gone}"  # as runs list numbers it, as on Compare
    at.run()
    assert not at.exception and not at.warning
    assert at.title[0].value == "DLG on FedSGD"
    assert f"<b>no defense</b> · your run #{rid}, recorded · " in " ".join(m.value for m in at.markdown)
    chooser = at.multiselect(key="p_pick")
    assert chooser.value == [f"r{rid}", "g1", f"r{gone}"]
    assert any(o.startswith(f"Run #{rid} · DLG on FedSGD, no defense, ") for o in chooser.options), chooser.options
    at.button[1].click().run()  # Next: the showcase recorded from the same run, under its own title
    assert at.title[0].value.startswith("DLG rebuilds a photo") and not at.exception
    store.delete(gone)  # deleted since the talk was set up: the scene says so, not a traceback
    at.button[1].click().run()
    assert not at.exception and at.title[0].value == f"Run #{gone}"
    assert at.warning[0].value.startswith(f"run {gone}: no such run in ")
    # and Compare hands the runs it shows to the presenter, in its order, in a tab of their own
    link = page(runs=f"g1,{rid}").get("link_button")
    assert [(b.proto.label, b.proto.url) for b in link] == [("Present these runs", f"./?present=1&scenes=g1,r{rid}")]


def test_a_replayed_scene_shows_the_figures_of_the_frame_shown():
    """A recorded run replays from its first frame: PSNR, SSIM and time are those of the frame on the screen
    (as the live run showed them), not the final figures beside a noise picture; the end shows the final ones."""
    at = AppTest.from_file(PRESENT, default_timeout=120)
    at.run()  # scene 1: DLG on a photo, replaying
    figures = {m.label: m.value for m in at.metric}
    assert set(figures) == {"PSNR", "SSIM", "Time"}, figures
    assert float(figures["PSNR"].split()[0]) < 20 and float(figures["SSIM"]) < 0.5  # the starting noise
    at.session_state["p_pos"] = 1.0
    at.run()
    figures = {m.label: m.value for m in at.metric}
    assert set(figures) == {"PSNR", "SSIM", "Run time", "30 dB after"}
    assert float(figures["PSNR"].split()[0]) > 30 and float(figures["SSIM"]) > 0.9
    # when the photo came back, read off the recording's own curve: its first point at 30 dB
    seconds, _ = milestones.reached(open_gallery().load(showcase_rows(open_gallery())[0]["id"]).finished.history, 30)
    assert figures["30 dB after"] == f"{seconds:.1f} s" and seconds < float(figures["Run time"].split()[0])


def test_a_defended_run_s_scene_ends_with_what_the_defense_cost(store_path):
    """A scene of a defended run showed its privacy alone (8.5 dB against fake gradients), and the slide meant
    to weigh a defense read as if it were free: its end now shows the cost the run measured beside the same
    federation without it. Not for an undefended run, nor where the loss cannot show a cost (cafe-faces)."""
    import dataclasses
    store = RunStore(str(store_path))

    def variant(g, utility, **params):
        run = open_gallery().load(g)
        finished = dataclasses.replace(run.finished, metrics={**run.finished.metrics, "utility": utility})
        scenario = {**run.scenario, "params": {**run.scenario["params"], **params}}
        return store.record(f"k{g}{params}", "lab", scenario, run.started, finished, run.keyframes)
    pli = variant(7, {"defended": [0.5, 0.6], "clean": [0.7, 0.8]}, defense="top-k", top_k=1)
    faces = variant(6, {"steps": 200, "lr": 0.1, "defended": [2.306] * 200, "clean": [2.306] * 200}, data="faces")

    def end_of(scene):
        at = AppTest.from_file(PRESENT, default_timeout=120)
        at.query_params["scenes"] = scene
        at.run()
        at.session_state["p_pos"] = 1.0
        at.run()
        assert not at.exception
        return {m.label: (m.value, m.proto.delta) for m in at.metric}
    assert end_of("g6")["Training loss"] == ("0.665", "+0.274 vs none")  # CAFE against fake gradients
    assert end_of(f"r{pli}")["Clients' accuracy"] == ("55%", "-20 pts vs none")
    assert {"Training loss", "Clients' accuracy"}.isdisjoint(end_of("g5"))  # no defense: nothing to weigh
    assert "Training loss" not in end_of(f"r{faces}")


def test_a_bad_scene_number_starts_at_the_first():
    """A talk's bookmark to a scene the list lacks opens on the first, and says so."""
    for bad in ("many", "0", "12"):
        at = AppTest.from_file(PRESENT, default_timeout=120)
        at.query_params["scene"] = bad
        at.run()
        assert not at.exception and "scene 1 of 11" in " ".join(m.value for m in at.markdown)
        assert [w.value for w in at.warning] == [f"Ignored from the link: scene={bad} (a scene number in [1, 11]; "
                                                 "opening on the first)."]
    at.session_state["p_pos"] = 1.0  # the replay ends with a rerun of its own: the note stays to be read
    at.run()
    assert [w.value for w in at.warning] == ["Ignored from the link: scene=12 (a scene number in [1, 11]; opening "
                                             "on the first)."]
    at.button[1].click().run()  # Next: the user has moved on
    assert not at.warning and "scene 2 of 11" in " ".join(m.value for m in at.markdown)
    at = AppTest.from_file(PRESENT, default_timeout=120)
    at.query_params["scene"] = "11"
    at.run()
    assert not at.warning and "scene 11 of 11" in " ".join(m.value for m in at.markdown)


def test_the_presenter_caption_says_where_the_private_data_is():
    from leakdemo.dashboard.presenter import _picture
    few, many = np.random.rand(3, 8, 8, 3), np.random.rand(40, 8, 8, 3)
    picture, where = _picture(few, few)
    assert where.startswith("top: the private data") and picture.shape[0] > picture.shape[1] / 3  # rows
    picture, where = _picture(many, many, psnr=[30.0] * 40)  # two mosaics side by side
    assert where.startswith("left: the private data") and picture.shape[1] > picture.shape[0]
    classes = np.random.rand(10, 8, 8, 3)  # PLI mid-replay: unjudged, TBI's row kept blank; then judged
    pending, where = _picture(classes, classes, np.full_like(classes, 0.92), verdicts=[None] * 10)
    assert where.endswith("what the server rebuilt · bottom: the TBI baseline, shown at the end"), where
    judged, where = _picture(classes, classes, classes, verdicts=[True] * 10)
    assert where.endswith("(green: passes the attack-accuracy test, red: fails) · bottom: the TBI baseline")
    assert pending.shape == judged.shape


def test_each_runs_caption_says_where_the_private_data_is():
    """A photo's pair and CAFE's 200 digits are both drawn private-left, rebuilt-right; a batch of a few,
    private-top (pair_grid's layouts), and the caption must say which."""
    at = page(runs="g1,g5")  # DLG on one photo, CAFE's 200 digits

    def captions(node):
        for child in (node.children.values() if isinstance(getattr(node, "children", None), dict) else []):
            if getattr(child, "type", None) == "image":
                yield from (i.caption for i in child.proto.imgs)
            yield from captions(child)
    found = list(captions(at._tree))
    assert len(found) == 2 and all(c.endswith("left: private, right: rebuilt") for c in found), found
    # PLI's finished run: class means on top, its reconstructions framed by their verdicts, TBI's at the bottom
    at = page(runs="g7,g1")
    pli = next(captions(at._tree))
    assert pli.endswith("top: private, below: rebuilt (green: passes the attack-accuracy test, red: fails) · "
                        "bottom: the TBI baseline"), pli
    table = at.table[0].value  # a column per run, in the pictures' order; a figure a run lacks reads '—'
    assert list(table.columns) == ["Showcase 7", "Showcase 1"]
    assert table.loc["TBI accuracy"].tolist() == ["30%", "—"] and table.loc["PSNR", "Showcase 1"] == "46.9 dB"
    assert table.loc["label accuracy"].tolist() == ["—", "100%"] and "None" not in table.to_string()
    # DLG's near-perfect LPIPS as the Lab words it, not "0.000", as if identical or broken
    assert table.loc["LPIPS"].tolist() == ["0.118", "< 0.001"]


def test_the_table_says_what_each_defense_costs_where_the_run_measured_it():
    """Compare's table named the defenses' privacy and never their cost, though vertical FL and logit runs
    measure it (the Lab shows it as Utility, or as the training-loss curve): the defenses form's runs side by
    side read as if each defense were free. A FedSGD run's utility is a training of its own: '—'."""
    at = page(runs="g5,g6,g7,g1")  # CAFE, CAFE against fake gradients, PLI, DLG
    table = at.table[0].value
    assert table.loc["utility"].tolist() == ["training loss 0.390", "training loss 0.665 (0.390 without)",
                                             "clients' accuracy 100%", "—"], table.loc["utility"]
    assert "utility" not in page(runs="g1,g2").table[0].value.index  # no run has one: no row of dashes


def test_the_table_says_when_the_utility_row_cannot_show_a_defense_s_cost(store_path):
    """cafe-faces runs side by side read 'training loss 2.199 (2.199 without)': every defense looked free, as
    the undefended federation learns nothing on faces without identities. The Lab says so under its loss chart;
    the table now does too. The runs are the gallery's CAFE runs given the faces' flat training loss."""
    import dataclasses
    store, ids = RunStore(str(store_path)), []
    for g in (5, 6):
        run = open_gallery().load(g)
        flat = [2.306 - 0.0005 * i for i in range(200)]  # sheds 4 % of its start (digits: 83 %)
        u = {**run.finished.metrics["utility"], "clean": flat} if g == 6 else {"steps": 200, "lr": 0.1, "defended": flat}
        finished = dataclasses.replace(run.finished, metrics={**run.finished.metrics, "utility": u})
        scenario = {**run.scenario, "params": {**run.scenario["params"], "data": "faces"}}
        ids.append(store.record(f"k{g}", "lab", scenario, run.started, finished, run.keyframes))
    at = page(runs=f"r{ids[0]},r{ids[1]},g6")
    assert not at.exception
    lines = [c.value for c in at.caption if "barely falls" in c.value]
    assert lines == [f"Run #{ids[0]} and Run #{ids[1]}: Without a defense the federation's training loss barely "
                     "falls in 200 steps (2.306 → 2.209): the faces carry no identity labels (face i is class i mod "
                     "10), so nothing in a face predicts its class; the loss cannot show what a defense costs here "
                     "(on the digits it can)."], lines
    assert not [c for c in page(runs="g5,g6").caption if "barely falls" in c.value]  # the digits learn: no line


def _nodes(node):
    """Every element under `node`, in page order."""
    for child in (node.children.values() if isinstance(getattr(node, "children", None), dict) else []):
        yield child
        yield from _nodes(child)


def _pictures(node):
    """The decoded pictures of a page's image elements, in page order."""
    import base64
    import io

    from PIL import Image
    for child in (node.children.values() if isinstance(getattr(node, "children", None), dict) else []):
        if getattr(child, "type", None) == "image":
            for im in child.proto.imgs:
                yield np.asarray(Image.open(io.BytesIO(base64.b64decode(im.url.split(",", 1)[1])))), im.caption
        yield from _pictures(child)


def test_a_pli_replay_keeps_its_size_to_the_end():
    """PLI's replay grew by TBI's row at the last frame, pushing the charts down the projector: the row's place
    is kept, blank light grey, and the faces framed white until the finished run judges them."""
    from leakdemo.artifacts import VERDICT_COLORS
    at = page(runs="g7,g1")
    at.session_state["c_pos"] = 0.3
    at.run()
    (mid, caption), _ = list(_pictures(at._tree))
    assert caption.endswith("top: private, below: rebuilt · bottom: the TBI baseline, shown at the end"), caption
    at.session_state["c_pos"] = 1.0
    at.run()
    (end, caption), _ = list(_pictures(at._tree))
    assert "red: fails" in caption and mid.shape == end.shape
    bottom = mid[-mid.shape[0] // 6:]  # inside TBI's row: one light grey besides the white gaps and frames
    assert {tuple(int(c) for c in px) for px in bottom.reshape(-1, 3)} == {(255, 255, 255), (235, 235, 235)}
    colors = {tuple(round(255 * c) for c in VERDICT_COLORS[ok]) for ok in (True, False)}
    assert not colors & {tuple(int(c) for c in px) for px in mid.reshape(-1, 3)}  # unjudged: no green, no red
    assert colors & {tuple(int(c) for c in px) for px in end.reshape(-1, 3)}


def test_a_live_scene_shows_the_attack_s_stage_and_pli_s_accuracy_while_it_runs():
    """A live PLI scene on the projector: its round in the caption (as the Lab's progress bar has it) and its
    attack accuracy — the figure PLI is judged by — not "PSNR …"; the stage goes when the run ends."""
    import threading

    from streamlit.testing.v1 import AppTest

    from leakdemo.events import Progress

    from types import SimpleNamespace

    class Handle:  # what the pool's handle offers the scene, mid-run
        lock, status, done, error, finished, seq = threading.Lock(), "running", False, None, None, 7
        scenario = SimpleNamespace(params={"protocol": "fedmd", "attack": "pli"})
        started = Started({}, {}, np.random.rand(3, 8, 8, 3), ["a", "b", "c"], [0, 1, 2], 200, "cpu", "", 1.0)
        latest = Progress(40, 200, 4.9, 0.3, psnr=11.0, images=np.random.rand(3, 8, 8, 3),
                          checks={"attack_accuracy": 0.4}, stage="round 2 of 5: new logits arrived, training on them")

        def poll(self):
            pass

        def since_latest(self):  # the event arrived just now
            return 0.0

    def scene():
        from leakdemo.dashboard.presenter import live_body
        live_body("pli", 0.5)  # the pace a running scene refreshes at (LIVE_POLL)

    at = AppTest.from_function(scene, default_timeout=60)
    at.session_state["p_live"] = ("pli", Handle())
    at.run()
    assert not at.exception
    assert {m.label: m.value for m in at.metric} == {"Attack accuracy": "40%", "Time": "5 s"}
    Handle.since_latest = lambda self: 10.0  # ten seconds on with no new event (a long step): the clock runs on
    at.run()
    assert {m.label: m.value for m in at.metric}["Time"] == "15 s"
    Handle.since_latest = lambda self: 0.0
    from leakdemo.dashboard.presenter import live_caption
    assert live_caption("left: x", Handle.latest, None, "inversion epoch") == \
        "left: x · inversion epoch 40 of 200 · round 2 of 5: new logits arrived, training on them"
    done = Finished("finished", {"psnr": 12.0}, np.random.rand(3, 8, 8, 3), 20.0, 200)
    assert live_caption("left: x", Handle.latest, done) == "left: x · iteration 200 of 200"
    captions = [im.caption for node in _nodes(at._tree) if getattr(node, "type", None) == "image"
                for im in node.proto.imgs]
    assert len(captions) == 1 and "· inversion epoch 40 of 200 · round 2 of 5" in captions[0], captions


def test_a_new_link_is_read_while_the_form_s_runs_are_out(store_path):
    """Run them, then the Lab's Compare it (a new ?runs= link) while the form's runs were out: the link was
    ignored until they all finished, and the page showed the form's runs, not the one the user asked for. Now
    the link's runs are shown, and the form's runs join them as they finish."""
    from leakdemo.dashboard.pool import RunHandle
    g = open_gallery()
    at = page(runs="g1")
    out = RunHandle(scenario=from_preset("dlg"), status="running")
    at.session_state["c_pending"] = [("dp-gaussian", out)]
    at.session_state["c_order"] = ["dp-gaussian"]
    at.run()
    at.query_params["runs"] = "g3"  # the Lab's link arrives
    at.run()
    assert not at.exception
    assert at.multiselect(key="c_runs").value == ["g3"]
    run = g.load(2)
    out.status = "finished"
    out.task_result = [{"record": {"key": "k", "scenario": run.scenario, "started": run.started,
                                   "finished": run.finished, "keyframes": run.keyframes}}]
    at.run()
    assert not at.exception and not at.session_state["c_pending"]
    assert at.multiselect(key="c_runs").value == ["g3", "r1"]


def test_with_the_run_store_off_the_pages_do_not_promise_to_keep_runs(monkeypatch, tmp_path):
    """LEAKDEMO_STORE=off: Compare said every finished run is kept in the run store, and Trade-offs that runs
    already in it come back at once; neither holds where no run is kept."""
    from streamlit.testing.v1 import AppTest as Test
    monkeypatch.setenv("LEAKDEMO_STORE", "off")
    intro = " ".join(m.value for m in page().markdown)
    assert "the run store is off here, LEAKDEMO_STORE=off: no run is kept" in intro and "is kept in" not in intro
    at = Test.from_file(os.path.join(ROOT, "pages", "2_Tradeoffs.py"), default_timeout=120)
    at.query_params["sweep"] = "custom"
    at.run()
    assert [i.value for i in at.info if "Press **Run sweep**" in i.value] == [
        "Press **Run sweep**. Points appear as they finish."]
    monkeypatch.setenv("LEAKDEMO_STORE", str(tmp_path / "runs.sqlite"))
    assert "every finished run is kept in the run store" in " ".join(m.value for m in page().markdown)
