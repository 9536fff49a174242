"""The Catalog page: every part the Lab combines, and every preset and sweep one click from where it runs."""
import os

from streamlit.testing.v1 import AppTest

from leakdemo import catalog
from leakdemo.scenario import presets
from leakdemo.sweeps import sweeps

PAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pages", "1_Catalog.py")


def test_the_catalog_lists_every_part_and_links_every_preset_and_sweep():
    at = AppTest.from_file(PAGE, default_timeout=60).run()
    assert not at.exception and not at.error
    labels = " ".join(e.label for e in at.expander)
    for table in (catalog.PROTOCOLS, catalog.ATTACKS, catalog.DEFENSES):
        assert all(f"**{table[name].title}** · `{name}`" in labels for name in table)
    assert "(`" not in labels  # inline code's padding inside parentheses read as "( fedsgd )"
    # the protocols an attack or a defense goes with, without opening it
    assert "**DLG — Deep Leakage from Gradients** · `dlg` · on FedSGD, Vertical FL" in labels
    assert "`cafe` · on Vertical FL" in labels and "`none` · on every protocol" in labels
    assert "`fedsgd` · on" not in labels
    # and a protocol names what attacks it and what defends it, without opening every attack
    texts = [m.value for m in at.markdown]
    assert "**Attacks:** DLM, DLM+, AGIC, Simulation (Inverting Gradients on FedAvg)  \n**Defenses:** Gaussian noise " \
           "(DP-style), Laplace noise (DP-style), Magnitude pruning" in texts
    assert sum(t.startswith("**Attacks:** PLI, TBI  \n**Defenses:** Noise on logits") for t in texts) == 3
    tables = [m.value for m in at.markdown if m.value.startswith("| preset |") or m.value.startswith("| sweep |")]
    assert len(tables) == 2
    # every name links to where it runs (the Lab reads ?preset=, the Trade-offs page ?sweep=), description in full
    for name, p in presets().items():
        assert f"| [**{name}**](./?preset={name}) |" in tables[0]
    for name in sweeps():
        assert f"| [**{name}**](./Tradeoffs?sweep={name}) |" in tables[1]
    assert tables[0].count("\n") == len(presets()) + 1 and tables[1].count("\n") == len(sweeps()) + 1
    assert "images in \\[0, 1\\]" in tables[0]  # written as is, never taken for a link


def test_every_parameter_is_described_in_full():
    """The parameters were a dataframe that cut "what it does" at the column's edge on a 1280-px screen: they are
    tables whose every description reads whole, ranges written as they are."""
    from leakdemo.dashboard.catalog_page import _allowed, _cell
    at = AppTest.from_file(PAGE, default_timeout=60).run()
    tables = [m.value for m in at.markdown if m.value.startswith("| parameter |")]
    parts = [c for t in (catalog.PROTOCOLS, catalog.ATTACKS, catalog.DEFENSES) for c in t.values() if c.params]
    assert len(tables) == len(parts) and not at.dataframe
    for table, c in zip(tables, parts):
        for p in c.params:
            assert f"| `{p.name}` | {_cell(str(p.default))} | {_cell(_allowed(p))} | {_cell(p.help)} |" in table
    # DS-FL's views: a range in one unbroken piece (the error messages' "an integer in [4, 64]" took three lines)
    assert any("| 16 | 4\u00a0to\u00a064 |" in t for t in tables)
    assert any("| robust | robust, original |" in t for t in tables)  # choices listed
