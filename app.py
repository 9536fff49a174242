"""leakdemo dashboard: the Attack Lab (home) and the pages in pages/."""
import os

import streamlit as st

ICON = os.path.join(os.path.dirname(os.path.abspath(__file__)), "assets", "icon.png")  # local: never fetched

st.set_page_config(page_title="leakdemo — Attack Lab", page_icon=ICON, layout="wide",
                   initial_sidebar_state="auto")  # expanded on a laptop, folded on a phone

from leakdemo.dashboard.lab import page as attack_lab  # noqa: E402  (after set_page_config)

PAGES = [
    attack_lab(),
    st.Page("pages/2_Tradeoffs.py", title="Trade-offs", icon=":material/balance:"),
    st.Page("pages/3_Compare.py", title="Compare", icon=":material/compare:"),
    st.Page("pages/4_Present.py", title="Present", icon=":material/present_to_all:"),
    st.Page("pages/1_Catalog.py", title="Catalog", icon=":material/menu_book:"),
]
if st.query_params.get("present") == "1":  # a projector: the showcases full screen, no navigation
    from leakdemo.dashboard.presenter import main as present  # noqa: E402
    shown = st.navigation([st.Page(present, title="Present", icon=":material/present_to_all:", default=True)],
                          position="hidden")
else:
    shown = st.navigation(PAGES)
# the page of this run and of the one before: the presenter tells the browser's Back within it from an arrival
st.session_state["page_before"], st.session_state["page_now"] = st.session_state.get("page_now"), shown.title
shown.run()
