import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "leakdemo", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def test_list_shows_everything():
    r = cli("list")
    assert r.returncode == 0
    for word in ("fedsgd", "dlg", "idlg", "invgrad", "dp-gaussian", "dp-laplace", "prune", "invgrad-batch"):
        assert word in r.stdout
    d = json.loads(cli("list", "--json").stdout)
    assert {p["name"] for p in d["presets"]} >= {"dlg", "idlg", "invgrad", "invgrad-batch"}


def test_list_lines_up_its_columns_and_gives_integer_bounds_in_full():
    """Each parameter's range starts in one column, whatever the length of `name=default`; each component's
    title too, `logit-temperature` included. `seed` read `[0, 2.14748e+09]`."""
    out = cli("list").stdout.splitlines()
    starts = {line.index(rng) for line in out for setting, rng in (("image_size=32 ", "[8, 128]"),
              ("secure_aggregation=False ", "bool"), ("tv_dataset=CIFAR10 ", "{CIFAR10|"), ("seed=0 ", "[0, "))
              if setting in line and rng in line}
    assert len(starts) == 1, starts
    assert any("seed=0" in line and "[0, 2147483647]" in line for line in out)
    titles = {line.index(title) for line in out for name, title in (("fedsgd", "FedSGD —"),
              ("logit-temperature", "Flattened logits"), ("invgrad-fedavg", "Simulation (")) if f"  {name} " in line
              and title in line}
    assert len(titles) == 1, titles


def test_list_takes_one_section_or_one_name():
    """The whole list is 250 lines: `list attacks` gives one section, `list cafe` the attack and the preset of
    that name in full (the preset with its settings), lined up as in the whole list; a name it lacks is refused."""
    attacks = cli("list", "attacks").stdout
    assert attacks.startswith("ATTACKS\n  dlg ") and "PROTOCOLS" not in attacks and "PRESETS" not in attacks
    cafe = cli("list", "cafe")
    assert cafe.stdout.startswith("ATTACKS\n  cafe              CAFE — catastrophic data leakage in vertical FL")
    assert "\nPRESET cafe (python -m leakdemo run cafe)\n" in cafe.stdout and "  protocol=vfl attack=cafe " in cafe.stdout
    whole = cli("list").stdout
    assert all(line in whole for line in cafe.stdout.split("\nPRESET")[0].splitlines())  # same columns
    assert "preset dlg image_size=16 iterations=100 defense=dp-gaussian; varies dp_sigma=" in cli("list", "sweep-dp-dlg").stdout
    assert set(json.loads(cli("list", "cafe", "--json").stdout)) == {"attacks", "presets"}
    r = cli("list", "atacks")
    assert r.returncode == 2 and r.stderr.startswith("error: list: 'atacks' is none of the catalog's sections or "
                                                     "names (did you mean attacks?); sections: protocols, ")


def test_list_takes_several_sections_or_names():
    """`list presets sweeps` was refused ("unrecognized arguments: sweeps"); several, spaced or comma-separated as
    `bench` takes presets, list each once, in the catalog's order."""
    both = cli("list", "sweeps", "presets")
    assert both.returncode == 0, both.stderr
    assert both.stdout.startswith("PRESETS\n") and "\nSWEEPS (python -m leakdemo sweep NAME)\n" in both.stdout
    assert cli("list", "presets,sweeps", "presets").stdout == both.stdout
    named = json.loads(cli("list", "dlg,prune", "--json").stdout)
    assert [c["name"] for c in named["attacks"]] == ["dlg"] and [c["name"] for c in named["defenses"]] == ["prune"]
    r = cli("list", ",")
    assert r.returncode == 2 and r.stderr.startswith("error: list: name a section or a name"), r.stderr


