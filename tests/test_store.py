"""The run store: what a user relies on — a recorded run comes back whole and at once, only for the same
scenario and code version; several processes can write together; a file that is not ours is refused and
left as it was."""
import json
import multiprocessing as mp
import os
import sqlite3
import threading

import numpy as np
import pytest

from leakdemo.errors import LeakdemoError
from leakdemo.events import Finished, Started
from leakdemo.runner import Run
from leakdemo.scenario import from_preset
from leakdemo.store import RunStore, StoreError, open_store, scenario_key

TINY = {"image_size": 16, "iterations": 8, "seed": 0}


def _run(store, fresh=False, **over):
    run = Run(from_preset("dlg", {**TINY, **over}), store=store, fresh=fresh)
    events = list(run.events())
    return run, events


def test_a_recorded_run_comes_back_whole_without_computing(tmp_path):
    store = RunStore(str(tmp_path / "runs.sqlite"))
    first, live = _run(store)
    assert not first.from_store and first.stored_id is not None
    assert any(e.event == "progress" for e in live)
    again, replay = _run(store)
    assert again.from_store and again.stored_id == first.stored_id
    assert [e.event for e in replay] == ["started", "finished"]  # nothing was computed
    a, b = live[-1], replay[-1]
    assert isinstance(b, Finished) and b.metrics == {**a.metrics}
    assert json.dumps(b.history) == json.dumps(a.history) and b.iterations == a.iterations  # NaN-aware
    assert np.abs(b.images - a.images).max() <= 1 / 255 + 1e-6  # kept as 8-bit PNG
    assert np.abs(replay[0].originals - live[0].originals).max() <= 1 / 255 + 1e-6
    assert isinstance(replay[0], Started) and replay[0].names == live[0].names
    assert 2 <= len(again.keyframes.items) <= 24 and again.keyframes.items[-1][0] == a.iterations


def test_fresh_runs_again_and_other_scenarios_or_code_versions_miss(tmp_path):
    store = RunStore(str(tmp_path / "runs.sqlite"))
    first, _ = _run(store)
    again, events = _run(store, fresh=True)
    assert not again.from_store and again.stored_id != first.stored_id
    other, _ = _run(store, seed=1)
    assert not other.from_store
    key = first.key()
    assert store.find(key) is not None and store.find(key, version="an-older-version") is None
    assert len(store.runs()) == 3


def test_uploads_are_part_of_the_key():
    params = dict(from_preset("dlg", TINY).params)
    a = [("me.png", np.zeros((4, 4, 3), np.uint8))]
    b = [("me.png", np.ones((4, 4, 3), np.uint8))]
    assert scenario_key(params, "cpu", a) != scenario_key(params, "cpu", b) != scenario_key(params, "cpu")
    assert scenario_key(params, "cpu") != scenario_key(params, "cuda")


def test_a_folder_picture_replaced_under_its_name_is_attacked_afresh_not_replayed(tmp_path):
    from PIL import Image
    folder = tmp_path / "mine"
    folder.mkdir()
    store = RunStore(str(tmp_path / "runs.sqlite"))
    over = {"data": "folder", "folder": str(folder), "images": "me.png"}
    Image.fromarray(np.zeros((16, 16, 3), np.uint8)).save(folder / "me.png")
    first, live = _run(store, **over)
    again, _ = _run(store, **over)
    assert again.from_store  # the same folder as it was: replayed
    Image.fromarray(np.full((16, 16, 3), 255, np.uint8)).save(folder / "me.png")
    os.utime(folder / "me.png", ns=(1, 1))  # a file system keeping whole seconds could date both writes alike
    new, events = _run(store, **over)
    assert not new.from_store, "the old picture's run was replayed for the new picture"
    assert live[0].originals.max() == 0 and events[0].originals.min() == 1


def _synthetic_events(i: int):
    originals = np.random.default_rng(i).random((2, 8, 8, 3)).astype(np.float32)
    started = Started({"params": {}}, {}, originals, ["a", "b"], [0, 1], 10, "cpu", "", 0.1)
    finished = Finished("finished", {"psnr": float(i), "ssim": 0.5, "lpips": None, "psnr_per_image": [1.0, 2.0]},
                        originals, 1.0, 10, {"iteration": [0, 10], "psnr": [1.0, float(i)]})
    return started, finished, [(0, originals), (10, originals)]


