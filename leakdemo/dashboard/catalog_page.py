"""The Catalog page: what each protocol, attack and defense does, its parameters and its paper."""
from __future__ import annotations

import streamlit as st

from .. import catalog
from ..scenario import presets


def _params_table(params) -> None:
    if not params:
        st.caption("No parameters.")
        return
    rows = [{"parameter": p.name, "default": str(p.default), "allowed": p.allowed(), "what it does": p.help}
            for p in params]
    st.dataframe(rows, hide_index=True, width="stretch")


def main() -> None:
    st.title(":material/menu_book: Catalog")
    st.markdown("Everything the Attack Lab can combine, with the parameters each part takes. "
                "The command line (`python -m leakdemo list`) reads the same catalog.")
    for heading, table in (("Protocols", catalog.PROTOCOLS), ("Attacks", catalog.ATTACKS),
                           ("Defenses", catalog.DEFENSES)):
        st.header(heading)
        for c in table.values():
            with st.expander(f"**{c.title}** (`{c.name}`)", expanded=False):
                st.markdown(c.summary)
                if c.paper:
                    st.caption(f"Paper: {c.paper}")
                if c.knowledge:
                    st.markdown("Assumes the attacker knows: " + "; ".join(c.knowledge) + ".")
                _params_table(c.params)
    st.header("Presets")
    st.dataframe([{"preset": p.name, "title": p.title, "description": p.description} for p in presets().values()],
                 hide_index=True, width="stretch")
