"""The fidelity report: each paper claim checked by real runs, judged against the paper's bar."""
import subprocess
import sys

import pytest

from leakdemo.errors import LeakdemoError
from leakdemo.fidelity import CHECKS, NOT, PARTLY, REPRODUCED, checks
from leakdemo.scenario import load


def test_every_check_names_runs_that_resolve():
    for c in CHECKS:
        assert c.paper and c.claim and c.their_figure and c.setting
        for preset, overrides in c.runs:
            sc = load(preset, dict(overrides))
            assert all(sc[k] == v for k, v in overrides.items()), (c.name, overrides)


def test_quick_is_a_subset_and_only_is_checked():
    quick = checks(quick=True)
    assert 0 < len(quick) < len(CHECKS) and all(c.quick for c in quick)
    assert [c.name for c in checks(only=["cafe", "dlg"])] == ["dlg", "cafe"]
    with pytest.raises(LeakdemoError, match="unknown check nope"):
        checks(only=["nope"])
    with pytest.raises(LeakdemoError, match="unknown checks nope, nah; known: agic, "):
        checks(only=["dlg", "nope", "nah"])


def _judge(name):
    return next(c for c in CHECKS if c.name == name).judge


def test_judges_apply_the_papers_bars():
    assert _judge("dlg")([{"psnr": 45.0}])[1] == REPRODUCED
    assert _judge("dlg")([{"psnr": 25.0}])[1] == PARTLY
    assert _judge("dlg")([{"psnr": 8.0}])[1] == NOT
    assert _judge("defense-dp")([{"psnr": 6.0}])[1] == REPRODUCED
    assert _judge("defense-dp")([{"psnr": 31.0}])[1] == NOT
    pli = _judge("pli-fedmd")
    assert pli([{"attack_accuracy": a, "baseline_attack_accuracy": b} for a, b in
                ((0.7, 0.2), (0.8, 0.3), (0.6, 0.5))])[1] == REPRODUCED  # medians 0.7 vs 0.3
    assert pli([{"attack_accuracy": 0.4, "baseline_attack_accuracy": 0.2}])[1] == PARTLY
    assert pli([{"attack_accuracy": 0.1, "baseline_attack_accuracy": 0.2}])[1] == NOT
    batch = _judge("invgrad-batch-8")
    run = lambda images: {"psnr_per_image": images, "psnr": sum(images) / len(images), "seconds": 140.0}
    # one lost image does not decide a batch; the median image of each run, then over the seeds, does
    assert batch([run([22, 20, 19, 19, 18.5, 25, 6, 21])] * 2 + [run([12] * 8)])[1] == REPRODUCED
    assert batch([run([16] * 8)] * 3)[1] == PARTLY
    assert batch([run([25, 25, 25, 10, 10, 10, 10, 10])] * 3)[1] == NOT
    training = _judge("cafe-training")
    run = lambda images, loss: {"psnr_per_image": images, "utility": {"while_attacked": loss}}
    assert training([run([27, 28, 12, 26], [2.3, 1.8])])[1] == REPRODUCED  # the median sample, not the mean
    assert training([run([22] * 4, [2.3, 1.8])])[1] == PARTLY
    assert training([run([30] * 4, [2.3, 2.3])])[1] == NOT  # a model that did not train proves nothing here
    fake = _judge("cafe-fake-gradients")
    assert fake([{"psnr": 8.0, "utility": {"defended": [2.3, 0.7]}}])[1] == REPRODUCED
    assert fake([{"psnr": 8.0, "utility": {"defended": [2.3, 2.2]}}])[1] == PARTLY


def test_cli_runs_the_checks_and_prints_the_table(tmp_path, store_path):
    out = tmp_path / "fidelity.md"
    cmd = [sys.executable, "-m", "leakdemo", "fidelity", "--only", "idlg,defense-dp", "--out", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    table = out.read_text()
    assert "| `idlg` |" in table and "| `defense-dp` |" in table
    assert "**reproduced**" in table.split("| `idlg` |")[1].split("\n")[0]  # the label, read off the gradient
    assert "**reproduced**" in table.split("| `defense-dp` |")[1].split("\n")[0]  # noise stops DLG
    assert "2 reproduced, 0 partly, 0 not" in r.stdout
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=600)  # from the run store
    assert again.returncode == 0 and "1 of 1 run from the store" in again.stdout


def test_cli_refuses_an_unknown_check_in_one_line():
    r = subprocess.run([sys.executable, "-m", "leakdemo", "fidelity", "--only", "nope"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "unknown check nope" in r.stderr


def test_cli_says_where_its_runs_come_from(monkeypatch, capsys, store_path):
    """The header promised "runs already in the run store are replayed from it" with the store turned off, or
    under --fresh, where every run is computed."""
    import leakdemo.fidelity
    from leakdemo.cli import main
    monkeypatch.setattr(leakdemo.fidelity, "run_check", lambda c, store, fresh: leakdemo.fidelity.Result(c, "0.9"))
    headers = {}
    for name, env, flags in (("store", str(store_path), []), ("fresh", str(store_path), ["--fresh"]),
                             ("off", "off", [])):
        monkeypatch.setenv("LEAKDEMO_STORE", env)
        assert main(["fidelity", "--only", "idlg", *flags]) == 0
        headers[name] = capsys.readouterr().out.splitlines()[0]
    assert headers == {"store": "leakdemo fidelity — 1 check; runs already in the run store are replayed from it",
                       "fresh": "leakdemo fidelity — 1 check; --fresh: every run is computed",
                       "off": "leakdemo fidelity — 1 check; the run store is off (LEAKDEMO_STORE=off): every run is "
                              "computed"}