def _writer(path: str, who: int, count: int) -> None:
    store = RunStore(path)
    for k in range(count):
        started, finished, frames = _synthetic_events(who * 100 + k)
        store.record(f"key-{who}-{k}", "test", {"params": {"attack": "dlg"}}, started, finished, frames)


def test_a_store_created_by_another_worker_meanwhile_is_opened(tmp_path, monkeypatch):
    """Several workers open a new store at once. One read the store's id (not set yet), another then created
    the store, and the first read its tables and refused it as "another program's SQLite database" (seen once
    in CI). Here the other worker creates the store right after the first read."""
    path = str(tmp_path / "runs.sqlite")
    connect = RunStore._connect

    class Racing:  # a connection whose first look at the id lets another worker create the store
        def __init__(self, conn):
            self.conn, self.raced = conn, False

        def __getattr__(self, name):
            return getattr(self.conn, name)

        def execute(self, sql, *args):
            result = self.conn.execute(sql, *args)
            if sql == "PRAGMA application_id" and not self.raced:
                self.raced = True
                value = result.fetchone()
                monkeypatch.setattr(RunStore, "_connect", connect)
                RunStore(path)  # the other worker, done in between
                return FakeCursor(value)
            return result

    class FakeCursor:
        def __init__(self, row):
            self.row = row

        def fetchone(self):
            return self.row

    monkeypatch.setattr(RunStore, "_connect", lambda self: Racing(connect(self)))
    store = RunStore(path)
    started, finished, frames = _synthetic_events(1)
    store.record("key", "test", {"params": {"attack": "dlg"}}, started, finished, frames)
    assert len(store.runs()) == 1


def test_a_store_another_worker_is_still_setting_up_is_opened_once_it_is_done(tmp_path):
    """Opening a new store switches it to write-ahead logging. While another worker still writes to it the old
    way, SQLite refuses that switch at once ("database is locked", no busy wait), and the store was refused as
    damaged: about one opener in 100 when six open a new store together (seen in CI)."""
    path = str(tmp_path / "runs.sqlite")
    RunStore(path)
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("PRAGMA journal_mode = DELETE")  # as the store is before its creator switches it
    other.execute("BEGIN IMMEDIATE")
    version = other.execute("PRAGMA user_version").fetchone()[0]
    other.execute(f"PRAGMA user_version = {version}")  # a write: the other worker holds the file's write lock
    done = threading.Timer(0.5, lambda: other.execute("COMMIT"))
    done.start()
    try:
        store = RunStore(path)
    finally:
        done.join()
        other.close()
    started, finished, frames = _synthetic_events(1)
    store.record("key", "test", {"params": {"attack": "dlg"}}, started, finished, frames)
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_several_processes_write_at_once(tmp_path):
    path = str(tmp_path / "runs.sqlite")
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, who, 6)) for who in range(4)]
    from leakdemo.spawn import plain_main
    with plain_main():  # an AppTest earlier in this process may have left a page script as __main__
        for p in procs:
            p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    store = RunStore(path)
    rows = store.runs(limit=100)
    assert len(rows) == 24
    stored = store.load(rows[0]["id"])
    assert stored.finished.metrics["psnr"] == rows[0]["psnr"] and len(stored.keyframes) == 2
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


@pytest.mark.parametrize("content", [b"these are my notes, not a database\n", b"SQLite format 3\x00" + b"\x07" * 200])
def test_a_file_that_is_not_a_store_is_refused_and_left_alone(tmp_path, content):
    path = tmp_path / "runs.sqlite"
    path.write_bytes(content)
    with pytest.raises(StoreError) as e:
        RunStore(str(path))
    assert str(path) in str(e.value) and "\n" not in str(e.value) and "left untouched" in str(e.value)
    assert path.read_bytes() == content


def test_another_programs_database_is_refused_and_left_alone(tmp_path):
    path = tmp_path / "theirs.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE accounts (name TEXT)")
        conn.execute("INSERT INTO accounts VALUES ('alice')")
    before = path.read_bytes()
    with pytest.raises(StoreError, match="another program's SQLite database"):
        RunStore(str(path))
    assert path.read_bytes() == before


