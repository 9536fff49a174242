"""leakdemo dashboard — the Attack Lab (home page). Other pages live in pages/."""
import streamlit as st

st.set_page_config(page_title="leakdemo — Attack Lab", page_icon="🔓", layout="wide",
                   initial_sidebar_state="expanded")

from leakdemo.dashboard.lab import main  # noqa: E402  (after set_page_config)

main()
