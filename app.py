"""leakdemo dashboard: the Attack Lab (home) and the pages in pages/."""
import streamlit as st

st.set_page_config(page_title="leakdemo — Attack Lab", page_icon=":material/lock_open:", layout="wide",
                   initial_sidebar_state="expanded")

from leakdemo.dashboard.lab import main as attack_lab  # noqa: E402  (after set_page_config)

st.navigation([
    st.Page(attack_lab, title="Attack Lab", icon=":material/science:", default=True),
    st.Page("pages/1_Catalog.py", title="Catalog", icon=":material/menu_book:"),
]).run()