def test_a_store_from_a_newer_version_is_refused(tmp_path):
    path = str(tmp_path / "runs.sqlite")
    RunStore(path)
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA user_version = 99")
    with pytest.raises(StoreError, match="newer leakdemo"):
        RunStore(path)


def test_store_location_and_off_switch(tmp_path, monkeypatch):
    monkeypatch.setenv("LEAKDEMO_STORE", "off")
    assert open_store() is None
    monkeypatch.setenv("LEAKDEMO_STORE", str(tmp_path / "deep" / "er" / "runs.sqlite"))
    assert open_store().path.endswith("runs.sqlite") and (tmp_path / "deep" / "er" / "runs.sqlite").exists()
    monkeypatch.delenv("LEAKDEMO_STORE")
    monkeypatch.setenv("LEAKDEMO_CACHE", str(tmp_path / "cache"))
    assert open_store().path == str(tmp_path / "cache" / "runs.sqlite")


def test_unknown_run_id_is_one_line(tmp_path):
    store = RunStore(str(tmp_path / "runs.sqlite"))
    with pytest.raises(LeakdemoError, match="run 7: no such run"):
        store.load(7)
    assert store.delete(7) is False


def _cli(*args):
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return subprocess.run([sys.executable, "-m", "leakdemo", *args], cwd=root, capture_output=True, text=True,
                          timeout=300)


def test_cli_serves_a_repeated_run_from_the_store_and_manages_runs(tmp_path, store_path):
    args = ("run", "dlg", "--set", "image_size=16", "--set", "iterations=5")
    first = _cli(*args)
    assert first.returncode == 0 and "from the run store" not in first.stderr
    again = _cli(*args)
    assert again.returncode == 0 and "from the run store (run 1" in again.stderr
    assert again.stdout.splitlines()[0] == first.stdout.splitlines()[0]  # the same summary
    fresh = _cli(*args, "--fresh")
    assert fresh.returncode == 0 and "from the run store" not in fresh.stderr
    listed = _cli("runs", "list")
    assert listed.returncode == 0 and "2 runs in" in listed.stdout and "dlg" in listed.stdout
    assert listed.stdout.splitlines()[2].endswith("  image_size=16 iterations=5")  # what it changed from dlg
    # the protocol has a column: a PLI run on FedGEMS read as one on FedMD (what it changed leaves switches out)
    assert listed.stdout.splitlines()[1].split()[3:6] == ["preset", "protocol", "attack"]
    assert listed.stdout.splitlines()[2].split()[4:7] == ["dlg", "fedsgd", "dlg"]
    assert _cli("runs").stdout == listed.stdout  # `runs` alone lists (it was an error asking what to do)
    shown = _cli("runs", "show", "1")
    import json
    info = json.loads(shown.stdout)
    assert info["id"] == 1 and info["scenario"]["params"]["image_size"] == 16 and "psnr" in info
    assert _cli("runs", "show", "r1").stdout == shown.stdout  # as the Compare page's link names it: ?runs=r1
    showcase = _cli("runs", "show", "g1")
    assert showcase.returncode == 2 and showcase.stderr.strip() == ("error: runs show: the id must be a whole number, "
                                                                    "got 'g1' (g-codes are the gallery's showcases; "
                                                                    "`runs` reads your run store)")
    out = tmp_path / "export"
    assert _cli("runs", "export", "1", str(out)).returncode == 0
    assert {"grid.png", "progress.gif", "metrics.json", "scenario.json"} <= set(p.name for p in out.iterdir())
    # --out, as `run --out` names the folder (it was "unrecognized arguments: --out")
    assert _cli("runs", "export", "1", "--out", str(tmp_path / "again")).returncode == 0
    assert sorted(p.name for p in (tmp_path / "again").iterdir()) == sorted(p.name for p in out.iterdir())
    shown_out = _cli("runs", "show", "1", "--out", str(tmp_path / "x"))
    assert shown_out.returncode == 2 and shown_out.stderr.strip() == "error: --out: applies to `runs export`, not `runs show`"
    assert _cli("runs", "delete", "1").returncode == 0
    gone = _cli("runs", "show", "1")
    assert gone.returncode == 2 and gone.stderr.strip().startswith("error: run 1: no such run")