def make_run(port) -> subprocess.CompletedProcess:
    """`make run` as the README gives it, with this interpreter and without (re)building .venv."""
    return subprocess.run(["make", "-s", "-o", ".venv/.installed", "run", f"PORT={port}", f"PY={sys.executable}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_make_run_names_another_port_when_its_own_is_taken():
    """A dashboard left open from the last lesson holds the port; streamlit said only "Port 8501 is not
    available", and nothing of PORT=."""
    import socket
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        r = make_run(port)
    assert r.returncode != 0
    assert (f"port {port} is in use (a dashboard already running there?): make run PORT={port + 1} starts another"
            in r.stderr)
    for bad in ("abc", "70000"):
        r = make_run(bad)
        assert r.returncode != 0 and f"PORT: must be a number in [1, 65535], got '{bad}'" in r.stderr


def test_run_jsonl_contract_and_artifacts_replay(tmp_path):
    out = tmp_path / "out"
    r = cli("run", "dlg", "--set", "iterations=3", "--set", "image_size=16", "--jsonl", "--out", str(out))
    assert r.returncode == 0, r.stderr
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert lines[0]["event"] == "started" and lines[-1]["event"] == "finished"
    progress = [x for x in lines if x["event"] == "progress"]
    assert progress and all({"iteration", "seconds", "psnr"} <= set(x) for x in progress)
    fin = lines[-1]
    assert {"psnr", "ssim", "lpips", "label_accuracy", "seconds", "iterations"} <= set(fin)
    assert sorted(os.listdir(out)) == ["grid.png", "history.csv", "metrics.json", "progress.gif", "scenario.json"]
    from leakdemo.artifacts import RUN_FILES
    assert set(os.listdir(out)) <= set(RUN_FILES)  # what --out checks before the run
    written = json.loads((out / "metrics.json").read_text())
    assert written["psnr"] == fin["psnr"] and {"to_20db_s", "to_30db_s"} <= set(written)  # when 20/30 dB came
    again = cli("run", str(out / "scenario.json"), "--jsonl")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout.splitlines()[-1])["psnr"] == fin["psnr"]
    # the folder itself, as `run --out` named it (it read "cannot read 'out' (Is a directory)")
    folder = cli("run", str(out), "--jsonl")
    assert folder.returncode == 0, folder.stderr
    assert json.loads(folder.stdout.splitlines()[-1])["psnr"] == fin["psnr"]
    empty = cli("run", str(tmp_path))  # a folder without one: one line that says what to give
    assert empty.returncode == 2 and empty.stderr == (f"error: scenario: {str(tmp_path)!r} is a folder with no "
                                                      "scenario.json in it (give the scenario.json that `run --out` "
                                                      "or `runs export` wrote, or its folder)\n"), empty.stderr


@pytest.mark.parametrize("args,starts", [
    (("run", "nope"), "error: preset: unknown preset 'nope'; available: agic, agic-multiround, cafe"),
    # a typo gets the name meant, a swap of two letters first
    (("run", "dgl"), "error: preset: unknown preset 'dgl' (did you mean dlg or dlm?); available: agic, "),
    # a protocol, attack or defense named as the preset: its presets, or one to start from that takes it
    (("run", "vfl"), "error: preset: unknown preset 'vfl' (vfl is a protocol: its presets are cafe, cafe-faces, "
                     "cafe-fake-gradients, cafe-training); available: agic, "),
    (("run", "tbi"), "error: preset: unknown preset 'tbi' (tbi is an attack that no preset has: start from pli and "
                     "set attack=tbi); available: agic, "),
    (("sweep", "dp-gaussian", "--vary", "dp_sigma=0.1,1"), "error: sweep: unknown sweep or preset 'dp-gaussian' "
     "(dp-gaussian is a defense that no preset has: start from dlg and set defense=dp-gaussian); built-in sweeps: "),
    (("run", "dlg", "--set", "defense=dp-gausian"), "error: defense: must be one of none, dp-gaussian, dp-laplace, "
     "prune, fake-gradients, logit-noise, logit-rounding, top-k, logit-temperature; got 'dp-gausian' (did you mean "
     "dp-gaussian?)"),
    (("run", "dlg", "--set", "images=cofee"), "error: images: unknown samples item 'cofee' (did you mean coffee?); "),
    (("sweep", "sweep-dp-dgl"), "error: sweep: unknown sweep or preset 'sweep-dp-dgl' (did you mean sweep-dp-dlg or "),
    (("fidelity", "--only", "dgl"), "error: fidelity --only: unknown check dgl (did you mean dlg?); known: "),
    (("run", "dlg", "--set", "zzz=1"), "error: zzz: unknown parameter"),
    (("run", "dlg", "--set", "=3"), "error: --set: expected name=value, got '=3'"),
    (("run", "dlg", "--set", "lr=-1"), "error: lr: must be a number in [0.0001, 10], got -1"),
    (("run", "dlg", "--set", "batch_size=0"), "error: batch_size: must be an integer in [1, 64], got 0"),
    (("run", "dlg", "--set", "attack=magic"), "error: attack: must be one of dlg, idlg, invgrad"),
    # an attack of another protocol's said only what this one allows, not where the attack belongs
    (("run", "dlg", "--set", "attack=cafe"), "error: attack: cafe does not apply to protocol fedsgd; allowed: dlg, "
                                             "idlg, invgrad (cafe attacks vfl: set protocol=vfl too)"),
    (("run", "dlg", "--set", "images=nope"), "error: images: unknown samples item 'nope'"),
    (("run", "dlg", "--set", "iterations"), "error: --set: expected name=value"),
    # two values for one name ran the last one without a word
    (("run", "dlg", "--set", "seed=1", "--set", "iterations=5", "--set", "seed=2"),
     "error: --set: seed is set twice (seed=1 and seed=2); give it once"),
    (("sweep", "sweep-dp-dlg", "--set", "seed=1", "--set", "seed=2"), "error: --set: seed is set twice"),
    # CAFE's Step III with every term weighted 0: "internal error (… does not require grad …)"
    (("run", "cafe", "--set", "internal_weight=0", "--set", "tv_weight=0"),
     "error: internal_weight: Step III needs a term to minimise"),
    # FedGEMS's server model pooled an 8-px image down to nothing: "internal error (RuntimeError: … too small)"
    (("run", "pli", "--set", "protocol=fedgems", "--set", "image_size=8"),
     "error: image_size: must be 16, 32 or 64 on FedGEMS"),
    (("run", "/tmp/definitely-missing.json"), "error: scenario: cannot read '/tmp/definitely-missing.json' (No such "
                                              "file or directory)"),
    (("run", "dlg", "--device", "cuda"), "error: device: cuda is not available"),
    (("frobnicate",), "error: frobnicate: not a command; the commands are list, run, sweep, "),
    (("lst",), "error: lst: not a command (did you mean list?); the commands are list, run, "),
    (("run", "dlg", "--device", "gpu"), "error: --device: must be one of auto, cpu, cuda, got gpu (did you mean cuda?)"),
    # a value the user did not type, kept from the preset, says where it came from
    (("run", "dlg", "--set", "protocol=fedmd", "--set", "attack=pli"),
     "error: data: must be one of faces, digits; got 'samples' (the value of preset dlg; set data too when switching"),
    # bench checks every scenario before its table starts: no header, no rows, then an error minutes later
    (("bench", "dlg", "--images", "coffee,nope"), "error: images: unknown samples item 'nope'"),
    (("bench", "dlg", "--set", "batch_size=40"), "error: batch_size: must be at most 23 for data=samples"),
    (("bench", "--device", "cuda"), "error: device: cuda is not available"),
    (("bench", "dlg", "--device", "cpu,gpu"), "error: device: must be auto, cpu or cuda, or several of them (cpu,cuda); got 'gpu' (did you mean cuda?)"),
    (("bench", "dlg", "--device", "cpu,cpu"), "error: device: each device once; 'cpu,cpu' names cpu twice on this machine"),
    (("bench", "dlg", "--device", "cpu,cuda"), "error: device: cuda is not available"),
    (("bench", "dlg", "--cpu-threads", "0"), "error: --cpu-threads: must be an integer in [1, 256], got 0"),
    # a list given but empty: bench ran its default photo three times and reported "3/3 reach 30 dB"
    (("bench", "dlg", "--images", ",,"), "error: --images: give at least one name, comma-separated; got ',,'"),
    (("sweep", "sweep-dp-dlg", "--images", " "), "error: --images: give at least one name"),
    (("fidelity", "--only", ","), "error: --only: give at least one name"),
    (("sweep", "dlg", "--set", "defense=dp-gaussian", "--vary", "=1..2:3"), "error: --vary: name the parameter before '='"),
    (("sweep", "sweep-dp"), "error: sweep: unknown sweep or preset 'sweep-dp' (did you mean sweep-dp-dlg or "
                            "sweep-dp-dlm-plus?); built-in sweeps: sweep-batch-dlg, sweep-dp-dlg, "),
    # a sweep named by its own words, the defense's spelling too: not "top-k is a defense … start from pli"
    (("sweep", "dp"), "error: sweep: unknown sweep or preset 'dp' (did you mean sweep-dp-dlg or sweep-dp-dlm-plus?); "),
    (("sweep", "prune"), "error: sweep: unknown sweep or preset 'prune' (did you mean sweep-prune-dlg?); "),
    (("sweep", "top-k"), "error: sweep: unknown sweep or preset 'top-k' (did you mean sweep-topk-pli?); "),
    # `--seeds 0` ran one seed per point without a word (0 read as "not given")
    (("sweep", "dlg", "--set", "defense=dp-gaussian", "--vary", "dp_sigma=0.1..1:2", "--seeds", "0"),
     "error: --seeds: must be an integer in [1, 16], got 0"),
    # a word where a number goes: argparse's "invalid int value: 'abc'" said nothing of what it takes
    (("runs", "list", "--limit", "abc"), "error: --limit: must be an integer in [1, 100000], got 'abc'"),
    (("sweep", "sweep-dp-dlg", "--workers", "two"), "error: --workers: must be an integer in [1, 64], got 'two'"),
    (("sweep", "sweep-dp-dlg", "--batch", "1e3"), "error: --batch: must be an integer in [1, 256], got '1e3'"),
    (("bench", "dlg", "--cpu-threads", "all"), "error: --cpu-threads: must be an integer in [1, 256], got 'all'"),
    # an output that cannot be written is said before minutes of work, not in a traceback after them
    (("run", "dlg", "--out", "/proc/leakdemo-out"), "error: --out: cannot write '/proc/leakdemo-out' (creating a file in /proc failed: "),
    (("run", "dlg", "--out", __file__), "error: --out: '" + __file__ + "' is a file; give a folder"),
    (("run", "dlg", "--out", os.path.join(__file__, "sub")), "error: --out: cannot write"),
    (("sweep", "sweep-dp-dlg", "--out", "/proc/a/b"), "error: --out: cannot write '/proc/a/b' (creating a file in /proc failed: "),
    (("fidelity", "--out", "/no-such-folder/f.md"), "error: --out: the folder '/no-such-folder' does not exist"),
    (("fidelity", "--out", os.path.dirname(__file__)), "error: --out: '"),
    (("bench", "dlg", "--json", "/proc/b.json"), "error: --json: cannot write '/proc/b.json' (creating a file in /proc failed: "),
    # `--out "$DIR"` with DIR unset: the run went ahead and wrote nothing anywhere
    (("run", "dlg", "--out", ""), "error: --out: empty; give a folder"),
    (("bench", "dlg", "--json", " "), "error: --json: empty; give a file name"),
    (("runs", "list", "--limit", "0"), "error: --limit: must be an integer in [1, 100000], got 0"),
    (("runs", "delete", "1", "2", "3"), "error: runs delete: takes one id, got '1 2 3'"),
    (("runs", "export", "1", "/proc/e"), "error: runs export DIR: cannot write '/proc/e' (creating a file in /proc failed: "),
    (("runs", "frob"), "error: action: must be one of list, show, export, delete, got frob"),  # ... (see `python -m leakdemo runs --help`)
    # an option another action reads was taken and ignored without a word
    (("runs", "show", "1", "--limit", "5"), "error: --limit: applies to `runs list` only, not `runs show`"),
    (("runs", "delete", "1", "--json"), "error: --json: applies to `runs list` (and `runs show`, whose output is JSON), "
                                        "not `runs delete`"),
])
def test_bad_input_is_one_line_exit_2(args, starts):
    # asked before running, as the CLI asks: on a GPU machine `bench --device cuda` would time every standard
    # preset (minutes)
    from leakdemo import device
    if "cuda is not available" in starts and device.cuda_available():
        pytest.skip("this machine has CUDA")
    r = cli(*args)
    assert r.returncode == 2
    assert r.stderr.startswith(starts), r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert r.stdout == ""  # nothing started


@pytest.mark.parametrize("args, name", [(("run", "dlg"), "metrics.json"), (("sweep", "sweep-dp-dlg"), "strip.png")])
def test_an_output_file_s_name_taken_by_a_folder_is_said_before_the_work(tmp_path, args, name):
    # the folder could be written, so the run went ahead; its files came only at the end, and then
    # "error: out/metrics.json: Is a directory" (no --out: prefix) after the minutes it had taken
    (tmp_path / name).mkdir()
    r = cli(*args, "--out", str(tmp_path))
    assert r.returncode == 2
    assert r.stderr == f"error: --out: cannot write {str(tmp_path / name)!r}: it is a folder\n"
    assert r.stdout == ""  # nothing started


def test_a_reader_that_stops_early_ends_the_output_quietly():
    """`list | head -1`: the pipe closes while the catalog is still being written. That printed `error: [Errno
    32] Broken pipe` and exited 2, as if the command had failed; `git log | head` says nothing."""
    p = subprocess.Popen([sys.executable, "-m", "leakdemo", "list"], cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    p.stdout.close()  # before the first line: Python takes a second to start
    err = p.stderr.read()
    assert p.wait(timeout=120) == 141 and err == "", err


def test_a_subcommand_usage_error_points_to_that_subcommand_s_help():
    r = cli("sweep", "dlg", "--seeds")
    assert r.returncode == 2 and r.stderr.strip().endswith("(see `python -m leakdemo sweep --help`)"), r.stderr


def test_an_unknown_option_names_its_subcommand_and_a_parameter_written_as_an_option_gets_the_fix():
    """`run dlg --iterations 50` is what a newcomer types first: the answer says how parameters are set."""
    r = cli("run", "dlg", "--iterations", "50")
    assert r.returncode == 2 and r.stdout == "", r.stderr
    assert r.stderr.strip() == ("error: unrecognized arguments: --iterations 50; parameters are set with "
                                "--set iterations=50 (see `python -m leakdemo run --help`)"), r.stderr
    assert "parameters are set with --set iterations=5 (" in cli("run", "--iterations", "5", "dlg").stderr  # "5" taken as the preset
    r = cli("sweep", "dlg", "--dp-sigma=0.1")
    assert "--set dp_sigma=0.1 (see `python -m leakdemo sweep --help`)" in r.stderr, r.stderr
    r = cli("run", "dlg", "--bogus", "3")  # not a parameter: argparse's words alone
    assert r.stderr.strip() == "error: unrecognized arguments: --bogus 3 (see `python -m leakdemo run --help`)"


def test_a_second_parameter_after_one_set_gets_the_line_with_a_set_each():
    """`--set data=folder folder=~/pics` is how many CLIs take several pairs; ours takes one per --set, and
    argparse's answer alone ("unrecognized arguments: folder=~/pics") did not say so."""
    r = cli("run", "dlg", "--set", "data=folder", "folder=/tmp/x", "images=a.png")
    assert r.returncode == 2 and r.stdout == "", r.stderr
    assert r.stderr.strip() == ("error: unrecognized arguments: folder=/tmp/x images=a.png; each parameter takes its "
                                "own --set: python -m leakdemo run dlg --set data=folder --set folder=/tmp/x --set "
                                "images=a.png (see `python -m leakdemo run --help`)"), r.stderr
    r = cli("sweep", "dlg", "--set", "defense=dp-gaussian", "--vary", "dp_sigma=0.1,1", "dp_clip=1,2")  # after --vary
    assert "each parameter takes its own --vary: python -m leakdemo sweep dlg --set defense=dp-gaussian --vary " \
           "dp_sigma=0.1,1 --vary dp_clip=1,2 (" in r.stderr, r.stderr
    assert cli("run", "dlg", "bogus=3").stderr.strip() == \
        "error: unrecognized arguments: bogus=3 (see `python -m leakdemo run --help`)"  # no parameter: no fix offered


@pytest.mark.parametrize("args, fix", [
    (("run", "dlg", "--set", "images=coffee,", "rocket", "camera", "--set", "seed=1"),
     "rocket camera; a list is comma-separated, with no spaces: --set images=coffee,rocket,camera ("),
    (("sweep", "dlg", "--vary=lr=0.1,", "1"), "1; a list is comma-separated, with no spaces: --vary lr=0.1,1 ("),
    (("run", "dlg", "idlg"), "idlg; run takes one preset at a time (`python -m leakdemo bench` times several) ("),
    (("sweep", "sweep-dp-dlg", "sweep-prune-dlg"), "sweep-prune-dlg; sweep takes one sweep or preset at a time ("),
])
def test_a_list_typed_with_spaces_or_a_second_preset_gets_the_fix(args, fix):
    """argparse's "unrecognized arguments: rocket" alone left the user to guess that a list takes no spaces, or that
    run takes one preset."""
    r = cli(*args)
    assert r.returncode == 2 and r.stderr.startswith(f"error: unrecognized arguments: {fix}"), r.stderr


def test_run_with_presets_comma_separated_is_pointed_at_bench():
    r = cli("run", "dlg,idlg")  # was: unknown preset 'dlg,idlg' (did you mean idlg?)
    assert r.returncode == 2 and r.stderr.strip() == "error: run: one preset at a time, got 'dlg,idlg' (`python -m " \
        "leakdemo bench dlg,idlg` times several)", r.stderr


def test_the_bare_command_prints_what_there_is_to_type():
    r = cli()
    assert r.returncode == 2 and "usage: python -m leakdemo [-h] [--version] COMMAND" in r.stdout, r.stdout + r.stderr
    assert all(f"    {c} " in r.stdout for c in ("list", "run", "sweep", "runs", "fidelity", "bench")), r.stdout


def test_version_names_leakdemo_torch_and_python():
    """What a bug report needs, in one line; `--version` used to be refused as a missing COMMAND."""
    import platform
    import torch
    from leakdemo import __version__
    r = cli("--version")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    torch_version = re.escape(torch.__version__.split("+")[0]) + r"(\+\S+)?"  # a wheel's metadata may keep +cu130
    assert re.fullmatch(rf"leakdemo {re.escape(__version__)} \(torch {torch_version}, Python "
                        rf"{re.escape(platform.python_version())}\)\n", r.stdout), r.stdout


def test_a_preset_given_with_a_flag_gets_the_command_without_it():
    """`run --preset dlg`: argparse took `dlg` as the preset and refused `--preset`; the answer is the line to type."""
    r = cli("run", "--preset", "dlg")
    assert r.returncode == 2 and r.stdout == "", r.stderr
    assert r.stderr.strip() == ("error: unrecognized arguments: --preset; name it without --preset: "
                                "python -m leakdemo run dlg (see `python -m leakdemo run --help`)"), r.stderr
    assert "name it without --sweep: python -m leakdemo sweep sweep-dp-dlg (" in cli(
        "sweep", "--sweep=sweep-dp-dlg").stderr  # glued, the preset went missing: "arguments are required"
    assert "name it without --preset: python -m leakdemo bench dlg idlg (" in cli("bench", "--preset", "dlg", "idlg").stderr
    assert cli("run", "dlg", "--preset=").stderr.startswith(  # empty: nothing said after the flag
        "error: unrecognized arguments: --preset; name it without --preset: python -m leakdemo run dlg (")
    # with parameters given as flags too, the whole line as it should have been typed — the options argparse
    # knew (--vary) kept: it had named the preset alone, and the defense and the sweep were lost
    r = cli("sweep", "--preset", "dlg", "--defense", "dp-gaussian", "--vary", "dp_sigma=0.01,0.1")
    assert r.returncode == 2 and r.stdout == "", r.stderr
    assert r.stderr.strip() == ("error: unrecognized arguments: --preset --defense dp-gaussian; name it without "
                                "--preset: python -m leakdemo sweep dlg --set defense=dp-gaussian --vary "
                                "dp_sigma=0.01,0.1 (see `python -m leakdemo sweep --help`)"), r.stderr
    assert "without --preset: python -m leakdemo run dlg --set iterations=5 --set image_size=16 --out 'my runs/a' (" in cli(
        "run", "--preset", "dlg", "--iterations", "5", "--image-size=16", "--out", "my runs/a").stderr


def test_a_note_said_again_and_again_is_printed_once_and_counted():
    """DLG on vertical FL: L-BFGS diverges, and is sent back to its best estimate, 4 times in 30 steps (21 in
    100) — each once a line of its own, burying the run's other output."""
    r = cli("run", "dlg", "--set", "protocol=vfl", "--set", "iterations=30")
    assert r.returncode == 0, r.stderr
    note = "diverged — back to the best estimate so far"
    lines = r.stderr.splitlines()
    assert lines.count(note) == 1, r.stderr
    counted = [line for line in lines if line.startswith(f"({note}: ")]
    assert len(counted) == 1 and counted[0].endswith(" times in all)"), r.stderr
    assert "label accuracy 1.00" in r.stdout  # its one batch's label, not 1 of 100 samples' (0.01)


def test_a_progress_gif_of_one_frame_is_written():
    """A run stopped at its first frame keeps one keyframe; Pillow refused a list of one duration."""
    import io

    import numpy as np
    from PIL import Image

    from leakdemo.artifacts import gif_bytes
    originals = np.zeros((1, 8, 8, 3), dtype=np.float32)
    gif = Image.open(io.BytesIO(gif_bytes(originals, [(1, originals + 0.5)])))
    assert gif.n_frames == 1 and gif.size[0] > 8


def test_downloaded_pictures_say_what_they_show():
    """grid.png and progress.gif go into slides, away from the page that said what they show: each carries
    a band under the pictures — the run, what is where, its figures or the frame's iteration."""
    import io

    import numpy as np
    from PIL import Image, ImageSequence

    from leakdemo.artifacts import _result_words, _scenario_words, layout_words, pair_grid, run_files
    from leakdemo.events import Finished
    from leakdemo.scenario import from_preset
    scenario = from_preset("dlg", {"batch_size": 2})
    rng = np.random.default_rng(0)
    originals, final = rng.random((2, 8, 8, 3)), rng.random((2, 8, 8, 3))
    fin = Finished("finished", {"psnr": 31.24, "ssim": 0.9, "psnr_per_image": [30.0, 32.5]}, final, 4.0, 100)
    files = run_files(scenario.to_json(), originals, fin, [(0, originals * 0), (50, final / 2), (100, final)])
    params = scenario.params
    assert _scenario_words(params) == ["DLG on FedSGD · no defense"]
    assert layout_words(2, params) == "top: the private images (never sent) · below: what the server rebuilt"
    assert _result_words(fin, params) == "PSNR 31.2 dB, SSIM 0.900 after 100 iterations"
    pli = from_preset("pli", {"inversion_epochs": 100}).params  # 5 rounds: "500" alone read as a mistake
    accuracy = Finished("finished", {"attack_accuracy": 0.8, "success": [True] * 8 + [False] * 2}, final, 9.0, 500)
    assert _result_words(accuracy, pli) == ("attack accuracy 80% (8 of 10 classes) after 500 inversion epochs (100 on "
                                           "each of the 5 rounds' logits)")
    grid = np.asarray(Image.open(io.BytesIO(files["grid.png"])).convert("RGB"))
    pair = pair_grid(originals, final, psnr=[30.0, 32.5])
    left = (grid.shape[1] - pair.shape[1]) // 2  # a narrow pair is centred over its caption
    assert (grid[:pair.shape[0], left:left + pair.shape[1]] == pair).all()
    band = grid[pair.shape[0]:]
    assert band.shape[0] > 40 and (band < 100).any()  # three lines of dark text
    frames = [np.asarray(f.convert("RGB")) for f in ImageSequence.Iterator(Image.open(io.BytesIO(files["progress.gif"])))]
    assert len(frames) == 3 and len({f.shape for f in frames}) == 1  # one size, whatever each frame's caption
    first, last = (frames[i].astype(int) for i in (0, -1))
    height = pair_grid(originals, final, 96, width=480).shape[0]
    third = (first.shape[0] - height) // 3
    # "DLG on FedSGD · no defense" and where is what on every frame (the GIF's palettes shift them a little),
    # then "iteration 0 of 100" on the first, "iteration 100 of 100" on the last
    assert abs(first[height:-third] - last[height:-third]).max() < 60
    assert abs(first[-third:] - last[-third:]).max() > 150
    from leakdemo.artifacts import matching_grid, matching_png
    matching = {"views": [rng.random((2, 8, 8, 3)) for _ in range(3)], "correct": [True, False, True]}
    png = np.asarray(Image.open(io.BytesIO(matching_png(matching, params))).convert("RGB"))
    bare = matching_grid(matching)  # AGIC's pairing: the grid over its caption too
    left = (png.shape[1] - bare.shape[1]) // 2
    assert (png[:bare.shape[0], left:left + bare.shape[1]] == bare).all() and (png[bare.shape[0]:] < 100).any()


def test_bench_covers_vertical_fl_and_logit_sharing(tmp_path):
    """`bench` with no preset runs every standard one: it stopped with a KeyError traceback at `cafe`, the first
    preset that takes a data set instead of named images. Its row names the data set; "total s" is the wall
    time a user waits (PLI's federation trains before the attack's first epoch)."""
    r = cli("bench", "cafe-fake-gradients", "--set", "iterations=40")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    header = next(line for line in r.stdout.splitlines() if line.startswith("preset"))
    row = next(line for line in r.stdout.splitlines() if line.startswith("cafe"))
    # in its column, under its header: a name longer than 16 characters ran into it ("cafe-fake-gradients(digits)")
    assert row.split()[1] == "(digits)" and row.index("(digits)") == header.index("images")
    out = str(tmp_path / "b.json")
    r = cli("bench", "pli-digits", "--set", "rounds=1", "--set", "inversion_epochs=2", "--json", out)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    (result,) = json.load(open(out))
    assert result["images"] == "(digits)" and result["attack_accuracy"] is not None
    assert result["wall_s"] > result["first_frame_s"] > result["seconds"]  # the federation's training first


def test_bench_runs_the_cpu_rows_on_the_threads_asked(tmp_path):
    """`--cpu-threads` holds the CPU's rows to N threads (the issue compares a GPU with two CPU threads on the
    same machine); the header says so, and the rows' JSON names the device each ran on. More threads than the
    machine has cores is said, as the rows time slower for it."""
    out = str(tmp_path / "b.json")  # pytest's own folder: tempfile.mkdtemp() left one behind on every run
    r = cli("bench", "dlg", "--set", "iterations=3", "--set", "image_size=16", "--device", "cpu", "--cpu-threads", "1",
            "--json", out)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert ", 1 thread, device cpu;" in r.stdout.splitlines()[0], r.stdout
    assert "note: --cpu-threads" not in r.stderr
    (row,) = json.load(open(out))
    assert row["device"] == "cpu" and row["preset"] == "dlg"
    # more threads than cores take turns on them: DLG ran 6.3 it/s at 8 threads on 2 cores, 17.1 at 2 — said
    cores = os.cpu_count()
    r = cli("bench", "dlg", "--set", "iterations=3", "--set", "image_size=16", "--device", "cpu", "--cpu-threads",
            str(cores + 1))
    assert r.returncode == 0 and f"note: --cpu-threads {cores + 1} is more than this machine's {cores} core" in r.stderr


def test_bench_takes_presets_comma_separated_as_its_images_and_each_once(tmp_path):
    """`bench dlg,idlg`, written as --images is, was refused as one unknown preset 'dlg,idlg' (did you mean idlg?);
    `bench dlg dlg` timed dlg twice."""
    out = str(tmp_path / "b.json")
    r = cli("bench", "dlg,idlg", "dlg", "--set", "iterations=2", "--set", "image_size=16", "--json", out)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert [row["preset"] for row in json.load(open(out))] == ["dlg", "idlg"]
    r = cli("bench", "dlg,nope")
    assert r.returncode == 2 and r.stderr.startswith("error: preset: unknown preset 'nope'"), r.stderr
    r = cli("bench", ",")
    assert r.returncode == 2 and r.stderr.strip() == "error: bench: name the presets to time, or none for every " \
        "standard one; got ','", r.stderr


def test_bench_sets_each_row_what_it_takes_and_says_what_it_left_out():
    """`bench --set iterations=50` over the standard presets stopped on PLI's row ('does not apply'): PLI's rows
    run without it, said once. A name no row takes stays, to be refused as `run` refuses it."""
    from leakdemo.cli import bench_sets
    sets, notes = bench_sets(["pli-digits", "dlg", "pli"], {"iterations": "50", "images": "coffee"})
    assert sets == {"pli-digits": {}, "dlg": {"iterations": "50", "images": "coffee"}, "pli": {}}
    assert "note: iterations is not a setting of pli-digits, pli: their rows run without it; pli's counterpart " \
           "is inversion_epochs" in notes and "note: images is not a setting of pli-digits, pli: their rows run " \
           "without it" in notes
    _, notes = bench_sets(["pli", "dlg"], {"images": "coffee"}, images_flag=True)  # as --images gave it
    assert notes == ["note: --images: pli takes no named images: its row runs once, on its own data"], notes
    assert bench_sets(["pli", "dlg"], {"iterationz": "5"}) == ({"pli": {"iterationz": "5"}, "dlg": {"iterationz": "5"}}, [])
    assert bench_sets(["pli"], {"iterations": "5"})[0] == {"pli": {"iterations": "5"}}
    r = cli("bench", "pli-digits", "dlg", "--set", "iterationz=5")
    assert r.returncode == 2 and r.stderr.startswith("error: iterationz: unknown parameter (did you mean iterations"), r.stderr


def test_bench_side_by_side_has_a_device_column_medians_and_the_speed_up(monkeypatch, capsys):
    """`--device cpu,cuda` on a GPU machine: each row names its device, each device gets its median, and a last
    line says how much sooner cuda reached 30 dB. CI has no GPU, so here the 'cuda' rows compute on the CPU
    (torch is told cpu; every other part of the bench sees cuda): the table's layout is what is checked."""
    import torch

    from leakdemo import cli as cli_module
    from leakdemo import device, runner
    monkeypatch.setenv("LEAKDEMO_STORE", "off")
    monkeypatch.setattr(device, "cuda_available", lambda: True)
    monkeypatch.setattr(runner, "resolve_device", lambda choice: torch.device("cpu"))
    assert cli_module.main(["bench", "dlg", "--set", "iterations=40", "--set", "image_size=16", "--images",
                            "coffee,rocket", "--device", "cpu,cuda", "--cpu-threads", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "devices cpu, cuda side by side, the CPU's rows on 1 thread" in lines[0]
    header = lines[1]
    rows = [line for line in lines if line.startswith("dlg")]
    assert [r.split()[1:3] for r in rows] == [["coffee", "cpu"], ["coffee", "cuda"], ["rocket", "cpu"], ["rocket", "cuda"]]
    assert all(r.index(r.split()[2]) == header.index("device") for r in rows)
    medians = [line.split()[:2] for line in lines if line.strip().startswith("median")]
    assert medians == [["median", "cpu"], ["median", "cuda"]]
    assert "cuda reached 30 dB" in lines[-1] and " than cpu (medians)" in lines[-1]  # N× sooner (or later)


def test_a_run_without_label_accuracy_says_why():
    """CAFE's preset leaves gradient matching off (α = 0), the one term through which it guesses labels: the
    summary's "label accuracy n/a" said nothing of why, the Lab's help did; both now read the catalog's reason."""
    from leakdemo.cli import _summary
    from leakdemo.events import Finished
    metrics = {"psnr": 31.0, "ssim": 0.9, "lpips": None, "label_accuracy": None}
    lines = _summary(Finished("finished", metrics, None, 1.0, 10), {"attack": "cafe", "gradient_weight": 0.0})
    assert lines.splitlines()[-1] == ("  label accuracy n/a: CAFE guesses the labels only through its gradient-"
                                      "matching term, which is off in this run (gradient_weight α = 0)")
    metrics["label_accuracy"] = 1.0
    assert "label accuracy n/a" not in _summary(Finished("finished", metrics, None, 1.0, 10), {"attack": "cafe"})


def test_the_privacy_line_says_each_thing_once():
    """The run's summary names the privacy guarantee once: "no formal guarantee: without clipping …", not
    "no formal guarantee — no formal guarantee: …"; an ε is followed by how it was accounted."""
    from leakdemo.cli import _summary
    from leakdemo.events import Finished
    from leakdemo.privacy import describe, guarantee
    from leakdemo.scenario import from_preset

    def line(**params):
        g = guarantee(from_preset("dlg", params).params)
        metrics = {"psnr": 14.8, "ssim": 0.5, "lpips": None, "label_accuracy": 1.0, "privacy": describe(g),
                   "privacy_note": g["note"]}
        return _summary(Finished("finished", metrics, None, 1.0, 10), params).splitlines()[-1]

    assert line(defense="dp-gaussian", dp_sigma=0.01) == (
        "  privacy: no formal guarantee: without clipping (dp_clip = 0) one image can move the payload without "
        "bound, so no amount of noise gives an ε")
    assert line(defense="dp-gaussian", dp_sigma=0.0, dp_clip=1.0) == "  privacy: clipping without noise: ε = ∞"
    assert line(defense="dp-gaussian", dp_sigma=1.0, dp_clip=1.0).startswith(
        "  privacy: ε = ") and " — (ε, δ)-DP for any one private image" in line(
        defense="dp-gaussian", dp_sigma=1.0, dp_clip=1.0)


def test_what_the_server_receives_reads_right_for_one_of_anything():
    """The threat card's sentence (also in the CLI's run header) in the right number, its defense in words."""
    from leakdemo.catalog import PROTOCOLS
    from leakdemo.scenario import from_preset

    def receives(preset, **params):
        p = from_preset(preset, params).params
        return PROTOCOLS[p["protocol"]].receives(p)

    assert receives("cafe", workers=1, batch_size=1) == (
        "each iteration, for a batch of 1 sample index it chooses itself out of 200, the gradients of the one "
        "worker's bottom model (it holds every image whole)")
    assert receives("pli", rounds=1, defense="top-k") == (
        "in its one round, the logits of 1 client on every public image (labelled public set), each after the "
        "client's defense: Top-k only (k = 1); nothing else")
    assert receives("cafe", defense="fake-gradients").endswith(
        "each after the worker's defense: Fake gradients (fake σ = 1.05, candidates ν = 1000)")
    from leakdemo.cli import _vfl_lines  # the run summary's note on what a vertical-FL score covers
    assert _vfl_lines({"sample_ids": [3]}, {}) == ["scored on the one sample of the one batch the attack saw"]
    assert _vfl_lines({"sample_ids": [3, 5]}, {}) == ["scored on the 2 samples of the one batch the attack saw"]


def test_the_labs_file_of_a_run_on_uploaded_photos_warns_when_replayed(tmp_path):
    """The Lab's scenario.json of a run on uploaded photos was the plain scenario: replayed, it ran the built-in
    photo in silence, as if it were that run. It names the photos now, and `run` says they are missing."""
    from leakdemo.scenario import file_dict, from_preset, uploads_note
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(file_dict(from_preset("dlg", {"image_size": 16, "iterations": 2}), ["me.png"])))
    r = cli("run", str(path))
    assert r.returncode == 0, r.stderr
    assert ("warning: uploads: this scenario ran on 1 uploaded photo (me.png), which its file does not hold: without "
            "them it runs on the data source's own images") in r.stderr
    assert uploads_note(file_dict(from_preset("dlg"))) is None  # a run on the source's own photo: nothing to say
