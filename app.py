"""leakdemo dashboard: the Attack Lab (home) and the pages in pages/."""
import os

import streamlit as st

ICON = os.path.join(os.path.dirname(os.path.abspath(__file__)), "assets", "icon.png")  # local: never fetched

st.set_page_config(page_title="leakdemo — Attack Lab", page_icon=ICON, layout="wide",
                   initial_sidebar_state="expanded")

from leakdemo.dashboard.lab import main as attack_lab  # noqa: E402  (after set_page_config)

st.navigation([
    st.Page(attack_lab, title="Attack Lab", icon=":material/science:", default=True),
    st.Page("pages/2_Tradeoffs.py", title="Trade-offs", icon=":material/balance:"),
    st.Page("pages/1_Catalog.py", title="Catalog", icon=":material/menu_book:"),
]).run()