def test_runs_list_says_when_each_picture_came_back(store_path):
    """`runs list` has a 'to 30 dB' column (milestones.py, read off each run's history): '2.5 s', 'never' under
    a defense that held, '-' for logit sharing (judged by attack accuracy); --json carries to_20db_s/to_30db_s."""
    store = RunStore(str(store_path))
    started, finished, frames = _synthetic_events(0)
    for psnr, extra in (([12.0, 24.0, 35.0], {}), ([9.0, 11.0, 12.0], {}), ([12.0, 24.0, 29.5], {"status": "stopped"}),
                        ([9.0, 25.0, 40.0], {"attack_accuracy": 0.9})):
        finished.history = {"iteration": [0, 5, 10], "seconds": [0.0, 1.25, 2.5], "psnr": psnr}
        finished.metrics = {**finished.metrics, "psnr": psnr[-1], "status": "finished", **extra}
        finished.status = finished.metrics["status"]
        store.record(f"key-{psnr[-1]}", "test", {"params": {"attack": "dlg"}}, started, finished, frames)
    listed = _cli("runs", "list")
    assert listed.returncode == 0, listed.stderr
    header, *lines = listed.stdout.splitlines()[1:]
    end = header.index("to 30 dB") + len("to 30 dB")  # the column is right-aligned under its heading
    # newest first; a run stopped at 29.5 dB is not yet back, not "never" as if the attack had failed
    assert [line[end - 9:end].strip() for line in lines] == ["-", "not yet", "never", "2.5 s"], listed.stdout
    rows = {r["id"]: r for r in json.loads(_cli("runs", "list", "--json").stdout)}
    assert (rows[1]["to_20db_s"], rows[1]["to_30db_s"]) == (1.25, 2.5) and rows[2]["to_30db_s"] is None
    assert "to_30db_s" not in store.runs()[0]  # only where they are shown (Compare's picker reads 200 runs)


def test_runs_list_keeps_long_names_whole_and_its_columns_in_line(store_path):
    """At fixed widths "cafe-fake-gradients" was cut to "cafe-fake-gradien", and an attack "invgrad-fedavg" or a
    defense "logit-temperature" pushed the rest of its row out from under the headings."""
    store = RunStore(str(store_path))
    started, finished, frames = _synthetic_events(0)
    for preset, attack, defense in (("cafe-fake-gradients", "cafe", "fake-gradients"), ("dlg", "dlg", "none"),
                                    ("invgrad-fedavg", "invgrad-fedavg", "dp-gaussian"),
                                    ("pli", "pli", "logit-temperature")):
        store.record(f"k-{preset}", "cli", {"preset": preset, "params": {"protocol": "fedavg", "attack": attack,
                                                                          "defense": defense}},
                     started, finished, frames)
    listed = _cli("runs", "list")
    assert listed.returncode == 0, listed.stderr
    header, *lines = listed.stdout.splitlines()[1:]
    for name in ("cafe-fake-gradients", "invgrad-fedavg", "logit-temperature"):
        assert f" {name} " in listed.stdout, listed.stdout
    status = header.index("status")
    assert all(line[status:].startswith("finished") for line in lines), listed.stdout


def test_cli_refuses_a_foreign_store_in_one_line(tmp_path, monkeypatch):
    path = tmp_path / "notes.txt"
    path.write_text("not a database\n")
    monkeypatch.setenv("LEAKDEMO_STORE", str(path))
    r = _cli("run", "dlg", "--set", "image_size=16", "--set", "iterations=2")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith(f"error: run store: {path} is not a SQLite database")
    assert path.read_text() == "not a database\n"


def test_grayscale_images_keep_their_single_channel(tmp_path):
    store = RunStore(str(tmp_path / "runs.sqlite"))
    started, finished, frames = _synthetic_events(3)
    gray = started.originals[..., :1]
    started.originals, finished.images = gray, gray
    run_id = store.record("k", "test", {"params": {}}, started, finished, [(0, gray)])
    back = store.load(run_id)
    assert back.started.originals.shape == gray.shape and back.finished.images.shape == gray.shape
    assert np.abs(back.finished.images - gray).max() <= 1 / 255 + 1e-6


