"""The Catalog page: what each protocol, attack and defense does, its parameters and its paper."""
from __future__ import annotations

import streamlit as st

from .. import catalog
from ..scenario import presets
from ..sweeps import sweeps


def _params_table(params) -> None:
    """Every parameter with its default, range and what it does — the whole text: a dataframe cut "what it
    does" at the column's edge, the part a reader came for."""
    if not params:
        st.caption("No parameters.")
        return
    lines = ["| parameter | default | allowed | what it does |", "|---|---|---|---|"]
    lines += [f"| `{p.name}` | {_cell(str(p.default))} | {_cell(p.allowed())} | {_cell(p.help)} |" for p in params]
    st.markdown("\n".join(lines))


def _cell(text: str) -> str:
    """A markdown table cell's text as written: no emphasis, links, formulas or cell breaks of its own."""
    for ch in "\\`*_[]$|":
        text = text.replace(ch, "\\" + ch)
    return text.replace("\n", " ")


def main() -> None:
    st.title(":material/menu_book: Catalog")
    st.markdown("Everything the Attack Lab can combine, with the parameters each part takes. "
                "The command line reads the same catalog: `python -m leakdemo list`.")
    for heading, table in (("Protocols", catalog.PROTOCOLS), ("Attacks", catalog.ATTACKS),
                           ("Defenses", catalog.DEFENSES)):
        st.header(heading)
        for c in table.values():
            # the code name after a dot: in parentheses, inline code's padding read as "( fedsgd )"
            with st.expander(f"**{c.title}** · `{c.name}`", expanded=False):
                st.markdown(c.summary)
                if c.paper:
                    st.caption(f"Paper: {c.paper}")
                if c.knowledge:
                    st.markdown("Assumes the attacker knows: " + "; ".join(c.knowledge) + ".")
                _params_table(c.params)
    st.header("Presets")
    st.caption("Ready-made scenarios: a preset's name opens it in the Attack Lab (a new tab), ready to run.")
    st.markdown(_linked_table("preset", [(p.name, f"./?preset={p.name}", p.title, p.description)
                                         for p in presets().values()]))
    st.header("Sweeps")
    st.caption("Built-in sweeps of a defense's strength: a sweep's name opens it on the Trade-offs page (a new "
               "tab), drawn at once from the gallery's recording.")
    st.markdown(_linked_table("sweep", [(s.name, f"./Tradeoffs?sweep={s.name}", s.title, s.description)
                                        for s in sweeps().values()]))


def _linked_table(what: str, rows: list[tuple[str, str, str, str]]) -> str:
    """A markdown table whose first column links each name to where it runs: real links, one click away (a
    dataframe's link cells take two clicks and no right-click), and every description in full."""
    lines = [f"| {what} | title | what it shows |", "|---|---|---|"]
    lines += [f"| [**{name}**]({url}) | {_cell(title)} | {_cell(description)} |" for name, url, title, description in rows]
    return "\n".join(lines)
