"""The Catalog page: what each protocol, attack and defense does, its parameters and its paper."""
from __future__ import annotations

import streamlit as st

from .. import catalog
from ..params import number_text
from ..scenario import presets
from ..sweeps import sweeps
from .shared import PAGE_TOP_CSS


def _params_table(params) -> None:
    """Every parameter with its default, range and what it does — the whole text: a dataframe cut "what it
    does" at the column's edge, the part a reader came for."""
    if not params:
        st.caption("No parameters.")
        return
    lines = ["| parameter | default | allowed | what it does |", "|---|---|---|---|"]
    lines += [f"| `{p.name}` | {_cell(str(p.default))} | {_cell(_allowed(p))} | {_cell(p.help)} |" for p in params]
    st.markdown("\n".join(lines))


def _allowed(p) -> str:
    """A range as one unbroken "1 to 5000": the error messages' "an integer in [1, 5000]" wrapped over three
    lines in the table's narrow column (the default beside it, 300 or 1.0, says integer or number)."""
    if p.kind == "choice":
        return ", ".join(str(c) for c in p.choices)  # "one of" took a line of its own
    if p.kind not in ("int", "float") or p.low is None or p.high is None:
        return p.allowed()
    return f"{number_text(p.low)}\u00a0to\u00a0{number_text(p.high)}"  # an en dash lets a line break after it


def _cell(text: str) -> str:
    """A markdown table cell's text as written: no emphasis, links, formulas or cell breaks of its own."""
    for ch in "\\`*_[]$|":
        text = text.replace(ch, "\\" + ch)
    return text.replace("\n", " ")


# Streamlit's tables break inside any word (overflow-wrap: break-word) when a column runs short: a range came
# out over two lines, no-break spaces and all. Words now wrap whole; the long ones are few and short.
# On a phone four columns of whole words ran off the screen (a parameter's description cut at its edge): there
# each row is a card, its name first, then its default and range, then what it does, across the whole width.
TABLE = "[data-testid='stMarkdownContainer'] table"
PARAMS = "[data-testid='stExpanderDetails'] " + TABLE
CSS = f"""<style>
{PAGE_TOP_CSS}
{TABLE} td {{overflow-wrap: normal;}}
@media (max-width: 640px) {{
  {TABLE}, {TABLE} tbody, {TABLE} tr, {TABLE} td {{display: block; width: 100%;}}
  {TABLE} thead {{display: none;}}
  {TABLE} tr {{padding: 0.5rem 0; border-bottom: 1px solid rgba(49, 51, 63, 0.15);}}
  {TABLE} td {{border: none; padding: 0.1rem 0.5rem;}}
  {TABLE} td:first-child {{font-weight: 600;}}
  {PARAMS} td:nth-child(2)::before {{content: "default ";}}
  {PARAMS} td:nth-child(3)::before {{content: "allowed ";}}
  {PARAMS} td:nth-child(2)::before, {PARAMS} td:nth-child(3)::before {{opacity: 0.6;}}
  {PARAMS} td:empty {{display: none;}}
}}
</style>"""


def main() -> None:
    st.markdown(CSS, unsafe_allow_html=True)
    st.title(":material/menu_book: Catalog")
    st.markdown("Everything the Attack Lab can combine, with the parameters each part takes. "
                "The command line reads the same catalog: `python -m leakdemo list`.")
    for heading, table in (("Protocols", catalog.PROTOCOLS), ("Attacks", catalog.ATTACKS),
                           ("Defenses", catalog.DEFENSES)):
        st.header(heading)
        for c in table.values():
            # the code name after a dot: in parentheses, inline code's padding read as "( fedsgd )"
            with st.expander(f"**{c.title}** · `{c.name}`{_works_on(c)}", expanded=False):
                st.markdown(c.summary)
                if c.paper:
                    st.caption(f"Paper: {c.paper}")
                if c.knowledge:
                    st.markdown("Assumes the attacker knows: " + "; ".join(c.knowledge) + ".")
                if table is catalog.PROTOCOLS:
                    st.markdown(_parts_on(c.name))
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


def _works_on(c) -> str:
    """' · on FedSGD, Vertical FL' after an attack's or a defense's name: the protocols it goes with, read
    without opening each one (`list` says them as `[with: fedsgd, vfl]`)."""
    on = getattr(c, "protocols", None)
    if not on:
        return ""
    if set(on) == set(catalog.PROTOCOLS):
        return " · on every protocol"
    return " · on " + ", ".join(catalog.PROTOCOLS[p].title.split(" — ")[0] for p in on)


def _parts_on(protocol: str) -> str:
    """The attacks and defenses that go with a protocol, named in its own entry: an attack's entry said its
    protocols, but a reader who opened FedAvg to see what breaks it had to open all ten attacks to find out."""
    def names(table) -> str:
        return ", ".join(c.title.split(" — ")[0] for c in table.values()
                         if protocol in c.protocols and c.name != "none")
    return f"**Attacks:** {names(catalog.ATTACKS)}  \n**Defenses:** {names(catalog.DEFENSES)}"


def _linked_table(what: str, rows: list[tuple[str, str, str, str]]) -> str:
    """A markdown table whose first column links each name to where it runs: real links, one click away (a
    dataframe's link cells take two clicks and no right-click), and every description in full."""
    lines = [f"| {what} | title | what it shows |", "|---|---|---|"]
    lines += [f"| [**{name}**]({url}) | {_cell(title)} | {_cell(description)} |" for name, url, title, description in rows]
    return "\n".join(lines)