def test_a_run_whose_record_fails_still_reaches_the_user(tmp_path, monkeypatch):
    store = RunStore(str(tmp_path / "runs.sqlite"))
    monkeypatch.setattr(store, "record", lambda *a, **k: (_ for _ in ()).throw(ValueError("disk on fire")))
    run, events = _run(store)
    assert events[-1].event == "finished" and run.stored_id is None


def test_the_code_version_ignores_the_dashboard(tmp_path, monkeypatch):
    """Pages change often; results do not depend on them, so a page edit must not invalidate the store."""
    import shutil

    import leakdemo
    from leakdemo import store as store_module
    copy = tmp_path / "leakdemo"
    shutil.copytree(os.path.dirname(leakdemo.__file__), copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(store_module, "__file__", str(copy / "store.py"))

    def version():
        store_module.code_version.cache_clear()
        return store_module.code_version()
    before = version()
    (copy / "dashboard" / "lab.py").write_text("# edited\n", encoding="utf-8")
    assert version() == before
    (copy / "runner.py").write_text((copy / "runner.py").read_text() + "\n# edited\n", encoding="utf-8")
    assert version() != before
    store_module.code_version.cache_clear()


def test_a_recorded_runs_privacy_note_is_said_as_today_s_code_says_it(tmp_path):
    """Whether a defense gives a formal guarantee follows from the scenario alone, so a recorded run is told it
    in today's words: the shipped CAFE-against-fake-gradients showcase exported "Fake gradients is not a
    differentially private mechanism", where a run made now says "this defense (fake gradients) is not …"."""
    from leakdemo import privacy
    from leakdemo.gallery import open_gallery
    gallery = open_gallery()
    run_id = next(r["id"] for r in gallery.runs(limit=1000) if r["source"] == "gallery" and r["defense"] == "fake-gradients")
    stored = gallery.load(run_id, keyframes=False)
    assert stored.finished.metrics["privacy_note"] == privacy.guarantee(stored.scenario["params"])["note"] == (
        "no formal guarantee: this defense (fake gradients) is not a differentially private mechanism")

    # a scenario recorded before a setting the guarantee reads existed keeps the note it was recorded with
    store = RunStore(str(tmp_path / "runs.sqlite"))
    run, events = _run(store, defense="dp-gaussian", dp_sigma=0.1, dp_clip=0.0)
    with sqlite3.connect(store.path) as conn:
        (text,) = conn.execute("SELECT scenario FROM runs WHERE id = ?", (run.stored_id,)).fetchone()
        old = json.loads(text)
        del old["params"]["dp_clip"]
        conn.execute("UPDATE runs SET scenario = ? WHERE id = ?", (json.dumps(old), run.stored_id))
    assert store.load(run.stored_id).finished.metrics["privacy_note"] == events[-1].metrics["privacy_note"]


def test_kept_lists_this_code_versions_newest_first(tmp_path, monkeypatch):
    """What the presenter's chooser lists of the user's finished sweeps: newest first, each once, and only what
    this code version kept (an older version's sweep has no runs this version would draw)."""
    import leakdemo.store as store_module
    store = RunStore(str(tmp_path / "runs.sqlite"))
    import time
    for key, label in (("a", "a"), ("b", "b"), ("a", "a again")):
        store.keep("presenter-sweep", f"sweep:custom:{key}", {"label": label})
        time.sleep(0.01)  # each kept later than the one before, on any clock
    store.keep("utility", "k", 0.5)
    assert store.kept("presenter-sweep") == [("sweep:custom:a", {"label": "a again"}), ("sweep:custom:b", {"label": "b"})]
    monkeypatch.setattr(store_module, "code_version", lambda: "another-version")
    assert store.kept("presenter-sweep") == []


def test_runs_reads_a_store_that_does_not_exist_without_creating_it(store_path):
    """A mistyped LEAKDEMO_STORE made `runs list` create an empty store there and answer "0 runs in …"."""
    listed = _cli("runs", "list")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.strip() == (f"0 runs: no run store at {store_path} yet (`run`, `sweep` and the dashboard "
                                     "record their runs there)")
    assert json.loads(_cli("runs", "list", "--json").stdout) == []
    shown = _cli("runs", "show", "3")
    assert shown.returncode == 2 and shown.stderr.strip() == f"error: runs show: no run store at {store_path} yet " \
        "(`run`, `sweep` and the dashboard record their runs there)"
    assert not store_path.exists()
