"""The Trade-offs page without a browser (AppTest): widgets, validation and the shareable URL."""
import os

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
    assert "17 points (the undefended one included) × 3 seed(s) = 51 runs" in texts(at)
    assert not at.button[0].disabled and at.button[0].label == "Run sweep"
    assert at.query_params["sweep"] == ["sweep-dp-dlg"] or at.query_params["sweep"] == "sweep-dp-dlg"


def test_a_shared_custom_sweep_link_fills_the_widgets():
    at = page(sweep="custom", preset="dlg", defense="prune", vary="prune_ratio=0..0.9:3", seeds="2")
    assert not at.exception and not at.error
    assert at.selectbox(key="t_defense").value == "prune"
    assert at.text_input(key="t_vary").value == "prune_ratio=0..0.9:3"
    assert at.slider(key="t_seeds").value == 2
    assert "4 points (the undefended one included) × 2 seed(s) = 8 runs" in texts(at)


def test_bad_link_values_are_reported_not_fatal():
    at = page(sweep="nope", seeds="99")
    assert not at.exception
    warnings = " ".join(w.value for w in at.warning)
    assert "sweep='nope'" in warnings and "seeds='99'" in warnings
    assert at.selectbox(key="t_sweep").value == "sweep-dp-dlg"


@pytest.mark.parametrize("vary,message", [
    ("dp_sigma=1e-4..1:99", "dp_sigma: the number of points must be an integer in [2, 64], got 99"),
    ("zzz=1..2:3", "zzz: is not a parameter of protocol=fedsgd, attack=dlg, defense=dp-gaussian"),
    ("dp_sigma=1..1e-4:3", "dp_sigma: the range must go from low to high"),
])
def test_a_bad_range_names_the_parameter_and_disables_run(vary, message):
    at = page(sweep="custom", preset="dlg", defense="dp-gaussian", vary="dp_sigma=1e-4..1:3")
    at.text_input(key="t_vary").set_value(vary).run()
    assert not at.exception
    assert any(e.value.startswith(message) for e in at.error), [e.value for e in at.error]
    assert at.button[0].disabled


def test_a_corrupt_store_is_a_message_on_the_page(tmp_path, monkeypatch):
    bad = tmp_path / "runs.sqlite"
    bad.write_text("not a database")
    monkeypatch.setenv("LEAKDEMO_STORE", str(bad))
    at = page()
    assert not at.exception
    assert any("is not a SQLite database" in w.value for w in at.warning)
    assert bad.read_text() == "not a database"
